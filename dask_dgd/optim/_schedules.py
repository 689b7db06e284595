"""Learning-rate schedules: frozen dataclasses mapping a step count to a step size.

A schedule is data, never a closure: it has a repr, compares equal field by field, pickles,
and can be shipped to a worker or written into a checkpoint.
"""

import dataclasses
import math
from numbers import Real
from typing import ClassVar

from ..exceptions import ParameterError
from ._checks import check_int, check_interval, check_positive

__all__ = ["Constant", "CosineDecay", "InverseScaling", "InverseTime", "Schedule", "StepDecay", "as_schedule"]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Base class of learning-rate schedules.

    Subclasses implement ``__call__(count) -> float`` (the learning rate of the update with
    index ``count``, counting from 0) and name the field that :meth:`scale` multiplies in
    the class attribute ``_scaled_field``: the learning rate that the schedule scales,
    a finite number > 0, which ``__post_init__`` checks (subclasses call it first).
    """

    _scaled_field: ClassVar[str] = "init_value"

    def __post_init__(self):
        name = self._scaled_field
        if name not in {f.name for f in dataclasses.fields(self)}:
            return  # a user's schedule without the field: its own rules
        object.__setattr__(self, name, check_positive(name, getattr(self, name)))

    def __call__(self, count):
        raise NotImplementedError

    def scale(self, factor):
        """A copy of this schedule whose every value is multiplied by ``factor``.

        Parameters
        ----------
        factor : float
            A finite number > 0, e.g. 0.5 to halve the step after a divergence.

        Returns
        -------
        Schedule
            A schedule of the same class.
        """
        factor = check_positive("factor", factor)
        value = getattr(self, self._scaled_field)
        return dataclasses.replace(self, **{self._scaled_field: value * factor})


@dataclasses.dataclass(frozen=True)
class Constant(Schedule):
    """The same learning rate at every step.

    Parameters
    ----------
    value : float
        The learning rate, a finite number > 0.

    Notes
    -----
    :math:`\\eta_t = \\text{value}`.

    Examples
    --------
    >>> from dask_dgd.optim import Constant
    >>> Constant(0.1)(1000)
    0.1
    """

    value: float
    _scaled_field: ClassVar[str] = "value"

    def __call__(self, count):
        return self.value


@dataclasses.dataclass(frozen=True)
class InverseScaling(Schedule):
    """Inverse scaling, scikit-learn's ``learning_rate="invscaling"``.

    Parameters
    ----------
    init_value : float
        The learning rate at count 0, a finite number > 0.
    power_t : float, default=0.25
        The exponent, in [0, inf).

    Notes
    -----
    :math:`\\eta_t = \\eta_0 / (t + 1)^{p}` with :math:`p` = ``power_t``.

    Examples
    --------
    >>> from dask_dgd.optim import InverseScaling
    >>> InverseScaling(1.0, power_t=0.5)(3)
    0.5
    """

    init_value: float
    power_t: float = 0.25

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self, "power_t", check_interval("power_t", self.power_t, 0, math.inf)
        )

    def __call__(self, count):
        return self.init_value / (int(count) + 1) ** self.power_t


@dataclasses.dataclass(frozen=True)
class InverseTime(Schedule):
    """Inverse time decay, the form of scikit-learn's ``learning_rate="optimal"``.

    Parameters
    ----------
    init_value : float
        The learning rate at count 0, a finite number > 0.
    offset : float
        The count at which the rate has halved, a finite number > 0.

    Notes
    -----
    :math:`\\eta_t = \\eta_0 / (1 + t / t_0)` with :math:`t_0` = ``offset``.
    scikit-learn's ``"optimal"`` rate for an L2 strength :math:`\\alpha`,
    :math:`1 / (\\alpha (t_0 + t))`, is ``InverseTime(1 / (alpha * t0), t0)``: with
    it, per-row SGD on an :math:`\\alpha`-strongly convex objective approaches the
    optimum at the rate :math:`O(1/t)` (Bottou, "Stochastic gradient descent tricks",
    2012).  ``solver="online"`` with ``optimizer="sgd"`` and ``learning_rate="auto"``
    uses it whenever the L2 penalty is positive.

    Examples
    --------
    >>> from dask_dgd.optim import InverseTime
    >>> s = InverseTime(1.0, offset=10)
    >>> s(0), s(10), s(30)
    (1.0, 0.5, 0.25)
    """

    init_value: float
    offset: float

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "offset", check_positive("offset", self.offset))

    def __call__(self, count):
        return self.init_value / (1.0 + int(count) / self.offset)


@dataclasses.dataclass(frozen=True)
class CosineDecay(Schedule):
    """Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps``.

    Parameters
    ----------
    init_value : float
        The learning rate at count 0, a finite number > 0.
    decay_steps : int
        Number of steps over which to decay, >= 1; the rate stays at its final value after.
    alpha : float, default=0.0
        The final rate as a fraction of ``init_value``, in [0, 1].

    Notes
    -----
    .. math::

        \\eta_t = \\eta_0 \\left((1 - \\alpha)\\,
        \\tfrac12 \\left(1 + \\cos\\frac{\\pi \\min(t, T)}{T}\\right) + \\alpha\\right)

    with :math:`T` = ``decay_steps`` (optax's ``cosine_decay_schedule``).

    Examples
    --------
    >>> from dask_dgd.optim import CosineDecay
    >>> s = CosineDecay(1.0, decay_steps=10, alpha=0.1)
    >>> s(0), round(s(5), 12), s(10), s(20)
    (1.0, 0.55, 0.1, 0.1)
    """

    init_value: float
    decay_steps: int
    alpha: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "decay_steps", check_int("decay_steps", self.decay_steps, 1))
        object.__setattr__(self, "alpha", check_interval("alpha", self.alpha, 0, 1, closed="both"))

    def __call__(self, count):
        fraction = min(int(count), self.decay_steps) / self.decay_steps
        cosine = 0.5 * (1.0 + math.cos(math.pi * fraction))
        return self.init_value * ((1.0 - self.alpha) * cosine + self.alpha)


@dataclasses.dataclass(frozen=True)
class StepDecay(Schedule):
    """Multiply the learning rate by ``gamma`` every ``step_size`` steps.

    Parameters
    ----------
    init_value : float
        The learning rate at count 0, a finite number > 0.
    step_size : int
        Number of steps between decays, >= 1.
    gamma : float, default=0.1
        The decay factor, in (0, 1].

    Notes
    -----
    :math:`\\eta_t = \\eta_0\\, \\gamma^{\\lfloor t / s \\rfloor}` with :math:`s` = ``step_size``
    (PyTorch's ``StepLR``).

    Examples
    --------
    >>> from dask_dgd.optim import StepDecay
    >>> s = StepDecay(1.0, step_size=10, gamma=0.5)
    >>> s(9), s(10), s(25)
    (1.0, 0.5, 0.25)
    """

    init_value: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "step_size", check_int("step_size", self.step_size, 1))
        gamma = check_interval("gamma", self.gamma, 0, 1, closed="right")
        object.__setattr__(self, "gamma", gamma)

    def __call__(self, count):
        return self.init_value * self.gamma ** (int(count) // self.step_size)


def as_schedule(learning_rate):
    """A :class:`Schedule` for a learning rate given as a number or a schedule.

    Parameters
    ----------
    learning_rate : float or Schedule
        A finite number > 0 becomes :class:`Constant`; a schedule is returned as is.

    Returns
    -------
    Schedule

    Raises
    ------
    ParameterError
        For anything else (a string, a non-positive or non-finite number, a callable that
        is not a :class:`Schedule`).

    Examples
    --------
    >>> from dask_dgd.optim import as_schedule
    >>> as_schedule(0.1)
    Constant(value=0.1)
    """
    if isinstance(learning_rate, Schedule):
        return learning_rate
    return Constant(check_learning_rate(learning_rate))


def check_learning_rate(learning_rate):
    """``learning_rate`` as a float > 0, or the schedule itself; ParameterError otherwise."""
    if isinstance(learning_rate, Schedule):
        return learning_rate
    if (
        isinstance(learning_rate, Real)
        and not isinstance(learning_rate, bool)
        and math.isfinite(learning_rate)
        and learning_rate > 0
    ):
        return float(learning_rate)
    raise ParameterError(
        f"learning_rate must be a positive float or a Schedule; got {learning_rate!r}"
    )

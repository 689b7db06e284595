"""First-order optimizers: SGD (momentum, Nesterov), Adam, AdamW, RMSprop, Adagrad.

Every optimizer is a frozen dataclass with pure ``init``/``update`` methods.  All array
work goes through the array-API namespace of ``params`` (NumPy, CuPy, ...), and every
operation is out of place, so the inputs are never modified.
"""

import dataclasses
from typing import Any, ClassVar, NamedTuple

from .._backend import get_namespace
from ..exceptions import ParameterError
from ._base import FirstOrderOptimizer, check_decay_mask
from ._checks import check_bool, check_interval, check_positive
from ._schedules import Constant, InverseScaling, InverseTime, Schedule

#: the schedules the compiled per-row rules of ``solver="online"`` evaluate themselves
ONLINE_SCHEDULES = (Constant, InverseScaling, InverseTime)

__all__ = ["SGD", "Adagrad", "AdagradState", "Adam", "AdamState", "AdamW", "NormalizedAdagrad", "RMSprop",
           "RMSpropState", "SGDState", "adagrad", "adam", "adamw", "rmsprop", "sgd"]

_INF = float("inf")


def _set(obj, name, value):
    object.__setattr__(obj, name, value)


# --------------------------------------------------------------------------- SGD


class SGDState(NamedTuple):
    """State of :class:`SGD`: the step count and the momentum buffer."""

    count: int
    momentum_buffer: Any


@dataclasses.dataclass(frozen=True)
class SGD(FirstOrderOptimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum.

    Parameters
    ----------
    learning_rate : float or Schedule, default=0.01
        The step size :math:`\\eta_t`, a finite number > 0 or a schedule of the step count.
    momentum : float, default=0.0
        The momentum :math:`\\mu`, in [0, 1).
    nesterov : bool, default=False
        Use Nesterov momentum; requires ``momentum > 0``.

    Notes
    -----
    PyTorch's formulation (no dampening), with buffer :math:`b_0 = 0`:

    .. math::

        b_{t+1} = \\mu b_t + g_t, \\qquad
        s_t = \\begin{cases} g_t + \\mu b_{t+1} & \\text{Nesterov} \\\\
                             b_{t+1} & \\text{otherwise} \\end{cases}, \\qquad
        \\Delta_t = -\\eta_t s_t.

    With ``momentum=0`` this is plain gradient descent, :math:`\\Delta_t = -\\eta_t g_t`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import SGD
    >>> opt = SGD(learning_rate=0.1, momentum=0.9)
    >>> params = np.array([1.0, -2.0])
    >>> state = opt.init(params)
    >>> updates, state = opt.update(np.array([0.5, 0.5]), state, params)
    >>> params + updates
    array([ 0.95, -2.05])
    >>> state.count
    1
    """

    learning_rate: float | Schedule = 0.01
    momentum: float = 0.0
    nesterov: bool = False

    adaptive: ClassVar[bool] = False

    @property
    def descent_method(self):
        """Plain gradient descent (no momentum) always steps downhill."""
        return self.momentum == 0

    @property
    def plain_step(self):
        """Without momentum, plain gradient steps (which alone make the L1 proximal step exact)."""
        return self.momentum == 0

    @property
    def online_rule(self):
        """"sgd" without momentum and with a constant, inverse-scaling or inverse-time learning rate."""
        lr = self.learning_rate
        ok = not isinstance(lr, Schedule) or isinstance(lr, ONLINE_SCHEDULES)
        return "sgd" if self.momentum == 0 and ok else None

    def __post_init__(self):
        super().__post_init__()
        _set(self, "momentum", check_interval("momentum", self.momentum, 0, 1))
        _set(self, "nesterov", check_bool("nesterov", self.nesterov))
        if self.nesterov and self.momentum == 0:
            raise ParameterError(
                "nesterov=True requires momentum in (0, 1); got momentum=0.0"
            )

    def init(self, params):
        """The initial state: count 0 and a zero momentum buffer like ``params``."""
        xp = get_namespace(params)
        return SGDState(count=0, momentum_buffer=xp.zeros_like(params))

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state.

        ``decay_mask`` has no effect: SGD has no weight decay.  It is accepted so that
        every optimizer can be called the same way.
        """
        lr = self.learning_rate_at(state.count)
        buffer = self.momentum * state.momentum_buffer + grads
        step = grads + self.momentum * buffer if self.nesterov else buffer
        return -lr * step, SGDState(count=state.count + 1, momentum_buffer=buffer)


def sgd(learning_rate=0.01, momentum=0.0, nesterov=False):
    """Build an :class:`SGD` optimizer; the arguments are those of :class:`SGD`.

    Examples
    --------
    >>> from dask_dgd.optim import sgd
    >>> sgd(0.1, momentum=0.9)
    SGD(learning_rate=0.1, momentum=0.9, nesterov=False)
    """
    return SGD(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov)


# --------------------------------------------------------------------------- Adam, AdamW


class AdamState(NamedTuple):
    """State of :class:`Adam` and :class:`AdamW`: step count, first and second moments."""

    count: int
    mu: Any
    nu: Any


@dataclasses.dataclass(frozen=True)
class Adam(FirstOrderOptimizer):
    """Adam: adaptive moment estimation with bias correction.

    Parameters
    ----------
    learning_rate : float or Schedule, default=1e-3
        The step size :math:`\\eta_t`, a finite number > 0 or a schedule of the step count.
    b1 : float, default=0.9
        Decay rate of the first moment, in [0, 1).
    b2 : float, default=0.999
        Decay rate of the second moment, in [0, 1).
    eps : float, default=1e-8
        Added to the denominator for stability, a finite number > 0.

    Notes
    -----
    With :math:`m_0 = v_0 = 0` and :math:`t` the number of updates including this one:

    .. math::

        m_t = \\beta_1 m_{t-1} + (1 - \\beta_1) g, \\quad
        v_t = \\beta_2 v_{t-1} + (1 - \\beta_2) g^2, \\quad
        \\hat m = \\frac{m_t}{1 - \\beta_1^t}, \\quad \\hat v = \\frac{v_t}{1 - \\beta_2^t},

    .. math::

        \\Delta_t = -\\eta_t \\frac{\\hat m}{\\sqrt{\\hat v} + \\epsilon}.

    References
    ----------
    Kingma, D. P. and Ba, J. (2015). Adam: A Method for Stochastic Optimization. ICLR.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import Adam
    >>> opt = Adam(learning_rate=0.1)
    >>> params = np.array([1.0, -2.0])
    >>> updates, state = opt.update(np.array([0.5, -3.0]), opt.init(params), params)
    >>> params + updates  # the first step moves each entry by about lr * sign(g)
    array([ 0.9, -1.9])
    """

    learning_rate: float | Schedule = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        super().__post_init__()
        _set(self, "b1", check_interval("b1", self.b1, 0, 1))
        _set(self, "b2", check_interval("b2", self.b2, 0, 1))
        _set(self, "eps", check_positive("eps", self.eps))

    def init(self, params):
        """The initial state: count 0 and zero moments like ``params``."""
        xp = get_namespace(params)
        return AdamState(count=0, mu=xp.zeros_like(params), nu=xp.zeros_like(params))

    def _direction(self, grads, state):
        """The bias-corrected direction ``mhat / (sqrt(vhat) + eps)`` and the new state
        (the step of Adam and of AdamW before its decay)."""
        xp = get_namespace(grads)
        t = state.count + 1
        mu = self.b1 * state.mu + (1.0 - self.b1) * grads
        nu = self.b2 * state.nu + (1.0 - self.b2) * (grads * grads)
        mu_hat = mu / (1.0 - self.b1**t)
        nu_hat = nu / (1.0 - self.b2**t)
        direction = mu_hat / (xp.sqrt(nu_hat) + self.eps)
        return direction, AdamState(count=t, mu=mu, nu=nu)

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state.

        ``decay_mask`` has no effect: Adam has no weight decay (see :class:`AdamW`).  It is
        accepted so that every optimizer can be called the same way.
        """
        lr = self.learning_rate_at(state.count)
        direction, new_state = self._direction(grads, state)
        return -lr * direction, new_state


@dataclasses.dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay.

    Parameters
    ----------
    learning_rate, b1, b2, eps
        As in :class:`Adam`, with the same defaults.
    weight_decay : float, default=1e-2
        The decay coefficient :math:`\\lambda`, in [0, inf).

    Notes
    -----
    The moments are those of :class:`Adam`; the decay is added to the step rather than
    to the gradient, so it is not rescaled by :math:`\\hat v` (optax's ``adamw``):

    .. math::

        \\Delta_t = -\\eta_t \\left(\\frac{\\hat m}{\\sqrt{\\hat v} + \\epsilon}
                    + \\lambda\\, M \\odot \\theta\\right),

    where :math:`M` is ``decay_mask`` (a bool array like ``params``) given to
    :meth:`update`, or all ones when it is ``None``.  Pass ``False`` for the entries
    that must not decay, such as an intercept.

    References
    ----------
    Loshchilov, I. and Hutter, F. (2019). Decoupled Weight Decay Regularization. ICLR.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import AdamW
    >>> opt = AdamW(learning_rate=0.1, weight_decay=0.5)
    >>> params = np.array([1.0, -2.0])
    >>> grads = np.array([0.0, 0.0])
    >>> mask = np.array([True, False])  # do not decay the second entry
    >>> updates, state = opt.update(grads, opt.init(params), params, decay_mask=mask)
    >>> params + updates
    array([ 0.95, -2.  ])
    """

    weight_decay: float = 1e-2

    def __post_init__(self):
        super().__post_init__()
        _set(self, "weight_decay", check_interval("weight_decay", self.weight_decay, 0, _INF))

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state.

        Parameters
        ----------
        grads, params : array
            1-D arrays of the same shape and namespace.
        state : AdamState
            From :meth:`init` or the previous :meth:`update`.
        decay_mask : bool array or None, default=None
            Where True, ``params`` decay; ``None`` decays every entry.
        """
        lr = self.learning_rate_at(state.count)
        direction, new_state = self._direction(grads, state)
        decayed = params
        if decay_mask is not None:
            decayed = params * check_decay_mask(get_namespace(params), decay_mask, params)
        return -lr * (direction + self.weight_decay * decayed), new_state


def adam(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """Build an :class:`Adam` optimizer; the arguments are those of :class:`Adam`.

    Examples
    --------
    >>> from dask_dgd.optim import adam
    >>> adam(0.01)
    Adam(learning_rate=0.01, b1=0.9, b2=0.999, eps=1e-08)
    """
    return Adam(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps)


def adamw(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2):
    """Build an :class:`AdamW` optimizer; the arguments are those of :class:`AdamW`.

    Examples
    --------
    >>> from dask_dgd.optim import adamw
    >>> adamw(0.01, weight_decay=0.1)
    AdamW(learning_rate=0.01, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.1)
    """
    return AdamW(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


# --------------------------------------------------------------------------- RMSprop


class RMSpropState(NamedTuple):
    """State of :class:`RMSprop`: step count, mean square, mean gradient (used only when
    ``centered``) and momentum buffer (used only when ``momentum > 0``)."""

    count: int
    nu: Any
    mean_grad: Any
    momentum_buffer: Any


@dataclasses.dataclass(frozen=True)
class RMSprop(FirstOrderOptimizer):
    """RMSprop: scale the gradient by a running root mean square.

    Parameters
    ----------
    learning_rate : float or Schedule, default=1e-2
        The step size :math:`\\eta_t`, a finite number > 0 or a schedule of the step count.
    decay : float, default=0.9
        Decay rate :math:`\\rho` of the running averages, in [0, 1).
    eps : float, default=1e-8
        Added to the root mean square, a finite number > 0.
    momentum : float, default=0.0
        The momentum :math:`\\mu`, in [0, 1).
    centered : bool, default=False
        Divide by the running standard deviation instead of the root mean square.

    Notes
    -----
    With :math:`\\nu_0 = \\bar g_0 = b_0 = 0`:

    .. math::

        \\nu_t = \\rho \\nu_{t-1} + (1 - \\rho) g^2, \\qquad
        \\bar g_t = \\rho \\bar g_{t-1} + (1 - \\rho) g \\quad (\\text{centered only}),

    .. math::

        s_t = \\frac{g}{\\sqrt{\\nu_t - \\bar g_t^2} + \\epsilon}, \\qquad
        b_t = \\mu b_{t-1} + s_t, \\qquad \\Delta_t = -\\eta_t b_t,

    where :math:`\\bar g_t = 0` unless ``centered``.  :math:`\\epsilon` is added *outside*
    the square root, as in PyTorch (optax adds it inside); the momentum buffer accumulates
    the unscaled step and the learning rate multiplies it afterwards, also as in PyTorch,
    so that a schedule changes the step at once rather than through the buffer.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import RMSprop
    >>> opt = RMSprop(learning_rate=0.1, decay=0.75)
    >>> params = np.array([1.0, -2.0])
    >>> updates, state = opt.update(np.array([2.0, -4.0]), opt.init(params), params)
    >>> np.round(updates, 6)  # g / sqrt(0.25 g**2) = 2 sign(g)
    array([-0.2,  0.2])
    """

    learning_rate: float | Schedule = 1e-2
    decay: float = 0.9
    eps: float = 1e-8
    momentum: float = 0.0
    centered: bool = False

    @property
    def descent_method(self):
        """Without momentum, a positive diagonal scaling of minus the gradient."""
        return self.momentum == 0

    def __post_init__(self):
        super().__post_init__()
        _set(self, "decay", check_interval("decay", self.decay, 0, 1))
        _set(self, "eps", check_positive("eps", self.eps))
        _set(self, "momentum", check_interval("momentum", self.momentum, 0, 1))
        _set(self, "centered", check_bool("centered", self.centered))

    def init(self, params):
        """The initial state: count 0 and zero averages and buffer like ``params``."""
        xp = get_namespace(params)
        return RMSpropState(
            count=0,
            nu=xp.zeros_like(params),
            mean_grad=xp.zeros_like(params),
            momentum_buffer=xp.zeros_like(params),
        )

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state.

        ``decay_mask`` has no effect: RMSprop has no weight decay.  It is accepted so that
        every optimizer can be called the same way.
        """
        xp = get_namespace(grads)
        lr = self.learning_rate_at(state.count)
        nu = self.decay * state.nu + (1.0 - self.decay) * (grads * grads)
        mean_grad = state.mean_grad
        if self.centered:
            mean_grad = self.decay * mean_grad + (1.0 - self.decay) * grads
            # nu >= mean_grad**2 in exact arithmetic; clip rounding error below zero.
            rms = xp.sqrt(xp.clip(nu - mean_grad * mean_grad, min=0.0))
        else:
            rms = xp.sqrt(nu)
        step = grads / (rms + self.eps)
        buffer = state.momentum_buffer
        if self.momentum > 0:
            step = buffer = self.momentum * buffer + step
        new_state = RMSpropState(
            count=state.count + 1, nu=nu, mean_grad=mean_grad, momentum_buffer=buffer
        )
        return -lr * step, new_state


def rmsprop(learning_rate=1e-2, decay=0.9, eps=1e-8, momentum=0.0, centered=False):
    """Build an :class:`RMSprop` optimizer; the arguments are those of :class:`RMSprop`.

    Examples
    --------
    >>> from dask_dgd.optim import rmsprop
    >>> rmsprop(0.01, centered=True)
    RMSprop(learning_rate=0.01, decay=0.9, eps=1e-08, momentum=0.0, centered=True)
    """
    return RMSprop(
        learning_rate=learning_rate, decay=decay, eps=eps, momentum=momentum, centered=centered
    )


# --------------------------------------------------------------------------- Adagrad


class AdagradState(NamedTuple):
    """State of :class:`Adagrad`: step count and the sum of squared gradients."""

    count: int
    sum_of_squares: Any


@dataclasses.dataclass(frozen=True)
class Adagrad(FirstOrderOptimizer):
    """Adagrad: scale each coordinate by the root of its summed squared gradients.

    Parameters
    ----------
    learning_rate : float or Schedule, default=0.1
        The step size :math:`\\eta_t`, a finite number > 0 or a schedule of the step count.
    initial_accumulator_value : float, default=0.1
        The starting value :math:`a_0` of every accumulator, in [0, inf).
    eps : float, default=1e-7
        Added to the root of the accumulator, a finite number > 0.

    Notes
    -----
    .. math::

        a_t = a_{t-1} + g^2, \\qquad
        \\Delta_t = -\\eta_t \\frac{g}{\\sqrt{a_t} + \\epsilon}.

    References
    ----------
    Duchi, J., Hazan, E. and Singer, Y. (2011). Adaptive Subgradient Methods for Online
    Learning and Stochastic Optimization. JMLR 12.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import Adagrad
    >>> opt = Adagrad(learning_rate=0.1, initial_accumulator_value=0.0)
    >>> params = np.array([1.0, -2.0])
    >>> updates, state = opt.update(np.array([3.0, -4.0]), opt.init(params), params)
    >>> np.round(updates, 6), state.sum_of_squares
    (array([-0.1,  0.1]), array([ 9., 16.]))
    """

    learning_rate: float | Schedule = 0.1
    initial_accumulator_value: float = 0.1
    eps: float = 1e-7

    @property
    def descent_method(self):
        """Always a positive diagonal scaling of minus the gradient."""
        return True

    @property
    def online_rule(self):
        """"adagrad" with a constant, inverse-scaling or inverse-time learning rate."""
        lr = self.learning_rate
        return "adagrad" if not isinstance(lr, Schedule) or isinstance(lr, ONLINE_SCHEDULES) else None

    def __post_init__(self):
        super().__post_init__()
        name = "initial_accumulator_value"
        _set(self, name, check_interval(name, self.initial_accumulator_value, 0, _INF))
        _set(self, "eps", check_positive("eps", self.eps))

    def init(self, params):
        """The initial state: count 0 and accumulators at ``initial_accumulator_value``."""
        xp = get_namespace(params)
        return AdagradState(
            count=0, sum_of_squares=xp.full_like(params, self.initial_accumulator_value)
        )

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state.

        ``decay_mask`` has no effect: Adagrad has no weight decay.  It is accepted so that
        every optimizer can be called the same way.
        """
        xp = get_namespace(grads)
        lr = self.learning_rate_at(state.count)
        sum_of_squares = state.sum_of_squares + grads * grads
        updates = -lr * grads / (xp.sqrt(sum_of_squares) + self.eps)
        return updates, AdagradState(count=state.count + 1, sum_of_squares=sum_of_squares)


def adagrad(learning_rate=0.1, initial_accumulator_value=0.1, eps=1e-7):
    """Build an :class:`Adagrad` optimizer; the arguments are those of :class:`Adagrad`.

    Examples
    --------
    >>> from dask_dgd.optim import adagrad
    >>> adagrad(0.5)
    Adagrad(learning_rate=0.5, initial_accumulator_value=0.1, eps=1e-07)
    """
    return Adagrad(
        learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value, eps=eps
    )


# --------------------------------------------------------------------------- NormalizedAdagrad


@dataclasses.dataclass(frozen=True)
class NormalizedAdagrad(FirstOrderOptimizer):
    """The normalized adaptive rule of ``solver="online"`` (Vowpal Wabbit's default).

    Each feature's step is scaled by the largest ``|x|`` seen in that feature and by
    its AdaGrad accumulator, and all steps by ``sqrt(W / N)`` (``W`` the weight seen,
    ``N`` the summed squared scaled row norms), so the step does not depend on the
    features' units.  It needs each row's features, which a dense
    ``update(grads, ...)`` does not see: it runs only in the compiled passes of
    ``solver="online"``, and every other solver refuses it.

    Parameters
    ----------
    learning_rate : float or Schedule, default=0.5
        The base step :math:`\\eta_t` (Vowpal Wabbit's ``-l`` default), a finite number > 0,
        or a :class:`~dask_dgd.optim.Constant`, :class:`~dask_dgd.optim.InverseScaling` or
        :class:`~dask_dgd.optim.InverseTime` schedule of the update count.

    Notes
    -----
    For row :math:`x` with gradient :math:`g` of its loss in the linear predictor, and
    entry :math:`j`: :math:`s_j = \\max |x_j|`, :math:`G_j \\mathrel{+}= (g x_j)^2`,

    .. math::

        w_j \\leftarrow w_j - \\eta_t \\sqrt{W / N} \\, \\frac{g x_j}{s_j \\sqrt{G_j}},
        \\qquad N \\mathrel{+}= \\textstyle\\sum_j (x_j / s_j)^2.

    When a feature's scale grows, its weight is multiplied by
    :math:`(s_j^{old} / s_j^{new})^2`.

    References
    ----------
    Ross, S., Mineiro, P. and Langford, J. (2013). Normalized Online Learning. UAI.

    Examples
    --------
    >>> from dask_dgd.optim import NormalizedAdagrad
    >>> NormalizedAdagrad().online_rule
    'normalized'
    """

    learning_rate: float | Schedule = 0.5
    online_only: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        lr = self.learning_rate
        if isinstance(lr, Schedule) and not isinstance(lr, ONLINE_SCHEDULES):
            raise ParameterError(
                "NormalizedAdagrad takes a float, Constant, InverseScaling or InverseTime learning rate; "
                f"got {type(lr).__name__}"
            )

    @property
    def descent_method(self):
        """A positive diagonal scaling of minus the gradient."""
        return True

    @property
    def online_rule(self):
        """Always "normalized"."""
        return "normalized"

    def init(self, params):
        raise ParameterError(_ONLINE_ONLY)

    def update(self, grads, state, params, *, decay_mask=None):
        raise ParameterError(_ONLINE_ONLY)


_ONLINE_ONLY = ("NormalizedAdagrad runs only in solver='online' (its per-feature scales need each row's features); "
                "use optimizer='adagrad' with other solvers")

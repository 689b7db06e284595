"""The base class of first-order optimizers."""

import dataclasses
from typing import ClassVar

from ..exceptions import ParameterError
from ._checks import check_positive
from ._schedules import Schedule, check_learning_rate

__all__ = ["FirstOrderOptimizer"]


@dataclasses.dataclass(frozen=True)
class FirstOrderOptimizer:
    """Base class of the optax-style first-order optimizers.

    A subclass is a frozen dataclass with a ``learning_rate`` field (a float or a
    :class:`~dask_dgd.optim.Schedule`) and implements ``init(params) -> state`` and
    ``update(grads, state, params, *, decay_mask=None) -> (updates, state)``.  The state
    is a ``NamedTuple`` whose first field, ``count``, is the number of updates applied so
    far (a Python int); its other fields are arrays of the namespace of ``params``.

    Subclasses call ``super().__post_init__()``, which validates and normalises the
    learning rate.

    Traits (asked by the engine instead of testing types):

    - ``full_batch_only``: needs exact full-batch gradients (False for all of these);
    - ``adaptive``: the first update moves each coordinate by about the learning rate,
      whatever the gradient's scale (Adam, AdamW, RMSprop, Adagrad), so an automatic
      learning rate is a distance, not the inverse of a curvature;
    - :attr:`descent_method`: every update is a positive diagonal scaling of minus the
      gradient, so a short enough full-batch step always lowers the objective;
    - :attr:`plain_step`: the update is minus the learning rate times the gradient (no
      momentum, no adaptive scaling): gradient compression's momentum correction and
      EF21 feedback assume it;
    - :attr:`proximal_exact`: the update is a plain gradient step, the only one for
      which the L1 penalty's proximal step gives the exact lasso solution;
    - :attr:`online_rule`: the per-row rule ``solver="online"`` runs it as, in its
      compiled passes ("sgd", "adagrad", "normalized"; None: it cannot);
    - ``online_only``: it runs only in those passes (its rule needs what a dense
      ``update(grads, ...)`` cannot see), so every other solver refuses it.
    """

    full_batch_only: ClassVar[bool] = False
    adaptive: ClassVar[bool] = True
    online_only: ClassVar[bool] = False

    def __post_init__(self):
        object.__setattr__(self, "learning_rate", check_learning_rate(self.learning_rate))

    def init(self, params):
        """The initial state for the 1-D parameter vector ``params``."""
        raise NotImplementedError

    def update(self, grads, state, params, *, decay_mask=None):
        """The updates to add to ``params`` and the new state; inputs are not modified."""
        raise NotImplementedError

    @property
    def descent_method(self):
        """Whether every update points downhill (a positive diagonal scaling of minus the
        gradient): an increase of the full-batch objective then means the step was too
        long.  Momentum methods, Adam and AdamW are legitimately non-monotone."""
        return False

    @property
    def plain_step(self):
        """Whether the update is minus the learning rate times the gradient (no momentum,
        no adaptive scaling)."""
        return False

    @property
    def proximal_exact(self):
        """Whether a proximal step after the update is exact (plain gradient steps only)."""
        return self.plain_step

    @property
    def online_rule(self):
        """The per-row rule of ``solver="online"`` this optimizer runs as (None: none)."""
        return None

    def current_learning_rate(self, state):
        """The learning rate that the next update (number ``state.count``) will use.

        Parameters
        ----------
        state : NamedTuple
            A state returned by :meth:`init` or :meth:`update`.

        Returns
        -------
        float
        """
        return self.learning_rate_at(state.count)

    def with_learning_rate(self, learning_rate):
        """A copy of this optimizer with another learning rate (a float or a Schedule)."""
        return dataclasses.replace(self, learning_rate=learning_rate)

    def scale_learning_rate(self, factor):
        """A copy whose learning rate (a float or every value of a schedule) is multiplied
        by ``factor``, a finite number > 0, e.g. 0.5 to halve the step after divergence."""
        factor = check_positive("factor", factor)
        if isinstance(self.learning_rate, Schedule):
            return self.with_learning_rate(self.learning_rate.scale(factor))
        return self.with_learning_rate(self.learning_rate * factor)

    def learning_rate_at(self, count):
        """The learning rate of update number ``count`` (0 is the first)."""
        if isinstance(self.learning_rate, Schedule):
            return float(self.learning_rate(count))
        return self.learning_rate


def check_decay_mask(xp, decay_mask, params):
    """``decay_mask`` as a float 0/1 array in the namespace and dtype of ``params``."""
    mask = xp.asarray(decay_mask)
    if mask.dtype != xp.bool or mask.shape != params.shape:
        raise ParameterError(
            f"decay_mask must be a bool array of shape {params.shape}; "
            f"got dtype {mask.dtype} and shape {mask.shape}"
        )
    return xp.astype(mask, params.dtype)

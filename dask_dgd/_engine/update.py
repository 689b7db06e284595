"""The update rule and the divergence guard: written once, used by every mode.

:class:`UpdateRule` (optimizer step, decoupled weight decay mask, proximal step of the
L1 penalty) moves parameters along a gradient: on the driver in synchronous training,
in each group during a local SGD round, in the parameter server of asynchronous
training, and on the workers for a model's local parameters (matrix factorization's
user factors).  :class:`Guard` decides when a step diverged and what to do about it:
back off (restore the last good parameters, halve the learning rate with
:func:`halved`) or raise :class:`~dask_dgd.exceptions.DivergenceError` with a message
naming the step, the loss and the remedy.  Every mode backs off through it: the
synchronous solvers, local SGD, the parameter server of asynchronous training and the
coordinator of the sharded owners (which report to it and follow its halved
optimizer).  This module imports no Dask: the server and the groups use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import DivergenceError
from ..optim._linesearch import no_increase

if TYPE_CHECKING:
    from ..optim import FirstOrderOptimizer

__all__ = [
    "BACKOFF_FACTOR",
    "BATCH_EXPLOSION_FACTOR",
    "EXPLOSION_FACTOR",
    "MAX_BACKOFFS",
    "Guard",
    "UpdateRule",
    "auto_learning_rate",
    "divergence_message",
    "halved",
]

#: Consecutive learning-rate halvings after which a fit is declared divergent.
MAX_BACKOFFS = 30
#: What a backoff multiplies the learning rate by.
BACKOFF_FACTOR = 0.5
#: An objective above this many times the initial one (or times 1, if that is smaller)
#: has exploded: it is treated like NaN (back off, or raise with ``on_divergence="raise"``).
EXPLOSION_FACTOR = 1e6
#: The same for objectives that are not of the whole data at one set of parameters
#: (mini-batches, a group's local batches, the parameter server's mix of groups' sums
#: of different ages): one batch may be far above another, so only a much larger
#: factor is a divergence.  Without it a divergent mini-batch or asynchronous fit grows
#: to 1e40-1e120 before overflowing to inf, and returns such coefficients.
BATCH_EXPLOSION_FACTOR = 1e12

_DEFAULT_HINT = "scale the features (e.g. StandardScaler)"


@dataclass(frozen=True)
class UpdateRule:
    """``params <- prox(params + scale * optimizer update)``.

    Parameters
    ----------
    optimizer : FirstOrderOptimizer
    penalty : object or None
        The objective's penalty bound to its parameter layout: ``decay_mask`` (which
        parameters AdamW decays), ``has_l1`` and ``prox(params, step)``; None for
        parameters without one.
    """

    optimizer: FirstOrderOptimizer
    penalty: Any = None  # a duck type: decay_mask, has_l1, prox(params, step)

    def apply(self, params: Any, grad: Any, state: Any, scale: float = 1.0) -> tuple[Any, Any, float]:
        """``(new params, new optimizer state, learning rate used)``."""
        opt = self.optimizer
        lr = opt.current_learning_rate(state)
        mask = None if self.penalty is None else self.penalty.decay_mask
        updates, state = opt.update(grad, state, params, decay_mask=mask)
        new = params + (updates if scale == 1.0 else scale * updates)
        if self.penalty is not None and self.penalty.has_l1:
            new = self.penalty.prox(new, scale * lr)
        return new, state, lr

    def halved(self) -> UpdateRule:
        """The same rule with half the learning rate (:func:`halved`)."""
        return UpdateRule(halved(self.optimizer), self.penalty)


def halved(optimizer: FirstOrderOptimizer) -> FirstOrderOptimizer:
    """``optimizer`` with its learning rate scaled by :data:`BACKOFF_FACTOR`: the
    backoff of every mode."""
    return optimizer.scale_learning_rate(BACKOFF_FACTOR)


def auto_learning_rate(optimizer: FirstOrderOptimizer, lipschitz: float, grad0: np.ndarray) -> float:
    """A safe first step: 1/L for (momentum) SGD; for adaptive methods, whose first
    update moves every coordinate by about the learning rate, the largest coordinate
    move of that 1/L gradient step."""
    if not optimizer.adaptive:
        return 1.0 / lipschitz
    gmax = float(np.max(np.abs(grad0))) if grad0.size else 0.0
    return gmax / lipschitz if gmax > 0 else 1.0 / lipschitz


def divergence_message(what: str, max_backoffs: int, hint: str = _DEFAULT_HINT) -> str:
    """The message of a DivergenceError after ``max_backoffs`` halvings (0: on_divergence="raise")."""
    if max_backoffs == 0:
        return (
            f"{what} (on_divergence='raise'); pass a smaller learning_rate, {hint}, "
            "or on_divergence='backoff' to halve the learning rate automatically"
        )
    return f"{what} even after halving the learning rate {max_backoffs} times; {hint} or pass a smaller learning_rate"


def initial_divergence(value: float) -> DivergenceError:
    """The DivergenceError of an objective that is not finite where training starts."""
    return DivergenceError(
        f"the objective is not finite at the initial parameters (loss={value}); "
        "check the data and weights for extreme values or scale the features"
    )


class Guard:
    """When a step diverged, and what follows.

    Parameters
    ----------
    on_divergence : {"backoff", "raise"}
    full_batch : bool
        Whether the objective values are of the whole data: only then is an exploding
        value (:data:`EXPLOSION_FACTOR` times the first) a divergence, and an increase
        one for a descent method (one mini-batch may legitimately be far above another).
    monotone : bool
        Whether any increase of the objective is a divergence (full-batch steps of a
        descent method, uncompressed).
    hint : str
        The model's remedy, in the messages.

    Attributes
    ----------
    backoffs : int
        Halvings in a row (since the last accepted step).
    halvings : int
        Halvings of the whole fit (the records' ``lr_halvings``).
    """

    def __init__(self, on_divergence: str = "backoff", *, full_batch: bool = True, monotone: bool = False,
                 hint: str = _DEFAULT_HINT) -> None:
        self.raise_at_once = on_divergence == "raise"
        self.max_backoffs = MAX_BACKOFFS
        self.full_batch = bool(full_batch)
        self.monotone = bool(monotone)
        self.hint = hint
        self.first_value: float | None = None
        self.backoffs = 0
        self.halvings = 0

    def limit(self, *, batch: bool | None = None) -> float:
        """The value above which an objective has exploded (inf before the first one);
        ``batch`` (default: not ``full_batch``) for values of parts of the data."""
        if self.first_value is None:
            return math.inf
        batch = not self.full_batch if batch is None else batch
        return (BATCH_EXPLOSION_FACTOR if batch else EXPLOSION_FACTOR) * max(abs(self.first_value), 1.0)

    def start(self, value: float) -> None:
        """The first objective value, the reference of :meth:`limit` (set once)."""
        if self.first_value is None and math.isfinite(value):
            self.first_value = value

    def exploded(self, value: float, *, where: str, learning_rate: float) -> bool:
        """Whether finite ``value`` is above :meth:`limit`; raises DivergenceError at
        once with ``on_divergence="raise"``.  ``where`` names the step (e.g. "at step 12")."""
        if not value > self.limit():
            return False
        if self.raise_at_once:
            raise DivergenceError(self._message(f"exploded (initial loss {self.first_value:.6g})", where, value,
                                                learning_rate))
        return True

    def _message(self, what: str, where: str, value: float, learning_rate: float) -> str:
        return (
            f"the objective {what} {where} (loss={value}) with learning rate {learning_rate:.6g}; "
            f"pass a smaller learning_rate, {self.hint}, or on_divergence='backoff' to halve the learning "
            "rate automatically"
        )

    def check(self, value: float, grad: Any, good_value: float | None, *, step: int, learning_rate: float) -> bool:
        """Whether the step at ``step`` (objective ``value``, its gradient) must be undone:
        not finite, exploded, or (monotone) above ``good_value``, the last accepted one
        (None: this is the first step).  Raises DivergenceError at the start, or at once
        with ``on_divergence="raise"``."""
        bad = not (math.isfinite(value) and bool(np.all(np.isfinite(grad))))
        if bad and good_value is None:
            raise initial_divergence(value)
        if bad and self.raise_at_once:
            raise DivergenceError(self._message("is not finite", f"at step {step}", value, learning_rate))
        if bad:
            return True
        self.start(value)
        if self.exploded(value, where=f"at step {step}", learning_rate=learning_rate):
            return True
        return self.monotone and good_value is not None and not no_increase(value, good_value)

    def backoff(self, what: str, diverged: bool = False) -> None:
        """Count one halving; raise DivergenceError after too many in a row, or at once
        for a divergence (``diverged``: not finite) with ``on_divergence="raise"``.
        ``what`` says where (e.g. "the objective diverged at step 12 (loss=nan)").  An
        increase of a monotone method is no divergence: it always backs off."""
        self.backoffs += 1
        self.halvings += 1
        limit = 0 if diverged and self.raise_at_once else self.max_backoffs
        if self.backoffs > limit:
            raise DivergenceError(divergence_message(what, limit, self.hint))

    def accepted(self) -> None:
        """A good step: the count of halvings in a row starts again."""
        self.backoffs = 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A guard saved in a checkpoint (the asynchronous server's); one written before
        the fit-long count of halvings existed counts from 0."""
        self.__dict__.update({"halvings": 0, **state})

    def state_dict(self) -> dict[str, Any]:
        return {"first_value": self.first_value, "backoffs": self.backoffs, "halvings": self.halvings}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first_value, self.backoffs = state["first_value"], state["backoffs"]
        self.halvings = int(state.get("halvings", 0))  # 0: a checkpoint written before the count existed

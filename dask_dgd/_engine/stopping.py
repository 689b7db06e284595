"""When training stops: the rules every mode shares.

The driver loop asks, after every accepted step, in this order: a callback asked to
stop (converged: the user decided), early stopping on the validation score, the time
limit (``max_time``), the solver's own rule (its tolerance, and limits of its own that
are not ``max_iter``, such as L-BFGS's evaluations), the iteration limit
(``max_iter``, in the solver's unit: :attr:`~.solvers.base.Solver.iterations`).  The first
that answers ends the fit with its ``(converged, message)``.  :class:`StopRules` holds
them, and is the only place ``max_iter`` and ``max_time`` are compared with the
progress; the parameter server applies the same :class:`StopRules` after every push
(with a :class:`WallClock` in place of the driver's monitor: no callbacks, no
validation score).  :class:`EpochStopper` is the tolerance rule of mini-batch training
in every mode (the parameter server uses it too); this module imports no Dask.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from .protocols import StepOutcome
    from .runtime.monitor import Monitor

__all__ = ["N_ITER_NO_CHANGE", "EarlyStopping", "EpochStopper", "Stop", "StopRules", "WallClock", "gradient_tol"]

#: Epochs without improvement of more than ``tol`` after which mini-batch training stops.
N_ITER_NO_CHANGE = 5


class StopSubject(Protocol):
    """What :meth:`StopRules.limits` asks: a :class:`~.solvers.base.Solver`, or the
    parameter server's :class:`~.modes.server.ServerCore`, which is one of that shape."""

    @property
    def iterations(self) -> int | None: ...

    def stop_rule(self, outcome: Any) -> Stop | None: ...


class Stop:
    """Why a fit ended."""

    def __init__(self, converged: bool, message: str = "") -> None:
        self.converged = bool(converged)
        self.message = message


class EpochStopper:
    """The mini-batch stopping rule of every mode: the mean of the objective values
    recorded during an epoch has not improved on the best epoch's by more than ``tol``
    for ``patience`` epochs in a row."""

    def __init__(self, tol: float, patience: int = N_ITER_NO_CHANGE) -> None:
        self.tol = tol
        self.patience = int(patience)
        self.values: list[float] = []
        self.best = math.inf
        self.no_change = 0
        self.epochs = 0

    def add(self, value: float, epochs_done: int) -> bool:
        """Record ``value``; ``epochs_done`` (epochs completed so far) closes the epoch
        when it grows.  Returns True when training should stop."""
        self.values.append(value)
        if epochs_done <= self.epochs:
            return False
        self.epochs = epochs_done
        mean = float(np.mean(self.values))
        self.values = []
        self.no_change = self.no_change + 1 if mean > self.best - self.tol else 0
        self.best = min(self.best, mean)
        return self.no_change >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {**vars(self), "values": list(self.values)}  # a copy: add() appends in place

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.values = list(self.values)


class EarlyStopping:
    """Stop when the validation score has not improved on the best one by more than
    ``tol`` for ``patience`` evaluations in a row (the model is the last parameters,
    as scikit-learn's)."""

    def __init__(self, tol: float, patience: int) -> None:
        self.tol = tol
        self.patience = int(patience)
        self.best = -math.inf
        self.no_change = 0

    def add(self, score: float) -> bool:
        self.no_change = 0 if score > self.best + self.tol else self.no_change + 1
        self.best = max(self.best, score)
        return self.no_change >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "no_change": self.no_change}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.no_change = state["best"], state["no_change"]


class WallClock:
    """The time of a fit where the driver's monitor is not (the parameter server, on a
    worker): wall-clock seconds since ``started`` (a ``time.time()``); no callbacks,
    so never a stop request.  A plain object: it ships to a worker and is checkpointed
    with the server's state."""

    stop_requested = False

    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else float(started)

    def elapsed(self) -> float:
        return time.time() - self.started


class StopRules:
    """The shared stop rules of one fit (see the module docstring).

    Parameters
    ----------
    monitor : Monitor or WallClock
        Its ``stop_requested`` (a callback returned True) and ``elapsed()`` time.
    max_iter : int or None
        The iteration limit, compared with the solver's ``iterations`` (iterations, or
        epochs: its unit); None: none.
    max_time : float or None
        Seconds since the fit started (``monitor.elapsed()``); None: no limit.
    early_stopping : EarlyStopping or None
        Fed with the ``val_score`` of the step records that carry one.
    """

    def __init__(self, monitor: Monitor | WallClock, max_iter: int | None = None, max_time: float | None = None,
                 early_stopping: EarlyStopping | None = None) -> None:
        self.monitor = monitor
        self.max_iter = None if max_iter is None else int(max_iter)
        self.max_time = max_time
        self.early_stopping = early_stopping

    def out_of_time(self) -> bool:
        return self.max_time is not None and self.monitor.elapsed() >= self.max_time

    def time_message(self) -> str:
        return f"reached max_time={self.max_time} s"

    def limit(self, done: int | None) -> Stop | None:
        """The iteration limit's :class:`Stop` once ``done`` (a solver's
        ``iterations``; None: not bounded by ``max_iter``) reached ``max_iter``, else None."""
        if self.max_iter is None or done is None or done < self.max_iter:
            return None
        return Stop(False, f"reached max_iter={self.max_iter}")

    def check(self, solver: StopSubject, outcome: StepOutcome) -> Stop | None:
        """The :class:`Stop` after ``outcome`` (the solver's last step), or None."""
        if self.monitor.stop_requested:
            return Stop(True)
        score = None if outcome.record is None else outcome.record.get("val_score")
        if self.early_stopping is not None and score is not None and self.early_stopping.add(score):
            es = self.early_stopping
            return Stop(True, f"early stopping: the validation score did not improve by more than tol={es.tol} "
                              f"for n_iter_no_change={es.patience} epochs")
        return self.limits(solver, outcome)

    def limits(self, solver: StopSubject, outcome: Any) -> Stop | None:
        """The rules after the user's: the time limit, ``solver.stop_rule(outcome)``,
        the iteration limit on ``solver.iterations`` (the parameter server's whole check:
        it is a solver of this shape; ``outcome`` is what its ``stop_rule`` takes)."""
        if self.out_of_time():
            return Stop(False, self.time_message())
        stop = solver.stop_rule(outcome)
        return stop if stop is not None else self.limit(solver.iterations)

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.early_stopping is None else self.early_stopping.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.early_stopping is not None and state is not None:
            self.early_stopping.load_state_dict(state)


def gradient_tol(tol: float, start: float) -> float:
    """The bound on the largest gradient entry that ends a full-batch fit (Newton's
    KKT violation, L-BFGS's largest entry): ``tol``, times the start's largest entry
    ``start`` when that is below 1 (never looser than ``tol``).

    The gradient of a mean loss carries the target's units: a Tweedie (power 3) fit of
    sales in dollars starts at 1.8e-8 and a Poisson fit of rates per person-year near
    1e-4, below an absolute ``tol=1e-4`` before the first step; those fits ended far
    from the optimum, "converged".  Relative to the start, the bound does not depend on
    the units; on data whose start gradient is 1 or more it is ``tol`` as before.  A
    fit whose objective turns flat at rounding level before reaching the bound (its line
    search finds no decrease) is judged by ``tol`` itself: the relative bound may lie
    below the gradient's rounding level, which no step can pass."""
    if not math.isfinite(start) or start <= 0.0:
        return tol
    return tol * min(1.0, start)

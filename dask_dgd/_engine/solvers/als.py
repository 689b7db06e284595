"""Alternating least squares (``solver="als"``): a solver of the one loop.

For models whose objective is quadratic in each side's factors (a matrix
factorization of explicit ratings, or confidence-weighted least squares), with the
item table ``V`` the shared parameters and each shard's users its local parameters.
One iteration:

1. one step sends ``V`` (and, for wls, ``V^T V``); every shard solves its users where
   they live, by ``cg_steps`` conjugate-gradient steps each from their current rows
   (:func:`dask_dgd.losses._als.solve_users`), and returns the
   usual sums at the solved users: the objective, the item gradient (whose half is
   ``A V - B``, minus the residual of the item systems) and, for wls, the users' Gram
   matrix ``U^T U``;
2. ``cg_steps`` steps of conjugate gradients on the item systems, all items at once,
   each with its own step sizes (the systems are independent): each step sends the
   direction ``D`` and the shards return the observed part of ``A_i d_i`` (row-sparse,
   tree-reduced like a gradient); the driver adds ``D U^T U`` and updates ``V``, the
   residuals and the directions.  These steps open the *next* iteration, so a fit ends
   on a user step: the model it returns is the one its last record measured (the
   users solved at the item table of that step).

The item systems are sums over users, who live on different shards; conjugate
gradients needs only their products with a direction, which reduce like gradients,
so nothing of size ``items x width^2`` ever travels.  Warm-started from the previous
``V``, a few steps suffice (the ``implicit`` library's conjugate-gradient ALS takes 3
per iteration).  Every iteration decreases the objective (conjugate-gradient steps on
convex quadratics, from the current rows, never increase it), so the fit stops when an
iteration improved it by at most ``tol``, or after ``max_iter`` iterations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...exceptions import DivergenceError
from ..stopping import Stop
from ..update import initial_divergence
from .base import AttributeState, Outcome, Solver, step_record

if TYPE_CHECKING:
    from ..modes.sync import StepResult
    from ..protocols import FitContext

__all__ = ["ALS", "CG_STEPS"]

#: Conjugate-gradient steps on the item systems per iteration.
CG_STEPS = 3


def _rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b)


class ALS(AttributeState, Solver):
    """Alternating least squares with conjugate-gradient item steps (see the module
    docstring).  The training objective provides ``als_aux(phase, V)`` (what a step
    sends besides the table), ``als_gram(partial)`` (the users' Gram matrix of the
    all-pairs term, or None), ``als_diag()`` (a per-column term of every item system's
    diagonal that the shards do not add, or None) and ``als_shape`` (the item table's
    shape)."""

    def __init__(self, ctx: FitContext, params0: np.ndarray, cg_steps: int = CG_STEPS) -> None:
        self.ctx = ctx
        obj = ctx.objective
        self.shape = obj.als_shape  # type: ignore[attr-defined]
        self.V = np.array(params0, dtype=np.float64).reshape(self.shape)
        self.cg_steps = int(cg_steps)
        self.it = 0
        self.key = 0  # the snapshot of the users the next step starts from
        self.value: float | None = None
        self.previous: float | None = None
        # (residual, users' Gram, divisor) of the last solve
        self.pending: tuple[np.ndarray, np.ndarray | None, float] | None = None

    @property
    def progress(self) -> int:
        return self.it

    def start(self) -> Outcome:
        return self._iteration()

    def step(self) -> Outcome:
        return self._iteration()

    def _evaluate(self, table: np.ndarray, phase: str) -> StepResult:
        src, obj = self.ctx.source, self.ctx.objective
        res = src.evaluate(table.ravel(), None, src.local_update(self.key), aux=obj.als_aux(phase, table),  # type: ignore[attr-defined]
                           name=f"als-{phase}")
        self.key = res.local_key
        return res

    def _iteration(self) -> Outcome:
        if self.pending is not None:  # the items' conjugate-gradient steps of the last solve
            self.V = self._item_steps(self.V, *self.pending)
            self.pending = None
        res = self._evaluate(self.V, "solve")
        if not res.finite:
            if self.it == 0:
                raise initial_divergence(res.value)
            raise DivergenceError(f"alternating least squares diverged at iteration {self.it} (loss={res.value}); "
                                  f"{self.ctx.objective.hint}")
        n = res.partial.weight_sum
        # B - A V, with the users just solved; the item steps wait for the next iteration,
        # so the model of the last record is the one the fit returns
        self.pending = (-0.5 * n * res.grad.reshape(self.shape), self.ctx.objective.als_gram(res.partial), n)  # type: ignore[attr-defined]
        record = step_record(self.ctx, res, self.it, res.value, res.grad, None)
        self.it += 1
        self.previous, self.value = self.value, res.value
        return Outcome([record])

    def _item_steps(self, V: np.ndarray, R: np.ndarray, gram: np.ndarray | None, n: float) -> np.ndarray:
        """``cg_steps`` conjugate-gradient steps on every item's system from ``V``
        (``R``: its residual ``B - A V``; ``gram``: the users' Gram matrix or None; ``n``
        the sums' divisor)."""
        # (the same operations as V += step D; R -= step AD; D = R + beta D, written into
        # buffers: on a Dask worker, whose allocator returns freed memory at once, every
        # new items x width array is new pages)
        V, R = V.copy(), R.copy()
        # (preconditioned: R's columns divided by ``pre``, 1 where there is none)
        pre = self.ctx.objective.als_preconditioner(V)  # type: ignore[attr-defined]
        Z = R / pre if pre is not None else R
        D = Z.copy()
        AD, tmp = np.empty_like(V), np.empty_like(V)
        diag = self.ctx.objective.als_diag()  # type: ignore[attr-defined]
        rs = _rowdot(R, Z)
        for _ in range(self.cg_steps):
            if not np.any(rs > 0):
                break
            np.multiply(n, self._evaluate(D, "matvec").grad.reshape(self.shape), out=AD)
            if gram is not None:
                AD += np.matmul(D, gram, out=tmp)
            if diag is not None:
                AD += np.multiply(D, diag, out=tmp)
            dad = _rowdot(D, AD)
            step = np.divide(rs, dad, out=np.zeros_like(rs), where=dad > 0)
            V += np.multiply(step[:, None], D, out=tmp)
            R -= np.multiply(step[:, None], AD, out=tmp)
            Z = R / pre if pre is not None else R
            rs_next = _rowdot(R, Z)
            beta = np.divide(rs_next, rs, out=np.zeros_like(rs), where=rs > 0)
            D = beta[:, None] * D  # (a new D: the shards had the old)
            D += Z
            rs = rs_next
        return V

    @property
    def iterations(self) -> int:
        return self.it

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        if self.previous is not None and self.previous - self.value <= self.ctx.tol:  # type: ignore[operator]
            return Stop(True)
        return None

    def result(self) -> tuple[np.ndarray, int, None, None]:
        return self.V.ravel(), self.it, None, None

    def local_keys(self) -> tuple[int, ...]:
        return (self.key,)

    _STATE = ("V", "it", "key", "value", "previous", "pending")

    def resume(self) -> Outcome:
        return Outcome(accepted=False)

r"""L-BFGS over sharded vectors, worker side: the owners' part of the two-loop recursion.

The two-loop recursion needs only dot products of the gradient and the kept pairs
``(s_i, y_i)``, and builds the direction as a linear combination of them ("vector-free"
L-BFGS, Chen, Wang and Zhou, NeurIPS 2014).  So each owner keeps its slices of those
vectors (``scratch.modes["sharded"]["lbfgs"]``, keyed by ids the driver gives them), the
driver keeps their dot products, summed over the owners (a small Gram matrix), runs the
recursion on coefficients and sends them; every owner combines its slices.  A new pair
costs one reduction of its dot products with the vectors kept (``accept``).

Commands (:class:`LbfgsCommand`, one reduction each through the runner tree):

- ``"merge"``: the gradient at the point just evaluated (as in
  :func:`~.params.sharded_update`), kept as vector ``id``; its largest entry, squared
  norm, slope along the direction, penalty value;
- ``"trial"``: the direction is ``coeffs`` (``{id: c}``: ``sum c * vector``) when given,
  and the next point to evaluate is ``base + t * direction``; vectors not in ``live``
  are dropped;
- ``"accept"``: the trial at ``t`` (its gradient: vector ``grad_id``) becomes the base:
  ``s = x_t - base`` and ``y = g_t - g`` are kept as vectors ``ids``; their and
  ``g_t``'s dot products with every vector of ``live`` are returned.

**Diagonal scaling.**  A hashed click log's columns differ in frequency by orders of
magnitude, and so do the objective's curvatures along them; Spark MLlib's L-BFGS
standardises the columns internally for that reason.  Here the recursion runs in the
coordinates :math:`z = D x` of a diagonal :math:`D` (``precondition``, the change of
variables of :mod:`..scaling` without centring, on the owners' slices): the owners keep
the vectors in those coordinates (:math:`D^{-1} g`, :math:`D s`) and step the
parameters along :math:`D^{-1}` times the direction, so the objective, the penalty and
the optimum are the model's own; only the directions, and the gradient entries ``tol``
is judged on, are those of the scaled columns.  :math:`D_{jj}^2 = m_j + \lambda / \kappa`
(:func:`column_scales`): :math:`m_j` the weighted mean of column :math:`j`'s squares,
measured in one pass when the fit starts (:func:`~.params.sharded_column_squares`),
:math:`\lambda` the L2 strength and :math:`\kappa` the loss's curvature bound (1 where
it has none), so that :math:`D^2` is proportional to the Hessian's diagonal at a start
of average curvature, rare columns' penalty included (the Jacobi preconditioner).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.reduce import Partial
from .params import LbfgsCommand, Max, merged_gradient, owned_memory, slice_penalty

if TYPE_CHECKING:
    from ...losses import Penalty
    from ..data.blocks import Shard
    from ..runtime.group_steps import GroupMemory
    from .params import SlicePenalty

__all__ = ["column_scales", "sharded_lbfgs"]


def column_scales(mem: dict[str, Any], pen: SlicePenalty, kappa: float) -> np.ndarray:
    """The owner's diagonal :math:`D` over its slice (see the module docstring), from
    the groups' sums of squares (:func:`~.params.sharded_column_squares`), summed in
    group order; ones where a column has neither data nor penalty."""
    lay = mem["layout"]
    lo, hi = lay.bounds[mem["group"]], lay.bounds[mem["group"] + 1]
    squares = mem.pop("squares", None) or {}
    m = np.zeros(hi - lo)
    total = 0.0
    for g in sorted(squares):
        weight, values = squares[g]
        m[mem["rows"][g]] += values
        total += weight
    if total > 0:
        m /= total
    d2 = np.repeat(m, lay.width)
    d2[: pen.n_coef] += pen.l2 / kappa
    return np.sqrt(np.where(d2 > 0, d2, 1.0))


def _memory(mem: dict[str, Any], pen: SlicePenalty, cmd: LbfgsCommand) -> dict[str, Any]:
    lb = mem.get("lbfgs")
    if lb is None:
        d = None if cmd.precondition is None else column_scales(mem, pen, cmd.precondition)
        lb = mem["lbfgs"] = {"vectors": {}, "base": mem["x"], "direction": None, "d": d}
    return lb


def _scaled_step(lb: dict[str, Any], t: float) -> np.ndarray:
    """The parameters' move ``t`` times the direction (scaled back by :math:`D^{-1}`)."""
    d = lb.get("d")
    return t * lb["direction"] if d is None else t * (lb["direction"] / d)


def sharded_lbfgs(shard: Shard, scratch: GroupMemory, penalty_spec: Penalty, cmd: LbfgsCommand) -> Partial:
    """One :class:`LbfgsCommand` on one owner; one :class:`~..runtime.reduce.Partial` of
    scalars (``extras``) back."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = owned_memory(scratch)
    pen = slice_penalty(mem, penalty_spec)
    lb = _memory(mem, pen, cmd)
    vec = lb["vectors"]
    extras: dict[str, Any] = {}
    if cmd.kind == "merge":
        g = merged_gradient(mem, pen, cmd)
        if lb.get("d") is not None:
            g /= lb["d"]  # the gradient of the scaled coordinates
        vec[cmd.id] = g
        gsq = float(g @ g)
        d = lb["direction"]
        extras.update(gmax=Max(max(g.max(initial=0.0), -g.min(initial=0.0))), gsq=gsq, pen_x=pen.value(mem["x"]),
                      slope=0.0 if d is None else float(g @ d),
                      nonfinite=0 if np.isfinite(gsq) else int(np.count_nonzero(~np.isfinite(g))))
    elif cmd.kind == "trial":
        if cmd.coeffs is not None:
            for k in [k for k in vec if k not in cmd.live]:
                del vec[k]
            d = np.zeros_like(lb["base"])
            term = np.empty_like(d)  # c * v of each vector, in one scratch vector (the same floats)
            for k, c in cmd.coeffs.items():
                d += np.multiply(vec[k], c, out=term)
            lb["direction"] = d
        mem["pending"] = (int(cmd.version), lb["base"] + _scaled_step(lb, cmd.t), None, False)  # type: ignore[arg-type]
    elif cmd.kind == "accept":
        x_t = lb["base"] + _scaled_step(lb, cmd.t)  # type: ignore[arg-type]  # the trial point, as it was evaluated
        sid, yid = cmd.ids
        # s in the scaled coordinates: D (x_t - base), that is t times the direction
        vec[sid] = x_t - lb["base"] if lb.get("d") is None else cmd.t * lb["direction"]
        vec[yid] = vec[cmd.grad_id] - vec[cmd.g_id]
        lb["base"] = x_t
        new = (vec[sid], vec[yid], vec[cmd.grad_id])
        extras["dots"] = np.array([[float(a @ vec[k]) for k in cmd.live] for a in new])
    dt = time.perf_counter() - t0
    return Partial(0.0, np.zeros(0), 0.0, dt, dt, 1, wall0, wall0 + dt, extras)

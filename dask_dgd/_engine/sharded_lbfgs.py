"""L-BFGS over sharded vectors, worker side: the owners' part of the two-loop recursion.

The two-loop recursion needs only dot products of the gradient and the kept pairs
``(s_i, y_i)``, and builds the direction as a linear combination of them ("vector-free"
L-BFGS, Chen, Wang and Zhou, NeurIPS 2014).  So each owner keeps its slices of those
vectors (``scratch["sharded"]["lbfgs"]``, keyed by ids the driver gives them), the
driver keeps their dot products, summed over the owners (a small Gram matrix), runs the
recursion on coefficients and sends them; every owner combines its slices.  A new pair
costs one reduction of its dot products with the vectors kept (``accept``).

Commands (:class:`LbfgsCommand`, one reduction each through the runner tree):

- ``"merge"``: the gradient at the point just evaluated (as in
  :func:`~.sharding.sharded_update`), kept as vector ``id``; its largest entry, squared
  norm, slope along the direction, penalty value;
- ``"trial"``: the direction is ``coeffs`` (``{id: c}``: ``sum c * vector``) when given,
  and the next point to evaluate is ``base + t * direction``; vectors not in ``live``
  are dropped;
- ``"accept"``: the trial at ``t`` (its gradient: vector ``grad_id``) becomes the base:
  ``s = x_t - base`` and ``y = g_t - g`` are kept as vectors ``ids``; their and
  ``g_t``'s dot products with every vector of ``live`` are returned.
"""

import time
from dataclasses import dataclass

import numpy as np

from .reduce import Partial
from .sharding import Max, _merged_gradient, _owned, _slice_penalty

__all__ = ["LbfgsCommand", "sharded_lbfgs"]


@dataclass(frozen=True)
class LbfgsCommand:
    """One step of sharded L-BFGS on every owner (see the module docstring)."""

    kind: str
    version: int = 0
    split_every: int = 8
    n_blocks: int = 1
    id: int = None
    t: float = None
    coeffs: dict = None
    live: tuple = ()
    grad_id: int = None
    ids: tuple = ()
    g_id: int = None


def _memory(mem):
    lb = mem.get("lbfgs")
    if lb is None:
        lb = mem["lbfgs"] = {"vectors": {}, "base": mem["x"], "direction": None}
    return lb


def sharded_lbfgs(shard, scratch, penalty_spec, cmd):
    """One :class:`LbfgsCommand` on one owner; one :class:`~.reduce.Partial` of
    scalars (``extras``) back."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = _owned(scratch)
    lb, pen = _memory(mem), _slice_penalty(mem, penalty_spec)
    vec, extras = lb["vectors"], {}
    if cmd.kind == "merge":
        g = vec[cmd.id] = _merged_gradient(mem, pen, cmd)
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
            for k, c in cmd.coeffs.items():
                d += c * vec[k]
            lb["direction"] = d
        mem["pending"] = (int(cmd.version), lb["base"] + cmd.t * lb["direction"], None, False)
    elif cmd.kind == "accept":
        x_t = lb["base"] + cmd.t * lb["direction"]  # the trial point, as it was evaluated
        sid, yid = cmd.ids
        vec[sid], vec[yid] = x_t - lb["base"], vec[cmd.grad_id] - vec[cmd.g_id]
        lb["base"] = x_t
        new = (vec[sid], vec[yid], vec[cmd.grad_id])
        extras["dots"] = np.array([[float(a @ vec[k]) for k in cmd.live] for a in new])
    dt = time.perf_counter() - t0
    return Partial(0.0, np.zeros(0), 0.0, dt, dt, 1, wall0, wall0 + dt, extras)

"""Sharded parameters, driver side: first-order training whose parameters stay on the workers.

:class:`ShardedSource` is the step source of a fit with ``param_sharding`` (see
:mod:`.params` for the worker side): it sets the owners up, and runs the two phases
of a step through the runner tree, receiving only scalars.  :class:`ShardedFirstOrder`
is the solver: :class:`~..solvers.first_order.FirstOrder` itself (the guard and its backoff, the
tolerance and epoch rules, the records, the checkpoint's counters), with the hooks
that evaluate, update and back off on the owners and read the scalars they report;
its parameters, optimizer state and gradient are the owners' slices.  The driver's
memory does not grow with the number of parameters until the fit ends and its result
is assembled.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ..modes.async_ import AsyncTraining
from ..modes.online import OnlineEpochs
from ..modes.server import ShardedCore
from ..modes.sync import StepResult, SyncSource
from ..runtime.records import Bytes, Route, Timing, make_record
from ..runtime.reduce import Partial
from ..solvers.base import Outcome
from ..solvers.first_order import LBFGS, FirstOrder
from ..update import UpdateRule, auto_learning_rate, initial_divergence
from .async_ import sharded_async_loop
from .exchange import ActorExchange, LocalExchange
from .lbfgs import sharded_lbfgs
from .online import OnlineAverage, OnlineRound, online_average, online_keep, online_undo, sharded_pass
from .params import (
    GATHER_CHUNK,
    LbfgsCommand,
    ParamLayout,
    ShardedRequest,
    Ticket,
    UpdateCommand,
    _compact,
    _flat,
    sharded_column_squares,
    sharded_eval,
    sharded_memory,
    sharded_restore,
    sharded_setup,
    sharded_slice,
    sharded_update,
)

if TYPE_CHECKING:
    from ...optim import LBFGS as LbfgsSettings
    from ...optim import FirstOrderOptimizer
    from ..data.shards import ShardSet
    from ..modes.async_ import ServerLink, _InProcessServer
    from ..objective import LinearTraining
    from ..protocols import FitContext
    from ..runtime.group_steps import Draw, GroupMemory
    from ..solvers.base import Settings

__all__ = ["ShardedAsync", "ShardedFirstOrder", "ShardedLBFGS", "ShardedOnline", "ShardedSource", "sharded_record",
           "sharded_start", "split"]


def split(vector: Any, layout: ParamLayout) -> list[Any]:
    """The owners' slices of a flat vector (or optimizer state) laid out by ``layout``."""
    if vector is None:
        return [None] * layout.n_owners
    if isinstance(vector, tuple) and hasattr(vector, "_asdict"):
        parts = {k: split(v, layout) for k, v in vector._asdict().items()}
        return [type(vector)(**{k: parts[k][o] for k in vector._fields}) for o in range(layout.n_owners)]  # type: ignore[attr-defined]
    if isinstance(vector, np.ndarray) and vector.ndim == 1 and vector.size == layout.n_params:
        return [vector[slice(*layout.flat_range(o))].copy() for o in range(layout.n_owners)]
    if sp.issparse(vector):  # a sparse start: each owner expands its slice
        return [sp.csr_matrix(vector[:, slice(*layout.flat_range(o))]) for o in range(layout.n_owners)]
    return [vector] * layout.n_owners


def sharded_record(res: StepResult, iteration: int, value: float, gsq: float, step_size: float | None,
                   **extra: Any) -> dict[str, Any]:
    """The record of one sharded step (``gsq``: the gradient's squared norm, summed
    over the owners)."""
    return make_record(
        step=res.step, iteration=iteration, loss=value, grad_norm=math.sqrt(gsq), step_size=step_size,
        timing=res.timing, n_samples=res.partial.weight_sum, updates_per_group=(1,) * max(int(res.partial.n_groups), 1),
        nbytes=res.nbytes, route=res.route, **extra)


def sharded_start(ctx: FitContext, optimizer: FirstOrderOptimizer, draw: Draw | None,
                  divide: int = 1, init: bool = True) -> tuple[FirstOrderOptimizer, StepResult, dict[str, Any]]:
    """The first evaluation of a sharded fit (at the owners' start, all rows or
    ``draw``'s), its merge with every owner's optimizer state started (``init``; the
    online passes keep their rules' state on the groups), and the automatic learning
    rate (its step divided by ``divide``): ``(optimizer, step result, owners' scalars)``."""
    src: ShardedSource = ctx.source
    res = src.evaluate(draw=draw)
    stats = src.command("merge", init=optimizer if init else None)
    if not (math.isfinite(res.value) and stats.get("nonfinite", 0) == 0):
        raise initial_divergence(res.value)
    if ctx.learning_rate == "auto":
        L = ctx.objective.lipschitz(ctx.shards, None)  # type: ignore[arg-type]  # (no driver vector: a linear model takes None)
        lr = auto_learning_rate(optimizer, L, np.array([float(stats["gmax"])])) / divide
        optimizer = optimizer.with_learning_rate(lr)
    return optimizer, res, stats


class ShardedSource(SyncSource):
    """Synchronous steps whose parameters are sharded over the groups (no compression,
    no balancing: a group's memory belongs to its blocks)."""

    objective: LinearTraining

    def __init__(self, shards: ShardSet, objective: LinearTraining, layout: ParamLayout, *, split_every: int,
                 seed: tuple[int, ...] = (0,)) -> None:
        super().__init__(shards, objective, split_every=split_every, seed=seed)
        self.layout = layout
        self.version = 0
        self.exchange: ActorExchange | LocalExchange | None = None

    def start(self) -> None:
        super().start()
        coll = self.shards.collective
        self.exchange = ActorExchange(coll.runner_targets()) if coll.on_cluster else LocalExchange(coll.scratch())

    def setup(self, params0: np.ndarray | sp.csr_matrix | None = None, state0: Any = None) -> None:
        """Every group owns its slice (of ``params0``; zeros when None) and registers
        the rows its blocks need with their owners."""
        lay = self.layout
        xs, states = split(params0, lay), split(state0, lay)
        self.shards.collective.call(sharded_setup, self.objective.objective, lay, self.exchange,
                                    per_group=[(g, xs[g], states[g]) for g in range(lay.n_owners)])
        self.version = 0

    def regrouped(self) -> None:
        """The blocks moved (a resumed fit's placement) and the runners restarted: the
        owners are set up again, over the new groups (the checkpoint's slices come
        back with :meth:`restore`)."""
        version = self.version  # (the checkpoint's, loaded before)
        self.layout = ParamLayout.split(self.objective.objective, self.shards.n_groups)
        self.start()
        self.setup()
        self.version = version

    def evaluate(self, params: Any = None, draw: Draw | None = None, local: Any = None, name: str = "grad",
                 aux: Any = None) -> StepResult:
        """Phase 1 at the owners' parameters of the next version (the pending update,
        committed by the first pull), or at the current ones (the first step): the loss
        and weight sums; ``params`` is ignored (the parameters are the owners')."""
        sh = self.shards
        t0, wall0, cpu0 = time.perf_counter(), time.time(), time.process_time()
        update_time = None if self._last_end is None else t0 - self._last_end
        if self.n_steps > 0:
            self.version += 1
        self.n_steps += 1
        request = ShardedRequest(self.version, self.exchange, draw)  # type: ignore[arg-type]
        partial = sh.collective.reduce(sharded_eval, self.objective, request, split_every=self.split_every,
                                       size=0, name=f"{name}-{self.n_steps}", step=self.n_steps)
        wall1 = time.time()
        value = partial.loss_sum / partial.weight_sum if partial.weight_sum > 0 else 0.0
        traffic = sh.collective.last_traffic
        self._last_end = time.perf_counter()
        timing = Timing(
            step_time=self._last_end - t0, compute_time_max=partial.time_max, compute_time_min=partial.time_min,
            broadcast_time=partial.start_max - wall0, reduce_time=wall1 - partial.end_max,
            update_time=update_time, driver_cpu_time=time.process_time() - cpu0,
            compute_time_median=partial.time_median(), slowest_group=partial.slowest,
        )
        nbytes = Bytes(8 * self.objective.n_params * sh.n_groups, int(partial.extras.get("bytes_pushed", 0)),
                       int(partial.extras.get("bytes_pulled", 0)))
        return StepResult(self.n_steps, None, value, np.zeros(0), partial, timing, nbytes, Route.of(traffic))  # type: ignore[arg-type]

    def command(self, kind: str, rule: UpdateRule | None = None,
                init: FirstOrderOptimizer | None = None) -> dict[str, Any]:
        """Phase 2 (``kind`` ``"merge"``), the first update (``"update"``) or a backoff
        on every owner; their scalars summed (largest entries: their maximum)."""
        cmd = UpdateCommand(kind, self.version + 1, self.split_every, self.shards.n_blocks, rule, init)
        root = self.shards.collective.reduce_groups(sharded_update, self.objective.penalty_spec, cmd,
                                                    split_every=self.split_every, size=0)
        return root.extras

    def gather(self, which: str = "current", sparse: bool = False) -> tuple[Any, Any]:
        """``(parameters, optimizer state)`` assembled from the owners' slices, a chunk
        at a time into arrays allocated once (the driver holds the result and one
        chunk of :data:`~.params.GATHER_CHUNK` entries).  ``sparse``: each vector
        as a SciPy CSR row of its non-zero entries, the only ones the owners send."""
        self.restore()  # (a resumed fit that had converged: the checkpoint's slices, not the start's)
        lay, coll = self.layout, self.shards.collective
        n = lay.n_params
        found: dict[str | None, Any] = {}  # field (None: the parameters) -> dense array, or [(indices, values)]
        state = None
        for o in range(lay.n_owners):
            skeleton, size = coll.call(sharded_slice, which, None, None, group=o)
            lo, _ = lay.flat_range(o)
            fields = [None]
            if isinstance(skeleton, tuple) and hasattr(skeleton, "_asdict"):
                fields += [k for k, v in skeleton._asdict().items() if v is None]
            if state is None:
                state = skeleton
            for field in fields:
                target = found.setdefault(field, [] if sparse else np.empty(n))
                for start in range(0, size, GATHER_CHUNK):
                    chunk = coll.call(sharded_slice, which, field, start, sparse, group=o)
                    if sparse:
                        target.append((chunk[0] + (lo + start), chunk[1]))
                    else:
                        target[lo + start:lo + start + chunk.size] = chunk
        if sparse:
            found = {k: sp.csr_matrix((np.concatenate([v for _, v in parts]),
                                       (np.zeros(sum(i.size for i, _ in parts), dtype=np.int64),
                                        np.concatenate([i for i, _ in parts]))), shape=(1, n))
                     for k, parts in found.items()}
        params = found.pop(None)
        if found:
            state = state._replace(**found)  # type: ignore[arg-type, union-attr]
        return params, state

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "owners": self.shards.collective.call(sharded_memory)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self.version = int(state["version"])
        self._owners = state["owners"]

    def restore(self) -> None:
        """Give the owners the slices a checkpoint kept (after :meth:`setup`)."""
        owners = getattr(self, "_owners", None)
        if owners is not None:
            if len(owners) != self.layout.n_owners:
                from ...exceptions import CheckpointError

                raise CheckpointError(
                    f"the checkpoint's parameters are sharded over {len(owners)} groups, this fit has "
                    f"{self.layout.n_owners}: resume with the same workers, or fit again")
            self.shards.collective.call(sharded_restore, per_group=[(m,) for m in owners])
            self._owners = None


class ShardedFirstOrder(FirstOrder):
    """:class:`~..solvers.first_order.FirstOrder` over sharded parameters (see the module docstring):
    the same template, its hooks on the owners' slices and the scalars they report.

    Each step is two calls through the runner tree: the evaluation of the owners'
    pending parameters (phase 1) and the merge of the gradient with the speculative
    update from it (phase 2), so :meth:`_update` has nothing to do.  A step the guard
    rejects costs one more call: the owners go back to the last accepted point and
    update from it with the halved learning rate.
    """

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> ShardedFirstOrder:
        return cls(ctx, settings.optimizer)

    def __init__(self, ctx: FitContext, optimizer: FirstOrderOptimizer) -> None:
        self.src: ShardedSource = ctx.source
        self.stats: dict[str, Any] = {}  # the owners' scalars of the last accepted evaluation
        self.has_l1 = ctx.objective.penalty.has_l1
        self._set_rules(ctx, UpdateRule(optimizer))  # the owners apply the penalty

    def start(self) -> Outcome:
        opt, res, stats = sharded_start(self.ctx, self.optimizer, self._draw())
        self.rule = UpdateRule(opt)
        outcome = self._observe(res, stats)
        self.src.command("update", rule=self.rule)
        return outcome

    # -------------------------------------------------------------- the hooks
    def _judge(self, res: StepResult, stats: dict[str, Any]) -> tuple[float, np.ndarray, float]:  # type: ignore[override]
        value = res.value + stats.get("pen_x", 0.0) + stats.get("l1_x", 0.0)
        lr = self.optimizer.learning_rate_at(int(stats.get("count", 0)))
        grad = np.array([0.0 if stats.get("nonfinite", 0) == 0 and res.partial.extras.get("nonfinite", 0) == 0
                         else math.nan])
        return value, grad, lr

    @property
    def good_value(self) -> float:
        return self.good[0]  # type: ignore[index]

    def _accept(self, res: StepResult, stats: dict[str, Any]) -> None:  # type: ignore[override]
        """Keep the owners' scalars; the last accepted step is ``(value, iteration)``
        (its parameters are the owners')."""
        self.stats, self.good = stats, (self.value, self.it)

    def _validate(self) -> dict[str, float]:
        return self.ctx.validator.evaluate_sharded(self.src)

    def _record(self, res: StepResult, iteration: int, stats: dict[str, Any], **scores: float | None) -> dict[str, Any]:  # type: ignore[override]
        lr = self.optimizer.learning_rate_at(int(stats.get("count", 0)))
        return sharded_record(res, iteration, self.value, stats.get("gsq", 0.0), lr,  # type: ignore[arg-type]
                              lr_halvings=self.guard.halvings, **scores)

    def _back_off(self) -> None:
        self.it = self.good[1]  # type: ignore[index]
        self.src.command("backoff", rule=self.rule)

    def _update(self) -> None:
        """Nothing: the owners made the update when they merged the last gradient."""

    def _evaluate(self) -> tuple[StepResult, dict[str, Any]]:
        res = self.src.evaluate(draw=self._draw())
        return res, self.src.command("merge", rule=self.rule)

    def gap(self) -> float | None:
        """The largest entry of the (proximal) gradient mapping (full batch)."""
        return float(self.stats.get("gmap" if self.has_l1 else "gmax", math.inf)) if self.full_batch else None

    def result(self) -> tuple[Any, int, FirstOrderOptimizer, Any]:
        which = "pending" if self.phase == "updated" else "good" if self.pending_backoff else "current"
        params, state = self.src.gather(which, self.ctx.sparse_params)
        return params, self.n_iter, self.optimizer, state

    def local_keys(self) -> tuple[int, ...]:
        return ()

    # -------------------------------------------------------------- checkpoints
    def _own_state(self) -> dict[str, Any]:
        return {"stats": dict(self.stats), "pending_backoff": self.pending_backoff}

    def _load_own(self, state: dict[str, Any]) -> None:
        self.stats, self.pending_backoff = dict(state["stats"]), state["pending_backoff"]

    def _restore(self) -> None:
        """The owners get their saved slices, with the update after the last accepted
        step pending."""
        self.src.restore()

    def _resume_updated(self) -> None:
        self.it -= 1  # the pending update is evaluated by the next step, which counts it again


class ShardedLBFGS(LBFGS):
    """:class:`~..solvers.first_order.LBFGS` over sharded vectors (see :mod:`.lbfgs`).

    The same line search, ties and stops; what differs is where the vectors are: the
    gradient, the pairs, the direction and the trial points are the owners' slices,
    and the driver holds their dot products (``gram``, keyed by vector ids) and runs
    the two-loop recursion on coefficients.  In exact arithmetic the directions are
    those of the unsharded solver; in floating point the dot products are summed over
    the owners, so the fits agree to rounding, not bit for bit.  An iteration whose
    line search takes one trial costs four reductions: the direction with the trial
    point, its evaluation, its gradient, and the new pair's dot products.
    """

    _STATE = ("f", "it", "direction", "slope0", "t0", "t", "trials", "points", "pairs", "g_id", "gmax_g", "next_id")

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> ShardedLBFGS:
        return cls(ctx, settings.optimizer, precondition=settings.precondition)

    def __init__(self, ctx: FitContext, settings: LbfgsSettings, precondition: bool = True) -> None:
        super().__init__(ctx, None, settings)
        self.src: ShardedSource = ctx.source
        self.gram: dict[tuple[int, int], float] = {}  # (id, id) -> the dot product of two vectors, over the owners
        self.pairs: list[tuple[int, int]] = []  # (s id, y id), oldest first
        self.g_id: int | None = None
        self.gmax_g: float | None = None
        self.next_id = 0
        # the diagonal scaling's curvature level (see :mod:`.lbfgs`; None: none)
        bound = getattr(getattr(ctx.objective.objective, "loss", None), "curvature_bound", None)  # type: ignore[attr-defined]
        self.precondition = (1.0 if bound is None else float(bound)) if precondition else None
        if self.precondition is not None:
            self.coordinates = "scaled"  # diagonally, on the owners (lbfgs.py)

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _command(self, kind: str, **kw: Any) -> dict[str, Any]:
        src = self.src
        cmd = LbfgsCommand(kind, src.version + 1, src.split_every, src.shards.n_blocks, precondition=self.precondition,
                           **kw)
        return src.shards.collective.reduce_groups(sharded_lbfgs, self.ctx.objective.penalty_spec, cmd,  # type: ignore[attr-defined]
                                                   split_every=src.split_every, size=0).extras

    def _point(self, vid: int) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        """Evaluate the owners' next point; its gradient becomes vector ``vid``."""
        res = self.src.evaluate()
        st = self._command("merge", id=vid)
        value = res.value + st["pen_x"]
        finite = math.isfinite(value) and st["nonfinite"] == 0 and res.partial.extras.get("nonfinite", 0) == 0
        return st, value, finite, sharded_record(res, self.it, value, st["gsq"], None)

    def _start_point(self) -> dict[str, Any]:
        if self.precondition is not None:  # the columns' squares, for the owners' scaling
            self.src.shards.collective.call(sharded_column_squares, self.src.exchange)
        vid = self._new_id()
        st, value, finite, record = self._point(vid)
        if not finite:
            raise initial_divergence(value)
        self.f, self.g_id, self.gmax_g = value, vid, float(st["gmax"])
        self.gram[vid, vid] = st["gsq"]
        return record

    def _gmax(self) -> float:
        return self.gmax_g  # type: ignore[return-value]

    def _dot(self, a: int, coeffs: dict[int, float]) -> float:
        return sum(c * self.gram[a, k] for k, c in coeffs.items())

    def _direction(self) -> tuple[float, float]:
        """The two-loop recursion of :func:`dask_dgd.optim.lbfgs_direction` on the
        coefficients of ``q`` over the gradient and the pairs."""
        q, alphas = {self.g_id: 1.0}, []
        for sid, yid in reversed(self.pairs):
            a = self._dot(sid, q) / self.gram[sid, yid]  # type: ignore[arg-type]
            alphas.append(a)
            q[yid] = q.get(yid, 0.0) - a
        if self.pairs:
            sid, yid = self.pairs[-1]
            scale = self.gram[sid, yid] / self.gram[yid, yid]
            q = {k: v * scale for k, v in q.items()}
        for (sid, yid), a in zip(self.pairs, reversed(alphas)):
            b = self._dot(yid, q) / self.gram[sid, yid]  # type: ignore[arg-type]
            q[sid] = q.get(sid, 0.0) + (a - b)
        slope = -self._dot(self.g_id, q)  # type: ignore[arg-type]
        if not slope < 0:  # not a descent direction (rounding): steepest descent
            self.pairs, q = [], {self.g_id: 1.0}
            slope = -self.gram[self.g_id, self.g_id]  # type: ignore[index]
        self.direction = {int(k): -float(v) for k, v in q.items()}  # type: ignore[arg-type]
        return float(slope), math.sqrt(self.gram[self.g_id, self.g_id])  # type: ignore[index]

    def _live(self) -> tuple[int, ...]:
        return tuple(sorted({i for p in self.pairs for i in p} | {self.g_id} | {p[1] for p in self.points}))  # type: ignore[arg-type]

    def _try(self, t: float) -> tuple[bool, float, float, float, dict[str, Any]]:
        first = not self.trials  # the direction's first trial: the owners form the direction
        self._command("trial", t=float(t), **(dict(coeffs=self.direction, live=self._live()) if first else {}))
        vid = self._new_id()
        st, value, finite, record = self._point(vid)
        if not finite:
            return False, value, math.inf, math.inf, record
        self.points.append((t, vid, value, float(st["gmax"])))
        return True, value, float(st["slope"]), float(st["gmax"]), record

    def _move(self, accepted: float) -> bool:
        found = [p for p in self.points if p[0] == accepted and accepted > 0]
        if not found:
            return False
        t, vid, f_new, gmax_new = found[-1]
        sid, yid = self._new_id(), self._new_id()
        live = (*sorted({i for p in self.pairs for i in p}), vid, sid, yid)
        dots = self._command("accept", t=float(t), grad_id=vid, g_id=self.g_id, ids=(sid, yid), live=live)["dots"]
        for a, row in zip((sid, yid, vid), dots):
            for k, v in zip(live, row):
                self.gram[a, k] = self.gram[k, a] = float(v)
        if self.gram[sid, yid] > 1e-10 * self.gram[yid, yid]:
            self.pairs.append((sid, yid))
            del self.pairs[: -self.settings.memory]
        self.f, self.g_id, self.gmax_g = f_new, vid, gmax_new
        keep = {i for p in self.pairs for i in p} | {vid}
        self.gram = {k: v for k, v in self.gram.items() if k[0] in keep and k[1] in keep}
        self.points = []
        return True

    def result(self) -> tuple[Any, int, LbfgsSettings, None]:
        params, _ = self.src.gather("base", self.ctx.sparse_params)
        return params, self.it, self.settings, None

    def state_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self._STATE}, "gram": [[a, b, v] for (a, b), v in self.gram.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self._STATE:
            v = state[k]
            setattr(self, k, [tuple(p) for p in v] if k in ("trials", "points", "pairs") else v)
        if self.direction is not None:
            self.direction = {int(k): float(c) for k, c in dict(self.direction).items()}
        self.gram = {(int(a), int(b)): float(v) for a, b, v in state["gram"]}
        self._search = None

    def resume(self) -> Outcome:
        self.src.restore()
        return Outcome(accepted=False)


class ShardedAsync(AsyncTraining):
    """:class:`~..modes.async_.AsyncTraining` over sharded parameters: the owners are the
    parameter server (see :mod:`.async_`) and a :class:`~..modes.server.ShardedCore`
    actor coordinates on scalars.  The start is a synchronous sharded step (its
    evaluation and merge: the optimizer state of every owner, the automatic learning
    rate divided over the groups as in the unsharded mode).  Its checkpoints hold the
    coordinator's state and the owners' slices, read while the loops run: like the
    unsharded server's, a resumed fit continues the optimisation, not the sequence of
    updates (the owners' latest gradient slices start afresh)."""

    core_class = ShardedCore

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> ShardedAsync:
        return cls(ctx, settings.optimizer, max_staleness=settings.max_staleness,
                   staleness_scaling=settings.staleness_scaling)

    def __init__(self, ctx: FitContext, optimizer: FirstOrderOptimizer, *, max_staleness: int | None = None,
                 staleness_scaling: bool = False) -> None:
        super().__init__(ctx, np.zeros(0), optimizer, max_staleness=max_staleness,
                         staleness_scaling=staleness_scaling)
        self.src: ShardedSource = ctx.source

    def start(self) -> Outcome:
        ctx = self.ctx
        draw = None if ctx.batching is None else ctx.batching.draw(self.src.n_steps + 1)
        self.optimizer, res, stats = sharded_start(ctx, self.optimizer, draw, divide=len(self.active))
        self.step0 = self.src.n_steps
        value = res.value + stats.get("pen_x", 0.0) + stats.get("l1_x", 0.0)
        core = ShardedCore(self.optimizer, ctx.objective, len(self.active), self.src.layout.n_owners,
                           guard=self._guard(value), **self._core_kwargs())
        self.state = dict(vars(core))
        self._launch(self.state)
        return Outcome([sharded_record(res, 0, value, stats.get("gsq", 0.0), None, lr_halvings=core.guard.halvings)])

    def resume(self) -> Outcome:
        self.src.restore()
        self.state.setdefault("penalties", [0.0] * self.src.layout.n_owners)  # type: ignore[union-attr]  # (loaded)
        return super().resume()

    def loop_call(self, i: int, g: int, scratch_ref: GroupMemory | str | None,
                  server: ServerLink | _InProcessServer) -> tuple[Any, ...]:
        ctx, src = self.ctx, self.src
        ticket = Ticket(0, 0, self.optimizer, src.layout.n_owners, bool(self.staleness_scaling),
                        ctx.objective.penalty_spec)  # type: ignore[attr-defined]  # (a linear model's)
        return (sharded_async_loop, ctx.shards.handles[g], scratch_ref, server, i, ctx.objective, ctx.batching,
                ticket, src.exchange)

    def result(self) -> tuple[Any, int, FirstOrderOptimizer, Any]:
        out = self.out
        params, state = self.src.gather("current", self.ctx.sparse_params)
        return params, out["epochs"], out["optimizer"], state  # type: ignore[index]  # (finished)


def start_rows(params0: np.ndarray | sp.csr_matrix | None, rows: np.ndarray, width: int) -> np.ndarray:
    """The rows ``rows`` of the start's parameter matrix (``params0``: None for
    zeros, a flat vector, or a sparse row), flat."""
    if params0 is None:
        return np.zeros(rows.size * width)
    if sp.issparse(params0):
        return sp.csr_matrix(params0)[:, _flat(rows, width)].toarray().ravel().astype(np.float64)
    return np.asarray(params0, dtype=np.float64).reshape(-1, width)[rows].ravel()


class ShardedOnline(OnlineEpochs):
    """:class:`~..modes.online.OnlineEpochs` over sharded parameters (see :mod:`.online`):
    the same rounds, guard, records, stops and checkpoints; each group runs its passes
    on a compact copy of the columns its blocks touch, pulled from their owners, and
    pushes its change to them; the owners average their slices.  A round is two calls
    through the runner tree, each carrying only scalars to the driver, which holds no
    vector of the model's size until the result is assembled.

    The groups' changes are the unsharded groups' bit for bit, and each owner sums
    them in the groups' tree (the unsharded sum's additions, restricted to its range),
    so the coefficients are the unsharded ones bit for bit; the recorded loss differs
    by the rounding of the penalty summed over the owners.  A divergence that needs
    the previous round undone sends the owners back to the start of the last accepted
    round, which they keep.  The start is the unsharded one: a sample's loss at the
    start (per-row passes; the start's columns taken from ``params0`` on the driver), or
    the synchronous first step over sharded parameters (micro-batches).
    """

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> ShardedOnline:
        steps = 1 if ctx.batching is None else settings.local_steps
        return cls(ctx, settings.params0, settings.optimizer, local_steps=steps)

    def __init__(self, ctx: FitContext, params0: np.ndarray | sp.csr_matrix | None, optimizer: FirstOrderOptimizer,
                 *, local_steps: int) -> None:
        super().__init__(ctx, np.zeros(0), optimizer, local_steps=local_steps)
        self.src: ShardedSource = ctx.source
        self.start_params = params0
        self.pen = self._start_penalty(params0)  # the L2 penalty at the owners' current parameters
        self.attempts = 0  # rounds tried (the tag of their pushes)
        self.adopted = False  # whether the owners' pending parameters are the last accepted round's

    def _start_penalty(self, params0: np.ndarray | sp.csr_matrix | None) -> float:
        if params0 is None or self._l2 == 0.0:
            return 0.0
        if sp.issparse(params0):
            row = sp.csr_matrix(params0)
            coef = row.data[row.indices < self._n_pen]
        else:
            coef = np.asarray(params0, dtype=np.float64)[: self._n_pen]
        return 0.5 * self._l2 * float(coef @ coef)

    def start(self) -> Outcome:
        if self.pass_order:
            return self._sample_start()
        ctx, own = self.ctx, self.optimizer
        normalized = ctx.learning_rate == "auto" and own.online_rule == "normalized"
        opt, res, stats = sharded_start(ctx, own, ctx.batching.draw(self.src.n_steps + 1), init=False)
        self.optimizer = own if normalized else opt  # (normalized: its own rate, as unsharded)
        self.pen = float(stats.get("pen_x", 0.0))
        value = res.value + self.pen
        self.guard.start(value)
        self.step0 = self.src.n_steps
        return Outcome([sharded_record(res, 0, value, stats.get("gsq", 0.0), None, lr_halvings=self.guard.halvings)])

    def _sample_raw(self, lin: Any, X: Any) -> Any:
        """The sample's raw predictions from its columns of the start (the driver's ``params0``)."""
        cols, Xc = _compact(X)
        rows = np.append(cols, lin.n_features) if lin.fit_intercept else cols
        w = start_rows(self.start_params, rows, lin.n_outputs)
        return replace(lin, n_features=int(cols.size)).raw_prediction(w, Xc)

    def _penalty_value(self, params: np.ndarray) -> float:
        """The L2 penalty at the owners' current parameters (their sum over the slices)."""
        return self.pen

    def _round_value(self, total: Partial) -> float:
        if self.pass_order:
            return super()._round_value(total)
        weight = total.extras["first_weight"]  # the first micro-batches' loss at the round's start
        return total.loss_sum / weight + self.pen if weight > 0 else self.pen

    def _passes(self, draws: list[Draw] | None, compression: Any) -> Partial:
        ctx, src = self.ctx, self.src
        self.attempts += 1
        request = OnlineRound(src.version, self.attempts, src.exchange)  # type: ignore[arg-type]  # (started)
        total = ctx.shards.collective.reduce_groups(
            sharded_pass, ctx.objective, self.rule, request, self.reset, self.rounds, draws, tuple(ctx.seed),
            self.guard.limit(batch=True), self._weight_scale, split_every=src.split_every, step=src.n_steps + 1,
            size=0)
        self.adopted = False  # the pulls made the owners' pending parameters current
        return total

    def _owners(self, fn: Any, *args: Any) -> dict[str, Any]:
        """``fn(shard, scratch, penalty, *args)`` on every owner; their scalars summed."""
        src = self.src
        return src.shards.collective.reduce_groups(fn, self.ctx.objective.penalty_spec, *args,  # type: ignore[attr-defined]
                                                   split_every=src.split_every, size=0).extras

    def _propose(self, total: Partial, change: Any, weight: float) -> tuple[Any, bool]:
        cmd = OnlineAverage(self.src.version + 1, self.attempts, self.rule.average, weight, total.extras["scale"],
                            self.src.split_every)
        stats = self._owners(online_average, cmd)
        return stats, stats["nonfinite"] == 0

    def _adopt(self, avg: Any) -> float:
        self.src.version += 1  # the next round's pulls commit it
        self.adopted = True
        if avg is None:  # (the round's rows all weighed zero: the same point, its start the one to go back to)
            self._owners(online_keep, self.src.version)
            return 0.0
        self.pen = float(avg["pen"])
        return math.sqrt(avg["move_sq"])

    def _go_back(self, prev: dict[str, Any]) -> None:
        self.src.version += 1
        self.pen = float(self._owners(online_undo, self.src.version)["pen"])
        self.adopted = False

    def _round_bytes(self, traffic: dict[str, Any], total: Partial) -> Bytes:
        pushed = int(total.extras.get("bytes_pushed", 0))
        return Bytes(pushed, pushed, int(total.extras.get("bytes_pulled", 0)))

    def result(self) -> tuple[Any, int, FirstOrderOptimizer, None]:
        params, _ = self.src.gather("pending" if self.adopted else "current", self.ctx.sparse_params)
        return params, -(-self._steps_after(self.rounds) // self.steps_per_epoch), self.optimizer, None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pen": self.pen, "attempts": self.attempts, "adopted": self.adopted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pen, self.attempts, self.adopted = float(state["pen"]), int(state["attempts"]), bool(state["adopted"])

    def resume(self) -> Outcome:
        self.src.restore()
        return super().resume()

"""``solver="online"``: compiled local epochs on the groups, averaged each round.

Each round broadcasts the parameters; every group runs, in one compiled kernel
(:mod:`dask_dgd.losses._online`, Numba, ``nogil``), per-row SGD over all its rows
(``batch_size=None``: one pass, blocks in index order, each block's rows in an order
seeded by ``(seed, ONLINE_TAG, round, block)``), or ``local_steps`` micro-batch updates
on its shares of the synchronous mode's mini-batches (``batch_size`` given: the same
draws as ``solver="sgd"``, so one group with plain SGD takes the synchronous steps).
A row costs O(nnz): the L2 decay is a running scale (plain SGD) or lazy per entry at
the entry's own adaptive rate (the adaptive rules: the fixed point of per-row passes
is the penalised optimum; :mod:`~dask_dgd.losses._online` names where it is not yet),
the rule's per-feature state
(AdaGrad accumulators, the normalized rule's feature scales) stays on the group
between rounds, and the group sends only the entries its rows touched.

The groups' models are then averaged in the groups' fixed tree (Vowpal Wabbit's
AllReduce recipe): by sample weight for plain SGD (as local SGD), entry by entry by the
groups' summed squared gradients for the adaptive rules.  Everything else (the guard
and its backoff, the round records, the epoch stopper, checkpoints of the groups'
state, retries after a lost worker) is local SGD's (:class:`~.local.LocalSGD`).

A fit is deterministic for a given placement: row orders are seeded, the kernel's
operations are in a fixed order, and the groups' sums are taken in the fixed tree.
After a lost worker the round is retried on the recomputed blocks with every group's
runner restarted: each group starts its rule state afresh (update count, AdaGrad
accumulators, feature scales) from the round's broadcast model, so the fit goes on but
not with the bits of an uninterrupted one.  Another grouping (more workers) gives
another fit, as local SGD.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ...exceptions import ParameterError
from ...losses._online import OnlinePass, OnlineRule, RoundChange, average_changes
from ...optim import InverseScaling, InverseTime, Schedule
from ..objective import LIPSCHITZ_SAMPLE_ROWS, gather_sample
from ..runtime.faults import inject_faults
from ..runtime.records import Bytes, Timing, make_record
from ..runtime.reduce import Partial, SparseVector
from ..solvers.base import Outcome
from ..update import initial_divergence
from .local import LocalSGD, check_round_estimate, compress_round, diverged_loss, round_partial

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...optim import FirstOrderOptimizer
    from ..data.blocks import Shard
    from ..objective import LinearTraining
    from ..protocols import FitContext
    from ..runtime.group_steps import Draw, GroupMemory, LocalUpdate
    from ..runtime.reduce import Compressed
    from ..solvers.base import Settings
    from ..update import UpdateRule
    from .local import RoundCompression

__all__ = ["ONLINE_TAG", "OnlineEpochs", "change_vector", "group_pass", "online_rule", "pass_partial", "run_pass"]

#: Stream tag of the per-round row orders (apart from the mini-batch and compression draws).
ONLINE_TAG = 104729


def online_rule(optimizer: FirstOrderOptimizer) -> OnlineRule:
    """The compiled passes' rule of ``optimizer`` (its ``online_rule`` trait and
    learning rate: a float, a :class:`~dask_dgd.optim.Constant`, an
    :class:`~dask_dgd.optim.InverseScaling` or an :class:`~dask_dgd.optim.InverseTime`
    schedule)."""
    name = optimizer.online_rule
    if name is None:
        raise ParameterError(f"optimizer {optimizer!r} has no per-row rule for solver='online'")
    lr = optimizer.learning_rate  # type: ignore[attr-defined]  # (every first-order optimizer has one)
    t0 = 1.0
    if isinstance(lr, InverseScaling):
        eta0, power_t = lr.init_value, lr.power_t
    elif isinstance(lr, InverseTime):
        eta0, power_t, t0 = lr.init_value, 1.0, lr.offset
    else:
        eta0, power_t = float(lr(0)) if isinstance(lr, Schedule) else float(lr), 0.0
    a0 = float(getattr(optimizer, "initial_accumulator_value", 0.0)) if name == "adagrad" else 0.0
    eps = float(getattr(optimizer, "eps", 0.0)) if name == "adagrad" else 0.0
    return OnlineRule(name, float(eta0), float(power_t), a0, eps, float(t0))


def _draw_rows(shard: Shard, draw: Draw) -> list[tuple[Any, np.ndarray]]:
    """The group's blocks and rows of ``draw`` (as :meth:`LinearTraining.group_sums` draws them)."""
    out = []
    for b in shard.blocks:
        k = int(draw.take[b.index])  # type: ignore[index]  # (RowBatches' draws: an allocation per block)
        if k == 0:
            continue
        rng = np.random.default_rng([*draw.seed, draw.step, b.index])
        out.append((b, np.sort(rng.choice(b.n_rows, size=k, replace=False))))
    return out


def _updates_key(first_block: int) -> str:
    """The extras' key of the updates of the group whose first block is ``first_block``."""
    return f"updates@{first_block}"


def run_pass(shard: Shard, scratch: GroupMemory, obj: Any, l2: float, rule: OnlineRule, params: np.ndarray,
             reset: bool, round_: int, draws: Sequence[Draw] | None, seed: tuple[int, ...], limit: float,
             weight_scale: float, buffers: dict[str, Any],
             X_of: Callable[[Any], Any]) -> tuple[RoundChange, int, float]:
    """The compiled round of :func:`group_pass` on the group's blocks (``X_of(block)``:
    the block's X as the pass reads it; ``obj`` the model it has the layout of) from
    ``params``: ``(change, status, the rule's rate at the last update)``, status 0 when
    the pass ran to its end (see :class:`~dask_dgd.losses._online.OnlinePass`).  The rule
    state from the group's previous round is in ``scratch.modes["online"]`` (``reset``:
    start it afresh; a retried round starts from its own start again)."""
    memory = None if reset else scratch.modes.get("online")
    if memory is not None and memory["round"] == round_:  # a retry of this round: from its start again
        state = memory["start"]
    else:
        state = None if memory is None else memory["state"]
    p = OnlinePass(obj, l2, rule, params, state=state, buffers=buffers, micro=1 if draws is None else 0,
                   limit=limit, weight_scale=weight_scale)
    status = 0
    if draws is None:
        for b in sorted(shard.blocks, key=lambda blk: blk.index):
            order = np.random.default_rng([*seed, ONLINE_TAG, round_, b.index]).permutation(b.n_rows)
            status = p.block(X_of(b), b.y, b.sample_weight, order)
            if status:
                break
    else:
        for draw in draws:
            parts = _draw_rows(shard, draw)
            for j, (b, rows) in enumerate(parts):
                status = p.block(X_of(b), b.y, b.sample_weight, rows, apply_last=j == len(parts) - 1)
                if status:
                    break
            if status:
                break
    change = p.finish()
    scratch.modes["online"] = {"round": round_, "start": state, "state": p.state}
    return change, status, rule.rate(p.state["t"])


def pass_partial(shard: Shard, change: RoundChange, status: int, rate: float, sent: Any, t0: float,
                 wall0: float) -> Partial:
    """What a group returns from its round (see :func:`group_pass`): ``sent`` (its
    change, or nothing where the owners received it) with the round's scalars."""
    weight = change.weight_sum
    mean = change.loss_sum / weight if weight > 0 else math.nan
    first = Partial(change.first_loss, None, change.first_weight, 0.0, 0.0)  # type: ignore[arg-type]  # (no gradient)
    inject_faults(t0)
    dt = time.perf_counter() - t0
    part = round_partial(sent, weight, first, dt, wall0, status == 0, mean if status == 2 else math.nan)
    part.extras[_updates_key(min((b.index for b in shard.blocks), default=-1))] = float(change.updates)
    part.extras.update(scale=weight * change.sigma, rate=rate, progressive=change.loss_sum,
                       progressive_weight=weight, bad_rows=1.0 if status == 1 else 0.0)
    return part


def group_pass(shard: Shard, scratch: GroupMemory, objective: LinearTraining, rule: OnlineRule, params: np.ndarray,
               reset: bool, round_: int, draws: Sequence[Draw] | None, seed: tuple[int, ...],
               limit: float = math.inf, compression: RoundCompression | None = None,
               weight_scale: float = 1.0) -> Partial:
    """One round on this group (worker side): a pass over its rows (``draws`` None) or
    one micro-batch update per draw, from ``params``; the rule state from the group's
    previous round is in ``scratch.modes["online"]`` (``reset``: start it afresh).

    Answers a :class:`~..runtime.reduce.Partial` (as :func:`~.local.round_partial`)
    whose gradient is the group's change, sparse: ``n_g * delta`` (plain SGD) or
    ``[cw * delta, cw]`` (adaptive rules), with ``extras["scale"] = n_g * sigma``
    and the progressive loss sums.  A non-finite row loss or a progressive mean above
    ``limit`` stops the pass: the group diverged.  ``compression`` (plain SGD's
    sample-weighted changes only): the change ``n_g * delta`` is sent compressed, with
    the compressor's memory in ``scratch`` as local SGD's rounds keep it."""
    wall0, t0 = time.time(), time.perf_counter()
    if compression is not None and compression[0].accumulates:
        check_round_estimate(scratch, compression[3])
    obj = objective.objective
    change, status, rate = run_pass(shard, scratch, obj, objective.penalty_spec.l2_strength, rule, params, reset,
                                    round_, draws, seed, limit, weight_scale,
                                    scratch.objective.setdefault("online", {}), lambda b: b.X)
    n, weight = obj.n_params, change.weight_sum
    if compression is not None and status == 0:  # (only with the sample-weighted average: resolve_solver)
        dense = np.zeros(n)
        dense[change.idx] = weight * change.delta
        sent: SparseVector | Compressed = compress_round(shard, scratch, compression, objective, dense)
    else:
        sent = change_vector(change, rule, n)
    return pass_partial(shard, change, status, rate, sent, t0, wall0)


def change_vector(change: RoundChange, rule: OnlineRule, n: int) -> SparseVector:
    """A group's change as the averaging sums it: ``n_g * delta`` (plain SGD, ``n``
    entries) or ``[cw * delta, cw]`` (adaptive rules, ``2n``)."""
    if rule.average == "samples":
        return SparseVector(change.idx, change.weight_sum * change.delta, n)
    return SparseVector(np.concatenate([change.idx, change.idx + n]),
                        np.concatenate([change.cw * change.delta, change.cw]), 2 * n)


class OnlineEpochs(LocalSGD):
    """``solver="online"``'s rounds (see the module docstring): local SGD's loop with
    compiled passes on the groups.

    An epoch is one pass over the rows (``batch_size`` None: one round), or
    ``steps_per_epoch`` micro-batches per group as in local SGD.  The round's
    objective is the groups' progressive mean loss (each row scored before its update)
    plus the penalty at the broadcast parameters (pass order), or the first
    micro-batches' loss (draw order, as local SGD)."""

    group_state = ("online", "round_compression")
    label = "online SGD"

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> OnlineEpochs:
        steps = 1 if ctx.batching is None else settings.local_steps
        return cls(ctx, settings.params0, settings.optimizer, local_steps=steps)

    @property
    def pass_order(self) -> bool:
        return self.ctx.batching is None

    @property
    def value_at_start(self) -> bool:  # type: ignore[override]  # (a class attribute in LocalSGD)
        """Per-row passes' value is the progressive loss, measured during the round."""
        return not self.pass_order

    def start(self) -> Outcome:
        if not self.pass_order:  # the synchronous first step (the draws' parity with solver="sgd")
            own = self.optimizer
            out = super().start()
            if self.ctx.learning_rate == "auto" and own.online_rule == "normalized":
                self.optimizer = own  # its own rate: the synchronous heuristic's depends on the columns' units
            return out
        return self._sample_start()

    def _sample_start(self) -> Outcome:
        """The start without a distributed pass: the objective on an even sample of rows
        (the guard's reference and record 0), and ``learning_rate="auto"``."""
        ctx, src = self.ctx, self.ctx.source
        obj = ctx.objective
        lin = obj.objective  # type: ignore[attr-defined]  # (the support rule: a linear model)
        t0 = time.perf_counter()
        sample = gather_sample(ctx.shards, LIPSCHITZ_SAMPLE_ROWS)
        if sample is None:
            raise ParameterError("solver='online' needs rows to train on; the data has none")
        X, y, w = sample
        with np.errstate(all="ignore"):  # (the loss only: no gradient pass over the d columns)
            raw = self._sample_raw(lin, X)  # (offset columns included)
            losses, _ = lin.loss.loss_gradient(y, np.asarray(raw), np)
        weight = float(np.sum(w))
        pen = self._penalty_value(self.params)
        value = float(np.asarray(losses).ravel() @ w) / weight + pen if weight > 0 else pen
        if not math.isfinite(value):
            obj.check_data(ctx.shards)  # names the block with NaN or inf, if one has
            raise initial_divergence(value)
        if ctx.learning_rate == "auto" and self.optimizer.online_rule == "sgd":
            eta, lam = self._auto_rate(X, w * self._weight_scale, obj), self._l2
            # Bottou's rate for an L2-strongly convex objective: the safe step first, then 1 / (lam t)
            self.optimizer = self.optimizer.with_learning_rate(InverseTime(eta, 1.0 / (eta * lam)) if lam > 0 else eta)
        self.guard.start(value)
        self.step0 = src.n_steps
        record = make_record(step=src.n_steps, iteration=0, loss=value, grad_norm=math.nan, step_size=None,
                             timing=Timing(time.perf_counter() - t0, 0.0, 0.0), n_samples=weight,
                             updates_per_group=(0,) * ctx.shards.n_groups, nbytes=Bytes(0, 0, 0),
                             lr_halvings=self.guard.halvings)
        return Outcome([record])

    def _sample_raw(self, lin: Any, X: Any) -> Any:
        """The model's raw predictions of the start's sample ``X`` at the start's parameters."""
        return lin.raw_prediction(self.params, X)

    def _auto_rate(self, X: Any, w: np.ndarray, obj: Any) -> float:
        """Per-row SGD's safe step: 1 / (the loss's curvature bound x the largest squared
        row norm of the sample, each row's times its weight ``w`` (of mean 1 over the
        data), + the L2 strength)."""
        curvature = getattr(obj.objective.loss, "curvature_bound", None)
        if curvature is None:
            raise ParameterError(
                f"learning_rate='auto' with optimizer='sgd' needs a loss with a curvature bound; "
                f"{type(obj.objective.loss).__name__} has none: pass a learning rate, or use optimizer='normalized'"
            )
        sq = X.multiply(X).sum(axis=1) if hasattr(X, "multiply") else np.einsum("ij,ij->i", X, X)
        sq = np.asarray(sq, dtype=np.float64).ravel() + float(obj.objective.fit_intercept)
        top = float(np.max(sq * np.asarray(w, dtype=np.float64).ravel()))
        return 1.0 / (curvature * max(top, 1e-12) + obj.penalty_spec.l2_strength)

    def _round(self, rule: UpdateRule, draws: list[Draw | None], local: LocalUpdate | None,
               compression: RoundCompression | None) -> Partial:
        ctx, obj = self.ctx, self.ctx.objective
        self.rule = online_rule(self.optimizer)
        lam = self._l2
        if self.rule.name == "sgd" and self.rule.eta0 * lam >= 1.0:
            raise ParameterError(
                f"solver='online' with optimizer='sgd' decays the coefficients by 1 - learning_rate * alpha a row; "
                f"learning_rate {self.rule.eta0:g} x alpha {lam:g} >= 1 would zero or flip them: lower the learning "
                "rate (learning_rate='auto' takes a safe one)"
            )
        total = self._passes(None if self.pass_order else draws, compression)  # type: ignore[arg-type]  # (RowBatches' draws)
        if total.extras.get("bad_rows", 0.0) > 0:  # a row's loss was not finite: name the block if its data is bad
            obj.check_data(ctx.shards)
        return total

    def _passes(self, draws: list[Draw] | None, compression: RoundCompression | None) -> Partial:
        """The groups' compiled passes of the round (:func:`group_pass`), summed in their tree."""
        ctx, src, obj = self.ctx, self.ctx.source, self.ctx.objective
        size = obj.n_params * (1 if self.rule.average == "samples" else 2)
        return ctx.shards.collective.reduce_groups(
            group_pass, obj, self.rule, self.params, self.reset, self.rounds, draws, tuple(ctx.seed),
            self.guard.limit(batch=True), compression, self._weight_scale,
            split_every=src.split_every, step=src.n_steps + 1, size=size, dense=compression is not None)

    @property
    def _l2(self) -> float:
        """The L2 strength (the support rule: a linear model's penalty)."""
        return float(self.ctx.objective.penalty_spec.l2_strength)  # type: ignore[attr-defined]  # (a linear model's)

    @property
    def _weight_scale(self) -> float:
        """The data's rows over its total sample weight: the passes' weights of mean 1."""
        shards = self.ctx.shards
        total = float(shards.totals.get("weight_sum", 0.0))
        rows = float(np.sum(shards.block_rows))
        return rows / total if total > 0 and rows > 0 else 1.0

    def _updates_per_group(self, total: Partial, n_local: int) -> tuple[int, ...]:
        """The rows (per-row passes) or micro-batches each group updated on."""
        return tuple(int(total.extras.get(_updates_key(min(g, default=-1)), 0)) for g in self.ctx.shards.groups)

    def _divergence(self, total: Partial, value: float, where: str, start_bad: bool) -> str:
        """The guard's words for a diverged round; in per-row passes the round's value is
        the progressive loss, measured during the passes (not at the round's start)."""
        if not self.pass_order:
            return super()._divergence(total, value, where, start_bad)
        loss, count = diverged_loss(total)
        n = self.ctx.shards.n_groups
        if count:
            who = "the group" if n == 1 else f"{count} of {n} groups"
            return f"{self.label} diverged {where}: {who} stopped {'its' if n == 1 else 'their'} pass at a " \
                   f"progressive loss of {loss}"
        if not math.isfinite(value) or value > self.guard.limit():
            return f"{self.label} diverged {where} (progressive loss {value} during the round's passes)"
        return f"{self.label} diverged {where}: the averaged parameters are not finite"

    def _round_rate(self, total: Partial) -> float:
        """The groups' mean base rate at their last update (the rate falls per row, not per round)."""
        return total.extras["rate"] / self.ctx.shards.n_groups

    def _round_value(self, total: Partial) -> float:
        if not self.pass_order:
            return super()._round_value(total)
        weight = total.extras["progressive_weight"]
        pen = self._penalty_value(self.params)
        return total.extras["progressive"] / weight + pen if weight > 0 else pen

    def _penalty_value(self, params: np.ndarray) -> float:
        """The L2 penalty at ``params`` (as ``Penalty.smooth_value_gradient``'s value, without its gradient)."""
        strength = self._l2
        if strength == 0.0:
            return 0.0
        coef = params[: self._n_pen]
        return 0.5 * strength * float(coef @ coef)

    @property
    def _n_pen(self) -> int:
        lin = self.ctx.objective.objective  # type: ignore[attr-defined]  # (a linear model's)
        return int(lin.n_features * lin.n_outputs)

    def _average(self, total: Partial, change: Any, weight: float) -> np.ndarray:
        if isinstance(change, SparseVector):
            idx, values = change.entries()
        else:  # (the groups' entries covered more than half the vector: summed dense)
            idx = np.flatnonzero(change)
            values = change[idx]
        return average_changes(self.params, self._n_pen, self.rule.average, idx, values, weight,
                               total.extras["scale"])

    def _bytes_up(self, traffic: dict[str, Any], n_bytes: int) -> tuple[int, int]:
        if self.ctx.compressor is not None:
            return super()._bytes_up(traffic, n_bytes)
        sent = int(traffic.get("bytes_up", 0)) or n_bytes
        return sent, sent

"""Local SGD: several optimizer steps per group between averagings.

Each *round* broadcasts the parameters; every group takes ``local_steps`` steps of its
own optimizer (whose state stays on the group's worker between rounds) on its own
blocks, and the new parameters of the groups are averaged, weighted by the sample
weight each group saw.  An optional *outer* optimizer then moves the parameters along
the averaged delta (server momentum); without one the average is the new parameters.

Mini-batches are the groups' shares of the synchronous mode's global batches (the
same :func:`~.sync.batch_allocation` and per-block seeds), so with ``local_steps=1``
and plain SGD a round is exactly a synchronous mini-batch step.
"""

import math
import time
from dataclasses import dataclass

import numpy as np

from ..exceptions import DivergenceError
from .shards import batch_sums, inject_faults, releases_shards_on_error, sum_in_block_order
from .sync import MAX_BACKOFFS, EpochStopper, FitResult, batch_allocation, divergence_message, first_order_start

__all__ = ["LocalRound", "shard_local_round", "run_local"]


@dataclass(frozen=True)
class LocalRound:
    """What one group returns from a round.

    ``params_sum`` is the group's final parameters times ``weight`` (the sample weight
    of all its local batches); ``loss_sum``/``loss_weight`` are the sums of its first
    local batch, at the broadcast parameters.
    """

    params_sum: np.ndarray
    weight: float
    loss_sum: float
    loss_weight: float
    time: float
    start: float
    end: float
    finite: bool


def shard_local_round(shard, scratch, objective, penalty, params, optimizer, reset, takes, seed, step0, decay_mask):
    """``len(takes)`` optimizer steps on this group's blocks from ``params`` (worker side).

    ``takes[j]`` gives the rows of every block in local step ``j`` (global step
    ``step0 + j``), or None for all rows.  The optimizer state is kept in ``scratch``
    (the group runner's memory) across rounds; ``reset`` starts it afresh.
    """
    wall0, t0 = time.time(), time.perf_counter()
    state = None if reset else scratch.get("local_state")
    if state is None:
        state = optimizer.init(params)
    p = np.array(params, dtype=np.float64, copy=True)
    first, total, finite = None, 0.0, True
    for j, take in enumerate(takes):
        loss, grad, weight = sum_in_block_order(
            batch_sums(shard, objective, p, seed, step0 + j, take), objective.n_params
        )
        if first is None:
            first = (loss, weight)
        if weight <= 0:
            continue  # only zero-weight rows drawn: no information
        total += weight
        _, pen_grad = penalty.smooth_value_gradient(p, objective)
        g = grad / weight + pen_grad
        if not (math.isfinite(loss) and np.all(np.isfinite(g))):
            finite = False
            break
        lr = optimizer.current_learning_rate(state)
        updates, state = optimizer.update(g, state, p, decay_mask=decay_mask)
        p = p + updates
        if penalty.has_l1:
            p = penalty.prox(p, lr, objective)
    scratch["local_state"] = state
    inject_faults(t0)
    dt = time.perf_counter() - t0
    return LocalRound(total * p, total, first[0], first[1], dt, wall0, wall0 + dt, finite)


def _takes(shards, batch_size, seed, step0, local_steps):
    if batch_size is None or batch_size >= shards.n_rows:
        return [None] * local_steps
    return [
        batch_allocation(shards.block_rows, batch_size, (*seed, step0 + j))
        for j in range(local_steps)
    ]


@releases_shards_on_error
def run_local(
    evaluator,
    params0,
    optimizer,
    *,
    local_steps,
    outer_optimizer=None,
    max_iter,
    tol,
    batch_size=None,
    seed=(0,),
    learning_rate="auto",
    on_divergence="backoff",
):
    """Local SGD rounds until ``max_iter`` epochs, the ``tol`` criterion or the time limit.

    An epoch is ``ceil(n_rows / batch_size)`` local steps per group (one step with full
    batches), so ``max_iter`` means the same passes over the data as in the synchronous
    mode.  Stopping on ``tol`` follows synchronous mini-batch training
    (:class:`~.sync.EpochStopper`), on the round objectives (each round's first local
    batches, at the broadcast parameters).
    A NaN/inf round restores the round's starting parameters, halves the learning rate
    and restarts the local optimizer states; ``MAX_BACKOFFS`` halvings in a row raise
    :class:`~dask_dgd.exceptions.DivergenceError`.
    """
    obj, pen, shards, monitor = evaluator.objective, evaluator.penalty, evaluator.shards, evaluator.monitor
    decay_mask = pen.mask(obj)
    full_batch = batch_size is None or batch_size >= shards.n_rows
    steps_per_epoch = 1 if full_batch else math.ceil(shards.n_rows / batch_size)
    # every group takes max_iter epochs of local steps; the last round may be shorter
    total_steps = max_iter * steps_per_epoch
    total_rounds = math.ceil(total_steps / local_steps)

    def steps_after(n_rounds):
        return min(total_steps, n_rounds * local_steps)

    def epochs_done(n_rounds):
        return steps_after(n_rounds) // steps_per_epoch
    seed = tuple(seed)
    params = np.array(params0, dtype=np.float64, copy=True)

    # The start: one synchronous step for the learning rate and the data checks; the
    # first round reuses its batch (as the synchronous mode's first update does).
    optimizer = first_order_start(
        evaluator, params, optimizer, batch_size=batch_size, seed=seed, learning_rate=learning_rate
    )
    outer_state = None if outer_optimizer is None else outer_optimizer.init(params)
    step0 = evaluator.n_steps
    n_bytes = 2 * 8 * obj.n_params * shards.n_groups

    max_backoffs = 0 if on_divergence == "raise" else MAX_BACKOFFS
    rounds, backoffs, reset, converged, message = 0, 0, True, False, ""
    local_count = 0  # local updates since the local states were (re)started
    stopper = EpochStopper(tol)
    last_end = None
    while rounds < total_rounds:
        t0, wall0 = time.perf_counter(), time.time()
        update_time = None if last_end is None else t0 - last_end
        step = step0 + rounds * local_steps
        n_local = steps_after(rounds + 1) - steps_after(rounds)
        results = shards.call_groups(
            shard_local_round,
            obj,
            pen,
            params,
            optimizer,
            reset,
            _takes(shards, batch_size, seed, step, n_local),
            seed,
            step,
            decay_mask,
            name=f"local-{rounds}",
        )
        wall1 = time.time()
        weight = sum(r.weight for r in results)
        loss_weight = sum(r.loss_weight for r in results)
        finite = all(r.finite for r in results)
        if finite and weight > 0:
            avg = sum(r.params_sum for r in results) / weight  # fixed (group) order
            finite = bool(np.all(np.isfinite(avg)))
        elif finite:  # the round drew only zero-weight rows: no information, no move
            avg = params
        if not finite:
            backoffs += 1
            if backoffs > max_backoffs:
                raise DivergenceError(divergence_message(f"local SGD diverged in round {rounds + 1}", max_backoffs))
            optimizer, reset, local_count = optimizer.scale_learning_rate(0.5), True, 0
            continue
        backoffs, reset = 0, False
        pen_value, _ = pen.smooth_value_gradient(params, obj)
        loss = sum(r.loss_sum for r in results) / loss_weight if loss_weight > 0 else 0.0
        value = loss + pen_value + pen.l1_value(params, obj)
        lr = optimizer._learning_rate_at(local_count)  # the groups' first local step
        delta = params - avg
        if outer_optimizer is None:
            new_params = avg
        else:
            updates, outer_state = outer_optimizer.update(delta, outer_state, params)
            new_params = params + updates
        rounds += 1
        local_count += n_local
        epoch = -(-steps_after(rounds) // steps_per_epoch)
        last_end = time.perf_counter()
        times = [r.time for r in results]
        evaluator.n_steps += 1
        monitor.record(
            step=evaluator.n_steps,
            iteration=epoch,
            loss=float(value),
            grad_norm=float(np.linalg.norm(delta)),
            step_size=lr,
            step_time=last_end - t0,
            compute_time_max=max(times),
            compute_time_min=min(times),
            broadcast_time=max(0.0, max(r.start for r in results) - wall0),
            reduce_time=max(0.0, wall1 - max(r.end for r in results)),
            update_time=update_time,
            n_samples=weight,
            staleness_max=0,
            staleness_mean=0.0,
            delay_max=0,
            delay_mean=0.0,
            wait_time=max(times) - min(times),
            updates_per_group=(n_local,) * len(results),
            comm_bytes=n_bytes,
            bytes_up_raw=n_bytes // 2,
            bytes_up=n_bytes // 2,
            bytes_down=n_bytes // 2,
        )
        params = new_params
        if monitor.stop_requested:
            converged = True
            break
        if evaluator.out_of_time():
            message = evaluator.time_message()
            break
        if stopper.add(value, epochs_done(rounds)):
            converged = True
            break
    return FitResult(
        params=params,
        n_iter=-(-steps_after(rounds) // steps_per_epoch),
        converged=converged,
        n_steps=evaluator.n_steps,
        optimizer=optimizer,
        message=message or ("" if converged else f"reached max_iter={max_iter}"),
    )

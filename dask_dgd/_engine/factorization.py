"""Matrix factorization by distributed gradient descent, with model parallelism.

Ratings are partitioned by user into shards balanced by their number of ratings (not
of users: a few power users hold a large share of the ratings).  Each shard lives on one
worker, in a :class:`~.cluster.GroupRunner` actor, together with **its users' factors and
their optimizer state**: these never travel.  A step sends the item table ``V`` to every
shard; each shard computes its loss and gradient sums, updates its own users' factors
with the optimizer, and sends back the gradient rows of the items its ratings touched
(row-sparse, or dense when that is smaller).  The driver adds the shards' item
gradients in shard order, divides once and updates ``V``.

A user's ratings are all in one shard, in a fixed order, so user gradients do not
depend on the sharding at all and item gradients only through the order in which the
shards' sums are added (floating-point tolerance).  Mini-batches are drawn by hashing
each rating's key with the seed and the epoch (:func:`~dask_dgd.losses._factorization.batch_buckets`),
so they are the same ratings however the data is sharded.

Arrays other than NumPy (CuPy on a GPU): when the ratings come as a dask array of
pairs whose blocks are of another array-API namespace, the ids are still mapped on the
host (through pandas), but a zero-length array cut from a real input block on a worker
(:func:`block_like`; the dask meta may be NumPy) travels to every shard, and the shard
puts its rating arrays, its users' factors and their optimizer state in that namespace,
on that device.  Each step the item table (and the items' Gram matrix) is copied to the
shard's device once; the kernels run there (their array-API versions); what comes back
to the driver is NumPy: the touched item-gradient rows, the users' Gram matrix and a few
numbers.  The driver's item table and optimizer state, and everything exported at the
end of a fit, stay NumPy.
"""

import math
import time
import uuid
from dataclasses import dataclass

import array_api_compat
import numpy as np
import pandas as pd

from .._backend import asarray_like, get_namespace, to_numpy
from ..exceptions import ClusterError, DivergenceError, InputError
from ..losses import _factorization as kernels
from .shards import ShardSet, inject_faults, releases_shards_on_error
from .sync import EpochStopper

__all__ = [
    "FactorModel",
    "ShardResult",
    "block_like",
    "check_scan",
    "frame_parts",
    "scan",
    "RatingShard",
    "build_rating_shards",
    "init_rows",
    "run_factorization",
    "export_users",
]

#: Rows per block of the seeded initial factors (a row depends only on its id).
INIT_BLOCK = 4096


def init_rows(seed, ids, width, scale, bias):
    """Initial factor rows of the given global ids: ``N(0, scale^2)``, bias column 0.

    Row ``i`` is drawn from a generator seeded by ``(seed, i // INIT_BLOCK)``, so it is
    the same on whichever shard (or the driver) creates it.
    """
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty((ids.size, width))
    if ids.size == 0:
        return out
    blocks = ids // INIT_BLOCK
    for b in np.unique(blocks):
        sel = blocks == b
        table = np.random.default_rng([int(seed), 17, int(b)]).normal(0.0, scale, size=(INIT_BLOCK, width))
        out[sel] = table[ids[sel] - b * INIT_BLOCK]
    if bias:
        out[:, -1] = 0.0
    return out


@dataclass(frozen=True)
class FactorModel:
    """What a shard needs to know about the model (pure settings, picklable).

    ``kind`` is ``"explicit"``, ``"bpr"`` or ``"wls"``; ``mu`` the global mean rating
    (explicit); ``n_items`` the size of the item table.
    """

    kind: str
    n_components: int
    alpha: float
    alpha_bias: float
    confidence_scale: float
    init_scale: float
    mu: float
    n_items: int
    seed: int

    @property
    def user_bias(self):
        return self.kind == "explicit"

    @property
    def item_bias(self):
        return self.kind in ("explicit", "bpr")

    @property
    def user_width(self):
        return self.n_components + self.user_bias

    @property
    def item_width(self):
        return self.n_components + self.item_bias


class RatingShard:
    """The ratings of a set of users, sorted by (user, item, rating).

    ``users`` are the shard's users (global indices, sorted; always NumPy); ``lu`` each
    rating's local user index, ``gi`` its global item index, ``r`` its value, ``key`` its
    hash key ``user * n_items + item`` (sorted) and ``uptr`` the start of each local
    user's ratings.  Built from NumPy arrays; with ``like`` (an array of another
    namespace, see :func:`block_like`) the rating arrays are then moved to its namespace
    and device, where the shard's factors will live too.
    """

    def __init__(self, users, lu, gi, r, n_items, like=None):
        self.users = users
        key = users[lu].astype(np.uint64) * np.uint64(n_items) + gi.astype(np.uint64)
        uptr = np.searchsorted(lu, np.arange(users.size + 1)).astype(np.int64)
        self.like = like
        move = (lambda a: a) if like is None else (lambda a: asarray_like(a, like))
        self.lu, self.gi, self.r, self.key, self.uptr = (move(a) for a in (lu, gi, r, key, uptr))

    @property
    def n_rows(self):
        return int(self.r.shape[0])

    def to_shard(self, a):
        """A NumPy array (parameters sent by the driver) in the shard's namespace and device."""
        return a if self.like is None or a is None else asarray_like(a, self.like)


# ------------------------------------------------------------------------- setup
def scan_part(df, user_col, item_col, rating_col):
    """Per-partition facts: unique users and items, counts and rating sums."""
    out = {
        "n": len(df),
        "users": pd.unique(df[user_col].to_numpy()),
        "items": pd.unique(df[item_col].to_numpy()),
        "null_ids": int(df[user_col].isna().sum() + df[item_col].isna().sum()),
        "bad_ratings": 0,
        "rating_sum": 0.0,
        "rating_min": math.inf,
    }
    if rating_col is not None:
        r = df[rating_col].to_numpy(dtype=np.float64, na_value=np.nan)
        finite = np.isfinite(r)
        out["bad_ratings"] = int((~finite).sum())
        out["rating_sum"] = float(r[finite].sum())
        out["rating_min"] = float(r[finite].min()) if finite.any() else math.inf
    return out


def split_part(df, user_col, item_col, rating_col, users, items, user_shard, n_shards):
    """Codes of one partition, cut into one piece per shard: ``[(u, i, r), ...]``."""
    u = users.get_indexer(df[user_col])
    i = items.get_indexer(df[item_col])
    if rating_col is None:
        r = np.ones(len(df))
    else:
        r = df[rating_col].to_numpy(dtype=np.float64)
    s = user_shard[u]
    order = np.argsort(s, kind="stable")
    bounds = np.searchsorted(s[order], np.arange(n_shards + 1))
    return [
        (u[order[a:b]].astype(np.int64), i[order[a:b]].astype(np.int32), r[order[a:b]])
        for a, b in zip(bounds[:-1], bounds[1:])
    ]


def _piece(pieces, s):
    return pieces[s]


def make_rating_shard(n_items, like, *pieces):
    """A :class:`RatingShard` from the pieces every partition cut for it (``like``:
    see :class:`RatingShard`)."""
    u = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    i = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int32)
    r = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0)
    order = np.lexsort((r, i, u))
    u, i, r = u[order], i[order], r[order]
    users, lu = np.unique(u, return_inverse=True)
    return RatingShard(users, lu.astype(np.int32), i, r, n_items, like)


def _like_of(*blocks):
    """A zero-length array of the namespace and device of the first block that is not
    NumPy (``None`` entries skipped); None when all are NumPy."""
    for b in blocks:
        if b is None:
            continue
        xp = get_namespace(b)
        if not array_api_compat.is_numpy_namespace(xp):
            return xp.reshape(b[:0, ...], (0,))
    return None


def block_like(executor, *arrays):
    """Where the arrays of a fit on dask arrays should live: a zero-length array cut,
    on a worker, from the first block of the first dask array in ``arrays`` whose
    blocks are not NumPy (the blocks are looked at: the dask meta may be NumPy when they
    are not), or None when they are all NumPy (or no argument is a dask array).

    Returns a future on a cluster (it is passed to the shards' setup tasks and resolved
    there), else the array.
    """
    import dask
    import dask.array as da

    firsts = [a.to_delayed().ravel()[0] for a in arrays if isinstance(a, da.Array)]
    if not firsts:
        return None
    probe = dask.delayed(_like_of)(*firsts, dask_key_name=f"dgd-mf-like-{uuid.uuid4().hex[:8]}")
    if executor.kind == "dask":
        return executor.client.compute(probe)
    return probe.compute()  # pragma: no cover - dask input always gets a cluster


def assign_users(counts, n_shards):
    """Users to shards, balancing the number of ratings (longest-processing-time rule).

    Users are taken by decreasing count (ties by index) and each goes to the shard with
    the fewest ratings so far (ties to the lowest shard).  Returns the shard of every
    user and the ratings of every shard.
    """
    import heapq

    counts = np.asarray(counts, dtype=np.int64)
    shard_of = np.zeros(counts.size, dtype=np.int64)
    loads = np.zeros(n_shards, dtype=np.int64)
    heap = [(0, s) for s in range(n_shards)]
    for u in np.argsort(-counts, kind="stable"):
        load, s = heapq.heappop(heap)
        shard_of[u] = s
        load += int(counts[u])
        loads[s] = load
        heapq.heappush(heap, (load, s))
    return shard_of, loads


class _Runner:
    """Setup tasks on the cluster (pinned where asked) or directly in process."""

    def __init__(self, executor):
        self.executor = executor
        self.dask = executor.kind == "dask"
        self.token = uuid.uuid4().hex[:8]
        self._n = 0

    def submit(self, fn, *args, worker=None, name="dgd-mf-setup"):
        if not self.dask:
            return fn(*args)
        self._n += 1
        client = self.executor.client
        pin = {} if worker is None else {"workers": [worker], "allow_other_workers": True}
        return client.submit(fn, *args, key=f"{name}-{self.token}-{self._n}", pure=False, **pin)

    def gather(self, items):
        return self.executor.client.gather(list(items)) if self.dask else list(items)

    def scatter(self, value):
        if not self.dask:
            return value
        return self.executor.client.scatter(value, broadcast=True, hash=False)


def frame_parts(executor, frame):
    """The partitions of a pandas or dask DataFrame, as futures on a cluster."""
    import dask

    if dask.is_dask_collection(frame):
        if executor.kind != "dask":  # pragma: no cover - dask input always gets a cluster
            return [frame.compute()]
        return executor.client.compute(frame.to_delayed())
    if executor.kind != "dask":
        return [frame]
    n = max(1, min(len(executor.workers()), len(frame)))
    edges = np.linspace(0, len(frame), n + 1).round().astype(int)
    return executor.client.scatter([frame.iloc[a:b] for a, b in zip(edges[:-1], edges[1:])], hash=False)


def scan(executor, parts, cols):
    """Facts of the whole frame (combined on the driver from one task per partition)."""
    run = _Runner(executor)
    facts = run.gather([run.submit(scan_part, p, *cols, name="dgd-mf-scan") for p in parts])
    return {
        "n": sum(f["n"] for f in facts),
        "users": [f["users"] for f in facts],
        "items": [f["items"] for f in facts],
        "null_ids": sum(f["null_ids"] for f in facts),
        "bad_ratings": sum(f["bad_ratings"] for f in facts),
        "rating_sum": sum(f["rating_sum"] for f in facts),
        "rating_min": min([f["rating_min"] for f in facts] + [math.inf]),
    }


def build_rating_shards(executor, parts, cols, users, items, n_shards, like=None):
    """Shards of ratings partitioned by user and balanced by ratings, placed one per
    worker in turn; returns the :class:`~.shards.ShardSet` and the ratings per shard.

    ``like``: None (NumPy shards) or what :func:`block_like` returned."""
    run = _Runner(executor)
    users_f, items_f = run.scatter(users), run.scatter(items)
    # ratings per user, counted where the partitions live
    counts = np.zeros(len(users), dtype=np.int64)
    for c in run.gather([run.submit(_user_counts, p, cols[0], users_f, name="dgd-mf-count") for p in parts]):
        counts += c
    n_shards = max(1, min(int(n_shards), len(users)))
    shard_of, loads = assign_users(counts, n_shards)
    shard_of_f = run.scatter(shard_of)
    pieces = [
        run.submit(split_part, p, *cols, users_f, items_f, shard_of_f, n_shards, name="dgd-mf-split")
        for p in parts
    ]
    workers = executor.workers() if run.dask else [None]
    handles, placed = [], []
    for s in range(n_shards):
        w = workers[s % len(workers)]
        mine = [run.submit(_piece, p, s, name="dgd-mf-piece") for p in pieces]
        handles.append(run.submit(make_rating_shard, len(items), like, *mine, worker=w, name="dgd-mf-shard"))
        placed.append(w)
    if run.dask:
        executor.wait(handles)
    shards = ShardSet(executor, handles, [(s,) for s in range(n_shards)], placed, loads, 0, False)
    if run.dask:  # the partitions (frame_parts) are this fit's: released with its shards
        shards.inputs = list(parts) + ([] if like is None else [like])
    # each shard's users (global indices, sorted), as the shard itself holds them
    shards.shard_users = [np.flatnonzero((shard_of == s) & (counts > 0)) for s in range(n_shards)]
    return shards, loads


def _user_counts(df, user_col, users):
    """Ratings of every user in one partition."""
    return np.bincount(users.get_indexer(df[user_col]), minlength=len(users))


# ------------------------------------------------------------------- shard steps
@dataclass(frozen=True)
class ShardResult:
    """One shard's share of a step: loss sums, the touched item-gradient rows
    (``idx`` None: ``rows`` is the dense table), the users' Gram matrix (wls) and the
    norm of its users' gradient."""

    loss_sum: float
    sq_sum: float
    n: int
    idx: object
    rows: np.ndarray
    gram: object
    user_grad_norm: float
    time: float

    @property
    def nbytes(self):
        extra = 0 if self.gram is None else self.gram.nbytes
        return (0 if self.idx is None else self.idx.nbytes) + self.rows.nbytes + extra + 3 * 8


def _map_state(state, fn):
    """An optimizer state (a NamedTuple) with ``fn`` applied to its array fields."""
    return type(state)(**{
        name: fn(value) if array_api_compat.is_array_api_obj(value) else value
        for name, value in state._asdict().items()
    })


def shard_factor_init(shard, scratch, model, optimizer, U0, state0):
    """Put the shard's user factors and optimizer state in its scratch memory (in the
    shard's namespace and device; ``U0``, ``state0``: NumPy, from the driver)."""
    U = init_rows(model.seed, shard.users, model.user_width, model.init_scale, model.user_bias) if U0 is None else U0
    U = shard.to_shard(np.ascontiguousarray(U, dtype=np.float64))
    xp = get_namespace(U)
    device = array_api_compat.device(U)
    scratch.clear()
    scratch["U"] = U
    scratch["state"] = optimizer.init(U) if state0 is None else _map_state(state0, shard.to_shard)
    scratch["gU"] = xp.zeros_like(U)
    scratch["gV"] = xp.zeros((model.n_items, model.item_width), dtype=xp.float64, device=device)
    scratch["touched"] = xp.zeros(model.n_items, dtype=xp.bool, device=device)
    scratch["all"] = xp.arange(shard.n_rows, dtype=xp.int64, device=device)
    scratch["epoch"] = None
    return shard.n_rows


def _rows(shard, scratch, seed, epoch, batch, n_batches):
    """The rows of this step's ratings, increasing (so their users are sorted)."""
    if n_batches == 1:
        return scratch["all"]
    if scratch["epoch"] != epoch:
        b = kernels.batch_buckets(shard.key, seed, epoch, n_batches)
        xp = get_namespace(b)
        order = xp.argsort(b, stable=True)
        edges = xp.arange(n_batches + 1, dtype=b.dtype, device=array_api_compat.device(b))
        scratch["order"] = order
        scratch["bounds"] = to_numpy(xp.searchsorted(xp.take(b, order), edges))
        scratch["epoch"] = epoch
    lo, hi = int(scratch["bounds"][batch]), int(scratch["bounds"][batch + 1])
    return scratch["order"][lo:hi]


def shard_factor_step(shard, scratch, model, optimizer, V, gram_items, step, epoch, batch, n_batches, normalizer):
    """One step on one shard: sums, the local user update, the item-gradient rows."""
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is checked on the driver
        return _factor_step(shard, scratch, model, optimizer, V, gram_items, step, epoch, batch, n_batches, normalizer)


def _factor_step(shard, scratch, model, optimizer, V, gram_items, step, epoch, batch, n_batches, normalizer):
    if "U" not in scratch:
        raise ClusterError(
            "a shard lost its user factors (its worker was lost mid-fit); "
            "matrix factorization cannot continue without them: fit again"
        )
    t0 = time.perf_counter()
    on_host = shard.like is None
    V, gram_items = shard.to_shard(V), shard.to_shard(gram_items)  # once per step
    U, gU, gV, touched = scratch["U"], scratch["gU"], scratch["gV"], scratch["touched"]
    xp = get_namespace(U)
    rows = _rows(shard, scratch, model.seed, epoch, batch, n_batches)
    gU[...] = 0.0
    if model.kind == "explicit":
        loss, sq = kernels.explicit_sums(
            shard.lu, shard.gi, shard.r, rows, U, V, model.mu, model.alpha, model.alpha_bias, gU, gV, touched
        )
    elif model.kind == "bpr":
        loss, sq = kernels.bpr_sums(
            shard.lu, shard.gi, shard.key, shard.uptr, rows, U, V, model.alpha, model.alpha_bias,
            model.seed, step, gU, gV, touched,
        )
    else:
        loss, sq = kernels.wls_sums(
            shard.lu, shard.gi, shard.r, rows, U, V, model.alpha, model.confidence_scale, gU, gV, touched
        )
    gram = None
    if model.kind == "wls":
        gram = to_numpy(U.T @ U)  # at the parameters of this step, before the update
        _, g_all = kernels.wls_all_pairs(U, gram_items, 1.0 / n_batches)
        gU += g_all
    idx, out = _touched_rows(xp, scratch, on_host)  # the item rows this step touched
    grad_norm = 0.0
    if math.isfinite(loss):
        gU /= normalizer
        # scaled: no overflow
        grad_norm = float(np.linalg.norm(gU)) if on_host else float(xp.sqrt(xp.sum(gU * gU)))
        updates, scratch["state"] = optimizer.update(gU, scratch["state"], U)
        U += updates
    inject_faults(t0)
    return ShardResult(float(loss), float(sq), int(rows.shape[0]), idx, out, gram, grad_norm, time.perf_counter() - t0)


def _touched_rows(xp, scratch, on_host):
    """The item-gradient rows this step touched, as NumPy (``idx`` None: the dense
    table, when that is smaller), and the item gradient and flags reset to zero."""
    gV, touched = scratch["gV"], scratch["touched"]
    width = gV.shape[1]
    dense_bytes = gV.shape[0] * width * 8
    if on_host:  # reset only the touched rows: the table may be much larger
        idx = np.flatnonzero(touched)
        if idx.size * (4 + 8 * width) < dense_bytes:
            idx = idx.astype(np.int32)
            out = gV[idx]
            gV[idx] = 0.0
            touched[idx] = False
            return idx, out
        out = gV.copy()
        gV[:] = 0.0
        touched[:] = False
        return None, out
    idx = xp.nonzero(touched)[0]
    if idx.shape[0] * (4 + 8 * width) < dense_bytes:
        idx, out = to_numpy(idx).astype(np.int32), to_numpy(xp.take(gV, idx, axis=0))
    else:
        idx, out = None, to_numpy(gV)
    # fresh zeros (a device memset) rather than a scatter; ``out`` may share gV's memory
    scratch["gV"], scratch["touched"] = xp.zeros_like(gV), xp.zeros_like(touched)
    return idx, out


def shard_factor_export(shard, scratch):
    """The shard's users, their factors and optimizer state, and its (user, item) pairs
    (all NumPy)."""
    if "U" not in scratch:
        raise ClusterError("a shard lost its user factors (its worker was lost); fit again")
    return (shard.users, to_numpy(scratch["U"]), _map_state(scratch["state"], to_numpy),
            to_numpy(shard.uptr), to_numpy(shard.gi))


# --------------------------------------------------------------------- the loop
@dataclass
class FactorResult:
    V: np.ndarray
    state: object
    n_iter: int
    n_steps: int
    converged: bool
    stopped_by: str


@releases_shards_on_error
def run_factorization(shards, model, optimizer, V, state, *, user_init, max_iter, tol, n_batches,
                      n_ratings, monitor, max_time=None):
    """Train: ``max_iter`` epochs of ``n_batches`` synchronous steps each.

    ``user_init`` is ``None`` (seeded initial factors) or a callable giving each shard's
    initial ``(U, state)`` from its global user ids (continued training).  Stops early
    when the epoch-mean objective improves by less than ``tol`` (the rule of the linear
    models) or after ``max_time`` seconds.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging step raises DivergenceError
        return _run(shards, model, optimizer, V, state, user_init, max_iter, tol, n_batches, n_ratings,
                    monitor, max_time)


def _run(shards, model, optimizer, V, state, user_init, max_iter, tol, n_batches, n_ratings, monitor, max_time):
    if user_init is None:
        shards.call_groups(shard_factor_init, model, optimizer, None, None, name="dgd-mf-init")
    else:
        user_init(shards)
    normalizer = n_ratings / n_batches
    stopper = EpochStopper(tol)
    V = np.ascontiguousarray(V, dtype=np.float64)
    step = 0
    stopped_by = "max_iter"
    n_groups = shards.n_groups
    epoch = 0
    t_prev = time.perf_counter()
    for epoch in range(max_iter):
        for batch in range(n_batches):
            t0 = time.perf_counter()
            gram_items = V.T @ V if model.kind == "wls" else None
            results = shards.call_groups(
                shard_factor_step, model, optimizer, V, gram_items, step, epoch, batch, n_batches, normalizer,
                name="dgd-mf-step",
            )
            t1 = time.perf_counter()
            gV = np.zeros_like(V)
            loss = 0.0
            user_norms = []
            n = 0
            for res in results:  # shard order: the sum does not depend on timing
                if res.idx is None:
                    gV += res.rows
                else:
                    gV[res.idx] += res.rows
                loss += res.loss_sum
                user_norms.append(res.user_grad_norm)
                n += res.n
            if model.kind == "wls":
                gram_users = sum(res.gram for res in results)
                a_loss, a_grad = kernels.wls_all_pairs(V, gram_users, 1.0 / n_batches)
                loss += a_loss
                gV += a_grad
            loss /= normalizer
            gV /= normalizer
            step += 1
            if not (math.isfinite(loss) and np.all(np.isfinite(gV))):
                lr = optimizer.current_learning_rate(state)
                raise DivergenceError(
                    f"the objective became {loss} at step {step} (epoch {epoch + 1}); "
                    f"lower learning_rate (now {lr:g}) or raise alpha"
                )
            lr = optimizer.current_learning_rate(state)
            updates, state = optimizer.update(gV, state, V)
            V = V + updates
            t2 = time.perf_counter()
            up = sum(res.nbytes for res in results)
            down = V.nbytes * n_groups + (0 if gram_items is None else gram_items.nbytes * n_groups)
            times = [res.time for res in results]
            record = monitor.record(
                step=step,
                iteration=epoch + 1,
                loss=loss,
                grad_norm=math.hypot(*user_norms, float(np.linalg.norm(gV))),
                step_size=lr,
                step_time=t2 - t0,
                compute_time_max=max(times),
                compute_time_min=min(times),
                reduce_time=t2 - t1,
                update_time=t0 - t_prev,
                n_samples=n,
                staleness_max=0,
                staleness_mean=0.0,
                delay_max=0,
                delay_mean=0.0,
                wait_time=max(times) - min(times),
                updates_per_group=tuple(1 for _ in results),
                comm_bytes=up + down,
                bytes_up_raw=up,
                bytes_up=up,
                bytes_down=down,
            )
            if model.kind == "explicit":  # training RMSE of the step's ratings
                record["rmse"] = math.sqrt(sum(r.sq_sum for r in results) / max(n, 1))
            t_prev = t2
            if max_time is not None and monitor.elapsed() >= max_time:
                return FactorResult(V, state, epoch + 1, step, False, "max_time")
            if monitor.stop_requested:
                return FactorResult(V, state, epoch + 1, step, True, "callback")
            if tol > 0 and stopper.add(loss, epoch + (batch + 1) // n_batches):
                return FactorResult(V, state, epoch + 1, step, True, "tol")
    return FactorResult(V, state, max_iter, step, False, stopped_by)


def export_users(shards, n_users, width, U_base=None):
    """Gather every shard's user factors (once, at the end of a fit) into one table,
    with the optimizer state rows and the seen (user, item) pairs as CSR arrays.

    ``U_base``: the table to update (continued training: users without new ratings
    keep their rows); None: zeros."""
    parts = shards.call_groups(shard_factor_export, name="dgd-mf-export")
    U = np.zeros((n_users, width)) if U_base is None else np.array(U_base, dtype=np.float64)
    states = []
    seen_rows, seen_cols = [], []
    for users, Us, state, uptr, gi in parts:
        U[users] = Us
        states.append((users, state))
        seen_rows.append(np.repeat(users, np.diff(uptr)))
        seen_cols.append(gi)
    return U, states, np.concatenate(seen_rows), np.concatenate(seen_cols)


def check_scan(facts, rating_col, implicit_kind):
    """Clear errors for empty data, missing ids and bad ratings."""
    if facts["n"] == 0:
        raise InputError("the ratings are empty (0 rows); fit needs at least one rating")
    if facts["null_ids"]:
        raise InputError(
            f"{facts['null_ids']} user or item ids are missing (NaN/None); drop those rows before fitting"
        )
    if facts["bad_ratings"]:
        raise InputError(
            f"{facts['bad_ratings']} values of the {rating_col!r} column are NaN or infinite; "
            "drop or fill them before fitting"
        )
    if implicit_kind == "wls" and facts["rating_min"] < 0:
        raise InputError(
            f"the {rating_col!r} column has a negative value ({facts['rating_min']:g}); confidence-weighted "
            "least squares needs strengths >= 0 (confidence = 1 + confidence_scale * strength)"
        )


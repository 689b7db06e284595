"""The ``linear`` suite's problem: the data on the cluster, the one objective every tool's
coefficients are scored on, and the one-pass read of X that a step is compared with.
"""

import time

import numpy as np


# ----------------------------------------------------------------------------- data
def block_placement(client, X):
    """Futures of X's row blocks, in order, and the worker holding each (at generation)."""
    from distributed import futures_of

    by_key = {f.key: f for f in futures_of(X)}
    futures = [by_key[k[0]] for k in X.__dask_keys__()]
    who = client.who_has(futures)
    return futures, [min(who[f.key]) for f in futures]


# ----------------------------------------------------------------------------- the shared objective
def objective(X, y, coef, intercept, alpha):
    """Mean log-loss + alpha/2 ||coef||^2 (intercept unpenalised), in float64 NumPy."""
    coef = np.asarray(coef, dtype=np.float64).ravel()
    z = X @ coef + float(np.ravel(intercept)[0])
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * alpha * (coef @ coef))


# ----------------------------------------------------------------------------- read passes
def _local_pass(kind, *blocks):
    """One pass over this worker's blocks, timed inside the task.

    ``sum``: ``block.sum()`` (the memory-read reference); ``gemv``: ``block @ v``;
    ``kernel``: dask_dgd's own per-block objective (``LinearObjective.block_sums`` of the
    binary logistic loss), i.e. the engine's compute on these blocks without the engine.
    """
    extra = None
    if kind == "kernel":
        from dask_dgd.losses import BinaryLogistic, LinearObjective

        d = blocks[0].shape[1]
        extra = (
            LinearObjective(BinaryLogistic(), d),
            np.random.default_rng(0).standard_normal(d + 1) * 0.1,
            [np.zeros(b.shape[0]) for b in blocks],
        )
    v = np.full(blocks[0].shape[1], 1e-3)
    t0 = time.perf_counter()
    acc = 0.0
    for i, b in enumerate(blocks):
        if kind == "sum":
            acc += float(b.sum())
        elif kind == "gemv":
            acc += float((b @ v).sum())
        else:
            obj, params, ys = extra
            acc += obj.block_sums(params, b, ys[i])[0]
    return time.perf_counter() - t0, acc


def cluster_read(client, futures, owners, kind, repeats):
    """All workers at once, each passing over the blocks it holds; max task time per sample."""
    by_worker = {}
    for f, w in zip(futures, owners):
        by_worker.setdefault(w, []).append(f)
    samples, walls = [], []
    for r in range(repeats + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        tasks = [
            client.submit(_local_pass, kind, *fs, workers=[w], allow_other_workers=False, pure=False)
            for w, fs in sorted(by_worker.items())
        ]
        out = client.gather(tasks)
        wall = time.perf_counter() - t0
        if r:
            samples.append([t for t, _ in out])
            walls.append(wall)
    return {
        "kind": kind,
        "blocks_per_worker": {w: len(fs) for w, fs in sorted(by_worker.items())},
        "task_time_per_worker": samples,
        "max_task_time": [max(s) for s in samples],
        "wall": walls,
    }


def _copies_on_worker(keys, dask_worker=None):
    """(key index, 8-byte aligned?) for each of ``keys`` held in this worker's memory."""
    out = []
    for i, k in enumerate(keys):
        try:
            a = dask_worker.data[k]
        except KeyError:
            continue
        out.append((i, bool(a.flags.aligned and a.ctypes.data % 8 == 0)))
    return out


def alignment_census(client, futures):
    """How many copies of X's blocks the workers hold, and how many are misaligned.

    Blocks moved between workers by Dask can arrive at addresses that are not 8-byte
    aligned; NumPy then falls back to slow non-BLAS loops on them.
    """
    keys = [f.key for f in futures]
    per_worker = client.run(_copies_on_worker, keys)
    copies = sum(len(v) for v in per_worker.values())
    misaligned = sorted(i for v in per_worker.values() for i, ok in v if not ok)
    return {"copies": copies, "misaligned": len(misaligned), "misaligned_blocks": misaligned}


def driver_read(Xn, repeats):
    """Samples of a single-process ``Xn.sum()`` on the driver (after one warm-up)."""
    out = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        Xn.sum()
        if r:
            out.append(time.perf_counter() - t0)
    return out

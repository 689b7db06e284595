"""GPU throughput: a training step on CuPy blocks against one read of X from GPU memory.

Issue target: on a GPU, the per-step time of a full-batch fit within 2x the time of one
pass that only reads X from device memory, and coefficients equal to the CPU fit's to
1e-6.

On a LocalCluster of one worker process (one GPU; CuPy's current device):

1. X (rows x features float64, ``chunks`` blocks) and binary y are generated on the
   worker and persisted, once as NumPy blocks and once as CuPy blocks (``cupy.asarray``
   per block, so the GPU copy is resident on the device before timing);
2. *read pass*: a task on the worker sums every CuPy block (``cupy.sum``: reads each
   byte once, bandwidth-bound), synchronised, ``repeats`` times; the median is the
   one-pass memory-read time and ``X.nbytes / time`` the achieved read bandwidth;
3. for LinearRegression and LogisticRegression (``solver="gd"``, ``tol=0``,
   ``max_iter=steps``), on the CuPy blocks and on the NumPy blocks: the median
   ``step_time`` of the history (the first step, with compilation and warm-up,
   excluded) over ``repeats`` fits, and the worker compute part (``compute_time_max``);
   the worker has as many threads as the machine has cores, so the CPU fit's BLAS may
   use them all;
4. reported: GPU step / read pass (target <= 2), GPU step / CPU step, max |coef_GPU -
   coef_CPU| (target <= 1e-6), rows per second.

Without CuPy or a CUDA device the suite reports that the GPU is unavailable, and why,
and measures nothing (there is no CPU stand-in for GPU figures).
"""

import time

import numpy as np

from .._common import make_data, md_table, median, start_cluster, suite_params

NAME = "gpu"
DESCRIPTION = "Full-batch step on CuPy blocks vs one read of X on the GPU, and vs the CPU step"

SIZES = {
    "small": dict(rows=1_000_000, features=100, chunks=8, steps=12, repeats=3, cpu=True, seed=0),
    "full": dict(rows=2_000_000, features=500, chunks=16, steps=12, repeats=5, cpu=True, seed=0),
}

TARGET_READ_RATIO = 2.0
TARGET_COEF = 1e-6


def gpu_unavailable():
    """None when CuPy sees a CUDA device, else the reason (a sentence)."""
    try:
        import cupy
    except ImportError as exc:
        return f"CuPy is not installed (pip install '.[gpu]'): {exc}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver / no device
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    return None if n > 0 else "no CUDA device (device count 0)"


# ----------------------------------------------------------------------------- on the worker
def _to_cupy(block):
    import cupy

    return cupy.asarray(block)


def _read_pass(repeats, *blocks):
    """Median-able times of one pass reading every block (bandwidth-bound sums)."""
    import cupy

    device = cupy.cuda.Device()
    for b in blocks:  # warm-up: the reduction kernel compiles on first use
        cupy.sum(b)
    times = []
    for _ in range(repeats):
        device.synchronize()
        t0 = time.perf_counter()
        for b in blocks:
            cupy.sum(b)
        device.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def _device_name():
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


# ----------------------------------------------------------------------------- driver
def _fit(client, cls, X, y, steps, seed):
    import warnings

    import dask_dgd

    est = getattr(dask_dgd, cls)(solver="gd", max_iter=steps, tol=0, random_state=seed, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dask_dgd.ConvergenceWarning)
        est.fit(X, y)
    h = est.history_
    return est, list(h["step_time"][1:]), list(h["compute_time_max"][1:])


def _unavailable_result(reason, p):
    text = (
        f"**GPU unavailable on this machine: {reason}.** Nothing was measured; run "
        "`python -m benchmarks run --suite gpu` on a machine with CUDA and `pip install '.[gpu]'`."
    )
    table = md_table(["status", "reason"], [["GPU unavailable", reason]])
    return {"title": "GPU throughput", "markdown": text + "\n\n" + table, "table": table,
            "data": {"available": False, "reason": reason, "params": p}}


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    reason = gpu_unavailable()
    if reason is not None:
        log(f"gpu suite: {reason}")
        return _unavailable_result(reason, p)
    import os

    from distributed import futures_of, wait

    # one worker process; its BLAS may use every core for the CPU comparison
    cluster, client = start_cluster(1, threads_per_worker=os.cpu_count() or 1)
    try:
        import cupy  # for the metas (empty arrays; the blocks are made on the worker)

        X, y = make_data(client, p["rows"], p["features"], p["chunks"], p["seed"])
        Xg = client.persist(X.map_blocks(_to_cupy, dtype=X.dtype, meta=cupy.empty((0, 0), dtype=X.dtype)))
        yg = client.persist(y.map_blocks(_to_cupy, dtype=y.dtype, meta=cupy.empty((0,), dtype=y.dtype)))
        wait([Xg, yg])
        device = client.submit(_device_name, pure=False).result()
        blocks = futures_of(Xg)
        reads = client.submit(_read_pass, p["repeats"], *blocks, pure=False).result()
        read = median(reads)
        log(f"{device}: read pass {read * 1e3:.2f} ms ({X.nbytes / read / 1e9:.0f} GB/s)")
        rows = []
        data = {"available": True, "device": device, "params": p, "read_times": reads,
                "bandwidth_gbs": X.nbytes / read / 1e9, "fits": {}}
        for cls in ("LinearRegression", "LogisticRegression"):
            gpu_steps, gpu_compute, cpu_steps = [], [], []
            coef_diff = None
            for r in range(p["repeats"]):
                est_g, steps, compute = _fit(client, cls, Xg, yg, p["steps"], p["seed"])
                gpu_steps += steps
                gpu_compute += compute
                if p["cpu"] and r == 0:
                    est_c, steps_c, _ = _fit(client, cls, X, y, p["steps"], p["seed"])
                    cpu_steps += steps_c
                    coef_diff = float(np.max(np.abs(np.ravel(est_g.coef_) - np.ravel(est_c.coef_))))
            g, gc = median(gpu_steps), median(gpu_compute)
            c = median(cpu_steps) if cpu_steps else None
            data["fits"][cls] = {"gpu_step_times": gpu_steps, "gpu_compute_times": gpu_compute,
                                 "cpu_step_times": cpu_steps, "coef_max_abs_diff": coef_diff}
            rows.append([
                cls, f"{g * 1e3:.2f}", f"{gc * 1e3:.2f}", f"{g / read:.2f}",
                "yes" if g / read <= TARGET_READ_RATIO else "no",
                None if c is None else f"{c * 1e3:.1f}", None if c is None else f"{c / g:.1f}x",
                None if coef_diff is None else f"{coef_diff:.1e}", f"{p['rows'] / g / 1e6:.0f}",
            ])
            log(f"{cls}: GPU step {g * 1e3:.2f} ms = {g / read:.2f}x the read pass")
        headers = ["model", "GPU step ms (median)", "GPU compute ms", "step / read pass",
                   f"<= {TARGET_READ_RATIO:g}x", "CPU step ms", "CPU / GPU", "max |coef diff|",
                   "M rows/s (GPU)"]
        table = md_table(headers, rows)
        text = (
            f"{device}; X {p['rows']:,} x {p['features']} float64 ({X.nbytes / 1e9:.2f} GB) in "
            f"{p['chunks']} blocks on one worker; read pass {read * 1e3:.2f} ms median of "
            f"{p['repeats']} ({X.nbytes / read / 1e9:.0f} GB/s); {p['steps']} gd steps per fit, "
            "first step excluded, medians over all fits.\n\n" + table
        )
        return {"title": "GPU throughput", "markdown": text, "table": table, "data": data}
    finally:
        client.close()
        cluster.close()

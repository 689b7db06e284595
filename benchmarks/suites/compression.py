"""Gradient compression on a wide sparse problem: loss against bytes and time.

Issue target (communication): on a wide problem, at least 50x fewer bytes to reach the
uncompressed fit's final loss within 1e-3, with a wall time no worse than uncompressed
on the local cluster; a PNG of loss against bytes for the docs.

Method.  Logistic regression on ``rows x features`` sparse CSR data (``density``;
standard-normal values; labels from a sparse true model), in ``chunks`` blocks on
``workers`` single-threaded workers, plain gradient descent with the automatic step
(times each compressor's ``step_scale``), ``tol=0``.  The uncompressed fit takes
``steps`` steps; its final objective + 1e-3 is the target.  Each compressor's fit
takes up to ``steps x budget`` steps.  The recorded loss travels uncompressed, so the
history gives the exact objective at every step; bytes are the gradients sent up
(``bytes_up``; the parameters sent down are the same for every run and shown apart).
"""

import time
import warnings

import numpy as np

from .._common import md_table, median, start_cluster, suite_params

NAME = "compression"
DESCRIPTION = "Gradient compressors on a wide sparse logistic regression: loss vs bytes and time"

SIZES = {
    "small": dict(rows=50_000, features=5_000, density=0.002, chunks=8, workers=2, steps=40,
                  budget=3, repeats=1, alpha=1e-4, seed=0,
                  compressors=("fp16", "bf16", "topk:0.01", "randomk:0.01", "qsgd:16", "sign"),
                  plot="docs/img/compression-small.png"),
    "full": dict(rows=200_000, features=20_000, density=0.001, chunks=16, workers=2, steps=60,
                 budget=3, repeats=1, alpha=1e-4, seed=0,
                 compressors=("fp16", "bf16", "topk:0.01", "randomk:0.01", "qsgd:16", "sign"),
                 plot="docs/img/compression-full.png"),
}

TARGET_BYTES = 50.0
TARGET_GAP = 1e-3


def _block(i, n, features, density, seed, coef):
    import scipy.sparse as sp

    rng = np.random.default_rng([seed, i])
    X = sp.random(n, features, density=density, format="csr", random_state=rng,
                  data_rvs=rng.standard_normal)
    z = X @ coef + 0.2
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float64)
    return X, y


def _first(t):
    return t[0]


def _second(t):
    return t[1]


def make_sparse(client, rows, features, density, chunks, seed):
    """Sparse X and labels generated on the workers, as dask arrays of futures."""
    import dask.array as da
    import scipy.sparse as sp
    from distributed import wait

    rng = np.random.default_rng([seed, 1])
    coef = np.zeros(features)
    active = rng.choice(features, size=max(1, features // 10), replace=False)
    coef[active] = rng.standard_normal(active.size) * 2.0
    sizes = np.diff(np.linspace(0, rows, chunks + 1).round().astype(int))
    pairs = [client.submit(_block, i, int(n), features, density, seed, coef, pure=False)
             for i, n in enumerate(sizes)]
    xs = [client.submit(_first, p) for p in pairs]
    ys = [client.submit(_second, p) for p in pairs]
    with client.as_current():
        wait(xs + ys)
    del pairs
    X = da.Array({("sparse-X", i, 0): f for i, f in enumerate(xs)}, "sparse-X",
                 chunks=(tuple(int(n) for n in sizes), (features,)),
                 meta=sp.csr_matrix((0, features)))
    y = da.Array({("sparse-y", i): f for i, f in enumerate(ys)}, "sparse-y",
                 chunks=(tuple(int(n) for n in sizes),), dtype=np.float64, meta=np.empty(0))
    return X, y


def fit(client, X, y, p, compression, max_iter):
    from dask_dgd import LogisticRegression

    est = LogisticRegression(alpha=p["alpha"], solver="gd", max_iter=max_iter, tol=0.0,
                             compression=compression, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    return {
        "wall": wall,
        "loss": h["loss"].astype(float).tolist(),
        "time": h["time"].astype(float).tolist(),
        "bytes_up": np.cumsum(h["bytes_up"].astype(float)).tolist(),
        "bytes_down": np.cumsum(h["bytes_down"].astype(float)).tolist(),
        "step_size": float(h["step_size"].iloc[-1]),
        "totals": est.bytes_communicated_,
    }


def reach(run, target):
    """(step index, time, bytes up) of the first record at or below ``target``."""
    hits = [i for i, v in enumerate(run["loss"]) if v <= target]
    if not hits:
        return None
    i = hits[0]
    return {"step": i + 1, "time": run["time"][i], "bytes_up": run["bytes_up"][i],
            "bytes_down": run["bytes_down"][i]}


def plot(path, runs, target):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, r in runs.items():
        axes[0].plot(r["bytes_up"], r["loss"], label=name)
        axes[1].plot(r["time"], r["loss"], label=name)
    for ax, xlabel in zip(axes, ("gradient bytes sent up (cumulative)", "seconds since the fit started")):
        ax.axhline(target, color="k", lw=0.8, ls="--")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("objective")
        ax.set_ylim(target - 0.02, min(max(r["loss"][0] for r in runs.values()), target + 0.3))
    axes[0].set_xscale("log")
    axes[0].legend(fontsize=8)
    axes[0].set_title("loss against bytes (dashed: the target)")
    axes[1].set_title("loss against time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(size, *, repeats=None, log=print, **overrides):
    import os

    p = suite_params(NAME, SIZES, size, repeats, overrides)
    cluster, client = start_cluster(p["workers"])
    runs = {}
    try:
        client.wait_for_workers(p["workers"])
        X, y = make_sparse(client, p["rows"], p["features"], p["density"], p["chunks"], p["seed"])
        fit(client, X, y, p, None, 2)  # warm-up
        base_runs = [fit(client, X, y, p, None, p["steps"]) for _ in range(p["repeats"])]
        base = base_runs[0]
        target = base["loss"][-1] + TARGET_GAP
        runs["none"] = base
        log(f"uncompressed: final {base['loss'][-1]:.6f} in {base['wall']:.2f}s")
        for comp in p["compressors"]:
            runs[comp] = fit(client, X, y, p, comp, p["steps"] * p["budget"])
            hit = reach(runs[comp], target)
            log(f"{comp}: final {runs[comp]['loss'][-1]:.6f}, target "
                f"{'at step ' + str(hit['step']) if hit else 'not reached'}")
    finally:
        client.close()
        cluster.close()

    base_hit = reach(base, target)
    rows_t, met = [], []
    for name, r in runs.items():
        hit = reach(r, target)
        ratio = base_hit["bytes_up"] / hit["bytes_up"] if hit else None
        tratio = hit["time"] / base_hit["time"] if hit else None
        ok = hit is not None and ratio >= TARGET_BYTES and tratio <= 1.0
        if ok:
            met.append(name)
        rows_t.append([
            name, f"{r['totals']['compression_ratio']:.1f}", f"{r['step_size']:.3g}",
            len(r["loss"]), f"{r['loss'][-1]:.6f}",
            hit["step"] if hit else None,
            f"{hit['bytes_up'] / 2**20:.2f} MiB" if hit else None,
            f"{ratio:.1f}x" if ratio else None,
            f"{hit['time']:.2f} s" if hit else None,
            f"{tratio:.2f}" if tratio else None,
            f"{(hit['bytes_up'] + hit['bytes_down']) / 2**20:.2f} MiB" if hit else None,
        ])
    table = md_table(
        ["compression", "bytes ratio per step", "step size", "steps run", "final objective",
         "steps to target", "gradient bytes to target", "fewer bytes than uncompressed",
         "time to target", "time / uncompressed", "all bytes to target (with parameters down)"],
        rows_t,
    )
    plot_path = p["plot"]
    if plot_path:
        os.makedirs(os.path.dirname(plot_path) or ".", exist_ok=True)
        plot(plot_path, runs, target)
    verdict = (
        f"Target (>= {TARGET_BYTES:g}x fewer gradient bytes to the uncompressed final objective "
        f"+ {TARGET_GAP:g}, time no worse): met by {met or 'none'}."
    )
    reading = (
        f"{p['rows']:,} x {p['features']:,} sparse CSR (density {p['density']:g}), "
        f"{p['chunks']} blocks, {p['workers']} single-threaded workers; logistic regression "
        f"alpha={p['alpha']:g}, plain gradient descent with the automatic step times the "
        f"compressor's step_scale; uncompressed: {p['steps']} steps, compressed: up to "
        f"{p['steps'] * p['budget']}. Target: the uncompressed final objective + "
        f"{TARGET_GAP:g} = {target:.6f}. Gradient bytes: what the groups sent up (payload "
        f"arrays, 8 bytes per scalar, 16 for loss and weight); the parameters sent down "
        f"(8 bytes per entry per group per step) are the same for every compressor. One "
        f"run per compressor (the curves are the measurement; times are single runs on a "
        f"shared machine, compare them as ratios)."
        + (f" Plot: `{plot_path}`." if plot_path else "")
    )
    return {
        "title": "Gradient compression: loss against bytes and time",
        "markdown": "\n\n".join([reading, table, verdict]
                                + ([f"![loss against bytes and time](../{plot_path})"] if plot_path else [])),
        "table": "\n\n".join([table, verdict]),
        "data": {"parameters": p, "target": target, "runs": runs, "met": met,
                 "base_walls": [r["wall"] for r in base_runs],
                 "median_base_wall": median([r["wall"] for r in base_runs])},
    }

"""Gradient and parameter compression: bytes, steps and modeled network time to a target.

Issue target (communication to the published records), on the sparse problem: at least
100x fewer gradient bytes than uncompressed to the uncompressed final objective + 1e-4,
in at most the uncompressed steps' compute time, for top-k and one other compressor; at
least 20x fewer bytes up and down together; modeled at 1 Gbit/s, at least 5x faster to
the target than uncompressed.

Problems.  ``sparse``: logistic regression on ``rows x features`` sparse CSR data
(``density``; standard-normal values; labels from a sparse true model), the suite's
problem since the compressors were built.  ``multinomial``: a dense ``classes``-class
logistic regression (a parameter matrix: PowerSGD applies).  ``mf``: matrix
factorization by gradient steps on synthetic ratings (row-sparse item gradients, user
factors kept on the groups, so top-k keeps a residual there).  Each problem: ``chunks``
blocks on ``workers`` single-threaded workers, plain gradient descent with the automatic
step (times each compressor's ``step_scale``), ``tol=0``.  The uncompressed fit takes
``steps`` steps; its final objective + ``gap`` is the target; each compressed fit takes
up to ``steps x budget``.  The recorded loss travels uncompressed (with downlink
compression it is the loss at the workers' copy of the parameters).

Measured per run, up to the first step at or below the target: gradient bytes up
(``bytes_up``), all bytes (up and the parameters down), the steps' compute time (the
slowest group's, per step: what compression adds to the workers is in it) and the local
wall time.  Network model: each step's local time plus ``(bytes up + bytes down) * 8 /
bandwidth`` (all of a step's bytes pass the driver's link) plus ``2 x tree depth x
latency``, at 1 and 10 Gbit/s with ``latency`` 100 us.  The model is checked by
refitting two runs with the transport slowed by the bytes that really crossed the
driver's connections (pickled requests and answers; ``dgd.simulated-bandwidth``).
"""

import time
import warnings

import numpy as np

from dask_dgd.exceptions import DivergenceError

from .._common import md_table, median, one_line, start_cluster, suite_params

NAME = "compression"
DESCRIPTION = "Compression up and down on sparse, multinomial and MF problems: bytes, steps, modeled network time"

#: What every size runs: the problems, the runs of each, the two runs slowed to 1 Gbit/s.
RUNS = dict(
    problems=("sparse", "multinomial", "mf"), budget=2, alpha=1e-4, seed=0, gap=1e-4, workers=2,
    compressors=("topk:0.01", "topk:0.01+down", "topk:0.005+down", "topk:0.01+residual", "randomk:0.01+ef21+down",
                 "qsgd:16+ef21+down", "sign", "sign+ef21+down", "fp16+down"),
    multi_compressors=("topk:0.01+down", "powersgd:2", "sign+ef21+down"),
    mf_compressors=("topk:0.05", "topk:0.05+ef21", "powersgd:2"), slowed=("none", "topk:0.01+down"),
)
SIZES = {
    "small": dict(RUNS, rows=50_000, features=5_000, density=0.002, chunks=8, steps=40, repeats=1, classes=5,
                  multi_rows=20_000, multi_features=100, mf_users=2_000, mf_items=500, mf_ratings=40_000,
                  mf_components=8, plot="docs/img/compression-small.png"),
    "full": dict(RUNS, rows=200_000, features=20_000, density=0.001, chunks=16, steps=60, repeats=3, classes=10,
                 multi_rows=100_000, multi_features=500, mf_users=20_000, mf_items=5_000, mf_ratings=1_000_000,
                 mf_components=16, plot="docs/img/compression-full.png"),
}

TARGET_GRAD_BYTES = 100.0
TARGET_ALL_BYTES = 20.0
TARGET_MODELED = 5.0
BANDWIDTHS = {"1 Gbit/s": 1e9, "10 Gbit/s": 1e10}
LATENCY = 1e-4


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


def make_multinomial(client, rows, features, classes, chunks, seed):
    """Dense features, ``classes`` labels from a linear model with noise, persisted."""
    import dask.array as da

    rng = np.random.default_rng([seed, 2])
    X = rng.standard_normal((rows, features))
    W = rng.standard_normal((features, classes)) * (rng.random((features, classes)) < 0.2)
    y = np.argmax(X @ W + rng.gumbel(size=(rows, classes)), axis=1)
    size = -(-rows // chunks)
    return client.persist([da.from_array(X, chunks=(size, -1)), da.from_array(y, chunks=size)])


def make_mf(p):
    from dask_dgd.datasets import make_ratings

    ratings, _ = make_ratings(p["mf_users"], p["mf_items"], p["mf_ratings"], random_state=p["seed"])
    return ratings


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est = fn()
        return est, time.perf_counter() - t0


def fit(client, problem, data, p, compression, max_iter):
    """One fit of ``problem``; its history as lists (loss, times, bytes per step)."""
    if problem == "mf":
        from dask_dgd import MatrixFactorization

        est, wall = _quiet(lambda: MatrixFactorization(
            n_components=p["mf_components"], alpha=0.05, solver="gd", max_iter=max_iter, tol=0.0, random_state=0,
            n_shards=p["chunks"], compression=compression, client=client).fit(data))
    else:
        from dask_dgd import LogisticRegression

        est, wall = _quiet(lambda: LogisticRegression(
            alpha=p["alpha"], solver="gd", max_iter=max_iter, tol=0.0, compression=compression,
            client=client).fit(*data))
    h = est.history_

    def col(name):
        return h[name].astype(float).fillna(0.0).tolist()

    return {
        "wall": wall, "loss": col("loss"), "step_time": col("step_time"), "compute": col("compute_time_max"),
        "bytes_up": col("bytes_up"), "bytes_down": col("bytes_down"), "depth": col("tree_depth"),
        "driver_bytes": col("driver_bytes"), "step_size": float(h["step_size"].iloc[-1]),
        "totals": est.bytes_communicated_,
    }


def reach(run, target):
    """Totals up to the first record at or below ``target`` (None if never)."""
    hits = [i for i, v in enumerate(run["loss"]) if v <= target]
    if not hits:
        return None
    n = hits[0] + 1

    def total(key):
        return float(np.sum(run[key][:n]))

    out = {"step": n, "bytes_up": total("bytes_up"), "bytes_down": total("bytes_down"),
           "compute": total("compute"), "time": total("step_time")}
    comm = np.add(run["bytes_up"][:n], run["bytes_down"][:n]) * 8
    for label, bw in BANDWIDTHS.items():
        out[label] = out["time"] + float(np.sum(comm / bw + 2 * np.asarray(run["depth"][:n]) * LATENCY))
    return out


def _median_run(runs):
    """The first run's curves with the median per-step times of all repeats."""
    out = dict(runs[0])
    for key in ("step_time", "compute"):
        n = min(len(r[key]) for r in runs)
        out[key] = [median([r[key][i] for r in runs]) for i in range(n)]
    out["loss"] = out["loss"][:len(out["step_time"])]
    return out


def plot(path, runs, target):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, r in runs.items():
        if "error" in r:
            continue
        both = np.cumsum(np.add(r["bytes_up"], r["bytes_down"]))
        axes[0].plot(np.cumsum(r["bytes_up"]), r["loss"], label=name)
        axes[1].plot(both, r["loss"], label=name)
    for ax, xlabel in zip(axes, ("gradient bytes sent up (cumulative)", "all bytes, up and down (cumulative)")):
        ax.axhline(target, color="k", lw=0.8, ls="--")
        ax.set_xlabel(xlabel)
        ax.set_xscale("log")
        ax.set_ylabel("objective")
        ax.set_ylim(target - 0.02, min(max(r["loss"][0] for r in runs.values() if "loss" in r), target + 0.3))
    axes[0].legend(fontsize=7)
    axes[0].set_title("loss against gradient bytes (dashed: the target)")
    axes[1].set_title("loss against all bytes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(runs, target):
    base = reach(runs["none"], target)
    rows, ratios = [], {}
    for name, r in runs.items():
        if "error" in r:
            rows.append([name, None, None, None, r["error"]] + [None] * 9)
            continue
        hit = reach(r, target)
        per_step = r["totals"]["compression_ratio"]
        if hit is None:
            rows.append([name, f"{per_step:.1f}", f"{r['step_size']:.3g}", len(r["loss"]), f"{r['loss'][-1]:.6f}"]
                        + [None] * 9)
            continue
        q = {
            "grad": base["bytes_up"] / hit["bytes_up"],
            "all": (base["bytes_up"] + base["bytes_down"]) / (hit["bytes_up"] + hit["bytes_down"]),
            "compute": hit["compute"] / base["compute"],
            "time": hit["time"] / base["time"],
            **{label: base[label] / hit[label] for label in BANDWIDTHS},
        }
        ratios[name] = q
        rows.append([
            name, f"{per_step:.1f}", f"{r['step_size']:.3g}", len(r["loss"]), f"{r['loss'][-1]:.6f}", hit["step"],
            f"{hit['bytes_up'] / 2**20:.3f} MiB", f"{q['grad']:.1f}x", f"{q['all']:.1f}x", f"{q['compute']:.2f}",
            f"{q['time']:.2f}", f"{hit['1 Gbit/s']:.2f} s", f"{q['1 Gbit/s']:.1f}x", f"{q['10 Gbit/s']:.1f}x",
        ])
    table = md_table(
        ["run", "gradient bytes ratio per step", "step size", "steps run", "final objective", "steps to target",
         "gradient bytes to target", "fewer gradient bytes", "fewer bytes up and down", "compute time / uncompressed",
         "local time / uncompressed", "modeled time at 1 Gbit/s", "faster at 1 Gbit/s", "faster at 10 Gbit/s"],
        rows,
    )
    return table, ratios


def _slowed(client, problem, data, p, runs, target):
    """The runs of ``p["slowed"]`` again with the driver's transport slowed to 1 Gbit/s
    and 100 us per message: measured time to the target against the model."""
    import dask

    out = {}
    for name in [n for n in p["slowed"] if "loss" in runs.get(n, {})]:
        comp = None if name == "none" else name
        with dask.config.set({"dgd.simulated-bandwidth": 1e9, "dgd.simulated-latency": LATENCY}):
            r = fit(client, problem, data, p, comp, len(runs[name]["loss"]) - 1)
        hit, model = reach(r, target), reach(runs[name], target)
        if hit is None or model is None:
            continue
        out[name] = {"measured": hit["time"], "modeled": model["1 Gbit/s"],
                     "pickled": float(np.sum(r["driver_bytes"][:hit["step"]])),
                     "accounted": hit["bytes_up"] + hit["bytes_down"]}
    return out


def _slowed_table(out):
    rows = [[name, f"{o['modeled']:.2f} s", f"{o['measured']:.2f} s", f"{o['measured'] / o['modeled']:.2f}",
             f"{o['accounted'] / 2**20:.2f} MiB", f"{o['pickled'] / 2**20:.2f} MiB"] for name, o in out.items()]
    return md_table(["run", "modeled time to target at 1 Gbit/s", "measured with the transport slowed to 1 Gbit/s",
                     "measured / modeled", "bytes to target (accounted)", "bytes through the driver (pickled)"],
                    rows)


def _shape(problem, p):
    if problem == "sparse":
        return (f"{p['rows']:,} x {p['features']:,} sparse CSR (density {p['density']:g}), logistic regression "
                f"alpha={p['alpha']:g}")
    if problem == "multinomial":
        return (f"{p['multi_rows']:,} x {p['multi_features']:,} dense, {p['classes']}-class multinomial logistic "
                f"regression alpha={p['alpha']:g}")
    return (f"matrix factorization of {p['mf_ratings']:,} synthetic ratings ({p['mf_users']:,} users x "
            f"{p['mf_items']:,} items), {p['mf_components']} components, alpha=0.05, in {p['chunks']} shards")


def _problem(client, problem, p, log):
    if problem == "sparse":
        data = make_sparse(client, p["rows"], p["features"], p["density"], p["chunks"], p["seed"])
        comps = p["compressors"]
    elif problem == "multinomial":
        data = make_multinomial(client, p["multi_rows"], p["multi_features"], p["classes"], p["chunks"], p["seed"])
        comps = p["multi_compressors"]
    else:
        data = make_mf(p)
        comps = p["mf_compressors"]
    fit(client, problem, data, p, None, 2)  # warm-up
    runs = {"none": _median_run([fit(client, problem, data, p, None, p["steps"]) for _ in range(p["repeats"])])}
    target = runs["none"]["loss"][-1] + p["gap"]
    log(f"{problem} uncompressed: final {runs['none']['loss'][-1]:.6f}")
    for comp in comps:
        try:
            runs[comp] = _median_run([fit(client, problem, data, p, comp, p["steps"] * p["budget"])
                                      for _ in range(p["repeats"])])
        except DivergenceError as err:  # reported in its row
            runs[comp] = {"error": one_line(err)}
            log(f"{problem} {comp}: {runs[comp]['error']}")
            continue
        hit = reach(runs[comp], target)
        log(f"{problem} {comp}: final {runs[comp]['loss'][-1]:.6f}, target "
            f"{'at step ' + str(hit['step']) if hit else 'not reached'}")
    slowed = _slowed(client, problem, data, p, runs, target) if problem == "sparse" and p["slowed"] else None
    return {"target": target, "runs": runs, "slowed": slowed}


def _verdicts(ratios, problem):
    grad = sorted(n for n, q in ratios.items() if n != "none" and q["grad"] >= TARGET_GRAD_BYTES
                  and q["compute"] <= 1.0)
    topk = [n for n in grad if n.startswith("topk")]
    other = [n for n in grad if not n.startswith("topk")]
    both = sorted(n for n, q in ratios.items() if n != "none" and q["all"] >= TARGET_ALL_BYTES)
    fast = sorted(n for n, q in ratios.items() if n != "none" and q["1 Gbit/s"] >= TARGET_MODELED)
    lines = [
        f"- {problem}: >= {TARGET_GRAD_BYTES:g}x fewer gradient bytes to the target in <= 1.0x the steps' compute "
        f"time, for top-k and one other compressor: top-k {topk or 'none'}, others {other or 'none'}: "
        f"**{'met' if topk and other else 'missed'}**.",
        f"- {problem}: >= {TARGET_ALL_BYTES:g}x fewer bytes up and down: {both or 'none'}: "
        f"**{'met' if both else 'missed'}**.",
    ]
    if problem == "sparse":  # the target names the sparse problem
        lines.append(f"- {problem}: modeled at 1 Gbit/s >= {TARGET_MODELED:g}x faster to the target: "
                     f"{fast or 'none'}: **{'met' if fast else 'missed'}**.")
    return "\n".join(lines)


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    cluster, client = start_cluster(p["workers"])
    problems = {}
    try:
        client.wait_for_workers(p["workers"])
        for problem in p["problems"]:
            problems[problem] = _problem(client, problem, p, log)
    finally:
        client.close()
        cluster.close()
    return report(p, problems)


def report(p, problems):
    """The suite's result from the measured ``problems`` (``{name: {"target", "runs",
    "slowed"}}``): also rebuilds a section from a saved ``benchmarks/out`` file."""
    import os

    parts, tables = [], []
    data = {"parameters": p, "problems": {}}
    for problem, res in problems.items():
        runs, target, slowed = res["runs"], res["target"], res.get("slowed")
        table, ratios = _table(runs, target)
        head = (f"**{problem}**: {_shape(problem, p)}; {p['chunks']} blocks on {p['workers']} single-threaded "
                f"workers; uncompressed: {p['steps']} steps, compressed: up to {p['steps'] * p['budget']}. "
                f"Target: the uncompressed final objective + {p['gap']:g} = {target:.6f}.")
        block = [head, table, _verdicts(ratios, problem)]
        if slowed:
            block += ["The network model against a fit whose transport is slowed by its real bytes:",
                      _slowed_table(slowed)]
        parts.append("\n\n".join(block))
        tables.append("\n\n".join(block[1:]))
        data["problems"][problem] = {"target": target, "runs": runs, "ratios": ratios, "slowed": slowed}
        if problem == "sparse":
            data["target"], data["runs"], data["ratios"] = target, runs, ratios
    plot_path = p["plot"]
    if plot_path and "sparse" in problems:
        os.makedirs(os.path.dirname(plot_path) or ".", exist_ok=True)
        plot(plot_path, problems["sparse"]["runs"], problems["sparse"]["target"])
    reading = (
        "Run names: a compressor spec (`topk:0.01` keeps 1% of the entries, EF21 feedback and the DGC warm-up "
        "by default; `+down` compresses the parameters' change on the way down; `+residual` the older residual "
        "error feedback with its shortened step; `+ef21` EF21 for a compressor whose default is another). "
        "Gradient bytes: what the groups sent up (payload arrays, 8 bytes per scalar, 16 for loss and weight). "
        "Bytes down: the parameters each group received, in full or as the compressed change. Steps' compute "
        "time: the sum over the steps to the target of the slowest group's time, medians of "
        f"{p['repeats']} repeats per step. Modeled time: local step time + bytes up and down x 8 / bandwidth "
        f"+ 2 x tree depth x {LATENCY * 1e6:g} us."
        + (f" Plot (sparse problem): `{plot_path}`." if plot_path else "")
    )
    return {
        "title": "Compression up and down: bytes, steps and modeled network time",
        "markdown": "\n\n".join([reading, *parts]
                                + ([f"![loss against bytes](../{plot_path})"] if plot_path and "sparse" in problems
                                   else [])),
        "table": "\n\n".join(tables),
        "data": data,
    }

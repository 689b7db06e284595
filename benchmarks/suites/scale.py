"""Scale-out: the star against the worker-side tree on many worker processes.

For each cluster size (1, 2, 4, 8, 16, 32 `dask worker` processes, a `dask scheduler`
process, the driver holding only the client), the same full-batch fits run with the
driver calling every group (``dgd.step-transport="star"``) and through the runner tree
(``"tree"``, fan-in ``split_every=8``; and fan-in 2, whose deeper tree shows the cost of
a level).  The data are tiny per worker (``blocks_per_worker`` blocks of
``tiny_rows_per_block`` rows), so the communication structure dominates each step; a
``wide`` problem (many features: large parameters and partials) at a few sizes
measures the per-byte terms, and a ``main`` problem at 1 and 2 workers the compute per
element.  Per step, medians over every step of the repeated fits, from ``history_``:
the driver process's CPU time (all its threads: the engine's loop and Dask's
communication thread), the driver's messages and bytes, the step's wall time, its
overhead (step minus the slowest group's compute) and the seconds through each level
of the tree.

On a machine with fewer cores than workers the workers share cores (``rho = workers /
cores``): a group's compute and its answers wait for a core.  The cost model of the
``scaling`` suite (:func:`.scaling.step_model`, extended by the tree's levels) is
fitted to these records with that contention as a separate term, then predicts the
step at 64, 512 and 4,096 workers with one core each, for (a) 2,000,000 x 100, (b)
20,000,000 x 100 and (c) weak scaling at 0.5 GB of X per worker.
"""

import math
import os
import time
import warnings
from collections import Counter

from .._common import make_data, md_table, median, suite_params
from . import scaling

NAME = "scale"
DESCRIPTION = (
    "Star against worker-side tree on 1-32 worker processes: driver CPU, messages and bytes per step, "
    "overhead, time per tree level; the cost model's predictions at 64/512/4,096 workers"
)

SIZES = {
    "small": dict(workers=(1, 2, 4, 8), blocks_per_worker=2, tiny_rows_per_block=32, tiny_features=10,
                  wide_features=2_000, wide_workers=(2, 8), rows=200_000, features=100, chunks=4,
                  split_every=8, deep_split_every=2, max_iter=8, repeats=1,
                  predict_workers=(64, 512, 4096), seed=0, cores=None),
    "full": dict(workers=(1, 2, 4, 8, 16, 32), blocks_per_worker=2, tiny_rows_per_block=64, tiny_features=10,
                 wide_features=20_000, wide_workers=(2, 8, 32), rows=2_000_000, features=100,
                 chunks=16, split_every=8, deep_split_every=2, max_iter=20, repeats=3,
                 predict_workers=(64, 512, 4096), seed=0, cores=None),
}

#: Targets of the issue (ratios in one run).
TARGET_MESSAGES_PER_FAN_IN = 2  # driver messages per step <= 2 x split_every
TARGET_CPU_32_OVER_4 = 1.5
TARGET_OVERHEAD_32_OVER_2 = 3.0
TARGET_OVERHEAD_2_MS = 15.0
TARGET_WEAK_512 = 0.90
TARGET_STRONG_64_20M = 0.80


def _fit(client, X, y, *, split_every, transport, max_iter):
    import dask

    from dask_dgd import LogisticRegression

    est = LogisticRegression(alpha=1e-4, solver="gd", tol=0.0, max_iter=max_iter, learning_rate=1.0,
                             split_every=split_every, rebalance=False, client=client)
    with warnings.catch_warnings(), dask.config.set({"dgd.step-transport": transport}):
        warnings.simplefilter("ignore")  # tol=0: a fixed number of steps
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    # the first step also starts the runners; the groups are the workers Dask put blocks on
    # (rebalance=False leaves them there: on a busy machine one worker may hold none)
    return est.history_.iloc[1:], wall, est.skew_report_["placement"]


def _levels(histories):
    """Median seconds through each tree level (the roots' level first)."""
    rows = [tuple(t) for h in histories for t in h["level_times"]]
    depth = max((len(r) for r in rows), default=0)
    return [median([r[i] for r in rows if len(r) > i]) for i in range(depth)]


def summarise(P, name, rows, features, chunks, split_every, transport, histories, walls, cores, placement):
    """One record: the medians of every step of the fits of one configuration.  The
    groups are the workers of ``placement`` (each block's worker in the fit)."""
    import pandas as pd

    h = pd.concat(histories, ignore_index=True)
    step, cmax = h["step_time"].astype(float), h["compute_time_max"].astype(float)
    counts = Counter(placement).values()
    groups, blocks = len(counts), max(counts)
    max_rows = min(rows, blocks * -(-rows // chunks))
    return dict(
        data=name, workers=P, rho=max(1.0, P / cores), split_every=split_every, transport=transport,
        rows=rows, features=features, n_params=features + 1, chunks=chunks, groups=groups,
        max_group_blocks=blocks, max_group_rows=max_rows, n_steps=len(h),
        step=median(step.tolist()), compute=median(cmax.tolist()), overhead=median((step - cmax).tolist()),
        driver_cpu=median(h["driver_cpu_time"].astype(float).tolist()),
        messages=int(median(h["driver_messages"].astype(float).tolist())),
        driver_bytes=median(h["driver_bytes"].astype(float).tolist()),
        depth=int(median(h["tree_depth"].astype(float).tolist())),
        level_times=_levels(histories), fit_wall=median(walls),
    )


def measure(P, p, cores, log):
    """Every configuration on a fresh cluster of ``P`` worker processes."""
    s, deep, k = p["split_every"], p["deep_split_every"], p["blocks_per_worker"]
    datasets = {"tiny": (P * k * p["tiny_rows_per_block"], p["tiny_features"], P * k)}
    if P in p["wide_workers"]:
        datasets["wide"] = (P * k * 8, p["wide_features"], P * k)
    if P in (1, 2):
        datasets["main"] = (p["rows"], p["features"], p["chunks"])
    configs = [("tiny", s, "star"), ("tiny", s, "tree"), ("tiny", deep, "tree")]
    if "wide" in datasets:
        configs += [("wide", s, "star"), ("wide", s, "tree"), ("wide", deep, "tree")]
    if "main" in datasets:
        configs += [("main", s, "tree")]
    from dask_dgd.testing import process_cluster

    records = []
    t0 = time.perf_counter()
    with process_cluster(P, timeout=300) as client:
        log(f"{P} workers: cluster up in {time.perf_counter() - t0:.1f}s")
        data = {name: make_data(client, r, f, c, p["seed"]) for name, (r, f, c) in datasets.items()}
        X, y = data["tiny"]
        _fit(client, X, y, split_every=s, transport="tree", max_iter=2)  # warm-up: imports on the workers
        for name, split, transport in configs:
            X, y = data[name]
            runs = [_fit(client, X, y, split_every=split, transport=transport, max_iter=p["max_iter"])
                    for _ in range(p["repeats"])]
            rec = summarise(P, name, *datasets[name], split, transport, [r[0] for r in runs], [r[1] for r in runs],
                            cores, runs[0][2])
            log(f"{P} workers: {name} {transport} s={split}: depth {rec['depth']}, {rec['messages']} msgs, "
                f"driver CPU {rec['driver_cpu'] * 1e3:.2f} ms, step {rec['step'] * 1e3:.2f} ms, "
                f"overhead {rec['overhead'] * 1e3:.2f} ms")
            records.append(rec)
    return records


def _ms(x):
    return "–" if x is None or not math.isfinite(x) else f"{x * 1e3:.2f} ms"


def _pick(records, data, P, transport, split):
    return next((r for r in records if (r["data"], r["workers"], r["transport"], r["split_every"])
                 == (data, P, transport, split)), None)


def targets(records, constants, p):
    """The issue's targets, measured and modeled: ``[(target, measured, met)]``."""
    s = p["split_every"]
    tree = [r for r in records if r["data"] == "tiny" and r["transport"] == "tree" and r["split_every"] == s]
    out = []
    worst = max(r["messages"] for r in tree)
    out.append((f"driver messages per step <= 2 x split_every = {2 * s} at every worker count (tree)",
                f"at most {worst} (star at the largest cluster: "
                f"{_pick(records, 'tiny', max(p['workers']), 'star', s)['messages']})",
                worst <= TARGET_MESSAGES_PER_FAN_IN * s))
    big, four, two = max(p["workers"]), 4, 2
    r_big, r4, r2 = (_pick(records, "tiny", P, "tree", s) for P in (big, four, two))
    if r_big and r4:
        ratio = r_big["driver_cpu"] / r4["driver_cpu"]
        star = _pick(records, "tiny", big, "star", s)["driver_cpu"] / _pick(records, "tiny", four, "star", s)[
            "driver_cpu"]
        out.append((f"driver CPU per step at {big} workers <= {TARGET_CPU_32_OVER_4}x its value at 4 (tree)",
                    f"{ratio:.2f}x ({_ms(r_big['driver_cpu'])} vs {_ms(r4['driver_cpu'])}; star {star:.2f}x)",
                    ratio <= TARGET_CPU_32_OVER_4))
    if r_big and r2:
        ratio = r_big["overhead"] / r2["overhead"]
        star = _pick(records, "tiny", big, "star", s)["overhead"] / _pick(records, "tiny", two, "star", s)["overhead"]
        out.append((f"step overhead at {big} workers <= {TARGET_OVERHEAD_32_OVER_2}x its value at 2 (tree)",
                    f"{ratio:.2f}x ({_ms(r_big['overhead'])} vs {_ms(r2['overhead'])}; star {star:.2f}x; "
                    f"{big} workers on {constants['cores']} cores: rho = {r_big['rho']:.0f})",
                    ratio <= TARGET_OVERHEAD_32_OVER_2))
        out.append((f"step overhead at 2 workers <= {TARGET_OVERHEAD_2_MS:.0f} ms", _ms(r2["overhead"]),
                    r2["overhead"] * 1e3 <= TARGET_OVERHEAD_2_MS))
    table = scaling.scenario_table(constants, split_every=s, workers_list=(64, 512))
    weak = next(e for e in table if e["scenario"].startswith("c") and e["workers"] == 512)
    strong = next(e for e in table if e["scenario"].startswith("b") and e["workers"] == 64)
    out.append(("modeled weak-scaling efficiency at 512 workers, 0.5 GB of X each >= 90%",
                f"{100 * weak['efficiency']:.1f}%", weak["efficiency"] >= TARGET_WEAK_512))
    out.append(("modeled strong-scaling efficiency at 64 workers, 20M x 100 >= 80%",
                f"{100 * strong['efficiency']:.1f}%", strong["efficiency"] >= TARGET_STRONG_64_20M))
    return out


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    cores = p["cores"] or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    t0 = time.perf_counter()
    records = []
    for P in p["workers"]:
        records += measure(P, p, cores, log)
    wall = time.perf_counter() - t0
    constants = scaling.fit_cost_model(records, cores)
    for r in records:
        pred = scaling.step_model(constants, workers=r["workers"], rows=r["rows"], features=r["features"],
                                  chunks=r["chunks"], split_every=r["split_every"], cores=cores,
                                  transport=r["transport"])
        r["predicted_overhead"] = pred["step"] - pred["compute"]
    scen = scaling.scenario_table(constants, split_every=p["split_every"], workers_list=p["predict_workers"])
    star = scaling.scenario_table(constants, split_every=p["split_every"], workers_list=p["predict_workers"],
                                  transport="star")
    for e, st in zip(scen, star):
        e["star_efficiency"] = st["efficiency"]
    goals = targets(records, constants, p)

    measured = md_table(
        ["data", "workers", "rho", "transport", "split_every", "groups", "depth", "driver msgs", "driver bytes",
         "driver CPU", "step", "compute max", "overhead", "model overhead", "per level (roots first)"],
        [[r["data"], r["workers"], f"{r['rho']:.0f}", r["transport"], r["split_every"], r["groups"], r["depth"],
          r["messages"], f"{r['driver_bytes'] / 1024:.1f} KiB", _ms(r["driver_cpu"]), _ms(r["step"]),
          _ms(r["compute"]), _ms(r["overhead"]), _ms(r["predicted_overhead"]),
          " / ".join(f"{t * 1e3:.1f}" for t in r["level_times"]) + " ms"] for r in records],
    )
    goal_table = md_table(["target", "measured", "met"], [[t, m, "yes" if ok else "**no**"] for t, m, ok in goals])
    const_table = md_table(["constant", "value"], [[k, f"{v:.3g}"] for k, v in constants.items() if k != "cores"])
    pred_table = md_table(
        ["scenario", "workers", "groups", "tree depth", "compute", "fixed a", "driver (b + c g) r", "tree levels",
         "step", "speed-up", "efficiency", "star efficiency", "dominant"],
        [[e["scenario"], f"{e['workers']:,}", e["groups"], e["depth"], _ms(e["compute"]), _ms(e["fixed"]),
          _ms(e["driver"]), _ms(e["tree"]), _ms(e["step"]), f"{e['speedup']:.1f}x",
          f"{100 * e['efficiency']:.1f}%", f"{100 * e['star_efficiency']:.1f}%", e["dominant"]] for e in scen],
    )
    reading = (
        f"`{p['max_iter']}` gd steps per fit, {p['repeats']} fit(s) per row after an untimed warm-up, the first "
        f"step of each fit (which starts the runners) left out; medians over all steps. Tiny data: "
        f"{p['blocks_per_worker']} blocks of {p['tiny_rows_per_block']} rows x {p['tiny_features']} features per "
        f"worker; wide: {p['wide_features']:,} features; main: {p['rows']:,} x {p['features']} in "
        f"{p['chunks']} blocks. This machine has {cores} cores: rho = workers / cores of oversubscription. "
        f"Driver CPU: CPU seconds of the driver process (all threads) per step. Per level: seconds from a "
        f"runner receiving the step to its answer, slowest runner of each level. Cost model: "
        f"`docs/performance.md`; the `o` term is this machine's contention (0 in the predictions)."
    )
    markdown = "\n\n".join([
        reading, "### Measured (median per step)", measured, "### Targets", goal_table,
        "### Cost model constants (fitted to the rows above; non-negative least squares, relative errors)",
        const_table,
        f"### Predictions (one core per worker, one block per worker, split_every={p['split_every']})",
        pred_table,
    ])
    return {
        "title": "Scale-out: star and tree on 1-32 worker processes",
        "markdown": markdown,
        "table": "\n\n".join([measured, goal_table, pred_table]),
        "data": {"parameters": {**p, "cores": cores}, "records": records, "constants": constants,
                 "predictions": scen, "targets": [{"target": t, "measured": m, "met": ok} for t, m, ok in goals],
                 "measure_wall": wall},
    }

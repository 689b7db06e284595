"""Strong scaling of full-batch steps, and a cost model of the step time.

The same data (generated on the workers, persisted) is fitted with ``solver="gd"``,
``tol=0``, a fixed learning rate and a fixed ``max_iter``, so every fit takes the same
``max_iter + 1`` distributed steps, on fresh ``LocalCluster``s of 1, 2, 4 and 8
single-threaded worker processes.  Three data sets separate the terms of the step time:

* ``main``: the problem itself (rows x features, ``chunks`` row blocks);
* ``tiny``: the same block count with almost no rows, so compute is ~0 and the step is
  the engine's fixed and per-worker cost;
* ``wide``: few rows but many features, so the parameters and gradient sent per step are
  large (the per-byte term).

All three run with the engine's default step transport (the runner tree of fan-in
``split_every=8``: up to 8 groups, the driver calls every runner, a star).  ``tiny`` and
``wide`` also run with ``split_every=2``, whose runner tree has levels below its roots
at 3 or more groups (the tree terms).  The constants of the cost model (see
``docs/performance.md`` and :func:`step_model`) are fitted to all of these by
non-negative least squares on relative errors, the measured and predicted step times are
printed side by side, and the model predicts the strong-scaling efficiency of the main
problem at 64, 512 and 4,096 workers.  The ``scale`` suite measures the tree on up to 32
worker processes and predicts larger problems and weak scaling.
"""

import math
import os
import time
import warnings

import numpy as np

from .._common import make_data, md_table, median, start_cluster, suite_params

NAME = "scaling"
DESCRIPTION = (
    "Full-batch step time at 1, 2, 4, 8 workers; speed-up 1->2; a fitted cost model "
    "and its strong-scaling predictions at 64, 512 and 4,096 workers"
)

SIZES = {
    "small": dict(
        rows=200_000,
        features=100,
        chunks=16,
        workers=(1, 2, 4, 8),
        max_iter=10,
        repeats=2,
        tiny_rows_per_chunk=50,
        tiny_features=10,
        wide_rows_per_chunk=16,
        wide_features=5_000,
        split_every=8,
        tree_split_every=2,
        predict_rows=2_000_000,
        predict_features=100,
        predict_chunks=16,
        predict_workers=(64, 512, 4096),
        seed=0,
        cores=None,
    ),
    "full": dict(
        rows=2_000_000,
        features=100,
        chunks=16,
        workers=(1, 2, 4, 8),
        max_iter=10,
        repeats=3,
        tiny_rows_per_chunk=50,
        tiny_features=10,
        wide_rows_per_chunk=16,
        wide_features=20_000,
        split_every=8,
        tree_split_every=2,
        predict_rows=2_000_000,
        predict_features=100,
        predict_chunks=16,
        predict_workers=(64, 512, 4096),
        seed=0,
        cores=None,
    ),
}

#: Per-step timing columns the engine may add to ``history_`` (shown as "–" if absent).
OPTIONAL_COLUMNS = ("broadcast_time", "reduce_time", "update_time")

#: Names of the cost-model constants, in the order of the design matrix columns.
COMPUTE_CONSTANTS = ("t_elem", "t_row", "t_block")
COMM_CONSTANTS = ("a", "b", "c", "h", "w", "e", "o")
TARGET_SPEEDUP = 1.8


# ----------------------------------------------------------------------------- data


def safe_learning_rate(rows, features):
    """1/L for the mean logistic loss on standard normal X: L <= (1 + sqrt(d/n))^2 / 4."""
    return 1.0 / (0.25 * (1.0 + math.sqrt(features / rows)) ** 2 + 1e-12)


def layout(rows, chunks, workers):
    """(groups, blocks in the largest group, rows in the largest group).

    The engine makes one group per worker holding blocks (so at most one per block) and
    keeps the groups within about 10% of an equal share of rows; with equal blocks the
    largest group has ``ceil(chunks / groups)`` of them.
    """
    groups = min(workers, chunks)
    blocks = -(-chunks // groups)
    block_rows = -(-rows // chunks)
    return groups, blocks, min(rows, blocks * block_rows)


def tree_inner_levels(n_items, split_every):
    """Inner levels of the fixed reduction tree over ``n_items`` (levels summed before
    the last one)."""
    levels = 0
    while n_items > split_every:
        n_items = -(-n_items // split_every)
        levels += 1
    return levels


def _runs(n, k):
    """The lengths of ``n`` items cut, in order, into ``k`` contiguous runs of near-equal
    length (fewer when shorter)."""
    k = min(k, n)
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def tree_shape(groups, split_every, transport="tree"):
    """``(roots, children)`` of the runner tree a step takes: the runners the driver
    calls, and for each level below them the most children one runner of that level
    forwards to (the critical path).  The star: every group a root, no levels.

    The tree is the engine's, as ``docs/performance.md`` and the user guide describe it:
    the groups, in order, cut into ``split_every`` contiguous runs at every level, the
    first group of a run its root and the rest its subtree (written here from that
    description: the engine's tree is private; tests/test_benchmark_suites.py checks
    the two agree)."""
    if transport == "star" or groups <= 1:
        return max(groups, 1), []
    if split_every < 2:
        raise ValueError(f"the fan-in must be at least 2; got {split_every}")
    level, kids = _runs(groups, split_every), []  # the size of each runner's subtree, itself included
    roots = len(level)
    while any(n > 1 for n in level):
        below = [_runs(n - 1, split_every) if n > 1 else [] for n in level]
        kids.append(max(len(b) for b in below))
        level = [c for b in below for c in b]
    return roots, kids


def transport_rule(groups, n_params, split_every):
    """The engine's default step transport (``dgd.step-transport="auto"``): the runner
    tree, which is the star while there are no more groups than ``split_every``."""
    return "tree"


#: The transport a step takes for each ``dgd.step-transport`` setting, as the user guide
#: documents it ("auto" and "tree": the runner tree; "star" and its earlier name "actor":
#: the driver calls every runner; "task": scheduler tasks).
STEP_TRANSPORTS = {"auto": "tree", "tree": "tree", "star": "star", "actor": "star", "task": "task"}


def engine_transport(groups, n_params, split_every, requested="auto"):
    """The transport the engine uses for a step (``requested`` as the
    ``dgd.step-transport`` setting): ``"tree"``, ``"star"`` or ``"task"``
    (:data:`STEP_TRANSPORTS`; tests/test_benchmark_suites.py checks it against the
    engine)."""
    if requested not in STEP_TRANSPORTS:
        raise ValueError(f"dgd.step-transport must be one of {', '.join(map(repr, STEP_TRANSPORTS))}; "
                         f"got {requested!r}")
    return STEP_TRANSPORTS[requested]


# ----------------------------------------------------------------------------- the cost model
def compute_features(rec, cores):
    """Design row of the compute term: oversubscription x (elements, rows, blocks) of the largest group."""
    rho = max(1.0, rec["workers"] / cores) if cores else 1.0
    rows = rec["max_group_rows"]
    return [rho * rows * (rec["features"] + 1), rho * rows, rho * rec["max_group_blocks"]]


def comm_features(rec, cores):
    """Design row of the communication term: 1, r, g r, L, K, g K, G (rho - 1).

    ``r`` runners are called by the driver (the star: every group; the tree: at most
    ``split_every``), each costing the driver a call and a reply (``b``) and ``g`` floats
    each way plus their merge (``c``).  Below the roots, ``L`` levels of the tree each
    add a hop (``h``) and, on the critical path, a runner that forwards the step to and
    merges the answers of ``k`` children (``K`` = the sum of ``k`` over the levels:
    ``w`` per child, ``e`` per float merged).  The last column is the measuring
    machine's contention: worker processes sharing cores answer late; zero with one
    core per worker (``cores=None``).
    """
    G, g = rec["groups"], rec["n_params"]
    r, kids = tree_shape(G, rec["split_every"], rec["transport"])
    rho = max(1.0, rec["workers"] / cores) if cores else 1.0
    K = float(sum(kids))
    return [1.0, r, g * r, len(kids), K, g * K, G * (rho - 1.0)]


def _nnls_relative(A, b):
    """Non-negative x minimising sum(((A x - b) / b)^2): relative errors weigh equally."""
    from scipy.optimize import nnls

    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    w = 1.0 / np.maximum(b, 1e-9)
    scale = np.maximum(np.abs(A * w[:, None]).max(axis=0), 1e-300)  # column scaling
    x, _ = nnls(A * w[:, None] / scale, b * w)
    return x / scale


def fit_comm_constants(records, cores):
    """The communication constants fitted to records' ``overhead`` (see
    :func:`comm_features`), by non-negative least squares on relative errors."""
    xo = _nnls_relative([comm_features(r, cores) for r in records], [r["overhead"] for r in records])
    return dict(zip(COMM_CONSTANTS, xo.tolist()))


def fit_cost_model(records, cores):
    """Fit the model's constants to measured records (see :func:`step_model`).

    Each record has ``workers, groups, max_group_blocks, max_group_rows, features,
    n_params, split_every, transport`` and the measured medians ``compute`` (slowest
    group's compute time) and ``overhead`` (step time minus that).  The compute
    constants come from ``compute``, the communication constants from ``overhead``;
    both by non-negative least squares on relative errors.
    """
    Ac = [compute_features(r, cores) for r in records]
    xc = _nnls_relative(Ac, [r["compute"] for r in records])
    constants = dict(zip(COMPUTE_CONSTANTS, xc.tolist()))
    constants.update(fit_comm_constants(records, cores))
    constants["cores"] = cores
    return constants


def step_model(
    constants, *, workers, rows, features, chunks, split_every, n_params=None, cores=None,
    transport=None,
):
    """Predicted step time and its terms (seconds).

    ``T_step(P) = rho(P) (t_elem R_max (d+1) + t_row R_max + t_block B_max)   compute
               + a + (b + c g) r                      the driver's calls (r runners)
               + h L + (w + e g) K                    the levels of the tree below them
               + o G (rho(P) - 1)                     measuring machine only: shared cores``

    with G = min(P, chunks) groups, B_max / R_max the blocks / rows of the largest group,
    g = n_params floats (features + 1 for binary logistic regression), r, L and K the
    shape of the runner tree of fan-in s = ``split_every`` (:func:`tree_shape`; the
    star: r = G, L = K = 0) and rho(P) = max(1, P / cores) the oversubscription of the
    measuring machine (1 for ``cores=None``: one core per worker).
    ``transport=None``: the engine's default (the tree).
    """
    g = features + 1 if n_params is None else n_params
    groups, blocks, max_rows = layout(rows, chunks, workers)
    rec = dict(
        workers=workers, groups=groups, max_group_blocks=blocks, max_group_rows=max_rows,
        features=features, n_params=g, split_every=split_every,
        transport=transport or transport_rule(groups, g, split_every),
    )
    cf = compute_features(rec, cores)
    of = comm_features(rec, cores)
    k = constants
    terms = {
        "compute": k["t_elem"] * cf[0] + k["t_row"] * cf[1] + k["t_block"] * cf[2],
        "fixed": k["a"] * of[0],
        "driver": k["b"] * of[1] + k["c"] * of[2],
        "tree": k["h"] * of[3] + k["w"] * of[4] + k["e"] * of[5],
        "oversubscription": k["o"] * of[6],
    }
    terms["step"] = sum(terms.values())
    terms.update(groups=groups, blocks=blocks, max_rows=max_rows, transport=rec["transport"],
                 roots=int(of[1]), depth=1 + int(of[3]))
    return terms


#: The scenarios of the predictions: (name, rows at P workers, features, weak scaling).
SCENARIOS = (
    ("a: 2,000,000 x 100 (1.6 GB), strong", lambda P: 2_000_000, 100, False),
    ("b: 20,000,000 x 100 (16 GB), strong", lambda P: 20_000_000, 100, False),
    ("c: 0.5 GB of X per worker, weak", lambda P: P * (500_000_000 // (8 * 100)), 100, True),
)


def scenario_table(constants, *, split_every, workers_list, scenarios=SCENARIOS, transport=None):
    """Predicted step, speed-up and efficiency (one core per worker, one block per
    worker) for each scenario at each worker count, with the terms and the dominant
    one.  Strong scaling: efficiency T(1) / (P T(P)); weak: T(1) / T(P).
    ``transport``: ``"star"`` for the driver calling every group (default: the tree)."""
    out = []
    for name, rows_at, features, weak in scenarios:
        base = step_model(constants, workers=1, rows=rows_at(1), features=features, chunks=1,
                          split_every=split_every)["step"]
        for P in workers_list:
            t = step_model(constants, workers=P, rows=rows_at(P), features=features, chunks=P,
                           split_every=split_every, transport=transport)
            parts = {k: t[k] for k in ("compute", "fixed", "driver", "tree")}
            eff = base / t["step"] if weak else base / (P * t["step"])
            out.append(dict(
                scenario=name, workers=P, rows=rows_at(P), groups=t["groups"], depth=t["depth"], roots=t["roots"],
                **parts, step=t["step"], speedup=(P * base / t["step"]) if weak else base / t["step"],
                efficiency=eff, dominant=max(parts, key=parts.get), base=base,
            ))
    return out


def efficiency_table(constants, *, rows, features, chunks, split_every, workers_list, transport=None):
    """Predicted strong scaling (one core per worker) for several block layouts."""
    base = step_model(
        constants, workers=1, rows=rows, features=features, chunks=chunks, split_every=split_every
    )["step"]
    out = []
    for P in workers_list:
        for n_chunks, label in ((chunks, f"{chunks} (as measured)"), (max(P, chunks), f"{max(P, chunks)} (= workers)")):
            t = step_model(
                constants, workers=P, rows=rows, features=features, chunks=n_chunks,
                split_every=split_every, transport=transport,
            )
            parts = {k: t[k] for k in ("compute", "fixed", "driver", "tree")}
            out.append(
                dict(
                    workers=P, chunks=n_chunks, chunks_label=label, groups=t["groups"],
                    transport=t["transport"], depth=t["depth"],
                    **parts, step=t["step"], speedup=base / t["step"],
                    efficiency=base / (P * t["step"]), dominant=max(parts, key=parts.get),
                )
            )
    return base, out


def limit_workers(constants, *, rows, features, split_every, efficiency=0.5, max_workers=2**20):
    """The smallest power-of-two worker count (one block each) at which the predicted
    strong-scaling efficiency falls below ``efficiency`` (None: not below
    ``max_workers``): where adding workers stops paying for a fixed problem."""
    base = step_model(constants, workers=1, rows=rows, features=features, chunks=1, split_every=split_every)["step"]
    P = 1
    while P <= max_workers:
        t = step_model(constants, workers=P, rows=rows, features=features, chunks=P, split_every=split_every)
        if base / (P * t["step"]) < efficiency:
            return P
        P *= 2
    return None


# ----------------------------------------------------------------------------- measurement
def _fit(client, X, y, *, max_iter, learning_rate, split_every, transport="auto"):
    import dask

    from dask_dgd import LogisticRegression

    est = LogisticRegression(
        alpha=1e-4, solver="gd", tol=0.0, max_iter=max_iter, learning_rate=learning_rate,
        split_every=split_every, client=client,
    )
    with warnings.catch_warnings(), dask.config.set({"dgd.step-transport": transport}):
        warnings.simplefilter("ignore")  # tol=0: "did not converge" is the point
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    return est.history_, wall


def _sum_blocks(*blocks):
    """Seconds to read the given blocks once (``block.sum()``), inside the task."""
    t0 = time.perf_counter()
    for b in blocks:
        b.sum()
    return time.perf_counter() - t0


def cluster_read(client, X, repeats=5):
    """Median over ``repeats`` of the slowest worker's one-pass read of the blocks it
    holds, all workers at once (the memory-bandwidth floor of a full-batch step)."""
    from distributed import futures_of

    futures = futures_of(X)
    who = client.who_has(futures)
    by_worker = {}
    for f in futures:
        by_worker.setdefault(who[f.key][0], []).append(f)
    samples = []
    for r in range(repeats + 1):  # the first is a warm-up
        tasks = [
            client.submit(_sum_blocks, *fs, workers=[w], allow_other_workers=False, pure=False)
            for w, fs in sorted(by_worker.items())
        ]
        times = client.gather(tasks)
        if r:
            samples.append(max(times))
    return median(samples)


def measure_workers(P, p, datasets, configs, repeats, log):
    """Fits of every (dataset, split_every) on a fresh cluster of ``P`` workers."""
    cluster, client = start_cluster(P)
    records = []
    try:
        client.wait_for_workers(P)
        data = {}
        for name, spec in datasets.items():
            t0 = time.perf_counter()
            data[name] = make_data(client, spec["rows"], spec["features"], p["chunks"], p["seed"])
            log(f"{P} workers: {name} data {spec['rows']} x {spec['features']} in {time.perf_counter() - t0:.1f}s")
        read = cluster_read(client, data["main"][0])
        log(f"{P} workers: one-pass read of the main X {read * 1e3:.1f} ms")
        # Warm-up (imports on the workers, first-call caches); not recorded.
        X, y = data["tiny"]
        _fit(client, X, y, max_iter=2, learning_rate=datasets["tiny"]["lr"], split_every=p["split_every"])
        for name, s, requested in configs:
            spec = datasets[name]
            X, y = data[name]
            steps, walls = [], []
            for _ in range(repeats):
                h, wall = _fit(
                    client, X, y, max_iter=p["max_iter"], learning_rate=spec["lr"],
                    split_every=s, transport=requested,
                )
                steps.append(h)
                walls.append(wall)
            rec = _summarise(P, name, spec, p["chunks"], s, steps, walls)
            rec["transport"] = engine_transport(rec["groups"], rec["n_params"], s, requested)
            rec["read"] = read if name == "main" else None
            log(
                f"{P} workers: {name} s={s} {rec['transport']} step {rec['step'] * 1e3:.2f} ms, compute max "
                f"{rec['compute'] * 1e3:.2f} ms, overhead {rec['overhead'] * 1e3:.2f} ms"
            )
            records.append(rec)
    finally:
        client.close()
        cluster.close()
    return records


def _median_finite(values):
    """Median of the finite values (None where there are none: e.g. a column the engine
    leaves empty on some steps)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return median(xs)


def _summarise(P, name, spec, chunks, split_every, histories, walls):
    import pandas as pd

    h = pd.concat(histories, ignore_index=True)
    step = h["step_time"].astype(float)
    cmax = h["compute_time_max"].astype(float)
    groups, blocks, max_rows = layout(spec["rows"], chunks, P)
    rec = dict(
        data=name, workers=P, split_every=split_every, rows=spec["rows"],
        features=spec["features"], n_params=spec["features"] + 1, chunks=chunks,
        groups=groups, max_group_blocks=blocks, max_group_rows=max_rows,
        steps_per_fit=len(histories[0]), n_steps=len(h),
        step=median(step.tolist()), compute=median(cmax.tolist()),
        compute_min=median(h["compute_time_min"].astype(float).tolist()),
        overhead=median((step - cmax).tolist()),
        fit_wall=median(walls), fit_walls=walls,
    )
    for col in OPTIONAL_COLUMNS:
        rec[col] = _median_finite(h[col].astype(float).tolist()) if col in h.columns else None
    return rec


# ----------------------------------------------------------------------------- report
def _t(x):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if abs(x) < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if abs(x) < 1:
        return f"{x * 1e3:.2f} ms"
    return f"{x:.2f} s"


def _sci(x):
    return f"{x:.3g}"


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    repeats = p["repeats"]
    cores = p["cores"] or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    chunks = p["chunks"]
    datasets = {
        "main": dict(rows=p["rows"], features=p["features"]),
        "tiny": dict(rows=p["tiny_rows_per_chunk"] * chunks, features=p["tiny_features"]),
        "wide": dict(rows=p["wide_rows_per_chunk"] * chunks, features=p["wide_features"]),
    }
    for spec in datasets.values():
        spec["lr"] = safe_learning_rate(spec["rows"], spec["features"])
    s, s_tree = p["split_every"], p["tree_split_every"]
    # The default transport at split_every=s (a star up to s groups); the runner tree
    # with split_every=s_tree, which has levels below its roots at 3 or more groups.
    configs = [
        ("main", s, "auto"), ("tiny", s, "auto"), ("wide", s, "auto"),
        ("tiny", s_tree, "tree"), ("wide", s_tree, "tree"),
    ]

    t_start = time.perf_counter()
    records = []
    for P in p["workers"]:
        records += measure_workers(P, p, datasets, configs, repeats, log)
    measure_wall = time.perf_counter() - t_start

    constants = fit_cost_model(records, cores)
    for r in records:
        pred = step_model(
            constants, workers=r["workers"], rows=r["rows"], features=r["features"],
            chunks=r["chunks"], split_every=r["split_every"], cores=cores,
            transport=r["transport"],
        )
        r["predicted_step"] = pred["step"]
        r["predicted_compute"] = pred["compute"]
        r["predicted_overhead"] = pred["step"] - pred["compute"]
        r["step_rel_error"] = (pred["step"] - r["step"]) / r["step"]

    def rec(name, P, split):
        return next(
            (r for r in records
             if r["data"] == name and r["workers"] == P and r["split_every"] == split),
            None,
        )

    r1, r2 = rec("main", 1, s), rec("main", 2, s)
    speedup = r1["step"] / r2["step"] if r1 and r2 else None
    wall_speedup = r1["fit_wall"] / r2["fit_wall"] if r1 and r2 else None
    base, eff = efficiency_table(
        constants, rows=p["predict_rows"], features=p["predict_features"],
        chunks=p["predict_chunks"], split_every=s, workers_list=p["predict_workers"],
    )

    limit = limit_workers(constants, rows=p["predict_rows"], features=p["predict_features"], split_every=s)

    # ---- tables
    measured = md_table(
        ["data", "rows x features", "workers", "split_every", "transport", "groups", "blocks/group",
         "step", "compute max", "overhead", "broadcast", "reduce", "update", "fit wall"],
        [
            [r["data"], f"{r['rows']:,} x {r['features']:,}", r["workers"], r["split_every"],
             r["transport"], r["groups"], r["max_group_blocks"], _t(r["step"]), _t(r["compute"]),
             _t(r["overhead"]), _t(r["broadcast_time"]), _t(r["reduce_time"]),
             _t(r["update_time"]), _t(r["fit_wall"])]
            for r in records
        ],
    )
    verdict = (
        "–" if speedup is None
        else f"**{speedup:.2f}x** ({'meets' if speedup >= TARGET_SPEEDUP else 'BELOW'} the {TARGET_SPEEDUP}x target)"
    )
    read_speedup = r1["read"] / r2["read"] if r1 and r2 and r1.get("read") and r2.get("read") else None
    read_line = (
        ""
        if read_speedup is None
        else (
            f" For comparison, a one-pass read of the same X on the same clusters (each worker "
            f"summing the blocks it holds, all at once, slowest worker): {_t(r1['read'])} -> "
            f"{_t(r2['read'])} = {read_speedup:.2f}x: the memory-bandwidth ceiling of a "
            f"memory-bound step on this machine; step / read {r1['step'] / r1['read']:.2f} at 1 "
            f"worker, {r2['step'] / r2['read']:.2f} at 2."
        )
    )
    speed_line = (
        f"Speed-up 1 -> 2 workers, main data, median full-batch step: {verdict}; "
        f"whole fit wall (setup included): "
        f"{'–' if wall_speedup is None else f'{wall_speedup:.2f}x'}.{read_line}"
    )
    const_rows = [
        ["t_elem", _sci(constants["t_elem"]), "s per element (row x (features+1)) of the largest group, one core"],
        ["t_row", _sci(constants["t_row"]), "s per row of the largest group (the pointwise loss and its derivative)"],
        ["t_block", _sci(constants["t_block"]), "s per block of the largest group (per-block call overhead)"],
        ["a", _sci(constants["a"]), "s per step, fixed (driver update and bookkeeping)"],
        ["b", _sci(constants["b"]), "s per runner the driver calls (one call out, its answer back)"],
        ["c", _sci(constants["c"]),
         f"s per parameter float per runner the driver calls (= {constants['c'] / 8:.3g} s/byte)"],
        ["h", _sci(constants["h"]), "s per level of the runner tree below the roots (one hop)"],
        ["w", _sci(constants["w"]), "s per child a runner forwards to and merges (critical path)"],
        ["e", _sci(constants["e"]), "s per float of a child's answer merged by a runner"],
        ["o", _sci(constants["o"]),
         "s per group per extra worker per core (this machine's contention; 0 in predictions)"],
    ]
    const_table = md_table(["constant", "value", "meaning"], const_rows)
    check = md_table(
        ["data", "workers", "split_every", "transport", "measured step", "predicted step", "error",
         "measured overhead", "predicted overhead"],
        [
            [r["data"], r["workers"], r["split_every"], r["transport"], _t(r["step"]),
             _t(r["predicted_step"]),
             f"{100 * r['step_rel_error']:+.0f}%", _t(r["overhead"]), _t(r["predicted_overhead"])]
            for r in records
        ],
    )
    eff_table = md_table(
        ["workers", "chunks", "groups", "tree depth", "compute", "fixed a", "driver (b + c g) r",
         "tree levels", "step", "speed-up", "efficiency", "dominant"],
        [
            [e["workers"], e["chunks_label"], e["groups"], e["depth"], _t(e["compute"]), _t(e["fixed"]),
             _t(e["driver"]), _t(e["tree"]), _t(e["step"]),
             f"{e['speedup']:.1f}x", f"{100 * e['efficiency']:.1f}%", e["dominant"]]
            for e in eff
        ],
    )
    errs = [abs(r["step_rel_error"]) for r in records]
    title = "Strong scaling and the step-time cost model"
    reading = (
        f"Same data at every cluster size (generated on the workers, persisted); "
        f"`solver='gd'`, `tol=0`, fixed learning rate, `max_iter={p['max_iter']}` "
        f"({records[0]['steps_per_fit']} steps per fit), {repeats} fits per row after an "
        f"untimed warm-up fit; medians over all steps. This machine has {cores} cores: at "
        f"more workers than cores the workers share cores, so compute is inflated by "
        f"rho = workers / cores (the model includes it for the check below and drops it "
        f"for the predictions); the communication terms are what those rows measure. "
        f"Cost model and reading: `docs/performance.md`."
    )
    markdown = "\n\n".join(
        [
            reading,
            "### Measured (median per step)",
            measured,
            speed_line,
            "### Cost model: constants fitted to the rows above (non-negative least squares, relative errors)",
            const_table,
            f"Measured vs predicted: median |error| {100 * median(errs):.0f}%, max {100 * max(errs):.0f}%.",
            check,
            f"### Predicted strong scaling, {p['predict_rows']:,} x {p['predict_features']} "
            f"(one core per worker, split_every={s}; T(1) = {_t(base)})",
            eff_table,
            f"With one block per worker, the predicted strong-scaling efficiency of this "
            f"problem falls below 50% at **{limit if limit else 'more than 2^20'}** workers: "
            f"there a worker's compute is as small as the step's fixed, driver and tree terms, "
            f"which grow only with log(workers). Predictions for larger problems and weak "
            f"scaling: the `scale` suite and `docs/performance.md`.",
        ]
    )
    table = "\n\n".join([measured, speed_line, const_table, check, eff_table])
    return {
        "title": title,
        "markdown": markdown,
        "table": table,
        "data": {
            "parameters": {**p, "repeats": repeats, "cores": cores},
            "records": records,
            "speedup_1_to_2": speedup,
            "read_speedup_1_to_2": read_speedup,
            "fit_wall_speedup_1_to_2": wall_speedup,
            "target_speedup": TARGET_SPEEDUP,
            "constants": constants,
            "predicted_step_1_worker": base,
            "efficiency": eff,
            "efficiency_below_half_at": limit,
            "measure_wall": measure_wall,
        },
    }

"""The ``linear`` suite's report: the run's summary, its targets and the Markdown tables."""

from ..._common import md_table, median
from .peers import PROFILE_COLUMNS

TARGET_SKLEARN_RATIO = 0.7
TARGET_PEER_RATIO = 10.0
TARGET_STEP_OVER_READ = 2.5
TARGET_OVERHEAD_S = 0.015


# ----------------------------------------------------------------------------- summary
def _rel_gap(value, best):
    return (value - best) / abs(best)


def _in_band(ladder, best, band):
    """The rungs of ``ladder`` whose (first) run is within ``band`` of ``best``, in order."""
    return [g for g in ladder if _rel_gap(g["runs"][0]["objective"], best) <= band]


def _read_summary(result, cfg):
    """One-pass read figures: slowest worker scaled to an equal share of the rows."""
    reads = result["cluster_read"]
    rows_per_worker = cfg.rows / cfg.workers
    rows_per_block = cfg.rows / cfg.chunks

    def figures(rd):
        workers = sorted(rd["blocks_per_worker"])
        # The engine gives every worker the same number of rows; Dask may have placed
        # more blocks on one worker, so scale each worker's pass to an equal share.
        per_sample = [
            max(
                t * rows_per_worker / (rd["blocks_per_worker"][w] * rows_per_block)
                for t, w in zip(sample, workers)
            )
            for sample in rd["task_time_per_worker"]
        ]
        return {
            "equal_share": median(per_sample),
            "max_task": median(rd["max_task_time"]),
            "wall": median(rd["wall"]),
        }

    out = {kind: figures(rd) for kind, rd in reads.items()}
    out["driver_sum"] = median(result["driver_read_sum"])
    out["blocks_per_worker"] = reads["sum"]["blocks_per_worker"]
    return out


def _steps(chosen, column):
    """All recorded step values of ``column`` over the runs (empty when absent)."""
    return [v for r in chosen if r.get(column) for v in r[column] if v is not None]


def summarise(result, cfg):
    """Median figures per configuration, the per-step comparison and the targets."""
    best = result["best_objective"]
    read = result["read_summary"] = _read_summary(result, cfg)
    one_pass, kernel = read["sum"]["equal_share"], read["kernel"]["equal_share"]

    table = []
    for key, rec in result["runs"].items():
        row = {
            "key": key,
            "name": rec["name"],
            "solver": rec["solver"],
            "error": rec["error"],
            "skipped": rec["skipped"],
        }
        table.append(row)
        if not rec["ladder"]:
            continue
        in_band = _in_band(rec["ladder"], best, cfg.band)
        rung = in_band[0] if in_band else rec["ladder"][-1]
        chosen = rung["runs"]
        row.update(
            tol=rung["tol"],
            reached=bool(in_band),
            wall=median([r["wall"] for r in chosen]),
            walls=[r["wall"] for r in chosen],
            n_iter=median([r["n_iter"] for r in chosen]),
            n_steps=median([r["n_steps"] for r in chosen]),
            objective=chosen[0]["objective"],
            rel_gap=_rel_gap(chosen[0]["objective"], best),
            setup=median([r.get("setup") for r in chosen]),
            ladder=[
                {
                    "tol": g["tol"],
                    "wall": g["runs"][0]["wall"],
                    "n_iter": g["runs"][0]["n_iter"],
                    "n_steps": g["runs"][0]["n_steps"],
                    "objective": g["runs"][0]["objective"],
                    "rel_gap": _rel_gap(g["runs"][0]["objective"], best),
                    "capped": g["runs"][0]["capped"],
                }
                for g in rec["ladder"]
            ],
        )
        if rec["name"] == "dask_dgd":
            over = [
                a - b
                for r in chosen
                for a, b in zip(r["step_time"] or [], r["compute_time_max"] or [])
                if a is not None and b is not None
            ]
            row.update(
                step_time=median(_steps(chosen, "step_time")),
                compute_time_max=median(_steps(chosen, "compute_time_max")),
                overhead=median(over),
                **{col: median(_steps(chosen, col)) for col in PROFILE_COLUMNS},
            )
            if row["step_time"] and one_pass:
                row["step_over_read"] = row["step_time"] / one_pass
                row["compute_over_read"] = row["compute_time_max"] / one_pass
                row["compute_over_kernel"] = row["compute_time_max"] / kernel

    sk = next((r for r in table if r["name"] == "scikit-learn" and r.get("reached")), None)
    dgd = min(
        (r for r in table if r["name"] == "dask_dgd" and r.get("reached")),
        key=lambda r: r["wall"],
        default=None,
    )
    for row in table:
        if row.get("wall") is None:
            continue
        if sk is not None:
            row["ratio_vs_sklearn"] = row["wall"] / sk["wall"]
        if dgd is not None:
            row["ratio_vs_dask_dgd"] = row["wall"] / dgd["wall"]
    result["table"] = table
    result["reference"] = {"scikit-learn": sk and sk["key"], "dask_dgd": dgd and dgd["key"]}
    result["targets"] = targets(result, cfg)


def _peer_target(table, name, dgd, label):
    """The ``name`` / dask_dgd time-to-optimum target row (fastest configuration in band)."""
    target = f"{label} / dask_dgd time to optimum >= {TARGET_PEER_RATIO:g}"
    rows = [r for r in table if r["name"] == name]
    ran = [r for r in rows if r.get("wall") is not None]
    if not rows:
        return {"target": target, "measured": "not run", "met": None}
    if dgd is None:
        return {"target": target, "measured": "dask_dgd not in band", "met": None}
    in_band = [r for r in ran if r["reached"]]
    if in_band:
        fastest = min(in_band, key=lambda r: r["wall"])
        ratio = fastest["wall"] / dgd["wall"]
        return {
            "target": target,
            "measured": f"{ratio:.1f} ({fastest['solver']} {_t(fastest['wall'])} / {_t(dgd['wall'])})",
            "value": ratio,
            "met": ratio >= TARGET_PEER_RATIO,
        }
    if ran:
        # None reached the band: each one's time to optimum exceeds its slowest run.
        bound = min(max(g["wall"] for g in r["ladder"]) for r in ran) / dgd["wall"]
        return {
            "target": target,
            "measured": f"> {bound:.1f} (no configuration reached the band)",
            "value": bound,
            "met": True if bound >= TARGET_PEER_RATIO else None,
        }
    return {"target": target, "measured": "every configuration failed", "met": None}


def targets(result, cfg):
    """Rows ``{"target", "measured", "value", "met"}`` (``met`` is None when undecided)."""
    table, unavailable = result["table"], result["unavailable"]
    ref = result["reference"]
    by_key = {r["key"]: r for r in table}
    sk, dgd = by_key.get(ref["scikit-learn"]), by_key.get(ref["dask_dgd"])
    rows = []
    target = f"dask_dgd / scikit-learn time to optimum <= {TARGET_SKLEARN_RATIO:g}"
    if sk is not None and dgd is not None:
        ratio = dgd["wall"] / sk["wall"]
        rows.append({
            "target": target,
            "measured": f"{ratio:.2f} ({dgd['solver']} {_t(dgd['wall'])} / {_t(sk['wall'])})",
            "value": ratio,
            "met": ratio <= TARGET_SKLEARN_RATIO,
        })
    else:
        rows.append({"target": target, "measured": "scikit-learn or dask_dgd not in band", "met": None})
    for peer, name, label in (("dask-ml", "dask-ml", "fastest dask-ml"), ("spark", "spark-mllib", "Spark (fit)")):
        if peer in unavailable:
            rows.append({
                "target": f"{label} / dask_dgd time to optimum >= {TARGET_PEER_RATIO:g}",
                "measured": f"unavailable: {unavailable[peer]}",
                "met": None,
            })
        else:
            rows.append(_peer_target(table, name, dgd, label))
    for row in table:
        if row.get("step_over_read") is not None:
            rows.append({
                "target": f"dask_dgd {row['solver']}: step / one-pass read <= {TARGET_STEP_OVER_READ:g}",
                "measured": f"{row['step_over_read']:.2f}",
                "value": row["step_over_read"],
                "met": row["step_over_read"] <= TARGET_STEP_OVER_READ,
            })
        if row.get("overhead") is not None:
            rows.append({
                "target": f"dask_dgd {row['solver']}: step overhead <= {TARGET_OVERHEAD_S * 1e3:g} ms",
                "measured": _t(row["overhead"]),
                "value": row["overhead"],
                "met": row["overhead"] <= TARGET_OVERHEAD_S,
            })
    return rows


# ----------------------------------------------------------------------------- rendering
def _t(x):
    """Seconds, readable from microseconds to minutes (``None`` as an en dash)."""
    if x is None:
        return "–"
    if abs(x) < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if abs(x) < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def _n(x):
    return None if x is None else f"{x:g}"


def _ratio(x, fmt="{:.2f}"):
    return None if x is None else fmt.format(x)


def _tol(tol):
    """A rung's tolerance; ``None`` is the tool's own stopping rule (dask-ml admm)."""
    return "own rule" if tol is None else f"{tol:g}"


def _met(met):
    return {True: "yes", False: "**no**", None: "–"}[met]


def title(cfg):
    return (
        f"Logistic regression, {cfg.rows:,} x {cfg.features} float64, {cfg.chunks} blocks, "
        f"{cfg.workers} workers x 1 thread"
    )


def optimum_table(result):
    """Time to optimum: one row per configuration, failures and unavailable peers included."""
    headers = [
        "tool", "solver", "tol", "median wall", "iterations", "steps", "final objective",
        "rel gap to best", "in band", "x scikit-learn", "x dask_dgd",
    ]
    rows = []
    for r in result["table"]:
        if r.get("wall") is None:
            rows.append([r["name"], r["solver"], None, f"failed: {r['error']}", *[None] * 7])
            continue
        rows.append([
            r["name"], r["solver"], _tol(r["tol"]), _t(r["wall"]), _n(r["n_iter"]), _n(r["n_steps"]),
            f"{r['objective']:.12g}", f"{r['rel_gap']:.1e}", "yes" if r["reached"] else "**no**",
            _ratio(r.get("ratio_vs_sklearn")), _ratio(r.get("ratio_vs_dask_dgd"), "{:.3g}"),
        ])
    for peer, why in result["unavailable"].items():
        rows.append([peer, None, None, f"unavailable: {why}", *[None] * 7])
    return md_table(headers, rows)


def step_table(result):
    """Per-step figures of the dask_dgd fits against the one-pass read of X."""
    one_pass = result["read_summary"]["sum"]["equal_share"]
    kernel = result["read_summary"]["kernel"]["equal_share"]
    headers = [
        "tool", "solver", "median step", "compute max", "overhead", "broadcast", "reduce",
        "update", "one-pass read", "**step / read**", "compute max / read", "compute max / kernel",
    ]
    rows = [
        [
            r["name"], r["solver"], _t(r["step_time"]), _t(r["compute_time_max"]),
            _t(r["overhead"]), *[_t(r[c]) for c in PROFILE_COLUMNS], _t(one_pass),
            f"**{r['step_over_read']:.2f}**", f"{r['compute_over_read']:.2f}",
            f"{r['compute_over_kernel']:.2f}",
        ]
        for r in result["table"]
        if r.get("step_over_read") is not None
    ]
    if kernel and one_pass:
        rows.append([
            "(dask_dgd kernel alone)", None, None, _t(kernel), None, None, None, None,
            _t(one_pass), None, f"{kernel / one_pass:.2f}", "1.00",
        ])
    return md_table(headers, rows)


def targets_table(result):
    return md_table(
        ["target", "measured", "met"],
        [[t["target"], t["measured"], _met(t["met"])] for t in result["targets"]],
    )


def ladder_table(result):
    headers = ["tool", "solver", "tol", "wall", "iterations", "steps", "rel gap to best", "hit max_iter"]
    rows = []
    for r in result["table"]:
        for g in r.get("ladder", []):
            rows.append([
                r["name"], r["solver"], _tol(g["tol"]), _t(g["wall"]), _n(g["n_iter"]),
                _n(g["n_steps"]), f"{g['rel_gap']:.1e}",
                {True: "yes", False: "no", None: "?"}[g["capped"]],
            ])
        if r.get("skipped"):
            rows.append([
                r["name"], r["solver"], ", ".join(_tol(t) for t in r["skipped"]),
                "skipped (previous rung over the time limit)", *[None] * 4,
            ])
    return md_table(headers, rows)


def render(result, cfg):
    """The suite's section of RESULTS.md (without the runner's header)."""
    read = result["read_summary"]
    one_pass = read["sum"]["equal_share"]
    setting = (
        f"C={cfg.C:g} (alpha=1/(C n)={cfg.alpha:.3g}), seed={cfg.seed}, repeats={cfg.repeats}, "
        f"ladder {', '.join(_tol(t) for t in cfg.tols)}, band={cfg.band:g} relative to the best "
        f"objective {result['best_objective']:.12g}; positive rate {result['positive_rate']:.3f}; "
        f"scikit-learn and Spark on {cfg.threads} threads; tighter rungs skipped after a rung "
        f"over {cfg.rung_limit_s:g} s."
    )
    notes = []
    if any(r["name"] == "dask-ml" for r in result["table"]):
        notes.append(
            "dask-ml: `solver_kwargs={'normalize': False}`, C as scikit-learn (its lbfgs and "
            "admm also penalise the intercept; newton and gradient_descent take no penalty); "
            "it reports no iteration counts. admm ignores `tol` and runs at its own rule "
            f"(abstol 1e-4, reltol 1e-2) capped at max_iter={cfg.admm_max_iter}."
        )
    if "spark_load_time" in result:
        notes.append(
            f"Spark MLlib (`local[{cfg.threads}]`, driver memory {cfg.spark_memory}): session "
            f"start {_t(result['spark_session_time'])}, loading the data (Arrow, "
            f"`array_to_vector`, cache) {_t(result['spark_load_time'])}; neither is in its fit "
            "times above."
        )
    reads = (
        "One-pass read of X on the cluster (`block.sum()` over each worker's blocks, all "
        "workers at once, timed inside the tasks, slowest worker scaled to an equal share "
        f"of the rows; blocks per worker {sorted(read['blocks_per_worker'].values())}): "
        f"**{_t(one_pass)}** (raw slowest task {_t(read['sum']['max_task'])}, wall incl. "
        f"scheduling {_t(read['sum']['wall'])}). Same blocks, same way: one `block @ v` pass "
        f"{_t(read['gemv']['equal_share'])}; dask_dgd's block kernel "
        f"(`LinearObjective.block_sums`, no engine) {_t(read['kernel']['equal_share'])}. "
        f"Driver single-process `X.sum()` over all of X: {_t(read['driver_sum'])}. "
        "Overhead = step - compute max; broadcast / reduce / update are the engine's "
        "profile columns (– where `history_` lacks them)."
    )
    sk = next((r for r in result["table"] if r["name"] == "scikit-learn" and r.get("n_iter")), None)
    sklearn_step = sk and (
        f"For reference, scikit-learn (in memory, {cfg.threads} threads) took "
        f"{_t(sk['wall'] / sk['n_iter'])} per L-BFGS iteration (wall / iterations; an "
        "iteration may evaluate the loss more than once), "
        f"{sk['wall'] / sk['n_iter'] / read['driver_sum']:.2f}x the driver's `X.sum()`."
    )
    g, f = result["alignment"]["generated"], result["alignment"]["after_fits"]
    alignment = (
        f"Copies of X's blocks held by the workers: {g['copies']} as generated "
        f"({g['misaligned']} misaligned); {f['copies']} after the fits ({f['misaligned']} "
        f"not 8-byte aligned: blocks {f['misaligned_blocks']})."
    )
    setups = [r for r in result["table"] if r.get("setup") is not None]
    costs = (
        "dask_dgd fit setup (shards, label summary, encoding; inside the wall times above): "
        + (", ".join(f"{r['solver']} {_t(r['setup'])}" for r in setups) or "–")
        + ". Untimed warm-up fits: "
        + ", ".join(f"{name} {_t(t)}" for name, t in result["warmup"].items())
        + " (dask_dgd's also moves blocks to their shard's worker). Data generation on the "
        f"workers: {_t(result['generate_time'])}; gathering X, y into the driver for "
        f"scikit-learn and Spark: {_t(result['gather_to_driver_time'])} (not in their wall times)."
    )
    sections = [
        setting,
        "### Time to optimum (median of repeats at the loosest tolerance in the band)",
        optimum_table(result),
        " ".join(notes),
        "### Per step (dask_dgd, from `history_`) against one pass over X",
        reads,
        step_table(result),
        sklearn_step,
        alignment,
        "### Targets",
        targets_table(result),
        "### Tolerance ladder (one run each)",
        ladder_table(result),
        costs,
    ]
    return "\n\n".join(part for part in sections if part)

"""The ``wide`` suite's report: time to the logloss target, the verdicts and the tables."""

import math

import numpy as np

from ..._common import md_table

TARGET_SPARK_SPEEDUP = 10.0
#: issue 43: per-core rows/s against SGDClassifier, time to its logloss, logloss against VW's
TARGET_ONLINE_ROWS = 1.0
TARGET_ONLINE_TIME = 1.0
TARGET_ONLINE_VW = 1.2
TARGET_MEMORY_MB = 100.0
#: bytes per step per worker / (8 bytes x 2 directions x (non-zero columns of its blocks + 1))
TARGET_BYTES_RATIO = 2.0


# ----------------------------------------------------------------------------- the benchmark
def time_to_target(rec, target):
    """Seconds to the first epoch (or Spark fit) at or below ``target``; None if never."""
    hits = [c for c in rec.get("curve", []) if c["epoch"] > 0 and c["logloss"] <= target]
    return min((c["time"] for c in hits), default=None) if rec.get("ladder") else (hits[0]["time"] if hits else None)


# ----------------------------------------------------------------------------- report
def _t(x):
    if x is None:
        return None
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _lr(result, p):
    lrs = [r.get("learning_rate") for r in result["runs"] if r["tool"] == "dask_dgd" and r.get("learning_rate")]
    return f"{p['learning_rate']} ({lrs[0]:.3g})" if lrs and p["learning_rate"] == "auto" else str(p["learning_rate"])


def _dgd(result):
    """The reference dask_dgd run: sharded (the issue's subject) first, else the first that ran."""
    runs = [r for r in result["runs"] if r["tool"] == "dask_dgd" and "curve" in r]
    return next((r for r in runs if r["sharding"] is True), runs[0] if runs else None)


def main_table(result, p):
    dgd = _dgd(result)
    rows = []
    for r in result["runs"]:
        if "error" in r:
            rows.append([r["label"], None, f"failed: {r['error']}", *[None] * 6])
            continue
        ttt = r["time_to_target"]
        ratio_t = (ttt / dgd["time_to_target"]) if dgd and ttt and dgd["time_to_target"] else None
        ratio_r = (r["rows_per_s_per_core"] / dgd["rows_per_s_per_core"]) if dgd and r["rows_per_s_per_core"] \
            else None
        rows.append([r["label"], r["threads"], _t(ttt) if ttt is not None else "not reached",
                     f"{r['final_logloss']:.5f}", _t(r["wall"]),
                     None if r["rows_per_s_per_core"] is None else f"{r['rows_per_s_per_core']:,.0f}",
                     None if ratio_t is None else f"{ratio_t:.2f}", None if ratio_r is None else f"{ratio_r:.2f}",
                     " ".join(f"{c['logloss']:.4f}" for c in r["curve"][1:])])
    for peer, why in result["unavailable"].items():
        rows.append([peer, None, f"unavailable: {why}", *[None] * 6])
    return md_table(["tool", "threads", "time to target", f"held-out logloss after {p['epochs']} epochs",
                     f"time for {p['epochs']} epochs", "rows/s per core", "time to target / dask_dgd",
                     "rows/s per core / dask_dgd", "held-out logloss per epoch (Spark: per maxIter)"], rows)


def _mb(value):
    return None if value is None else f"{value:.0f} MB"


def dgd_table(result):
    rows = []
    cols = result.get("worker_columns") or {}
    mean_cols = float(np.mean(list(cols.values()))) if cols else None
    for r in [r for r in result["runs"] if r["tool"] == "dask_dgd" and "curve" in r] + \
            [m for m in result.get("memory_runs", []) if "error" not in m and m["n_features"] != 0]:
        per = (r["bytes_up_per_step_worker"] or 0) + (r["bytes_down_per_step_worker"] or 0)
        ratio = per / (16 * (mean_cols + 1)) if mean_cols else None
        rows.append([f"param_sharding={r['sharding']}", f"2**{int(math.log2(r['n_features']))}",
                     f"{r['driver_peak_mb']:.0f} MB", _mb(r.get("driver_peak_training_mb")),
                     f"{r['bytes_up_per_step_worker'] / 2**20:.2f} MiB",
                     f"{r['bytes_down_per_step_worker'] / 2**20:.2f} MiB",
                     None if mean_cols is None else f"{mean_cols:,.0f}",
                     None if ratio is None else f"{ratio:.1f}"])
    return md_table(["dask_dgd", "n_features", "driver peak RSS above idle (whole fit)",
                     "... until the last step (before the result is assembled)", "bytes up / step / worker",
                     "bytes down / step / worker", "non-zero columns of a worker's blocks (mean)",
                     "bytes per step per worker / (16 x (columns + 1))"], rows)


#: Relative gaps to the best training objective at which the L-BFGS ladders are compared.
OBJECTIVE_GAPS = (1e-3, 1e-5)
#: Issue 41: preconditioned L-BFGS at least this much faster than Spark MLlib's.
TARGET_LBFGS_SPEEDUP = 3.0


def _to_gap(rung_curve, best, gap):
    """``(iterations, time)`` at which a ladder's fits first reach ``best (1 + gap)``:
    the iterations from the largest fit's objective per iteration (Spark's
    ``objectiveHistory``, dask_dgd's history), the time of the first rung whose fit got
    there; None where none did."""
    last = max(rung_curve, key=lambda c: c["epoch"])
    its = next((i for i, v in enumerate(last["objective"]) if v <= best * (1 + gap)), None)
    rung = next((c for c in sorted(rung_curve, key=lambda c: c["epoch"])
                 if c["objective"] and min(c["objective"]) <= best * (1 + gap)), None)
    return its, None if rung is None else rung["time"]


def objective_verdicts(by_tool, un, line):
    """Issue 41's target for the wide model: sharded L-BFGS (diagonally scaled) against
    Spark's (which standardises internally) on the training objective they share, in
    iterations and in time, at :data:`OBJECTIVE_GAPS` from the better final value."""
    text = (f"issue 41: preconditioned L-BFGS reaches Spark's training objective in no more iterations and "
            f">= {TARGET_LBFGS_SPEEDUP:g}x faster than Spark MLlib")
    sp, ours = by_tool.get("spark"), by_tool.get("dask_dgd-lbfgs")
    if "spark" in un or sp is None or ours is None:
        return [line(text, None, "Spark unavailable" if "spark" in un else "not run")]
    curves = [[c for c in r["curve"] if c.get("objective")] for r in (sp, ours)]
    if not all(curves):
        return [line(text, None, "no objective recorded")]
    best = min(min(c["objective"]) for cs in curves for c in cs)
    out = []
    for gap in OBJECTIVE_GAPS:
        (its_s, t_s), (its_o, t_o) = (_to_gap(cs, best, gap) for cs in curves)
        if its_o is None or t_o is None:
            out.append(line(f"{text} (to {gap:g} of the best objective)", False if its_s is not None else None,
                            f"dask_dgd did not get there (Spark: {its_s} iterations)"))
            continue
        if its_s is None or t_s is None:
            out.append(line(f"{text} (to {gap:g} of the best objective)", None,
                            f"Spark did not get there; dask_dgd {its_o} iterations, {_t(t_o)}"))
            continue
        ratio = t_s / t_o
        out.append(line(f"{text} (to {gap:g} of the best objective {best:.8g})",
                        its_o <= its_s and ratio >= TARGET_LBFGS_SPEEDUP,
                        f"{its_o} iterations against {its_s}; {ratio:.2f}x ({_t(t_o)} against {_t(t_s)}, the first "
                        "rung of each ladder that got there)"))
    return out


def verdicts(result, p):
    dgd, by_tool = _dgd(result), {r["tool"]: r for r in result["runs"] if "curve" in r}
    un = result["unavailable"]

    def line(text, met, measured):
        return f"- {text}: {measured}: **{ {True: 'met', False: 'missed', None: 'undecided'}[met] }**."

    out = []
    text = f">= {TARGET_SPARK_SPEEDUP:g}x faster than Spark MLlib to the same held-out logloss"
    sp = by_tool.get("spark")
    # dask_dgd's fastest sharded run to the target (SGD, or its default solver L-BFGS)
    ours = [r for r in result["runs"] if r["tool"] in ("dask_dgd", "dask_dgd-lbfgs", "dask_dgd-async")
            and r.get("sharding") is True
            and "curve" in r]
    fast = min((r for r in ours if r["time_to_target"] is not None), key=lambda r: r["time_to_target"], default=None)
    if "spark" in un:
        out.append(line(text, None, f"Spark unavailable ({un['spark']})"))
    elif sp is None or not ours:
        out.append(line(text, None, "not run"))
    elif fast is None:
        out.append(line(text, False if sp["time_to_target"] is not None else None, "dask_dgd did not reach the target"))
    elif sp["time_to_target"] is None:
        bound = max(c["time"] for c in sp["curve"]) / fast["time_to_target"]
        out.append(line(text, True if bound >= TARGET_SPARK_SPEEDUP else None,
                        f"Spark did not reach the target; > {bound:.1f}x ({fast['label']})"))
    else:
        ratio = sp["time_to_target"] / fast["time_to_target"]
        out.append(line(text, ratio >= TARGET_SPARK_SPEEDUP, f"{ratio:.2f}x ({fast['label']}: "
                                                                f"{fast['time_to_target']:.2f} s against "
                                                                f"{sp['time_to_target']:.2f} s)"))
    out.extend(objective_verdicts(by_tool, un, line))
    text = ">= SGDClassifier's logloss after the same number of epochs, at >= its per-core throughput"
    sk = by_tool.get("scikit-learn")
    if sk is None or dgd is None:
        out.append(line(text, None, "not run"))
    else:
        better = dgd["final_logloss"] <= sk["final_logloss"]
        faster = dgd["rows_per_s_per_core"] >= sk["rows_per_s_per_core"]
        out.append(line(text, better and faster,
                        f"logloss {dgd['final_logloss']:.5f} vs {sk['final_logloss']:.5f} (as good or better: "
                        f"{'yes' if better else 'no'}), rows/s per core {dgd['rows_per_s_per_core']:,.0f} vs "
                        f"{sk['rows_per_s_per_core']:,.0f}"))
    mems = [(r["n_features"], r["sharding"], r["driver_peak_mb"], r.get("driver_peak_training_mb"))
            for r in result["runs"] if r["tool"] == "dask_dgd" and "curve" in r] + \
        [(m["n_features"], m["sharding"], m["driver_peak_mb"], m.get("driver_peak_training_mb"))
         for m in result.get("memory_runs", []) if "error" not in m]
    text = f"driver peak memory <= {TARGET_MEMORY_MB:g} MB above idle, independent of d"
    if not mems:
        out.append(line(text, None, "no dask_dgd run"))
    else:
        for s in sorted({m[1] for m in mems}, key=str):
            these = sorted((d, mb, tr) for d, sh, mb, tr in mems if sh == s)
            ok = all(mb <= TARGET_MEMORY_MB for _, mb, _ in these)
            meas = ", ".join(f"d=2**{int(math.log2(d))}: {mb:.0f} MB (until the last step: {_mb(tr)})"
                             for d, mb, tr in these)
            out.append(line(f"{text} (param_sharding={s})", ok if len(these) > 1 or not ok else None,
                            meas + ("" if len(these) > 1 else " (one d only)")))
    text = "bytes per step per worker proportional to the non-zero columns of its blocks"
    cols = result.get("worker_columns") or {}
    runs = [r for r in result["runs"] if r["tool"] == "dask_dgd" and "curve" in r]
    if not runs or not cols:
        out.append(line(text, None, "no dask_dgd run"))
    for r in runs:
        per = (r["bytes_up_per_step_worker"] or 0) + (r["bytes_down_per_step_worker"] or 0)
        ratio = per / (16 * (float(np.mean(list(cols.values()))) + 1))
        out.append(line(f"{text} (param_sharding={r['sharding']}; bytes / (16 x (columns + 1)) <= "
                        f"{TARGET_BYTES_RATIO:g})", ratio <= TARGET_BYTES_RATIO, f"{ratio:.1f}"))
    return out


def online_verdicts(result, p):
    """Issue 43's targets for ``solver="online"``: the 2-worker row with sharded
    parameters where it ran (what an estimator's ``param_sharding="auto"`` picks for
    this width on a cluster), else the unsharded one; the other rows are named in the
    measurement."""
    by_tool = {r["tool"]: r for r in result["runs"] if "curve" in r}
    one, flat = by_tool.get("dask_dgd-online-1"), by_tool.get("dask_dgd-online")
    on = by_tool.get("dask_dgd-online-sharded") or flat
    if on is flat:
        flat = None
    sk, vw, sp = by_tool.get("scikit-learn"), by_tool.get("vw"), by_tool.get("spark")

    def line(text, met, measured):
        return f"- {text}: {measured}: **{ {True: 'met', False: 'missed', None: 'undecided'}[met] }**."

    out = []
    if on is None:
        return [line("solver='online' (issue 43)", None, "not run")]
    text = f"online: rows/s per core >= {TARGET_ONLINE_ROWS:g}x SGDClassifier's"
    if sk is None:
        out.append(line(text, None, "SGDClassifier not run"))
    else:
        ratio = on["rows_per_s_per_core"] / sk["rows_per_s_per_core"]
        inproc = f"; in process, 1 group: {one['rows_per_s_per_core'] / sk['rows_per_s_per_core']:.2f}x" if one \
            else ""
        if flat:
            inproc += f"; unsharded: {flat['rows_per_s_per_core'] / sk['rows_per_s_per_core']:.2f}x"
        out.append(line(text, ratio >= TARGET_ONLINE_ROWS,
                        f"{ratio:.2f}x on {p['workers']} workers{', sharded' if on['sharding'] else ''} "
                        f"({on['rows_per_s_per_core']:,.0f} vs "
                        f"{sk['rows_per_s_per_core']:,.0f}){inproc}"))
        goal = sk["final_logloss"]
        text = (f"online: time to SGDClassifier's {p['epochs']}-epoch held-out logloss ({goal:.5f}) on "
                f"{p['workers']} single-threaded workers <= {TARGET_ONLINE_TIME:g}x its time")
        t = time_to_target(on, goal)
        if t is None:
            out.append(line(text, False, f"not reached in {p['epochs']} epochs "
                                         f"(best {min(c['logloss'] for c in on['curve'][1:]):.5f})"))
        else:
            ratio = t / sk["wall"]
            t1 = time_to_target(one, goal) if one else None
            inproc = f"; in process, 1 group: {t1 / sk['wall']:.2f}x" if t1 is not None else ""
            t2 = time_to_target(flat, goal) if flat else None
            inproc += f"; unsharded: {t2 / sk['wall']:.2f}x" if t2 is not None else ""
            out.append(line(text, ratio <= TARGET_ONLINE_TIME,
                            f"{ratio:.2f}x ({t:.2f} s against {sk['wall']:.2f} s){inproc}"))
    text = f"online: >= {TARGET_SPARK_SPEEDUP:g}x faster than Spark MLlib to the suite's target"
    if sp is None:
        out.append(line(text, None, "Spark " + result["unavailable"].get("spark", "not run")))
    elif on["time_to_target"] is None:
        out.append(line(text, False, "online did not reach the target"))
    elif sp["time_to_target"] is None:
        bound = max(c["time"] for c in sp["curve"]) / on["time_to_target"]
        out.append(line(text, True if bound >= TARGET_SPARK_SPEEDUP else None,
                        f"Spark did not reach the target; > {bound:.1f}x"))
    else:
        ratio = sp["time_to_target"] / on["time_to_target"]
        out.append(line(text, ratio >= TARGET_SPARK_SPEEDUP,
                        f"{ratio:.1f}x ({on['time_to_target']:.2f} s against {sp['time_to_target']:.2f} s)"))
    text = f"online: held-out logloss within {TARGET_ONLINE_VW:g}x of Vowpal Wabbit's after the same passes"
    if vw is None:
        out.append(line(text, None, "VW " + result["unavailable"].get("vw", "not run")))
    else:
        ratio = on["final_logloss"] / vw["final_logloss"]
        out.append(line(text, ratio <= TARGET_ONLINE_VW,
                        f"{ratio:.3f}x ({on['final_logloss']:.5f} against {vw['final_logloss']:.5f} after "
                        f"{p['epochs']} passes)"))
    return out


def report(p, result):
    """The section of RESULTS.md from the measured ``result`` (also from a saved file)."""
    ref = result["reference"]
    head = (
        f"Click log: {result['n_train']:,} training + {result['n_test']:,} held-out rows x {p['columns']} categorical "
        f"columns (Zipf {p['zipf']:g}, <= {p['max_values']:,} values each), hashed to {p['n_features']:,} columns "
        f"({result['nnz_per_row']:.2f} non-zeros per row); CTR {ref['ctr_train']:.3f}. Held-out logloss: constant "
        f"model {ref['constant']:.5f}, hidden model (Bayes) {ref['bayes']:.5f}; **target {result['target']:.5f}** "
        f"(closing {p['target_gap']:g} of the gap). alpha={p['alpha']:g} (scikit-learn: "
        f"{p['sklearn_params']}; VW: none). dask_dgd: solver sgd, "
        f"{p['optimizer']}, batch {p['batch_size']:,} rows, learning rate {_lr(result, p)}, {p['workers']} "
        f"workers x 1 thread; time to target counts sharding and excludes the per-epoch held-out evaluation."
    )
    notes = []
    if "spark_load_time" in result:
        notes.append(f"Spark: session start {_t(result['spark_session_time'])}, building and caching the "
                     f"SparseVector DataFrame {_t(result['spark_load_time'])} (not in its times); one fit per "
                     f"maxIter in {sorted(set(p['spark_iters']) | {p['epochs']})}, each timed from scratch.")
    if "vw_lines_time" in result:
        notes.append(f"VW: building the example lines {_t(result['vw_lines_time'])} (not in its times).")
    notes.append("Driver memory: peak RSS of the driver process above its RSS just before the fit, sampled "
                 f"every {p['sample_ms']} ms by a psutil thread. Bytes: median per step over the fit's history, "
                 "divided by the groups (one per worker).")
    return "\n\n".join([head, main_table(result, p), "### dask_dgd: driver memory and bytes per step",
                        dgd_table(result), " ".join(notes), "### Targets (issue 27)", "\n".join(verdicts(result, p)),
                        "### Targets (issue 43: solver='online')", "\n".join(online_verdicts(result, p))])

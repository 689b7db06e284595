"""The ``glm`` suite's report: its targets and the Markdown tables."""

import math

from ..._common import md_table
from .peers import PEERS

TARGET_LOGISTIC_RATIO = 0.5
TARGET_CV_OVER_FIT = 5.0


def _fastest(records, peers, labels=None):
    rows = [r for r in records if r["peer"] in peers and r.get("reached") and (labels is None or r["label"] in labels)]
    return min(rows, key=lambda r: r["wall"], default=None)


# ----------------------------------------------------------------------------- targets
def targets(result, cfg):
    """Rows ``{"target", "measured", "value", "met"}`` (``met`` None when undecided)."""
    probs, rows = result["problems"], []
    if "logistic" in probs:
        recs = probs["logistic"]["records"]
        target = ("logistic: dask_dgd default / fastest of scikit-learn lbfgs, newton-cholesky, glum "
                  f"<= {TARGET_LOGISTIC_RATIO:g}")
        dgd = next((r for r in recs if r["label"] == "dask_dgd default (auto)"), None)
        peer = _fastest(recs, ("sklearn", "glum"))
        if dgd is None or not dgd.get("reached") or peer is None:
            why = "dask_dgd default not in band" if peer is not None else "no peer in band"
            rows.append({"target": target, "measured": why, "met": None if peer is None else False})
        else:
            ratio = dgd["wall"] / peer["wall"]
            rows.append({"target": target, "value": ratio, "met": ratio <= TARGET_LOGISTIC_RATIO,
                         "measured": f"{ratio:.2f} ({_t(dgd['wall'])} / {peer['label']} {_t(peer['wall'])})"})
    for kind, res in probs.get("cv", {}).items():
        row = next((r for r in res["rows"] if r["label"].startswith("dask_dgd")), None)
        target = (f"cv {kind}: dask_dgd {res['folds']}-fold x {len(res['alphas'])}-alpha CV / one fit "
                  f"<= {TARGET_CV_OVER_FIT:g}")
        if row is None:
            rows.append({"target": target, "measured": "not built", "met": None})
        elif row["error"]:
            rows.append({"target": target, "measured": f"failed: {row['error']}", "met": False})
        else:
            rows.append({"target": target, "value": row["ratio"], "met": row["ratio"] <= TARGET_CV_OVER_FIT,
                         "measured": f"{row['ratio']:.1f} ({_t(row['cv_wall'])} / {_t(row['fit_wall'])})"})
    if "caravan" in probs:
        recs = {r["label"]: r for r in probs["caravan"]["records"]}
        saga = recs.get("scikit-learn saga")
        band = cfg["caravan_band"]
        for label in ("dask_dgd auto (in process)", "dask_dgd auto (cluster)"):
            dgd = recs.get(label)
            target = f"caravan: {label} time to {band:g} of the optimum <= saga's"
            if dgd is None or saga is None or not saga["reached"]:
                rows.append({"target": target, "measured": "saga not run or not in band", "met": None})
            elif not dgd["reached"]:
                rows.append({"target": target, "measured": "dask_dgd not in band", "met": False})
            else:
                ratio = dgd["wall"] / saga["wall"]
                rows.append({"target": target, "value": ratio, "met": ratio <= 1.0,
                             "measured": f"{ratio:.2f} ({_t(dgd['wall'])} / {_t(saga['wall'])})"})
        if saga is not None and saga["rungs"]:
            saga_default = saga["rungs"][0]
            dgd_default = recs["dask_dgd auto (in process)"]["rungs"][:1]
            target = "caravan: solver='auto' does not warn where saga converges by default"
            if saga_default["warned"]:
                rows.append({"target": target, "met": None,
                             "measured": "saga warned with its defaults (ConvergenceWarning): not applicable"})
            elif dgd_default:
                rows.append({"target": target, "met": not dgd_default[0]["warned"],
                             "measured": "dask_dgd warned" if dgd_default[0]["warned"] else "no warning"})
    return rows


# ----------------------------------------------------------------------------- rendering
def _t(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def _tol(tol):
    return "default" if tol is None else f"{tol:g}"


def _met(met):
    return {True: "yes", False: "**no**", None: "–"}[met]


def records_table(records, band, unavailable=(), not_built=None):
    headers = ["tool", "tol", "median wall", "iterations", "rel gap to best", "in band", "warned", "x fastest peer"]
    peer = _fastest(records, ("sklearn", "glum", "h2o"))
    rows = []
    for r in records:
        if r.get("wall") is None:
            rows.append([r["label"], None, f"failed: {r['error']}", *[None] * 5])
            continue
        label = r["label"] + (f" ({r['solver']})" if r.get("solver") and "auto" in r["label"] else "")
        ratio = None if peer is None else f"{r['wall'] / peer['wall']:.2f}"
        rows.append([label, _tol(r["tol"]), _t(r["wall"]), r["n_iter"], f"{r['gap']:.1e}",
                     "yes" if r["reached"] else f"**no** (band {band:g})",
                     "yes" if r["warned"] else "no", ratio])
    if not_built:
        rows.append([not_built, None, "not built", *[None] * 5])
    for name, why in unavailable:
        rows.append([name, None, f"unavailable: {why}", *[None] * 5])
    return md_table(headers, rows)


def ladder_table(records):
    headers = ["tool", "tol", "wall (first run)", "iterations", "rel gap to best", "warned"]
    rows = []
    for r in records:
        for g in r["rungs"]:
            rows.append([r["label"], _tol(g["tol"]), _t(g["runs"][0]["wall"]), g["n_iter"], f"{g['gap']:.1e}",
                         "yes" if g["warned"] else "no"])
        if r.get("skipped"):
            rows.append([r["label"], ", ".join(_tol(t) for t in r["skipped"]), "skipped (rung over the limit)",
                         None, None, None])
    return md_table(headers, rows)


def cv_table(res):
    headers = ["tool", "CV time", "chosen alpha", "one fit at it", "CV / one fit", "warned (CV, fit)", "objective"]
    rows = []
    for r in res["rows"]:
        if r["error"]:
            rows.append([r["label"], f"failed: {r['error']}", *[None] * 5])
            continue
        rows.append([r["label"], _t(r["cv_wall"]), f"{r['alpha']:.4g}", _t(r["fit_wall"]), f"{r['ratio']:.1f}",
                     f"{'yes' if r['cv_warned'] else 'no'}, {'yes' if r['fit_warned'] else 'no'}",
                     f"{r['objective']:.10g}"])
    return md_table(headers, rows)


def _unavailable_for(result, peers):
    return [(p, why) for p, why in result["unavailable"].items() if p in peers]


def render(result, cfg):
    probs, band = result["problems"], cfg["band"]
    parts = [
        f"dask_dgd: LocalCluster of {cfg['workers']} worker processes x 1 thread; scikit-learn and glum: "
        f"{cfg['threads']} threads (threadpoolctl), in memory; H2O: local server, nthreads={cfg['threads']}, "
        f"data imported from Parquet (not timed), {cfg['h2o_repeats']} run(s) per rung, its wall times include "
        f"the REST round trips. seed={cfg['seed']}, repeats={cfg['repeats']}, ladder "
        f"{', '.join(_tol(t) for t in cfg['tols'])} (loosest first; stop at the first rung in band), band "
        f"{band:g} relative to the best objective (an untimed tight reference solve included); tighter rungs "
        f"skipped after a rung over {cfg['rung_limit_s']:g} s. Objective: mean loss + alpha (l1_ratio |w|_1 + "
        f"(1 - l1_ratio)/2 |w|^2), evaluated by the suite for every tool."
    ]
    not_run = [p for p in PEERS if p not in cfg["peers"]]
    if not_run:
        parts.append(f"Peers not run at this size: {', '.join(not_run)} (add them with `peers=`; H2O's server start "
                     "and Parquet import cost more than the small size's two minutes).")
    if result["unavailable"]:
        parts.append("Unavailable peers: " + "; ".join(f"{p}: {why}" for p, why in result["unavailable"].items())
                     + ".")
    if result["skipped"]:
        parts.append("Problems skipped: " + "; ".join(f"{k}: {v}" for k, v in result["skipped"].items()) + ".")
    if result["not_built"]:
        parts.append("Not built in dask_dgd at run time: " + ", ".join(
            f"{v} ({k})" for k, v in result["not_built"].items()) + ".")
    titles = {
        "logistic": "Unpenalised logistic regression",
        "binomial": "Binomial, ridge",
        "tweedie": "Tweedie (power {p:g}, log link), ridge",
    }
    for name in ("logistic", "binomial", "tweedie"):
        if name not in probs:
            continue
        res = probs[name]
        n, d = res["shape"]
        parts.append(f"### {titles[name].format(p=cfg['tweedie_power'])}, {n:,} x {d}, alpha={res['alpha']:g}")
        parts.append(records_table(res["records"], band, _unavailable_for(result, ("sklearn", "glum", "h2o")),
                                   result["not_built"].get(name)))
        parts.append(f"Best objective {res['best']:.12g}; positive (non-zero) targets {res['positive_rate']:.3f}.")
    if "path" in probs:
        res = probs["path"]
        n, d = res["shape"]
        parts.append(f"### L1 logistic path, {n:,} x {d}, {len(res['alphas'])} alphas from alpha_max = "
                     f"{res['alphas'][0]:.4g} to {res['alphas'][-1]:.4g}")
        parts.append(records_table(res["records"], band, _unavailable_for(result, ("sklearn", "glum"))))
        parts.append(f"Wall = the whole path; gap = the largest relative gap over the alphas. Non-zero coefficients "
                     f"along the path (reference): {res['nonzero']}.")
    for kind, res in probs.get("cv", {}).items():
        n, d = res["shape"]
        parts.append(f"### {res['folds']}-fold x {len(res['alphas'])}-alpha elastic-net CV ({kind}, l1_ratio="
                     f"{cfg['cv_l1_ratio']:g}), {n:,} x {d}")
        parts.append(cv_table(res))
        built = result["not_built"].get(f"cv {kind}")
        parts.append(("dask_dgd: " + built + " not built. " if built else "")
                     + "Each tool's own folds and scoring (log-loss / deviance for logistic, MSE for least "
                     "squares), the same alpha grid (scikit-learn's Cs = 1/(alpha n)); one fit = the tool's "
                     "estimator at its chosen alpha, default tolerance.")
    if "caravan" in probs:
        res = probs["caravan"]
        parts.append(f"### L1 logistic on ISLR Caravan ({res['shape'][0]:,} x {res['shape'][1]}, standardised), "
                     f"C={cfg['caravan_C']:g} (alpha={res['alpha']:.4g}), l1_ratio=1")
        parts.append(records_table(res["records"], cfg["caravan_band"], _unavailable_for(result, ("sklearn", "glum"))))
        parts.append(f"Optimum {res['best']:.12g} with {res['nonzero']} non-zero coefficients. Defaults "
                     "(the first rung, tol 1e-4; saga max_iter 100):")
        parts.append(md_table(
            ["tool", "wall", "iterations", "rel gap to optimum", "warned"],
            [[r["label"], _t(r["rungs"][0]["runs"][0]["wall"]), r["rungs"][0]["n_iter"], f"{r['rungs'][0]['gap']:.1e}",
              "yes" if r["rungs"][0]["warned"] else "no"] for r in res["records"] if r["rungs"]]))
    parts += ["### Targets", targets_table(result),
              "The targets are set for the full size; at the small size fixed costs (a distributed step's round "
              "trips, a fit's setup) weigh more and dask_dgd's ratios come out worse."]
    ladders = [(name, probs[name]["records"]) for name in ("logistic", "binomial", "tweedie", "path", "caravan")
               if name in probs]
    if ladders:
        parts.append("### Tolerance ladders (first run of each rung)")
        for name, recs in ladders:
            parts += [f"{name}:", ladder_table(recs)]
    return "\n\n".join(parts)


def targets_table(result):
    return md_table(["target", "measured", "met"],
                    [[t["target"], t["measured"], _met(t["met"])] for t in result["targets"]])


def title(cfg):
    return (f"GLMs against scikit-learn, glum and H2O: logistic {cfg['rows']:,} x {cfg['features']}, GLMs "
            f"{cfg['glm_rows']:,} rows, {cfg['workers']} workers x 1 thread")

"""The ``glm`` suite's runs, one per problem: each tool down its tolerance ladder to the
shared objective's optimum, the L1 path, the elastic-net CV and the CARAVAN fit.
"""

import math
import time
import warnings

import numpy as np

from ..._common import median
from ..._common import one_line as _one_line
from .peers import Tool, _convergence, _recorded, _sk_logistic, _threads, dgd_fit, glum_fit, sk_fit
from .problems import Problem, caravan, to_cluster
from .report import _tol


# ----------------------------------------------------------------------------- availability
def dgd_estimator(name):
    """dask_dgd's estimator ``name`` (in ``dask_dgd.__all__``, else in
    ``dask_dgd.linear_model.__all__``: the public API only), or None when not built."""
    import dask_dgd
    import dask_dgd.linear_model

    for module in (dask_dgd, dask_dgd.linear_model):
        if name in module.__all__:
            return getattr(module, name)
    return None


# ----------------------------------------------------------------------------- time to optimum
def _gaps(values, best):
    values, best = np.atleast_1d(values), np.atleast_1d(best)
    return float(np.max((values - best) / np.abs(best)))


def time_to_optimum(tools, objectives, reference, band, cfg, log):
    """Run each tool down its ladder to the band of ``reference`` (an array of objectives),
    repeat the first rung in band; returns ``(records, best)`` (see :func:`finalise`)."""
    best = np.atleast_1d(np.asarray(reference, dtype=np.float64)).copy()
    records = []
    for tool in tools:
        rec = {"peer": tool.peer, "label": tool.label, "rungs": [], "error": None, "skipped": None}
        records.append(rec)
        for i, tol in enumerate(tool.ladder):
            if rec["rungs"] and rec["rungs"][-1]["runs"][0]["wall"] > cfg["rung_limit_s"]:
                rec["skipped"] = list(tool.ladder[i:])
                break
            try:
                runs = [tool.runner(tol)]
                runs[0]["objective"] = objectives(runs[0])
                best = np.minimum(best, runs[0]["objective"])
                gap = _gaps(runs[0]["objective"], best)
                log(f"{tool.label}: tol={_tol(tol)} wall={runs[0]['wall']:.2f}s iter={runs[0].get('n_iter')} "
                    f"gap={gap:.1e}")
                if gap <= band:
                    for _ in range(min(cfg["repeats"], tool.repeats or cfg["repeats"]) - 1):
                        runs.append(tool.runner(tol))
                        runs[-1]["objective"] = objectives(runs[-1])
            except Exception as err:  # noqa: BLE001 - a tool's failure is reported, not fatal
                rec["error"] = _one_line(err)
                log(f"{tool.label}: failed: {rec['error']}")
                break
            for r in runs:
                for key in ("coef", "intercept", "coefs", "intercepts"):  # arrays: not in the report
                    r.pop(key, None)
                r["objective"] = np.atleast_1d(r["objective"]).tolist()
            rec["rungs"].append({"tol": tol, "runs": runs})
            if gap <= band:
                break
    best = best.tolist()
    finalise(records, best, band)
    return records, best


def finalise(records, best, band):
    """Gaps to ``best`` of every rung, and each record's chosen rung: the first in band, else its last."""
    for rec in records:
        for rung in rec["rungs"]:
            first = rung["runs"][0]
            rung.update(
                wall=median([r["wall"] for r in rung["runs"]]), gap=_gaps(first["objective"], best),
                n_iter=first.get("n_iter"), warned=first.get("warned"),
            )
        in_band = [g for g in rec["rungs"] if g["gap"] <= band]
        chosen = in_band[0] if in_band else (rec["rungs"][-1] if rec["rungs"] else None)
        rec["reached"] = bool(in_band)
        if chosen is not None:
            rec.update(tol=chosen["tol"], wall=chosen["wall"], gap=chosen["gap"], n_iter=chosen["n_iter"],
                       warned=chosen["warned"], walls=[r["wall"] for r in chosen["runs"]],
                       solver=chosen["runs"][0].get("solver"))


# ----------------------------------------------------------------------------- problems
def _single(problem):
    return lambda r: problem.objective(r["coef"], r["intercept"])


def _warm_up(tools, log):
    for tool in tools:
        t0 = time.perf_counter()
        try:
            tool.runner(tool.ladder[0])
        except Exception as err:  # noqa: BLE001 - the timed runs report it
            log(f"{tool.label}: warm-up failed: {_one_line(err)}")
        log(f"{tool.label}: warm-up {time.perf_counter() - t0:.2f}s")


def smooth_tools(problem, cfg, ctx):
    """The configurations of a smooth (ridge or unpenalised) problem."""
    from sklearn.linear_model import TweedieRegressor

    tols, client, n = cfg["tols"], ctx["client"], len(problem.yn)
    tools = []
    if problem.family == "binomial":
        from dask_dgd import LogisticRegression as DGDLogistic

        dgd_cls, dgd_params = DGDLogistic, {}
    else:
        dgd_cls = dgd_estimator("TweedieRegressor")
        dgd_params = {"power": problem.power}
        if dgd_cls is not None and "link" in dgd_cls().get_params():
            dgd_params["link"] = "log"
    if dgd_cls is None:
        ctx["not_built"][problem.name] = "dask_dgd.TweedieRegressor"
    else:
        for solver in cfg["dgd_solvers"]:
            label = "dask_dgd default (auto)" if solver == "auto" else f"dask_dgd {solver}"
            tools.append(Tool("dask_dgd", label, lambda tol, s=solver: dgd_fit(
                problem, dgd_cls, tol, client=client, cfg=cfg, alpha=problem.alpha, solver=s, **dgd_params), tols))
    if "sklearn" in ctx["peers"]:
        for solver in ("lbfgs", "newton-cholesky"):
            if problem.family == "binomial":
                C = math.inf if problem.alpha == 0 else 1.0 / (problem.alpha * n)
                make = lambda tol, s=solver, C=C: _sk_logistic(C, 0.0, solver=s, tol=tol, max_iter=cfg["max_iter"])
            else:
                make = lambda tol, s=solver: TweedieRegressor(power=problem.power, link="log", alpha=problem.alpha,
                                                              solver=s, tol=tol, max_iter=cfg["max_iter"])
            tools.append(Tool("sklearn", f"scikit-learn {solver}",
                              lambda tol, m=make: sk_fit(problem, lambda: m(tol), cfg), tols))
    if "glum" in ctx["peers"]:
        from glum import TweedieDistribution

        family = "binomial" if problem.family == "binomial" else TweedieDistribution(problem.power)
        tools.append(Tool("glum", "glum irls", lambda tol: glum_fit(
            problem, tol, cfg, family=family, link="logit" if problem.family == "binomial" else "log",
            alpha=problem.alpha, l1_ratio=0.0), (None, *tols[1:])))
    if "h2o" in ctx["peers"]:
        tools.append(Tool("h2o", "H2O IRLSM", lambda tol: ctx["h2o"].fit(problem, tol, cfg), (None, *tols[1:]),
                          cfg["h2o_repeats"]))
    return tools


def reference_solution(problem, cfg, peers):
    """An untimed tight solve, the objective to beat: glum's IRLS (gradient_tol 1e-8), else scikit-learn's
    newton-cholesky (tol 1e-8); Newton's method converges quadratically, so either is exact far below the band."""
    from sklearn.linear_model import TweedieRegressor

    n = len(problem.yn)
    if "glum" in peers:
        from glum import GeneralizedLinearRegressor, TweedieDistribution

        family = "binomial" if problem.family == "binomial" else TweedieDistribution(problem.power)
        est = GeneralizedLinearRegressor(family=family, link="logit" if problem.family == "binomial" else "log",
                                         alpha=problem.alpha, gradient_tol=1e-8, max_iter=cfg["max_iter"])
    elif problem.family == "binomial":
        C = math.inf if problem.alpha == 0 else 1.0 / (problem.alpha * n)
        est = _sk_logistic(C, 0.0, solver="newton-cholesky", tol=1e-8, max_iter=cfg["max_iter"])
    else:
        est = TweedieRegressor(power=problem.power, link="log", alpha=problem.alpha, solver="newton-cholesky",
                               tol=1e-8, max_iter=cfg["max_iter"])
    with _threads(cfg["threads"]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(problem.Xn, problem.yn)
    return problem.objective(est.coef_, est.intercept_)


def run_smooth(problem, cfg, ctx, log):
    tools = smooth_tools(problem, cfg, ctx)
    if "h2o" in ctx["peers"]:
        t0 = time.perf_counter()
        ctx["h2o"].frame(problem)
        log(f"h2o: {problem.name} imported in {time.perf_counter() - t0:.1f}s")
    # untimed short fits: worker imports, shard placement, JIT (dask_dgd's kernel, H2O's JVM)
    short = smooth_tools(problem, dict(cfg, max_iter=2), ctx)
    _warm_up([t for t in short if t.peer in ("dask_dgd", "h2o")], log)
    ref = reference_solution(problem, cfg, ctx["peers"])
    records, best = time_to_optimum(tools, _single(problem), ref, cfg["band"], cfg, log)
    if ctx["h2o"] is not None:
        ctx["h2o"].drop(problem)
    return {"records": records, "best": best[0], "reference": ref, "shape": list(problem.Xn.shape),
            "alpha": problem.alpha, "positive_rate": float(np.mean(problem.yn > 0))}


def run_path(problem, alphas, cfg, ctx, log):
    """The L1 path: every tool's coefficients at every alpha, warm-started along it."""
    from glum import GeneralizedLinearRegressor

    tols, client, n = cfg["tols"], ctx["client"], len(problem.yn)

    def objectives(r):
        return np.array([problem.objective(c, b, a) for c, b, a in zip(r["coefs"], r["intercepts"], alphas)])

    def dgd(tol):
        from dask_dgd import LogisticRegression

        est = LogisticRegression(alpha=alphas[0], l1_ratio=1.0, tol=tol, max_iter=cfg["max_iter"], warm_start=True,
                                 client=client)
        coefs, intercepts, warned, iters = [], [], False, 0
        t0 = time.perf_counter()
        for a in alphas:
            with _recorded() as caught:
                est.set_params(alpha=a).fit(problem.X, problem.y)
            warned |= _convergence(caught)
            iters += int(est.n_iter_)
            coefs.append(np.ravel(est.coef_).copy())
            intercepts.append(float(np.ravel(est.intercept_)[0]))
        return {"wall": time.perf_counter() - t0, "coefs": coefs, "intercepts": intercepts, "n_iter": iters,
                "warned": warned, "solver": est.solver_}

    def saga(tol):
        est = _sk_logistic(1.0 / (alphas[0] * n), 1.0, solver="saga", tol=tol, max_iter=cfg["max_iter"],
                           warm_start=True)
        coefs, intercepts, warned, iters = [], [], False, 0
        with _threads(cfg["threads"]):
            t0 = time.perf_counter()
            for a in alphas:
                with _recorded() as caught:
                    est.set_params(C=1.0 / (a * n)).fit(problem.Xn, problem.yn)
                warned |= _convergence(caught)
                iters += int(np.max(est.n_iter_))
                coefs.append(est.coef_.ravel().copy())
                intercepts.append(float(est.intercept_[0]))
            wall = time.perf_counter() - t0
        return {"wall": wall, "coefs": coefs, "intercepts": intercepts, "n_iter": iters, "warned": warned}

    def glum(tol):
        est = GeneralizedLinearRegressor(family="binomial", l1_ratio=1.0, alpha_search=True, alphas=alphas,
                                         gradient_tol=tol, max_iter=cfg["max_iter"])
        with _threads(cfg["threads"]), _recorded() as caught:
            t0 = time.perf_counter()
            est.fit(problem.Xn, problem.yn)
            wall = time.perf_counter() - t0
        # glum reports no iteration total over a path
        return {"wall": wall, "coefs": list(est.coef_path_), "intercepts": list(est.intercept_path_),
                "n_iter": None, "warned": _convergence(caught)}

    tools = [Tool("dask_dgd", "dask_dgd default (auto), warm starts", dgd, tols)]
    if "sklearn" in ctx["peers"]:
        tools.append(Tool("sklearn", "scikit-learn saga, warm starts", saga, tols[:3]))
    if "glum" in ctx["peers"]:
        tools.append(Tool("glum", "glum irls-cd, alpha_search", glum, (None, *tols[1:])))
    _warm_up([tools[0]._replace(runner=lambda tol: dgd_fit(problem, _dgd_logistic(), tol, client=client, cfg=cfg,
                                                           alpha=alphas[0], l1_ratio=1.0))], log)
    ref_est = GeneralizedLinearRegressor(family="binomial", l1_ratio=1.0, alpha_search=True, alphas=alphas,
                                         gradient_tol=1e-12, max_iter=cfg["max_iter"])
    with _threads(cfg["threads"]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_est.fit(problem.Xn, problem.yn)
    reference = objectives({"coefs": ref_est.coef_path_, "intercepts": ref_est.intercept_path_})
    records, best = time_to_optimum(tools, objectives, reference, cfg["band"], cfg, log)
    nonzero = [int(np.count_nonzero(c)) for c in ref_est.coef_path_]
    return {"records": records, "best": best, "alphas": list(alphas), "nonzero": nonzero,
            "shape": list(problem.Xn.shape)}


def _dgd_logistic():
    from dask_dgd import LogisticRegression

    return LogisticRegression


def run_cv(kind, problem, alphas, cfg, ctx, log):
    """One CV problem (``kind`` "logistic" or "least squares"): each tool's CV time, chosen
    alpha and one fit at that alpha."""
    from sklearn.linear_model import ElasticNet, ElasticNetCV, LogisticRegressionCV

    n, folds, r, client = len(problem.yn), cfg["cv_folds"], cfg["cv_l1_ratio"], ctx["client"]
    family = "binomial" if kind == "logistic" else "normal"
    rows = []

    def timed(fn):
        with _threads(cfg["threads"]), _recorded() as caught:
            t0 = time.perf_counter()
            out = fn()
            return time.perf_counter() - t0, out, _convergence(caught)

    def record(label, cv_fn, alpha_of, fit_fn):
        row = {"label": label, "error": None}
        rows.append(row)
        try:
            cv_wall, est, warned = timed(cv_fn)
            best = alpha_of(est)
            fit_wall, fitted, fit_warned = timed(lambda: fit_fn(best))
            row.update(cv_wall=cv_wall, alpha=best, fit_wall=fit_wall, ratio=cv_wall / fit_wall,
                       cv_warned=warned, fit_warned=fit_warned,
                       objective=problem.objective(fitted.coef_, fitted.intercept_, best))
            log(f"cv {kind}: {label}: cv {cv_wall:.2f}s, alpha {best:.3g}, one fit {fit_wall:.2f}s")
        except Exception as err:  # noqa: BLE001 - a tool's failure is reported, not fatal
            row["error"] = _one_line(err)
            log(f"cv {kind}: {label}: failed: {row['error']}")

    cv_name = "LogisticRegressionCV" if kind == "logistic" else "ElasticNetCV"
    dgd_cls = dgd_estimator(cv_name)
    if dgd_cls is None:
        ctx["not_built"][f"cv {kind}"] = f"dask_dgd.{cv_name}"
    else:
        keys = set(dgd_cls().get_params())
        params = {"cv": folds, "client": client}
        if "alphas" in keys:
            params["alphas"] = list(alphas)
        else:
            params["Cs"] = [1.0 / (a * n) for a in alphas]
        params.update({"l1_ratios": [r]} if "l1_ratios" in keys else {"l1_ratio": r})
        if kind == "logistic" and "scoring" in keys:
            params["scoring"] = "neg_log_loss"

        def dgd_alpha(est):
            if hasattr(est, "alpha_"):
                return float(np.ravel(est.alpha_)[0])
            return 1.0 / (float(np.ravel(est.C_)[0]) * n)

        single = _dgd_logistic() if kind == "logistic" else dgd_estimator("LinearRegression")
        _warm_up([Tool("dask_dgd", "dask_dgd", lambda tol: dgd_fit(problem, single, tol, client=client, cfg=cfg,
                                                                   alpha=alphas[0], l1_ratio=r), (1e-4,))], log)
        record(f"dask_dgd {cv_name}", lambda: dgd_cls(**params).fit(problem.X, problem.y), dgd_alpha,
               lambda a: single(alpha=a, l1_ratio=r, client=client).fit(problem.X, problem.y))
    if "glum" in ctx["peers"]:
        from glum import GeneralizedLinearRegressor, GeneralizedLinearRegressorCV

        link = "logit" if kind == "logistic" else "identity"
        record("glum GeneralizedLinearRegressorCV",
               lambda: GeneralizedLinearRegressorCV(family=family, link=link, l1_ratio=r, alphas=alphas, cv=folds,
                                                    n_jobs=1).fit(problem.Xn, problem.yn),
               lambda est: float(est.alpha_),
               lambda a: GeneralizedLinearRegressor(family=family, link=link, l1_ratio=r, alpha=a).fit(
                   problem.Xn, problem.yn))
    if "sklearn" in ctx["peers"]:
        if kind == "logistic":
            extra = {"use_legacy_attributes": False} if "use_legacy_attributes" in LogisticRegressionCV().get_params() \
                else {"penalty": "elasticnet"}
            record("scikit-learn LogisticRegressionCV (saga)",
                   lambda: LogisticRegressionCV(Cs=[1.0 / (a * n) for a in alphas], l1_ratios=[r], cv=folds,
                                                solver="saga", scoring="neg_log_loss", **extra).fit(problem.Xn,
                                                                                                  problem.yn),
                   lambda est: 1.0 / (float(np.ravel(est.C_)[0]) * n),
                   lambda a: _sk_logistic(1.0 / (a * n), r, solver="saga").fit(problem.Xn, problem.yn))
        else:
            record("scikit-learn ElasticNetCV",
                   lambda: ElasticNetCV(alphas=alphas, l1_ratio=r, cv=folds).fit(problem.Xn, problem.yn),
                   lambda est: float(est.alpha_),
                   lambda a: ElasticNet(alpha=a, l1_ratio=r).fit(problem.Xn, problem.yn))
    return {"rows": rows, "alphas": list(alphas), "shape": list(problem.Xn.shape), "folds": folds}


def run_caravan(cfg, ctx, log):
    """L1 logistic on Caravan: dask_dgd "auto" (in process, then on the cluster) against saga."""
    from glum import GeneralizedLinearRegressor

    Xn, yn = caravan()
    n = len(yn)
    alpha = 1.0 / (cfg["caravan_C"] * n)
    problem = Problem("caravan", "binomial", Xn, yn, None, None, alpha, 1.0)
    ref = GeneralizedLinearRegressor(family="binomial", alpha=alpha, l1_ratio=1.0, gradient_tol=1e-12,
                                     max_iter=cfg["max_iter"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(Xn, yn)
    reference = problem.objective(ref.coef_, ref.intercept_)
    cls = _dgd_logistic()
    ladder = (1e-4, 1e-6, 1e-8, 1e-10)
    # the first rung is every tool's defaults (tol 1e-4, max_iter 100), the tighter ones allow more iterations
    def iters(tol):
        return 100 if tol == ladder[0] else 100_000

    tools = [Tool("dask_dgd", "dask_dgd auto (in process)", lambda tol: dgd_fit(
        problem, cls, tol, client=None, cfg=cfg, max_iter=iters(tol), alpha=alpha, l1_ratio=1.0), ladder)]
    if "sklearn" in ctx["peers"]:
        tools.append(Tool("sklearn", "scikit-learn saga", lambda tol: sk_fit(problem, lambda: _sk_logistic(
            cfg["caravan_C"], 1.0, solver="saga", tol=tol, max_iter=iters(tol)), cfg), ladder))
    if "glum" in ctx["peers"]:
        tools.append(Tool("glum", "glum irls-cd", lambda tol: glum_fit(
            problem, tol, cfg, family="binomial", alpha=alpha, l1_ratio=1.0), (None, *ladder[1:])))
    _warm_up(tools[:1], log)
    records, best = time_to_optimum(tools, _single(problem), reference, cfg["caravan_band"], cfg, log)
    return {"records": records, "best": best[0], "nonzero": int(np.count_nonzero(ref.coef_)), "shape": list(Xn.shape),
            "alpha": alpha, "problem": problem}


def run_caravan_cluster(result, cfg, ctx, log):
    """The Caravan problem again, dask_dgd on the cluster (after the cluster started)."""
    problem = result.pop("problem")
    X, y = to_cluster(ctx["client"], problem.Xn, problem.yn, cfg["workers"])
    problem = problem._replace(X=X, y=y)
    cls = _dgd_logistic()
    ladder = (1e-4, 1e-6, 1e-8, 1e-10)
    tool = Tool("dask_dgd", "dask_dgd auto (cluster)", lambda tol: dgd_fit(
        problem, cls, tol, client=ctx["client"], cfg=cfg, max_iter=100 if tol == ladder[0] else 100_000,
        alpha=problem.alpha, l1_ratio=1.0), ladder)
    _warm_up([tool], log)
    records, best = time_to_optimum([tool], _single(problem), result["best"], cfg["caravan_band"], cfg, log)
    result["records"].append(records[0])
    finalise(result["records"], best, cfg["caravan_band"])  # against a possibly better optimum
    result["best"] = best[0]

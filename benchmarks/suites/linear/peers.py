"""The ``linear`` suite's tools: dask_dgd and its peers (scikit-learn, dask-ml, Spark
MLlib), each a runner ``runner(data, tol, cfg) -> dict`` of one fit's figures.
"""

import math
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..._common import why_unimportable as _why_unimportable
from .._peers import why_no_spark

#: Optional ``history_`` columns of the engine's step profile (absent in older engines).
PROFILE_COLUMNS = ("broadcast_time", "reduce_time", "update_time")


# ----------------------------------------------------------------------------- tools
def _floats(series):
    """A history column as floats, missing values as ``None``."""
    return [None if v is None or math.isnan(v) else float(v) for v in series.tolist()]


def run_sklearn(data, tol, cfg):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    est = LogisticRegression(C=cfg.C, tol=tol, max_iter=cfg.max_iter)
    with threadpool_limits(cfg.threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(data["Xn"], data["yn"])
        wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "n_iter": int(np.max(est.n_iter_)),
        "n_steps": None,
        "coef": est.coef_.ravel(),
        "intercept": float(est.intercept_[0]),
        "capped": any(issubclass(w.category, ConvergenceWarning) for w in caught),
    }


def run_dask_dgd(data, tol, cfg, solver):
    from dask_dgd import ConvergenceWarning, LogisticRegression

    max_iter = cfg.max_iter if solver in ("lbfgs", "newton") else cfg.max_iter_gd
    est = LogisticRegression(
        alpha=cfg.alpha, solver=solver, tol=tol, max_iter=max_iter, client=data["client"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(data["X"], data["y"])
        wall = time.perf_counter() - t0
    h = est.history_
    solve = float(h["time"].iloc[-1]) if len(h) else 0.0
    out = {
        "wall": wall,
        "setup": wall - solve,
        "n_iter": int(est.n_iter_),
        "n_steps": len(h),
        "coef": np.asarray(est.coef_).ravel(),
        "intercept": float(np.ravel(est.intercept_)[0]),
        "capped": any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "history_loss": _floats(h["loss"]),
    }
    for col in ("step_time", "compute_time_max", "compute_time_min", *PROFILE_COLUMNS):
        out[col] = _floats(h[col]) if col in h.columns else None
    return out


def run_dask_ml(data, tol, cfg, solver):
    """dask-ml on the persisted dask arrays, with the default (our) client.

    ``tol=None`` (admm) leaves dask-ml's own stopping rule.  ``normalize=False`` keeps
    dask_glm's penalty on the coefficients themselves (see the module docstring).
    """
    from dask_ml.linear_model import LogisticRegression

    max_iter = {"admm": cfg.admm_max_iter, "gradient_descent": cfg.max_iter_gd}.get(
        solver, cfg.max_iter
    )
    est = LogisticRegression(
        C=cfg.C,
        solver=solver,
        max_iter=max_iter,
        fit_intercept=True,
        solver_kwargs={"normalize": False},
        **({} if tol is None else {"tol": tol}),
    )
    with warnings.catch_warnings():
        # dask_glm's lbfgs uses the deprecated dask config key fuse_ave_width and SciPy's
        # deprecated iprint option.
        warnings.filterwarnings("ignore", message=".*fuse_ave_width", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*`iprint`", category=DeprecationWarning)
        t0 = time.perf_counter()
        est.fit(data["X"], data["y"])
        wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "n_iter": None,  # dask-ml does not report iterations
        "n_steps": None,
        "coef": np.asarray(est.coef_).ravel(),
        "intercept": float(np.ravel(est.intercept_)[0]),
        "capped": None,
    }


def spark_setup(data, cfg):
    """A ``local[threads]`` Spark session and the driver's data cached in it.

    Returns ``(spark, df, session_start_seconds, load_seconds)``; loading is the Arrow
    transfer of X and y, ``array_to_vector``, a repartition into ``threads`` partitions
    and the cache, materialised by a count.
    """
    import pyarrow as pa
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import SparkSession

    with warnings.catch_warnings():
        # pyspark 4 warns on every import check that it does not support pandas 3 yet;
        # no pandas is involved here (Arrow straight into Spark).
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        t0 = time.perf_counter()
        spark = (
            SparkSession.builder.master(f"local[{cfg.threads}]")
            .appName("dask_dgd-bench")
            .config("spark.driver.memory", cfg.spark_memory)
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        Xn, yn = data["Xn"], data["yn"]
        table = pa.table(
            {
                "x": pa.FixedSizeListArray.from_arrays(pa.array(Xn.ravel()), Xn.shape[1]),
                "label": pa.array(yn),
            }
        )
        df = spark.createDataFrame(table)
    del table
    df = df.select(array_to_vector("x").alias("features"), "label")
    df = df.repartition(cfg.threads).cache()
    df.count()
    return spark, df, started, time.perf_counter() - t0


def run_spark(data, tol, cfg):
    from pyspark.ml.classification import LogisticRegression

    lr = LogisticRegression(
        maxIter=cfg.max_iter,
        regParam=cfg.alpha,
        elasticNetParam=0.0,
        tol=tol,
        fitIntercept=True,
        standardization=False,
        family="binomial",
    )
    t0 = time.perf_counter()
    model = lr.fit(data["spark_df"])
    wall = time.perf_counter() - t0
    n_iter = int(model.summary.totalIterations)
    return {
        "wall": wall,
        "n_iter": n_iter,
        "n_steps": None,
        "coef": model.coefficients.toArray(),
        "intercept": float(model.intercept),
        "capped": n_iter >= cfg.max_iter,
    }


class Tool(NamedTuple):
    """One configuration to time: a tool, its solver, how to run it, its ladder."""

    name: str
    solver: str
    runner: Callable  # runner(data, tol, cfg) -> dict of the fit's figures
    ladder: tuple  # tolerances, loosest first; (None,) = the tool's own stopping rule

    @property
    def key(self):
        return f"{self.name}/{self.solver}"


def configurations(cfg):
    """The :class:`Tool` list to run, and ``{peer: why}`` for the unavailable peers."""
    tools, unavailable = [], {}
    if "sklearn" in cfg.peers:
        tools.append(Tool("scikit-learn", "lbfgs", run_sklearn, cfg.tols))
    for solver in cfg.dgd_solvers:
        tools.append(
            Tool("dask_dgd", solver, lambda d, t, c, s=solver: run_dask_dgd(d, t, c, s), cfg.tols)
        )
    if "dask-ml" in cfg.peers:
        why = _why_unimportable("dask_ml.linear_model")
        if why:
            unavailable["dask-ml"] = why
        else:
            for solver in cfg.dask_ml_solvers:
                tools.append(
                    Tool(
                        "dask-ml",
                        solver,
                        lambda d, t, c, s=solver: run_dask_ml(d, t, c, s),
                        (None,) if solver == "admm" else cfg.tols,
                    )
                )
    if "spark" in cfg.peers:
        why = why_no_spark()
        if why:
            unavailable["spark"] = why
        else:
            tools.append(Tool("spark-mllib", "lbfgs", run_spark, cfg.tols))
    return tools, unavailable

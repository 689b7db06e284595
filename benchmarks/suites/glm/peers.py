"""The ``glm`` suite's tools: how dask_dgd and its peers (scikit-learn, glum, H2O) are fitted
and timed, each fit a record of the same fields.
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

#: Peers this suite knows.
PEERS = ("sklearn", "glum", "h2o")


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

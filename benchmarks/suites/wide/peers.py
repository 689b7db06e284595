"""The ``wide`` suite's peers: scikit-learn's ``SGDClassifier``, Spark MLlib and Vowpal
Wabbit, each fitted on the in-memory rows and timed to a held-out logloss curve.
"""

import math
import time
import warnings

import numpy as np

from ..._common import median
from .problems import logloss, prob_logloss


# ----------------------------------------------------------------------------- peers
def run_sklearn(data, p, log):
    """SGDClassifier, one partial_fit per epoch; the median curve of ``repeats``."""
    from sklearn.linear_model import SGDClassifier

    runs = []
    for r in range(p["repeats"]):
        est = SGDClassifier(loss="log_loss", random_state=p["seed"] + r, **p["sklearn_params"])
        curve, fit = [{"epoch": 0, "time": 0.0, "logloss": data["ref"]["constant"]}], 0.0
        for e in range(1, p["epochs"] + 1):
            t0 = time.perf_counter()
            est.partial_fit(data["Xn"], data["yn"], classes=np.array([0.0, 1.0]))
            fit += time.perf_counter() - t0
            curve.append({"epoch": e, "time": fit, "logloss": logloss(data["y_test"],
                                                                      est.decision_function(data["X_test"]))})
        runs.append(curve)
    curve = [dict(c, time=median([run[i]["time"] for run in runs])) for i, c in enumerate(runs[0])]
    out = {"tool": "scikit-learn", "label": "scikit-learn SGDClassifier (log_loss)", "threads": "1 (sequential)",
           "cores": 1, "curve": curve, "wall": curve[-1]["time"], "final_logloss": curve[-1]["logloss"],
           "epochs": p["epochs"], "repeats": p["repeats"]}
    log(f"sklearn: {out['wall']:.1f}s for {p['epochs']} epochs, held-out logloss {out['final_logloss']:.5f}")
    return out


def spark_frame(data, p):
    """A ``local[threads]`` session and the training rows as a cached DataFrame of
    SparseVectors; returns ``(spark, df, session seconds, conversion seconds)``."""
    from pyspark.ml.linalg import SparseVector
    from pyspark.sql import SparkSession

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        t0 = time.perf_counter()
        spark = (SparkSession.builder.master(f"local[{p['threads']}]").appName("dask_dgd-wide")
                 .config("spark.driver.memory", p["spark_memory"]).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        X, y, d = data["Xn"], data["yn"], X_cols(data)
        rows = [(float(y[i]), SparseVector(d, X.indices[X.indptr[i]:X.indptr[i + 1]].tolist(),
                                           X.data[X.indptr[i]:X.indptr[i + 1]].tolist()))
                for i in range(X.shape[0])]
        df = spark.createDataFrame(rows, ["label", "features"], verifySchema=False)
        del rows
        df = df.repartition(p["threads"]).cache()
        df.count()
    return spark, df, started, time.perf_counter() - t0


def X_cols(data):
    return int(data["Xn"].shape[1])


def run_spark(spark_df, data, p, log):
    """One fit per ``maxIter`` of ``spark_iters`` (and ``epochs``), each timed."""
    from pyspark.ml.classification import LogisticRegression

    coef_d = X_cols(data)
    curve = [{"epoch": 0, "time": 0.0, "logloss": data["ref"]["constant"]}]
    for k in sorted(set(p["spark_iters"]) | {p["epochs"]}):
        lr = LogisticRegression(maxIter=int(k), regParam=p["alpha"], elasticNetParam=0.0, tol=1e-12,
                                fitIntercept=True, standardization=False, family="binomial")
        t0 = time.perf_counter()
        model = lr.fit(spark_df)
        wall = time.perf_counter() - t0
        coef = model.coefficients.toArray()
        assert coef.size == coef_d
        loss = logloss(data["y_test"], data["X_test"] @ coef + float(model.intercept))
        curve.append({"epoch": int(k), "time": wall, "logloss": loss,
                      "iterations": int(model.summary.totalIterations),
                      "objective": [float(v) for v in model.summary.objectiveHistory]})
        log(f"spark maxIter={k}: {wall:.1f}s, held-out logloss {loss:.5f}")
    at_e = next(c for c in curve if c["epoch"] == p["epochs"])
    return {"tool": "spark", "label": "Spark MLlib LogisticRegression (L-BFGS)",
            "threads": f"local[{p['threads']}]", "cores": p["threads"], "curve": curve, "ladder": True,
            "wall": at_e["time"], "final_logloss": at_e["logloss"], "epochs": p["epochs"]}


def run_vw(data, p, log):
    """Vowpal Wabbit, one pass per epoch over pre-built example lines."""
    import vowpalwabbit

    d_bits = int(round(math.log2(X_cols(data))))
    vw = vowpalwabbit.Workspace(f"{p['vw_args']} -b {d_bits} --random_seed {p['seed']}")
    train, test = data["vw_train"], data["vw_test"]
    curve, fit = [{"epoch": 0, "time": 0.0, "logloss": data["ref"]["constant"]}], 0.0
    try:
        for e in range(1, p["epochs"] + 1):
            t0 = time.perf_counter()
            for line in train:
                vw.learn(line)
            fit += time.perf_counter() - t0
            prob = np.fromiter((vw.predict(line) for line in test), dtype=np.float64, count=len(test))
            curve.append({"epoch": e, "time": fit, "logloss": prob_logloss(data["y_test"], prob)})
    finally:
        vw.finish()
    log(f"vw: {fit:.1f}s for {p['epochs']} epochs, held-out logloss {curve[-1]['logloss']:.5f}")
    return {"tool": "vw", "label": "Vowpal Wabbit (logistic)", "threads": "1 (learner; VW parses in-call)",
            "cores": 1, "curve": curve, "wall": fit, "final_logloss": curve[-1]["logloss"], "epochs": p["epochs"]}

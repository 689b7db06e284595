#!/usr/bin/env python
"""Benchmark: binary logistic regression, dask_dgd against scikit-learn and peers.

The data (``--rows`` x ``--features`` float64, default 2,000,000 x 100) is generated on
the workers of a ``LocalCluster`` of ``--workers`` single-threaded worker processes as a
dask array in ``--chunks`` row blocks, persisted and waited for before anything is
timed.  Labels come from a known logistic model with Bernoulli noise, so the problem is
not separable.  scikit-learn fits the same array, gathered into this process's memory,
with its lbfgs solver on ``--threads`` BLAS threads (the cores the cluster gets).

Every tool minimises the same objective, evaluated for all of them by one NumPy
function on the driver (:func:`objective`)::

    mean_i [log(1 + exp(z_i)) - y_i z_i] + alpha / 2 ||coef||^2,   z = X coef + b,

with ``alpha = 1 / (C n)`` (scikit-learn's ``C * sum(loss) + ||w||^2 / 2`` divided by
``C n``; the intercept is never penalised).  "Time to optimum" is the wall time of a fit
whose final objective is within ``--band`` (1e-6) relative of the best objective any
run reached: each tool runs down a ladder of tolerances (``--tols``), the loosest
tolerance that lands in the band is repeated ``--repeats`` times and its median is
reported.  A tool whose default tolerance stops short shows it in the ladder table.

Per-step figures come from ``history_`` of the dask_dgd fits (median ``step_time`` and
``compute_time_max``) and are compared with the one-pass memory-read time of ``X``
measured on the same cluster in the same run: one task per worker summing
(``block.sum()``) the blocks it holds, pinned to it, all workers at once.

Run ``python benchmarks/bench_logistic.py --help``; a tiny configuration
(``--rows 20000 --features 10 --repeats 1 --peers sklearn``) runs in seconds.
Machines are shared and noisy: quote the medians and the ratios, not single times.
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

#: Peers this script knows, in report order.
PEERS = ("sklearn", "dask-ml", "spark")
#: dask-ml solvers tried when dask-ml is importable.
DASK_ML_SOLVERS = ("lbfgs", "newton", "gradient_descent", "admm")
DEFAULT_TOLS = "1e-4,1e-5,1e-6,1e-8"


# ----------------------------------------------------------------------------- options
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of X")
    p.add_argument("--features", type=int, default=100, help="columns of X")
    p.add_argument("--chunks", type=int, default=16, help="row blocks of the dask array")
    p.add_argument("--workers", type=int, default=2, help="single-threaded worker processes")
    p.add_argument(
        "--threads", type=int, default=None,
        help="BLAS threads for the in-memory peers (default: --workers)",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (scikit-learn's C)")
    p.add_argument(
        "--tols", default=DEFAULT_TOLS,
        help="comma-separated tolerance ladder, loosest first (1e-4 is every tool's default)",
    )
    p.add_argument("--band", type=float, default=1e-6, help="relative objective gap to the best")
    p.add_argument("--max-iter", type=int, default=1000, help="iteration cap of the quasi-Newton solvers")
    p.add_argument("--max-iter-gd", type=int, default=5000, help="iteration cap of first-order solvers")
    p.add_argument(
        "--dgd-solvers", default="lbfgs,gd",
        help="dask_dgd solvers (comma-separated; lbfgs is what solver='auto' picks)",
    )
    p.add_argument(
        "--peers", default=",".join(PEERS),
        help="comma-separated peers among " + ", ".join(PEERS) + "; unavailable ones are reported and skipped",
    )
    p.add_argument(
        "--dask-ml-solvers", default=",".join(DASK_ML_SOLVERS),
        help="dask-ml solvers to run when dask-ml is importable",
    )
    p.add_argument("--read-repeats", type=int, default=7, help="samples of each one-pass read measurement")
    p.add_argument("--json", default=None, metavar="PATH", help="save the raw numbers here")
    args = p.parse_args(argv)
    args.threads = args.threads or args.workers
    args.tols = sorted({float(t) for t in args.tols.split(",") if t.strip()}, reverse=True)
    args.peers = [s.strip() for s in args.peers.split(",") if s.strip()]
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        p.error(f"unknown peers {unknown}; choose among {list(PEERS)}")
    args.dgd_solvers = [s.strip() for s in args.dgd_solvers.split(",") if s.strip()]
    args.dask_ml_solvers = [s.strip() for s in args.dask_ml_solvers.split(",") if s.strip()]
    if args.rows < args.chunks or args.chunks < 1:
        p.error("--chunks must be between 1 and --rows")
    if not args.tols:
        p.error("--tols needs at least one tolerance")
    return args


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data
def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def true_model(features, seed):
    """Coefficients and intercept of the logistic model the labels are drawn from."""
    rng = np.random.default_rng([seed, 1])
    coef = rng.standard_normal(features) * (2.0 / math.sqrt(features))
    return coef, 0.5


def make_data(client, rows, features, chunks, seed):
    """X ~ N(0, 1) and y ~ Bernoulli(sigmoid(X coef + b)), generated and persisted on the workers."""
    import dask.array as da
    from distributed import wait

    rng = da.random.default_rng(seed)
    block = -(-rows // chunks)
    X = rng.standard_normal((rows, features), chunks=(block, features))
    X = client.persist(X)
    wait(X)
    coef, intercept = true_model(features, seed)
    u = rng.random(rows, chunks=(X.chunks[0],))
    z = X @ coef + intercept
    y = (u < z.map_blocks(_sigmoid, dtype=np.float64)).astype(np.float64)
    y = client.persist(y)
    wait(y)
    return X, y


def block_placement(client, X):
    """Futures of X's row blocks, in order, and the worker holding each (at generation)."""
    from distributed import futures_of

    by_key = {f.key: f for f in futures_of(X)}
    futures = [by_key[k[0]] for k in X.__dask_keys__()]
    who = client.who_has(futures)
    return futures, [sorted(who[f.key])[0] for f in futures]


# ----------------------------------------------------------------------------- the shared objective
def objective(X, y, coef, intercept, alpha):
    """Mean log-loss + alpha/2 ||coef||^2 (intercept unpenalised), in float64 NumPy."""
    coef = np.asarray(coef, dtype=np.float64).ravel()
    z = X @ coef + float(np.ravel(intercept)[0])
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * alpha * (coef @ coef))


# ----------------------------------------------------------------------------- read passes
def _local_pass(kind, *blocks):
    """One pass over this worker's blocks, timed inside the task.

    ``sum``: ``block.sum()`` (the memory-read reference); ``gemv``: ``block @ v``;
    ``kernel``: dask_dgd's own per-block objective (``LinearObjective.block_sums`` of the
    binary logistic loss), i.e. the engine's compute on these blocks without the engine.
    """
    extra = None
    if kind == "kernel":
        from dask_dgd.losses import BinaryLogistic, LinearObjective

        d = blocks[0].shape[1]
        extra = (
            LinearObjective(BinaryLogistic(), d),
            np.random.default_rng(0).standard_normal(d + 1) * 0.1,
            [np.zeros(b.shape[0]) for b in blocks],
        )
    v = np.full(blocks[0].shape[1], 1e-3)
    t0 = time.perf_counter()
    acc = 0.0
    for i, b in enumerate(blocks):
        if kind == "sum":
            acc += float(b.sum())
        elif kind == "gemv":
            acc += float((b @ v).sum())
        else:
            obj, params, ys = extra
            acc += obj.block_sums(params, b, ys[i])[0]
    return time.perf_counter() - t0, acc


def cluster_read(client, futures, owners, kind, repeats):
    """All workers at once, each passing over the blocks it holds; max task time per sample."""
    by_worker = {}
    for f, w in zip(futures, owners):
        by_worker.setdefault(w, []).append(f)
    samples, walls = [], []
    for r in range(repeats + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        tasks = [
            client.submit(_local_pass, kind, *fs, workers=[w], allow_other_workers=False, pure=False)
            for w, fs in sorted(by_worker.items())
        ]
        out = client.gather(tasks)
        wall = time.perf_counter() - t0
        if r:
            samples.append([t for t, _ in out])
            walls.append(wall)
    return {
        "kind": kind,
        "blocks_per_worker": {w: len(fs) for w, fs in sorted(by_worker.items())},
        "task_time_per_worker": samples,
        "max_task_time": [max(s) for s in samples],
        "wall": walls,
    }


def _copies_on_worker(keys, dask_worker=None):
    """(key index, 8-byte aligned?) for each of ``keys`` held in this worker's memory."""
    out = []
    for i, k in enumerate(keys):
        try:
            a = dask_worker.data[k]
        except KeyError:
            continue
        out.append((i, bool(a.flags.aligned and a.ctypes.data % 8 == 0)))
    return out


def alignment_census(client, futures):
    """How many copies of X's blocks the workers hold, and how many are misaligned.

    Blocks moved between workers by Dask can arrive at addresses that are not 8-byte
    aligned; NumPy then falls back to slow non-BLAS loops on them.
    """
    keys = [f.key for f in futures]
    per_worker = client.run(_copies_on_worker, keys)
    copies = sum(len(v) for v in per_worker.values())
    misaligned = sorted(i for v in per_worker.values() for i, ok in v if not ok)
    return {"copies": copies, "misaligned": len(misaligned), "misaligned_blocks": misaligned}


def driver_read(Xn, repeats):
    out = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        Xn.sum()
        if r:
            out.append(time.perf_counter() - t0)
    return out


def gather_to_driver(client, X, y):
    """X and y in this process's memory, fetched block by block from the workers.

    (``X.compute()`` would first concatenate all blocks on one worker, copying half of
    X between the workers and leaving misaligned replicas behind.)
    """
    from distributed import futures_of

    def ordered(arr):
        by_key = {f.key: f for f in futures_of(arr)}
        keys = [k[0] if arr.ndim == 2 else k for k in arr.__dask_keys__()]
        return [by_key[k] for k in keys]

    Xn = np.empty(X.shape, dtype=X.dtype)
    row = 0
    for f in ordered(X):
        block = f.result()
        Xn[row : row + block.shape[0]] = block
        row += block.shape[0]
        del block
    yn = np.concatenate(client.gather(ordered(y)))
    return Xn, yn


# ----------------------------------------------------------------------------- tools
class Unavailable(Exception):
    pass


def run_sklearn(data, tol, args):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    Xn, yn = data["Xn"], data["yn"]
    est = LogisticRegression(C=args.C, tol=tol, max_iter=args.max_iter)
    with threadpool_limits(args.threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(Xn, yn)
        wall = time.perf_counter() - t0
    capped = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return {
        "wall": wall,
        "n_iter": int(np.max(est.n_iter_)),
        "n_steps": None,
        "coef": est.coef_.ravel(),
        "intercept": float(est.intercept_[0]),
        "capped": capped,
    }


def run_dask_dgd(data, tol, args, solver):
    from dask_dgd import ConvergenceWarning, LogisticRegression

    alpha = 1.0 / (args.C * args.rows)
    max_iter = args.max_iter if solver == "lbfgs" else args.max_iter_gd
    est = LogisticRegression(
        alpha=alpha, solver=solver, tol=tol, max_iter=max_iter, client=data["client"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(data["X"], data["y"])
        wall = time.perf_counter() - t0
    capped = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    h = est.history_
    solve = float(h["time"].iloc[-1]) if len(h) else 0.0
    return {
        "wall": wall,
        "setup": wall - solve,
        "n_iter": int(est.n_iter_),
        "n_steps": int(len(h)),
        "coef": np.asarray(est.coef_).ravel(),
        "intercept": float(np.ravel(est.intercept_)[0]),
        "capped": capped,
        "step_time": h["step_time"].astype(float).tolist(),
        "compute_time_max": h["compute_time_max"].astype(float).tolist(),
        "compute_time_min": h["compute_time_min"].astype(float).tolist(),
        "history_loss": h["loss"].astype(float).tolist(),
    }


def run_dask_ml(data, tol, args, solver):
    from dask_ml.linear_model import LogisticRegression

    first_order = solver in ("gradient_descent", "admm")
    est = LogisticRegression(
        C=args.C,
        solver=solver,
        tol=tol,
        max_iter=args.max_iter_gd if first_order else args.max_iter,
        fit_intercept=True,
    )
    t0 = time.perf_counter()
    est.fit(data["X"], data["y"])
    wall = time.perf_counter() - t0
    n_iter = getattr(est, "n_iter_", None)
    return {
        "wall": wall,
        "n_iter": None if n_iter is None else int(np.max(n_iter)),
        "n_steps": None,
        "coef": np.asarray(est.coef_).ravel(),
        "intercept": float(np.ravel(est.intercept_)[0]),
        "capped": None,
    }


def spark_setup(data, args):
    """A local[threads] Spark session with the driver's copy of the data cached in it."""
    import pandas as pd
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import SparkSession

    memory = f"{max(4, int(6 * data['Xn'].nbytes / 2**30) + 2)}g"
    spark = (
        SparkSession.builder.master(f"local[{args.threads}]")
        .appName("dask_dgd-bench")
        .config("spark.driver.memory", memory)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    cols = [f"f{j}" for j in range(args.features)]
    t0 = time.perf_counter()
    pdf = pd.DataFrame(data["Xn"], columns=cols, copy=False)
    pdf["label"] = data["yn"]
    sdf = spark.createDataFrame(pdf)
    del pdf
    df = VectorAssembler(inputCols=cols, outputCol="features").transform(sdf).select("features", "label")
    df = df.repartition(args.threads).cache()
    df.count()
    return spark, df, time.perf_counter() - t0


def run_spark(data, tol, args):
    from pyspark.ml.classification import LogisticRegression

    lr = LogisticRegression(
        maxIter=args.max_iter,
        regParam=1.0 / (args.C * args.rows),
        elasticNetParam=0.0,
        tol=tol,
        fitIntercept=True,
        standardization=False,
        family="binomial",
    )
    t0 = time.perf_counter()
    model = lr.fit(data["spark_df"])
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "n_iter": int(model.summary.totalIterations),
        "n_steps": None,
        "coef": model.coefficients.toArray(),
        "intercept": float(model.intercept),
        "capped": None,
    }


def java_available():
    try:
        subprocess.run(["java", "-version"], capture_output=True, check=True, timeout=60)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def _why_unimportable(module):
    try:
        __import__(module)
    except Exception as err:  # noqa: BLE001 - any import failure makes the peer unavailable
        return f"{type(err).__name__}: {err}"
    return None


def configurations(args):
    """(name, solver, runner) for every configuration to run, and the unavailable peers."""
    configs, unavailable = [], {}
    if "sklearn" in args.peers:
        configs.append(("scikit-learn", "lbfgs", run_sklearn))
    for solver in args.dgd_solvers:
        configs.append(("dask_dgd", solver, lambda d, t, a, s=solver: run_dask_dgd(d, t, a, s)))
    if "dask-ml" in args.peers:
        why = _why_unimportable("dask_ml.linear_model")
        if why:
            unavailable["dask-ml"] = why
        else:
            for solver in args.dask_ml_solvers:
                configs.append(("dask-ml", solver, lambda d, t, a, s=solver: run_dask_ml(d, t, a, s)))
    if "spark" in args.peers:
        why = _why_unimportable("pyspark")
        if why is None and not java_available():
            why = "no working `java` on PATH"
        if why:
            unavailable["spark"] = why
        else:
            configs.append(("spark-mllib", "lbfgs", run_spark))
    return configs, unavailable


def warm_up(data, configs, args):
    """One untimed short fit per tool; returns the dask_dgd first-fit wall time."""
    out = {}
    warm_args = argparse.Namespace(**{**vars(args), "max_iter": 2, "max_iter_gd": 2})
    for name, solver, runner in configs:
        if name in out:
            continue
        t0 = time.perf_counter()
        try:
            runner(data, 1e-4, warm_args)
        except Exception as err:  # noqa: BLE001 - the timed runs will report it
            log(f"{name}: warm-up failed: {type(err).__name__}: {err}")
        out[name] = time.perf_counter() - t0
        log(f"{name}: warm-up fit {out[name]:.2f}s")
    return out


# ----------------------------------------------------------------------------- the benchmark
def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _environment(args):
    import dask
    import distributed
    import scipy
    import sklearn

    try:
        import threadpoolctl

        blas = [
            f"{i.get('internal_api')} {i.get('version')}"
            for i in threadpoolctl.threadpool_info()
            if i.get("user_api") == "blas"
        ]
    except Exception:  # pragma: no cover - informational only
        blas = []
    import dask_dgd

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/bench_logistic.py", *sys.argv[1:]])
        if sys.argv and sys.argv[0].endswith("bench_logistic.py")
        else None,
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "scikit-learn": sklearn.__version__,
        "dask_dgd": getattr(dask_dgd, "__version__", "?"),
        "blas": blas,
    }


def benchmark(args):
    from distributed import Client, LocalCluster

    result = {"config": {k: v for k, v in vars(args).items()}, "env": _environment(args)}
    alpha = 1.0 / (args.C * args.rows)
    configs, unavailable = configurations(args)
    result["unavailable"] = unavailable
    for peer, why in unavailable.items():
        log(f"{peer}: unavailable: {why}")

    log(f"starting LocalCluster: {args.workers} workers x 1 thread (processes)")
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = Client(cluster)
    spark = None
    try:
        t0 = time.perf_counter()
        X, y = make_data(client, args.rows, args.features, args.chunks, args.seed)
        result["generate_time"] = time.perf_counter() - t0
        futures, owners = block_placement(client, X)
        log(f"data {X.shape} {X.dtype} in {X.numblocks[0]} blocks generated in {result['generate_time']:.1f}s")

        t0 = time.perf_counter()
        Xn, yn = gather_to_driver(client, X, y)
        result["gather_to_driver_time"] = time.perf_counter() - t0
        result["positive_rate"] = float(yn.mean())
        data = {"client": client, "X": X, "y": y, "Xn": Xn, "yn": yn}
        result["alignment"] = {"generated": alignment_census(client, futures)}

        # One-pass reads over the blocks where Dask generated them, before any fit moves
        # data (a moved copy may be misaligned, see alignment_census).
        reads = {}
        for kind in ("sum", "gemv", "kernel"):
            reads[kind] = cluster_read(client, futures, owners, kind, args.read_repeats)
            log(f"one pass ({kind}): {statistics.median(reads[kind]['max_task_time']):.3f}s")
        result["driver_read_sum"] = driver_read(Xn, args.read_repeats)

        if any(name == "spark-mllib" for name, _, _ in configs):
            try:
                spark, data["spark_df"], result["spark_load_time"] = spark_setup(data, args)
            except Exception as err:  # noqa: BLE001 - report and go on without Spark
                unavailable["spark"] = f"setup failed: {type(err).__name__}: {err}"
                configs = [c for c in configs if c[0] != "spark-mllib"]

        # Warm-up, untimed: worker imports and, for dask_dgd, the one-off move of blocks
        # to the worker of their shard (dask placed the blocks; later fits find them local).
        result["warmup"] = warm_up(data, configs, args)

        # Phase 1: the tolerance ladder, once per configuration.
        runs = {}
        for name, solver, runner in configs:
            key = f"{name}/{solver}"
            runs[key] = {"name": name, "solver": solver, "ladder": {}, "error": None}
            for tol in args.tols:
                log(f"{key}: tol={tol:g}")
                try:
                    r = runner(data, tol, args)
                except Exception as err:  # noqa: BLE001 - a peer's failure is reported, not fatal
                    runs[key]["error"] = f"{type(err).__name__}: {err}"
                    log(f"{key}: failed: {runs[key]['error']}")
                    break
                r["objective"] = objective(Xn, yn, r.pop("coef"), r.pop("intercept"), alpha)
                runs[key]["ladder"][tol] = [r]
                log(f"{key}: tol={tol:g} wall={r['wall']:.2f}s iter={r['n_iter']} obj={r['objective']:.12g}")

        objectives = [r["objective"] for run in runs.values() for rs in run["ladder"].values() for r in rs]
        best = min(objectives) if objectives else math.nan
        result["best_objective"] = best

        def rel_gap(v):
            return (v - best) / abs(best)

        # Phase 2: the loosest tolerance that reaches the band, repeated.
        for key, run in runs.items():
            if not run["ladder"]:
                continue
            in_band = [t for t in run["ladder"] if rel_gap(run["ladder"][t][0]["objective"]) <= args.band]
            run["reached"] = bool(in_band)
            tol = max(in_band) if in_band else min(run["ladder"])
            run["chosen_tol"] = tol
            runner = next(rn for n, s, rn in configs if f"{n}/{s}" == key)
            for _ in range(args.repeats - 1):
                log(f"{key}: repeat at tol={tol:g}")
                try:
                    r = runner(data, tol, args)
                except Exception as err:  # noqa: BLE001
                    run["error"] = f"{type(err).__name__}: {err}"
                    break
                r["objective"] = objective(Xn, yn, r.pop("coef"), r.pop("intercept"), alpha)
                run["ladder"][tol].append(r)

        result["alignment"]["after_fits"] = alignment_census(client, futures)
        result["cluster_read"] = reads
        result["runs"] = runs
    finally:
        if spark is not None:
            spark.stop()
        client.close()
        cluster.close()
    summarise(result, args)
    return result


# ----------------------------------------------------------------------------- summary
def summarise(result, args):
    """Median figures per configuration and the per-step comparison (added to ``result``)."""
    best = result["best_objective"]
    reads = result["cluster_read"]
    n_workers_rows = args.rows / args.workers

    def read_fig(kind):
        rd = reads[kind]
        workers = sorted(rd["blocks_per_worker"])
        rows_per_block = args.rows / args.chunks
        # The slowest worker's pass, scaled to an equal share of the rows (the engine
        # gives every worker the same number of rows; Dask may have placed more on one).
        per_sample = [
            max(
                t * n_workers_rows / (rd["blocks_per_worker"][w] * rows_per_block)
                for t, w in zip(sample, workers)
            )
            for sample in rd["task_time_per_worker"]
        ]
        return {
            "equal_share": _median(per_sample),
            "max_task": _median(rd["max_task_time"]),
            "wall": _median(rd["wall"]),
        }

    read = {kind: read_fig(kind) for kind in reads}
    read["driver_sum"] = _median(result["driver_read_sum"])
    read["blocks_per_worker"] = reads["sum"]["blocks_per_worker"]
    result["read_summary"] = read
    one_pass = read["sum"]["equal_share"]
    kernel = read["kernel"]["equal_share"]

    table = []
    for key, run in result["runs"].items():
        row = {"key": key, "name": run["name"], "solver": run["solver"], "error": run["error"]}
        if run["ladder"]:
            chosen = run["ladder"][run["chosen_tol"]]
            row.update(
                tol=run["chosen_tol"],
                reached=run["reached"],
                wall=_median([r["wall"] for r in chosen]),
                walls=[r["wall"] for r in chosen],
                n_iter=_median([r["n_iter"] for r in chosen]),
                n_steps=_median([r["n_steps"] for r in chosen]),
                objective=chosen[0]["objective"],
                rel_gap=(chosen[0]["objective"] - best) / abs(best),
                setup=_median([r.get("setup") for r in chosen]),
                ladder=[
                    {
                        "tol": t,
                        "wall": rs[0]["wall"],
                        "n_iter": rs[0]["n_iter"],
                        "n_steps": rs[0]["n_steps"],
                        "objective": rs[0]["objective"],
                        "rel_gap": (rs[0]["objective"] - best) / abs(best),
                        "capped": rs[0]["capped"],
                    }
                    for t, rs in sorted(run["ladder"].items(), reverse=True)
                ],
            )
            if run["name"] == "dask_dgd":
                steps = [s for r in chosen for s in r["step_time"]]
                cmax = [s for r in chosen for s in r["compute_time_max"]]
                over = [a - b for r in chosen for a, b in zip(r["step_time"], r["compute_time_max"])]
                row.update(
                    step_time=_median(steps),
                    compute_time_max=_median(cmax),
                    overhead=_median(over),
                )
        table.append(row)
    ref = next((r for r in table if r["name"] == "scikit-learn" and r.get("wall")), None)
    for row in table:
        if ref is not None and row.get("wall"):
            row["ratio_vs_sklearn"] = row["wall"] / ref["wall"]
        if row.get("step_time"):
            row["step_over_read"] = row["step_time"] / one_pass
            row["compute_over_read"] = row["compute_time_max"] / one_pass
            row["compute_over_kernel"] = row["compute_time_max"] / kernel
    result["table"] = table


def _f(x, fmt="{:.3g}"):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return fmt.format(x)


def _t(x):
    """Seconds, readable from microseconds to minutes."""
    if x is None:
        return "–"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def _n(x):
    return "–" if x is None else f"{x:g}"


def render(result, args):
    """The markdown report (tables) as a string."""
    env, read = result["env"], result["read_summary"]
    lines = []
    lines.append(
        f"## Logistic regression, {args.rows:,} x {args.features} float64, "
        f"{args.chunks} blocks, {args.workers} workers x 1 thread"
    )
    lines.append("")
    lines.append(
        f"C={args.C:g} (alpha=1/(C n)={1 / (args.C * args.rows):.3g}), seed={args.seed}, "
        f"repeats={args.repeats}, band={args.band:g} relative to the best objective "
        f"{result['best_objective']:.12g}; positive rate {result['positive_rate']:.3f}; "
        f"nproc={env['nproc']}; python {env['python']}, numpy {env['numpy']}, "
        f"dask {env['dask']}, distributed {env['distributed']}, scikit-learn {env['scikit-learn']}."
    )
    lines.append("")
    lines.append("### Time to optimum (median of repeats at the loosest tolerance in the band)")
    lines.append("")
    lines.append(
        "| tool | solver | tol | median wall | iterations | steps | final objective "
        "| rel gap to best | in band | ratio vs scikit-learn |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for row in result["table"]:
        if not row.get("wall"):
            lines.append(f"| {row['name']} | {row['solver']} | – | failed: {row['error']} | | | | | | |")
            continue
        lines.append(
            f"| {row['name']} | {row['solver']} | {row['tol']:g} | {_t(row['wall'])} "
            f"| {_n(row['n_iter'])} | {_n(row['n_steps'])} | {row['objective']:.12g} "
            f"| {_f(row['rel_gap'], '{:.1e}')} | {'yes' if row['reached'] else 'NO'} "
            f"| {_f(row.get('ratio_vs_sklearn'), '{:.2f}')} |"
        )
    for peer, why in result["unavailable"].items():
        lines.append(f"| {peer} | – | – | unavailable: {why} | | | | | | |")
    lines.append("")
    lines.append("### Per step (dask_dgd, from `history_`) against one pass over X")
    lines.append("")
    bpw = read["blocks_per_worker"]
    lines.append(
        f"One-pass read of X on the cluster (`block.sum()` over each worker's blocks, all "
        f"workers at once, timed inside the tasks, slowest worker scaled to an equal share "
        f"of the rows; blocks per worker {sorted(bpw.values())}): "
        f"**{_t(read['sum']['equal_share'])}** (raw slowest task {_t(read['sum']['max_task'])}, "
        f"wall incl. scheduling {_t(read['sum']['wall'])}). Same blocks, same way: one "
        f"`block @ v` pass {_t(read['gemv']['equal_share'])}; dask_dgd's block kernel "
        f"(`LinearObjective.block_sums`, no engine) {_t(read['kernel']['equal_share'])}. "
        f"Driver single-process `X.sum()` over all of X: {_t(read['driver_sum'])}."
    )
    lines.append("")
    lines.append(
        "| tool | solver | median step | median compute max | median overhead "
        "| one-pass read | **step / read** | compute max / read | compute max / kernel |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    one_pass = read["sum"]["equal_share"]
    for row in result["table"]:
        if row.get("step_time"):
            lines.append(
                f"| {row['name']} | {row['solver']} | {_t(row['step_time'])} "
                f"| {_t(row['compute_time_max'])} | {_t(row['overhead'])} | {_t(one_pass)} "
                f"| **{row['step_over_read']:.2f}** | {row['compute_over_read']:.2f} "
                f"| {row['compute_over_kernel']:.2f} |"
            )
    if read["kernel"]["equal_share"]:
        lines.append(
            f"| (dask_dgd kernel alone) | | | {_t(read['kernel']['equal_share'])} | | {_t(one_pass)} "
            f"| | {read['kernel']['equal_share'] / one_pass:.2f} | 1.00 |"
        )
    sk = next((r for r in result["table"] if r["name"] == "scikit-learn" and r.get("wall")), None)
    if sk and sk.get("n_iter"):
        lines.append("")
        lines.append(
            f"For reference, scikit-learn (in memory, {args.threads} threads) took "
            f"{_t(sk['wall'] / sk['n_iter'])} per L-BFGS iteration (wall / iterations; an "
            f"iteration may evaluate the loss more than once), "
            f"{sk['wall'] / sk['n_iter'] / read['driver_sum']:.2f}x the driver's `X.sum()`."
        )
    al = result.get("alignment", {})
    if al:
        g, f = al.get("generated", {}), al.get("after_fits", {})
        lines.append("")
        lines.append(
            f"Copies of X's blocks held by the workers: {g.get('copies')} as generated "
            f"({g.get('misaligned')} misaligned); {f.get('copies')} after the fits "
            f"({f.get('misaligned')} not 8-byte aligned: blocks {f.get('misaligned_blocks')})."
        )
    lines.append("")
    lines.append("### Tolerance ladder (one run each)")
    lines.append("")
    lines.append("| tool | solver | tol | wall | iterations | steps | rel gap to best | hit max_iter |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for row in result["table"]:
        for rung in row.get("ladder", []):
            capped = {True: "yes", False: "no", None: "?"}[rung["capped"]]
            lines.append(
                f"| {row['name']} | {row['solver']} | {rung['tol']:g} | {_t(rung['wall'])} "
                f"| {_n(rung['n_iter'])} | {_n(rung['n_steps'])} | {rung['rel_gap']:.1e} | {capped} |"
            )
    lines.append("")
    setup = [row for row in result["table"] if row.get("setup") is not None]
    if setup:
        lines.append(
            "dask_dgd fit setup (shards, label summary, encoding; inside the wall times above): "
            + ", ".join(f"{r['solver']} {_t(r['setup'])}" for r in setup)
            + f". First (untimed warm-up) dask_dgd fit, which also moves blocks to their "
            f"shard's worker: {_t(result['warmup'].get('dask_dgd'))}"
            + f". Data generation on the workers: {_t(result['generate_time'])}; "
            f"gathering X, y into the driver for scikit-learn: {_t(result['gather_to_driver_time'])} "
            "(not in scikit-learn's wall time)."
        )
        lines.append("")
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def main(argv=None):
    args = parse_args(argv)
    result = benchmark(args)
    report = render(result, args)
    print(report)
    result["report"] = report
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(_jsonable(result), fh, indent=1)
        log(f"raw numbers saved to {args.json}")
    return result


if __name__ == "__main__":
    main()

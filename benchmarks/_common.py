"""Helpers shared by the benchmark suites (no suite logic here)."""

import datetime
import math
import os
import platform
import statistics
import sys

import numpy as np

__all__ = [
    "environment",
    "environment_markdown",
    "median",
    "md_table",
    "start_cluster",
    "log",
    "true_model",
    "make_data",
    "gather_to_driver",
    "suite_params",
    "one_line",
    "why_unimportable",
]


def one_line(err):
    """``Type: message`` of an exception, on one line."""
    return " ".join(f"{type(err).__name__}: {err}".split())


def why_unimportable(module):
    """Why ``module`` cannot be imported here (one line), or None: a peer that cannot
    be imported is reported unavailable."""
    try:
        __import__(module)
    except Exception as err:  # noqa: BLE001 - any import failure makes the peer unavailable
        return one_line(err)
    return None


def log(msg):
    """Progress line on stderr (stdout carries the report)."""
    print(f"[bench {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _blas():
    try:
        import threadpoolctl

        return [
            f"{i.get('internal_api')} {i.get('version')}"
            for i in threadpoolctl.threadpool_info()
            if i.get("user_api") == "blas"
        ]
    except Exception:  # pragma: no cover - informational only
        return []


def _version(module):
    try:
        mod = __import__(module)
    except Exception as err:  # noqa: BLE001 - any import failure means "not available"
        return f"unavailable ({type(err).__name__})"
    return getattr(mod, "__version__", "?")


def commit():
    """The commit of the repository these benchmarks run from (``+dirty`` when files
    differ from it), or why it is unknown: every result names the code it measured."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"unknown ({type(err).__name__})"
    return head + ("+dirty" if dirty else "")


def environment():
    """Machine, package versions and the commit, for the report header and the JSON."""
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "memory": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": _version("scipy"),
        "dask": _version("dask"),
        "distributed": _version("distributed"),
        "scikit-learn": _version("sklearn"),
        "dask-ml": _version("dask_ml"),
        "pyspark": _version("pyspark"),
        "dask_dgd": _version("dask_dgd"),
        "commit": commit(),
        "blas": _blas(),
    }


def environment_markdown(env):
    blas = ", ".join(env.get("blas") or []) or "unknown"
    return (
        f"Machine: {env['cpu']}, nproc={env['nproc']}, {env['memory']} RAM; {env['platform']}. "
        f"Python {env['python']}, NumPy {env['numpy']} ({blas}), SciPy {env['scipy']}, "
        f"dask {env['dask']}, distributed {env['distributed']}, scikit-learn "
        f"{env['scikit-learn']}, dask-ml {env['dask-ml']}, pyspark {env['pyspark']}, "
        f"dask_dgd {env['dask_dgd']} at commit {env.get('commit', 'unknown')}. Run at {env['date']}."
    )


def md_table(headers, rows):
    """A Markdown table; ``None`` cells print as an en dash."""
    def cell(x):
        return "–" if x is None else str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def start_cluster(n_workers, threads_per_worker=1, memory_limit="auto"):
    """A quiet LocalCluster of single-threaded worker processes and its client.

    Each worker's BLAS is limited to ``threads_per_worker`` threads (the nanny passes
    the usual ``*_NUM_THREADS`` variables), so workers do not oversubscribe the cores.
    """
    import logging

    from distributed import Client

    from dask_dgd._engine.runtime.clusters import local_cluster

    cluster = local_cluster(  # (the workers' profiler off where it can deadlock the interpreter)
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        dashboard_address=":0",
        memory_limit=memory_limit,
        silence_logs=logging.ERROR,
    )
    return cluster, Client(cluster)


def suite_params(name, sizes, size, repeats, overrides):
    """A suite's parameters: the size's values, then ``overrides`` (unknown names are an
    error), with ``repeats`` replacing the size's repeats when given."""
    if size not in sizes:
        raise ValueError(f"unknown size {size!r} for the {name} suite; choose among {list(sizes)}")
    p = dict(sizes[size])
    unknown = set(overrides) - set(p)
    if unknown:
        raise TypeError(f"unknown parameters for the {name} suite: {sorted(unknown)}")
    p.update(overrides)
    if repeats is not None:
        p["repeats"] = repeats
    return p


# ----------------------------------------------------------------------------- data
def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def true_model(features, seed):
    """Coefficients and intercept of the logistic model the labels are drawn from."""
    rng = np.random.default_rng([seed, 1])
    coef = rng.standard_normal(features) * (2.0 / math.sqrt(features))
    return coef, 0.5


def make_data(client, rows, features, chunks, seed):
    """X ~ N(0, 1), y ~ Bernoulli(sigmoid(X coef + b)), generated and persisted on the workers."""
    import dask.array as da
    from distributed import futures_of, wait

    rng = da.random.default_rng(seed)
    block = -(-rows // chunks)
    X = rng.standard_normal((rows, features), chunks=(block, features))
    X = client.persist(X)
    with client.as_current():
        wait(futures_of(X))
    coef, intercept = true_model(features, seed)
    u = rng.random(rows, chunks=(X.chunks[0],))
    z = X @ coef + intercept
    y = (u < z.map_blocks(_sigmoid, dtype=np.float64)).astype(np.float64)
    y = client.persist(y)
    with client.as_current():
        wait(futures_of(y))
    return X, y


def gather_to_driver(X, y):
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
    yn = np.concatenate([f.result() for f in ordered(y)])
    return Xn, yn

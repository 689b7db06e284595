"""Helpers shared by the benchmark suites (no suite logic here)."""

import datetime
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
]


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


def environment():
    """Machine and package versions, for the report header and the JSON."""
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
        "blas": _blas(),
    }


def environment_markdown(env):
    blas = ", ".join(env.get("blas") or []) or "unknown"
    return (
        f"Machine: {env['cpu']}, nproc={env['nproc']}, {env['memory']} RAM; {env['platform']}. "
        f"Python {env['python']}, NumPy {env['numpy']} ({blas}), SciPy {env['scipy']}, "
        f"dask {env['dask']}, distributed {env['distributed']}, scikit-learn "
        f"{env['scikit-learn']}, dask-ml {env['dask-ml']}, pyspark {env['pyspark']}, "
        f"dask_dgd {env['dask_dgd']}. Run at {env['date']}."
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

    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        dashboard_address=":0",
        memory_limit=memory_limit,
        silence_logs=logging.ERROR,
    )
    return cluster, Client(cluster)

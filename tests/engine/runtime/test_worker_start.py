"""What a fresh worker process imports before it runs a fit's tasks.

Every worker a cluster starts, and every worker a nanny restarts after a loss, imports
the library's task code before its first task; scikit-learn (through the re-exported
exceptions) cost each one about 2 s of CPU, on top of Dask's own imports.  The test runs
in a child process whose LocalCluster spawns its worker (Dask's default start method),
as a user's does: the test suite's own clusters fork theirs from a preloaded server
(``tests/conftest.py``).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[3])

_FIT_ON_A_SPAWNED_WORKER = """
import logging, sys, warnings
import dask, dask.array as da, numpy as np
from distributed import Client, LocalCluster

def imported(prefixes):
    return sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in prefixes})

if __name__ == "__main__":  # (a spawned process imports this module, without running this part)
    from dask_dgd import LinearRegression, LogisticRegression

    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}), \\
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                         silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        rng = np.random.default_rng(0)
        X = da.from_array(rng.standard_normal((2000, 4)), chunks=(500, -1))
        y = (X[:, 0] > 0).astype(float)
        warnings.simplefilter("ignore")
        LogisticRegression(client=client, solver="gd", max_iter=3).fit(X, y)
        LinearRegression(client=client, solver="lbfgs", max_iter=3).fit(X, y)
        print("worker:", *client.run(imported, ("sklearn", "dask_dgd")).values())
"""


@pytest.mark.slow
def test_a_spawned_worker_runs_a_fit_without_importing_scikit_learn(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(_FIT_ON_A_SPAWNED_WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)  # this checkout's code
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    # the worker ran the library's tasks (dask_dgd imported) without scikit-learn
    assert "worker: ['dask_dgd']" in run.stdout, run.stdout + run.stderr

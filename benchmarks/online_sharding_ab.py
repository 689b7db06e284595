"""``solver="online"`` with and without ``param_sharding``, alternating on one cluster.

``python -m benchmarks.online_sharding_ab [REPEATS]`` (default 3): the ``wide`` suite's
small click log (175,000 rows hashed to 2**22 columns) on a 2-worker ``LocalCluster``
(one thread each); ``solver="online"`` with ``max_iter=3`` from the suite's intercept
start, unsharded then sharded, ``REPEATS`` times; prints each fit's time and held-out
logloss (the two fits are the same, bit for bit) and the ratio of the medians.  Issue 43
(see ``benchmarks/RESULTS.md``, section ``wide``).
"""
import statistics
import sys
import time
import warnings

from distributed import Client, LocalCluster

import dask_dgd
from benchmarks.suites import wide
from benchmarks.suites.wide.dgd import intercept_start
from benchmarks.suites.wide.problems import click_log_csr, click_log_dask, heldout_logloss
from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty

if __name__ == "__main__":
    p = dict(wide.SIZES["small"])
    d = int(p["n_features"])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as c, Client(c) as client:
        X, y = click_log_dask(p, "train")
        X, y = client.persist([X, y])
        Xt, yt, _, _ = click_log_csr(p, "test")
        obj = LinearObjective(BinaryLogistic(), n_features=d)
        ytr = y.compute()
        start = intercept_start(d, float(ytr.mean())).toarray().ravel()
        times = {False: [], True: []}
        for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
            for sharded in (False, True):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    res = dask_dgd.train(obj, (X, y), penalty=Penalty(alpha=p["alpha"]), solver="online", max_iter=3,
                                         tol=0.0, n_iter_no_change=4, random_state=p["seed"], client=client,
                                         params0=start, param_sharding=sharded)
                    wall = time.perf_counter() - t0
                times[sharded].append(wall)
                loss = heldout_logloss(res.params, Xt, yt, d)
                print(f"rep {rep} sharded={sharded}: {wall:.2f} s, held-out logloss {loss:.5f}", flush=True)
        a, b = statistics.median(times[False]), statistics.median(times[True])
        print(f"median unsharded {a:.2f} s, sharded {b:.2f} s, sharded/unsharded {b / a:.2f}x")

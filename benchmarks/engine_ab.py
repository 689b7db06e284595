"""The engine against an earlier revision of itself, side by side in one run.

``python -m benchmarks.engine_ab --base REV [--repeats 5]`` checks out ``REV`` in a
temporary git worktree and runs the same fits with both code trees, alternating, each in
a fresh process with its own 2-worker LocalCluster: a full-batch step's overhead (step
time minus the slowest group's compute), L-BFGS and Newton to the optimum, mini-batch
SGD, matrix factorization (full batch and mini-batch), and the climate regressor
(pointwise, and pooled full-batch gd on an xarray grid).  It prints medians of the
repeats and the ratio current / base of each: what a refactor of the engine cost or saved.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKLOAD = r"""
import json, time, warnings
import numpy as np
warnings.simplefilter("ignore")
from distributed import Client, LocalCluster
import dask.array as da
import dask_dgd
from dask_dgd.datasets import make_classification, make_ratings

def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]

if __name__ == "__main__":
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c, \
            Client(c) as client:
        X, y = make_classification(400_000, 100, chunks=25_000, random_state=0)
        X, y = client.persist([X, y])
        client.wait_for_workers(2)
        dask_dgd.LogisticRegression(solver="gd", max_iter=2, client=client).fit(X, y)  # warm the kernels
        t = time.perf_counter()
        est = dask_dgd.LogisticRegression(solver="gd", max_iter=30, tol=0.0, client=client).fit(X, y)
        h = est.history_.iloc[1:]
        out["gd_wall_s"] = time.perf_counter() - t
        out["gd_step_ms"] = 1e3 * med(h["step_time"].tolist())
        out["gd_overhead_ms"] = 1e3 * med((h["step_time"] - h["compute_time_max"]).tolist())
        for solver in ("lbfgs", "newton"):
            t = time.perf_counter()
            est = dask_dgd.LogisticRegression(solver=solver, tol=1e-6, client=client).fit(X, y)
            out[f"{solver}_wall_s"] = time.perf_counter() - t
            out[f"{solver}_steps"] = int(est.history_["step"].iloc[-1])
        t = time.perf_counter()
        dask_dgd.LogisticRegression(solver="sgd", batch_size=20_000, max_iter=3, tol=0.0, client=client).fit(X, y)
        out["sgd_wall_s"] = time.perf_counter() - t
        ratings, _ = make_ratings(20_000, 5_000, 400_000, random_state=0)
        for name, kw in (("mf_full", {}), ("mf_minibatch", {"batch_size": 50_000})):
            t = time.perf_counter()
            mf = dask_dgd.MatrixFactorization(n_components=16, max_iter=10, tol=0, random_state=0, client=client,
                                              **kw).fit(ratings)
            out[f"{name}_wall_s"] = time.perf_counter() - t
            out[f"{name}_rmse"] = float(-mf.score(ratings))
        import xarray as xr
        from dask_dgd.climate import ClimateRegressor
        T, Y, Xn = 1_000, 60, 60
        rng = da.random.default_rng(0)
        x = rng.standard_normal((T, Y, Xn), chunks=(250, 30, 30))
        index = np.random.default_rng(1).standard_normal(T)
        yv = 1.0 + 0.5 * x + 0.2 * da.from_array(index[:, None, None], chunks=(250, 1, 1)) \
            + 0.1 * rng.standard_normal((T, Y, Xn), chunks=(250, 30, 30))
        ds = xr.Dataset({"x": (("time", "lat", "lon"), x), "index": (("time",), index),
                         "y": (("time", "lat", "lon"), yv)},
                        coords={"lat": np.linspace(-60, 60, Y), "lon": np.linspace(0, 354, Xn)}).persist()
        ClimateRegressor(["x", "index"], "y", model="pointwise", client=client).fit(ds.isel(time=slice(0, 50)))
        t = time.perf_counter()
        ClimateRegressor(["x", "index"], "y", model="pointwise", client=client).fit(ds)
        out["climate_pointwise_wall_s"] = time.perf_counter() - t
        t = time.perf_counter()
        cr = ClimateRegressor(["x", "index"], "y", model="pooled", solver="gd", max_iter=20, tol=0,
                              client=client).fit(ds)
        out["climate_pooled_wall_s"] = time.perf_counter() - t
        out["climate_pooled_step_ms"] = 1e3 * med(cr.history_["step_time"].iloc[1:].tolist())
    print("RESULT " + json.dumps(out))
"""


def _run(tree, script):
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, script], cwd=tree, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"the workload failed in {tree}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", root, "worktree", "add", "--detach", base, args.base], check=True,
                       capture_output=True)
        try:
            script = os.path.join(tmp, "workload.py")
            with open(script, "w") as fh:
                fh.write(WORKLOAD)
            runs = {"current": [], "base": []}
            for i in range(args.repeats):
                for name, tree in (("current", root), ("base", base)) if i % 2 == 0 else (("base", base),
                                                                                           ("current", root)):
                    runs[name].append(_run(tree, script))
                    print(f"repeat {i + 1}/{args.repeats} {name}: done", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", root, "worktree", "remove", "--force", base], capture_output=True)
    keys = list(runs["current"][0])
    print(f"| measure (median of {args.repeats}) | current | base {args.base} | current / base |")
    print("|---|---|---|---|")
    for key in keys:
        cur = statistics.median(r[key] for r in runs["current"])
        old = statistics.median(r[key] for r in runs["base"])
        print(f"| {key} | {cur:.4g} | {old:.4g} | {cur / old:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a new user meets first, measured side by side in one run.

``python -m benchmarks.first_use [--repeats 5] [--base REV]``:

* start-up: ``import dask_dgd`` next to ``import sklearn`` (the peer whose estimators
  users know), ``dask-dgd --help``, usage errors (a wrong ``--target``, a bad ``--param``
  value), ``train`` and ``predict`` on a 4-row CSV, each in a fresh process (median of
  the repeats);
* a hyper-parameter search inside Dask tasks: scikit-learn's ``GridSearchCV`` (2 x 2
  candidates and folds) under joblib's dask backend on a ``LocalCluster`` of 2
  single-threaded worker processes, with ``dask_dgd.LogisticRegression`` and with
  scikit-learn's own ``LogisticRegression`` (median of the repeats).

With ``--base REV`` the start-up commands also run on ``REV`` (a temporary git worktree),
alternating with the current tree.  Prints a Markdown table with medians and ratios.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SEARCH = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import joblib
import numpy as np
from distributed import Client, LocalCluster
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import GridSearchCV
import dask_dgd

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 10))
    y = (X @ rng.normal(size=10) + rng.logistic(size=2000) > 0).astype(int)
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c, \
            Client(c) as client, joblib.parallel_backend("dask"):
        for name, est, grid in (("dask_dgd", dask_dgd.LogisticRegression(), {"alpha": [1e-4, 1e-2]}),
                                ("sklearn", SkLogistic(), {"C": [1.0, 100.0]})):
            GridSearchCV(est, grid, cv=2).fit(X, y)  # warm: kernels compiled, workers imported
            times = []
            for _ in range(int(sys.argv[1])):
                t = time.perf_counter()
                GridSearchCV(est, grid, cv=2).fit(X, y)
                times.append(time.perf_counter() - t)
            out[name] = sorted(times)[len(times) // 2]
    print(json.dumps(out))
"""


def _time(cmd, cwd, env):
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, proc.returncode


def _startup_commands(folder):
    py = sys.executable
    train = [py, "-m", "dask_dgd", "train", "four.csv", "--model", "linear", "--target", "y", "--out", "m.npz",
             "--overwrite"]  # each repeat replaces the model of the one before
    return {
        "import sklearn (peer)": [py, "-c", "import sklearn.linear_model"],
        "import dask_dgd": [py, "-c", "import dask_dgd"],
        "dask-dgd --help": [py, "-m", "dask_dgd", "--help"],
        "usage error (--target nope)": train[:-6] + ["--target", "nope", "--out", "m.npz"],
        "bad --param (max_iter=-3)": train + ["--param", "max_iter=-3"],
        "train, 4-row CSV": train,
        "predict, 4-row CSV": [py, "-m", "dask_dgd", "predict", "m.npz", "four.csv", "--out", "p.csv",
                               "--overwrite"],
    }


def _worktree(base):
    path = tempfile.mkdtemp(prefix="dgd-first-use-")
    subprocess.run(["git", "worktree", "add", "--detach", path, base], check=True, capture_output=True)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_use", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", default=None, help="git revision to compare the start-up commands with")
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"current": root}
    if args.base:
        trees["base"] = _worktree(args.base)
    folder = tempfile.mkdtemp(prefix="dgd-first-use-data-")
    with open(os.path.join(folder, "four.csv"), "w") as f:
        f.write("a,b,y\n1,2,3\n2,1,4\n3,5,9\n4,4,8\n")
    times = {tree: {} for tree in trees}
    for _ in range(args.repeats):
        for tree, path in trees.items():  # alternating: the machine's load hits both alike
            env = {**os.environ, "PYTHONPATH": path}
            for name, cmd in _startup_commands(folder).items():
                seconds, code = _time(cmd, folder, env)
                times[tree].setdefault(name, []).append(seconds)
                times[tree].setdefault(f"{name} exit", []).append(code)
    print(f"### Start-up (median of {args.repeats} fresh processes, seconds)\n")
    header = "| command | current | exit |" + (" base | exit | current / base |" if args.base else "")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name in _startup_commands(folder):
        cur = statistics.median(times["current"][name])
        row = f"| {name} | {cur:.2f} | {times['current'][name + ' exit'][0]} |"
        if args.base:
            base = statistics.median(times["base"][name])
            row += f" {base:.2f} | {times['base'][name + ' exit'][0]} | {cur / base:.2f}x |"
        print(row)
    proc = subprocess.run([sys.executable, "-c", SEARCH, str(args.repeats)], cwd=folder,
                          env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        print(f"\nsearch inside Dask tasks failed:\n{proc.stderr[-2000:]}")
        return 1
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n### GridSearchCV under joblib's dask backend (2 worker processes x 1 thread; median of "
          f"{args.repeats}, seconds)\n")
    print("| estimator | seconds | / scikit-learn |\n|---|---|---|")
    for name in ("dask_dgd", "sklearn"):
        print(f"| {name} LogisticRegression | {out[name]:.2f} | {out[name] / out['sklearn']:.2f}x |")
    if args.base:
        subprocess.run(["git", "worktree", "remove", "--force", trees["base"]], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

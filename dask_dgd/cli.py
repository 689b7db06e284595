"""The ``dask-dgd`` command.

``dask-dgd demo`` starts a local Dask cluster, trains the three linear estimators on
synthetic data by distributed gradient descent and compares each with its
scikit-learn counterpart fitted in memory on the same data.  ``dask-dgd train`` fits a
model from a file and saves it, ``dask-dgd predict`` predicts with a saved model (see
:mod:`dask_dgd._cli_train`), ``dask-dgd bench`` runs the repository's benchmark suites.

Each subcommand is a :class:`Command`: a name, a help line, a function that adds its
arguments to an :mod:`argparse` sub-parser and a function that runs it and returns
the exit status.  New subcommands are added to ``COMMANDS``.

Exit status: 0 on success, 1 when the command fails while running (one line on
stderr), 2 for a bad command line (one line on stderr), 130 when interrupted.
"""

import argparse
import contextlib
import csv
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from . import __version__, _cli_demo, _cli_train

__all__ = ["COMMANDS", "CommandError", "Command", "UsageError", "build_parser", "main"]

PROG = "dask-dgd"


class CommandError(Exception):
    """A failure the user can fix; its message is printed as is, without a type name."""


class UsageError(CommandError):
    """A bad command line found only while running (e.g. an unknown --param): exit 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults; keep the line breaks of descriptions and epilogs."""


# ----------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


@dataclass(frozen=True)
class Command:
    """A subcommand: ``add_arguments(parser)`` declares it, ``run(args) -> int`` runs it."""

    name: str
    help: str
    description: str
    add_arguments: object
    run: object
    epilog: str = ""


def build_parser():
    """The argument parser of ``dask-dgd`` with every subcommand in ``COMMANDS``."""
    parser = _Parser(
        prog=PROG,
        description=(
            "Scikit-learn estimators trained by distributed gradient descent on Dask. "
            "Run 'dask-dgd demo' to see them train on a local cluster next to scikit-learn."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="on an error, show the full Python traceback instead of one line (for bug reports)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=_HelpFormatter,
        )
        command.add_arguments(p)
        p.set_defaults(run=command.run)
    return parser


def main(argv=None):
    """Run ``dask-dgd`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error already printed
        return exit_.code if isinstance(exit_.code, int) else 0
    if args.command is None:
        names = ", ".join(c.name for c in COMMANDS)
        print(f"{PROG}: error: choose a command: {names} (see '{PROG} --help')", file=sys.stderr)
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if args.traceback:
            raise
        message = " ".join(str(err).split()) or "(no message)"
        if not isinstance(err, CommandError):
            message = f"{type(err).__name__}: {message}"
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1


# ------------------------------------------------------------------------------- demo
@dataclass
class Result:
    """One row of the demo's comparison table."""

    task: str
    tool: str
    setting: str
    rows: int
    features: int
    wall_s: float
    n_iter: object
    objective: float
    metric: str
    score: float
    max_abs_diff: object = None


def _mean_loss(kind, y, z):
    """Mean loss of linear predictor ``z`` in dask_dgd's units (see the estimators)."""
    if kind == "logistic":
        return float(np.mean(np.logaddexp(0.0, z) - y * z))
    if kind == "linear":
        return float(np.mean(0.5 * (y - z) ** 2))
    return float(np.mean(np.exp(z) - y * z))  # poisson


def _objective(kind, model, X, y, alpha):
    """Mean loss plus ``alpha / 2 * ||coef||^2`` of a fitted model on in-memory data."""
    coef = np.ravel(model.coef_)
    z = X @ coef + float(np.ravel(model.intercept_)[0])
    return _mean_loss(kind, y, z) + 0.5 * alpha * float(coef @ coef)


def _params(model):
    return np.concatenate([np.ravel(model.coef_), np.ravel(model.intercept_)])


def _sklearn_iters(model):
    n = getattr(model, "n_iter_", None)
    return None if n is None else int(np.max(n))


def _compare(kind, client, data, ours, theirs, setting_ours, setting_theirs, alpha, metric):
    """Fit ``ours`` on the cluster and ``theirs`` in memory; two table rows and our history."""
    import dask

    X, y, X_test, y_test = data
    X_mem, y_mem, X_test_mem, y_test_mem = dask.compute(X, y, X_test, y_test)
    n, d = X.shape
    blocks = X.numblocks[0]
    workers = len(client.nthreads())
    print(
        f"\n[{kind}] dask_dgd.{type(ours).__name__} on {n:,} rows x {d} features in {blocks} "
        f"blocks over {workers} workers ({setting_ours})"
    )
    sys.stdout.flush()  # the progress bar goes to stderr
    t0 = time.perf_counter()
    ours.fit(X, y)
    t_ours = time.perf_counter() - t0
    print(
        f"  done: {ours.n_iter_} {ours.solver_} iterations, {len(ours.history_)} distributed "
        f"gradient steps, {t_ours:.2f} s"
    )
    print(f"[{kind}] scikit-learn {type(theirs).__name__} in memory ({setting_theirs})")
    t0 = time.perf_counter()
    theirs.fit(X_mem, y_mem)
    t_theirs = time.perf_counter() - t0
    print(f"  done: {t_theirs:.2f} s")
    diff = float(np.max(np.abs(_params(ours) - _params(theirs))))
    common = {"task": kind, "rows": n, "features": d, "metric": metric}
    rows = [
        Result(
            tool="dask_dgd",
            setting=setting_ours,
            wall_s=t_ours,
            n_iter=int(ours.n_iter_),
            objective=_objective(kind, ours, X_mem, y_mem, alpha),
            score=float(ours.score(X_test, y_test)),
            max_abs_diff=diff,
            **common,
        ),
        Result(
            tool="scikit-learn",
            setting=setting_theirs,
            wall_s=t_theirs,
            n_iter=_sklearn_iters(theirs),
            objective=_objective(kind, theirs, X_mem, y_mem, alpha),
            score=float(theirs.score(X_test_mem, y_test_mem)),
            **common,
        ),
    ]
    return rows, ours.history_


def _split(client, X, y, test_fraction=0.2):
    """Persisted train and holdout parts (the last rows are the holdout)."""
    from distributed import wait

    n_test = max(1, int(round(X.shape[0] * test_fraction)))
    n_train = X.shape[0] - n_test
    parts = client.persist([X[:n_train], y[:n_train], X[n_train:], y[n_train:]])
    wait(parts)
    return parts


def _chunk_rows(n_rows, n_workers):
    """Rows per block: about four blocks per worker."""
    return max(1, math.ceil(n_rows / (4 * n_workers)))


def _logistic_task(client, args, n_rows):
    from sklearn.linear_model import LogisticRegression as SkLogistic

    from . import LogisticRegression
    from .datasets import make_classification

    X, y = make_classification(
        n_rows, args.features, chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed
    )
    data = _split(client, X, y)
    n_train = data[0].shape[0]
    C = 1.0 / (args.alpha * n_train)
    ours = LogisticRegression(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = SkLogistic(C=C, tol=1e-10, max_iter=10_000)
    return _compare(
        "logistic", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"C=1/(alpha*n)={C:.4g}", args.alpha, "accuracy",
    )


def _linear_task(client, args, n_rows):
    from sklearn.linear_model import Ridge

    from . import LinearRegression
    from .datasets import make_regression

    X, y = make_regression(
        n_rows, args.features, noise=1.0, intercept=1.0,
        chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed + 1,
    )
    data = _split(client, X, y)
    ridge_alpha = args.alpha * data[0].shape[0]
    ours = LinearRegression(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = Ridge(alpha=ridge_alpha, tol=1e-10)
    return _compare(
        "linear", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"Ridge alpha=alpha*n={ridge_alpha:.4g}", args.alpha, "R2",
    )


def _poisson_task(client, args, n_rows):
    from sklearn.linear_model import PoissonRegressor as SkPoisson

    from . import PoissonRegressor
    from .datasets import make_poisson

    X, y = make_poisson(
        n_rows, args.features, chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed + 2
    )
    data = _split(client, X, y)
    ours = PoissonRegressor(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = SkPoisson(alpha=args.alpha, tol=1e-10, max_iter=10_000)
    return _compare(
        "poisson", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"alpha={args.alpha:g}", args.alpha, "D2",
    )


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


TABLE_NOTES = """\
rows: training rows (the last 20% of the generated rows are the holdout)
wall s: time of fit; dask_dgd's includes placing the data as shards on the workers
objective: mean loss + alpha/2 * ||coef||^2 on the training rows, same formula for both
  (recommend: each model's training objective; climate: area-weighted training MSE)
max|diff|: largest absolute difference of coef and intercept between the two tools
recommend: rank-4 factors vs the user+item bias model (no in-memory peer); RMSE on each
  user's held-out 20%; climate: one regression per grid cell, RMSE on the last 24 months"""


def format_table(results):
    """The comparison table as text."""
    header = (
        f"{'task':<9} {'tool':<12} {'rows':>9} {'wall s':>7} {'iters':>5} "
        f"{'objective':>16} {'holdout':>16} {'max|diff|':>9}  setting"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.task:<9} {r.tool:<12} {r.rows:>9,} {r.wall_s:>7.2f} {_fmt(r.n_iter, 'd'):>5} "
            f"{r.objective:>16.10f} {r.metric + ' ' + format(r.score, '.4f'):>16} "
            f"{_fmt(r.max_abs_diff, '.1e'):>9}  {r.setting}"
        )
    return "\n".join(lines)


def _write_outputs(out_dir, results, histories, reference):
    """summary.csv, history.csv and (with matplotlib) loss_curve.png in ``out_dir``."""
    summary = os.path.join(out_dir, "summary.csv")
    with open(summary, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        writer.writeheader()
        for r in results:
            writer.writerow(asdict(r))
    print(f"wrote {summary}")
    history = os.path.join(out_dir, "history.csv")
    import pandas as pd

    frames = [h.assign(task=task) for task, h in histories.items()]
    pd.concat(frames, ignore_index=True).to_csv(history, index=False)
    print(f"wrote {history}")
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: skipped loss_curve.png (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for task, h in histories.items():
        if task not in reference:
            continue  # no peer optimum to measure the gap to (the recommender)
        gap = np.maximum(h["loss"].to_numpy() - reference[task], 1e-16)
        ax.semilogy(h["step"], gap, marker=".", label=task)
    ax.set_xlabel("distributed gradient step")
    ax.set_ylabel("objective - scikit-learn's objective")
    ax.set_title("dask_dgd convergence (dask-dgd demo)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, "loss_curve.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


@contextlib.contextmanager
def _quiet_distributed():
    """Keep the cluster's INFO/WARNING chatter (e.g. at shutdown) off the terminal."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _has_module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _print_warnings(caught):
    seen = set()
    for w in caught:
        line = f"warning: {w.category.__name__}: {' '.join(str(w.message).split())}"
        if line not in seen:
            seen.add(line)
            print(line)


def run_demo(args):
    """``dask-dgd demo``: train on a LocalCluster, compare with scikit-learn."""
    from distributed import Client, LocalCluster

    if args.out is not None:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise CommandError(
                f"--out {args.out} is a file; pass a directory (it is created if missing)"
            )
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as err:
            raise CommandError(f"cannot create --out directory {args.out}: {err.strerror}") from err
    small = min(args.rows, args.small_rows)
    print(
        f"dask-dgd {__version__} demo: starting a LocalCluster with {args.workers} "
        "single-threaded worker processes"
    )
    t_start = time.perf_counter()
    with _quiet_distributed(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with LocalCluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster, Client(cluster) as client:
            elapsed = time.perf_counter() - t_start
            print(f"cluster ready at {cluster.scheduler_address} in {elapsed:.1f} s")
            if _has_module("bokeh"):
                print(f"dashboard: {cluster.dashboard_link}")
            results, histories, reference = [], {}, {}
            for task, fit_pair, n_rows in (
                ("logistic", _logistic_task, args.rows),
                ("linear", _linear_task, small),
                ("poisson", _poisson_task, small),
            ):
                (ours, theirs), histories[task] = fit_pair(client, args, n_rows)
                results += [ours, theirs]
                reference[task] = theirs.objective
            if not args.linear_only:
                rows, histories["recommend"] = _cli_demo.recommender_task(client, args, args.ratings)
                results += rows
                rows, _ = _cli_demo.climate_task(client, args, args.cells)
                results += rows
    print()
    _print_warnings(
        w for w in caught if not issubclass(w.category, (ResourceWarning, DeprecationWarning))
    )
    print(format_table(results))
    print(TABLE_NOTES)
    if args.out is not None:
        _write_outputs(args.out, results, histories, reference)
    print(f"total {time.perf_counter() - t_start:.1f} s", flush=True)
    return 0


def _demo_arguments(p):
    p.add_argument(
        "--rows", type=_int_at_least(100), default=200_000,
        help="rows of the logistic-regression data set (a dask array, 20%% held out)",
    )
    p.add_argument(
        "--features", type=_int_at_least(1), default=20, help="features of every data set"
    )
    p.add_argument(
        "--small-rows", type=_int_at_least(100), default=20_000,
        help="rows of the linear and Poisson data sets (at most --rows)",
    )
    p.add_argument(
        "--workers", type=_int_at_least(1), default=2,
        help="worker processes of the LocalCluster (one thread each)",
    )
    p.add_argument(
        "--alpha", type=_positive_float, default=1e-4,
        help="L2 penalty of every dask_dgd model; scikit-learn gets the matching C or alpha",
    )
    p.add_argument(
        "--tol", type=_positive_float, default=1e-6,
        help="dask_dgd's stopping tolerance on the largest gradient entry",
    )
    p.add_argument(
        "--max-iter", type=_int_at_least(1), default=200, help="dask_dgd's iteration limit"
    )
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed of the data sets")
    p.add_argument("--ratings", type=_int_at_least(100), default=20_000,
                   help="ratings of the recommender data (matrix factorization vs the bias model)")
    p.add_argument("--cells", type=_int_at_least(4), default=192,
                   help="grid cells of the climate data (pointwise regression vs scikit-learn per cell)")
    p.add_argument("--linear-only", action="store_true",
                   help="only the three linear models (skip the recommender and climate parts)")
    p.add_argument(
        "--out", metavar="DIR", default=None,
        help="also write summary.csv, history.csv and loss_curve.png (needs matplotlib) to DIR",
    )


# ------------------------------------------------------------------------------ bench
def _bench_arguments(p):
    p.add_argument("--suite", required=True, metavar="NAME",
                   help="a suite of the repository's benchmarks/ (linear, modes, straggler, skew, compression, "
                        "scaling, memory, recommender, climate) or 'all'")
    p.add_argument("--size", default="small", choices=["small", "full"],
                   help="small: a minute or two per suite; full: the reference figures")
    p.add_argument("--repeats", type=_int_at_least(1), default=None, help="override the suite's repeats")
    p.add_argument("--no-write", action="store_true",
                   help="print only; do not update benchmarks/RESULTS.md or benchmarks/out/")
    p.add_argument("--root", default=".", help="the repository clone that holds benchmarks/")


def _benchmarks(root):
    """The repository's ``benchmarks`` package (it is not installed with dask_dgd)."""
    import importlib

    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, "benchmarks", "__main__.py")):
        raise CommandError(
            f"no benchmarks/ folder in {root}: the benchmark suites live in the repository; run 'dask-dgd bench' "
            "from a clone's root (or pass --root) after pip install '.[bench]'"
        )
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module("benchmarks.__main__"), importlib.import_module("benchmarks.suites")


def run_bench(args):
    runner, suites = _benchmarks(args.root)
    if args.suite != "all" and args.suite not in suites.SUITES:
        names = ", ".join(suites.SUITES)
        print(f"{PROG} bench: error: unknown suite {args.suite!r}; choose one of {names} or all", file=sys.stderr)
        return 2
    argv = ["run", "--suite", args.suite, "--size", args.size]
    if args.repeats is not None:
        argv += ["--repeats", str(args.repeats)]
    if args.no_write:
        argv += ["--no-write"]
    runner.main(argv)
    return 0


COMMANDS = [
    Command(
        name="demo",
        help="train on a local Dask cluster and compare with scikit-learn",
        description=(
            "Start a LocalCluster, generate synthetic data as dask arrays, train\n"
            "dask_dgd's LogisticRegression, LinearRegression and PoissonRegressor on it by\n"
            "distributed gradient descent (with a progress bar), fit scikit-learn's\n"
            "LogisticRegression, Ridge and PoissonRegressor in memory on the same rows with\n"
            "the matching penalty, and print wall time, iterations, objective, holdout score\n"
            "and the largest coefficient difference of each pair."
        ),
        add_arguments=_demo_arguments,
        run=run_demo,
        epilog=(
            "examples:\n"
            "  dask-dgd demo\n"
            "  dask-dgd demo --rows 1000000 --workers 4 --out demo-results\n"
            "  dask-dgd demo --rows 5000 --features 5      (small and quick)"
        ),
    ),
    Command(
        name="train",
        help="train a model from a Parquet, CSV, NetCDF or Zarr file and save it",
        description=(
            "Read the data lazily (dask.dataframe for tables, xarray for grids), train the\n"
            "chosen model on a Dask cluster (--scheduler, or a LocalCluster started for the\n"
            "command), print a summary and save the fitted model in dask_dgd's safe format\n"
            "(NumPy .npz + JSON with checksums; load it with dask_dgd.load or 'dask-dgd predict')."
        ),
        add_arguments=_cli_train.train_arguments,
        run=_cli_train.run_train,
        epilog=(
            "examples:\n"
            "  dask-dgd train sales.parquet --model poisson --target units --out model.npz\n"
            "  dask-dgd train data.csv --model logistic --target label --features a,b,c \\\n"
            "      --param solver=sgd --param batch_size=1024 --param optimizer=adam --out m.npz\n"
            "  dask-dgd train ratings.parquet --model mf --target rating --param n_components=16 --out mf.npz\n"
            "  dask-dgd train tas.nc --model climate-pointwise --target tas --features psl --out c.npz\n"
            "  dask-dgd train big.parquet --model linear --target y --scheduler tcp://10.0.0.5:8786 --out m.npz"
        ),
    ),
    Command(
        name="predict",
        help="predict with a saved model on a Parquet, CSV, NetCDF or Zarr file",
        description=(
            "Load a model saved by 'dask-dgd train' (or est.save), read the data, predict on\n"
            "the cluster and write the predictions: a table with a 'prediction' column (and the\n"
            "--keep columns) for tabular models, the predicted variable on the grid for climate\n"
            "models."
        ),
        add_arguments=_cli_train.predict_arguments,
        run=_cli_train.run_predict,
        epilog=(
            "examples:\n"
            "  dask-dgd predict model.npz new.parquet --out predictions.parquet --keep id\n"
            "  dask-dgd predict c.npz tas_2100.nc --out tas_pred.nc"
        ),
    ),
    Command(
        name="bench",
        help="run the benchmark suites against scikit-learn, dask-ml, Spark and the other peers",
        description=(
            "Run a suite of the repository's benchmarks (python -m benchmarks run ...): each\n"
            "compares dask_dgd with its peers side by side in one run, prints the tables with\n"
            "medians and ratios, and (unless --no-write) updates benchmarks/RESULTS.md and\n"
            "benchmarks/out/. Needs a clone of the repository and pip install '.[bench]';\n"
            "peers that cannot run here (e.g. Spark without Java) are reported as unavailable."
        ),
        add_arguments=_bench_arguments,
        run=run_bench,
        epilog=(
            "examples:\n"
            "  dask-dgd bench --suite linear --size small --no-write\n"
            "  dask-dgd bench --suite all --size full"
        ),
    ),
]

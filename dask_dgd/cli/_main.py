"""The parser of ``dask-dgd``, its subcommands (``COMMANDS``) and :func:`main`.

Each subcommand is a :class:`~dask_dgd.cli.Command`: a name, a help line, a function that
adds its arguments to an :mod:`argparse` sub-parser and a function that runs it and
returns the exit status.  New subcommands are added to ``COMMANDS``.  :func:`main` and
:func:`build_parser` take the list of commands to use; :mod:`dask_dgd.cli` passes its own
``COMMANDS`` at each call.
"""

import argparse
import sys

from .. import __version__
from . import _bench, _demo, _train
from ._common import PROG, Command, CommandError, UsageError

__all__ = ["COMMANDS", "build_parser", "main"]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults; keep the line breaks of descriptions and epilogs."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(commands=None):
    """The argument parser of ``dask-dgd`` with every subcommand in ``commands`` (default ``COMMANDS``)."""
    commands = COMMANDS if commands is None else commands
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
    for command in commands:
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


def main(argv=None, commands=None):
    """Run ``dask-dgd`` with ``argv`` (default: ``sys.argv[1:]``) and ``commands`` (default
    ``COMMANDS``); return the exit status."""
    commands = COMMANDS if commands is None else commands
    parser = build_parser(commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error already printed
        return exit_.code if isinstance(exit_.code, int) else 0
    if args.command is None:
        names = ", ".join(c.name for c in commands)
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
        add_arguments=_demo.demo_arguments,
        run=_demo.run_demo,
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
        add_arguments=_train.train_arguments,
        run=_train.run_train,
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
        add_arguments=_train.predict_arguments,
        run=_train.run_predict,
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
        add_arguments=_bench.bench_arguments,
        run=_bench.run_bench,
        epilog=(
            "examples:\n"
            "  dask-dgd bench --suite linear --size small --no-write\n"
            "  dask-dgd bench --suite all --size full"
        ),
    ),
]

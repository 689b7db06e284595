"""The parser of ``dask-dgd``, its subcommands (``COMMANDS``) and :func:`main`.

Each subcommand is a :class:`~dask_dgd.cli.Command`: a name, a help line, a function that
adds its arguments to an :mod:`argparse` sub-parser and a function that runs it and
returns the exit status.  New subcommands are added to ``COMMANDS``.  :func:`main` and
:func:`build_parser` take the list of commands to use; :mod:`dask_dgd.cli` passes its own
``COMMANDS`` at each call.

Parsing imports nothing heavy: :func:`main` declares the arguments of the chosen
subcommand only, and the demo's module (NumPy) is imported only when ``demo`` is chosen
(:class:`_Deferred`); dask, distributed, scikit-learn and the estimators are imported by a
subcommand's ``run``.  ``dask-dgd --help``, ``dask-dgd train --help`` and every usage error
of ``train``, ``predict`` and ``bench`` need :mod:`argparse` alone.

Exit status: 0 on success, 1 when the data cannot be used or the run fails, 2 for a usage
error, 130 when interrupted; each error is one line on stderr (see ``EXIT_STATUS``).
"""

import argparse
import importlib
import sys
from dataclasses import dataclass

from .. import __version__
from . import _bench, _models, _train
from ._common import EXIT_STATUS, PROG, Command, CommandError, UsageError

__all__ = ["COMMANDS", "build_parser", "main"]


#: The modules a :class:`_Deferred` may import (relative to this package).
_DEFERRED_MODULES = frozenset({"._demo"})


@dataclass(frozen=True)
class _Deferred:
    """The function ``name`` of the module ``module`` (relative to this package), imported
    at its first call, so that building the parser does not import that module.

    Only a public function defined in one of :data:`_DEFERRED_MODULES` is ever imported
    and called, checked at the call too (an instance made without ``__init__`` skips
    ``__post_init__``): it can never be made to import and call an arbitrary function."""

    module: str
    name: str

    def __post_init__(self):
        self._check_names()  # without importing the module: that waits for the call

    def _check_names(self):
        if (self.module not in _DEFERRED_MODULES or not isinstance(self.name, str) or not self.name.isidentifier()
                or self.name.startswith("_")):
            raise ValueError(
                f"_Deferred({self.module!r}, {self.name!r}): only public functions of "
                f"{sorted(_DEFERRED_MODULES)} (in {__package__}) are deferred"
            )

    def _target(self):
        self._check_names()
        module = importlib.import_module(self.module, __package__)
        target = getattr(module, self.name, None)
        if not callable(target) or getattr(target, "__module__", None) != module.__name__:
            raise ValueError(f"_Deferred({self.module!r}, {self.name!r}): {module.__name__} defines no such function")
        return target

    def __call__(self, *args):
        return self._target()(*args)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep the line breaks of descriptions and epilogs; show an option's default only when
    it has one (not for required options, flags, or options whose default is None)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" not in text and _has_default(action):
            text += " (default: %(default)s)"
        return text


def _has_default(action):
    return (bool(action.option_strings) and not action.required and action.nargs != 0
            and action.default is not None and action.default is not argparse.SUPPRESS
            and action.default != [])


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(commands=None, declare=None):
    """The argument parser of ``dask-dgd`` with every subcommand in ``commands`` (default
    ``COMMANDS``); ``declare``: the names of the subcommands whose arguments are declared
    (default: all of them; the others are listed but take no arguments)."""
    commands = COMMANDS if commands is None else commands
    parser = _Parser(
        prog=PROG,
        description=(
            "Scikit-learn estimators trained by distributed gradient descent on Dask.\n"
            "Run 'dask-dgd demo' to see them train on a local cluster next to scikit-learn."
        ),
        epilog=EXIT_STATUS,
        formatter_class=_HelpFormatter,
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
            epilog="\n\n".join(filter(None, [command.epilog, EXIT_STATUS])),
            formatter_class=_HelpFormatter,
        )
        if declare is None or command.name in declare:
            command.add_arguments(p)
        p.set_defaults(run=command.run)
    return parser


def _chosen(argv, commands):
    """The name of the subcommand in ``argv``: its first word that is not an option (the
    options of ``dask-dgd`` itself take no value); empty when there is none."""
    names = {c.name for c in commands}
    for word in argv:
        if word != "--" and not word.startswith("-"):
            return {word} & names
    return set()


def main(argv=None, commands=None):
    """Run ``dask-dgd`` with ``argv`` (default: ``sys.argv[1:]``) and ``commands`` (default
    ``COMMANDS``); return the exit status."""
    commands = COMMANDS if commands is None else commands
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(commands, declare=_chosen(argv, commands))
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
        print(f"{PROG} {args.command}: error: {_message(err, args.command)}", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1


def _message(err, command):
    """``err`` as one line: a command's own error as is (a usage error with the pointer to
    ``--help`` that argparse's errors end with), any other with its type name."""
    message = " ".join(str(err).split()) or "(no message)"
    if isinstance(err, UsageError):
        return f"{message} (see '{PROG} {command} --help')"
    if isinstance(err, CommandError):
        return message
    return f"{type(err).__name__}: {message}"


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
        add_arguments=_Deferred("._demo", "demo_arguments"),
        run=_Deferred("._demo", "run_demo"),
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
            "Check the columns named on the command line against the file's header or schema,\n"
            "read the data (tables up to 32 MiB into memory with pandas, larger ones lazily with\n"
            "dask.dataframe; grids with xarray), train the chosen model, print a summary and\n"
            "save the fitted model in dask_dgd's safe format (NumPy .npz + JSON with checksums;\n"
            "load it with dask_dgd.load or 'dask-dgd predict').\n\n"
            "Where it trains: on the cluster of --scheduler; on a LocalCluster of --workers\n"
            "processes started for the command; otherwise small input in this process and\n"
            "larger input on dask_dgd's embedded cluster (no cluster is started for small input)."
        ),
        add_arguments=_train.train_arguments,
        run=_train.run_train,
        epilog=(
            _models.models_help() + "\n\n"
            "examples:\n"
            "  dask-dgd train sales.parquet --model poisson --target units --out model.npz\n"
            "  dask-dgd train data.csv --model logistic --target label --features a,b,c \\\n"
            "      --param solver=sgd --param batch_size=1024 --param optimizer=adam --out m.npz\n"
            "  dask-dgd train claims.csv --model gamma-cv --target cost --table coef.csv --out m.npz\n"
            "  dask-dgd train ratings.parquet --model mf --target rating --param n_components=16 --out mf.npz\n"
            "  dask-dgd train tas.nc --model climate-pointwise --target tas --features psl --out c.npz\n"
            "  dask-dgd train big.parquet --model linear --target y --scheduler tcp://10.0.0.5:8786 --out m.npz"
        ),
    ),
    Command(
        name="predict",
        help="predict with a saved model on a Parquet, CSV, NetCDF or Zarr file",
        description=(
            "Load a model saved by 'dask-dgd train' (or est.save), check the file's columns\n"
            "against the model's features and --keep, read the data, predict (in this process,\n"
            "or on the cluster of --scheduler or --workers) and write the predictions: a table\n"
            "with a 'prediction' column (and the --keep columns) for tabular models, the\n"
            "predicted variable on the grid for climate models."
        ),
        add_arguments=_train.predict_arguments,
        run=_train.run_predict,
        epilog=(
            "examples:\n"
            "  dask-dgd predict model.npz new.parquet --out predictions.parquet --keep id\n"
            "  dask-dgd predict clf.npz new.csv --out p.csv --proba      (classifiers: probabilities too)\n"
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

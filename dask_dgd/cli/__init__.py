"""The ``dask-dgd`` command.

``dask-dgd demo`` starts a local Dask cluster, trains the three linear estimators on
synthetic data by distributed gradient descent and compares each with its
scikit-learn counterpart fitted in memory on the same data (then a recommender and a
climate model).  ``dask-dgd train`` fits a model from a file and saves it,
``dask-dgd predict`` predicts with a saved model, ``dask-dgd bench`` runs the
repository's benchmark suites (in a child process: ``benchmarks/`` is not installed).

Each subcommand is a :class:`Command`: a name, a help line, a function that adds its
arguments to an :mod:`argparse` sub-parser and a function that runs it and returns
the exit status.  New subcommands are added to ``COMMANDS``.

Exit status: 0 on success; 1 when the data cannot be used (file content: no rows, a bad
value, a model file that cannot be read) or the run fails; 2 for a usage error (a bad
option or value, an unknown or bad --param, a column named on the command line that the
file lacks); 130 when interrupted.  Each error is one line on stderr.  The same text
ends every ``--help`` (``EXIT_STATUS``).

Importing this package and parsing a command line import nothing heavy (no dask,
distributed, NumPy, pandas or scikit-learn): ``dask-dgd --help``, ``dask-dgd train --help``
and the usage errors of ``train``, ``predict`` and ``bench`` need :mod:`argparse` alone.
The demo's module is imported when first used, as are its names here.

The modules below this one import only downward: ``_main`` (parser, :func:`main`,
``COMMANDS``) uses ``_demo`` (on first use), ``_train`` and ``_bench``; ``_train`` uses
``_models`` (the table of ``--model`` names and the quick ``--param`` check, with its
generated ``_param_table``), and all of them use ``_common`` (errors, :class:`Result`,
argument types, helpers).
"""

import importlib

from . import _main

# The other names of the former module dask_dgd/cli.py that callers and tests use.
from ._bench import run_bench  # noqa: F401
from ._common import (  # noqa: F401
    EXIT_STATUS,
    PROG,
    Command,
    CommandError,
    Result,
    UsageError,
    _has_module,
    _quiet_distributed,
)
from ._main import COMMANDS

__all__ = ["COMMANDS", "CommandError", "Command", "UsageError", "build_parser", "main"]

#: Names of the demo's module (which imports NumPy), imported on first use.
_DEMO_NAMES = ("TABLE_NOTES", "_write_outputs", "format_table", "run_demo")


def __getattr__(name):
    if name in _DEMO_NAMES:
        value = getattr(importlib.import_module("._demo", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser():
    """The argument parser of ``dask-dgd`` with every subcommand in ``COMMANDS``."""
    return _main.build_parser(COMMANDS)


def main(argv=None):
    """Run ``dask-dgd`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    return _main.main(argv, COMMANDS)

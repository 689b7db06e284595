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

Exit status: 0 on success, 1 when the command fails while running (one line on
stderr), 2 for a bad command line (one line on stderr), 130 when interrupted.

The modules below this one import only downward: ``_main`` (parser, :func:`main`,
``COMMANDS``) uses ``_demo``, ``_train`` and ``_bench``, and all of them use ``_common``
(errors, :class:`Result`, argument types, helpers).
"""

from . import _main

# The other names of the former module dask_dgd/cli.py that callers and tests use.
from ._bench import run_bench  # noqa: F401
from ._common import PROG, Command, CommandError, Result, UsageError, _has_module, _quiet_distributed  # noqa: F401
from ._demo import TABLE_NOTES, _write_outputs, format_table, run_demo  # noqa: F401
from ._main import COMMANDS

__all__ = ["COMMANDS", "CommandError", "Command", "UsageError", "build_parser", "main"]


def build_parser():
    """The argument parser of ``dask-dgd`` with every subcommand in ``COMMANDS``."""
    return _main.build_parser(COMMANDS)


def main(argv=None):
    """Run ``dask-dgd`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    return _main.main(argv, COMMANDS)

"""What every part of the ``dask-dgd`` command shares: the errors, a subcommand's
description (:class:`Command`), a row of the demo's table (:class:`Result`), the
argument types and small helpers.  It imports nothing else of :mod:`dask_dgd.cli`, and
nothing heavy: the parser of every subcommand is built from it and :mod:`argparse` alone.
"""

import argparse
import contextlib
import logging
import math
from dataclasses import dataclass

__all__ = ["EXIT_STATUS", "PROG", "Command", "CommandError", "Result", "UsageError"]

PROG = "dask-dgd"

#: The exit statuses of every subcommand, shown at the end of each ``--help``.
EXIT_STATUS = """\
exit status:
  0    success
  1    the data cannot be used (file content, e.g. a file without rows or a model file
       that cannot be read) or the run failed (e.g. the scheduler cannot be reached)
  2    usage error: a bad option or option value, an unknown --param or a bad --param
       value, a column named on the command line that the file does not have, an --out
       that is an input file, cannot be written, or exists (without --overwrite)
  130  interrupted
  Each error is one line on stderr: 'dask-dgd COMMAND: error: ...' (--traceback: the
  full Python traceback instead)."""


class CommandError(Exception):
    """A failure the user can fix (exit status 1); its message is printed as is, without a type name."""


class UsageError(CommandError):
    """A bad command line found only while running (e.g. an unknown --param): exit status 2."""


@dataclass(frozen=True)
class Command:
    """A subcommand: ``add_arguments(parser)`` declares it, ``run(args) -> int`` runs it."""

    name: str
    help: str
    description: str
    add_arguments: object
    run: object
    epilog: str = ""


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


# ----------------------------------------------------------------------- argument types
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


# ------------------------------------------------------------------------------ helpers
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

"""Errors raised by dask_dgd.

The hierarchy::

    DGDError                         base of every dask_dgd error
    ├── InputError (ValueError)      bad data: NaN/inf, shapes, chunking, labels
    │   └── ChunkingError            a dask collection chunked in a way training cannot use
    ├── ParameterError (ValueError)  a bad constructor parameter, found at fit time
    ├── CheckpointError (ValueError) a checkpoint or saved model that cannot be trusted
    ├── BlockError (RuntimeError)    a failure inside a worker task, with the block named
    ├── DivergenceError (FloatingPointError)  the objective became NaN/inf or exploded
    ├── ClusterError (RuntimeError)  the Dask cluster cannot run the fit
    └── ConcurrentFitError (RuntimeError)  one estimator object fitted by two threads at once

    DGDWarning (UserWarning)         base of every dask_dgd warning
    ├── BiasOnlyWarning              a recommender ranks by its biases alone: its factors are zero or too small
    ├── ChunkSizeWarning             a fit's dask blocks are far below a useful size: rechunk
    ├── DuplicateRatingsWarning      a recommender merged ratings of a (user, item) pair given twice
    ├── RatingScaleWarning           ratings far outside the bulk of the others, under rating_scale="auto"
    └── UnusedRatingsWarning         an implicit recommender does not use a column of ratings it was given

``NotFittedError`` and ``ConvergenceWarning`` are scikit-learn's own, re-exported so that
code which already catches them keeps working.  They are imported on first use: the
library's task code on the workers imports this module, and importing scikit-learn costs
a fresh worker process (or one a nanny restarts after a loss) about 2 s of CPU.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sklearn.exceptions import ConvergenceWarning, NotFittedError

__all__ = [
    "BiasOnlyWarning",
    "BlockError",
    "CheckpointError",
    "ChunkSizeWarning",
    "ChunkingError",
    "ClusterError",
    "ConcurrentFitError",
    "ConvergenceWarning",
    "DGDError",
    "DGDWarning",
    "DivergenceError",
    "DuplicateRatingsWarning",
    "InputError",
    "NotFittedError",
    "ParameterError",
    "RatingScaleWarning",
    "UnusedRatingsWarning",
]


class DGDError(Exception):
    """Base class of every error raised by dask_dgd."""


class InputError(DGDError, ValueError):
    """The training or prediction data cannot be used as given."""


class ChunkingError(InputError):
    """A dask collection is chunked in a way that training cannot use."""


class ParameterError(DGDError, ValueError):
    """An estimator or optimizer parameter has a bad value or type."""


class CheckpointError(DGDError, ValueError):
    """A checkpoint or saved model is missing, corrupted, tampered with, or for other data."""


class BlockError(DGDError, RuntimeError):
    """A task failed on one block of the data; the message names the block."""


class DivergenceError(DGDError, FloatingPointError):
    """The objective became NaN or infinite, or grew without bound."""


class ClusterError(DGDError, RuntimeError):
    """The Dask cluster cannot run the fit (no workers, lost every worker)."""


class ConcurrentFitError(DGDError, RuntimeError):
    """``fit`` or ``partial_fit`` was called on an estimator object that another thread is fitting."""


class DGDWarning(UserWarning):
    """Base class of every warning issued by dask_dgd (``ConvergenceWarning`` is scikit-learn's)."""


class BiasOnlyWarning(DGDWarning):
    """A recommender's factors are all exactly zero, or too small to matter: rankings come from its biases alone."""


class ChunkSizeWarning(DGDWarning):
    """A fit's data are in many dask blocks far below a useful size: rechunk them (the fix is named)."""


class DuplicateRatingsWarning(DGDWarning):
    """A recommender merged the ratings of (user, item) pairs given on several rows (by its ``duplicates``)."""


class UnusedRatingsWarning(DGDWarning):
    """An implicit recommender was given ratings or strengths that it does not use (the fix is named)."""


class RatingScaleWarning(DGDWarning):
    """Some ratings lie far outside the bulk of the others, with ``rating_scale="auto"``: declare the scale."""


def __getattr__(name: str) -> type:
    """scikit-learn's ``ConvergenceWarning`` and ``NotFittedError``, imported on first use."""
    if name in ("ConvergenceWarning", "NotFittedError"):
        import sklearn.exceptions

        return getattr(sklearn.exceptions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

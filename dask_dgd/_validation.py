"""Declarative parameter checks: each estimator lists ``_parameter_constraints`` once.

A small version of scikit-learn's idea (its ``_param_validation`` is private): a
constraint is a type, ``None``, an :class:`Interval` or a :class:`Options`; a parameter
is valid if it satisfies any of its constraints.
"""

import functools
import numbers
import os
import sys
import threading
from dataclasses import dataclass

from dask.base import normalize_token

from .exceptions import ConcurrentFitError, ParameterError

__all__ = ["Interval", "Options", "callbacks_like", "client_is_a_client", "describe", "first_order_like",
           "one_fit_at_a_time", "validate_params"]


@dataclass(frozen=True)
class Interval:
    """Real or integral numbers in a range; ``closed`` is "both", "left", "right", "neither"."""

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"

    def __call__(self, value):
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        lo_ok = self.low is None or (
            value >= self.low if self.closed in ("both", "left") else value > self.low
        )
        hi_ok = self.high is None or (
            value <= self.high if self.closed in ("both", "right") else value < self.high
        )
        return lo_ok and hi_ok

    def __str__(self):
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        lo = "-inf" if self.low is None else self.low
        hi = "inf" if self.high is None else self.high
        what = "an int" if self.kind is numbers.Integral else "a float"
        return f"{what} in {left}{lo}, {hi}{right}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, usually)."""

    values: frozenset

    def __init__(self, *values):
        object.__setattr__(self, "values", frozenset(values))

    def __call__(self, value):
        return isinstance(value, str) and value in self.values

    def __str__(self):
        return "one of " + ", ".join(repr(v) for v in sorted(self.values))


def _check(constraint, value):
    if constraint is None:
        return value is None
    if isinstance(constraint, type):
        return isinstance(value, constraint) and not (
            constraint in (numbers.Real, numbers.Integral) and isinstance(value, bool)
        )
    return constraint(value)


def describe(constraint):
    if constraint is None:
        return "None"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    if callable(constraint) and not isinstance(constraint, (Interval, Options)):
        return getattr(constraint, "__doc__", None) or constraint.__name__
    return str(constraint)


def validate_params(estimator):
    """Raise :class:`ParameterError` for the first parameter that fits no constraint."""
    params = estimator.get_params(deep=False)
    for name, constraints in estimator._parameter_constraints.items():
        value = params[name]
        if not any(_check(c, value) for c in constraints):
            allowed = " or ".join(describe(c) for c in constraints)
            raise ParameterError(
                f"The {name!r} parameter of {type(estimator).__name__} must be {allowed}; "
                f"got {value!r}"
            )


def client_is_a_client(value):
    """a distributed.Client"""
    from distributed import Client

    return isinstance(value, Client)


#: The estimator objects being fitted now: ``id(estimator)`` -> [thread id, depth, method name].
_FITTING = {}
_FITTING_LOCK = threading.Lock()


def user_stacklevel():
    """The ``stacklevel`` for :func:`warnings.warn` that names the first frame outside
    dask_dgd, the user's call, however many of the library's frames lie between
    (helpers, the :func:`one_fit_at_a_time` guard): counted from the function that calls
    ``warnings.warn`` (level 1), as pandas' ``find_stack_level`` does."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def one_fit_at_a_time(method):
    """Decorate an estimator's ``fit`` or ``partial_fit``: a call on an object that
    another thread is fitting raises :class:`~dask_dgd.exceptions.ConcurrentFitError` at
    once, naming the fix (a copy per thread, ``sklearn.base.clone``).

    A fit sets the object's attributes as it goes (``n_features_in_``, the classes, the
    optimizer state, then ``coef_``), so two fits of one object at once would mix them
    and end with a model of neither (issue 44: a wrong feature count).  Calls within one
    thread nest freely (a subclass's ``fit`` calling its base's, ``partial_fit`` calling
    ``fit``).  Nothing is stored on the estimator: it pickles and clones as before.
    """
    name = method.__name__

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        key, me = id(self), threading.get_ident()
        with _FITTING_LOCK:
            entry = _FITTING.setdefault(key, [me, 0, name])
            if entry[0] != me:
                cls = type(self).__name__
                raise ConcurrentFitError(
                    f"{cls}.{name} was called while another thread is fitting this {cls} object (in its "
                    f"{entry[2]}); one estimator object trains one model at a time: give each thread its own "
                    "copy, sklearn.base.clone(est), or wait for the other fit to end"
                )
            entry[1] += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            with _FITTING_LOCK:
                entry[1] -= 1
                if entry[1] == 0:
                    del _FITTING[key]

    guarded.one_fit_at_a_time = True
    return guarded


class ClientParamMixin:
    """For estimators with a ``client`` parameter: ``clone`` shares the live Client
    instead of deep-copying it (it holds sockets; GridSearchCV clones for every fit), and
    pickling drops it (a fitted model pickles and predicts without its cluster)."""

    def __sklearn_clone__(self):
        from sklearn.base import clone

        params = self.get_params(deep=False)
        client = params.pop("client", None)
        return type(self)(**{name: clone(value, safe=False) for name, value in params.items()}, client=client)

    def __getstate__(self):
        state = dict(super().__getstate__())  # a copy: the live estimator keeps its client
        state["client"] = None
        return state

    def save(self, path):
        """Save this estimator to ``path`` in dask_dgd's safe format (no pickle).

        A NumPy ``.npz`` file with JSON metadata and SHA-256 checksums, written
        atomically; ``client`` and ``callbacks`` are not saved.  See
        :func:`dask_dgd.persistence.save`.

        Returns
        -------
        str
            The path written.
        """
        from .persistence import save

        return save(self, path)

    @classmethod
    def load(cls, path):
        """The estimator of this class saved at ``path`` (see :func:`dask_dgd.load`).

        Raises
        ------
        CheckpointError
            If the file is corrupted, tampered with, or holds another estimator class.
        """
        from .persistence import load

        return load(path, expected=cls)


def callbacks_like(value):
    """a list of callables (each called with every step record)"""
    return isinstance(value, (list, tuple)) and all(callable(cb) for cb in value)


def first_order_like(value):
    """a first-order optimizer object from dask_dgd.optim"""
    from .optim import FirstOrderOptimizer

    return isinstance(value, FirstOrderOptimizer)


@normalize_token.register(ClientParamMixin)
def _tokenize_estimator(est):
    """dask's token of an estimator with a ``client``: its type and pickled state
    (parameters and fitted attributes, the client left out).  dask-ml registers a
    tokenizer for every scikit-learn estimator that hashes ``get_params()``, client
    included, which cannot be hashed: once dask-ml was imported, a bound method of such an
    estimator given to ``map_partitions`` (a recommender's ``predict``) failed to
    tokenize.  This registration comes first in the estimators' method resolution order."""
    return type(est).__module__, type(est).__qualname__, normalize_token(est.__getstate__())

"""The estimators' parameters, each written once.

:data:`PARAMS` holds every parameter that more than one estimator takes: its default,
whether a resumed fit must share its value (``resume``: the parameters that shape the
trajectory go into the checkpoint's fingerprint; a time limit, the monitoring, the
cluster or where checkpoints go do not), and, for the training parameters (the modes,
time limit, divergence guard, checkpoints, compression, reduction, monitoring), their
constraints, the same for every family (:data:`TRAINING_CONSTRAINTS`).

An estimator declares its signature with :func:`signature` (names in order, each with
the table's default or, written ``(name, default)``, its own) and gets its ``__init__``
from :func:`init_from`: an ordinary function of explicit keyword arguments (made as
:mod:`dataclasses` makes its ``__init__``) that stores each argument under its own
name and does nothing else, as scikit-learn's estimator contract asks
(``get_params``, ``set_params`` and ``clone`` read its signature).  A parameter is then
added, renamed or given another default in one place.
"""

import dataclasses
import numbers
import os

from ._validation import Interval, Options, callbacks_like, client_is_a_client, first_order_like
from .compression import Compressor

__all__ = ["MODES", "PARAMS", "RUNTIME", "TRAINING_CONSTRAINTS", "Param", "fingerprint_params", "init_from",
           "signature"]


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: its default, its constraints (None: each estimator's own, see
    ``_parameter_constraints``) and whether a resumed fit must share its value."""

    default: object
    constraints: tuple = None
    resume: bool = True


def _n(low, closed="left"):
    return Interval(numbers.Integral, low, None, closed)


PARAMS = {
    # the model and the solver: constraints are the family's own
    "alpha": Param(0.0),
    "l1_ratio": Param(0.0),
    "fit_intercept": Param(True),
    "class_weight": Param(None),
    "solver": Param("auto"),
    "optimizer": Param(None),
    "learning_rate": Param("auto"),
    "batch_size": Param(None),
    "early_stopping": Param(False),
    "validation_fraction": Param(0.1),
    "n_iter_no_change": Param(5),
    "scoring": Param(None),
    "rebalance": Param("auto", resume=False),
    "param_sharding": Param("auto"),
    "sparse_coef": Param(False, resume=False),
    "random_state": Param(None),
    "warm_start": Param(False, resume=False),
    # serving only (predictions clipped to it): the training does not depend on it
    "rating_scale": Param("auto", resume=False),
    # the training parameters every family shares
    "max_iter": Param(100, (_n(1),), resume=False),
    "tol": Param(1e-4, (Interval(numbers.Real, 0, None, "left"),), resume=False),
    "mode": Param("sync", (Options("sync", "local", "async"),)),
    "local_steps": Param(8, (_n(1),)),
    "outer_optimizer": Param(None, (None, first_order_like)),
    "max_staleness": Param(None, (None, _n(0))),
    "staleness_scaling": Param(False, (bool,)),
    "max_time": Param(None, (None, Interval(numbers.Real, 0, None, "neither")), resume=False),
    "on_divergence": Param("auto", (Options("auto", "backoff", "raise"),)),
    "checkpoint": Param(None, (None, str, os.PathLike), resume=False),
    "checkpoint_every": Param(10, (_n(1),), resume=False),
    "compression": Param(None, (None, str, Compressor)),
    "split_every": Param(8, (_n(2), Options("auto")), resume=False),
    "verbose": Param(0, (_n(0), bool), resume=False),
    "callbacks": Param(None, (None, callbacks_like), resume=False),
    "client": Param(None, (None, client_is_a_client), resume=False),
}

#: The training parameters of every gradient-trained estimator, in signature order:
#: the modes, the time limit, the divergence guard and the checkpoints ...
MODES = ("mode", "local_steps", "outer_optimizer", "max_staleness", "staleness_scaling", "max_time", "on_divergence",
         "checkpoint", "checkpoint_every")
#: ... and, last, compression, the reduction, the seed, monitoring and the cluster.
RUNTIME = ("compression", "split_every", "random_state", "verbose", "callbacks", "client")

#: Constraints of the training parameters every estimator family shares.
TRAINING_CONSTRAINTS = {name: list(p.constraints) for name, p in PARAMS.items() if p.constraints is not None}


def signature(*entries):
    """``((name, default), ...)`` of an estimator's ``__init__``: each entry a name of
    :data:`PARAMS` (its default) or ``(name, default)`` (a parameter of its own, or the
    family's default of a shared one)."""
    out = []
    for entry in entries:
        if isinstance(entry, str):
            if entry not in PARAMS:
                raise KeyError(f"{entry!r} is not in PARAMS: give it as ({entry!r}, default)")
            entry = (entry, PARAMS[entry].default)
        out.append(tuple(entry))
    names = [name for name, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"a parameter is listed twice in {names}")
    return tuple(out)


def init_from(params, positional=0):
    """A class decorator: the class gets an ``__init__`` taking ``params`` (from
    :func:`signature`), the first ``positional`` of them also by position, the rest by
    keyword only, each stored under its own name."""
    names = [name for name, _ in params]
    for name in names:
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not an identifier")
    args = [f"{name}=_defaults[{i}]" for i, name in enumerate(names)]
    if positional < len(args):
        args.insert(positional, "*")
    body = "".join(f"    self.{name} = {name}\n" for name in names) or "    pass\n"
    source = f"def __init__(self, {', '.join(args)}):\n{body}"
    namespace = {"_defaults": [default for _, default in params]}
    exec(source, namespace)  # noqa: S102 - source built above from identifiers only
    init = namespace["__init__"]

    def decorate(cls):
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        init.__module__ = cls.__module__
        cls.__init__ = init
        return cls

    return decorate


def fingerprint_params(params):
    """Of ``get_params()``'s items, those a resumed fit must share (see :data:`PARAMS`;
    an estimator's own parameters always)."""
    return {k: v for k, v in params.items() if k not in PARAMS or PARAMS[k].resume}

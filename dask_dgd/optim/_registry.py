"""Optimizers by name."""

from ..exceptions import ParameterError
from ._base import FirstOrderOptimizer
from ._first_order import SGD, Adagrad, Adam, AdamW, NormalizedAdagrad, RMSprop
from ._lbfgs import LBFGS

__all__ = ["OPTIMIZERS", "get_optimizer"]

_BY_NAME = {
    "adagrad": Adagrad,
    "adam": Adam,
    "adamw": AdamW,
    "lbfgs": LBFGS,
    "normalized": NormalizedAdagrad,
    "rmsprop": RMSprop,
    "sgd": SGD,
}

OPTIMIZERS = tuple(sorted(_BY_NAME))


def get_optimizer(optimizer, learning_rate=None):
    """An optimizer from its name or an optimizer object.

    Parameters
    ----------
    optimizer : str or optimizer
        One of ``OPTIMIZERS`` (``"adagrad"``, ``"adam"``, ``"adamw"``, ``"lbfgs"``,
        ``"normalized"`` (``solver="online"`` only), ``"rmsprop"``, ``"sgd"``;
        case-sensitive), built with its default settings, or an
        optimizer object (a first-order optimizer or :class:`LBFGS`), returned as is.
    learning_rate : float, Schedule or None, default=None
        When given, replaces the learning rate of a first-order optimizer.  L-BFGS has no
        learning rate (its line search chooses the step), so it is left unchanged.

    Returns
    -------
    FirstOrderOptimizer or LBFGS

    Raises
    ------
    ParameterError
        For an unknown name, an object of another type, or a bad ``learning_rate``.

    Examples
    --------
    >>> from dask_dgd.optim import get_optimizer
    >>> get_optimizer("sgd", learning_rate=0.5)
    SGD(learning_rate=0.5, momentum=0.0, nesterov=False)
    """
    if isinstance(optimizer, str):
        if optimizer not in _BY_NAME:
            expected = ", ".join(repr(name) for name in OPTIMIZERS)
            raise ParameterError(
                f"unknown optimizer {optimizer!r}; expected one of {expected} "
                "or an optimizer object"
            )
        optimizer = _BY_NAME[optimizer]()
    elif not isinstance(optimizer, (FirstOrderOptimizer, LBFGS)):
        raise ParameterError(
            "optimizer must be a name in OPTIMIZERS or an optimizer object; "
            f"got {optimizer!r} of type {type(optimizer).__name__}"
        )
    if learning_rate is not None and isinstance(optimizer, FirstOrderOptimizer):
        optimizer = optimizer.with_learning_rate(learning_rate)
    return optimizer

"""Save and load estimators without pickle: ``est.save(path)``, ``dask_dgd.load(path)``.

The file is a dask_dgd archive (see :mod:`dask_dgd._files.archive`): a NumPy ``.npz`` read
with ``allow_pickle=False`` whose JSON metadata names the estimator class (inside
dask_dgd only), its parameters and its fitted attributes, with a SHA-256 checksum of
every part.  Loading never runs code from the file; a corrupted or edited file is
refused with :class:`~dask_dgd.exceptions.CheckpointError`.  Signed or not, a file
rebuilds only an allow-listed estimator class, from the names of its ``get_params`` and
the fitted attributes it declares (never a name its class defines, such as ``save`` or
``predict``), each value of the declared type, shape and dtype, sparse indices within
their shape, finite where the model computes with it (see :mod:`dask_dgd._files.schema`).

Some parameters cannot be stored and come back as None: ``client`` (a live
connection; pass ``client=`` again with ``set_params`` to train on a cluster),
``callbacks`` and a ``scoring`` callable (user code; a scorer name is stored).
"""

import os

from ._files.archive import Encoder, _class_path, decode, read_archive, write_archive
from ._files.schema import UNSAVED_PARAMS, _own_class, allowed_types, rebuild_estimator
from .exceptions import CheckpointError

__all__ = ["save", "load"]

#: Parameters that are never written (live objects or user code); loaded as None.
NOT_SAVED = UNSAVED_PARAMS


def save(estimator, path):
    """Write ``estimator`` (fitted or not) to ``path``, atomically; returns the path.

    Raises
    ------
    CheckpointError
        If a parameter or fitted attribute has a type the format cannot hold (e.g. a
        user-defined optimizer class outside dask_dgd).
    """
    from sklearn.base import BaseEstimator

    if not isinstance(estimator, BaseEstimator) or not type(estimator).__module__.startswith("dask_dgd."):
        raise CheckpointError(f"save writes dask_dgd estimators; got {type(estimator).__name__}")
    params = estimator.get_params(deep=False)
    enc = Encoder()
    # user code is not stored: a scoring callable (a scorer name is) comes back as None
    unsaved = [*NOT_SAVED, *(["scoring"] if callable(params.get("scoring")) else [])]
    dropped = [name for name in unsaved if params.get(name) is not None]
    saved = _encode_each(enc, {k: v for k, v in params.items() if k not in unsaved}, "parameter")
    # the pickling state (as for a nested estimator): its attributes, a lazy one built
    state = _encode_each(enc, {k: v for k, v in estimator.__getstate__().items() if k not in params}, "attribute")
    from . import __version__

    content = {
        "class": _class_path(type(estimator)),
        "dask_dgd_version": __version__,
        "params": saved,
        "not_saved": dropped,
        "state": state,
    }
    return write_archive(os.fspath(path), "model", content, enc.arrays)


def _encode_each(enc, values, what):
    out = {}
    for name, value in values.items():
        try:
            out[name] = enc(value)
        except CheckpointError as err:
            raise CheckpointError(f"{what} {name!r} cannot be saved: {err}") from err
    return out


def load(path, expected=None):
    """The estimator saved at ``path`` by :func:`save` (or ``est.save``).

    ``expected``: a class the estimator must be an instance of (``Class.load`` passes
    itself).  ``client`` and ``callbacks`` are None on the loaded estimator.

    Raises
    ------
    CheckpointError
        If the file is missing, truncated, corrupted or edited, holds a pickle, names a
        class outside dask_dgd, or holds another kind of estimator than ``expected``.
    """
    return _from_content(*read_archive(path, "model"), os.fspath(path), expected)


def _from_content(content, arrays, path, expected=None):
    """The estimator a model file's verified ``(content, arrays)`` describe (``path``: for
    the messages).  Only an allow-listed estimator class is rebuilt, from its parameters
    and declared fitted attributes, each checked (:mod:`dask_dgd._files.schema`)."""
    what = f"{path!r} is not a valid dask_dgd model file"
    try:
        cls = _own_class(content["class"])
        from sklearn.base import BaseEstimator

        if not issubclass(cls, BaseEstimator) or cls not in allowed_types():
            raise CheckpointError(f"{path!r} names {cls.__name__}, which is not a dask_dgd estimator; refused")
        if expected is not None and not issubclass(cls, expected):
            raise CheckpointError(
                f"{path!r} holds a {cls.__name__}, not a {expected.__name__}; "
                "use dask_dgd.load to load any estimator"
            )
        params = {k: decode(v, arrays) for k, v in content["params"].items()}
        state = {k: decode(v, arrays) for k, v in content["state"].items()}
        # only the parameters and declared fitted attributes, each checked; never client or
        # callbacks (a forged callback could write wherever it names at the next fit)
        return rebuild_estimator(cls, state, what, params=params)
    except CheckpointError as err:
        if str(err).startswith(repr(path)):
            raise
        raise CheckpointError(f"{what}: {err}") from err  # a value deep in the file: say which file
    except KeyError as err:
        raise CheckpointError(f"{what}: missing {err}") from err
    except (TypeError, ValueError, IndexError, AttributeError, OverflowError, RecursionError) as err:
        # a crafted file that passed the checksums (e.g. forged sparse or random-state entries)
        raise CheckpointError(f"{what}: malformed content ({type(err).__name__}: {err})") from err

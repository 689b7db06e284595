"""What a file may hold, checked before anything is rebuilt from it.

Types: only those of :func:`allowed_types` (the exported estimators, the public classes
of :mod:`dask_dgd.optim` and :mod:`dask_dgd.compression`, and a few value classes),
whatever module a file names; a plain object's state never sets a name its class defines.

A model file (or a checkpoint's nested estimator) is rebuilt from two dicts: its
parameters and its fitted attributes.  Neither is trusted, signed or not:

- parameters: only the names of the class's ``get_params``; ``client`` and ``callbacks``
  come back as None; ``scoring`` is a name or None (a scoring callable is never saved);
  any other callable must be a dask_dgd optimizer, schedule or compressor;
- fitted attributes: only the names the class declares below (:data:`SCHEMAS`), never a
  name its class defines (a method, property or class attribute: a file could otherwise
  make ``save`` or ``predict`` something else), each value of the declared kind;
- arrays: the declared dtype kind and number of dimensions, every named dimension the
  same wherever it appears (``coef_`` and ``n_features_in_``, ``user_factors_`` and
  ``user_ids_`` and ``_seen``), finite where the model computes with them; sparse
  matrices were checked in full when decoded (:func:`dask_dgd._files.archive.decode`).

A value that fails raises :class:`~dask_dgd.exceptions.CheckpointError` naming the class,
the attribute and what was found, before any method of the estimator runs.
"""

import functools
import importlib
import math
from dataclasses import dataclass

import numpy as np

from ..exceptions import CheckpointError

__all__ = ["SCHEMAS", "allowed_class", "allowed_types", "fitted_attributes", "rebuild_estimator", "rebuild_object"]

#: The package whose classes files may name (never ``__main__``).
_PACKAGE = __name__.split(".")[0]
#: Parameters never restored from a file, whatever it holds.
UNSAVED_PARAMS = ("client", "callbacks")


def _inside(module):
    return (module == _PACKAGE or module.startswith(_PACKAGE + ".")) and "__main__" not in module.split(".")


def _own_class(path):
    """The dask_dgd class named ``module:qualname``; nothing outside the package.

    The module must be a dask_dgd module other than ``__main__`` (importing that one
    would run the command line), and the class found must itself be *defined* in
    dask_dgd: a name a dask_dgd module merely imported (``logging.FileHandler``,
    ``distributed.LocalCluster``) is refused.  Only already-imported modules and
    dask_dgd's own submodules are imported.
    """
    module, _, qualname = _MOVED_CLASSES.get(path, path).partition(":")
    module = _MOVED_MODULES.get(module, module)
    if not _inside(module):
        raise CheckpointError(f"the file names class {path!r}, outside dask_dgd; refused")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise CheckpointError(f"the file names class {path!r}, which this dask_dgd does not have") from err
    if not isinstance(obj, type):
        raise CheckpointError(f"the file names {path!r}, which is not a class")
    if not _inside(obj.__module__) or obj.__qualname__ != qualname:
        raise CheckpointError(
            f"the file names {path!r}, which is {obj.__module__}.{obj.__qualname__}, a class "
            "defined outside dask_dgd; refused"
        )
    return obj



#: The dask_dgd modules whose classes (dataclasses, named tuples, plain objects) files
#: may hold besides the estimators: optimizers, their states and schedules, compressors,
#: climate feature specs, and the engine state a checkpoint of an asynchronous fit keeps.
_VALUE_MODULES = ("dask_dgd.optim", "dask_dgd.compression")
_VALUE_CLASSES = (
    "dask_dgd.climate._design:FeatureSpec",
    "dask_dgd.climate._time:TimeRule",  # a feature spec's trend on time: origin, calendar, unit
    "dask_dgd._engine.runtime.reduce:Partial",
    "dask_dgd._engine.runtime.reduce:Compressed",
    "dask_dgd._engine.runtime.reduce:RowSparse",
    "dask_dgd._engine.runtime.reduce:SparseVector",
    "dask_dgd._engine.stopping:EpochStopper",
    "dask_dgd._engine.stopping:EarlyStopping",
    "dask_dgd._engine.stopping:StopRules",
    "dask_dgd._engine.stopping:WallClock",
    "dask_dgd._engine.update:Guard",
    "dask_dgd._engine.solvers.curvature:LeastSquaresModel",  # Newton's model on R factors (newton.IRLSCD's "H")
)
#: Where the value classes lived before the engine was laid out in sub-packages
#: (dask_dgd 0.x files name them there): old module -> module now.  Only these
#: modules are renamed; the class named must still pass every check above.
_MOVED_MODULES = {
    "dask_dgd._engine.reduce": "dask_dgd._engine.runtime.reduce",
    "dask_dgd._engine.curvature": "dask_dgd._engine.solvers.curvature",
}
#: Estimators that moved to another module of their package when files were cut by
#: concern (files written before name them there): old ``module:qualname`` -> the
#: class's path now.  Applied before ``_MOVED_MODULES``, to these exact names only;
#: the class named must still pass every check above.
_MOVED_CLASSES = {
    "dask_dgd.linear_model._binomial:BinomialRegressor": "dask_dgd.linear_model._families:BinomialRegressor",
    "dask_dgd.linear_model._cv:LogisticRegressionCV": "dask_dgd.linear_model._cv_logistic:LogisticRegressionCV",
    "dask_dgd.linear_model._cv:PoissonRegressorCV": "dask_dgd.linear_model._cv_families:PoissonRegressorCV",
}
#: The modules whose public estimators files may hold.
_ESTIMATOR_MODULES = ("dask_dgd.linear_model", "dask_dgd.recommender", "dask_dgd.climate", "dask_dgd.hashing")


@functools.cache
def allowed_types():
    """The classes a file may name (a frozenset): the estimators dask_dgd exports, the
    public classes of :mod:`dask_dgd.optim` and :mod:`dask_dgd.compression`, and the
    few value classes of ``_VALUE_CLASSES``.  Nothing else is ever rebuilt from a file,
    whatever module it names: not a command-line helper that imports and calls what it
    is told (``cli._main:_Deferred``), not a callback, not an executor."""
    from sklearn.base import BaseEstimator

    found = set()
    for name in _VALUE_MODULES + _ESTIMATOR_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover - an optional extra (climate: xarray) missing
            continue
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr, None)
            if not isinstance(obj, type) or not _inside(obj.__module__):
                continue
            if name in _ESTIMATOR_MODULES and not issubclass(obj, BaseEstimator):
                continue
            found.add(obj)
    for path in _VALUE_CLASSES:
        try:
            found.add(_own_class(path))
        except CheckpointError:  # pragma: no cover - an optional extra missing
            pass
    return frozenset(found)


def allowed_class(path, kind):
    """The class ``path`` names, if files may hold it (:func:`allowed_types`)."""
    cls = _own_class(path)
    if cls not in allowed_types():
        raise CheckpointError(
            f"the file names {kind} {path!r}, which is not one of the types dask_dgd files hold "
            "(estimators, optimizers and their states, schedules, compressors); refused"
        )
    return cls


def rebuild_object(cls, state):
    """A plain dask_dgd object from its state: an estimator through its declared
    parameters and fitted attributes; another allowed class (a feature spec, a stop
    rule) with no name that its class defines (a method, property or class attribute:
    a file could otherwise replace ``elapsed`` or ``save``)."""
    from sklearn.base import BaseEstimator

    if issubclass(cls, BaseEstimator):
        return rebuild_estimator(cls, state, f"the nested {cls.__name__} in the file")
    for k in state:
        if not isinstance(k, str) or k.startswith("__") or hasattr(cls, k):
            raise CheckpointError(
                f"the file sets {k!r} on a {cls.__name__}, a name its class defines (a method or class "
                "attribute); refused"
            )
    obj = cls.__new__(cls)
    if hasattr(obj, "__setstate__"):
        obj.__setstate__(state)
    else:
        obj.__dict__.update(state)
    return obj


#: dtype kinds of label arrays (classes, user and item ids): numbers, booleans, strings
#: (an array of str objects comes back as object dtype).
LABELS = "biufUSO"


class _Context:
    """The named dimensions found so far in one estimator's state."""

    def __init__(self, cls, what):
        from sklearn.base import ClassifierMixin

        self.cls, self.what, self.dims = cls, what, {}
        self.classifier = issubclass(cls, ClassifierMixin)

    def fail(self, name, message):
        raise CheckpointError(f"{self.what}: attribute {name!r} of {self.cls.__name__} {message}; refused")

    def bind(self, dim, size, name):
        if dim is None:
            return
        if isinstance(dim, int):
            if size != dim:
                self.fail(name, f"has {size} along an axis of length {dim}")
            return
        if dim in self.dims and self.dims[dim][0] != size:
            seen, where = self.dims[dim]
            self.fail(name, f"has {size} along {dim}, but {where} has {seen}")
        self.dims.setdefault(dim, (size, name))

    def size(self, dim):
        return self.dims[dim][0] if dim in self.dims else None


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class Array:
    """An ndarray (or, where ``sparse``, a SciPy sparse matrix) of a dtype kind in
    ``kinds`` whose shape is one of ``dims`` (tuples of dimension names, lengths, or None
    for any length)."""

    kinds: str
    dims: tuple
    finite: bool = False
    sparse: bool = False
    nonnegative: bool = False
    sparse_dims: tuple = None  # the shapes of a sparse matrix, where not ``dims``
    masked: bool = False  # finite or NaN (a climate grid's cells without data), never infinite

    def check(self, value, ctx, name):
        import scipy.sparse as sp

        if sp.issparse(value):
            if not self.sparse:
                ctx.fail(name, "is a sparse matrix, where a dense array belongs")
            data = value.data
        elif isinstance(value, np.ndarray):
            data = value
        else:
            ctx.fail(name, f"is a {type(value).__name__}, not an array")
        if value.dtype.kind not in self.kinds:
            ctx.fail(name, f"has dtype {value.dtype}, not one of the kinds {self.kinds!r}")
        if value.dtype.kind == "O" and not all(isinstance(v, str) for v in np.ravel(value)):
            ctx.fail(name, "holds objects other than strings")
        dims = self.sparse_dims if self.sparse_dims is not None and sp.issparse(value) else self.dims
        shapes = [d for d in dims if len(d) == value.ndim]
        if not shapes:
            ctx.fail(name, f"has shape {value.shape}, not {' or '.join(_shape_text(d) for d in dims)}")
        for dim, size in zip(shapes[0], value.shape):
            ctx.bind(dim, int(size), name)
        if self.finite and data.dtype.kind in "fc":
            if self.masked and np.isinf(data).any():
                ctx.fail(name, "holds infinite values")
            if not self.masked and not np.isfinite(data).all():
                ctx.fail(name, "holds NaN or infinite values")
        if self.nonnegative and data.size and data.min() < 0:
            ctx.fail(name, "holds negative values")


def _shape_text(dims):
    return "(" + ", ".join("*" if d is None else str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


@dataclass(frozen=True)
class Int:
    """An integer >= ``low`` (None where ``none``); ``bind`` names the dimension it is."""

    low: int = 0
    none: bool = False
    bind: str = None

    def check(self, value, ctx, name):
        if value is None and self.none:
            return
        if not _is_int(value) or value < self.low:
            ctx.fail(name, f"is {value!r}, not an integer >= {self.low}")
        ctx.bind(self.bind, int(value), name)


@dataclass(frozen=True)
class Real:
    """A real number (finite where ``finite``; > 0 where ``positive``; None where ``none``)."""

    finite: bool = True
    none: bool = False
    positive: bool = False

    def check(self, value, ctx, name):
        if value is None and self.none:
            return
        if not _is_real(value) or (self.finite and not math.isfinite(value)):
            ctx.fail(name, f"is {value!r}, not a {'finite ' if self.finite else ''}real number")
        if self.positive and not value > 0:
            ctx.fail(name, f"is {value!r}, not a number > 0")


@dataclass(frozen=True)
class Of:
    """An instance of one of ``types`` (a plain type, or a dotted path imported when
    checked), or None where ``none``."""

    types: tuple
    none: bool = False

    def check(self, value, ctx, name):
        if value is None and self.none:
            return
        types = tuple(_resolve(t) for t in self.types)
        if not isinstance(value, types):
            ctx.fail(name, f"is a {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}")


def _resolve(t):
    if isinstance(t, type):
        return t
    module, _, attr = t.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Either:
    """One of ``specs`` (the message of the last one that failed otherwise)."""

    specs: tuple

    def check(self, value, ctx, name):
        for spec in self.specs[:-1]:
            saved = dict(ctx.dims)
            try:
                spec.check(value, ctx, name)
                return
            except CheckpointError:
                ctx.dims = saved
        self.specs[-1].check(value, ctx, name)


@dataclass(frozen=True)
class ListOf:
    """A list or tuple of values of ``spec``; ``bind``: the dimension its length is."""

    spec: object
    bind: str = None

    def check(self, value, ctx, name):
        if not isinstance(value, (list, tuple)):
            ctx.fail(name, f"is a {type(value).__name__}, not a list")
        ctx.bind(self.bind, len(value), name)
        for i, v in enumerate(value):
            self.spec.check(v, ctx, f"{name}[{i}]")


@dataclass(frozen=True)
class ByLabel:
    """A dict of class label -> ``spec`` (LogisticRegressionCV's ``scores_`` and
    ``coefs_paths_``), its length the dimension ``bind``; or, not a dict, ``single``."""

    spec: object
    single: object
    bind: str = "n_out"

    def check(self, value, ctx, name):
        if not isinstance(value, dict):
            return self.single.check(value, ctx, name)
        ctx.bind(self.bind, len(value), name)
        for label, v in value.items():
            self.spec.check(v, ctx, f"{name}[{label!r}]")


@dataclass(frozen=True)
class OptimizerState:
    """None, or an optimizer state (a named tuple of :mod:`dask_dgd.optim`) whose count is
    an int >= 0 and whose arrays are all ``array``."""

    array: Array

    def check(self, value, ctx, name):
        if value is None:
            return
        from ..optim import AdagradState, AdamState, RMSpropState, SGDState

        if not isinstance(value, (AdagradState, AdamState, RMSpropState, SGDState)):
            ctx.fail(name, f"is a {type(value).__name__}, not an optimizer state")
        for field, v in zip(value._fields, value):
            if field == "count":
                Int().check(v, ctx, f"{name}.count")
            elif v is not None:
                self.array.check(v, ctx, f"{name}.{field}")


@dataclass(frozen=True)
class Plain:
    """JSON-like data (None, bools, numbers, strings, arrays of numbers, and lists, tuples
    and dicts of them): reports such as ``bytes_communicated_``."""

    def check(self, value, ctx, name):
        if value is None or isinstance(value, (bool, str, np.bool_)) or _is_real(value):
            return
        if isinstance(value, np.ndarray) and value.dtype.kind in "biufUS":
            return
        if isinstance(value, (list, tuple)):
            for v in value:
                self.check(v, ctx, name)
            return
        if isinstance(value, dict):
            for k, v in value.items():
                self.check(k, ctx, name)
                self.check(v, ctx, name)
            return
        ctx.fail(name, f"holds a {type(value).__name__}, where reports hold numbers and strings")


@dataclass(frozen=True)
class Frame:
    """None or a pandas DataFrame (a history)."""

    def check(self, value, ctx, name):
        import pandas as pd

        if value is not None and not isinstance(value, pd.DataFrame):
            ctx.fail(name, f"is a {type(value).__name__}, not a DataFrame")


@dataclass(frozen=True)
class Labels:
    """A pandas Index whose length is the dimension ``bind`` (a recommender's id index)."""

    bind: str

    def check(self, value, ctx, name):
        import pandas as pd

        if not isinstance(value, pd.Index) or value.dtype.kind not in LABELS:
            ctx.fail(name, f"is a {type(value).__name__} of {getattr(value, 'dtype', '?')}, not an index of labels")
        if not value.is_unique:
            ctx.fail(name, "holds duplicate labels")
        ctx.bind(self.bind, len(value), name)


@dataclass(frozen=True)
class Grid:
    """A climate model's grid: dimension name -> (length, coordinate values of that
    length); each length becomes the dimension ``grid:<name>``."""

    def check(self, value, ctx, name):
        if not isinstance(value, dict):
            ctx.fail(name, f"is a {type(value).__name__}, not a dict")
        for dim, entry in value.items():
            if not (isinstance(dim, str) and isinstance(entry, (tuple, list)) and len(entry) == 2):
                ctx.fail(name, f"has entry {dim!r} that is not (length, coordinates)")
            Int().check(entry[0], ctx, f"{name}[{dim!r}]")
            Array("biufUSOMm", ((f"grid:{dim}",),)).check(entry[1], ctx, f"{name}[{dim!r}]")
            ctx.bind(f"grid:{dim}", int(entry[0]), f"{name}[{dim!r}]")


@dataclass(frozen=True)
class GridArray:
    """An xarray DataArray of real numbers on the model's grid (``grid_``) and its
    ``feature`` dimension (of length ``n_coef``)."""

    kinds: str = "f"
    finite: bool = True  # or NaN, at cells without data

    def check(self, value, ctx, name):
        import xarray as xr

        if not isinstance(value, xr.DataArray):
            ctx.fail(name, f"is a {type(value).__name__}, not a DataArray")
        Array(self.kinds, ((None,) * value.ndim,), finite=self.finite, masked=True).check(value.values, ctx, name)
        for dim, size in value.sizes.items():
            if dim != "feature" and f"grid:{dim}" not in ctx.dims:
                ctx.fail(name, f"has dimension {dim!r}, which is neither 'feature' nor one of the grid's")
            ctx.bind("n_coef" if dim == "feature" else f"grid:{dim}", int(size), name)


# ------------------------------------------------------------------ the schemas
_FLOATS = "f"
_COEF = Array(_FLOATS, (("n_features",), ("n_out", "n_features")), finite=True, sparse=True,
              sparse_dims=(("n_out", "n_features"),))
_INTERCEPT = Either((Real(), Array(_FLOATS, (("n_out",),), finite=True)))
_COMMON = {
    "n_features_in_": Int(bind="n_features"),
    "feature_names_in_": Array("UO", (("n_features",),)),
}
_LINEAR = {
    **_COMMON,
    "classes_": Array(LABELS, (("n_classes",),)),
    "coef_": _COEF,
    "intercept_": _INTERCEPT,
    "n_iter_": Int(),
    "converged_": Of((bool, np.bool_)),
    "separated_": Of((bool, np.bool_), none=True),
    "solver_": Of((str,)),
    "split_every_": Int(low=1, none=True),
    "loss_curve_": ListOf(Real(finite=False)),
    "history_": Frame(),
    "bytes_communicated_": Plain(),
    "skew_report_": Plain(),
    "_optimizer_": Of(("dask_dgd.optim:FirstOrderOptimizer", "dask_dgd.optim:LBFGS"), none=True),
    "_opt_state_": OptimizerState(Array(_FLOATS, (("n_params",),), finite=True, sparse=True,
                                        sparse_dims=((1, "n_params"),))),
    "_partial_calls": Int(),
    "validation_score_": Real(finite=False, none=True),
    "best_validation_score_": Real(finite=False, none=True),
    "alpha_": Real(),  # LogisticRegression: the penalty trained with (from C)
}
_PATH_CV = {
    **_COMMON,
    "classes_": Array(LABELS, (("n_classes",),)),
    "coef_": _COEF,
    "intercept_": _INTERCEPT,
    "alpha_": Real(),
    "alphas_": Array(_FLOATS, (("n_alphas",),), finite=True),
    "C_": Array(_FLOATS, (("n_out",),), finite=True),
    "Cs_": Array(_FLOATS, (("n_alphas",),), finite=True),
    "l1_ratio_": Either((Real(), Array(_FLOATS, (("n_out",),), finite=True))),
    "coefs_paths_": ByLabel(*[Array(_FLOATS, (("n_folds", "n_alphas", "n_path_columns"),))] * 2),
    "scores_": ByLabel(Array(_FLOATS, (("n_folds", "n_alphas"),)), Array(_FLOATS, (("n_alphas", "n_folds"),))),
    "mse_path_": Array(_FLOATS, (("n_alphas", "n_folds"),)),
    "estimator_": Of(("sklearn.base:BaseEstimator",), none=True),
    "n_iter_": Int(),
}
_FACTORS = {
    "user_ids_": Array(LABELS, (("n_users",),)),
    "item_ids_": Array(LABELS, (("n_items",),)),
    "_user_index": Labels("n_users"),
    "_item_index": Labels("n_items"),
    "user_factors_": Array(_FLOATS, (("n_users", "k"),), finite=True),
    "item_factors_": Array(_FLOATS, (("n_items", "k"),), finite=True),
    "user_bias_": Array(_FLOATS, (("n_users",),), finite=True),
    "item_bias_": Array(_FLOATS, (("n_items",),), finite=True),
    "global_mean_": Real(),
    "_user_state_": OptimizerState(Array(_FLOATS, (("n_users", "user_state_columns"),), finite=True)),
    "_item_state_": OptimizerState(Array(_FLOATS, (("n_items", "item_state_columns"),), finite=True)),
    "_seen": Array("biu", (("n_users", "n_items"),), sparse=True, nonnegative=True),
    "history_": Frame(),
    "validation_path_": Frame(),
    "loss_curve_": ListOf(Real(finite=False)),
    "n_iter_": Int(),
    "solver_": Of((str,)),
    "shard_ratings_": Array("iu", ((None,),), nonnegative=True),
    "bytes_communicated_": Plain(),
    "_seed_": Int(none=True),
    "alpha_": Real(),
    "alpha_bias_": Real(),
    "residual_std_": Real(),
    "_step_unit_": Real(positive=True),  # partial_fit steps in it: the training ratings' standard deviation
    "n_duplicates_": Int(),
    "n_components_": Int(),
    "_item_counts": Array("iu", (("n_items",),), nonnegative=True),
    "rating_scale_": Either((Of((type(None),)), ListOf(Real()))),  # MatrixFactorization: (low, high) or None
}
_CLIMATE = {
    "grid_": Grid(),
    "coef_": Either((Real(), GridArray())),
    # a per-cell GLM's cell whose every y is at an edge of its family's range (all zero
    # counts, all failures or successes) has the documented intercept -inf or +inf
    "intercept_": Either((Real(), GridArray(finite=False))),
    "n_samples_": GridArray(kinds="biuf"),
    "separated_": GridArray(kinds="b"),
    "_coef_table": Array(_FLOATS, ((None, None, None), (None, None), (None,))),  # intercepts +-inf: see intercept_
    "estimator_": Of(("sklearn.base:BaseEstimator",), none=True),
    "spec_": Of(("dask_dgd.climate._design:FeatureSpec",)),
    "family_": Of((str,)),
    "feature_names_": ListOf(Of((str,)), bind="n_coef"),
    "sample_dims_": ListOf(Of((str,))),
    "time_dim_": Of((str,)),
    "target_attrs_": Plain(),
    "history_": Frame(),
    "n_iter_": Int(),
}

#: Each estimator family (a class path) and the fitted attributes its instances may hold,
#: checked in this order (a dimension is named by the first attribute that has it).
SCHEMAS = (
    ("dask_dgd.linear_model._base:DGDLinearModel", _LINEAR),
    ("dask_dgd.linear_model._cv:_PathCV", _PATH_CV),
    ("dask_dgd.recommender._base:FactorizationBase", _FACTORS),
    ("dask_dgd.climate._regressor:ClimateRegressor", _CLIMATE),
    ("dask_dgd.hashing:FeatureHasher", dict(_COMMON)),
)


def fitted_attributes(cls):
    """``{name: spec}`` of the fitted attributes ``cls`` declares (empty if none)."""
    for path, schema in SCHEMAS:
        try:
            base = _resolve(path)
        except (ImportError, AttributeError):  # pragma: no cover - an optional extra missing
            continue
        if issubclass(cls, base):
            return schema
    return {}


def _relations(ctx, state, params):
    """What no single attribute shows: the outputs of a classifier, the optimizer state's
    length, the factor width against ``n_components``, a climate table against the grid."""
    size = ctx.size
    coef = state.get("coef_")
    if getattr(coef, "ndim", None) == 2 and not ctx.classifier and not (_is_sparse(coef) and coef.shape[0] == 1):
        ctx.fail("coef_", f"has shape {coef.shape}; a regressor's coefficients are a vector (or a 1-row sparse matrix)")
    if getattr(coef, "ndim", None) == 1 and ctx.classifier:
        ctx.fail("coef_", f"has shape {coef.shape}; a classifier's coefficients are a matrix (outputs by features)")
    if size("n_classes") is not None and size("n_out") is not None:
        n_classes, n_out = size("n_classes"), size("n_out")
        if n_out != (1 if n_classes == 2 else n_classes):
            ctx.fail("classes_", f"has {n_classes} classes, but coef_ has {n_out} rows")
    if size("n_features") is not None and size("n_path_columns") is not None:
        if size("n_path_columns") not in (size("n_features"), size("n_features") + 1):
            ctx.fail("coefs_paths_", f"has {size('n_path_columns')} columns for {size('n_features')} features")
    if size("n_params") is not None and coef is not None and hasattr(coef, "shape"):
        n_coef, n_out = math.prod(coef.shape), coef.shape[0] if coef.ndim == 2 else 1
        if not n_coef <= size("n_params") <= n_coef + n_out:
            ctx.fail("_opt_state_", f"holds {size('n_params')} parameters, not the {n_coef} (+ intercept) of coef_")
    k = size("k")
    if k is not None:
        if _is_int(params.get("n_components")) and params["n_components"] != k:
            ctx.fail("user_factors_", f"has {k} columns, but n_components is {params['n_components']}")
        if _is_int(state.get("n_components_")) and state["n_components_"] != k:
            ctx.fail("user_factors_", f"has {k} columns, but n_components_ is {state['n_components_']}")
        for dim in ("user_state_columns", "item_state_columns"):
            if size(dim) is not None and size(dim) not in (k, k + 1):
                ctx.fail(f"_{dim.split('_')[0]}_state_", f"has {size(dim)} columns for {k} factors")
    table = state.get("_coef_table")
    if table is not None and hasattr(table, "shape"):
        grid = tuple(size(f"grid:{d}") for d in state.get("grid_", {}))[: table.ndim - 1]
        n_coef = size("n_coef")
        if table.shape[:-1] != grid or (n_coef is not None and table.shape[-1] != n_coef + 1):
            ctx.fail("_coef_table", f"has shape {table.shape}, not the grid's {grid} by {n_coef} coefficients + 1")


def _is_sparse(value):
    import scipy.sparse as sp

    return sp.issparse(value)


def _check_params(cls, params, what):
    names = set(cls._get_param_names())
    for name, value in params.items():
        if name not in names:
            raise CheckpointError(f"{what}: {cls.__name__} has no parameter {name!r}; refused")
        if name == "scoring" and value is not None and not isinstance(value, str):
            raise CheckpointError(
                f"{what}: parameter 'scoring' of {cls.__name__} is a {type(value).__name__}; files hold a scorer "
                "name or None (a scoring callable is never saved); refused"
            )
        if callable(value) and name not in UNSAVED_PARAMS and type(value) not in allowed_types():
            raise CheckpointError(
                f"{what}: parameter {name!r} of {cls.__name__} is a callable {type(value).__name__}; refused"
            )
    return {**params, **{k: None for k in UNSAVED_PARAMS if k in params}}


def rebuild_estimator(cls, state, what, params=None):
    """An instance of the estimator class ``cls`` from a file.

    ``params`` and ``state`` (its fitted attributes) as decoded; with ``params`` None,
    ``state`` holds both (a nested estimator's ``__getstate__``).  Every name and value
    is checked as the module docstring says; CheckpointError names what is refused.
    """
    if params is None:
        names = set(cls._get_param_names())
        params = {k: v for k, v in state.items() if k in names}
        state = {k: v for k, v in state.items() if k not in names}
    params = _check_params(cls, params, what)
    schema = fitted_attributes(cls)
    for name in state:
        if name in params or name in UNSAVED_PARAMS:
            raise CheckpointError(
                f"{what}: it sets parameter {name!r} of {cls.__name__} among its fitted attributes; refused"
            )
        if not isinstance(name, str) or name not in schema:
            raise CheckpointError(
                f"{what}: it sets attribute {name!r} on {cls.__name__}, which is not one of its parameters or "
                "fitted attributes; refused"
            )
        if hasattr(cls, name):  # a method, property or class attribute: never replaced by a file
            raise CheckpointError(
                f"{what}: it sets attribute {name!r} on {cls.__name__}, which would replace the class's own "
                f"{type(getattr(cls, name)).__name__}; refused"
            )
    ctx = _Context(cls, what)
    for name, spec in schema.items():
        if name in state:
            spec.check(state[name], ctx, name)
    _relations(ctx, state, params)
    try:
        est = cls(**params)
    except TypeError as err:
        raise CheckpointError(f"{what}: {err}") from err
    est.__dict__.update(state)
    return est

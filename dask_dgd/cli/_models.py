"""The models of ``dask-dgd train --model NAME``, one table, and the quick ``--param`` check.

:data:`MODELS` maps each name to a :class:`ModelSpec`: the estimator class (a name in
:mod:`dask_dgd`), its kind (``regressor``, ``classifier``, ``recommender``, ``climate``)
and the parameters the name fixes (``climate-pooled``: ``model="pooled"``).  Everything
the commands do with a model follows from its kind: which data it reads, which columns
it needs, what ``--proba``, ``--table`` and the summary's score mean.  A new estimator is
one row here (and ``python -m dask_dgd.cli._models --write``).

:func:`check_params` checks ``--param NAME=VALUE`` against the estimator's parameter names
and constraints *without importing the estimators* (which import scikit-learn and dask,
4 to 9 seconds on a cold start): it reads :mod:`._param_table`, a copy of every
estimator's ``_parameter_constraints`` written by :func:`render` and kept true by a test.
A constraint that is a predicate of the library (e.g. ``cv``'s "an int >= 2") cannot be
evaluated here: a value that fits none of the others is left to the estimator's own check
after the import.  This module imports only the standard library.
"""

import numbers
import sys
from dataclasses import dataclass, field

from ._common import UsageError

__all__ = ["KINDS", "MODELS", "ModelSpec", "check_params", "models_help", "render"]

#: kind -> (the data it is trained on, its training score's name; None: no score)
KINDS = {
    "regressor": ("table", None),
    "classifier": ("table", "accuracy"),
    "recommender": ("ratings", None),
    "climate": ("grid", None),
}


@dataclass(frozen=True)
class ModelSpec:
    """One ``--model``: the class name in :mod:`dask_dgd`, its kind, the parameters the
    name fixes, the name of its training score (``score``: by default its kind's) and
    whether the fitted model has ``coef_table`` (the GLMs fitted without a penalty; a CV
    estimator always selects one, so it has none)."""

    cls: str
    kind: str
    fixed: dict = field(default_factory=dict)
    score: str | None = None
    coef_table: bool = False

    @property
    def data(self):
        """``"table"``, ``"ratings"`` or ``"grid"``: what ``train`` reads."""
        return KINDS[self.kind][0]

    @property
    def score_name(self):
        return self.score or KINDS[self.kind][1]


_D2 = "D² (share of deviance explained)"

#: --model name -> what it trains.
MODELS = {
    "linear": ModelSpec("LinearRegression", "regressor", score="R²", coef_table=True),
    "logistic": ModelSpec("LogisticRegression", "classifier", coef_table=True),
    "poisson": ModelSpec("PoissonRegressor", "regressor", score=_D2, coef_table=True),
    "gamma": ModelSpec("GammaRegressor", "regressor", score=_D2, coef_table=True),
    "tweedie": ModelSpec("TweedieRegressor", "regressor", score=_D2, coef_table=True),
    "negative-binomial": ModelSpec("NegativeBinomialRegressor", "regressor", score=_D2, coef_table=True),
    "binomial": ModelSpec("BinomialRegressor", "regressor", score=_D2, coef_table=True),
    "elasticnet-cv": ModelSpec("ElasticNetCV", "regressor", score="R²"),
    "logistic-cv": ModelSpec("LogisticRegressionCV", "classifier"),
    "poisson-cv": ModelSpec("PoissonRegressorCV", "regressor", score=_D2),
    "gamma-cv": ModelSpec("GammaRegressorCV", "regressor", score=_D2),
    "tweedie-cv": ModelSpec("TweedieRegressorCV", "regressor", score=_D2),
    "negative-binomial-cv": ModelSpec("NegativeBinomialRegressorCV", "regressor", score=_D2),
    "binomial-cv": ModelSpec("BinomialRegressorCV", "regressor", score=_D2),
    "mf": ModelSpec("MatrixFactorization", "recommender"),
    "implicit-mf": ModelSpec("ImplicitMatrixFactorization", "recommender"),
    "climate-pooled": ModelSpec("ClimateRegressor", "climate", {"model": "pooled"}),
    "climate-pointwise": ModelSpec("ClimateRegressor", "climate", {"model": "pointwise"}),
}


def models_help():
    """The table of models shown by ``dask-dgd train --help``."""
    width = max(map(len, MODELS))
    rows = [f"  {name:<{width}}  {spec.cls} ({spec.kind})" for name, spec in MODELS.items()]
    return "models (--model NAME):\n" + "\n".join(rows)


def model_names(kind):
    """The ``--model`` names of one kind, for messages."""
    return ", ".join(name for name, spec in MODELS.items() if spec.kind == kind)


# ------------------------------------------------------------------ the quick --param check
_BUILTIN_TYPES = {"bool": bool, "str": str, "int": int, "float": float, "list": list, "tuple": tuple,
                  "dict": dict, "numbers.Real": numbers.Real, "numbers.Integral": numbers.Integral}

#: A constraint's verdict when it cannot be evaluated here.
_UNKNOWN = "unknown"


def _fits(entry, value):
    """Whether ``value`` (a Python literal or a string) satisfies one constraint of
    :mod:`._param_table`: True, False, or :data:`_UNKNOWN` (a predicate of the library)."""
    what = entry[0]
    if what == "none":
        return value is None
    if what == "type":
        kind = _BUILTIN_TYPES.get(entry[1])
        if kind is None:  # a class of the library or of NumPy: never a literal's type
            return False
        return isinstance(value, kind) and not (kind in (numbers.Real, numbers.Integral)
                                                and isinstance(value, bool))
    if what == "interval":
        _, kind, low, high, closed = entry[:5]
        kind = numbers.Integral if kind == "int" else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
        lo_ok = low is None or (value >= low if closed in ("both", "left") else value > low)
        hi_ok = high is None or (value <= high if closed in ("both", "right") else value < high)
        return lo_ok and hi_ok
    if what == "options":
        return isinstance(value, str) and value in entry[1]
    if what == "callable":
        return callable(value)
    return _UNKNOWN


def check_params(spec, params):
    """Refuse, as a :class:`UsageError`, a ``--param`` that ``spec``'s estimator does not
    take (listing the ones it does) or a value that fits none of its constraints (with the
    estimator's own message), reading only :mod:`._param_table`.  A value that only a
    predicate of the library could accept is left to the estimator's own check."""
    from ._param_table import PARAMETERS

    table = PARAMETERS[spec.cls]
    for name, value in params.items():
        if name not in table:
            known = sorted(n for n in table if n not in RESERVED and n not in spec.fixed)
            raise UsageError(f"--param {name}: {spec.cls} has no parameter {name!r}; "
                             f"its parameters: {', '.join(known)}")
        constraints = table[name]
        if not constraints:  # checked by the estimator only
            continue
        verdicts = [_fits(entry, value) for entry in constraints]
        if not any(v is True for v in verdicts) and _UNKNOWN not in verdicts:
            allowed = " or ".join(entry[-1] for entry in constraints)
            raise UsageError(f"--param: The {name!r} parameter of {spec.cls} must be {allowed}; got {value!r}")


#: Estimator parameters the command sets itself (from its flags), never --param.
RESERVED = ("client", "features", "target", "user_col", "item_col", "rating_col", "model")


# ------------------------------------------------------------- writing the parameter table
def _entry(constraint):
    """One constraint as a tuple of literals ending with its description (the
    estimator's :func:`~dask_dgd._validation.describe`)."""
    from .._validation import Interval, Options, describe

    text = describe(constraint)
    if constraint is None:
        return ("none", text)
    if isinstance(constraint, Interval):
        kind = "int" if constraint.kind is numbers.Integral else "real"
        return ("interval", kind, constraint.low, constraint.high, constraint.closed, text)
    if isinstance(constraint, Options):
        return ("options", tuple(sorted(constraint.values)), text)
    if isinstance(constraint, type):
        name = constraint.__name__ if constraint.__module__ == "builtins" else \
            f"{constraint.__module__}.{constraint.__qualname__}"
        return ("type", name, text)
    if constraint is callable:
        return ("callable", text)
    return ("predicate", f"{constraint.__module__}.{constraint.__qualname__}", text)


def parameter_table():
    """``{class name: {parameter: (constraint entries)}}`` for every class in
    :data:`MODELS`, parameters in signature order (imports the estimators)."""
    import inspect

    import dask_dgd

    table = {}
    for spec in MODELS.values():
        cls = getattr(dask_dgd, spec.cls)
        constraints = cls._parameter_constraints
        table[spec.cls] = {name: tuple(_entry(c) for c in constraints.get(name, ()))
                           for name in inspect.signature(cls).parameters}
    return table


def render():
    """The text of :mod:`._param_table` for the estimators as they are now."""
    lines = ["# ruff: noqa: E501",
             '"""Every --model estimator\'s parameters and constraints, for the quick --param check.', "",
             "Written by ``python -m dask_dgd.cli._models --write`` from the estimators'",
             "``_parameter_constraints`` (see :mod:`dask_dgd.cli._models`); do not edit by hand.", '"""', "",
             "from math import inf  # noqa: F401  (Interval bounds)", "",
             "PARAMETERS = {"]
    for cls, params in parameter_table().items():
        lines.append(f"    {cls!r}: {{")
        for name, entries in params.items():
            lines.append(f"        {name!r}: {entries!r},")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _table_path():
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_param_table.py")


if __name__ == "__main__":  # python -m dask_dgd.cli._models [--write]
    text = render()
    if "--write" in sys.argv[1:]:
        with open(_table_path(), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {_table_path()}")
    else:
        sys.stdout.write(text)

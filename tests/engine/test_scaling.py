"""Scaled coordinates (``_engine/scaling.py``) and the blocks' parts of Newton's steps
(``_engine/curvature.py``): exact maps, the same optimum, the Hessian's condition not
squared."""

import dask
import numpy as np
import pytest
import scipy.sparse as sp

import dask_dgd
from dask_dgd._engine.data.blocks import Block
from dask_dgd._engine.data.ingest import build_shardset
from dask_dgd._engine.runtime.executor import get_executor
from dask_dgd._engine.scaling import ColumnScaling, column_scaling, ridge_level
from dask_dgd._engine.solvers.curvature import LeastSquaresModel, RFactor, block_r_factor, block_scaled_gram
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    Penalty,
    objective_hessian,
    objective_value_gradient,
)


def _matrix(scaling, n_params):
    """T as an explicit matrix, column by column."""
    return np.column_stack([scaling.to_original(e) for e in np.eye(n_params)])


@pytest.mark.parametrize("n_outputs, fit_intercept", [(1, True), (3, True), (1, False), (3, False)])
def test_the_maps_are_one_linear_change_of_variables(n_outputs, fit_intercept):
    rng = np.random.default_rng(0)
    d = 4
    scaling = ColumnScaling(rng.normal(size=d) * 100, 10.0 ** rng.uniform(-3, 3, d), n_outputs, fit_intercept)
    assert scaling.centred == fit_intercept
    P = (d + fit_intercept) * n_outputs
    T = _matrix(scaling, P)
    p = rng.normal(size=P)
    np.testing.assert_allclose(scaling.to_scaled(scaling.to_original(p)), p, rtol=1e-12)
    np.testing.assert_allclose(scaling.to_original(p), T @ p, rtol=1e-12)
    g = rng.normal(size=P)
    np.testing.assert_allclose(scaling.grad_to_scaled(g), T.T @ g, rtol=1e-12, atol=1e-12)
    if fit_intercept:  # the intercept takes the centring: the coefficients are only scaled
        np.testing.assert_allclose(T[:d * n_outputs, :d * n_outputs], np.diag(np.repeat(1 / scaling.scale, n_outputs)))


def _shards(X, y, w=None):
    return build_shardset(get_executor(None, X), X, y, w, rebalance=False)


def test_column_scaling_is_the_weighted_mean_and_std():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 3)) * [1e-3, 1.0, 1e5] + [1950.0, 0.0, -3e6]
    X[:, 1] = 7.0  # a constant column keeps scale 1
    w = rng.uniform(0.5, 2.0, 500)
    for data in (X, sp.csr_matrix(X)):
        s = column_scaling(_shards(data, np.zeros(500), w), LinearObjective(HalfSquaredError(), 3))
        mean = w @ X / w.sum()
        np.testing.assert_allclose(s.mean, mean, rtol=1e-12)
        np.testing.assert_allclose(s.scale[[0, 2]], np.sqrt(w @ (X - mean) ** 2 / w.sum())[[0, 2]], rtol=1e-9)
        assert s.scale[1] == 1.0
    rms = column_scaling(_shards(X, np.zeros(500), w), LinearObjective(HalfSquaredError(), 3, fit_intercept=False))
    assert not rms.centred
    np.testing.assert_allclose(rms.scale, np.sqrt(w @ X**2 / w.sum()), rtol=1e-12)


def test_column_scales_take_the_l2_penalty_share_of_the_curvature():
    """sigma_j^2 = variance + l2 / kappa (the Hessian's diagonal at an average
    curvature, the penalty included); a constant column gets sqrt(l2 / kappa)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 3)) * [1e-3, 1.0, 1e5]
    X[:, 1] = 7.0
    obj = LinearObjective(BinaryLogistic(), 3)
    r = ridge_level(obj, Penalty(alpha=0.02, l1_ratio=0.5))
    assert r == pytest.approx(0.01 / 0.25)  # the L2 part over the logistic curvature bound
    assert ridge_level(LinearObjective(HalfPoisson(), 3), Penalty(alpha=0.02)) == pytest.approx(0.02)  # no bound: 1
    s = column_scaling(_shards(X, np.zeros(500)), obj, ridge=r)
    np.testing.assert_allclose(s.scale[[0, 2]], np.sqrt(X.var(axis=0) + r)[[0, 2]], rtol=1e-9)
    assert s.scale[1] == pytest.approx(np.sqrt(r))


def test_default_lbfgs_reaches_the_optimum_on_rare_unscaled_sparse_columns():
    """A hashed/one-hot style design (Zipf-frequent columns, scales 1e-2..1e2) with an
    L2 penalty: the penalty's curvature lambda / variance of rare columns made the
    scaled problem ill-conditioned, and L-BFGS was 2.6e-2 off after 200 iterations.
    With the penalty's share in the scales, the default fit reaches Newton's optimum."""
    from designs import zipf_log

    X, y = zipf_log(n=3000, d=500)
    obj = LinearObjective(BinaryLogistic(), n_features=500)
    pen = Penalty(alpha=1e-3)
    ref = dask_dgd.train(obj, (X, y), penalty=pen, solver="newton", tol=1e-10)
    got = dask_dgd.train(obj, (X, y), penalty=pen, solver="lbfgs", max_iter=200, tol=1e-8)
    assert got.converged, got.message
    best = ref.history["loss"].min()
    assert got.history["loss"].min() <= best + 1e-9 * abs(best)
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-4 * np.abs(ref.params).max())


def test_r_factors_and_scaled_gram_give_the_newton_step():
    rng = np.random.default_rng(2)
    X, y, w = rng.normal(size=(300, 3)) * [2.0, 1.0, 0.5] + 1.0, rng.poisson(2.0, 300) * 1.0, rng.uniform(1, 2, 300)
    obj = LinearObjective(HalfPoisson(), 3)
    scaling = ColumnScaling(X.mean(axis=0), X.std(axis=0))
    params = np.array([0.1, -0.2, 0.05, 0.3])
    whole = block_r_factor(obj, params, X, y, w, scaling)
    halves = block_r_factor(obj, params, X[:170], y[:170], w[:170], scaling) + \
        block_r_factor(obj, params, X[170:], y[170:], w[170:], scaling)
    assert isinstance(halves, RFactor) and halves.nbytes == 8 * 5 * 5
    np.testing.assert_allclose(halves.R.T @ halves.R, whole.R.T @ whole.R, rtol=1e-10, atol=1e-10)
    # the model's step is Newton's on the same objective (Hessian and gradient formed here)
    pen = Penalty(alpha=0.1)
    T = _matrix(scaling, 4)
    x = scaling.to_scaled(params)
    _, g = objective_value_gradient(params, obj, pen, X, y, w)
    H = objective_hessian(params, obj, pen, X, y, w)
    ridge = 0.1 * np.r_[1 / scaling.scale**2, 0.0]
    model = LeastSquaresModel(whole.R, float(w.sum()), ridge)
    implied = whole.R[:, :4].T @ whole.R[:, :4] / w.sum() + np.diag(ridge)  # the model's Hessian
    np.testing.assert_allclose(implied, T.T @ H @ T, rtol=1e-9, atol=1e-12)
    gram = block_scaled_gram(obj, params, X, y, w, scaling) / w.sum() + np.diag(ridge)
    np.testing.assert_allclose(gram, T.T @ H @ T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.step(x), -np.linalg.solve(T.T @ H @ T, T.T @ g), rtol=1e-8, atol=1e-12)


def test_scaled_gram_kept_centred_columns_give_the_same_matrix(monkeypatch):
    """A block centred once and kept in the group's memory gives the Hessian sums of a
    fresh centring, bit for bit, pass after pass; a new centre centres it again; a block
    over the size limit is not kept."""
    from dask_dgd._engine.solvers import curvature

    monkeypatch.setattr(curvature, "GRAM_SLICE_BYTES", 0)  # slices of 256 rows: 4, the last one short
    rng = np.random.default_rng(5)
    X, w = rng.normal(size=(1000, 3)) * [2.0, 1.0, 0.5] + 3.0, rng.uniform(1, 2, 1000)
    y = (rng.random(1000) < 0.4) * 1.0
    obj = LinearObjective(BinaryLogistic(), 3)
    scaling = ColumnScaling(X.mean(axis=0), X.std(axis=0))
    memory: dict = {}
    for params in ([0.1, -0.2, 0.05, 0.3], [0.4, 0.1, -0.3, -0.2]):
        fresh = block_scaled_gram(obj, np.array(params), X, y, w, scaling)
        kept = block_scaled_gram(obj, np.array(params), X, y, w, scaling, memory, ("centred", 0))
        np.testing.assert_array_equal(kept, fresh)
    assert set(memory) == {("centred", 0), curvature._CENTRED_HELD} and memory[("centred", 0)][0] is X
    assert memory[curvature._CENTRED_HELD] == 1000 * 4 * 8  # (3 columns and the intercept's)
    moved = ColumnScaling(X.mean(axis=0) + 1.0, X.std(axis=0))
    np.testing.assert_array_equal(block_scaled_gram(obj, np.array(params), X, y, w, moved, memory, ("centred", 0)),
                                  block_scaled_gram(obj, np.array(params), X, y, w, moved))
    np.testing.assert_array_equal(memory[("centred", 0)][1], moved.mean)
    assert memory[curvature._CENTRED_HELD] == 1000 * 4 * 8  # (replaced, not added)
    monkeypatch.setattr(curvature, "CENTRED_CACHE_BYTES", 8 * 4 * 999)
    other: dict = {}
    block_scaled_gram(obj, np.array(params), X, y, w, scaling, other, ("centred", 0))
    assert other == {}
    # the budget is the group's, all its blocks together: a second block past it is not kept
    monkeypatch.setattr(curvature, "CENTRED_CACHE_BYTES", 8 * 4 * 1500)
    two: dict = {}
    X2 = X[::-1].copy()
    for key, block in ((("centred", 0), X), (("centred", 1), X2)):
        np.testing.assert_array_equal(block_scaled_gram(obj, np.array(params), block, y, w, scaling, two, key),
                                      block_scaled_gram(obj, np.array(params), block, y, w, scaling))
    assert set(two) == {("centred", 0), curvature._CENTRED_HELD} and two[curvature._CENTRED_HELD] == 1000 * 4 * 8


@pytest.mark.parametrize("solver, loss, l1_ratio", [
    ("newton", BinaryLogistic(), 0.0), ("lbfgs", MultinomialLogistic(3), 0.0), ("cd", HalfSquaredError(), 0.5),
])
def test_scaled_fits_reach_the_unscaled_optimum(solver, loss, l1_ratio):
    """The change of variables keeps the penalty in the data's units: the same minimiser."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(800, 4)) * [0.5, 2.0, 1.0, 3.0] + [1.0, -2.0, 0.0, 4.0]
    eta = X @ [0.4, -0.3, 0.2, 0.1]
    y = {"BinaryLogistic": (rng.random(800) < 1 / (1 + np.exp(-eta))) * 1.0,
         "MultinomialLogistic": np.argmax(eta[:, None] * [1, 0, -1] + rng.gumbel(size=(800, 3)), axis=1) * 1.0,
         "HalfSquaredError": eta + rng.normal(size=800)}[type(loss).__name__]
    obj = LinearObjective(loss, 4)
    kw = dict(penalty=Penalty(alpha=0.05, l1_ratio=l1_ratio), solver=solver, tol=1e-10, max_iter=3000)
    scaled = dask_dgd.train(obj, (X, y), **kw)
    with dask.config.set({"dgd.scale-features": False}):
        plain = dask_dgd.train(obj, (X, y), **kw)
    assert scaled.converged and plain.converged
    assert scaled.history.attrs["coordinates"] == "centred and scaled"
    assert plain.history.attrs["coordinates"] == "original"
    np.testing.assert_allclose(scaled.params, plain.params, rtol=1e-7, atol=1e-8)


def test_newton_on_r_factors_resolves_what_the_hessian_cannot():
    """Two columns whose standardised condition is 2e8 (the second differs from the first
    by 1e-8 of its size, and the target depends on that difference): their Hessian's
    condition is 4e16, past float64; the R factors keep the fit accurate to the data's
    own condition."""
    rng = np.random.default_rng(4)
    z = rng.normal(size=(2000, 2))
    X = np.column_stack([z[:, 0], z[:, 0] + 1e-8 * z[:, 1]]) * [1e3, 1e-2] + [5e4, 0.0]
    y = z[:, 0] + 3.0 * z[:, 1] + 0.1 * rng.normal(size=2000)
    mean, std = X.mean(axis=0), X.std(axis=0)
    ref = np.linalg.lstsq(np.c_[(X - mean) / std, np.ones(2000)], y, rcond=None)[0]
    want = (X - mean) / std @ ref[:2] + ref[2]
    est = dask_dgd.LinearRegression().fit(X, y)
    assert np.max(np.abs(X @ est.coef_ + est.intercept_ - want)) <= 1e-6 * np.max(np.abs(want))
    with dask.config.set({"dgd.scale-features": False}):  # Newton on the formed, unscaled Hessian
        bad = dask_dgd.LinearRegression(solver="newton").fit(X, y)
    assert np.max(np.abs(X @ bad.coef_ + bad.intercept_ - want)) > 1e-3 * np.max(np.abs(want))


def test_block_r_factor_takes_the_block_layout():
    b = Block(0, np.ones((3, 2)), np.zeros(3))
    obj = LinearObjective(HalfSquaredError(), 2)
    R = block_r_factor(obj, np.zeros(3), b.X, b.y, None, ColumnScaling(np.zeros(2), np.ones(2)))
    assert R.R.shape == (3, 4)  # fewer rows than columns: the factor of the rows there are


def _near_collinear(seed=4):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(2000, 2))
    X = np.column_stack([z[:, 0], z[:, 0] + 1e-8 * z[:, 1], rng.normal(size=2000)]) * [1e3, 1e-2, 1.0] + [5e4, 0, 3]
    y = (rng.random(2000) < 1 / (1 + np.exp(-(z[:, 0] + 3.0 * z[:, 1])))).astype(np.float64)
    return X, y


def test_the_switch_to_r_factors_is_recorded_and_resumes_from_a_checkpoint(tmp_path):
    from interrupts import Interrupted, StopAt

    X, y = _near_collinear()
    params = dict(alpha=0, tol=1e-6)  # the gradient's rounding level here is about 1e-6
    ref = dask_dgd.LogisticRegression(**params).fit(X, y)
    # the first pass's Hessian is too ill-conditioned: one more pass at the start sends R factors
    assert ref.solver_ == "newton" and ref.history_["iteration"].tolist()[:2] == [0, 0]
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        dask_dgd.LogisticRegression(**params, checkpoint=folder, checkpoint_every=1, callbacks=[StopAt(4)]).fit(X, y)
    resumed = dask_dgd.LogisticRegression(**params, checkpoint=folder, checkpoint_every=1).fit(X, y, resume=True)
    np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=1e-9)
    assert resumed.converged_ and resumed.n_iter_ == ref.n_iter_

"""Alternating least squares (solver="als") for explicit ratings and confidence-weighted
least squares: stationary points of the gradient objective, sharding invariance, the
cluster, checkpoints, the solver's choice and its errors."""

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from interrupts import Interrupted, StopAfter

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.testing import on_array_api_strict


@pytest.fixture(scope="module")
def small():
    ratings, _ = make_ratings(60, 25, 700, rank=2, noise=0.3, random_state=3)
    return ratings.assign(rating=ratings["rating"] - ratings["rating"].min())  # strengths >= 0 for wls


def _dense(model, ratings):
    """The ratings as dense user x item matrices in the model's row order."""
    u = model._user_index.get_indexer(ratings["user"])
    i = model._item_index.get_indexer(ratings["item"])
    R = np.zeros((len(model.user_ids_), len(model.item_ids_)))
    Obs = np.zeros_like(R)
    R[u, i] = ratings["rating"].to_numpy()
    Obs[u, i] = 1.0
    return R, Obs


def _explicit_gradient(mf, ratings):
    """The gradient of MatrixFactorization's objective (its docstring's formula) at the
    fitted factors, computed densely and independently of the kernels."""
    R, Obs = _dense(mf, ratings)
    P, Q, bu, bi = mf.user_factors_, mf.item_factors_, mf.user_bias_, mf.item_bias_
    n_u, n_i, N = Obs.sum(1), Obs.sum(0), Obs.sum()
    E = Obs * (mf.global_mean_ + bu[:, None] + bi[None, :] + P @ Q.T - R)
    a, ab = mf.alpha, mf.alpha if mf.alpha_bias is None else mf.alpha_bias
    gP = 2 * (E @ Q + a * n_u[:, None] * P) / N
    gQ = 2 * (E.T @ P + a * n_i[:, None] * Q) / N
    gbu = 2 * (E.sum(1) + ab * bu) / N  # the biases' penalty: once per user and item
    gbi = 2 * (E.sum(0) + ab * bi) / N
    return np.concatenate([gP.ravel(), gQ.ravel(), gbu, gbi])


def _wls_gradient(mf, ratings):
    """The gradient of confidence-weighted least squares (ImplicitMatrixFactorization's
    docstring) at the fitted factors: sum over *all* pairs of W (P - X)^2, with W = 1 +
    confidence_scale * r on the observed pairs and 1 elsewhere, P = 1 on the observed."""
    R, Obs = _dense(mf, ratings)
    P, Q = mf.user_factors_, mf.item_factors_
    n_u, n_i, N = Obs.sum(1), Obs.sum(0), Obs.sum()
    W = 1.0 + mf.confidence_scale * R * Obs
    G = W * (Obs - P @ Q.T)
    gP = 2 * (-G @ Q + mf.alpha * n_u[:, None] * P) / N
    gQ = 2 * (-G.T @ P + mf.alpha * n_i[:, None] * Q) / N
    return np.concatenate([gP.ravel(), gQ.ravel()])


def _start_gradient(est, ratings, gradient):
    """The gradient at the seeded initial factors (0 iterations: no training)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = est.set_params(solver="gd", optimizer="sgd", learning_rate=1e-300, max_iter=1, tol=0).fit(ratings)
    return np.linalg.norm(gradient(start, ratings))


@pytest.mark.parametrize("kind", ["explicit", "wls"])
def test_als_reaches_a_stationary_point_of_the_gradient_objective(small, kind):
    if kind == "explicit":
        make = lambda: MatrixFactorization(n_components=3, alpha=0.2, alpha_bias=2.0, random_state=0)  # noqa: E731
        gradient = _explicit_gradient
    else:
        make = lambda: ImplicitMatrixFactorization(  # noqa: E731
            n_components=3, loss="wls", alpha=0.2, confidence_scale=2.0, rating_col="rating", random_state=0)
        gradient = _wls_gradient
    mf = make().set_params(solver="als", tol=1e-13, max_iter=1000).fit(small)
    assert mf.solver_ == "als" and mf.n_iter_ < 1000  # stopped on tol
    g = np.linalg.norm(gradient(mf, small))
    assert g < 1e-5 * _start_gradient(make(), small, gradient), g
    # every iteration lowers the objective (CG steps on convex quadratics)
    loss = mf.history_["loss"].to_numpy()
    assert np.all(np.diff(loss) <= 1e-12 * loss[0])
    # the same objective as gradient descent: a long gd fit ends no lower
    gd = make().set_params(solver="gd", max_iter=3000, tol=0, learning_rate=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gd.fit(small)
    assert loss[-1] <= gd.history_["loss"].min() + 1e-9


def test_als_history_counts_iterations_and_steps(small):
    mf = MatrixFactorization(n_components=2, alpha=0.1, solver="als", max_iter=4, tol=0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf.fit(small)
    h = mf.history_
    assert mf.n_iter_ == 4 and len(h) == 4
    assert h["iteration"].tolist() == [0, 1, 2, 3]
    assert h["step"].tolist() == [1, 5, 9, 13]  # a user solve and 3 item CG products per iteration
    assert (h["bytes_down"] > 0).all() and np.isfinite(h["rmse"]).all()


@pytest.mark.parametrize("kind", ["explicit", "wls"])
def test_als_does_not_depend_on_the_sharding_and_runs_on_the_cluster(small, client, kind):
    cls = MatrixFactorization if kind == "explicit" else ImplicitMatrixFactorization
    extra = {} if kind == "explicit" else {"loss": "wls", "alpha": 0.01, "rating_col": "rating"}
    kw = dict(n_components=3, solver="als", max_iter=6, tol=0, random_state=2, **extra)
    fits = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits.append(cls(**kw).fit(small))  # in process
        for n_shards in (2, 3):
            fits.append(cls(n_shards=n_shards, client=client, **kw).fit(dd.from_pandas(small, npartitions=3)))
    ref = fits[0]
    for f in fits[1:]:
        assert f.solver_ == "als"
        np.testing.assert_array_equal(f.user_ids_, ref.user_ids_)
        np.testing.assert_allclose(f.user_factors_, ref.user_factors_, rtol=0, atol=1e-9)
        np.testing.assert_allclose(f.item_factors_, ref.item_factors_, rtol=0, atol=1e-9)
        np.testing.assert_allclose(f.history_["loss"], ref.history_["loss"], rtol=1e-12)
    assert fits[2].shard_ratings_.size == 3


def test_auto_picks_als_where_it_applies(small):
    def solver_of(est, data=small):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return est.set_params(max_iter=2, random_state=0).fit(data).solver_

    assert solver_of(ImplicitMatrixFactorization(n_components=10, loss="wls", alpha=0.01)) == "als"
    assert solver_of(ImplicitMatrixFactorization(n_components=10, loss="bpr", alpha=0.01)) == "gd"
    assert solver_of(ImplicitMatrixFactorization(n_components=10, loss="wls", batch_size=100, alpha=0.01)) == "gd"
    assert solver_of(ImplicitMatrixFactorization(n_components=10, loss="wls", compression="fp16", alpha=0.01)) == "gd"
    assert solver_of(ImplicitMatrixFactorization(n_components=10, loss="wls", mode="local", alpha=0.01)) == "gd"
    assert solver_of(MatrixFactorization()) == "als"
    # a learning rate or an optimizer other than the default asks for gradient steps
    assert solver_of(MatrixFactorization(learning_rate=0.05)) == "gd"
    assert solver_of(MatrixFactorization(optimizer="sgd")) == "gd"
    assert solver_of(MatrixFactorization(optimizer="sgd", solver="als")) == "als"
    # partial_fit takes gradient steps from the factors of an ALS fit
    mf = ImplicitMatrixFactorization(loss="wls", n_components=2, alpha=0.01, max_iter=3, random_state=0).fit(small)
    more = pd.DataFrame({"user": [small["user"].iloc[0], 10_000], "item": [small["item"].iloc[1], 20_000]})
    mf.partial_fit(more)
    assert mf.solver_ == "gd" and mf.user_factors_.shape[0] == small["user"].nunique() + 1


def test_als_on_other_array_namespaces_is_refused_and_auto_falls_back(small, client):
    pairs = on_array_api_strict(da.from_array(small[["user", "item"]].to_numpy(), chunks=(300, 2)))
    y = on_array_api_strict(da.from_array(small["rating"].to_numpy(), chunks=300))
    with pytest.raises(ParameterError, match=r"solver='als' runs on NumPy shards; the ratings' blocks are of another "
                                             r"array namespace \(e.g. CuPy\): use solver='gd' \(or 'auto'\)"):
        MatrixFactorization(solver="als", max_iter=2, client=client).fit(pairs, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf = ImplicitMatrixFactorization(n_components=10, loss="wls", alpha=0.01, max_iter=2, random_state=0,
                                         client=client).fit(pairs, y)
    assert mf.solver_ == "gd"


@pytest.mark.parametrize("kw, message", [
    (dict(loss="bpr"), r"solver='als' trains matrix factorizations whose objective is quadratic in each side's "
                       r"factors \(explicit ratings, or loss='wls'\): loss='bpr' is not a least-squares objective"),
    (dict(loss="wls", batch_size=100), r"solver='als' is full-batch only; drop batch_size"),
    (dict(loss="wls", mode="async"), r"mode='async' takes first-order steps; solver='als' is synchronous only"),
    (dict(loss="wls", compression="sign"), r"compression needs a first-order solver \('gd' or 'sgd'\): "
                                           r"solver='als' relies on exact gradients"),
    (dict(loss="wls", solver="newton"), r"The 'solver' parameter of ImplicitMatrixFactorization must be one of 'als', 'auto', 'gd'; got 'newton'"),
])
def test_als_errors(small, kw, message):
    est = ImplicitMatrixFactorization(**{"solver": "als", "max_iter": 2, **kw})
    with pytest.raises(ParameterError, match=message):
        est.fit(small)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_an_interrupted_als_fit_resumes_to_the_same_factors(small, tmp_path, client):
    kw = dict(n_components=3, loss="wls", alpha=0.01, rating_col="rating", solver="als", max_iter=7, tol=0,
              random_state=4, checkpoint=tmp_path, checkpoint_every=1, client=client)
    whole = ImplicitMatrixFactorization(**{**kw, "checkpoint": None}).fit(small)
    with pytest.raises(Interrupted):
        ImplicitMatrixFactorization(**kw, callbacks=[StopAfter(13)]).fit(small)  # at iteration 4's record
    resumed = ImplicitMatrixFactorization(**kw).fit(small, resume=True)
    np.testing.assert_array_equal(resumed.user_factors_, whole.user_factors_)
    np.testing.assert_array_equal(resumed.item_factors_, whole.item_factors_)
    assert resumed.n_iter_ == 7 and len(resumed.history_) == 7


def test_train_refuses_als_for_a_linear_model():
    from dask_dgd import train
    from dask_dgd.losses import HalfSquaredError, LinearObjective

    X, y = np.ones((10, 2)), np.arange(10.0)
    with pytest.raises(ParameterError, match=r"solver='als' trains matrix factorizations whose objective is quadratic "
                                             r"in each side's factors \(explicit ratings, or loss='wls'\): not "
                                             r"LinearTraining"):
        train(LinearObjective(HalfSquaredError(), 2), (X, y), solver="als")


@pytest.mark.parametrize("kind", ["explicit", "wls"])
def test_users_and_items_on_several_threads_are_those_of_one_thread_bit_for_bit(monkeypatch, kind):
    from dask_dgd.losses import _als

    ratings, _ = make_ratings(500, 80, 9000, rank=3, noise=0.3, random_state=5)
    ratings = ratings.assign(rating=ratings["rating"] - ratings["rating"].min())

    def fit():
        cls = MatrixFactorization if kind == "explicit" else ImplicitMatrixFactorization
        kw = {"loss": "wls"} if kind == "wls" else {}
        return cls(**kw, n_components=4, alpha=0.1, solver="als", max_iter=8, tol=0, random_state=0).fit(ratings)

    monkeypatch.setattr(_als, "kernel_threads", lambda: 1)
    one = fit()
    ranges = []
    real = _als.user_ranges
    monkeypatch.setattr(_als, "user_ranges", lambda uptr, threads: ranges.append(real(uptr, threads)) or ranges[-1])
    monkeypatch.setattr(_als, "MIN_RATINGS_PER_THREAD", 1000)
    monkeypatch.setattr(_als, "kernel_threads", lambda: 3)
    three = fit()
    # three ranges of users (8 user steps), and of items (3 item steps per later iteration), each time
    assert {len(r) for r in ranges} == {4} and len(ranges) == 8 + 7 * 3
    np.testing.assert_array_equal(one.user_factors_, three.user_factors_)
    np.testing.assert_array_equal(one.item_factors_, three.item_factors_)


def test_user_ranges_cut_the_users_by_ratings():
    from dask_dgd.losses._als import MIN_RATINGS_PER_THREAD, user_ranges

    counts = np.array([5, 1, 1, 1, 1, 1, 1, 1] * 10) * MIN_RATINGS_PER_THREAD // 4
    uptr = np.r_[0, np.cumsum(counts)]
    cuts = user_ranges(uptr, 4)
    assert cuts[0] == 0 and cuts[-1] == len(counts) and len(cuts) == 5
    shares = np.diff(uptr[cuts]) / uptr[-1]
    assert np.all(np.abs(shares - 0.25) < 0.05)
    assert user_ranges(uptr[:3], 4) == [0, 2]  # too few ratings for a second thread
    assert user_ranges(uptr, 1) == [0, len(counts)]

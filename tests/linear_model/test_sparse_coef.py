"""``sparse_coef``: coef_ as a SciPy CSR matrix (scikit-learn's ``sparsify``), gathered
from sharded parameters as their non-zero entries only."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

from dask_dgd import LinearRegression, LogisticRegression, train
from dask_dgd._engine.sharded import params as sharding
from dask_dgd.exceptions import ParameterError
from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty

N, D, WIDE = 3000, 2000, 200_000


def _data(classes=None, seed=0):
    """Rows whose non-zero columns lie in the first D of WIDE (a wide hashed model
    whose untouched coefficients stay 0)."""
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.005, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(N, WIDE))
    raw = X[:, :D] @ rng.normal(size=D)
    if classes:
        y = np.digitize(raw + rng.logistic(size=N), np.quantile(raw, np.linspace(0, 1, classes + 1)[1:-1]))
    else:
        y = (raw + rng.logistic(size=N) > 0).astype(float)
    return X, y.astype(float)


def _dask(client, X, y):
    return client.persist([da.from_array(X, chunks=(500, WIDE), asarray=False), da.from_array(y, chunks=500)])


def test_sharded_fit_gathers_only_the_non_zero_entries(client, monkeypatch):
    """The same fit as dense, bit for bit (parameters and optimizer state), each
    owner sending its non-zero entries only."""
    X, y = _dask(client, *_data())
    obj = LinearObjective(BinaryLogistic(), n_features=WIDE)
    kw = dict(penalty=Penalty(alpha=1e-3), solver="sgd", batch_size=500, max_iter=2, optimizer="adam",
              param_sharding=True, client=client, random_state=0)
    dense = train(obj, (X, y), **kw)
    got = train(obj, (X, y), sparse_params=True, **kw)
    assert sp.isspmatrix_csr(got.params) and got.params.shape == (1, WIDE + 1)
    assert 0 < got.params.nnz <= D + 1  # the touched columns and the intercept
    np.testing.assert_array_equal(got.params.toarray().ravel(), dense.params)
    for field in dense.opt_state._fields:
        value = getattr(got.opt_state, field)
        if isinstance(getattr(dense.opt_state, field), np.ndarray):
            assert sp.issparse(value) and value.nnz <= D + 1
            value = value.toarray().ravel()
        np.testing.assert_array_equal(value, getattr(dense.opt_state, field))


@pytest.mark.parametrize("classes", [None, 3])
def test_estimator_with_sparse_coef_predicts_as_the_dense_one(client, classes):
    X, y = _data(classes)
    Xd, yd = _dask(client, X, y)
    kw = dict(solver="gd", max_iter=5, alpha=1e-3, param_sharding=True, client=client)
    dense = LogisticRegression(**kw).fit(Xd, yd)
    est = LogisticRegression(sparse_coef=True, **kw).fit(Xd, yd)
    k = 1 if classes is None else classes
    assert sp.isspmatrix_csr(est.coef_) and est.coef_.shape == (k, WIDE)
    np.testing.assert_array_equal(est.coef_.toarray(), np.atleast_2d(dense.coef_))
    np.testing.assert_array_equal(est.intercept_, dense.intercept_)
    np.testing.assert_allclose(est.predict_proba(X), dense.predict_proba(X), rtol=1e-12)
    np.testing.assert_array_equal(client.compute(est.predict(Xd), sync=True), dense.predict(X))
    assert est.score(X, y) == dense.score(X, y)


def test_partial_fit_and_warm_start_continue_from_a_sparse_coef(client):
    X, y = _data()
    Xd, yd = _dask(client, X, y)
    kw = dict(solver="sgd", batch_size=500, alpha=1e-3, optimizer="adam", param_sharding=True, client=client,
              random_state=0)
    fits = {}
    for sparse in (False, True):
        est = LogisticRegression(sparse_coef=sparse, **kw)
        est.partial_fit(Xd, yd, classes=[0.0, 1.0]).partial_fit(Xd, yd)
        fits[sparse] = est
    state = fits[True]._opt_state_  # continued by the second call: expanded by each owner
    assert sp.issparse(fits[True].coef_) and all(sp.issparse(v) for v in state if not np.isscalar(v))
    np.testing.assert_array_equal(fits[True].coef_.toarray().ravel(), np.ravel(fits[False].coef_))
    # warm start from the sparse coefficients: expanded by each owner
    warm = LogisticRegression(solver="gd", max_iter=3, alpha=1e-3, param_sharding=True, client=client,
                              sparse_coef=True, warm_start=True)
    warm.coef_, warm.intercept_ = fits[True].coef_, fits[True].intercept_
    warm.fit(Xd, yd)
    cold = LogisticRegression(solver="gd", max_iter=3, alpha=1e-3, param_sharding=True, client=client,
                              warm_start=True)
    cold.coef_, cold.intercept_ = np.ravel(fits[False].coef_).reshape(1, -1), fits[False].intercept_
    cold.fit(Xd, yd)
    np.testing.assert_array_equal(warm.coef_.toarray(), np.atleast_2d(cold.coef_))


def test_in_process_sparsify_densify_and_save(tmp_path):
    X, y = _data()
    X, y = X[:, :D], X[:, :D] @ np.arange(D) / D
    est = LinearRegression(solver="gd", max_iter=5, sparse_coef=True).fit(X, y)
    dense = LinearRegression(solver="gd", max_iter=5).fit(X, y)
    assert sp.isspmatrix_csr(est.coef_) and est.coef_.shape == (1, D)
    np.testing.assert_array_equal(est.coef_.toarray().ravel(), dense.coef_)
    np.testing.assert_allclose(est.predict(X), dense.predict(X), rtol=1e-12)
    np.testing.assert_allclose(est.predict(X.toarray()), dense.predict(X), rtol=1e-12)
    loaded = LinearRegression.load(est.save(tmp_path / "model.npz"))  # the CSR coef_ is stored as such
    assert sp.isspmatrix_csr(loaded.coef_) and (loaded.coef_ != est.coef_).nnz == 0 and loaded.sparse_coef
    assert est.densify() is est and isinstance(est.coef_, np.ndarray)
    np.testing.assert_array_equal(est.coef_, dense.coef_)
    assert dense.sparsify() is dense and sp.issparse(dense.coef_)
    np.testing.assert_array_equal(dense.predict(X), est.predict(X))
    with pytest.raises(NotFittedError):
        LinearRegression().sparsify()


def test_a_bad_sparse_coef_is_refused():
    X, y = _data()
    with pytest.raises(ParameterError, match=r"The 'sparse_coef' parameter of LogisticRegression must be an "
                                             r"instance of bool; got 'yes'"):
        LogisticRegression(sparse_coef="yes").fit(X[:, :D], y)


def test_the_sparse_gather_sends_non_zero_chunks_only(monkeypatch):
    """In process: the owner's answers to a sparse gather are (indices, values) of
    its non-zero entries, never its dense slice."""
    calls = []
    real = sharding.sharded_slice

    def spy(shard, scratch, which, field=None, start=0, nonzero=False):
        out = real(shard, scratch, which, field, start, nonzero)
        calls.append((field, out))
        return out

    from dask_dgd._engine.sharded import driver as sharded

    monkeypatch.setattr(sharded, "sharded_slice", spy)
    X, y = _data()
    obj = LinearObjective(BinaryLogistic(), n_features=WIDE)
    res = train(obj, (X, y), penalty=Penalty(alpha=1e-3), solver="gd", max_iter=2, param_sharding=True,
                sparse_params=True)
    chunks = [(f, c) for f, c in calls if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], np.ndarray)]
    assert chunks and not any(isinstance(c, np.ndarray) for _, c in calls)  # no dense slice answered
    assert all(np.all(c[1] != 0) for _, c in chunks)
    assert res.params.nnz == sum(c[1].size for f, c in chunks if f is None) <= D + 1

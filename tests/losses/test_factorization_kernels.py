"""Matrix-factorization kernels: gradients against finite differences, and the full
objective of a fit against a NumPy formula."""

import warnings

import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd._engine.factorization import init_rows
from dask_dgd.losses import _factorization as K
from dask_dgd.optim import SGD

RNG = np.random.default_rng(0)
NU, NI, RANK, N = 5, 7, 3, 20


def _ratings():
    lu = RNG.integers(0, NU, N).astype(np.int32)
    gi = RNG.integers(0, NI, N).astype(np.int32)
    order = np.lexsort((gi, lu))
    lu, gi = lu[order], gi[order]
    key = lu.astype(np.uint64) * np.uint64(NI) + gi.astype(np.uint64)
    uptr = np.searchsorted(lu, np.arange(NU + 1)).astype(np.int64)
    return lu, gi, RNG.normal(3, 1, N), key, uptr, np.arange(N, dtype=np.int64)


LU, GI, R, KEY, UPTR, ROWS = _ratings()
KERNELS = {
    "explicit": (RANK + 1, RANK + 1, lambda U, V, gU, gV, t: K.explicit_sums(LU, GI, R, ROWS, U, V, 3.0, 0.1, 0.05, gU, gV, t)),
    "bpr": (RANK, RANK + 1, lambda U, V, gU, gV, t: K.bpr_sums(LU, GI, KEY, UPTR, ROWS, U, V, 0.1, 0.05, 7, 3, gU, gV, t)),
    "wls": (RANK, RANK, lambda U, V, gU, gV, t: K.wls_sums(LU, GI, np.abs(R), ROWS, U, V, 0.1, 2.0, gU, gV, t)),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_gradients_match_finite_differences(name):
    uw, vw, fn = KERNELS[name]
    U = RNG.normal(0, 0.3, (NU, uw))
    V = RNG.normal(0, 0.3, (NI, vw))

    def run(U, V):
        gU, gV, touched = np.zeros_like(U), np.zeros_like(V), np.zeros(NI, dtype=bool)
        loss, _ = fn(U, V, gU, gV, touched)
        return loss, gU, gV, touched

    loss, gU, gV, touched = run(U, V)
    eps = 1e-6
    for which, (A, G) in enumerate(((U, gU), (V, gV))):
        for idx in np.ndindex(A.shape):
            plus, minus = A.copy(), A.copy()
            plus[idx] += eps
            minus[idx] -= eps
            lp = run(plus, V)[0] if which == 0 else run(U, plus)[0]
            lm = run(minus, V)[0] if which == 0 else run(U, minus)[0]
            assert (lp - lm) / (2 * eps) == pytest.approx(G[idx], abs=1e-6)
    # the flagged rows are exactly the rows with a gradient
    assert set(np.flatnonzero(touched)) >= set(np.flatnonzero(np.any(gV != 0, axis=1)))


def test_bpr_negatives_avoid_rated_items_and_batches_are_a_partition():
    buckets = K.batch_buckets(KEY, 1, 0, 4)
    assert buckets.min() >= 0 and buckets.max() <= 3
    np.testing.assert_array_equal(buckets, K.batch_buckets(KEY.copy(), 1, 0, 4))  # deterministic
    assert not np.array_equal(buckets, K.batch_buckets(KEY, 1, 1, 4))  # another epoch, other batches
    # one user who rated items 0, 1, 2 of 7: every negative must be one of 3..6
    lu = np.zeros(3, dtype=np.int32)
    gi = np.array([0, 1, 2], dtype=np.int32)
    key = gi.astype(np.uint64)
    uptr = np.array([0, 3], dtype=np.int64)
    U1, V0 = np.zeros((1, RANK)), np.zeros((NI, RANK + 1))  # every score 0: sigmoid = 1/2
    for step in range(20):
        gU, gV, touched = np.zeros_like(U1), np.zeros_like(V0), np.zeros(NI, dtype=bool)
        K.bpr_sums(lu, gi, key, uptr, np.arange(3), U1, V0, 0.0, 0.0, 7, step, gU, gV, touched)
        # each positive got exactly -1/2: no rated item was drawn as a negative
        np.testing.assert_allclose(gV[[0, 1, 2], -1], -0.5)
        assert gV[3:, -1].sum() == pytest.approx(1.5)


def test_fit_takes_exactly_the_objective_gradient_step():
    """One SGD step with learning rate 1 from the seeded start moves every parameter by
    minus the gradient of the documented objective (explicit and weighted least squares)."""
    rng = np.random.default_rng(0)
    pairs = pd.DataFrame({"user": rng.integers(0, 6, 25), "item": rng.integers(0, 5, 25)}).drop_duplicates()
    pairs["rating"] = rng.uniform(1, 5, len(pairs))
    u, i, r = pairs["user"].to_numpy(), pairs["item"].to_numpy(), pairs["rating"].to_numpy()
    n, k, seed, alpha, alpha_b, conf = len(pairs), 2, 3, 0.1, 0.05, 0.7

    def explicit(th):
        U = th[: 6 * (k + 1)].reshape(6, k + 1)
        V = th[6 * (k + 1):].reshape(5, k + 1)
        pred = r.mean() + U[u, k] + V[i, k] + np.einsum("ij,ij->i", U[u, :k], V[i, :k])
        return np.mean((pred - r) ** 2 + alpha * ((U[u, :k] ** 2).sum(1) + (V[i, :k] ** 2).sum(1))
                       + alpha_b * (U[u, k] ** 2 + V[i, k] ** 2))

    def wls(th):
        U = th[: 6 * k].reshape(6, k)
        V = th[6 * k:].reshape(5, k)
        x = np.einsum("ij,ij->i", U[u], V[i])
        c = 1 + conf * r
        return (np.sum((U @ V.T) ** 2) + np.sum(c * (1 - x) ** 2 - x ** 2
                                                + alpha * ((U[u] ** 2).sum(1) + (V[i] ** 2).sum(1)))) / n

    cases = [
        (MatrixFactorization(n_components=k, alpha=alpha, alpha_bias=alpha_b, optimizer=SGD(1.0), max_iter=1,
                             tol=0, random_state=seed), explicit, k + 1, k + 1),
        (ImplicitMatrixFactorization(n_components=k, loss="wls", alpha=alpha, confidence_scale=conf,
                                     rating_col="rating", optimizer="sgd", learning_rate=1.0, max_iter=1, tol=0,
                                     random_state=seed), wls, k, k),
    ]
    for est, objective, uw, vw in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(pairs)
        U0 = init_rows(seed, np.arange(6), uw, 0.1, uw == k + 1)
        V0 = init_rows(seed + 1, np.arange(5), vw, 0.1, vw == k + 1)
        th = np.concatenate([U0.ravel(), V0.ravel()])
        grad = np.array([(objective(th + 1e-6 * e) - objective(th - 1e-6 * e)) / 2e-6 for e in np.eye(th.size)])
        U1 = est._user_table()
        V1 = est._item_table()
        moved = th - np.concatenate([U1.ravel(), V1.ravel()])
        np.testing.assert_allclose(moved, grad, atol=1e-7)
        assert est.loss_curve_[0] == pytest.approx(objective(th), rel=1e-12)

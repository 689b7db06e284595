"""Matrix-factorization kernels: gradients against finite differences, the full
objective of a fit against a NumPy formula, and the array-API versions (on
``array_api_strict`` arrays on a device of their own) against the Numba ones."""

import warnings

import array_api_compat
import array_api_strict as xps
import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd._backend import to_numpy
from dask_dgd.losses import _factorization as K
from dask_dgd.optim import SGD
from dask_dgd.recommender._shards import init_rows
from dask_dgd.testing import STRICT_DEVICE

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
    minus the gradient of the documented objective (weighted least squares), or, for
    explicit ratings, whose gradient steps are taken in units of the ratings' standard
    deviation ``s`` (factors over ``sqrt(s)``, biases over ``s``), by minus that
    gradient times ``s`` (factors) and ``s**2`` (biases): the chain rule twice."""
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
        # explicit ratings: the documented start, init_scale times the fourth root of their variance
        scale = 0.1 * np.var(r) ** 0.25 if uw == k + 1 else 0.1
        U0 = init_rows(seed, np.arange(6), uw, scale, uw == k + 1)
        V0 = init_rows(seed + 1, np.arange(5), vw, scale, vw == k + 1)
        th = np.concatenate([U0.ravel(), V0.ravel()])
        grad = np.array([(objective(th + 1e-6 * e) - objective(th - 1e-6 * e)) / 2e-6 for e in np.eye(th.size)])
        U1 = est._user_table()
        V1 = est._item_table()
        moved = th - np.concatenate([U1.ravel(), V1.ravel()])
        if uw == k + 1:  # the steps' units, squared: s on the factor columns, s**2 on the biases'
            sd = np.std(r)
            units = np.array([sd] * k + [sd * sd])
            grad = grad * np.concatenate([np.tile(units, 6), np.tile(units, 5)])
            assert est._step_unit_ == pytest.approx(sd, rel=1e-12)
        np.testing.assert_allclose(moved, grad, atol=1e-7)
        assert est.loss_curve_[0] == pytest.approx(objective(th), rel=1e-12)


# ------------------------------------------------- array-API versions = Numba versions
DEVICE = xps.Device(STRICT_DEVICE)


def strict(a):
    """A NumPy array as an array_api_strict array on the test device (a copy)."""
    return xps.asarray(np.array(a), device=DEVICE)


def on_device(a):
    """Whether ``a`` is an array_api_strict array on the test device."""
    return array_api_compat.is_array_api_strict_namespace(array_api_compat.array_namespace(a)) and a.device == DEVICE


def _shard(seed=1, n_users=30, n_items=40, n=300):
    """A shard's ratings sorted by (user, item): a user who rated all items but one
    (most negatives drawn for it need redraws), a duplicated pair, users without
    ratings, global user ids unlike the local ones."""
    rng = np.random.default_rng(seed)
    lu = np.concatenate([np.zeros(n_items - 1, int), rng.integers(1, n_users - 3, n), [5]])
    gi = np.concatenate([np.arange(1, n_items), rng.integers(0, n_items, n), [0]])
    pairs = np.unique(np.stack([lu, gi], 1), axis=0)
    pairs = np.vstack([pairs, pairs[pairs[:, 0] == 5][:1]])  # one (user, item) twice
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    lu, gi = pairs[:, 0].astype(np.int32), pairs[:, 1].astype(np.int32)
    users = np.arange(n_users) * 3 + 7  # the shard's global user ids
    key = users[lu].astype(np.uint64) * np.uint64(n_items) + gi.astype(np.uint64)
    uptr = np.searchsorted(lu, np.arange(n_users + 1)).astype(np.int64)
    assert np.all(key[1:] >= key[:-1])
    return {"lu": lu, "gi": gi, "r": rng.uniform(0.5, 5, lu.size), "key": key, "uptr": uptr,
            "n_users": n_users, "n_items": n_items}


SHARD = _shard()


def _rows(which):
    n = SHARD["lu"].size
    if which == "all":
        return np.arange(n, dtype=np.int64)
    if which == "batch":  # a mini-batch: increasing rows, as the engine passes them
        return np.flatnonzero(K.batch_buckets(SHARD["key"], 3, 1, 8) == 1).astype(np.int64)
    if which == "shuffled":  # any order is allowed
        return np.random.default_rng(3).permutation(n).astype(np.int64)
    return np.zeros(0, dtype=np.int64)


def _call(kind, conv, rows, U, V, gU, gV, touched):
    sh = {name: conv(SHARD[name]) for name in ("lu", "gi", "r", "key", "uptr")}
    rows = conv(rows)
    if kind in ("explicit", "biases only"):
        return K.explicit_sums(sh["lu"], sh["gi"], sh["r"], rows, U, V, 3.1, 0.1, 0.05, gU, gV, touched)
    if kind == "bpr":
        return K.bpr_sums(sh["lu"], sh["gi"], sh["key"], sh["uptr"], rows, U, V, 0.1, 0.05, 11, 4, gU, gV, touched)
    return K.wls_sums(sh["lu"], sh["gi"], sh["r"], rows, U, V, 0.1, 0.7, gU, gV, touched)


WIDTHS = {"explicit": (4, 4), "biases only": (1, 1), "bpr": (3, 4), "wls": (3, 3)}


def _run(kind, conv, rows, U, V):
    """The kernel's sums and its gradients added to non-zero starting values."""
    gU, gV = conv(np.full(U.shape, 0.25)), conv(np.full(V.shape, -0.5))
    touched0 = np.zeros(V.shape[0], dtype=bool)
    touched0[0] = True  # flags are or-ed in
    touched = conv(touched0)
    loss, sq = _call(kind, conv, rows, conv(U), conv(V), gU, gV, touched)
    return loss, sq, gU, gV, touched


@pytest.mark.parametrize("which", ["all", "batch", "shuffled", "empty"])
@pytest.mark.parametrize("kind", sorted(WIDTHS))
def test_array_api_kernels_equal_numba(kind, which):
    rng = np.random.default_rng(5)
    uw, vw = WIDTHS[kind]
    U = rng.normal(0, 0.5, (SHARD["n_users"], uw))
    V = rng.normal(0, 0.5, (SHARD["n_items"], vw))
    rows = _rows(which)
    want = _run(kind, lambda a: a, rows, U, V)
    got = _run(kind, strict, rows, U, V)
    for g in got[2:]:  # added in place, on the device
        assert on_device(g)
    assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
    assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-12)
    for w, g in zip(want[2:4], got[2:4]):
        g = to_numpy(g)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * np.abs(w).max())
    np.testing.assert_array_equal(to_numpy(got[4]), want[4])
    if which == "empty":
        assert want[0] == 0.0 and np.all(want[2] == 0.25) and np.all(want[3] == -0.5)
    else:
        assert np.count_nonzero(want[4]) > 1 and np.any(want[3] != -0.5)
    if which == "batch":  # some items untouched
        assert not want[4].all()


def test_array_api_bpr_draws_the_numba_negatives():
    """With every score 0 the gradient of an item's bias is +1/2 per time it was drawn
    as a negative and -1/2 per observed pair: the counts of the draws agree, and the
    user who rated all items but item 0 gets item 0 as often as the redraws make it."""
    n_items = SHARD["n_items"]
    U, V = np.zeros((SHARD["n_users"], 2)), np.zeros((n_items, 3))
    rows = _rows("all")
    for step in range(5):
        draws = []
        for conv in (lambda a: a, strict):
            gU, gV, touched = conv(np.zeros_like(U)), conv(np.zeros_like(V)), conv(np.zeros(n_items, dtype=bool))
            sh = {name: conv(SHARD[name]) for name in ("lu", "gi", "key", "uptr")}
            K.bpr_sums(sh["lu"], sh["gi"], sh["key"], sh["uptr"], conv(rows), conv(U), conv(V), 0.0, 0.0, 2, step,
                       gU, gV, touched)
            bias = to_numpy(gV)[:, -1]
            draws.append(bias + 0.5 * np.bincount(SHARD["gi"], minlength=n_items))  # (times drawn) / 2
        np.testing.assert_array_equal(draws[1], draws[0])
    # the user who rated all items but item 0, over 10 steps: a negative is item 0 unless
    # the first draw and all 8 redraws hit rated items (p = (39/40)**9 = 0.80), so item 0
    # is drawn about 80 times of 390 (about 10 without redraws)
    dense = strict(np.arange(n_items - 1, dtype=np.int64))
    sh = {name: strict(SHARD[name]) for name in ("lu", "gi", "key", "uptr")}
    drawn = 0.0
    for step in range(10):
        gV = strict(np.zeros_like(V))
        K.bpr_sums(sh["lu"], sh["gi"], sh["key"], sh["uptr"], dense, strict(U), strict(V), 0.0, 0.0, 2, step,
                   strict(np.zeros_like(U)), gV, strict(np.zeros(n_items, dtype=bool)))
        drawn += 2 * float(to_numpy(gV)[0, -1])
    assert 50 <= drawn <= 110


@pytest.mark.parametrize("seed, epoch, n_buckets", [(0, 0, 1), (1, 0, 4), (2**31 - 1, 17, 7), (12345, 3, 1000)])
def test_array_api_buckets_equal_numba(seed, epoch, n_buckets):
    key = np.concatenate([SHARD["key"], np.array([0, 2**63, 2**64 - 1], dtype=np.uint64)])
    want = K.batch_buckets(key, seed, epoch, n_buckets)
    got = K.batch_buckets(strict(key), seed, epoch, n_buckets)
    assert on_device(got) and got.dtype == xps.int64
    np.testing.assert_array_equal(to_numpy(got), want)
    assert n_buckets == 1 or np.unique(want).size > 1


def test_array_api_all_pairs_equal_numpy():
    rng = np.random.default_rng(2)
    P, G = rng.normal(size=(9, 3)), rng.normal(size=(3, 3))
    G = G @ G.T
    want = K.wls_all_pairs(P, G, 0.5)
    got = K.wls_all_pairs(strict(P), strict(G), 0.5)
    assert isinstance(got[0], float) and got[0] == pytest.approx(want[0], rel=1e-13)
    assert on_device(got[1])
    np.testing.assert_allclose(to_numpy(got[1]), want[1], rtol=1e-13)


def test_array_api_kernels_refuse_mixed_arrays():
    """A parameter left in NumPy, or on another device, is an error, not a silent copy."""
    U, V = np.zeros((SHARD["n_users"], 4)), np.zeros((SHARD["n_items"], 4))
    rows = _rows("all")
    with pytest.raises(TypeError):
        _call("explicit", strict, rows, strict(U), V, strict(U), strict(V), strict(np.zeros(V.shape[0], bool)))
    other = xps.asarray(V, device=xps.Device("CPU_DEVICE"))
    with pytest.raises(ValueError):
        _call("explicit", strict, rows, strict(U), other, strict(U), strict(V), strict(np.zeros(V.shape[0], bool)))

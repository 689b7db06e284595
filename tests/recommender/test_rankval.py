"""The held-out ranking of an implicit model on rating shards (``_rankval``), against a
brute-force computation user by user with :func:`dask_dgd.recommender.ndcg_at_k`."""

import math

import numpy as np
import pytest

from dask_dgd.recommender import _rankval, ndcg_at_k
from dask_dgd.recommender._rankval import ranking_sums, summarise, val_rate, val_users
from dask_dgd.recommender._shards import make_rating_shard

N_USERS, N_ITEMS, K = 60, 40, 10


def _pairs(seed=0):
    """Unique (user, item) pairs: most users rate a few items, some rate one (nothing
    held out), some nearly all (fewer unseen items than K)."""
    rng = np.random.default_rng(seed)
    u, i = [], []
    for user in range(N_USERS):
        n = 1 if user % 7 == 0 else (N_ITEMS if user % 11 == 1 else int(rng.integers(2, 15)))
        items = rng.choice(N_ITEMS, size=n, replace=False)
        u.append(np.full(n, user))
        i.append(items)
    u, i = np.concatenate(u).astype(np.int64), np.concatenate(i).astype(np.int32)
    return u, i, np.ones(u.size)


def _shards(n_shards=2, seed=0, fraction=0.15):
    u, i, r = _pairs(seed)
    return [make_rating_shard(s, N_ITEMS, None, (seed, fraction), (u[u % n_shards == s], i[u % n_shards == s],
                                                                   r[u % n_shards == s]))
            for s in range(n_shards)]


def _model(seed=0, rank=3):
    """Integer factors and biases: many scores tie exactly."""
    rng = np.random.default_rng(seed + 100)
    U = rng.integers(-1, 2, size=(N_USERS, rank)).astype(float)
    V = rng.integers(-1, 2, size=(N_ITEMS, rank)).astype(float)
    bias = rng.integers(0, 2, size=N_ITEMS).astype(float)
    return U, V, bias


def _popularity(shards):
    return sum(np.bincount(s.gi, minlength=N_ITEMS) for s in shards)


def _ranked(scores, seen, k):
    """One user's top ``k`` unseen items, best first, ties by item index; None pads."""
    order = np.lexsort((np.arange(scores.size), -scores))
    order = [j for j in order if j not in seen][:k]
    return order + [None] * (k - len(order))


def _brute(shards, U, V, bias, popularity, k=K, keep=None):
    """Per-user NDCG@k of the model and of popularity, over the users with a held-out
    pair (``keep``: a set of global users to restrict to)."""
    model, pop = [], []
    for shard in shards:
        for lu, g in enumerate(shard.users):
            relevant = set(shard.val[1][shard.val[0] == lu].tolist())
            if not relevant or (keep is not None and g not in keep):
                continue
            seen = set(shard.gi[shard.uptr[lu]:shard.uptr[lu + 1]].tolist())
            s = U[g] @ V.T + (0.0 if bias is None else bias)
            model.append(ndcg_at_k([relevant], [_ranked(s, seen, k)], k))
            pop.append(ndcg_at_k([relevant], [_ranked(popularity.astype(float), seen, k)], k))
    return np.array(model), np.array(pop)


def _total(sums):
    return {key: sum(s[key] for s in sums) for key in ("n", "ndcg", "pop", "d", "d2")}


def _check_against(total, model, pop):
    d = model - pop
    assert total["n"] == model.size
    assert total["ndcg"] == pytest.approx(model.sum(), abs=1e-12)
    assert total["pop"] == pytest.approx(pop.sum(), abs=1e-12)
    assert total["d"] == pytest.approx(d.sum(), abs=1e-12)
    assert total["d2"] == pytest.approx(d @ d, abs=1e-12)


def test_data_has_the_cases():
    """The generated shards hold users without a held-out pair, users with fewer unseen
    items than K, and tied scores (else the tests below would not cover them)."""
    shards = _shards()
    users = sum(s.users.size for s in shards)
    assert 0 < sum(val_users(s) for s in shards) < users
    unseen = np.concatenate([N_ITEMS - np.diff(s.uptr) for s in shards])
    assert (unseen < K).any()
    U, V, _ = _model()
    assert np.unique(U[0] @ V.T).size < N_ITEMS


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranking_sums_match_brute_force(seed, with_bias):
    shards = _shards(seed=seed)
    U, V, bias = _model(seed)
    bias = bias if with_bias else None
    popularity = _popularity(shards)
    sums = [ranking_sums(s, U, V, bias, popularity) for s in shards]
    model, pop = _brute(shards, U, V, bias, popularity)
    assert model.size > 10 and np.any(model != pop)
    _check_against(_total(sums), model, pop)


def test_k_larger_than_the_items():
    shards = _shards()
    U, V, bias = _model()
    popularity = _popularity(shards)
    sums = [ranking_sums(s, U, V, bias, popularity, k=N_ITEMS + 5) for s in shards]
    _check_against(_total(sums), *_brute(shards, U, V, bias, popularity, k=N_ITEMS + 5))


def test_no_held_out_rows():
    u, i, r = _pairs()
    shard = make_rating_shard(0, N_ITEMS, None, None, (u, i, r))
    U, V, bias = _model()
    assert val_users(shard) == 0
    assert ranking_sums(shard, U, V, bias, np.ones(N_ITEMS)) == {"n": 0, "ndcg": 0.0, "pop": 0.0, "d": 0.0,
                                                                 "d2": 0.0}


@pytest.mark.parametrize("block_bytes", [1, 8 * N_ITEMS * 3, 8 * N_ITEMS * 7 + 5])
def test_blocks_of_users_give_the_same_sums(monkeypatch, block_bytes):
    """One user per block, three, seven (with a remainder): the same sums as one block."""
    shards = _shards()
    U, V, bias = _model()
    popularity = _popularity(shards)
    whole = [ranking_sums(s, U, V, bias, popularity) for s in shards]
    monkeypatch.setattr(_rankval, "BLOCK_BYTES", block_bytes)
    blocked = [ranking_sums(s, U, V, bias, popularity) for s in shards]
    for a, b in zip(whole, blocked):
        assert a["n"] == b["n"]
        for key in ("ndcg", "pop", "d", "d2"):
            assert a[key] == pytest.approx(b[key], abs=1e-12)


def test_sampled_users_reproducible_and_independent_of_sharding():
    U, V, bias = _model()
    two, one = _shards(2), _shards(1)
    popularity = _popularity(two)
    all_users = sum(val_users(s) for s in two)
    a = _total([ranking_sums(s, U, V, bias, popularity, rate=0.5, seed=3) for s in two])
    b = _total([ranking_sums(s, U, V, bias, popularity, rate=0.5, seed=3) for s in two])
    c = _total([ranking_sums(s, U, V, bias, popularity, rate=0.5, seed=3) for s in one])
    other = _total([ranking_sums(s, U, V, bias, popularity, rate=0.5, seed=4) for s in two])
    assert a == b
    assert a["n"] == c["n"] and a["ndcg"] == pytest.approx(c["ndcg"], abs=1e-12)
    assert 0 < a["n"] < all_users
    assert (a["n"], a["ndcg"]) != (other["n"], other["ndcg"])
    # the sums are the brute force's over the users the hash keeps
    kept = {int(g) for s in two for g in s.users[_rankval._sampled(s.users, 0.5, 3)]}
    _check_against(a, *_brute(two, U, V, bias, popularity, keep=kept))


def test_val_rate_keeps_about_val_max_users():
    assert val_rate(0) == 1.0
    assert val_rate(_rankval.VAL_MAX_USERS) == 1.0
    assert val_rate(4 * _rankval.VAL_MAX_USERS) == pytest.approx(0.25)
    n = 200_000
    kept = _rankval._sampled(np.arange(n), val_rate(n), seed=0).sum()
    assert abs(kept - _rankval.VAL_MAX_USERS) < 5 * math.sqrt(_rankval.VAL_MAX_USERS)


def test_summarise_means_and_standard_error():
    rng = np.random.default_rng(0)
    model, pop = rng.uniform(size=50), rng.uniform(size=50)
    d = model - pop
    parts = [slice(0, 20), slice(20, 21), slice(21, 50)]
    sums = [{"n": model[p].size, "ndcg": model[p].sum(), "pop": pop[p].sum(), "d": d[p].sum(),
             "d2": d[p] @ d[p]} for p in parts]
    out = summarise(sums + [{"n": 0, "ndcg": 0.0, "pop": 0.0, "d": 0.0, "d2": 0.0}])
    assert out["n_users"] == 50
    assert out["val_ndcg"] == pytest.approx(model.mean())
    assert out["val_pop_ndcg"] == pytest.approx(pop.mean())
    assert out["val_gain"] == pytest.approx(d.mean())
    assert out["val_gain_se"] == pytest.approx(d.std(ddof=1) / math.sqrt(d.size))


def test_summarise_of_no_users_is_nan():
    out = summarise([{"n": 0, "ndcg": 0.0, "pop": 0.0, "d": 0.0, "d2": 0.0}])
    assert out["n_users"] == 0
    assert all(math.isnan(out[key]) for key in ("val_ndcg", "val_pop_ndcg", "val_gain", "val_gain_se"))


def test_summarise_of_one_user_has_infinite_standard_error():
    # one user: no spread to estimate, so the guard val_gain > 2 * se cannot pass
    one = [{"n": 1, "ndcg": 0.9, "pop": 0.1, "d": 0.8, "d2": 0.64}, {"n": 0, "ndcg": 0.0, "pop": 0.0, "d": 0.0,
                                                                     "d2": 0.0}]
    out = summarise(one)
    assert out["n_users"] == 1
    assert out["val_gain"] == pytest.approx(0.8)
    assert out["val_gain_se"] == math.inf
    assert not out["val_gain"] > 2 * out["val_gain_se"]
    two = summarise([{"n": 2, "ndcg": 1.0, "pop": 0.0, "d": 1.0, "d2": 0.5}])
    assert math.isfinite(two["val_gain_se"])


def test_top_k_ranks_nan_last():
    s = np.array([[0.5, np.nan, 2.0, 1.0, np.nan], [1.0, 1.0, 0.0, -1.0, 3.0]])
    top, scores = _rankval.top_k(s, 4)
    np.testing.assert_array_equal(top, [[2, 3, 0, 1], [4, 0, 1, 2]])
    np.testing.assert_array_equal(scores, [[2.0, 1.0, 0.5, np.nan], [3.0, 1.0, 1.0, 0.0]])
    top, _ = _rankval.top_k(np.full((1, 3), np.nan), 2)  # all NaN: by column index
    np.testing.assert_array_equal(top, [[0, 1]])


@pytest.mark.parametrize("k", [7, 12])
def test_recommend_with_a_nan_item_factor_ranks_that_item_last(k):
    import warnings

    from dask_dgd import ImplicitMatrixFactorization
    from dask_dgd.datasets import make_ratings

    r, _ = make_ratings(30, 12, 200, implicit=True, random_state=3)
    est = ImplicitMatrixFactorization(loss="wls", n_components=3, alpha=0.01, max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(r[["user", "item"]])
    finite = est.recommend([r["user"].iloc[0]], k=12, exclude_seen=False)[0]  # every item
    est.item_factors_[int(finite[0, 0])] = np.nan  # the best item's scores become NaN
    items, scores = est.recommend([r["user"].iloc[0]], k=k, exclude_seen=False)
    expected = list(finite[0, 1:]) + [finite[0, 0]]
    assert list(items[0]) == expected[:k]
    assert np.isfinite(np.asarray(scores[0][: min(k, 11)], dtype=float)).all()
    if k == 12:
        assert np.isnan(scores[0, -1])

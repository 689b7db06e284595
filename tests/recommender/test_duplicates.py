"""Duplicate (user, item) rows and rating columns of implicit models (issue 49, items 3 and 4).

A pair given on several rows is merged into one by the ``duplicates`` policy, in fit,
partial_fit and fold-in alike, and said: a fit on ratings with duplicates is the fit
on the ratings merged beforehand by pandas, in process and on a cluster, when the
duplicates lie in different partitions of a dask DataFrame or in a dask array of
pairs.  Implicit models refuse negative strengths and say when a rating column is
not used.
"""

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import (
    DGDWarning,
    DuplicateRatingsWarning,
    InputError,
    ParameterError,
    UnusedRatingsWarning,
)

AGG = {"mean": "mean", "last": "last", "sum": "sum", "max": "max"}


@pytest.fixture(scope="module")
def ratings():
    r, _ = make_ratings(120, 60, 1500, rank=3, random_state=0)
    return r


def _with_duplicates(r, n=150, seed=1, value=None):
    """``r`` with ``n`` of its rows given again (another value each, or ``value``),
    the copies spread through the frame."""
    rng = np.random.default_rng(seed)
    extra = r.iloc[rng.choice(len(r), n, replace=False)].copy()
    extra["rating"] = rng.uniform(0.5, 5.0, n) if value is None else value
    out = pd.concat([r, extra], ignore_index=True)
    return out.iloc[rng.permutation(len(out))].reset_index(drop=True)


def _merged(df, policy, cols=("user", "item"), rating="rating"):
    """The ratings merged by pandas, as the policy says (last: in row order)."""
    return df.groupby(list(cols), sort=False)[rating].agg(AGG[policy]).reset_index()


def _quiet_fit(est, X, y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def _same_model(a, b):
    np.testing.assert_array_equal(a.user_ids_, b.user_ids_)
    np.testing.assert_array_equal(a.item_ids_, b.item_ids_)
    np.testing.assert_allclose(a.item_factors_, b.item_factors_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(a.user_factors_, b.user_factors_, rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(a.shard_ratings_, b.shard_ratings_)
    assert (a._seen != b._seen).nnz == 0
    # the residuals of the ratings it trained on (merged), not of the rows given
    assert getattr(a, "residual_std_", None) == pytest.approx(getattr(b, "residual_std_", None), rel=1e-7)


def _mf(policy, **kw):
    return MatrixFactorization(n_components=3, alpha=0.05, alpha_bias=1.0, max_iter=15, tol=0, duplicates=policy,
                               random_state=0, **kw)


@pytest.mark.parametrize("policy", ["mean", "last"])
def test_explicit_duplicates_are_merged_by_the_policy_and_said(ratings, policy):
    dup = _with_duplicates(ratings)
    merged = _merged(dup, policy)
    with pytest.warns(DuplicateRatingsWarning,
                      match=f"MatrixFactorization: 150 rows repeat the \\('user', 'item'\\) pair of an earlier row; "
                            f"merged their 'rating' values into one per pair by duplicates='{policy}' while fitting; "
                            "choose another policy with duplicates="):
        got = _mf(policy).fit(dup)
    ref = _quiet_fit(_mf(policy), merged)
    assert got.n_duplicates_ == 150 and ref.n_duplicates_ == 0
    # the global mean is that of the merged ratings, one per pair
    assert got.global_mean_ == pytest.approx(merged["rating"].mean(), rel=1e-12)
    assert got.shard_ratings_.sum() == len(merged) == len(ratings)
    _same_model(got, ref)
    np.testing.assert_allclose(got.user_bias_, ref.user_bias_, rtol=1e-7, atol=1e-9)


def test_last_is_the_last_row_in_the_input_order():
    df = pd.DataFrame({"user": [1, 1, 2, 1, 2], "item": [1, 2, 1, 1, 2], "rating": [5.0, 3.0, 4.0, 1.0, 2.0]})
    with pytest.warns(DuplicateRatingsWarning, match="1 row repeats the"):
        mf = MatrixFactorization(n_components=0, alpha=0.0, alpha_bias=0.0, duplicates="last").fit(df)
    assert mf.global_mean_ == pytest.approx((1.0 + 3.0 + 4.0 + 2.0) / 4)
    with pytest.warns(DuplicateRatingsWarning, match="by duplicates='mean'"):
        mean = MatrixFactorization(n_components=0, alpha=0.0, alpha_bias=0.0).fit(df)
    assert mean.duplicates == "mean" and mean.global_mean_ == pytest.approx((3.0 + 3.0 + 4.0 + 2.0) / 4)


def test_raise_refuses_duplicates_naming_the_count_and_the_fix(ratings):
    dup = _with_duplicates(ratings, n=7)
    with pytest.raises(InputError, match="7 rows repeat the \\('user', 'item'\\) pair of an earlier row "
                                         "\\(duplicates='raise'\\); drop or merge them before fitting \\(e.g. "
                                         "X.drop_duplicates\\(\\['user', 'item'\\], keep='last'\\)\\), or let "
                                         "MatrixFactorization merge them: duplicates='mean' or 'last'"):
        _mf("raise").fit(dup)
    with pytest.raises(InputError, match="merge them: duplicates='sum' or 'max'"):
        ImplicitMatrixFactorization(duplicates="raise").fit(dup[["user", "item"]])
    with warnings.catch_warnings():  # no duplicates: nothing to say
        warnings.simplefilter("error", DGDWarning)
        assert _mf("raise", n_shards=1).fit(ratings).n_duplicates_ == 0


@pytest.mark.parametrize("model, bad, options", [
    (MatrixFactorization, "sum", "one of 'last', 'mean', 'raise'"),
    (ImplicitMatrixFactorization, "mean", "one of 'max', 'raise', 'sum'"),
])
def test_an_unknown_policy_is_refused(ratings, model, bad, options):
    with pytest.raises(ParameterError, match=f"duplicates.*{options}"):
        model(duplicates=bad).fit(ratings)


@pytest.mark.parametrize("policy", ["mean", "last"])
def test_duplicates_in_different_partitions_of_a_dask_frame(ratings, client, policy):
    """The copies of a pair lie in other partitions than its first row (the frame is
    shuffled); "last" is the last row in the order of the partitions and their rows."""
    dup = _with_duplicates(ratings)
    merged = _merged(dup, policy)
    frame = dd.from_pandas(dup, npartitions=3, sort=False)
    with pytest.warns(DuplicateRatingsWarning, match=f"150 rows repeat .* by duplicates='{policy}'"):
        got = _mf(policy, client=client, n_shards=2).fit(frame)
    ref = _quiet_fit(_mf(policy, client=client, n_shards=2), dd.from_pandas(merged, npartitions=3, sort=False))
    assert got.n_duplicates_ == 150
    assert got.global_mean_ == pytest.approx(merged["rating"].mean(), rel=1e-12)
    _same_model(got, ref)
    # the pandas frame on the same cluster (scattered in pieces) merges them alike
    pand = _quiet_fit(_mf(policy, client=client, n_shards=2), dup)
    assert pand.n_duplicates_ == 150
    _same_model(pand, ref)


def test_duplicates_in_a_dask_array_of_pairs(ratings, client):
    dup = _with_duplicates(ratings, n=40)
    merged = _merged(dup, "mean")
    X = da.from_array(dup[["user", "item"]].to_numpy(), chunks=(500, 2))
    y = da.from_array(dup["rating"].to_numpy(), chunks=500)
    with pytest.warns(DuplicateRatingsWarning, match="40 rows repeat"):
        got = _mf("mean", client=client, n_shards=2).fit(X, y)
    ref = _quiet_fit(_mf("mean", client=client, n_shards=2), merged)
    assert got.global_mean_ == pytest.approx(merged["rating"].mean(), rel=1e-12)
    _same_model(got, ref)


def test_the_auto_penalty_path_sees_the_merged_ratings(ratings):
    """alpha="auto" holds ratings out and refits: both on the merged ratings."""
    dup = _with_duplicates(ratings, n=60)
    kw = dict(n_components=2, max_iter=10, random_state=0)
    with pytest.warns(DuplicateRatingsWarning, match="60 rows repeat"):
        got = MatrixFactorization(**kw).fit(dup)
    ref = _quiet_fit(MatrixFactorization(**kw), _merged(dup, "mean"))
    pd.testing.assert_frame_equal(got.validation_path_, ref.validation_path_, check_exact=False, rtol=1e-6)
    assert got.alpha_ == ref.alpha_
    _same_model(got, ref)


@pytest.mark.parametrize("policy", ["sum", "max"])
@pytest.mark.parametrize("where", ["process", "cluster"])
def test_implicit_strengths_of_repeated_events_merge_without_a_warning(policy, where, client):
    events, _ = make_ratings(100, 50, 1200, rank=3, implicit=True, random_state=0)
    dup = _with_duplicates(events.rename(columns={"count": "rating"}), n=100, value=2.0)
    kw = dict(n_components=2, loss="wls", alpha=0.01, rating_col="rating", max_iter=5, tol=0, duplicates=policy,
              random_state=0, **({"client": client, "n_shards": 2} if where == "cluster" else {}))
    X = dd.from_pandas(dup, npartitions=2, sort=False) if where == "cluster" else dup
    with warnings.catch_warnings():
        warnings.simplefilter("error", DGDWarning)
        got = ImplicitMatrixFactorization(**kw).fit(X)
    ref = ImplicitMatrixFactorization(**kw).fit(_merged(dup, policy))
    assert got.n_duplicates_ == 100 and ref.n_duplicates_ == 0
    _same_model(got, ref)


def test_implicit_pairs_without_strengths_count_once(client):
    events, _ = make_ratings(100, 50, 1200, rank=3, implicit=True, random_state=0)
    pairs = events[["user", "item"]]
    dup = pd.concat([pairs, pairs.iloc[::7]], ignore_index=True)
    kw = dict(n_components=2, loss="wls", alpha=0.01, max_iter=5, tol=0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DGDWarning)
        got = ImplicitMatrixFactorization(**kw).fit(dup)
    ref = ImplicitMatrixFactorization(**kw).fit(pairs)
    assert got.n_duplicates_ == len(pairs.iloc[::7])
    _same_model(got, ref)


def test_partial_fit_merges_the_duplicates_of_its_input(ratings):
    first, more = ratings.iloc[:1000], ratings.iloc[1000:]
    mf = _quiet_fit(_mf("mean", n_shards=1), first)
    dup = pd.concat([more, more.iloc[:5].assign(rating=1.0)], ignore_index=True)
    with pytest.warns(DuplicateRatingsWarning, match="5 rows repeat .* while fitting"):
        mf.partial_fit(dup)
    ref = _quiet_fit(_mf("mean", n_shards=1), first).partial_fit(_merged(dup, "mean"))
    assert mf.n_duplicates_ == 5 and ref.n_duplicates_ == 0
    _same_model(mf, ref)


def test_fold_in_merges_a_users_duplicates_by_the_policy(ratings):
    mf = _quiet_fit(_mf("mean", n_shards=1), ratings)
    items = mf.item_ids_[:4]
    user_items = pd.DataFrame({"user": ["new"] * 6, "item": [items[0], items[1], items[0], items[2], items[3],
                                                             items[0]],
                               "rating": [5.0, 2.0, 1.0, 4.0, 3.0, 3.0]})
    with pytest.warns(DuplicateRatingsWarning, match="2 rows repeat .* duplicates='mean' while folding them in"):
        got = mf.predict(pd.DataFrame({"user": ["new"] * 4, "item": items}), user_items=user_items)
    want = mf.predict(pd.DataFrame({"user": ["new"] * 4, "item": items}), user_items=_merged(user_items, "mean"))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    last = mf.set_params(duplicates="last")
    with pytest.warns(DuplicateRatingsWarning, match="duplicates='last' while folding them in"):
        got = last.predict(pd.DataFrame({"user": ["new"] * 4, "item": items}), user_items=user_items)
    want = last.predict(pd.DataFrame({"user": ["new"] * 4, "item": items}), user_items=_merged(user_items, "last"))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    mf.set_params(duplicates="raise")
    with pytest.raises(InputError, match="2 rows repeat .* drop or merge them before folding them in"):
        mf.fold_in_users(user_items)


# ------------------------------------------------------- implicit models and a rating column
@pytest.mark.parametrize("column", ["rating", "count", "Score"])
def test_an_unused_rating_column_is_said(ratings, column):
    df = ratings.rename(columns={"rating": column})
    with pytest.warns(UnusedRatingsWarning,
                      match=f"ImplicitMatrixFactorization: X has a column '{column}' but rating_col=None, so it is "
                            "not used: every \\(user, item\\) pair counts as a positive of strength 1; pass "
                            f"rating_col='{column}' \\(with loss='wls'\\) to use it as the strengths, or keep only "
                            f"the positives first \\(e.g. X\\[X\\['{column}'\\] >= 4\\]\\), or drop the column"):
        ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=2, random_state=0).fit(df)


def test_no_warning_without_a_rating_like_column(ratings, client):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedRatingsWarning)
        kw = dict(n_components=2, alpha=0.01, max_iter=2, random_state=0)
        ImplicitMatrixFactorization(loss="bpr", **kw).fit(ratings[["user", "item"]])
        ImplicitMatrixFactorization(loss="bpr", **kw).fit(ratings.rename(columns={"rating": "day"}))  # not rating-like
        ImplicitMatrixFactorization(loss="bpr", **kw).fit(ratings.assign(rating=ratings["rating"].astype(str)))  # not numeric
        ImplicitMatrixFactorization(loss="wls", rating_col="rating", **kw).fit(ratings)  # used
    with pytest.warns(UnusedRatingsWarning, match="X has a column 'rating' but rating_col=None"):  # dask too
        ImplicitMatrixFactorization(loss="bpr", client=client, **kw).fit(dd.from_pandas(ratings, npartitions=2))


def test_bpr_says_that_it_does_not_weigh_pairs_by_strengths(ratings):
    with pytest.warns(UnusedRatingsWarning,
                      match="ImplicitMatrixFactorization\\(loss='bpr'\\) takes every \\(user, item\\) pair as a "
                            "positive alike: the 'rating' values are only checked \\(finite, >= 0\\), not used; use "
                            "loss='wls' to weigh the pairs by them, or keep only the positives first \\(e.g. "
                            "X\\[X\\['rating'\\] >= 4\\]\\) and leave rating_col=None"):
        ImplicitMatrixFactorization(loss="bpr", alpha=0.01, rating_col="rating", n_components=2, max_iter=2,
                                    random_state=0).fit(ratings)


@pytest.mark.parametrize("loss, why", [
    ("bpr", "implicit strengths must be >= 0: BPR takes every pair as a positive, so a negative one \\(a dislike\\) "
            "would count as a like"),
    ("wls", "confidence-weighted least squares needs strengths >= 0"),
], ids=["bpr", "wls"])
def test_negative_strengths_are_refused_for_both_losses(ratings, loss, why):
    df = ratings.assign(rating=ratings["rating"] - 3.0)  # centred ratings: dislikes are negative
    n = int((df["rating"] < 0).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedRatingsWarning)
        with pytest.raises(InputError, match=f"{n} values of the 'rating' column are negative \\(the smallest: "
                                             f"{df['rating'].min():g}\\); {why}.*; drop those rows .* before fitting"):
            ImplicitMatrixFactorization(loss=loss, rating_col="rating", max_iter=1).fit(df)
    # a zero strength is an observed pair of confidence 1 (documented): accepted
    zero = df.assign(rating=df["rating"].clip(lower=0.0))
    ImplicitMatrixFactorization(loss="wls", alpha=0.01, rating_col="rating", n_components=2, max_iter=1,
                                tol=0).fit(zero)


def test_the_new_warnings_are_dask_dgd_warnings():
    assert issubclass(DuplicateRatingsWarning, DGDWarning) and issubclass(UnusedRatingsWarning, UserWarning)


@pytest.mark.parametrize("loss", ["wls", "bpr"])
def test_a_rating_col_missing_from_x_is_refused(ratings, loss, client):
    plays = ratings.rename(columns={"rating": "count"})
    msg = ("ImplicitMatrixFactorization\\(rating_col='plays'\\): X has no column 'plays' \\(columns \\['user', "
           "'item', 'count'\\]\\), so every \\(user, item\\) pair would have strength 1; name the strengths' column "
           "with rating_col=..., pass them as y=..., or set rating_col=None to count every pair once")
    est = ImplicitMatrixFactorization(loss=loss, alpha=0.01, rating_col="plays", n_components=2, max_iter=1,
                                      random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedRatingsWarning)  # (not the warning that says rating_col=None)
        with pytest.raises(InputError, match=msg):
            est.fit(plays)
        with pytest.raises(InputError, match=msg):  # a dask DataFrame too
            est.set_params(client=client).fit(dd.from_pandas(plays, npartitions=2))
        with pytest.raises(InputError, match="X has no column 'plays' \\(ndarray of \\(user, item\\) pairs\\)"):
            est.set_params(client=None).fit(plays[["user", "item"]].to_numpy())
    # the strengths given as y are the column
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedRatingsWarning)
        est.fit(plays[["user", "item"]].to_numpy(), plays["count"].to_numpy())
        with pytest.raises(InputError, match="X has no column 'plays'"):
            est.partial_fit(plays)


def test_wls_fold_in_needs_the_rating_col_and_held_out_interactions_do_not(ratings):
    from dask_dgd.recommender import evaluate_ranking

    plays = ratings.rename(columns={"rating": "count"})
    wls = ImplicitMatrixFactorization(loss="wls", alpha=0.01, rating_col="count", n_components=2, max_iter=2, tol=0,
                                      random_state=0).fit(plays)
    new = pd.DataFrame({"user": ["new", "new"], "item": plays["item"].iloc[:2].to_numpy()})
    for call, where in [(lambda: wls.recommend(["new"], k=2, user_items=new), "user_items"),
                        (lambda: wls.predict(new, user_items=new), "user_items"),
                        (lambda: wls.fold_in_users(new), "user_items"),
                        (lambda: wls.fold_in_items(new), "item_users")]:
        with pytest.raises(InputError, match=f"ImplicitMatrixFactorization\\(rating_col='count'\\): {where} has no "
                           f"column 'count' \\(columns \\['user', 'item'\\]\\), so every \\(user, item\\) pair would "
                           f"have strength 1; add the 'count' column \\(the pairs' strengths, as in fit\\) to {where}"):
            call()
    assert wls.recommend(["new"], k=2, user_items=new.assign(count=3.0))[0].shape == (1, 2)
    # held-out interactions: binary relevance, no strengths needed
    assert evaluate_ranking(wls, plays[["user", "item"]].iloc[:200])["n_users"] > 0
    assert 0 <= wls.score(plays[["user", "item"]].iloc[:200]) <= 1
    # BPR does not use strengths: its fold-in needs only the pairs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedRatingsWarning)
        bpr = ImplicitMatrixFactorization(loss="bpr", alpha=0.01, rating_col="count", n_components=2, max_iter=2,
                                          random_state=0).fit(plays)
    assert bpr.recommend(["new"], k=2, user_items=new)[0].shape == (1, 2)


class _TaskNames:
    """A scheduler plugin that keeps the keys of the tasks the scheduler was given."""

    name = "dgd-test-task-names"

    def __init__(self):
        self.keys = set()

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "released":
            self.keys.add(str(key))


def _merge_tasks(client, frame):
    """The keys of the duplicate-merging tasks (``dgd-mf-merge*``, ``dgd-mf-dup-probe*``)
    the scheduler was given while a model was fitted to ``frame``."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    plugin = type("TaskNames", (_TaskNames, SchedulerPlugin), {})()
    client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.add_plugin(plugin, name=plugin.name))
    try:
        _quiet_fit(_mf("last", client=client, n_shards=2), frame)
        keys = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.plugins[plugin.name].keys))
    finally:
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.remove_plugin(name=plugin.name))
    return [k for k in keys if k.startswith(("dgd-mf-merge", "dgd-mf-dup-probe"))]


@pytest.mark.slow
def test_merging_duplicates_takes_tasks_linear_in_the_partitions(ratings, client):
    """Finding whether there are duplicates, and merging them, takes a number of tasks
    that grows linearly with the partitions (a bucket per partition, each depending on
    every partition, took their square); without duplicates nothing is merged."""
    dup = _with_duplicates(ratings)
    counts = {}
    for n in (20, 40):
        frame = dd.from_pandas(dup, npartitions=n, sort=False).persist()
        keys = _merge_tasks(client, frame)
        counts[n] = len(keys)
        # without duplicates: only the probe, one task per partition
        clean = dd.from_pandas(_merged(dup, "last"), npartitions=n, sort=False).persist()
        keys = _merge_tasks(client, clean)
        assert len(keys) == n and all(k.startswith("dgd-mf-dup-probe") for k in keys)
    assert counts[20] > 0
    assert counts[40] <= 2 * counts[20], counts


def test_residual_std_is_that_of_the_merged_ratings_computed_on_the_cluster(ratings, client):
    """With a client, the residuals are summed by tasks on the cluster: nothing is
    computed by the caller's default scheduler (a bare ``.compute()`` would be)."""
    import dask

    dup = _with_duplicates(ratings, n=300)
    frame = dd.from_pandas(dup, npartitions=3, sort=False)
    calls = []

    def caller_scheduler(*args, **kwargs):
        calls.append(args)
        raise AssertionError("computed in the caller's process")

    with dask.config.set(scheduler=caller_scheduler):
        got = _quiet_fit(_mf("last", client=client, n_shards=2), frame)
    assert calls == []
    ref = _quiet_fit(_mf("last"), _merged(dup, "last"))
    assert got.residual_std_ == pytest.approx(ref.residual_std_, rel=1e-7)


@pytest.mark.parametrize("policy", ["mean", "sum"])
def test_a_mean_or_sum_is_the_same_to_the_last_bit_in_any_row_order(policy):
    """The merged ratings do not depend on the rows' order (a checkpoint's digest is
    taken over them: a resume with the same ratings in another order is accepted)."""
    from dask_dgd.recommender._shards import merge_duplicates

    rng = np.random.default_rng(0)
    n = 4000
    df = pd.DataFrame({"user": rng.integers(0, 50, n), "item": rng.integers(0, 10, n),
                       "rating": rng.uniform(0.5, 5.0, n)})

    def merged(frame):
        out, _ = merge_duplicates(frame, "user", "item", "rating", policy)
        return out.sort_values(["user", "item"]).reset_index(drop=True)

    first = merged(df)
    for seed in range(5):
        other = merged(df.iloc[np.random.default_rng(seed).permutation(n)])
        np.testing.assert_array_equal(other["rating"].to_numpy(), first["rating"].to_numpy())


def test_raise_names_the_fix_for_the_input_given(ratings, client):
    """The hint fits what was given: a DataFrame (its own name), an array of pairs (no
    drop_duplicates), the interactions of a fold-in (user_items, item_users)."""
    dup = _with_duplicates(ratings, n=7)
    X = da.from_array(dup[["user", "item"]].to_numpy(), chunks=(500, 2))
    y = da.from_array(dup["rating"].to_numpy(), chunks=500)
    with pytest.raises(InputError, match="7 rows repeat the \\('user', 'item'\\) pair of an earlier row "
                                         "\\(duplicates='raise'\\); drop or merge them before fitting \\(drop the "
                                         "rows of X that repeat an earlier row's \\(user, item\\) pair, and their "
                                         "values of y\\), or let MatrixFactorization merge them: duplicates="):
        _mf("raise", client=client, n_shards=2).fit(X, y)
    mf = _quiet_fit(_mf("raise", n_shards=1), ratings)
    items = mf.item_ids_[:2]
    user_items = pd.DataFrame({"user": ["new"] * 3, "item": [items[0], items[1], items[0]], "rating": [5.0, 2.0, 1.0]})
    with pytest.raises(InputError, match="drop or merge them before folding them in \\(e.g. "
                                         "user_items.drop_duplicates\\(\\['user', 'item'\\], keep='last'\\)\\)"):
        mf.fold_in_users(user_items)
    item_users = pd.DataFrame({"user": [mf.user_ids_[0]] * 3, "item": ["new"] * 3, "rating": [5.0, 2.0, 1.0]})
    with pytest.raises(InputError, match="\\(e.g. item_users.drop_duplicates\\(\\['user', 'item'\\], keep='last'\\)\\)"):
        mf.fold_in_items(item_users)

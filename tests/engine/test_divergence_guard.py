"""The divergence guard in every mode and family (issue 22, item 6).

A learning rate far too large makes the objective grow geometrically; before it
overflows to inf it passes 1e40-1e120, and the fits used to return such coefficients
(asynchronous and local SGD, mini-batches) with at most a "did not converge" warning.
Now every mode treats an exploded objective like NaN: ``on_divergence="raise"`` (the
"auto" choice with a learning rate you gave) raises DivergenceError at once, "backoff"
restores the last good parameters and halves the learning rate.  A fit that stays
below the guard's limit but ends far above where it started says that its learning rate
is too large (it used to advise raising it).
"""

import math
import re
import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning

from dask_dgd import optim
from dask_dgd._engine.modes.local import diverged_loss, round_partial
from dask_dgd._engine.runtime.reduce import Partial, add_partials
from dask_dgd._engine.update import (
    BACKOFF_FACTOR,
    BATCH_EXPLOSION_FACTOR,
    EXPLOSION_FACTOR,
    Guard,
    UpdateRule,
    halved,
)
from dask_dgd.exceptions import DivergenceError
from dask_dgd.linear_model import LinearRegression
from dask_dgd.recommender import MatrixFactorization

TRUTH = np.arange(1.0, 6.0)


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    y = X @ TRUTH + rng.normal(size=2000)
    return da.from_array(X, chunks=500), da.from_array(y, chunks=500)


@pytest.fixture(scope="module")
def ratings():
    rng = np.random.default_rng(0)
    n = 3000
    return pd.DataFrame({"user": rng.integers(0, 100, n), "item": rng.integers(0, 50, n),
                         "rating": rng.integers(1, 6, n).astype(float)})


def _sgd(client, mode, on_divergence, **kw):
    return LinearRegression(client=client, mode=mode, optimizer="sgd", learning_rate=5.0, batch_size=100,
                            max_iter=5, on_divergence=on_divergence, **kw)


def test_guard_limits_for_the_whole_data_and_for_parts():
    whole, part = Guard(full_batch=True), Guard(full_batch=False)
    assert whole.limit() == part.limit() == np.inf  # no reference yet
    for g in (whole, part):
        g.start(-3.0)
        g.start(50.0)  # the first value stays the reference
    assert whole.limit() == EXPLOSION_FACTOR * 3.0
    assert part.limit() == BATCH_EXPLOSION_FACTOR * 3.0
    assert whole.limit(batch=True) == part.limit()
    assert not part.exploded(BATCH_EXPLOSION_FACTOR, where="at step 2", learning_rate=1.0)
    assert part.exploded(BATCH_EXPLOSION_FACTOR * 4, where="at step 2", learning_rate=1.0)
    loud = Guard("raise", full_batch=False)
    loud.start(0.5)  # below 1: the limit is relative to 1
    with pytest.raises(DivergenceError, match=r"the objective exploded \(initial loss 0.5\) at step 7 \(loss=2000000000000.0\) "
                                              r"with learning rate 0.1; pass a smaller learning_rate"):
        loud.exploded(2e12, where="at step 7", learning_rate=0.1)


def test_guard_counts_halvings_in_a_row_and_raises_at_its_limit():
    guard = Guard(hint="scale X")
    guard.max_backoffs = 2
    guard.backoff("w diverged")
    guard.backoff("w diverged")
    with pytest.raises(DivergenceError, match=r"^w diverged even after halving the learning rate 2 times; scale X "
                                              r"or pass a smaller learning_rate$"):
        guard.backoff("w diverged")
    guard.accepted()
    guard.backoff("w diverged")  # counting starts again after a good step
    assert guard.state_dict() == {"first_value": None, "backoffs": 1, "halvings": 4}  # 4 in the whole fit
    loud = Guard("raise", hint="scale X")
    loud.backoff("an increase")  # no divergence: backs off even with "raise"
    with pytest.raises(DivergenceError, match=r"^v diverged \(on_divergence='raise'\); pass a smaller learning_rate, "
                                              r"scale X, or on_divergence='backoff' to halve"):
        loud.backoff("v diverged", diverged=True)


def test_one_halving_for_every_mode():
    opt = optim.sgd(learning_rate=0.5)
    assert BACKOFF_FACTOR == 0.5 and halved(opt).learning_rate == 0.25
    assert UpdateRule(opt).halved() == UpdateRule(halved(opt))


def test_guard_counts_every_halving_of_the_fit_and_keeps_the_count_in_checkpoints():
    guard = Guard()
    for _ in range(2):
        guard.backoff("the objective diverged")
    guard.accepted()
    guard.backoff("the objective diverged")
    assert (guard.backoffs, guard.halvings) == (1, 3)  # in a row; in the whole fit
    restored = Guard()
    restored.load_state_dict(guard.state_dict())
    assert restored.halvings == 3
    restored.load_state_dict({"first_value": 1.0, "backoffs": 0})  # a checkpoint written before the count
    assert restored.halvings == 0
    old = Guard.__new__(Guard)  # the async server's guard, saved as its attributes before the count
    old.__setstate__({k: v for k, v in vars(guard).items() if k != "halvings"})
    old.backoff("the objective diverged")
    assert old.halvings == 1


def test_a_monotone_guard_ignores_an_increase_at_rounding_level():
    guard = Guard(monotone=True)
    grad = np.zeros(2)
    assert not guard.check(1.0 + 1e-13, grad, 1.0, step=2, learning_rate=0.1)
    assert guard.check(1.0 + 1e-9, grad, 1.0, step=3, learning_rate=0.1)
    assert not Guard(monotone=False).check(2.0, grad, 1.0, step=3, learning_rate=0.1)


@pytest.mark.parametrize("mode, match", [
    ("sync", r"the objective exploded \(initial loss [0-9.]+\) at step \d+ \(loss=[0-9.e+]+\) with learning rate 5"),
    ("local", r"local SGD diverged in round \d+ \(loss=(inf|nan|[0-9.e+]+): the (mean of the )?local objectives? at "
              r"which .* stopped, from [0-9.e+]+ at the round's start\) \(on_divergence='raise'\); pass a smaller "),
    ("async", r"asynchronous training diverged at update \d+: the objective exploded \(loss=[0-9.e+]+, above "
              r"[0-9.e+]+\) \(on_divergence='raise'\)"),
])
@pytest.mark.parametrize("on_divergence", ["raise", "auto"])  # "auto" with a learning rate given: raise
def test_an_exploding_minibatch_fit_raises_in_every_mode(client, regression, mode, match, on_divergence):
    with pytest.raises(DivergenceError, match=match):
        _sgd(client, mode, on_divergence).fit(*regression)


@pytest.mark.parametrize("mode", ["sync", "local", "async"])
def test_backoff_keeps_an_exploding_fit_below_the_limit(client, regression, mode):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = _sgd(client, mode, "backoff").fit(*regression)
    loss = est.history_["loss"].dropna()
    # without the guard: |coef| 1e55-1e65, losses 1e110 and more
    assert loss.max() <= BATCH_EXPLOSION_FACTOR * max(loss.iloc[0], 1.0)
    assert np.all(np.isfinite(est.coef_))
    assert est.history_["step_size"].dropna().iloc[-1] < 5.0  # halved
    halvings = est.history_["lr_halvings"]  # every halving of the fit, counted (issue 46)
    assert halvings.iloc[0] == 0 and halvings.iloc[-1] > 0
    assert halvings.is_monotonic_increasing
    # asynchronous updates may end far above the start (the last good version can be
    # well on its way up): then the fit says its learning rate is too large
    rose = [w for w in caught if "the objective rose from" in str(w.message)]
    last = loss[est.history_["iteration"] == est.history_["iteration"].iloc[-1]].mean()
    assert bool(rose) == (last > 2 * loss.iloc[0])


@pytest.mark.parametrize("on_divergence", ["raise", "backoff"])
def test_local_sgd_reports_the_diverged_loss_not_the_starting_one(client, regression, on_divergence):
    """The message of a local SGD round in which a group diverged gives the local
    objective at which the group stopped (NaN, inf, or above the guard's limit for parts
    of the data), then the round's starting objective; it used to give only the
    starting one as "the" loss (issue 44).  "backoff": after the last halving."""
    # 1e12 halved MAX_BACKOFFS (30) times in a row is still far too large for these data
    est = LinearRegression(client=client, mode="local", optimizer="sgd", learning_rate=1e12, batch_size=100,
                           max_iter=5, on_divergence=on_divergence)
    with pytest.raises(DivergenceError) as info:
        est.fit(*regression)
    found = re.search(r"local SGD diverged in round \d+ \(loss=(\S+): (the local objective at which 1 of 2 groups|the "
                      r"mean of the local objectives at which 2 of 2 groups) stopped, from (\S+) at the round's "
                      r"start\)", str(info.value))
    assert found, str(info.value)
    diverged, start = float(found.group(1)), float(found.group(3))
    assert math.isfinite(start)
    # the guard's limit for parts of the data is BATCH_EXPLOSION_FACTOR * max(|first loss|, 1)
    assert not diverged <= BATCH_EXPLOSION_FACTOR
    assert ("on_divergence='raise'" in str(info.value)) == (on_divergence == "raise")


def test_the_diverged_loss_of_local_groups_survives_the_tree_sum():
    first = Partial(3.0, np.zeros(2), 1.0, 0.0, 0.0, 1)
    ok = round_partial(np.ones(2), 1.0, first, 0.0, 0.0, True)
    assert diverged_loss(add_partials(ok, ok)) == (None, 0)
    bad = round_partial(np.ones(2), 1.0, first, 0.0, 0.0, False, 4e20)
    assert diverged_loss(add_partials(ok, bad, ok)) == (4e20, 1)
    assert diverged_loss(add_partials(bad, ok, round_partial(np.ones(2), 1.0, first, 0.0, 0.0, False, 2e20))) == (
        3e20, 2)
    loss, count = diverged_loss(add_partials(ok, bad, round_partial(np.ones(2), 1.0, first, 0.0, 0.0, False, np.nan)))
    assert math.isnan(loss) and count == 2


def test_local_full_batch_rounds_use_the_whole_data_limit(client, regression):
    est = LinearRegression(client=client, mode="local", solver="gd", optimizer="sgd", learning_rate=3.0,
                           local_steps=4, max_iter=100, on_divergence="backoff", tol=1e-10,
                           n_iter_no_change=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(*regression)
    # the round at parameters whose objective exploded went back to the round before
    assert est.history_["step_size"].iloc[-1] == 1.5
    np.testing.assert_allclose(est.coef_, TRUTH, atol=0.1)
    assert est.n_iter_ == 100  # n_iter_no_change is honoured in local mode (it was fixed at 5)


@pytest.mark.parametrize("mode", ["local", "async"])
def test_matrix_factorization_explodes_loudly_outside_sync(client, ratings, mode):
    est = MatrixFactorization(client=client, alpha=0.1, optimizer="sgd", learning_rate=300.0, batch_size=500,
                              max_iter=20, mode=mode, random_state=0)
    with pytest.raises(DivergenceError, match="diverged"):
        est.fit(ratings)


def test_matrix_factorization_says_its_learning_rate_is_too_large(client, ratings):
    est = MatrixFactorization(client=client, optimizer="adam", learning_rate=5.0, max_iter=20, random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"MatrixFactorization: the objective rose from [0-9.]+ at the start "
                                                r"to [0-9.e+]+; the learning rate is too large for these data: lower "
                                                r"learning_rate") as record:
        est.fit(ratings)
    assert not any("raise max_iter or learning_rate" in str(w.message) for w in record)
    assert est.history_["loss"].iloc[-1] > 100 * est.history_["loss"].iloc[0]


def test_a_sound_fit_gives_no_rise_warning(client, ratings, regression):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        MatrixFactorization(client=client, max_iter=300, random_state=0).fit(ratings)
        LinearRegression(client=client, mode="async", batch_size=100, max_iter=30, tol=1e-3).fit(*regression)

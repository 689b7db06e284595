"""Pointwise losses: derivatives, scikit-learn agreement, stability, parameters."""

import array_api_compat.numpy as xp
import numpy as np
import pytest
from scipy.special import xlogy
from sklearn.metrics import log_loss, mean_poisson_deviance, mean_squared_error

from dask_dgd.exceptions import ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
)

LOSSES = [HalfSquaredError(), BinaryLogistic(), MultinomialLogistic(3), HalfPoisson()]


def targets_for(loss, n, rng):
    if isinstance(loss, MultinomialLogistic):
        return rng.integers(0, loss.n_classes, n).astype(float)
    if isinstance(loss, BinaryLogistic):
        return rng.integers(0, 2, n).astype(float)
    if isinstance(loss, HalfPoisson):
        return rng.poisson(2.0, n).astype(float)
    return rng.standard_normal(n)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: type(loss).__name__)
def test_gradient_wrt_raw_matches_finite_differences(loss):
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((6, loss.n_outputs))
    y = targets_for(loss, 6, rng)
    loss_i, grad = loss.loss_gradient(y, raw, xp)
    assert loss_i.shape == (6,)
    assert grad.shape == (6, loss.n_outputs)
    h = 1e-6
    for k in range(loss.n_outputs):
        step = np.zeros_like(raw)
        step[:, k] = h
        fd = (loss.loss_gradient(y, raw + step, xp)[0] - loss.loss_gradient(y, raw - step, xp)[0])
        np.testing.assert_allclose(grad[:, k], fd / (2 * h), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: type(loss).__name__)
def test_curvature_bound(loss):
    rng = np.random.default_rng(1)
    raw = 3 * rng.standard_normal((200, loss.n_outputs))
    y = targets_for(loss, 200, rng)
    h = 1e-4
    worst = 0.0
    for k in range(loss.n_outputs):
        step = np.zeros_like(raw)
        step[:, k] = h
        second = (
            loss.loss_gradient(y, raw + step, xp)[1][:, k]
            - loss.loss_gradient(y, raw - step, xp)[1][:, k]
        ) / (2 * h)
        worst = max(worst, second.max())
    bound = {HalfSquaredError: 1.0, BinaryLogistic: 0.25, MultinomialLogistic: 0.5}
    assert loss.curvature_bound == bound.get(type(loss))
    if loss.curvature_bound is not None:
        assert worst <= loss.curvature_bound + 1e-6


def mean_loss(loss, raw, y, sample_weight=None):
    objective = LinearObjective(loss, raw.shape[1], fit_intercept=False)
    params = np.eye(raw.shape[1]).ravel()  # coef = identity: raw_prediction(X=raw) = raw
    loss_sum, _, weight_sum = objective.block_sums(params, raw, y, sample_weight)
    return loss_sum / weight_sum


@pytest.mark.parametrize("weighted", [False, True])
def test_binary_logistic_matches_log_loss(weighted):
    rng = np.random.default_rng(2)
    raw = 2 * rng.standard_normal((50, 1))
    y = rng.integers(0, 2, 50).astype(float)
    sw = rng.uniform(0.5, 2, 50) if weighted else None
    proba = BinaryLogistic().inverse_link(raw, xp)
    assert proba.shape == (50,)
    np.testing.assert_allclose(proba, 1 / (1 + np.exp(-raw[:, 0])))
    expected = log_loss(y, proba, sample_weight=sw)
    assert mean_loss(BinaryLogistic(), raw, y, sw) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("weighted", [False, True])
def test_multinomial_matches_log_loss(weighted):
    rng = np.random.default_rng(3)
    loss = MultinomialLogistic(4)
    raw = 2 * rng.standard_normal((60, 4))
    y = rng.integers(0, 4, 60)
    sw = rng.uniform(0.5, 2, 60) if weighted else None
    proba = loss.inverse_link(raw, xp)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    expected = log_loss(y, proba, sample_weight=sw, labels=range(4))
    assert mean_loss(loss, raw, y.astype(float), sw) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("weighted", [False, True])
def test_half_poisson_matches_poisson_deviance(weighted):
    rng = np.random.default_rng(4)
    raw = rng.standard_normal((40, 1))
    y = rng.poisson(np.exp(raw[:, 0])).astype(float)
    sw = rng.uniform(0.5, 2, 40) if weighted else None
    mean = HalfPoisson().inverse_link(raw, xp)
    np.testing.assert_allclose(mean, np.exp(raw[:, 0]))
    w = np.ones(40) if sw is None else sw
    # half deviance = loss + y log y - y
    constant = np.average(xlogy(y, y) - y, weights=w)
    expected = 0.5 * mean_poisson_deviance(y, mean, sample_weight=sw)
    assert mean_loss(HalfPoisson(), raw, y, sw) + constant == pytest.approx(expected, rel=1e-10)


def test_half_squared_error_matches_mse():
    rng = np.random.default_rng(5)
    raw = rng.standard_normal((30, 1))
    y = rng.standard_normal(30)
    np.testing.assert_array_equal(HalfSquaredError().inverse_link(raw, xp), raw[:, 0])
    expected = 0.5 * mean_squared_error(y, raw[:, 0])
    assert mean_loss(HalfSquaredError(), raw, y) == pytest.approx(expected, rel=1e-12)


def test_large_class_count_uses_row_reductions():
    # Above 16 classes the row maximum is a reduction; both paths must agree.
    rng = np.random.default_rng(6)
    raw = 5 * rng.standard_normal((10, 20))
    y = rng.integers(0, 20, 10)
    proba = MultinomialLogistic(20).inverse_link(raw, xp)
    expected = np.exp(raw) / np.exp(raw).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(proba, expected)
    assert mean_loss(MultinomialLogistic(20), raw, y.astype(float)) == pytest.approx(
        log_loss(y, expected, labels=range(20)), rel=1e-10
    )


def test_inverse_links_are_stable():
    raw = np.array([[-1000.0], [0.0], [1000.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_array_equal(BinaryLogistic().inverse_link(raw, xp), [0.0, 0.5, 1.0])
        proba = MultinomialLogistic(2).inverse_link(np.hstack([raw, -raw]), xp)
    np.testing.assert_array_equal(proba, [[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])


@pytest.mark.parametrize("n_classes", [1, 0, 2.0, True, "3"])
def test_multinomial_needs_two_classes(n_classes):
    message = rf"n_classes must be an integer >= 2, got {n_classes!r}"
    with pytest.raises(ParameterError, match=message):
        MultinomialLogistic(n_classes)


def test_losses_are_values():
    assert MultinomialLogistic(3) == MultinomialLogistic(np.int64(3))
    assert MultinomialLogistic(3) != MultinomialLogistic(4)
    assert HalfPoisson() == HalfPoisson()
    assert repr(MultinomialLogistic(3)) == "MultinomialLogistic(n_classes=3)"
    assert [loss.n_outputs for loss in LOSSES] == [1, 1, 3, 1]

"""Namespace cleanliness: the objective runs on array_api_strict arrays."""

import array_api_compat
import array_api_strict as xps
import numpy as np
import pytest

LOSS_NAMES = ["squared", "binary", "multinomial", "poisson"]


def strict(a):
    return None if a is None else xps.asarray(a)


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("slice_bytes", [None, 1])
def test_block_sums_on_array_api_strict(make_problem, name, fit_intercept, weighted, slice_bytes):
    objective, params, X, y, sw = make_problem(
        name, 600, 3, fit_intercept=fit_intercept, weighted=weighted, slice_bytes=slice_bytes
    )
    expected = objective.block_sums(params, X, y, sw)
    got = objective.block_sums(params, strict(X), strict(y), strict(sw))
    assert isinstance(got[0], float) and isinstance(got[2], float)
    assert isinstance(got[1], np.ndarray) and got[1].dtype == np.float64
    assert got[0] == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12, atol=1e-12)
    assert got[2] == pytest.approx(expected[2], rel=1e-12)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_float32_on_array_api_strict(make_problem, name):
    objective, params, X, y, sw = make_problem(name, 50, 3, weighted=True)
    expected = objective.block_sums(params, X, y, sw)
    got = objective.block_sums(
        params,
        xps.asarray(X, dtype=xps.float32),
        xps.asarray(y, dtype=xps.float32),
        xps.asarray(sw, dtype=xps.float32),
    )
    assert got[0] == pytest.approx(expected[0], rel=1e-5)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_raw_prediction_and_inverse_link_on_array_api_strict(make_problem, name):
    objective, params, X, _, _ = make_problem(name, 8, 3)
    raw = objective.raw_prediction(params, strict(X))
    assert array_api_compat.is_array_api_strict_namespace(array_api_compat.array_namespace(raw))
    assert raw.shape == (8, objective.n_outputs)
    np.testing.assert_allclose(np.asarray(raw), objective.raw_prediction(params, X))
    prediction = objective.loss.inverse_link(raw, xps)
    expected = objective.loss.inverse_link(objective.raw_prediction(params, X), np)
    np.testing.assert_allclose(np.asarray(prediction), expected, rtol=1e-12)


def test_empty_block_on_array_api_strict(make_problem):
    objective, params, X, y, _ = make_problem("multinomial", 0, 3)
    loss_sum, grad, weight_sum = objective.block_sums(params, strict(X), strict(y))
    assert (loss_sum, weight_sum) == (0.0, 0.0)
    np.testing.assert_array_equal(grad, np.zeros(objective.n_params))


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_block_sums_on_another_device_with_rows_and_placed_params(make_problem, name):
    """Blocks on a device of their own: the rows of a mini-batch and the parameters
    must be moved there (array_api_strict refuses to mix devices)."""
    device = xps.Device("device1")
    objective, params, X, y, sw = make_problem(name, 300, 3, weighted=True)
    rows = np.array([3, 5, 8, 13, 21, 34, 55, 89, 144, 233])
    expected = objective.block_sums(params, X[rows], y[rows], sw[rows])
    on = lambda a: xps.asarray(a, device=device)  # noqa: E731
    Xs = on(X)
    for placed in (None, objective.place(params, Xs)):
        got = objective.block_sums(params, Xs, on(y), on(sw), rows=rows, placed=placed)
        assert got[0] == pytest.approx(expected[0], rel=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-12, atol=1e-12)
        assert got[2] == pytest.approx(expected[2], rel=1e-12)
    assert objective.place(params, Xs).device == device
    raw = objective.raw_prediction(params, Xs)
    assert raw.device == device

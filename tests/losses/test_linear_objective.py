"""LinearObjective: layout, block sums, gradients, additivity, slicing."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    Penalty,
    objective_value_gradient,
)

LOSS_NAMES = ["squared", "binary", "multinomial", "poisson"]


def finite_difference(f, params, h=1e-6):
    """Central finite-difference gradient of the scalar function ``f``."""
    grad = np.empty_like(params)
    for j in range(params.size):
        step = np.zeros_like(params)
        step[j] = h
        grad[j] = (f(params + step) - f(params - step)) / (2 * h)
    return grad


# -- layout ------------------------------------------------------------------------


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_pack_unpack_layout(fit_intercept):
    objective = LinearObjective(MultinomialLogistic(3), 2, fit_intercept)
    assert objective.n_outputs == 3
    assert objective.n_params == (2 + fit_intercept) * 3
    params = np.arange(objective.n_params, dtype=float)
    coef, intercept = objective.unpack(params)
    matrix = params.reshape(2 + fit_intercept, 3)
    np.testing.assert_array_equal(coef, matrix[:2])
    if fit_intercept:
        np.testing.assert_array_equal(intercept, matrix[2])  # intercept is the last row
    else:
        np.testing.assert_array_equal(intercept, np.zeros(3))
    np.testing.assert_array_equal(objective.pack(coef, intercept), params)


def test_pack_accepts_1d_coef_and_scalar_intercept():
    objective = LinearObjective(HalfSquaredError(), 2)
    np.testing.assert_array_equal(objective.pack([1.0, 2.0], 3.0), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(objective.pack([1.0, 2.0]), [1.0, 2.0, 0.0])


def test_pack_unpack_errors():
    objective = LinearObjective(HalfSquaredError(), 2, fit_intercept=False)
    with pytest.raises(InputError, match=r"params must have shape \(2,\).*got \(3,\)"):
        objective.unpack(np.zeros(3))
    with pytest.raises(InputError, match=r"coef must have shape \(2, 1\), got \(3, 1\)"):
        objective.pack(np.zeros((3, 1)))
    with pytest.raises(InputError, match="intercept must be None or zero"):
        objective.pack(np.zeros(2), 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_features": -1}, r"n_features must be an integer >= 0, got -1"),
        ({"n_features": 2.5}, r"n_features must be an integer >= 0, got 2.5"),
        ({"n_features": 2, "slice_bytes": 0}, "slice_bytes must be a positive integer"),
    ],
)
def test_objective_parameter_errors(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        LinearObjective(HalfSquaredError(), **kwargs)


def test_objective_rejects_non_loss():
    with pytest.raises(ParameterError, match="loss must be a pointwise loss"):
        LinearObjective("squared", 2)


def test_objective_is_a_frozen_picklable_value():
    objective = LinearObjective(MultinomialLogistic(4), 3, fit_intercept=False)
    assert pickle.loads(pickle.dumps(objective)) == objective
    assert objective == LinearObjective(MultinomialLogistic(4), 3, False)
    with pytest.raises(AttributeError):
        objective.n_features = 4


# -- raw prediction ----------------------------------------------------------------


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_raw_prediction_dense_and_sparse(make_problem, name, fit_intercept):
    objective, params, X, _, _ = make_problem(
        name, 7, 3, fit_intercept=fit_intercept, sparse=True
    )
    coef, intercept = objective.unpack(params)
    expected = X.toarray() @ coef + intercept
    np.testing.assert_allclose(objective.raw_prediction(params, X), expected)
    np.testing.assert_allclose(objective.raw_prediction(params, X.toarray()), expected)
    assert objective.raw_prediction(params, X).shape == (7, objective.n_outputs)


def test_raw_prediction_keeps_float32():
    objective = LinearObjective(HalfSquaredError(), 2)
    raw = objective.raw_prediction(np.ones(3), np.ones((4, 2), dtype=np.float32))
    assert raw.dtype == np.float32
    np.testing.assert_array_equal(raw, np.full((4, 1), 3.0))


def test_shape_errors_name_the_shapes():
    objective = LinearObjective(HalfSquaredError(), 3)
    with pytest.raises(InputError, match=r"X must have shape \(n_samples, 3\), got \(4, 2\)"):
        objective.block_sums(np.zeros(4), np.zeros((4, 2)), np.zeros(4))
    with pytest.raises(InputError, match=r"y must have shape \(4,\) to match X, got \(5,\)"):
        objective.block_sums(np.zeros(4), np.zeros((4, 3)), np.zeros(5))
    with pytest.raises(InputError, match=r"sample_weight must have shape \(4,\)"):
        objective.block_sums(np.zeros(4), np.zeros((4, 3)), np.zeros(4), np.ones(3))
    with pytest.raises(InputError, match=r"params must have shape \(4,\)"):
        objective.block_sums(np.zeros(3), np.zeros((4, 3)), np.zeros(4))


# -- block sums --------------------------------------------------------------------


def test_block_sums_hand_computed():
    objective = LinearObjective(HalfSquaredError(), 1)
    X = np.array([[1.0], [2.0]])
    y = np.array([0.0, 1.0])
    # raw = 2x + 1 = [3, 5]; residuals [3, 4]; weights [1, 0.5]
    loss_sum, grad, weight_sum = objective.block_sums(
        np.array([2.0, 1.0]), X, y, np.array([1.0, 0.5])
    )
    assert loss_sum == pytest.approx(0.5 * 9 + 0.5 * 0.5 * 16)
    np.testing.assert_allclose(grad, [3 * 1 + 0.5 * 4 * 2, 3 + 0.5 * 4])
    assert weight_sum == 1.5


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("sparse", [False, True])
def test_zero_rows(make_problem, name, sparse):
    objective, params, X, y, _ = make_problem(name, 0, 3, sparse=sparse)
    loss_sum, grad, weight_sum = objective.block_sums(params, X, y)
    assert (loss_sum, weight_sum) == (0.0, 0.0)
    np.testing.assert_array_equal(grad, np.zeros(objective.n_params))
    assert grad.dtype == np.float64


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(LOSS_NAMES),
    n_samples=st.integers(0, 40),
    n_features=st.integers(1, 6),
    n_classes=st.integers(2, 4),
    fit_intercept=st.booleans(),
    weighted=st.booleans(),
    sparse=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradient_matches_finite_differences(
    make_problem, name, n_samples, n_features, n_classes, fit_intercept, weighted, sparse, seed
):
    objective, params, X, y, sample_weight = make_problem(
        name,
        n_samples,
        n_features,
        n_classes=n_classes,
        fit_intercept=fit_intercept,
        weighted=weighted,
        sparse=sparse,
        seed=seed,
    )
    loss_sum, grad, weight_sum = objective.block_sums(params, X, y, sample_weight)
    assert grad.shape == (objective.n_params,)
    assert grad.dtype == np.float64
    expected_weight = n_samples if sample_weight is None else sample_weight.sum()
    assert weight_sum == pytest.approx(expected_weight)

    def f(p):
        return objective.block_sums(p, X, y, sample_weight)[0]

    np.testing.assert_allclose(grad, finite_difference(f, params), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_sums_add_over_row_splits(make_problem, name, sparse, weighted):
    objective, params, X, y, sw = make_problem(name, 50, 4, sparse=sparse, weighted=weighted)
    total = objective.block_sums(params, X, y, sw)
    parts = [
        objective.block_sums(
            params, X[a:b], y[a:b], None if sw is None else sw[a:b]
        )
        for a, b in [(0, 13), (13, 13), (13, 40), (40, 50)]
    ]
    assert sum(p[0] for p in parts) == pytest.approx(total[0], rel=1e-12)
    np.testing.assert_allclose(sum(p[1] for p in parts), total[1], rtol=1e-12, atol=1e-12)
    assert sum(p[2] for p in parts) == pytest.approx(total[2], rel=1e-12)


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("sparse", [False, True])
def test_slices_give_the_same_sums(make_problem, name, sparse):
    # slice_bytes=1 forces the minimum slice of 256 rows: 1000 rows make 4 slices.
    kwargs = {"n_classes": 4, "weighted": True, "sparse": sparse}
    sliced, params, X, y, sw = make_problem(name, 1000, 5, slice_bytes=1, **kwargs)
    whole = make_problem(name, 1000, 5, slice_bytes=2**40, **kwargs)[0]
    assert sliced._slice_rows(X, np) == 256
    got = sliced.block_sums(params, X, y, sw)
    expected = whole.block_sums(params, X, y, sw)
    assert got[0] == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-11, atol=1e-11)
    assert got[2] == pytest.approx(expected[2], rel=1e-12)


def test_default_slice_is_about_one_mebibyte():
    objective = LinearObjective(HalfSquaredError(), 100)
    assert objective._slice_rows(np.empty((10**6, 100)), np) == 2**20 // 800
    assert objective._slice_rows(np.empty((10**6, 100), np.float32), np) == 2**20 // 400
    wide = LinearObjective(HalfSquaredError(), 10**5)
    assert wide._slice_rows(np.empty((1000, 10**5)), np) == 256
    # Sparse blocks are processed whole unless slice_bytes says otherwise.
    assert objective._slice_rows(sp.random(5000, 100, format="csr"), np) == 5000


@pytest.mark.parametrize("sparse", [False, True])
def test_fancy_indexed_rows(make_problem, sparse):
    objective, params, X, y, sw = make_problem("multinomial", 30, 4, sparse=sparse, weighted=True)
    rows = np.array([3, 17, 17, 0, 29, 8])
    dense = X.toarray() if sparse else X
    got = objective.block_sums(params, X[rows], y[rows], sw[rows])
    expected = objective.block_sums(params, np.ascontiguousarray(dense[rows]), y[rows], sw[rows])
    assert got[0] == pytest.approx(expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


@pytest.mark.parametrize("fmt", ["csc", "coo"])
def test_other_sparse_formats_and_sparse_arrays(make_problem, fmt):
    objective, params, X, y, _ = make_problem("binary", 20, 3, sparse=True)
    expected = objective.block_sums(params, X, y)
    for block in (X.asformat(fmt), sp.csr_array(X)):
        got = objective.block_sums(params, block, y)
        assert got[0] == pytest.approx(expected[0])
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_float32_computes_in_float32_and_sums_in_float64(make_problem, name):
    objective, params, X, y, sw = make_problem(name, 300, 4, weighted=True)
    expected = objective.block_sums(params, X, y, sw)
    got = objective.block_sums(
        params, X.astype(np.float32), y.astype(np.float32), sw.astype(np.float32)
    )
    assert isinstance(got[0], float)
    assert got[1].dtype == np.float64
    assert got[0] == pytest.approx(expected[0], rel=1e-5)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-4, atol=1e-3)


def test_integer_labels_and_column_targets():
    objective = LinearObjective(MultinomialLogistic(3), 2)
    X = np.array([[1.0, 2.0], [0.5, -1.0]])
    params = np.linspace(-1, 1, objective.n_params)
    expected = objective.block_sums(params, X, np.array([2.0, 0.0]))
    for y in (np.array([2, 0]), np.array([[2.0], [0.0]])):
        got = objective.block_sums(params, X, y)
        assert got[0] == pytest.approx(expected[0])
        np.testing.assert_allclose(got[1], expected[1])


def test_integer_X_is_computed_in_float64():
    objective = LinearObjective(HalfSquaredError(), 2)
    X = np.array([[1, 2], [3, 4]])
    got = objective.block_sums(np.array([0.5, 0.25, 0.1]), X, np.zeros(2))
    expected = objective.block_sums(np.array([0.5, 0.25, 0.1]), X.astype(float), np.zeros(2))
    assert got[0] == expected[0]
    np.testing.assert_array_equal(got[1], expected[1])


def test_stable_for_extreme_predictions():
    X = np.array([[1.0], [1.0], [1.0], [1.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        binary = LinearObjective(BinaryLogistic(), 1, fit_intercept=False)
        loss_sum, grad, _ = binary.block_sums(np.array([800.0]), X, np.array([0.0, 1, 0, 1]))
        assert loss_sum == pytest.approx(2 * 800.0)
        assert grad[0] == pytest.approx(2.0)
        multi = LinearObjective(MultinomialLogistic(2), 1, fit_intercept=False)
        loss_sum, grad, _ = multi.block_sums(
            np.array([-900.0, 900.0]), X, np.array([0.0, 1, 0, 1])
        )
        assert loss_sum == pytest.approx(2 * 1800.0)
        np.testing.assert_allclose(grad, [-2.0, 2.0])


# -- objective_value_gradient ------------------------------------------------------


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("sparse", [False, True])
def test_objective_value_gradient(make_problem, name, sparse):
    objective, params, X, y, sw = make_problem(name, 25, 3, sparse=sparse, weighted=True)
    penalty = Penalty(alpha=0.3, l1_ratio=0.25)
    value, grad = objective_value_gradient(params, objective, penalty, X, y, sw)
    loss_sum, _, weight_sum = objective.block_sums(params, X, y, sw)
    coef, _ = objective.unpack(params)
    assert value == pytest.approx(loss_sum / weight_sum + 0.3 * 0.75 / 2 * np.sum(coef**2))

    def f(p):
        return objective_value_gradient(p, objective, penalty, X, y, sw)[0]

    np.testing.assert_allclose(grad, finite_difference(f, params), rtol=1e-6, atol=1e-7)
    no_penalty = objective_value_gradient(params, objective, None, X, y, sw)
    assert no_penalty[0] == pytest.approx(loss_sum / weight_sum)


def test_objective_value_gradient_needs_weight():
    objective = LinearObjective(HalfSquaredError(), 2)
    with pytest.raises(InputError, match="total sample weight is 0.0"):
        objective_value_gradient(np.zeros(3), objective, None, np.zeros((0, 2)), np.zeros(0))

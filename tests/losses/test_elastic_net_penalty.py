"""Penalty: hand-computed values, gradients, proximal steps, validation."""

import pickle

import numpy as np
import pytest

from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.losses import HalfSquaredError, LinearObjective, MultinomialLogistic, Penalty

# Two features, two classes, with intercept: rows [w11 w12], [w21 w22], [b1 b2].
OBJECTIVE = LinearObjective(MultinomialLogistic(2), 2, fit_intercept=True)
PARAMS = np.array([1.0, -2.0, 0.5, 3.0, 10.0, -10.0])
L1 = 1.0 + 2.0 + 0.5 + 3.0  # 6.5
L2_SQUARED = 1.0 + 4.0 + 0.25 + 9.0  # 14.25


def test_mask_excludes_intercept_row():
    np.testing.assert_array_equal(
        Penalty().mask(OBJECTIVE), [True, True, True, True, False, False]
    )
    no_intercept = LinearObjective(MultinomialLogistic(2), 2, fit_intercept=False)
    assert Penalty().mask(no_intercept).all()
    assert Penalty().mask(no_intercept).shape == (4,)


def test_values_hand_computed():
    penalty = Penalty(alpha=0.2, l1_ratio=0.25)
    assert penalty.l1_value(PARAMS, OBJECTIVE) == pytest.approx(0.2 * 0.25 * L1)
    smooth, grad = penalty.smooth_value_gradient(PARAMS, OBJECTIVE)
    assert smooth == pytest.approx(0.2 * 0.75 / 2 * L2_SQUARED)
    np.testing.assert_allclose(grad, [0.15, -0.3, 0.075, 0.45, 0.0, 0.0])
    assert penalty.value(PARAMS, OBJECTIVE) == pytest.approx(0.05 * 6.5 + 0.075 * 14.25)
    assert penalty.l2_strength == pytest.approx(0.15)
    assert penalty.l1_strength == pytest.approx(0.05)


def test_intercept_is_never_penalised():
    penalty = Penalty(alpha=5.0, l1_ratio=0.5)
    moved = PARAMS.copy()
    moved[4:] = [123.0, -7.0]
    assert penalty.value(moved, OBJECTIVE) == penalty.value(PARAMS, OBJECTIVE)
    assert np.all(penalty.smooth_value_gradient(moved, OBJECTIVE)[1][4:] == 0.0)
    np.testing.assert_array_equal(penalty.prox(moved, 100.0, OBJECTIVE)[4:], [123.0, -7.0])


def test_prox_soft_thresholds():
    penalty = Penalty(alpha=2.0, l1_ratio=0.5)  # threshold = step * 1.0
    out = penalty.prox(PARAMS, 0.75, OBJECTIVE)
    np.testing.assert_allclose(out, [0.25, -1.25, 0.0, 2.25, 10.0, -10.0])
    assert out is not PARAMS
    np.testing.assert_array_equal(PARAMS, [1.0, -2.0, 0.5, 3.0, 10.0, -10.0])  # unchanged


@pytest.mark.parametrize("penalty", [Penalty(), Penalty(alpha=1.0), Penalty(0.0, 1.0)])
def test_prox_is_identity_without_l1(penalty):
    assert not penalty.has_l1
    out = penalty.prox(PARAMS, 1.0, OBJECTIVE)
    np.testing.assert_array_equal(out, PARAMS)
    assert out is not PARAMS


def test_pure_l1_and_pure_l2():
    lasso = Penalty(alpha=1.0, l1_ratio=1.0)
    assert lasso.has_l1
    assert lasso.smooth_value_gradient(PARAMS, OBJECTIVE)[0] == 0.0
    assert lasso.value(PARAMS, OBJECTIVE) == pytest.approx(L1)
    ridge = Penalty(alpha=1.0)
    assert not ridge.has_l1
    assert ridge.l1_value(PARAMS, OBJECTIVE) == 0.0
    assert ridge.value(PARAMS, OBJECTIVE) == pytest.approx(L2_SQUARED / 2)
    assert Penalty().value(PARAMS, OBJECTIVE) == 0.0


def test_smooth_gradient_matches_finite_differences():
    penalty = Penalty(alpha=0.7, l1_ratio=0.3)
    objective = LinearObjective(HalfSquaredError(), 4)
    params = np.random.default_rng(0).standard_normal(5)
    _, grad = penalty.smooth_value_gradient(params, objective)
    h = 1e-6
    for j in range(5):
        e = np.zeros(5)
        e[j] = h
        fd = (
            penalty.smooth_value_gradient(params + e, objective)[0]
            - penalty.smooth_value_gradient(params - e, objective)[0]
        ) / (2 * h)
        assert grad[j] == pytest.approx(fd, abs=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": -0.1}, r"alpha must be in the range \[0, inf\), got -0.1"),
        ({"alpha": float("nan")}, r"alpha must be in the range \[0, inf\), got nan"),
        ({"alpha": float("inf")}, r"alpha must be in the range \[0, inf\), got inf"),
        ({"alpha": "1"}, r"alpha must be a real number in \[0, inf\), got '1' of type str"),
        ({"l1_ratio": 1.5}, r"l1_ratio must be in the range \[0, 1\], got 1.5"),
        ({"l1_ratio": -1}, r"l1_ratio must be in the range \[0, 1\], got -1"),
        ({"l1_ratio": None}, r"l1_ratio must be a real number in \[0, 1\], got None"),
    ],
)
def test_bad_settings_raise_parameter_error(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        Penalty(**kwargs)


def test_bad_params_and_step():
    with pytest.raises(InputError, match=r"params must have shape \(6,\).*got \(5,\)"):
        Penalty(1.0).value(np.zeros(5), OBJECTIVE)
    with pytest.raises(ParameterError, match="step must be >= 0, got -1"):
        Penalty(1.0, 0.5).prox(PARAMS, -1, OBJECTIVE)


def test_penalty_is_a_frozen_value():
    penalty = Penalty(alpha=np.float32(0.5), l1_ratio=1)
    assert type(penalty.alpha) is float and type(penalty.l1_ratio) is float
    assert pickle.loads(pickle.dumps(penalty)) == Penalty(0.5, 1.0)
    with pytest.raises(AttributeError):
        penalty.alpha = 1.0

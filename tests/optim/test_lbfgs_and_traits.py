"""L-BFGS's pure parts (two-loop recursion, strong Wolfe line search) and the traits
that optimizers and losses declare to the engine."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_dgd import optim
from dask_dgd.losses import BinaryLogistic, HalfPoisson, HalfSquaredError, MultinomialLogistic
from dask_dgd.optim import lbfgs_direction, strong_wolfe
from dask_dgd.optim._linesearch import cubic_minimizer


def _search(f, df, t0, max_trials=20):
    """Run the line search on a 1-D function; ``(step, trials)``."""
    gen = strong_wolfe(f(0.0), df(0.0), t0, max_trials)
    t, n = next(gen), 1
    try:
        while True:
            t = gen.send((f(t), df(t)))
            n += 1
    except StopIteration as done:
        return done.value, n


def test_two_loop_recursion_is_the_inverse_hessian_on_a_quadratic():
    A = np.diag([1.0, 4.0, 9.0])
    steps = [np.eye(3)[i] for i in range(3)]
    g = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(lbfgs_direction(g, steps, [A @ s for s in steps]), -np.linalg.solve(A, g))
    # no pairs yet: steepest descent; one pair: scaled by s.y / y.y
    np.testing.assert_array_equal(lbfgs_direction(g, [], []), -g)
    s, y = np.array([1.0, 0, 0]), np.array([2.0, 0, 0])
    d = lbfgs_direction(np.array([0.0, 1.0, 0.0]), [s], [y])
    np.testing.assert_allclose(d, [0.0, -0.5, 0.0])


@settings(max_examples=60, deadline=None)
@given(center=st.floats(1e-3, 1e3), scale=st.floats(1e-3, 1e3), t0=st.floats(1e-6, 1e6))
def test_strong_wolfe_meets_both_conditions_on_quadratics(center, scale, t0):
    f = lambda t: scale * (t - center) ** 2  # noqa: E731
    df = lambda t: 2 * scale * (t - center)  # noqa: E731
    t, trials = _search(f, df, t0)
    assert t > 0 and trials <= 20
    assert f(t) <= f(0) + 1e-4 * t * df(0)
    assert abs(df(t)) <= 0.9 * abs(df(0)) + 1e-9 * abs(df(0))


def test_strong_wolfe_shrinks_past_overflow_and_gives_up_without_decrease():
    f = lambda t: math.inf if t > 5 else (t - 3) ** 2  # noqa: E731
    df = lambda t: math.inf if t > 5 else 2 * (t - 3)  # noqa: E731
    t, _ = _search(f, df, 1000.0)
    assert 0 < t <= 5 and f(t) < f(0)
    # an ascent direction: nothing decreases, the search answers 0
    t, trials = _search(lambda t: t, lambda t: 1.0, 1.0, max_trials=5)
    assert t == 0.0 and trials <= 5
    # a step far too long for the curvature: found within the trials by zooming in
    t, _ = _search(lambda t: (t - 1e-6) ** 2, lambda t: 2 * (t - 1e-6), 1.0)
    assert 0 < t < 2e-6


def test_cubic_minimizer():
    # the cubic through (0, 0) slope -1 and (2, 0) slope 1 (x^2 - 2x shape): minimum at 1
    assert cubic_minimizer(0.0, 0.0, -1.0, 2.0, 0.0, 1.0) == pytest.approx(1.0)
    assert cubic_minimizer(0.0, 0.0, -1.0, 2.0, math.inf, math.inf) == 1.0  # not finite: the middle
    assert cubic_minimizer(0.0, 0.0, -1.0, 2.0, 0.0, 1.0, bounds=(1.5, 3.0)) == 1.5  # clipped to the bounds


def test_optimizer_traits():
    rows = {
        "sgd": (optim.sgd(), False, True, True),
        "momentum": (optim.sgd(momentum=0.9), False, False, False),
        "adam": (optim.adam(), True, False, False),
        "adamw": (optim.adamw(), True, False, False),
        "rmsprop": (optim.rmsprop(), True, True, False),
        "rmsprop-momentum": (optim.rmsprop(momentum=0.5), True, False, False),
        "adagrad": (optim.adagrad(), True, True, False),
    }
    for name, (opt, adaptive, descent, proximal) in rows.items():
        assert (opt.adaptive, opt.descent_method, opt.proximal_exact) == (adaptive, descent, proximal), name
    schedule = optim.sgd(learning_rate=optim.StepDecay(1.0, step_size=2, gamma=0.5))
    assert [schedule.learning_rate_at(k) for k in range(5)] == [1.0, 1.0, 0.5, 0.5, 0.25]


@pytest.mark.parametrize("loss", [HalfSquaredError(), BinaryLogistic(), HalfPoisson()])
def test_hessian_weights_are_the_second_derivatives(loss):
    y = np.array([0.0, 1.0, 2.0, 1.0])
    raw = np.array([[-1.0], [0.2], [0.7], [1.5]])
    eps = 1e-6
    up = loss.loss_gradient(y, raw + eps, np)[1][:, 0]
    down = loss.loss_gradient(y, raw - eps, np)[1][:, 0]
    np.testing.assert_allclose(loss.hessian_weight(y, raw, np), (up - down) / (2 * eps), rtol=1e-6)
    assert loss.has_hessian


def test_loss_traits_declare_the_kernel_and_the_hessian():
    losses = [HalfSquaredError(), BinaryLogistic(), HalfPoisson(), MultinomialLogistic(3)]
    codes = [loss.fused_code for loss in losses]
    assert len(set(codes)) == 4 and None not in codes
    assert not MultinomialLogistic(3).has_hessian


def _textbook_direction(grad, s_list, y_list):
    """The two-loop recursion as it is written in Nocedal and Wright (Algorithm 7.4),
    a new vector for every update: what :func:`lbfgs_direction` must equal bit for bit."""
    q = np.array(grad, dtype=np.float64, copy=True)
    rho = [1.0 / float(y @ s) for s, y in zip(s_list, y_list)]
    alpha = []
    for s, y, r in zip(reversed(s_list), reversed(y_list), reversed(rho)):
        a = r * float(s @ q)
        alpha.append(a)
        q = q - a * y
    if s_list:
        q = q * (float(s_list[-1] @ y_list[-1]) / float(y_list[-1] @ y_list[-1]))
    for s, y, r, a in zip(s_list, y_list, rho, reversed(alpha)):
        b = r * float(y @ q)
        q = q + (a - b) * s
    return -q


@pytest.mark.parametrize("n, m", [(3, 0), (3, 1), (50, 4), (20_000, 7)])
def test_two_loop_in_place_equals_the_textbook_recursion_bit_for_bit(n, m):
    from dask_dgd.optim._lbfgs import two_loop

    rng = np.random.default_rng(n + m)
    s_list = [rng.standard_normal(n) for _ in range(m)]
    y_list = [s * rng.uniform(0.5, 2.0, n) for s in s_list]
    g = rng.standard_normal(n)
    expected = _textbook_direction(g, s_list, y_list)
    np.testing.assert_array_equal(lbfgs_direction(g, s_list, y_list), expected)
    sy = [float(s @ y) for s, y in zip(s_list, y_list)]
    yy = float(y_list[-1] @ y_list[-1]) if m else None
    work = np.full(n, np.nan)  # the scratch vector's old contents must not matter
    np.testing.assert_array_equal(two_loop(g, s_list, y_list, sy, yy, work), expected)
    assert np.all(np.isfinite(g))  # the gradient itself is left as it was

"""First-order optimizers: hand-computed steps, convergence on a quadratic, purity.

The expected values are worked out by hand in the comments; the numbers are chosen so
that square roots are exact.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from dask_dgd.optim import (
    SGD,
    Adagrad,
    Adam,
    AdamW,
    CosineDecay,
    InverseScaling,
    RMSprop,
)


def run(opt, grads_seq, params):
    """Apply ``opt`` with the given gradients; return the list of updates and the state."""
    params = np.asarray(params, dtype=float)
    state = opt.init(params)
    updates = []
    for grads in grads_seq:
        upd, state = opt.update(np.asarray(grads, dtype=float), state, params)
        updates.append(upd)
        params = params + upd
    return updates, state, params


# --------------------------------------------------------------------------- SGD


def test_sgd_plain_steps():
    updates, state, params = run(SGD(learning_rate=0.1), [[0.5, -1.0], [1.0, 2.0]], [1.0, -2.0])
    assert_allclose(updates[0], [-0.05, 0.1])
    assert_allclose(updates[1], [-0.1, -0.2])
    assert_allclose(params, [0.85, -2.1])
    assert state.count == 2


def test_sgd_momentum_steps():
    opt = SGD(learning_rate=0.1, momentum=0.9)
    grads = [[1.0, -2.0], [0.5, 1.0], [0.0, 0.0]]
    updates, state, _ = run(opt, grads, [0.0, 0.0])
    # buf1 = g1 = [1, -2]
    assert_allclose(updates[0], [-0.1, 0.2])
    # buf2 = 0.9 * [1, -2] + [0.5, 1] = [1.4, -0.8]
    assert_allclose(updates[1], [-0.14, 0.08])
    # buf3 = 0.9 * [1.4, -0.8] + 0 = [1.26, -0.72]
    assert_allclose(updates[2], [-0.126, 0.072])
    assert_allclose(state.momentum_buffer, [1.26, -0.72])
    assert state.count == 3


def test_sgd_nesterov_steps():
    opt = SGD(learning_rate=0.1, momentum=0.9, nesterov=True)
    grads = [[1.0, -2.0], [0.5, 1.0], [0.0, 0.0]]
    updates, state, _ = run(opt, grads, [0.0, 0.0])
    # step1 = g1 + 0.9 * buf1 = [1, -2] + [0.9, -1.8] = [1.9, -3.8]
    assert_allclose(updates[0], [-0.19, 0.38])
    # step2 = [0.5, 1] + 0.9 * [1.4, -0.8] = [1.76, 0.28]
    assert_allclose(updates[1], [-0.176, -0.028])
    # step3 = 0 + 0.9 * [1.26, -0.72] = [1.134, -0.648]
    assert_allclose(updates[2], [-0.1134, 0.0648])
    assert_allclose(state.momentum_buffer, [1.26, -0.72])


# --------------------------------------------------------------------------- Adam, AdamW

# b1 = b2 = 0.5, eps = 1, g1 = [2, -4], g2 = [2, 4]
#   m1 = 0.5 * g1 = [1, -2]          v1 = 0.5 * g1**2 = [2, 8]
#   mhat1 = m1 / 0.5 = [2, -4]       vhat1 = v1 / 0.5 = [4, 16]   sqrt + eps = [3, 5]
#   m2 = [0.5 + 1, -1 + 2] = [1.5, 1]  v2 = [1 + 2, 4 + 8] = [3, 12]
#   mhat2 = m2 / 0.75 = [2, 4/3]      vhat2 = v2 / 0.75 = [4, 16]  sqrt + eps = [3, 5]
ADAM_GRADS = [[2.0, -4.0], [2.0, 4.0]]


def test_adam_steps():
    opt = Adam(learning_rate=0.1, b1=0.5, b2=0.5, eps=1.0)
    updates, state, _ = run(opt, ADAM_GRADS, [1.0, -2.0])
    assert_allclose(updates[0], [-0.1 * 2 / 3, -0.1 * -4 / 5])
    assert_allclose(updates[1], [-0.1 * 2 / 3, -0.1 * (4 / 3) / 5])
    assert_allclose(state.mu, [1.5, 1.0])
    assert_allclose(state.nu, [3.0, 12.0])
    assert state.count == 2


def test_adamw_steps():
    opt = AdamW(learning_rate=0.1, b1=0.5, b2=0.5, eps=1.0, weight_decay=0.5)
    updates, _, _ = run(opt, ADAM_GRADS, [1.0, -2.0])
    # step 1 at params [1, -2]: -0.1 * ([2/3, -4/5] + 0.5 * [1, -2])
    assert_allclose(updates[0], [-0.1 * (2 / 3 + 0.5), -0.1 * (-0.8 - 1.0)])
    # step 2 at params [1 - 7/60, -2 + 0.18] = [53/60, -1.82]
    assert_allclose(
        updates[1], [-0.1 * (2 / 3 + 0.5 * 53 / 60), -0.1 * (4 / 15 + 0.5 * -1.82)]
    )


def test_adamw_decay_mask_excludes_masked_entries():
    opt = AdamW(learning_rate=0.1, b1=0.5, b2=0.5, eps=1.0, weight_decay=0.5)
    params = np.array([1.0, -2.0, 3.0])
    grads = np.array([2.0, -4.0, 0.0])
    mask = np.array([True, False, False])
    upd, _ = opt.update(grads, opt.init(params), params, decay_mask=mask)
    # decayed: -0.1 * (2/3 + 0.5 * 1); undecayed: -0.1 * (-4/5), and exactly 0 for g = 0
    assert_allclose(upd, [-0.1 * (2 / 3 + 0.5), 0.08, 0.0])
    unmasked, _ = opt.update(grads, opt.init(params), params)
    assert_allclose(unmasked, [-0.1 * (2 / 3 + 0.5), -0.1 * (-0.8 - 1.0), -0.15])
    everything, _ = opt.update(grads, opt.init(params), params, decay_mask=np.ones(3, bool))
    assert_allclose(everything, unmasked)


def test_adam_without_decay_equals_adamw_with_zero_decay():
    params = np.array([0.3, -0.7])
    a, b = Adam(learning_rate=0.05), AdamW(learning_rate=0.05, weight_decay=0.0)
    sa, sb = a.init(params), b.init(params)
    for g in ([1.0, 2.0], [-0.5, 0.25], [3.0, -1.0]):
        ua, sa = a.update(np.array(g), sa, params)
        ub, sb = b.update(np.array(g), sb, params)
        assert_allclose(ua, ub)


# --------------------------------------------------------------------------- RMSprop


def test_rmsprop_steps():
    # decay 0.75, eps 1: nu1 = 0.25 * [4, 16] = [1, 4]; rms + eps = [2, 3]
    # nu2 = 0.75 * [1, 4] + 0.25 * [1, 4] = [1, 4]; rms + eps = [2, 3]
    opt = RMSprop(learning_rate=0.1, decay=0.75, eps=1.0)
    updates, state, _ = run(opt, [[2.0, -4.0], [1.0, 2.0]], [0.0, 0.0])
    assert_allclose(updates[0], [-0.1 * 2 / 2, -0.1 * -4 / 3])
    assert_allclose(updates[1], [-0.1 * 1 / 2, -0.1 * 2 / 3])
    assert_allclose(state.nu, [1.0, 4.0])
    assert_allclose(state.momentum_buffer, [0.0, 0.0])  # unused without momentum
    assert_allclose(state.mean_grad, [0.0, 0.0])  # unused unless centered


def test_rmsprop_momentum_steps():
    # steps as above: s1 = [1, -4/3], s2 = [0.5, 2/3]
    # buf1 = s1; buf2 = 0.5 * [1, -4/3] + [0.5, 2/3] = [1, 0]
    opt = RMSprop(learning_rate=0.1, decay=0.75, eps=1.0, momentum=0.5)
    updates, state, _ = run(opt, [[2.0, -4.0], [1.0, 2.0]], [0.0, 0.0])
    assert_allclose(updates[0], [-0.1, 0.1 * 4 / 3])
    assert_allclose(updates[1], [-0.1, 0.0], atol=1e-15)
    assert_allclose(state.momentum_buffer, [1.0, 0.0], atol=1e-15)


def test_rmsprop_centered_steps():
    # decay 0.5, eps 1, g1 = [2, -4]:
    #   nu1 = [2, 8], mean1 = [1, -2], nu1 - mean1**2 = [1, 4], sqrt + eps = [2, 3]
    # g2 = [-0.75, -1]:
    #   nu2 = [1 + 0.28125, 4 + 0.5] = [1.28125, 4.5], mean2 = [0.125, -1.5]
    #   nu2 - mean2**2 = [1.265625, 2.25], sqrt + eps = [2.125, 2.5]
    opt = RMSprop(learning_rate=0.1, decay=0.5, eps=1.0, centered=True)
    updates, state, _ = run(opt, [[2.0, -4.0], [-0.75, -1.0]], [0.0, 0.0])
    assert_allclose(updates[0], [-0.1 * 2 / 2, -0.1 * -4 / 3])
    assert_allclose(updates[1], [-0.1 * -0.75 / 2.125, -0.1 * -1 / 2.5])
    assert_allclose(state.nu, [1.28125, 4.5])
    assert_allclose(state.mean_grad, [0.125, -1.5])


def test_rmsprop_centered_constant_gradient_is_finite():
    # nu - mean**2 is 0 in exact arithmetic for a constant gradient; rounding must not
    # turn it into sqrt(negative) = nan.
    opt = RMSprop(learning_rate=0.1, decay=0.9, centered=True)
    params = np.zeros(3)
    state = opt.init(params)
    for _ in range(50):
        upd, state = opt.update(np.array([0.1, 1e-3, 7.3]), state, params)
        assert np.all(np.isfinite(upd))


# --------------------------------------------------------------------------- Adagrad


def test_adagrad_steps():
    # acc0 = 9, eps = 1; g1 = [4, -4]: acc1 = [25, 25], sqrt + eps = [6, 6]
    # g2 = [12, 0]: acc2 = [169, 25], sqrt + eps = [14, 6]
    opt = Adagrad(learning_rate=0.1, initial_accumulator_value=9.0, eps=1.0)
    updates, state, _ = run(opt, [[4.0, -4.0], [12.0, 0.0]], [1.0, 1.0])
    assert_allclose(updates[0], [-0.1 * 4 / 6, -0.1 * -4 / 6])
    assert_allclose(updates[1], [-0.1 * 12 / 14, 0.0])
    assert_allclose(state.sum_of_squares, [169.0, 25.0])


# --------------------------------------------------------------------------- convergence

A = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 1.0, 1.0], [1.0, 0.0, 2.0]])
B = np.array([1.0, 2.0, 3.0, -1.0])
X_STAR = np.linalg.lstsq(A, B, rcond=None)[0]


def quadratic_grad(x):
    """Gradient of 0.5 * ||A x - b||^2."""
    return A.T @ (A @ x - B)


@pytest.mark.parametrize(
    ("opt", "steps"),
    [
        (SGD(learning_rate=0.05), 2000),
        (SGD(learning_rate=InverseScaling(0.1, power_t=0.25)), 2000),
        (SGD(learning_rate=0.02, momentum=0.9), 1000),
        (SGD(learning_rate=0.02, momentum=0.9, nesterov=True), 1000),
        (Adam(learning_rate=0.05), 3000),
        (AdamW(learning_rate=0.05, weight_decay=0.0), 3000),
        (RMSprop(learning_rate=CosineDecay(0.05, decay_steps=3000)), 3000),
        (RMSprop(learning_rate=CosineDecay(0.02, decay_steps=3000), momentum=0.5), 3000),
        (RMSprop(learning_rate=CosineDecay(0.05, 3000), centered=True), 3000),
        (Adagrad(learning_rate=0.5), 3000),
    ],
    ids=repr,
)
def test_minimises_quadratic(opt, steps):
    x = np.zeros(3)
    state = opt.init(x)
    for _ in range(steps):
        upd, state = opt.update(quadratic_grad(x), state, x)
        x = x + upd
    assert state.count == steps
    assert_allclose(x, X_STAR, atol=1e-8)


def test_adamw_shrinks_towards_zero():
    """With decay, AdamW stops short of the unregularised optimum, closer to 0."""
    x = np.zeros(3)
    opt = AdamW(learning_rate=CosineDecay(0.05, 3000), weight_decay=0.5)
    state = opt.init(x)
    for _ in range(3000):
        upd, state = opt.update(quadratic_grad(x), state, x)
        x = x + upd
    assert np.all(np.isfinite(x))
    assert np.linalg.norm(x) < np.linalg.norm(X_STAR)


# --------------------------------------------------------------------------- purity, dtype

ALL_FIRST_ORDER = [
    SGD(learning_rate=0.1),
    SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
    Adam(learning_rate=0.1),
    AdamW(learning_rate=0.1),
    RMSprop(learning_rate=0.1, momentum=0.5, centered=True),
    Adagrad(learning_rate=0.1),
]


@pytest.mark.parametrize("opt", ALL_FIRST_ORDER, ids=repr)
def test_update_does_not_mutate_inputs(opt):
    params = np.array([1.0, -2.0, 0.5])
    grads = np.array([0.3, 0.1, -0.2])
    mask = np.array([True, True, False])
    state = opt.init(params)
    _, state = opt.update(grads, state, params)  # non-trivial state
    copies = [params.copy(), grads.copy(), mask.copy()] + [np.copy(a) for a in state[1:]]
    upd, new_state = opt.update(grads, state, params, decay_mask=mask)
    after = [params, grads, mask] + list(state[1:])
    for before, now in zip(copies, after, strict=True):
        np.testing.assert_array_equal(before, now)
    assert state.count == 1 and new_state.count == 2
    assert upd is not params and upd is not grads


@pytest.mark.parametrize("opt", ALL_FIRST_ORDER, ids=repr)
def test_float32_stays_float32(opt):
    params = np.array([1.0, -2.0], dtype=np.float32)
    state = opt.init(params)
    upd, state = opt.update(np.array([0.5, 0.5], dtype=np.float32), state, params)
    assert upd.dtype == np.float32
    assert all(a.dtype == np.float32 for a in state[1:])

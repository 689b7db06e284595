"""The compiled online passes (``dask_dgd.losses._online``) against a plain-Python
reference (``tests/online_reference.py``, the same formulas in the same order): bit for
bit for the squared error, to 1e-13 for the losses with ``exp`` (libm against LLVM)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from online_reference import online_reference

from dask_dgd.exceptions import ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfGamma,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
)
from dask_dgd.losses._online import OnlinePass, OnlineRule, average_changes

LOSSES = {
    "squared": (HalfSquaredError(), 0, lambda rng, n: rng.standard_normal(n)),
    "logistic": (BinaryLogistic(), 1, lambda rng, n: (rng.random(n) < 0.5) * 1.0),
    "poisson": (HalfPoisson(), 2, lambda rng, n: rng.poisson(1.0, n) * 1.0),
    "multinomial": (MultinomialLogistic(3), 3, lambda rng, n: rng.integers(0, 3, n) * 1.0),
}
RULES = {
    "sgd": OnlineRule("sgd", 0.05),
    "sgd-invscaling": OnlineRule("sgd", 0.1, power_t=0.5),
    "sgd-inverse-time": OnlineRule("sgd", 0.2, power_t=1.0, t0=7.0),
    "adagrad": OnlineRule("adagrad", 0.1, initial_accumulator=0.1, eps=1e-7),
    "normalized": OnlineRule("normalized", 0.3),
}


def _design(rng, n=60, d=9, density=0.4, offset_k=0):
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    if offset_k:
        X = np.hstack([X, 0.1 * rng.standard_normal((n, offset_k))])
    return X


def _run(obj, rule, X, y, sw, order, *, lam=0.0, micro=1, blocks=1, w0=None, csr=False, state=None):
    """The kernel over ``order`` cut into ``blocks`` consecutive blocks (a micro-batch
    spans the cuts); returns ``(params, change, pass)``."""
    w0 = np.zeros(obj.n_params) if w0 is None else w0
    p = OnlinePass(obj, lam, rule, w0, micro=micro, state=state)
    cuts = np.array_split(np.arange(X.shape[0]), blocks)
    pieces = [X[c] for c in cuts]
    for b, (c, piece) in enumerate(zip(cuts, pieces)):
        Xb = sp.csr_matrix(piece) if csr else piece
        local = np.array([i - c[0] for i in order if c[0] <= i <= c[-1]], dtype=np.int64)
        status = p.block(Xb, y[c], None if sw is None else sw[c], local, apply_last=b == blocks - 1)
        assert status == 0
    return p.params(), p.finish(), p


def _check(got, want, code):
    if code == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("micro", [1, 7])
def test_kernel_equals_the_reference(loss, rule, micro):
    rng = np.random.default_rng(5)
    lossobj, code, make_y = LOSSES[loss]
    X = _design(rng)
    y = make_y(rng, X.shape[0])
    obj = LinearObjective(lossobj, X.shape[1])
    order = rng.permutation(X.shape[0])  # rows in two blocks, visited in a shuffled order within each
    order = np.concatenate([np.sort(order[order < 30]), order[order >= 30]])
    r = RULES[rule]
    w, change, _ = _run(obj, r, X, y, None, order, lam=0.01, micro=micro, blocks=2)
    ref, loss_sum, weight, sigma, _ = online_reference(
        X, y, None, order, code=code, K=obj.n_outputs, rule=r.name, eta0=r.eta0, power_t=r.power_t, t0=r.t0, lam=0.01,
        a0=r.initial_accumulator, eps=r.eps, micro=micro)
    _check(w, ref, code)
    _check(change.loss_sum, loss_sum, code)
    assert change.weight_sum == weight == X.shape[0]
    assert change.sigma == sigma


@pytest.mark.parametrize("rule", sorted(RULES))
def test_weights_offsets_no_intercept_and_a_warm_start(rule):
    rng = np.random.default_rng(7)
    K = 3
    X = _design(rng, offset_k=K)
    y = rng.integers(0, K, X.shape[0]) * 1.0
    sw = rng.uniform(0.0, 2.0, X.shape[0])
    sw[3] = 0.0
    obj = LinearObjective(MultinomialLogistic(K), X.shape[1] - K, fit_intercept=False, offset=True)
    w0 = 0.1 * rng.standard_normal(obj.n_params)
    r = RULES[rule]
    order = np.arange(X.shape[0])
    for micro in (1, 5):
        w, _, _ = _run(obj, r, X, y, sw, order, lam=0.02, micro=micro, w0=w0)
        ref = online_reference(X, y, sw, order, code=3, K=K, rule=r.name, eta0=r.eta0, power_t=r.power_t, t0=r.t0, lam=0.02,
                               a0=r.initial_accumulator, eps=r.eps, micro=micro, fit_intercept=False,
                               has_offset=True, w0=w0)[0]
        np.testing.assert_allclose(w, ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("micro", [1, 4])
def test_dense_and_csr_blocks_of_the_same_matrix_give_the_same_bits(rule, micro):
    rng = np.random.default_rng(11)
    X = _design(rng, density=0.3)
    y = (rng.random(X.shape[0]) < 0.4) * 1.0
    obj = LinearObjective(BinaryLogistic(), X.shape[1])
    order = rng.permutation(X.shape[0])
    dense, _, _ = _run(obj, RULES[rule], X, y, None, order, lam=0.01, micro=micro)
    csr, _, _ = _run(obj, RULES[rule], X, y, None, order, lam=0.01, micro=micro, csr=True)
    np.testing.assert_array_equal(dense, csr)
    # float32 data and int64 indices: the same arithmetic on the widened values
    X32 = X.astype(np.float32)
    p = OnlinePass(obj, 0.01, RULES[rule], np.zeros(obj.n_params), micro=micro)
    A = sp.csr_matrix(X32)
    A.indices = A.indices.astype(np.int64)
    A.indptr = A.indptr.astype(np.int64)
    assert p.block(A, y, None, order) == 0
    want = _run(obj, RULES[rule], X32.astype(np.float64), y, None, order, lam=0.01, micro=micro)[0]
    np.testing.assert_array_equal(p.params(), want)


def test_a_forced_fold_of_the_running_scale_matches_the_reference():
    rng = np.random.default_rng(2)
    X = _design(rng, n=80)
    y = rng.standard_normal(80)
    obj = LinearObjective(HalfSquaredError(), X.shape[1])
    r = OnlineRule("sgd", 0.5)  # 1 - eta * lam = 0.5 a row: the scale falls below 1e-9 after 30 rows
    w, change, p = _run(obj, r, X, y, None, np.arange(80), lam=1.0)
    assert p.st[p.mod.S_FOLD] < 1e-9  # (the fold happened)
    ref, _, _, sigma, _ = online_reference(X, y, None, np.arange(80), code=0, K=1, rule="sgd", eta0=0.5, lam=1.0)
    np.testing.assert_array_equal(w, ref)
    assert change.sigma == sigma


def test_the_rule_state_continues_across_rounds_as_one_pass():
    rng = np.random.default_rng(3)
    X = _design(rng, n=50)
    y = (rng.random(50) < 0.5) * 1.0
    obj = LinearObjective(BinaryLogistic(), X.shape[1])
    r = RULES["normalized"]
    w1, _, p1 = _run(obj, r, X, y, None, np.arange(25))
    w2, _, _ = _run(obj, r, X, y, None, np.arange(25, 50), w0=w1, state=p1.state)
    ref1 = online_reference(X, y, None, np.arange(25), code=1, K=1, rule="normalized", eta0=r.eta0)
    ref2 = online_reference(X, y, None, np.arange(25, 50), code=1, K=1, rule="normalized", eta0=r.eta0, w0=ref1[0],
                            state=ref1[4])
    np.testing.assert_allclose(w2, ref2[0], rtol=1e-13, atol=1e-15)


@pytest.mark.slow
def test_a_row_costs_its_entries_not_the_parameters():
    # d = 2**22 features, 100 rows of 5 entries: only the rows' entries (and the
    # intercept) move, and the round's touched list is exactly their union
    d = 2**22
    rng = np.random.default_rng(0)
    cols = rng.choice(d, size=(100, 5))
    cols.sort(axis=1)
    X = sp.csr_matrix((np.ones(500), cols.ravel(), np.arange(0, 501, 5)), shape=(100, d))
    X.sum_duplicates()
    y = (rng.random(100) < 0.5) * 1.0
    obj = LinearObjective(BinaryLogistic(), d)
    w0 = rng.standard_normal(obj.n_params)
    p = OnlinePass(obj, 0.0, RULES["adagrad"], w0)
    acc0 = p.state["acc"]
    assert p.block(X, y, None, np.arange(100)) == 0
    change = p.finish()
    used = np.union1d(np.unique(X.indices), [d])
    np.testing.assert_array_equal(change.idx, used)
    untouched = np.setdiff1d(np.arange(obj.n_params), used)
    np.testing.assert_array_equal(p.params()[untouched], w0[untouched])
    np.testing.assert_array_equal(p.state["acc"][untouched], acc0[untouched])
    assert np.all(p.params()[used] != w0[used])


def test_the_change_rebuilds_the_parameters_and_one_group_averages_to_itself():
    rng = np.random.default_rng(4)
    X = _design(rng)
    y = rng.standard_normal(X.shape[0])
    obj = LinearObjective(HalfSquaredError(), X.shape[1])
    w0 = rng.standard_normal(obj.n_params)
    mask = np.ones(obj.n_params, bool)
    mask[-1] = False
    for rule in ("sgd", "adagrad"):
        w, c, _ = _run(obj, RULES[rule], X, y, None, np.arange(X.shape[0]), lam=0.05, w0=w0)
        rebuilt = np.where(mask, c.sigma, 1.0) * w0
        rebuilt[c.idx] += c.delta
        np.testing.assert_allclose(rebuilt, w, rtol=1e-14, atol=1e-15)
        n = obj.n_params
        if rule == "sgd":
            idx, values = c.idx, c.weight_sum * c.delta
        else:
            idx, values = np.concatenate([c.idx, n + c.idx]), np.concatenate([c.cw * c.delta, c.cw])
        avg = average_changes(w0, n - 1, RULES[rule].average, idx, values, c.weight_sum, c.weight_sum * c.sigma)
        np.testing.assert_allclose(avg, w, rtol=1e-13, atol=1e-14)


def test_two_groups_average_by_samples_and_by_coordinate():
    # the average of two groups' changes is the average of their models: by sample
    # weight, or entry by entry by their coordinate weights
    w0 = np.array([1.0, 2.0, 3.0, 0.5])  # three coefficients and an intercept
    n = 4
    sig = (0.9, 0.8)
    models = [np.array([1.5, 1.8, 3.0 * 0.9, 0.7]), np.array([0.8, 2.0 * 0.8, 2.0, 0.2])]
    touched = [np.array([0, 1, 3]), np.array([0, 2, 3])]
    cws = [np.array([1.0, 2.0, 0.5]), np.array([3.0, 1.0, 1.5])]
    weights = (30.0, 10.0)
    deltas = [m[t] - np.where(t < 3, s, 1.0) * w0[t] for m, t, s in zip(models, touched, sig)]
    # samples: sum n_g w_g / N
    vals = np.zeros(n)
    for t, dlt, wt in zip(touched, deltas, weights):
        vals[t] += wt * dlt
    scale = sum(wt * s for wt, s in zip(weights, sig))
    got = average_changes(w0, 3, "samples", np.arange(n), vals, sum(weights), scale)
    want = (weights[0] * models[0] + weights[1] * models[1]) / sum(weights)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # coordinate: S w0 + sum cw delta / sum cw where touched
    num, den = np.zeros(n), np.zeros(n)
    for t, dlt, cw in zip(touched, deltas, cws):
        num[t] += cw * dlt
        den[t] += cw
    idx = np.concatenate([np.flatnonzero(den), n + np.flatnonzero(den)])
    vals = np.concatenate([num[den > 0], den[den > 0]])
    got = average_changes(w0, 3, "coordinate", idx, vals, sum(weights), scale)
    S = scale / sum(weights)
    want = np.where(np.arange(n) < 3, S, 1.0) * w0 + np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # entry 0, touched by both: the cw-weighted mean of their changes
    assert got[0] == pytest.approx(S * w0[0] + (1.0 * deltas[0][0] + 3.0 * deltas[1][0]) / 4.0)


def test_status_codes_name_a_non_finite_row_and_an_explosion():
    rng = np.random.default_rng(1)
    X = _design(rng)
    y = rng.standard_normal(X.shape[0])
    obj = LinearObjective(HalfSquaredError(), X.shape[1])
    bad = X.copy()
    bad[10, 2] = np.nan
    p = OnlinePass(obj, 0.0, RULES["sgd"], np.zeros(obj.n_params))
    assert p.block(bad, y, None, np.arange(X.shape[0])) == 1
    p = OnlinePass(obj, 0.0, OnlineRule("sgd", 50.0), np.zeros(obj.n_params), limit=10.0)
    assert p.block(X * 10, y, None, np.arange(X.shape[0])) == 2
    stopped = p.finish()  # (the sums stop at the update that crossed the limit)
    assert stopped.loss_sum > 10.0 * stopped.weight_sum and stopped.weight_sum < X.shape[0]


def test_bad_inputs_are_refused_clearly():
    obj = LinearObjective(HalfGamma(), 3)
    with pytest.raises(ParameterError, match="HalfGamma loss has no compiled row formula"):
        OnlinePass(obj, 0.0, RULES["sgd"], np.zeros(obj.n_params))
    with pytest.raises(ParameterError, match="one of .*'normalized'.*got 'adam'"):
        OnlineRule("adam", 0.1)
    with pytest.raises(ParameterError, match="finite number > 0; got nan"):
        OnlineRule("sgd", math.nan)
    obj = LinearObjective(BinaryLogistic(), 3)
    p = OnlinePass(obj, 0.0, RULES["sgd"], np.zeros(obj.n_params))
    with pytest.raises(ParameterError, match="read CSR blocks; got a csc matrix"):
        p.block(sp.csc_matrix(np.eye(3)), np.zeros(3), None, np.arange(3))
    with pytest.raises(ParameterError, match=r"params must have shape \(4,\); got \(3,\)"):
        OnlinePass(obj, 0.0, RULES["sgd"], np.zeros(3))

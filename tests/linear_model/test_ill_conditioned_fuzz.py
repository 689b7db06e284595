"""A fuzz of ill-conditioned problems: every default fit reaches the optimum or says so.

200 seeded problems over every single-output family (least squares, logistic, binomial
proportions with trials as weights, Poisson, Gamma, Tweedie, negative binomial), dense
and sparse, unpenalised and with a ridge penalty, and 40 multinomial ones: column scales from 1e-4 to 1e6,
columns far from zero beside their spread, and near-collinear pairs whose standardised
condition reaches 1e10.  The reference is Newton-Raphson written here, independently of
the library: on centred and scaled columns (numerically, on the data), each step a
weighted least-squares problem solved by an SVD-based ``lstsq``, iterated to the
rounding level.

A fit passes when its linear predictor is within 1e-6 (relative to the predictor's
size) of the reference's (the predictor is what a near-collinear design determines;
its coefficients along a near-null direction are not), or when its objective is not
above the reference's (then the reference, limited by the same rounding, is what
stopped short of the optimum), or when it warned with the
measured gap.  Zero silent misses; and warnings stay rare (a solver that always warned
would pass the first rule).
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from dask_dgd import (
    BinomialRegressor,
    GammaRegressor,
    LinearRegression,
    LogisticRegression,
    NegativeBinomialRegressor,
    PoissonRegressor,
    TweedieRegressor,
)

N_PROBLEMS = 200
FAMILIES = ("linear", "logistic", "binomial", "poisson", "gamma", "tweedie", "negbin")
THETA = 2.0  # the negative binomial's


def problem(seed):
    """``(family, X, y, weights or None, alpha, sparse)`` of problem ``seed``."""
    rng = np.random.default_rng([2026, seed])
    family = FAMILIES[seed % len(FAMILIES)]
    sparse = seed % 3 == 2
    n, d = int(rng.integers(200, 600)), int(rng.integers(2, 8))
    Z = rng.standard_normal((n, d))
    if d >= 2 and rng.random() < 0.6:  # a near-collinear pair: condition up to 1e10
        j, k = rng.choice(d, 2, replace=False)
        Z[:, k] = Z[:, j] + 10.0 ** rng.uniform(-10, -2) * rng.standard_normal(n)
    if sparse:
        Z[rng.random((n, d)) < 0.6] = 0.0
        Z[:, 0] = np.where(Z[:, 0] == 0, 1.0, Z[:, 0])  # no empty row: the intercept alone is a poor model
    eta = 0.3 + Z @ (rng.standard_normal(d) * 0.6 / np.sqrt(d))
    scale = 10.0 ** rng.uniform(-4, 6, d)
    X = Z * scale
    if not sparse:  # columns far from zero beside their spread
        X = X + scale * np.where(rng.random(d) < 0.5, rng.uniform(-50, 50, d), 0.0)
    w = None
    if family == "linear":
        y = eta * 10.0 ** rng.uniform(-3, 5) + rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3)
    elif family == "logistic":
        y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    elif family == "binomial":
        w = rng.integers(1, 30, n).astype(np.float64)
        y = rng.binomial(w.astype(np.int64), 1 / (1 + np.exp(-eta))) / w
    else:
        mu = np.exp(eta)
        if family == "poisson":
            y = rng.poisson(mu).astype(np.float64)
        elif family == "gamma":
            y = rng.gamma(2.0, mu / 2.0)
        elif family == "tweedie":  # compound Poisson-Gamma, power 1.5
            counts = rng.poisson(mu ** 0.5 / 0.5)
            y = np.array([rng.gamma(1.0, 0.5 * m ** 0.5, c).sum() for c, m in zip(counts, mu)])
        else:
            y = rng.negative_binomial(THETA, THETA / (THETA + mu)).astype(np.float64)
    alpha = 0.0 if rng.random() < 0.6 else float(10.0 ** rng.uniform(-4, -1))
    return family, (sp.csr_matrix(X) if sparse else X), y, w, alpha


def estimator(family, alpha):
    return {
        "linear": LinearRegression, "logistic": LogisticRegression, "binomial": BinomialRegressor,
        "poisson": PoissonRegressor, "gamma": GammaRegressor,
        "tweedie": lambda alpha: TweedieRegressor(power=1.5, link="log", alpha=alpha),
        "negbin": lambda alpha: NegativeBinomialRegressor(theta=THETA, alpha=alpha),
    }[family](alpha=alpha)


def objective_value(family, eta, coef, y, w, alpha):
    """The weighted mean half deviance at the predictor ``eta`` plus
    ``alpha/2 ||coef||^2`` (the coefficients in the data's units): the estimators'
    objective, up to a constant of the data."""
    w = np.ones(len(y)) if w is None else w
    mu = None if family in ("linear", "logistic", "binomial") else np.exp(eta)
    if family == "linear":
        dev = (y - eta) ** 2
    elif family in ("logistic", "binomial"):
        dev = -2 * (y * eta - np.logaddexp(0, eta))
    elif family == "poisson":
        dev = 2 * (mu - y * eta)
    elif family == "gamma":
        dev = 2 * (eta + y / mu)
    elif family == "tweedie":
        dev = 2 * (mu ** 0.5 / 0.5 + y * mu ** -0.5 / 0.5)
    else:
        dev = 2 * ((y + THETA) * np.logaddexp(np.log(THETA), eta) - y * eta)
    return 0.5 * (w @ dev) / w.sum() + 0.5 * alpha * float(np.sum(np.square(coef)))


def derivatives(family, eta, y):
    """First and second derivatives of the half deviance in the predictor (the second
    is positive for every family here: Newton-Raphson's own steps)."""
    if family == "linear":
        return eta - y, np.ones_like(eta)
    mu = np.exp(eta)
    if family in ("logistic", "binomial"):
        p = 1 / (1 + np.exp(-eta))
        return p - y, p * (1 - p)
    if family == "poisson":
        return mu - y, mu
    if family == "gamma":
        return 1 - y / mu, y / mu
    if family == "tweedie":
        return mu**0.5 - y * mu**-0.5, 0.5 * mu**0.5 + 0.5 * y * mu**-0.5
    return (y + THETA) * mu / (THETA + mu) - y, (y + THETA) * THETA * mu / (THETA + mu) ** 2


def reference(family, X, y, w, alpha):
    """``(predictor, objective)`` of the optimum by Newton-Raphson on standardised
    columns (see the module docstring), each step an SVD least-squares solve."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    n, d = X.shape
    w = np.ones(n) if w is None else w
    mean = w @ X / w.sum()
    std = np.sqrt(w @ (X - mean) ** 2 / w.sum())
    std[std == 0] = 1.0
    Z = np.column_stack([(X - mean) / std, np.ones(n)])
    ridge = np.r_[np.sqrt(alpha) / std, 0.0]  # the penalty on the data's coefficients
    beta = np.zeros(d + 1)

    def objective(beta):
        return objective_value(family, Z @ beta, beta[:d] / std, y, w, alpha)

    current = objective(beta)
    for _ in range(200):
        eta = Z @ beta
        first, second = derivatives(family, eta, y)
        h = w * second / w.sum()
        z = eta - first / second
        A = np.vstack([Z * np.sqrt(h)[:, None], np.diag(ridge)])
        b = np.r_[z * np.sqrt(h), np.zeros(d + 1)]
        step = np.linalg.lstsq(A, b, rcond=None)[0] - beta
        t = 1.0
        while objective(beta + t * step) > current and t > 1e-10:
            t /= 2
        new = objective(beta + t * step)
        if new > current or np.max(np.abs(t * step)) <= 1e-15 * max(1.0, np.max(np.abs(beta))):
            break
        beta, current = beta + t * step, new
    return Z @ beta, current


def fit(est, X, y, w):
    """Fit ``est``; the warnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, sample_weight=w)
    return [str(c.message) for c in caught if issubclass(c.category, ConvergenceWarning)]


def judge(seed, family, est, messages, X, y, w, alpha):
    """``(what went wrong or None, whether it warned)`` (see the module docstring)."""
    want, best = reference(family, X, y, w, alpha)
    coef = np.ravel(est.coef_)
    eta = (X.toarray() if sp.issparse(X) else X) @ coef + est.intercept_
    gap = np.max(np.abs(eta - want)) / max(1.0, np.max(np.abs(want)))
    if gap <= 1e-6 or objective_value(family, eta, coef, y, w, alpha) <= best + 1e-13 * abs(best):
        return None, False
    if any("the largest gradient entry is" in m for m in messages):
        return None, True
    return f"problem {seed}: predictor {gap:.2e} off the optimum, silently", False


def test_two_hundred_ill_conditioned_problems_in_process():
    silent, warned = [], 0
    for seed in range(N_PROBLEMS):
        family, X, y, w, alpha = problem(seed)
        est = estimator(family, alpha)
        miss, did_warn = judge(seed, family, est, fit(est, X, y, w), X, y, w, alpha)
        warned += did_warn
        if miss:
            silent.append(f"{miss} ({family}, {'sparse' if sp.issparse(X) else 'dense'}, alpha={alpha:.2g})")
    assert not silent, "\n".join(silent)
    assert warned <= N_PROBLEMS // 20, f"{warned} of {N_PROBLEMS} fits stopped short (with a warning)"


@pytest.mark.parametrize("seed", range(0, N_PROBLEMS, 17))
def test_ill_conditioned_problems_on_a_cluster(client, seed):
    import dask.array as da

    family, X, y, w, alpha = problem(seed)
    chunks = (len(y) + 2) // 3
    Xd = da.from_array(X, chunks=(chunks, -1), asarray=False)
    yd = da.from_array(y, chunks=chunks)
    wd = None if w is None else da.from_array(w, chunks=chunks)
    est = estimator(family, alpha).set_params(client=client)
    miss, _ = judge(seed, family, est, fit(est, Xd, yd, wd), X, y, w, alpha)
    assert miss is None, miss


N_MULTINOMIAL = 40


def test_multinomial_problems_in_process():
    """The multinomial (3 classes, ``alpha=0``) on the same columns: its reference is
    scikit-learn's newton-cholesky on the columns standardised here (``C=inf``,
    ``tol=1e-12``); probabilities within 1e-6, or a log-loss not above the reference's,
    or a warning."""
    from sklearn.linear_model import LogisticRegression as SkLogistic
    from sklearn.metrics import log_loss

    silent, warned = [], 0
    for seed in range(N_MULTINOMIAL):
        _, X, _, _, _ = problem(seed)
        rng = np.random.default_rng([41, seed])
        Xd = X.toarray() if sp.issparse(X) else X
        std = Xd.std(axis=0)
        S = (Xd - Xd.mean(axis=0)) / np.where(std > 0, std, 1.0)
        y = np.argmax(S @ rng.standard_normal((S.shape[1], 3)) * 0.5 + rng.gumbel(size=(len(S), 3)), axis=1)
        est = LogisticRegression(alpha=0)
        messages = fit(est, X, y, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = SkLogistic(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(S, y)
        P, R = est.predict_proba(X), ref.predict_proba(S)
        gap = np.max(np.abs(P - R))
        if gap <= 1e-6 or log_loss(y, P) <= log_loss(y, R) * (1 + 1e-13):
            continue
        if any("the largest gradient entry is" in m for m in messages):
            warned += 1
            continue
        silent.append(f"problem {seed}: probabilities {gap:.2e} off, silently ({est.solver_})")
    assert not silent, "\n".join(silent)
    assert warned <= N_MULTINOMIAL // 20

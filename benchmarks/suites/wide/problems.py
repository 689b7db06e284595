"""The ``wide`` suite's problem: the synthetic click log (a hidden logistic model over
hashed categorical columns), its chunks in memory or as dask arrays, and the losses the
tools are compared on.
"""

import math

import numpy as np

# ----------------------------------------------------------------------------- data
# SplitMix64's mixer and its floats, as ``dask_dgd._random`` has them (the same draws):
# that module is private, and the click log is the suite's own data, so it keeps a copy
# (tests/test_benchmark_suites.py checks that the two agree).
_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(z):
    """SplitMix64's output function on a uint64 array (arithmetic modulo 2**64)."""
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def uniform(h):
    """Floats in ``[0, 1)`` from uint64 hashes ``h``: their top 53 bits, over 2**53."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0**-53


#: seeds the hidden model's column streams (a SplitMix64 multiplier, odd)
_SEED_STEP = np.uint64(0x94D049BB133111EB)


def hidden_weights(values, p):
    """The hidden model's weight of every (column, value) of ``values`` (rows x columns)."""
    values = np.asarray(values, dtype=np.uint64)
    cols = np.arange(values.shape[1], dtype=np.uint64)
    h = mix64(mix64(np.uint64(p["seed"]) * _SEED_STEP + cols + np.uint64(1)) ^ values)
    active = uniform(h) < p["active"]
    w = (2.0 * uniform(mix64(h)) - 1.0) * (math.sqrt(3.0) * p["weight_scale"])
    return np.where(active, w, 0.0)


def _values(rng, n, p):
    return rng.zipf(p["zipf"], (n, p["columns"])) % p["max_values"]


def calibrated_intercept(p, n=50_000):
    """The intercept that makes the mean click probability ``p["ctr"]`` (bisection on a
    calibration sample of its own stream)."""
    rng = np.random.default_rng([p["seed"], 2**31])
    s = hidden_weights(_values(rng, n, p), p).sum(axis=1)
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.mean(_sigmoid(s + mid)) < p["ctr"] else (lo, mid)
    return 0.5 * (lo + hi)


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def chunk_layout(p):
    """``(train, test)``: lists of ``(chunk index, rows)``; the last ``held_out`` share of
    the chunks (at least one, at most all but one) is held out."""
    sizes = [min(p["chunk_rows"], p["rows"] - a) for a in range(0, p["rows"], p["chunk_rows"])]
    if len(sizes) < 2:
        raise ValueError("rows must span at least two chunks (one trains, one is held out)")
    n_test = min(len(sizes) - 1, max(1, round(p["held_out"] * len(sizes))))
    chunks = list(enumerate(sizes))
    return chunks[:-n_test], chunks[-n_test:]


def click_log_chunk(i, n, p, intercept):
    """Chunk ``i``: ``values`` (n x columns int64), labels ``y`` and the hidden logits ``z``."""
    rng = np.random.default_rng([p["seed"], i])
    values = _values(rng, n, p)
    z = hidden_weights(values, p).sum(axis=1) + intercept
    y = (rng.random(n) < _sigmoid(z)).astype(np.float64)
    return values, y, z


def hash_values(values, n_features):
    """``values`` as a DataFrame of categorical columns ``c0..``, hashed to CSR."""
    import pandas as pd

    from dask_dgd import FeatureHasher

    frame = pd.DataFrame({f"c{j}": pd.Categorical(values[:, j]) for j in range(values.shape[1])})
    return FeatureHasher(n_features=int(n_features)).transform(frame)


def _csr_chunk(i, n, p, intercept, n_features):
    values, y, _ = click_log_chunk(i, n, p, intercept)
    return hash_values(values, n_features), y


def _first(t):
    return t[0]


def _second(t):
    return t[1]


def click_log_dask(p, part="train", *, n_features=None, intercept=None):
    """``(X, y)``: dask arrays with one block per chunk of ``part`` ("train" or "test"),
    X's blocks ``scipy.sparse.csr_matrix`` (rows x ``n_features``), y's float64 0/1;
    lazy: each chunk is generated and hashed where it is computed (persist them)."""
    import dask
    import dask.array as da
    import scipy.sparse as sp

    d = int(n_features or p["n_features"])
    b = calibrated_intercept(p) if intercept is None else intercept
    chunks = dict(zip(("train", "test"), chunk_layout(p)))[part]
    pairs = [dask.delayed(_csr_chunk, pure=True)(i, n, p, b, d) for i, n in chunks]
    X = da.concatenate([da.from_delayed(dask.delayed(_first)(t), shape=(n, d), dtype=np.float64,
                                        meta=sp.csr_matrix((0, d))) for t, (_, n) in zip(pairs, chunks)])
    y = da.concatenate([da.from_delayed(dask.delayed(_second)(t), shape=(n,), dtype=np.float64)
                        for t, (_, n) in zip(pairs, chunks)])
    return X, y


def click_log_csr(p, part="train", *, n_features=None, intercept=None):
    """``(X, y, z, values)`` of ``part`` in memory: X a CSR matrix, the same rows as
    :func:`click_log_dask`; ``z`` the hidden logits, ``values`` the raw categories."""
    import scipy.sparse as sp

    d = int(n_features or p["n_features"])
    b = calibrated_intercept(p) if intercept is None else intercept
    chunks = dict(zip(("train", "test"), chunk_layout(p)))[part]
    Xs, ys, zs, vs = [], [], [], []
    for i, n in chunks:
        values, y, z = click_log_chunk(i, n, p, b)
        Xs.append(hash_values(values, d))
        ys.append(y)
        zs.append(z)
        vs.append(values)
    return sp.vstack(Xs, format="csr"), np.concatenate(ys), np.concatenate(zs), np.concatenate(vs)


def vw_lines(values, y=None):
    """Vowpal Wabbit text examples: ``"1 |f c0=12 c1=3 ..."`` (label -1/1; none when ``y``
    is None)."""
    cols = [f"c{j}=" for j in range(values.shape[1])]
    feats = [" ".join(c + str(v) for c, v in zip(cols, row)) for row in values.tolist()]
    if y is None:
        return ["|f " + f for f in feats]
    return [("1 |f " if t > 0.5 else "-1 |f ") + f for t, f in zip(y.tolist(), feats)]


#: The second click log of issue 43 ("300,000 x 2**20 hashed Zipf fields"): the same
#: 26 Zipf columns and hidden model as the suite's (``COMMON`` of ``wide``), hashed to
#: 2**20 columns; 330,000 rows in chunks of 30,000, the last chunk held out, so 300,000
#: train; ``alpha`` 1e-4 is ``LogisticRegression``'s default (and ``SGDClassifier``'s).
ZIPF_FIELDS = dict(columns=26, n_features=2**20, zipf=1.3, max_values=100_000, active=0.3, weight_scale=0.6,
                   ctr=0.22, held_out=0.1, seed=0, rows=330_000, chunk_rows=30_000, alpha=1e-4)


# ----------------------------------------------------------------------------- losses
def logloss(y, raw):
    """Mean logistic loss of 0/1 labels ``y`` at raw scores (logits) ``raw``."""
    raw = np.asarray(raw, dtype=np.float64).ravel()
    return float(np.mean(np.logaddexp(0.0, raw) - y * raw))


def prob_logloss(y, prob, eps=1e-15):
    prob = np.clip(np.asarray(prob, dtype=np.float64).ravel(), eps, 1 - eps)
    return float(-np.mean(y * np.log(prob) + (1 - y) * np.log1p(-prob)))


def reference_losses(y_train, y_test, z_test):
    """Held-out logloss of the constant model (training CTR) and of the hidden model."""
    ctr = float(np.mean(y_train))
    const = prob_logloss(y_test, np.full(len(y_test), ctr))
    return {"ctr_train": ctr, "constant": const, "bayes": logloss(y_test, z_test)}


def heldout_logloss(params, X_test, y_test, n_features):
    """Held-out logloss of dask_dgd parameters (``LinearObjective.raw_prediction``)."""
    from dask_dgd.losses import BinaryLogistic, LinearObjective

    obj = LinearObjective(BinaryLogistic(), n_features=int(n_features))
    return logloss(y_test, obj.raw_prediction(np.asarray(params), X_test))

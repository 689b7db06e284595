"""Synthetic data for generalised linear models, in memory or lazily chunked.

Every generator draws ``X`` with independent standard-normal features and a response
from a known coefficient vector, so that a fitted model can be checked against the
truth.  With ``chunks=None`` the result is a pair of NumPy arrays; with ``chunks`` it is
a pair of dask arrays whose row blocks are generated on demand, one task per block,
each block from its own random generator seeded by ``(random_state, block index)``.
The same ``random_state`` and ``chunks`` therefore always give the same data, wherever
and in whatever order the blocks are computed.  ``chunks=None`` gives the same data as
a single chunk (``chunks=n_samples``).  Nothing is downloaded.

Why not ``sklearn.datasets`` or ``dask_ml.datasets``: scikit-learn's generators build the
whole array in memory and draw no GLM responses (no Poisson counts, no softmax labels
from known coefficients); dask-ml's are not a dependency of this package and give
neither the coefficients nor the same data for the same seed wherever a block is
computed.  These generate each block on the worker that computes it, from a seed of
its own, from known coefficients (``return_coef=True``), which is what the tests and
benchmarks need; :func:`make_ratings` adds power-law skew, which neither offers.

The parameters the generators share:

chunks : int, tuple of int or None, default=None
    None returns NumPy arrays.  Otherwise dask arrays, lazily generated: an int is the
    number of rows per block, a tuple gives the rows of every block (summing to
    ``n_samples``).  Columns are always a single chunk, as the estimators need.
random_state : int >= 0, numpy RandomState, Generator or None, default=0
    Seed of the coefficients and the rows.  The same seed and ``chunks`` give the same
    data; a different ``chunks`` gives different (equally distributed) rows.  None draws
    a fresh seed.
return_coef : bool, default=False
    Also return the true coefficients.
dtype : {numpy.float64, numpy.float32}, default=numpy.float64
    Dtype of ``X`` (and of ``y`` for the regressions).
"""

import numbers

import numpy as np

from ._docstrings import other_parameters
from .exceptions import ParameterError

__all__ = ["make_classification", "make_poisson", "make_ratings", "make_regression"]


# --------------------------------------------------------------------------- checks
def _check_int(name, value, low, fix):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ParameterError(f"{name} must be an int >= {low}; got {value!r}; {fix}")
    return int(value)


def _check_real(name, value, low=None, fix=""):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or (low is not None and value < low):
        bound = "a finite float" if low is None else f"a finite float >= {low}"
        raise ParameterError(f"{name} must be {bound}; got {value!r}; {fix}".rstrip("; "))
    return float(value)


def _check_seed(random_state):
    """An int seed from an int >= 0, None, a RandomState or a Generator."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy % 2**63)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63 - 1))
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral):
        raise ParameterError(
            f"random_state must be an int >= 0, None, a numpy RandomState or Generator; "
            f"got {random_state!r} of type {type(random_state).__name__}; pass e.g. "
            "random_state=0"
        )
    if random_state < 0:
        raise ParameterError(
            f"random_state must be an int >= 0; got {random_state}; pass e.g. random_state=0"
        )
    return int(random_state)


def _check_dtype(dtype):
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ParameterError(
            f"dtype must be float32 or float64; got {dt}; pass dtype=np.float64 or np.float32"
        )
    return dt


def _row_chunks(chunks, n_samples):
    """Row sizes of the blocks from an int (rows per block) or a tuple of sizes."""
    if isinstance(chunks, numbers.Integral) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ParameterError(
                f"chunks must be a positive number of rows per block; got {chunks}; "
                f"pass e.g. chunks={max(1, n_samples // 4)}"
            )
        size = min(int(chunks), n_samples)
        full, rest = divmod(n_samples, size)
        return (size,) * full + ((rest,) if rest else ())
    if isinstance(chunks, (tuple, list)) and chunks:
        ok = all(
            isinstance(c, numbers.Integral) and not isinstance(c, bool) and c >= 1
            for c in chunks
        )
        if not ok:
            raise ParameterError(
                f"chunks must contain only positive ints (rows of each block); got "
                f"{tuple(chunks)!r}"
            )
        if sum(chunks) != n_samples:
            raise ParameterError(
                f"chunks {tuple(chunks)!r} add up to {sum(chunks)} rows, but n_samples is "
                f"{n_samples}; make the block sizes sum to n_samples or pass an int"
            )
        return tuple(int(c) for c in chunks)
    raise ParameterError(
        f"chunks must be None, an int (rows per block) or a tuple of block sizes; got "
        f"{chunks!r}; columns are always one chunk, so pass rows only, e.g. chunks=10_000"
    )


# -------------------------------------------------------------------------- drawing
def _true_coef(seed, n_features, n_outputs, signal):
    """Coefficients: each output's vector has Euclidean norm ``signal``, random direction."""
    rng = np.random.default_rng([seed, 0])
    coef = rng.standard_normal((n_outputs, n_features))
    norms = np.linalg.norm(coef, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return coef / norms * signal


def _block(kind, seed, index, n_rows, coef, intercept, noise, dtype):
    """Rows of one block: ``(X, y)`` from the generator seeded by ``(seed, 1, index)``."""
    rng = np.random.default_rng([seed, 1, index])
    X = rng.standard_normal((n_rows, coef.shape[1]))
    eta = X @ coef.T + intercept  # (n_rows, n_outputs)
    if kind == "regression":
        y = eta[:, 0] + noise * rng.standard_normal(n_rows)
        y = y.astype(dtype, copy=False)
    elif kind == "poisson":
        y = rng.poisson(np.exp(eta[:, 0])).astype(dtype)
    elif coef.shape[0] == 1:  # binary logistic
        p = 1.0 / (1.0 + np.exp(-eta[:, 0]))
        y = (rng.random(n_rows) < p).astype(np.int64)
    else:  # multinomial: Gumbel-max draws a class with softmax(eta) probabilities
        y = np.argmax(eta + rng.gumbel(size=eta.shape), axis=1).astype(np.int64)
    return X.astype(dtype, copy=False), y


def _generate(kind, n_samples, n_features, n_outputs, *, signal, intercept, noise, chunks,
              random_state, return_coef, dtype):
    n_samples = _check_int("n_samples", n_samples, 1, "pass the number of rows to generate")
    n_features = _check_int("n_features", n_features, 1, "pass the number of columns")
    signal = _check_real("signal", signal, 0.0, "pass e.g. signal=1.0")
    intercept = _check_real("intercept", intercept, None, "pass e.g. intercept=0.0")
    noise = _check_real("noise", noise, 0.0, "pass e.g. noise=1.0")
    if not isinstance(return_coef, bool):
        raise ParameterError(f"return_coef must be True or False; got {return_coef!r}")
    dtype = _check_dtype(dtype)
    seed = _check_seed(random_state)
    coef = _true_coef(seed, n_features, n_outputs, signal)
    args = (kind, seed)
    tail = (coef, intercept, noise, dtype)
    if chunks is None:
        X, y = _block(*args, 0, n_samples, *tail)
    else:
        X, y = _lazy(args, tail, _row_chunks(chunks, n_samples), n_features, kind, dtype)
    out_coef = coef[0].copy() if n_outputs == 1 else coef.copy()
    return (X, y, out_coef) if return_coef else (X, y)


def _lazy(args, tail, rows, n_features, kind, dtype):
    import dask
    import dask.array as da
    from dask.base import tokenize

    y_dtype = np.int64 if kind == "classification" else dtype
    name = f"make-{kind}-" + tokenize(*args, *tail, rows)
    xs, ys = [], []
    for i, n in enumerate(rows):
        block = dask.delayed(_block, pure=True, nout=2)
        part = block(*args, i, n, *tail, dask_key_name=f"{name}-{i}")
        xs.append(
            da.from_delayed(part[0], shape=(n, n_features), dtype=dtype, name=f"{name}-X-{i}")
        )
        ys.append(da.from_delayed(part[1], shape=(n,), dtype=y_dtype, name=f"{name}-y-{i}"))
    return da.concatenate(xs, axis=0), da.concatenate(ys, axis=0)


# ----------------------------------------------------------------------- public API
#: Lists the parameters the module docstring documents in a generator's docstring.
_shared_parameters = other_parameters("The generators' shared parameters (see the :mod:`dask_dgd.datasets` module\n"
                                      "docstring).")


@_shared_parameters
def make_regression(n_samples=1000, n_features=10, *, noise=1.0, signal=1.0, intercept=0.0, chunks=None,
                    random_state=0, return_coef=False, dtype=np.float64):
    """Linear-regression data: ``y = X @ coef + intercept + noise * e``.

    Parameters
    ----------
    n_samples, n_features : int, default=1000 and 10
        Numbers of rows and of features, each >= 1.
    noise : float >= 0, default=1.0
        Standard deviation of the Gaussian noise ``e`` added to ``y``.
    signal : float >= 0, default=1.0
        Euclidean norm of ``coef``.  The features are independent standard normals, so
        ``X @ coef`` is normal with standard deviation ``signal``.
    intercept : float, default=0.0
        Added to every ``y``.

    Returns
    -------
    X : ndarray or dask array of shape (n_samples, n_features)
    y : ndarray or dask array of shape (n_samples,)
    coef : ndarray of shape (n_features,)
        Only with ``return_coef=True``.

    Raises
    ------
    ParameterError
        For a bad size, ``noise``, ``signal``, ``chunks``, ``random_state`` or ``dtype``.

    Examples
    --------
    >>> from dask_dgd.datasets import make_regression
    >>> X, y, coef = make_regression(100, 3, noise=0.0, return_coef=True)
    >>> bool(abs(X @ coef - y).max() < 1e-12)
    True
    >>> X, y = make_regression(10_000, 3, chunks=2_500)
    >>> X.numblocks
    (4, 1)
    """
    return _generate(
        "regression", n_samples, n_features, 1, signal=signal, intercept=intercept,
        noise=noise, chunks=chunks, random_state=random_state, return_coef=return_coef,
        dtype=dtype,
    )


@_shared_parameters
def make_classification(n_samples=1000, n_features=10, n_classes=2, *, signal=3.0, intercept=0.0, chunks=None,
                        random_state=0, return_coef=False, dtype=np.float64):
    """Logistic-regression data with labels ``0 .. n_classes - 1``.

    Two classes: ``P(y = 1 | x) = sigmoid(x @ coef + intercept)``.  More classes:
    ``P(y = k | x) = softmax(x @ coef.T + intercept)[k]`` (drawn with the Gumbel-max
    trick), one row of ``coef`` per class.

    Parameters
    ----------
    n_samples, n_features : int, default=1000 and 10
        Numbers of rows and of features, each >= 1.
    n_classes : int, default=2
        Number of classes, >= 2.
    signal : float >= 0, default=3.0
        Euclidean norm of each class's coefficient vector: the standard deviation of its
        linear predictor.  Larger values make the classes easier to separate.
    intercept : float, default=0.0
        Added to every linear predictor (binary: shifts the share of class 1).

    Returns
    -------
    X : ndarray or dask array of shape (n_samples, n_features)
    y : ndarray or dask array of int64, shape (n_samples,)
    coef : ndarray of shape (n_features,) or (n_classes, n_features)
        Only with ``return_coef=True``; ``(n_features,)`` for two classes.

    Raises
    ------
    ParameterError
        For a bad size, ``n_classes``, ``signal``, ``chunks``, ``random_state`` or ``dtype``.

    Examples
    --------
    >>> from dask_dgd.datasets import make_classification
    >>> X, y = make_classification(200, 4, n_classes=3)
    >>> X.shape, sorted(set(y.tolist()))
    ((200, 4), [0, 1, 2])
    """
    n_classes = _check_int("n_classes", n_classes, 2, "a classification needs at least 2 classes")
    return _generate(
        "classification", n_samples, n_features, 1 if n_classes == 2 else n_classes,
        signal=signal, intercept=intercept, noise=0.0, chunks=chunks,
        random_state=random_state, return_coef=return_coef, dtype=dtype,
    )


@_shared_parameters
def make_poisson(n_samples=1000, n_features=10, *, signal=0.5, intercept=0.5, chunks=None, random_state=0,
                 return_coef=False, dtype=np.float64):
    """Poisson-regression (log link) count data: ``y ~ Poisson(exp(X @ coef + intercept))``.

    Parameters
    ----------
    n_samples, n_features : int, default=1000 and 10
        Numbers of rows and of features, each >= 1.
    signal : float >= 0, default=0.5
        Euclidean norm of ``coef``: the standard deviation of the log-mean.  Keep it
        small (about 1 or less): the counts grow like ``exp(signal * z)``.
    intercept : float, default=0.5
        Log of the typical count.

    Returns
    -------
    X : ndarray or dask array of shape (n_samples, n_features)
    y : ndarray or dask array of shape (n_samples,)
        Non-negative integer counts, stored as floats of ``dtype``.
    coef : ndarray of shape (n_features,)
        Only with ``return_coef=True``.

    Raises
    ------
    ParameterError
        For a bad size, ``signal``, ``chunks``, ``random_state`` or ``dtype``.

    Examples
    --------
    >>> from dask_dgd.datasets import make_poisson
    >>> X, y = make_poisson(500, 3)
    >>> bool((y >= 0).all())
    True
    """
    return _generate(
        "poisson", n_samples, n_features, 1, signal=signal, intercept=intercept,
        noise=0.0, chunks=chunks, random_state=random_state, return_coef=return_coef,
        dtype=dtype,
    )


# --------------------------------------------------------------------------- ratings
def _zipf_weights(rng, n, exponent):
    w = 1.0 / np.arange(1, n + 1) ** exponent
    return rng.permutation(w / w.sum())


def make_ratings(
    n_users=1000,
    n_items=500,
    n_ratings=20000,
    *,
    rank=10,
    noise=0.5,
    implicit=False,
    power=0.5,
    npartitions=None,
    random_state=None,
):
    """Low-rank ratings with power-law user activity and item popularity.

    Users and items are drawn with Zipf weights ``1 / rank^power`` (a few users rate
    thousands of items, most rate a handful).  Explicit ratings are
    ``3.5 + b_u + b_i + p_u . q_i + noise * e`` with ``b ~ N(0, 0.3^2)`` and factors
    ``N(0, 1/rank)`` entries (so ``p_u . q_i`` has variance ``1/rank``).  Implicit data (``implicit=True``)
    draws each user's items without replacement with probability proportional to
    ``popularity_i * exp(2 p_u . q_i)`` and has a ``count`` column (1 + Poisson(1)).
    Each (user, item) pair occurs at most once; with strong skew (large ``power``) and
    many ratings per user there may be fewer rows than ``n_ratings``.

    Parameters
    ----------
    n_users, n_items, n_ratings : int
    rank : int, default=10
    noise : float, default=0.5
        Standard deviation of the rating noise (explicit).
    implicit : bool, default=False
    power : float, default=0.5
        Exponent of the Zipf weights (0: uniform).  At the default, with 50,000 users
        and 2,000,000 ratings, the most active user has about 100x the median user's.
    npartitions : int or None
        None: a pandas DataFrame; an int: a dask DataFrame with that many partitions.
    random_state : int, RandomState, Generator or None

    Returns
    -------
    ratings : DataFrame with columns ``user``, ``item`` and ``rating`` (explicit) or
        ``count`` (implicit), rows in random order
    truth : dict with the true ``user_factors``, ``item_factors`` (and biases)

    Examples
    --------
    >>> from dask_dgd.datasets import make_ratings
    >>> ratings, truth = make_ratings(100, 50, 1000, rank=3, random_state=0)
    >>> list(ratings.columns)
    ['user', 'item', 'rating']
    """
    import pandas as pd

    n_users = _check_int("n_users", n_users, 1, "pass e.g. n_users=1000")
    n_items = _check_int("n_items", n_items, 1, "pass e.g. n_items=500")
    n_ratings = _check_int("n_ratings", n_ratings, 1, "pass e.g. n_ratings=20000")
    rank = _check_int("rank", rank, 1, "pass e.g. rank=10")
    noise = _check_real("noise", noise, 0, "pass e.g. noise=0.5")
    power = _check_real("power", power, 0, "pass e.g. power=1.0")
    if n_ratings > n_users * n_items:
        raise ParameterError(
            f"n_ratings={n_ratings} exceeds n_users * n_items = {n_users * n_items}; ask for fewer ratings"
        )
    if npartitions is not None:
        npartitions = _check_int("npartitions", npartitions, 1, "pass e.g. npartitions=8")
    rng = np.random.default_rng(_check_seed(random_state))
    P = rng.normal(0.0, 1.0 / np.sqrt(rank), (n_users, rank))
    Q = rng.normal(0.0, 1.0 / np.sqrt(rank), (n_items, rank))
    bu = rng.normal(0.0, 0.3, n_users)
    bi = rng.normal(0.0, 0.3, n_items)
    wu = _zipf_weights(rng, n_users, power)
    wi = _zipf_weights(rng, n_items, power)
    if implicit:
        per_user = np.minimum(rng.multinomial(n_ratings, wu), n_items)
        users, items = [], []
        for a in range(0, n_users, 1024):
            b = min(a + 1024, n_users)
            logits = 2.0 * P[a:b] @ Q.T + np.log(wi)
            keys = logits + rng.gumbel(size=logits.shape)  # Gumbel top-k: sampling without replacement
            order = np.argsort(-keys, axis=1)
            for uu in range(a, b):
                m = per_user[uu]
                users.append(np.full(m, uu))
                items.append(order[uu - a, :m])
        u = np.concatenate(users)
        i = np.concatenate(items)
        perm = rng.permutation(u.size)
        frame = pd.DataFrame({"user": u[perm], "item": i[perm], "count": 1.0 + rng.poisson(1.0, u.size)})
    else:
        keys = np.zeros(0, dtype=np.int64)
        for _ in range(20):  # draw pairs until enough distinct ones (popular pairs repeat)
            m = int((n_ratings - keys.size) * 1.2) + 16
            drawn = rng.choice(n_users, size=m, p=wu).astype(np.int64) * n_items + rng.choice(n_items, size=m, p=wi)
            keys = np.unique(np.concatenate([keys, drawn]))
            if keys.size >= n_ratings:
                break
        keys = rng.permutation(keys)[:n_ratings]
        u, i = keys // n_items, keys % n_items
        r = 3.5 + bu[u] + bi[i] + np.einsum("ij,ij->i", P[u], Q[i]) + noise * rng.standard_normal(u.size)
        frame = pd.DataFrame({"user": u, "item": i, "rating": r})
    truth = {"user_factors": P, "item_factors": Q, "user_bias": bu, "item_bias": bi}
    if npartitions is not None:
        import dask.dataframe as dd

        frame = dd.from_pandas(frame, npartitions=npartitions, sort=False)
    return frame, truth

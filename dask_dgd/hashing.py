"""Hashed features: categorical, text and numeric columns to sparse columns, on the workers.

:class:`FeatureHasher` turns the columns of a pandas or dask DataFrame into a sparse
matrix of ``n_features`` columns with the *hashing trick* (Weinberger et al. 2009, as
Vowpal Wabbit and scikit-learn's ``FeatureHasher``): a category ``v`` of column ``c`` is
the column ``h(c, v) mod n_features`` with value ``+1`` or ``-1`` (the sign from
another bit of the hash, so that collisions cancel in expectation); a numeric column
is one hashed column holding its value; an interaction of columns is the hash of their
values combined, holding the product of their values.  No vocabulary is learnt: the
transform is stateless, the same on every worker and at predict time, and a dask
DataFrame is hashed partition by partition where it lives (a dask array of CSR blocks,
one per partition).  Use it in a :class:`~sklearn.pipeline.Pipeline` before an
estimator.

The hash is pandas' :func:`pandas.util.hash_array` (SipHash-2-4 of the value's text with
a key per column, then SplitMix64 to combine): deterministic across processes,
machines and pandas' dtypes of the same values (``category``, ``object``, ``string``).
"""

import hashlib
import numbers

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from ._frames import is_frame
from ._random import GOLDEN, finalize
from ._validation import Interval, validate_params
from .exceptions import InputError, ParameterError

__all__ = ["FeatureHasher"]

_ODD = np.uint64(GOLDEN)


def _names_like(value):
    """a list of column names"""
    return isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value)


def _interactions_like(value):
    """a list of tuples of two or more column names"""
    return isinstance(value, (list, tuple)) and all(
        isinstance(t, (list, tuple)) and len(t) >= 2 and all(isinstance(v, (str, int)) for v in t) for t in value)


def _key(name):
    """The 16-character SipHash key of column ``name`` (its own hash family)."""
    return hashlib.blake2b(repr(name).encode(), digest_size=8).hexdigest()


def _scalar_hash(name):
    """A 64-bit hash of the numeric column ``name``."""
    return np.uint64(int.from_bytes(hashlib.blake2b(b"numeric:" + repr(name).encode(), digest_size=8).digest(),
                                    "little"))


def _kind(dtype):
    """"numeric" or "category" for a column's dtype, or None when it cannot be hashed."""
    if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(dtype) \
            or pd.api.types.is_object_dtype(dtype):
        return "category"
    if pd.api.types.is_bool_dtype(dtype) or (pd.api.types.is_numeric_dtype(dtype)
                                             and not pd.api.types.is_complex_dtype(dtype)):
        return "numeric"
    return None


def _column(series, kind, name):
    """``(hash, value)`` of every row of a column: uint64 hashes and float64 values (0
    where the row has no value, which drops the entry)."""
    missing = series.isna().to_numpy(dtype=bool, na_value=True)
    if kind == "numeric":
        value = series.to_numpy(dtype=np.float64, na_value=np.nan)
        value = np.where(missing, 0.0, value)
        return np.full(len(series), _scalar_hash(name), dtype=np.uint64), value
    if isinstance(series.dtype, pd.CategoricalDtype):  # hash the categories once, take by code
        cats = series.cat.categories
        h_cat = pd.util.hash_array(np.asarray(cats.astype(str), dtype=object), hash_key=_key(name)) \
            if len(cats) else np.zeros(0, dtype=np.uint64)
        codes = series.cat.codes.to_numpy()
        h = h_cat[np.where(codes >= 0, codes, 0)] if len(cats) else np.zeros(len(series), dtype=np.uint64)
    else:
        text = series.astype(object).where(~missing, "").astype(str).to_numpy(dtype=object)
        h = pd.util.hash_array(text, hash_key=_key(name))
    return h, np.where(missing, 0.0, 1.0)


class FeatureHasher(TransformerMixin, BaseEstimator):
    """Hash a DataFrame's columns (and interactions of them) into ``n_features`` sparse columns.

    Stateless: ``fit`` only checks the parameters against the columns; ``transform``
    needs no fitted vocabulary, so the same rows give the same matrix on any worker, in
    any partitioning, and at predict time.

    Parameters
    ----------
    n_features : int, default=2**20
        Columns of the output (the hashed weights of a linear model).  A power of two is
        usual; collisions between features grow as their number approaches it.
    columns : list of str or None, default=None
        The columns to hash; None: all; ``[]``: only the ``interactions``.
        Categorical, string and object columns give a feature per value (``+-1``);
        numeric and boolean columns one feature holding the value.  Missing values give
        no feature.
    interactions : list of tuples of column names or None, default=None
        Feature crosses: for each tuple, one feature per combination of the columns'
        values, holding the product of their values (1 for categories); a row missing
        any of them gets none.  The columns need not be in ``columns``.
    alternate_sign : bool, default=True
        Sign each feature by a bit of its hash (signed hashing: collisions cancel in
        expectation).  False: every category is +1.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The DataFrame's columns seen at ``fit``.

    Examples
    --------
    >>> import pandas as pd
    >>> from dask_dgd import FeatureHasher
    >>> X = pd.DataFrame({"site": ["a", "b", "a"], "price": [1.5, 0.0, 2.0]})
    >>> Xh = FeatureHasher(n_features=2**10).fit_transform(X)
    >>> Xh.shape, Xh.getnnz(axis=1).tolist()
    ((3, 1024), [2, 1, 2])
    """

    _parameter_constraints = {
        "n_features": [Interval(numbers.Integral, 1, 2**31 - 1, "both")],
        "columns": [None, _names_like],
        "interactions": [None, _interactions_like],
        "alternate_sign": [bool],
    }

    def __init__(self, n_features=2**20, *, columns=None, interactions=None, alternate_sign=True):
        self.n_features = n_features
        self.columns = columns
        self.interactions = interactions
        self.alternate_sign = alternate_sign

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags.two_d_array = False
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags

    def _plan(self, X):
        """``[(name, kind)]`` of the hashed columns and the interactions' ``[(names, kinds)]``,
        checked against ``X``'s columns and dtypes (no data is read)."""
        validate_params(self)
        if self.columns is not None and not len(self.columns) and not self.interactions:
            raise ParameterError("FeatureHasher: columns=[] and no interactions hash nothing; name columns or "
                                 "interactions (columns=None hashes every column)")
        if not is_frame(X):
            raise InputError(
                f"FeatureHasher hashes the columns of a pandas or dask DataFrame; got {type(X).__name__} "
                "(build one with pd.DataFrame(X, columns=names) or dd.from_pandas)"
            )
        dtypes = X.dtypes
        wanted = list(X.columns) if self.columns is None else list(self.columns)
        for name in wanted + [n for t in (self.interactions or ()) for n in t]:
            if name not in dtypes.index:
                raise InputError(f"FeatureHasher: column {name!r} is not in X (its columns: {list(X.columns)})")
            if _kind(dtypes[name]) is None:
                raise InputError(
                    f"FeatureHasher: column {name!r} has dtype {dtypes[name]}; it hashes categorical, text, numeric "
                    "and boolean columns (derive numbers from dates first, e.g. X[col].dt.dayofweek)"
                )
        plain = [(name, _kind(dtypes[name])) for name in wanted]
        crosses = [(tuple(t), tuple(_kind(dtypes[n]) for n in t)) for t in (self.interactions or ())]
        return plain, crosses

    def fit(self, X, y=None):
        """Check the parameters against ``X``'s columns; nothing is learnt.

        Parameters
        ----------
        X : pandas or dask DataFrame
        y : ignored

        Returns
        -------
        self : object
        """
        self._plan(X)
        self.n_features_in_ = len(X.columns)
        self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        return self

    def transform(self, X):
        """Hash the rows.

        Parameters
        ----------
        X : pandas or dask DataFrame
            The columns named at construction (others are ignored).

        Returns
        -------
        scipy.sparse.csr_matrix or dask.array.Array of shape (n_samples, n_features)
            A dask DataFrame gives a dask array of CSR blocks, one per partition (their
            lengths unknown until computed), hashed where the partitions are computed.
        """
        plain, crosses = self._plan(X)
        spec = (int(self.n_features), plain, crosses, bool(self.alternate_sign))
        if isinstance(X, pd.DataFrame):
            return _hash_frame(X, spec)
        import dask
        import dask.array as da

        meta = sp.csr_matrix((0, int(self.n_features)), dtype=np.float64)
        parts = X.to_delayed()
        blocks = [da.from_delayed(dask.delayed(_hash_frame, pure=True)(part, spec), shape=(np.nan, self.n_features),
                                  dtype=np.float64, meta=meta) for part in parts]
        return da.concatenate(blocks, axis=0)


def _hash_frame(frame, spec):
    """One partition's CSR matrix (see :meth:`FeatureHasher.transform`)."""
    n_features, plain, crosses, signed = spec
    n = len(frame)
    cache = {}

    def column(name, kind):
        if name not in cache:
            cache[name] = _column(frame[name], kind, name)
        return cache[name]

    hashes, values = [], []
    for name, kind in plain:
        h, v = column(name, kind)
        hashes.append(h)
        values.append(v)
    for names, kinds in crosses:
        h, v = column(names[0], kinds[0])
        h, v = h.copy(), v.copy()
        for name, kind in zip(names[1:], kinds[1:]):
            h2, v2 = column(name, kind)
            with np.errstate(over="ignore"):
                h = finalize(h * _ODD ^ h2)
            v = v * v2
        hashes.append(finalize(h ^ _scalar_hash(names)))
        values.append(v)
    m = len(hashes)
    if m == 0 or n == 0:
        return sp.csr_matrix((n, n_features), dtype=np.float64)
    H = np.stack(hashes, axis=1)
    V = np.stack(values, axis=1)
    if signed:
        V = np.where((H >> np.uint64(63)) == 1, -V, V)
    indices = (H % np.uint64(n_features)).astype(np.int64)
    out = sp.csr_matrix((V.ravel(), indices.ravel(), np.arange(0, n * m + 1, m)), shape=(n, n_features))
    out.sum_duplicates()
    out.eliminate_zeros()
    return out

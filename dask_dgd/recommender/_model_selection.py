"""Cross-validation of recommenders with scikit-learn's tools.

scikit-learn's splitters cut a frame of ratings by rows: ``KFold(3)`` on a frame sorted
by user holds out whole users, whom the model never saw (it then predicts them with the
bias fallback and ranks nothing).  The splitters here hold out a share of *each* user's
ratings, as :func:`~dask_dgd.recommender.train_test_split` does, a (user, item) pair
always whole (all its rows on one side: event logs repeat pairs as a rule, and the
explicit model merges a pair's rows into one rating, so a pair on both sides would be
tested on what it trained on), and follow
scikit-learn's protocol (``split(X, y=None, groups=None)`` yielding integer train and
test indices, ``get_n_splits``), so they go where ``cv=`` goes (``GridSearchCV``,
``cross_val_score``, ``cross_validate``).  :func:`rating_scorer` makes scikit-learn's
regression metrics read the ratings from the frame: a frame of ratings is ``X`` alone
(the ratings a column of it), and ``GridSearchCV(..., scoring="neg_root_mean_squared_error")``
hands its scorer ``y=None``.
"""

import numbers

import numpy as np
import pandas as pd
from sklearn.model_selection import BaseCrossValidator

from ..exceptions import InputError, ParameterError

__all__ = ["UserKFold", "UserTimeSplit", "rating_scorer"]


def _frame(X, what, columns):
    """``X`` as an in-memory pandas DataFrame with ``columns`` (a dict: column name ->
    the parameter that names it), or a clear error."""
    import dask

    if dask.is_dask_collection(X):
        raise InputError(
            f"{what} splits an in-memory pandas DataFrame (scikit-learn's cross-validation indexes its rows); got a "
            f"dask {type(X).__name__}: use X.compute() if it fits in memory, or "
            "dask_dgd.recommender.train_test_split(X, ...) for one split of a dask DataFrame"
        )
    if not isinstance(X, pd.DataFrame):
        raise InputError(
            f"{what} splits a pandas DataFrame of ratings (with a {next(iter(columns))!r} column); got "
            f"{type(X).__name__}"
        )
    for col, param in columns.items():
        if col not in X.columns:
            raise InputError(f"{what}: X has no column {col!r} (columns: {list(X.columns)}); set {what}'s "
                             f"{param} to the column's name")
        if X[col].isna().any():
            raise InputError(f"{what}: {int(X[col].isna().sum())} values of the {col!r} column are missing; drop "
                             "those rows before splitting")
    return X


def _pairs(X, user_col, item_col):
    """Codes of the users (per row), of the distinct (user, item) pairs (per row), and
    the user of each pair."""
    users, _ = pd.factorize(X[user_col])
    items, _ = pd.factorize(X[item_col])
    pairs, _ = pd.factorize(pd.MultiIndex.from_arrays([users, items]))
    pair_user = np.zeros(pairs.max() + 1 if len(pairs) else 0, dtype=np.int64)
    pair_user[pairs] = users
    return users, pairs, pair_user


def _int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ParameterError(f"{name} must be an int >= {low}; got {value!r}")
    return int(value)


class UserKFold(BaseCrossValidator):
    """K folds of each user's ratings: every user is in every fold's training set.

    The unit dealt out is a distinct (user, item) pair, all its rows together: a pair
    given on several rows (repeated events, a rating recorded twice) is held out whole,
    never on both sides of a fold.  Each user's pairs are put in a random order (seeded
    by ``random_state``) and dealt out to the folds in turn, starting at a random fold
    per user: fold ``f`` holds out the user's pairs of rank ``r`` with
    ``(r + offset_u) % n_splits == f``, so that every fold holds out about
    ``1 / n_splits`` of each user's pairs (a user with fewer pairs than folds gives one
    to some folds, none to others).  A user with a single pair is never held out, so
    every user keeps at least one pair for training in every fold (the rule of
    :func:`~dask_dgd.recommender.train_test_split`).  Every pair of a user with two or
    more is held out exactly once.

    The folds are therefore not a partition of the rows: the rows of single-pair users
    are in no test fold, and scikit-learn's ``cross_val_predict`` (which needs one
    prediction per row) refuses the splitter when there are any ("cross_val_predict
    only works for partitions"); ``cross_val_score``, ``cross_validate`` and
    ``GridSearchCV`` take it.  A fold that would hold out nothing (every user with
    fewer pairs than folds) is an :class:`~dask_dgd.exceptions.InputError`.

    Parameters
    ----------
    n_splits : int, default=5
        Folds (at least 2).
    user_col : str, default="user"
    item_col : str, default="item"
    random_state : int or None, default=None
        Seeds the order (None: a fresh order at each ``split``).

    Examples
    --------
    >>> from dask_dgd import MatrixFactorization
    >>> from dask_dgd.datasets import make_ratings
    >>> from dask_dgd.recommender import UserKFold
    >>> ratings, _ = make_ratings(50, 20, 600, random_state=0)
    >>> folds = list(UserKFold(3, random_state=0).split(ratings))
    >>> len(folds), sum(len(test) for _, test in folds) <= len(ratings)
    (3, True)
    """

    def __init__(self, n_splits=5, *, user_col="user", item_col="item", random_state=None):
        self.n_splits = n_splits
        self.user_col = user_col
        self.item_col = item_col
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None):
        """The number of folds, ``n_splits``."""
        return _int(self.n_splits, "n_splits", 2)

    def split(self, X, y=None, groups=None):
        """Integer indices (positions in ``X``) of each fold's training and test ratings.

        Parameters
        ----------
        X : pandas.DataFrame
            The ratings, with the ``user_col`` and ``item_col`` columns.
        y, groups : ignored
            (scikit-learn's protocol; the users come from ``X``.)

        Yields
        ------
        train, test : ndarray of int
        """
        k = self.get_n_splits()
        name = type(self).__name__
        X = _frame(X, name, {self.user_col: "user_col", self.item_col: "item_col"})
        rs = self.random_state
        if rs is not None and (isinstance(rs, bool) or not isinstance(rs, numbers.Integral) or rs < 0):
            raise ParameterError(f"random_state must be an int >= 0 or None; got {rs!r}")
        rng = np.random.default_rng(rs)
        users, pairs, pair_user = _pairs(X, self.user_col, self.item_col)
        n_pairs = len(pair_user)
        rank = pd.Series(rng.permutation(n_pairs)).groupby(pair_user).rank(method="first").to_numpy(np.int64) - 1
        offset = rng.integers(0, k, users.max() + 1 if len(users) else 0)
        fold = (rank + offset[pair_user]) % k
        fold[np.bincount(pair_user)[pair_user] < 2] = -1  # a single pair stays in training
        fold = fold[pairs]  # every row of a pair goes with it
        held = np.bincount(fold[fold >= 0], minlength=k)
        if (held == 0).any():
            raise InputError(
                f"{name}: fold {int(np.flatnonzero(held == 0)[0])} of {k} would hold out no ratings: every user has "
                f"fewer distinct (user, item) pairs than n_splits={k} (a user's single pair is never held out); "
                "lower n_splits, or give users more ratings"
            )
        for f in range(k):
            yield np.flatnonzero(fold != f), np.flatnonzero(fold == f)


class UserTimeSplit(BaseCrossValidator):
    """Each user's latest ratings held out, in ``n_splits`` windows going back in time.

    The unit held out is a distinct (user, item) pair, all its rows together (a pair
    is never on both sides of a split), dated by its **latest** row's ``time_col`` (a
    repeated event makes the pair recent again; with ``duplicates="last"`` the latest
    row is the pair's rating).  A user's ``n_u`` pairs are ranked from the latest
    (rank 0; ties: the pair whose latest row comes later in ``X`` is the later) and
    ``h_u = ceil(test_size * n_u)`` of them make a window.  Split
    ``j = 0 .. n_splits - 1`` (earliest first) holds out the user's window of ranks
    ``[(n_splits - 1 - j) h_u, (n_splits - j) h_u)`` and trains on the pairs older than
    it (an expanding window: the user's pairs after the test window are in neither
    set).  The time order holds **per user**: a user's training pairs are all older
    than its test pairs, but other users' ratings train whatever their time, later
    ones included (a test rating of March may be predicted by a model that saw other
    users' ratings of April): it is a per-user holdout of each user's latest pairs, not
    a global cut in time.  The last split holds out each user's latest ``h_u`` pairs
    and trains on all the others: that of ``train_test_split(X, test_size,
    time_col=...)`` when no pair repeats.  Every user keeps at least its oldest pair for
    training: a window is cut short before it, and a user too short of pairs for an
    early window gives none to it (its oldest pair trains).  A split that would hold
    out nothing (every user too short for its window) is an
    :class:`~dask_dgd.exceptions.InputError`, raised before any split is yielded.

    Parameters
    ----------
    n_splits : int, default=3
        Windows (at least 1); ``n_splits * test_size`` must be below 1.
    test_size : float in (0, 1), default=0.2
        The share of each user's pairs in one window.
    user_col : str, default="user"
    item_col : str, default="item"
    time_col : str, default="timestamp"
    """

    def __init__(self, n_splits=3, test_size=0.2, *, user_col="user", item_col="item", time_col="timestamp"):
        self.n_splits = n_splits
        self.test_size = test_size
        self.user_col = user_col
        self.item_col = item_col
        self.time_col = time_col

    def get_n_splits(self, X=None, y=None, groups=None):
        """The number of windows, ``n_splits``."""
        return _int(self.n_splits, "n_splits", 1)

    def split(self, X, y=None, groups=None):
        """Integer indices (positions in ``X``) of each split's training and test ratings.

        Parameters
        ----------
        X : pandas.DataFrame
            The ratings, with the ``user_col``, ``item_col`` and ``time_col`` columns.
        y, groups : ignored

        Yields
        ------
        train, test : ndarray of int
        """
        k = self.get_n_splits()
        s = self.test_size
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or not 0 < s < 1:
            raise ParameterError(f"test_size must be a float in (0, 1); got {s!r}")
        if k * s >= 1:
            raise ParameterError(
                f"n_splits * test_size must be below 1 (the earliest window trains on the ratings older than "
                f"{k} windows of {s:g} of them); got n_splits={k}, test_size={s:g}: lower either"
            )
        name = type(self).__name__
        X = _frame(X, name, {self.user_col: "user_col", self.item_col: "item_col", self.time_col: "time_col"})
        users, pairs, pair_user = _pairs(X, self.user_col, self.item_col)
        # each pair dated by its latest row (ties: the later row); sorting the rows by
        # (time, position) and keeping each pair's last gives its latest row's place
        rows = pd.DataFrame({"p": pairs, "t": X[self.time_col].to_numpy(), "pos": np.arange(len(X))})
        latest = rows.sort_values(["t", "pos"], kind="stable").drop_duplicates("p", keep="last")
        latest = latest.assign(u=pair_user[latest["p"].to_numpy()])
        # rank from the latest pair of each user
        rank_of = latest.iloc[::-1].groupby("u").cumcount()
        pair_rank = np.empty(len(pair_user), dtype=np.int64)
        pair_rank[latest["p"].to_numpy()[::-1]] = rank_of.to_numpy(np.int64)
        n_u = np.bincount(pair_user)[pair_user]
        h = np.ceil(s * n_u).astype(np.int64)
        splits = []
        for j in range(k):
            start = (k - 1 - j) * h
            end = np.minimum((k - j) * h, n_u - 1)  # the oldest pair is never held out
            test = ((pair_rank >= start) & (pair_rank < end))[pairs]
            if not test.any():
                raise InputError(
                    f"{name}: split {j} of {k} (window {k - j} back from each user's latest) would hold out no "
                    f"ratings: every user has too few distinct (user, item) pairs for {k} windows of "
                    f"test_size={s:g} (each user's oldest pair always trains); lower n_splits, or give users more "
                    "ratings"
                )
            splits.append((np.flatnonzero((pair_rank >= end)[pairs]), np.flatnonzero(test)))
        yield from splits


class _RatingScorer:
    """A scikit-learn scorer that reads ``y_true`` from the estimator's rating column
    when ``y`` is None (see :func:`rating_scorer`)."""

    def __init__(self, name, scorer):
        self.name, self._scorer = name, scorer

    def __repr__(self):
        return f"rating_scorer({self.name!r})"

    def __call__(self, estimator, X, y=None, **kwargs):
        if y is None:
            col = getattr(estimator, "rating_col", None)
            if not isinstance(X, pd.DataFrame) or col is None or col not in X.columns:
                got = f"columns {list(X.columns)}" if isinstance(X, pd.DataFrame) else type(X).__name__
                raise InputError(
                    f"{self!r} reads the true ratings from the estimator's rating column ({col!r}) when y is None; "
                    f"X has {got}: pass a DataFrame with that column, or the ratings as y"
                )
            y = X[col].to_numpy(dtype=np.float64)
        return self._scorer(estimator, X, y, **kwargs)


def rating_scorer(metric="neg_root_mean_squared_error"):
    """A scorer of predicted ratings for ``GridSearchCV(scoring=...)`` and
    ``cross_validate``: scikit-learn's scorer ``metric``, given the true ratings from
    the estimator's ``rating_col`` when ``y`` is None.

    ``GridSearchCV(MatrixFactorization(), grid, scoring="neg_root_mean_squared_error")``
    fails on a frame of ratings (scikit-learn's scorer gets ``y=None``: "missing
    'y_true'"); ``scoring=rating_scorer("neg_root_mean_squared_error")`` scores the
    same metric on the frame's rating column.  (``scoring=None`` uses the estimator's
    own ``score``: :class:`~dask_dgd.MatrixFactorization`'s is the negative RMSE,
    :class:`~dask_dgd.ImplicitMatrixFactorization`'s NDCG@10.)

    Parameters
    ----------
    metric : str, default="neg_root_mean_squared_error"
        A name of :func:`sklearn.metrics.get_scorer_names` of a regression metric
        (its score function from ``sklearn.metrics``' regression module:
        ``"neg_mean_absolute_error"``, ``"r2"``, ``"neg_mean_squared_error"``,
        ``"explained_variance"``, ...).

    Returns
    -------
    callable
        ``scorer(estimator, X, y=None)``, greater is better.

    Raises
    ------
    ParameterError
        ``metric`` is not a scikit-learn scorer name, or not one of a regression
        metric (``"accuracy"``, ``"roc_auc"``, ``"adjusted_rand_score"``: a
        recommender predicts ratings).
    """
    from sklearn.metrics import get_scorer, get_scorer_names

    if not isinstance(metric, str) or metric not in get_scorer_names():
        raise ParameterError(
            f"metric must be the name of a scikit-learn scorer (sklearn.metrics.get_scorer_names(), e.g. "
            f"'neg_root_mean_squared_error', 'neg_mean_absolute_error', 'r2'); got {metric!r}"
        )
    scorer = get_scorer(metric)
    if not _is_regression(scorer):
        regression = [n for n in get_scorer_names() if _is_regression(get_scorer(n))]
        raise ParameterError(
            f"metric {metric!r} is not a regression metric (it scores classes, class probabilities, decision "
            "values or clusters); a recommender predicts ratings: use a regression metric (e.g. "
            f"'neg_root_mean_squared_error', 'neg_mean_absolute_error', 'r2'; all: {', '.join(regression)})"
        )
    return _RatingScorer(metric, scorer)


def _is_regression(scorer):
    """Whether a scikit-learn scorer is one of a regression metric: it scores the
    predictions (``predict``) with a function of ``sklearn.metrics``' regression module."""
    func = getattr(scorer, "_score_func", None)
    module = getattr(func, "__module__", "") or ""
    return getattr(scorer, "_response_method", None) == "predict" and module.startswith("sklearn.metrics._regression")

"""MatrixFactorization (explicit ratings) and ImplicitMatrixFactorization."""

import numbers

import numpy as np

from .._validation import Interval, Options
from ..exceptions import InputError
from ._base import FactorizationBase
from ._metrics import evaluate_ranking

__all__ = ["ImplicitMatrixFactorization", "MatrixFactorization"]

_COMMON_DOC = """n_components : int, default=10
        Rank of the factors (Spark's ``rank``).
    alpha : float, default={alpha}
        L2 penalty of the factors, applied per rating (a user's or item's penalty
        grows with its number of ratings: the weighted-lambda rule of Spark's ALS).
    optimizer : {{"adam", "adagrad", "rmsprop", "sgd", "adamw"}} or optimizer object, default="adam"
        Update rule, applied to the user factors on their shards and to the item
        factors on the driver (all are element-wise, so this is one optimizer on all
        parameters).  L-BFGS is not offered: the user factors never leave their shards.
    learning_rate : float, Schedule or None, default=None
        Step size.  None: 0.05 for a named optimizer, an optimizer object's own rate.
    batch_size : int or None, default=None
        None: full-batch steps (every rating, every step).  An int: about
        ``n_ratings / batch_size`` steps per epoch, each on the ratings whose hashed key
        falls in that step's batch (the same batches however the data is sharded).
    max_iter : int, default={max_iter}
        Epochs (passes over the ratings).
    tol : float, default=1e-6
        Stop when the epoch-mean objective has not improved by more than ``tol`` for
        5 epochs in a row (with a ConvergenceWarning if ``max_iter`` comes first); 0
        runs exactly ``max_iter`` epochs.
    init_scale : float, default=0.1
        Standard deviation of the initial factors (biases start at 0).
    user_col, item_col : str, default="user", "item"
        Column names of the user and item ids in DataFrame input.
    n_shards : int or None, default=None
        Shards of the ratings (partitioned by user, balanced by number of ratings).
        None: one per worker (one in process).
    max_time : float or None, default=None
        Stop after this many seconds (with a ConvergenceWarning).
    random_state : int, RandomState or None, default=None
        Seeds the initial factors and the batches (and BPR's negative items).
    verbose : int, default=0
        0 silent, 1 a progress bar, 2 also a log line per step.
    callbacks : list of callables or None, default=None
        Each is called with every step record; one returning ``True`` stops the fit
        (see :mod:`dask_dgd.callbacks`).
    client : distributed.Client or None, default=None
        The cluster to train on; None: the default client if any, else in process for
        small in-memory ratings, else an embedded LocalCluster."""

_ATTRS_DOC = """user_ids_, item_ids_ : ndarray
        The ids seen in fit (and partial_fit), in the order of the factor rows.
    user_factors_ : ndarray of shape (n_users, n_components)
    item_factors_ : ndarray of shape (n_items, n_components)
    n_iter_ : int
        Epochs run.
    history_ : pandas.DataFrame
        One record per step (loss, grad_norm, step_time, compute times, bytes_up: the
        item-gradient bytes reduced, bytes_down: the item table sent, ...).
    loss_curve_ : list of float
    shard_ratings_ : ndarray
        Ratings per shard (the shards are balanced by ratings, not users).
    bytes_communicated_ : dict
        Totals of the bytes moved (see :func:`dask_dgd.communication_report`)."""


class MatrixFactorization(FactorizationBase):
    """Explicit-rating matrix factorization trained by distributed gradient descent.

    The model is :math:`\\hat r_{{ui}} = \\mu + b_u + b_i + p_u \\cdot q_i`, fitted by
    minimising

    .. math::

        \\frac{{1}}{{N}} \\sum_{{(u,i)}} \\left[(\\hat r_{{ui}} - r_{{ui}})^2
        + \\alpha (\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2)
        + \\alpha_b (b_u^2 + b_i^2)\\right]

    over the N training ratings, with :math:`\\mu` fixed at their mean.  Ratings are
    partitioned by user into shards balanced by number of ratings; each user's factors
    live with its shard and never travel; only item gradients (row-sparse) are reduced.

    Parameters
    ----------
    {common}
        With ``n_components=0`` the model is the user + item bias baseline
        :math:`\\mu + b_u + b_i`.
    alpha_bias : float or None, default=None
        L2 penalty of the biases (None: ``alpha``).
    rating_col : str, default="rating"
        Column of the ratings in DataFrame input.

    Attributes
    ----------
    {attrs}
    user_bias_, item_bias_ : ndarray
    global_mean_ : float

    Notes
    -----
    ``score`` is the **negative** root-mean-squared error, so that greater is better
    (scikit-learn's convention: GridSearchCV maximises it).

    Examples
    --------
    >>> import pandas as pd
    >>> from dask_dgd import MatrixFactorization
    >>> ratings = pd.DataFrame({{"user": ["a", "a", "b", "b", "c"], "item": [1, 2, 1, 3, 2],
    ...                         "rating": [5.0, 3.0, 4.0, 1.0, 2.0]}})
    >>> mf = MatrixFactorization(n_components=2, max_iter=50, random_state=0).fit(ratings)
    >>> mf.predict(pd.DataFrame({{"user": ["a"], "item": [3]}})).shape
    (1,)
    """

    _kind = "explicit"
    _parameter_constraints = {
        **FactorizationBase._common_constraints,
        "n_components": [Interval(numbers.Integral, 0, None, "left")],
        "alpha_bias": [None, Interval(numbers.Real, 0, None, "left")],
        "rating_col": [str],
    }

    def __init__(
        self,
        n_components=10,
        *,
        alpha=0.1,
        alpha_bias=None,
        optimizer="adam",
        learning_rate=None,
        batch_size=None,
        max_iter=100,
        tol=1e-6,
        init_scale=0.1,
        user_col="user",
        item_col="item",
        rating_col="rating",
        n_shards=None,
        max_time=None,
        random_state=None,
        verbose=0,
        callbacks=None,
        client=None,
    ):
        self.n_components = n_components
        self.alpha = alpha
        self.alpha_bias = alpha_bias
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.init_scale = init_scale
        self.user_col = user_col
        self.item_col = item_col
        self.rating_col = rating_col
        self.n_shards = n_shards
        self.max_time = max_time
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.client = client

    def score(self, X, y=None):
        """Negative root-mean-squared error of the predicted ratings (greater is better).

        Parameters
        ----------
        X : DataFrame or array of shape (n, 2)
            Held-out ratings (with the rating column, or pairs with ``y``).
        y : array-like, optional

        Returns
        -------
        float
        """
        frame, cols = self._as_frame(X, y, need_rating=True)
        if hasattr(frame, "compute"):
            frame = frame.compute()
        pred = self._score_part(frame)
        r = frame[cols[2]].to_numpy(dtype=np.float64)
        bad = int(np.count_nonzero(~np.isfinite(r)))
        if bad:
            raise InputError(
                f"{bad} values of the {cols[2]!r} column are NaN or infinite; drop or fill them "
                "before scoring"
            )
        if len(r) == 0:
            raise InputError("the ratings to score are empty (0 rows)")
        return -float(np.sqrt(np.mean((pred - r) ** 2)))


class ImplicitMatrixFactorization(FactorizationBase):
    """Implicit-feedback matrix factorization (clicks, plays, purchases).

    ``loss="bpr"`` (Rendle et al. 2009) ranks each observed item above one negative item
    drawn uniformly per observed pair and step (redrawn if the user has it):

    .. math::

        \\frac{{1}}{{N}} \\sum_{{(u,i)}} \\left[\\log(1 + e^{{-(x_{{ui}} - x_{{uj}})}})
        + \\alpha(\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2 + \\lVert q_j\\rVert^2)
        + \\alpha_b (b_i^2 + b_j^2)\\right], \\quad x_{{ui}} = b_i + p_u \\cdot q_i.

    ``loss="wls"`` (Hu, Koren and Volinsky 2008) fits preference 1 for every observed
    pair with confidence :math:`c_{{ui}} = 1 + \\text{{confidence\\_scale}} \\cdot r_{{ui}}`
    and preference 0 with confidence 1 for *every* other pair, without enumerating them:

    .. math::

        \\frac{{1}}{{N}}\\left[\\sum_{{u,i}} x_{{ui}}^2 + \\sum_{{(u,i) \\text{{ obs.}}}}
        \\left(c_{{ui}}(1 - x_{{ui}})^2 - x_{{ui}}^2 + \\alpha(\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2)\\right)\\right],
        \\quad x_{{ui}} = p_u \\cdot q_i,

    where :math:`\\sum_{{u,i}} x_{{ui}}^2 = \\sum_u p_u^T (Q^T Q) p_u`: each step the
    driver sends the k x k Gram matrix of the items and the shards send back that of
    their users.

    Parameters
    ----------
    loss : {{"bpr", "wls"}}, default="bpr"
    {common}
    alpha_bias : float or None, default=None
        L2 penalty of the item biases (bpr; None: ``alpha``).
    confidence_scale : float, default=1.0
        wls: confidence of an observed pair is ``1 + confidence_scale * strength``.
    rating_col : str or None, default=None
        Column of interaction strengths (counts, play time), used by wls; None or a
        missing column: every observed pair has strength 1.

    Attributes
    ----------
    {attrs}
    item_bias_ : ndarray (bpr only)

    Notes
    -----
    ``score`` is the mean NDCG@10 of the recommendations for the users of ``X`` against
    the items they have in ``X`` (items seen in fit excluded), see
    :func:`dask_dgd.recommender.ndcg_at_k`.
    """

    _kind = None
    _parameter_constraints = {
        **FactorizationBase._common_constraints,
        "loss": [Options("bpr", "wls")],
        "alpha_bias": [None, Interval(numbers.Real, 0, None, "left")],
        "confidence_scale": [Interval(numbers.Real, 0, None, "left")],
        "rating_col": [None, str],
    }

    def __init__(
        self,
        n_components=10,
        *,
        loss="bpr",
        alpha=0.01,
        alpha_bias=None,
        confidence_scale=1.0,
        optimizer="adam",
        learning_rate=None,
        batch_size=None,
        max_iter=100,
        tol=1e-6,
        init_scale=0.1,
        user_col="user",
        item_col="item",
        rating_col=None,
        n_shards=None,
        max_time=None,
        random_state=None,
        verbose=0,
        callbacks=None,
        client=None,
    ):
        self.n_components = n_components
        self.loss = loss
        self.alpha = alpha
        self.alpha_bias = alpha_bias
        self.confidence_scale = confidence_scale
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.init_scale = init_scale
        self.user_col = user_col
        self.item_col = item_col
        self.rating_col = rating_col
        self.n_shards = n_shards
        self.max_time = max_time
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.client = client

    def _kind_now(self):
        return self.loss

    def _as_frame(self, X, y, *, need_rating):
        frame, cols = super()._as_frame(X, y, need_rating=False)
        return frame, cols

    def score(self, X, y=None):
        """Mean NDCG@10 of the recommendations against the interactions in ``X``."""
        return evaluate_ranking(self, X, k=10)["ndcg"]


def _fill(cls):
    cls.__doc__ = cls.__doc__.format(
        common=_COMMON_DOC.format(alpha=cls().alpha, max_iter=cls().max_iter),
        attrs=_ATTRS_DOC,
    )


_fill(MatrixFactorization)
_fill(ImplicitMatrixFactorization)

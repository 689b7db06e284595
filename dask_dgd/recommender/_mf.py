"""MatrixFactorization (explicit ratings) and ImplicitMatrixFactorization."""

import numbers
import warnings

import numpy as np
import pandas as pd

from .._docstrings import other_parameters
from .._params import init_from
from .._validation import Interval, Options, user_stacklevel
from ..exceptions import InputError, RatingScaleWarning, UnusedRatingsWarning
from ._base import FactorizationBase, factorization_signature
from ._metrics import evaluate_ranking
from ._shards import check_rows, far_ratings, ratings_beyond, row_facts

__all__ = ["ImplicitMatrixFactorization", "MatrixFactorization"]


#: Names (lower case) of the numeric columns that an implicit model warns it does not
#: use when ``rating_col=None`` (:class:`~dask_dgd.exceptions.UnusedRatingsWarning`).
RATING_LIKE = ("rating", "ratings", "score", "stars", "strength", "weight", "count", "confidence")


def _rating_scale_like(value):
    """a (low, high) pair of finite numbers with low < high"""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        return False
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and np.isfinite(v) for v in value):
        return False
    return value[0] < value[1]


_shared_parameters = other_parameters("The training parameters both recommenders share: see\n"
                                      ":class:`~dask_dgd.recommender.FactorizationBase`.")

@_shared_parameters
@init_from(factorization_signature(("alpha", "auto"), ("alpha_bias", None), ("rating_scale", "auto"),
                                   ("duplicates", "mean"), rating_col="rating"), positional=1)
class MatrixFactorization(FactorizationBase):
    """Explicit-rating matrix factorization trained by distributed gradient descent.

    The model is :math:`\\hat r_{ui} = \\mu + b_u + b_i + p_u \\cdot q_i`, fitted by
    minimising

    .. math::

        \\frac{1}{N} \\left[\\sum_{(u,i)} \\left((\\hat r_{ui} - r_{ui})^2
        + \\alpha (\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2)\\right)
        + \\alpha_b \\left(\\sum_u b_u^2 + \\sum_i b_i^2\\right)\\right]

    over the N training ratings, with :math:`\\mu` fixed at their mean: the factors'
    penalty is paid per rating (Spark ALS's weighted-lambda rule), the biases' once per
    user and item, so that a bias is its mean residual shrunk by ``n / (n + alpha_b)``
    (``n``: its ratings), strongly for users and items with few ratings (the baseline
    of Koren's and Surprise's ``BaselineOnly``).  Ratings are
    partitioned by user into shards balanced by number of ratings; each user's factors
    live with its shard and never travel; only item gradients (row-sparse) are reduced.

    Parameters
    ----------
    n_components : int, default=10
        Rank of the factors (Spark's ``rank``).  With ``n_components=0`` the model is the
        user + item bias baseline :math:`\\mu + b_u + b_i`.
    alpha : float or "auto", default="auto"
        L2 penalty of the factors, applied per rating (a user's or item's penalty
        grows with its number of ratings: the weighted-lambda rule of Spark's ALS).
        "auto": chosen inside ``fit`` on held-out ratings, with the number of epochs:
        10% of every user's ratings (a seeded hash of each rating; every user keeps
        one) are held out where they live; the bias model's penalty is chosen first
        (see ``alpha_bias``), then the factors' among ``s * 3**-j`` (``s``: the
        ratings' standard deviation, ``j = -3..5``, most regularised first, from where
        the factors vanish), each fitted with early stopping on the held-out RMSE,
        computed in every step's pass (a path stops after two penalties worse than its
        best).  Every step also compares its held-out errors with the bias model's,
        rating by rating: a factors' penalty counts only if its mean improvement in
        squared error exceeds two standard errors (it is not luck) and 0.1% of the bias
        model's held-out mean squared error (it is worth having: factors that all but
        vanish improve on the bias model by a tiny amount, which can still be many
        standard errors, and would only add noise to ``recommend`` and
        ``similar_items``), and the lowest held-out RMSE among
        those is refitted on all ratings for the epochs (iterations) at which it was
        best; if none passes, the refit is the bias model, its factors exactly zero
        (``alpha_``: the top of the path; ``factors_used_`` False, and ``recommend``
        and ``similar_items`` warn that they rank by the biases).  A model costs several fits and does not
        choose factors that its held-out ratings cannot tell from the bias model's
        luck, or whose gain is too small to matter.  The path trains
        synchronously; ``mode``, ``callbacks``, ``max_time`` and ``checkpoint`` apply
        to the refit (the path's fits run without them).  See
        :mod:`dask_dgd.recommender._auto`.
        A number: one fit at that penalty; when its factors carry nothing (their term
        ``p_u . q_i`` has a mean square over the training ratings below 0.1% of the
        ratings' variance, as at ``alpha=1`` on MovieLens-small), ``fit`` warns with a
        :class:`~dask_dgd.exceptions.BiasOnlyWarning` naming the size and the fix
        (a lower ``alpha``, or "auto"), and keeps the factors as fitted
        (``factors_used_`` True).
    alpha_bias : float or None, default=None
        L2 penalty of each user's and item's bias, once per user and item (in units of
        ratings: 10 halves the bias of an item with 10 ratings).  None: chosen with
        ``alpha="auto"`` (on the bias model alone, among 100, 30, 10, 3, 1 and 0.3),
        else ``alpha`` divided by the ratings' standard deviation: ``alpha`` is in the
        ratings' units (its weight against the squared errors is ``alpha / sd``) and a
        bias's penalty a count of ratings, so the biases are shrunk as strongly as the
        factors, and ratings in other units with ``alpha`` scaled with them give the same
        fit (``alpha`` itself on ratings of standard deviation 1).
    rating_scale : "auto", (float, float) or None, default="auto"
        The ratings' scale ``(low, high)``, as Surprise's ``Reader(rating_scale=...)``:
        predicted ratings are clipped to it, in ``predict`` (with fold-in too),
        ``score`` and the scores of ``recommend`` and ``recommend_all`` (which rank by
        the unclipped scores, so that clipping never ties the best items).  Training
        does not depend on it.

        - ``(low, high)``: the declared scale; ``fit``, ``partial_fit`` and fold-in
          refuse ratings outside it (:class:`~dask_dgd.exceptions.InputError`).
        - ``"auto"``: the scale is ``[min, max]`` of the ratings seen in ``fit``
          (``partial_fit`` widens it to its new ratings; fold-in ratings are not
          refused, nor widen it: those more than its width beyond it give a
          :class:`~dask_dgd.exceptions.RatingScaleWarning`), ``rating_scale_``.
          Ratings far outside the bulk of the others are not accepted silently: the
          bulk is the ratings from their 1st to their
          99th percentile, ``[lo, hi]``, and a rating more than the bulk's width
          ``hi - lo`` beyond it (below ``lo - (hi - lo)`` or above
          ``hi + (hi - lo)``) makes ``fit`` and ``partial_fit`` warn
          (:class:`~dask_dgd.exceptions.RatingScaleWarning`, naming how many, their
          range and the bulk's): 100 ratings of 50 among 0.5-5 stars, or a few 10s
          among 1-5 stars, are far; the tails of continuous ratings (Jester's -10 to
          10, normal noise) are not.  The percentiles are computed in the scan of
          the ratings, per partition, and merged: exactly from the counts of the
          distinct values when each partition has at most 64 (star scales), else
          from a seeded sample of 10,000 ratings per partition (the far ratings are
          then counted among each partition's 1,000 lowest and highest: "at least"
          when those are all far).  A bulk of a single value warns of nothing.
          ``partial_fit`` also warns (:class:`~dask_dgd.exceptions.RatingScaleWarning`)
          when some of its ratings lie more than the fitted scale's width beyond
          ``rating_scale_`` (below ``low - (high - low)`` or above
          ``high + (high - low)``: 50 after 1-5 stars), however few or alike they are,
          naming how many, their range, the fitted scale and the fix.  The rule's
          known limits: far ratings that are more than 1% of the ratings are part of
          the bulk (its 99th percentile is then one of them), and on fewer than 100
          ratings the 99th percentile is the maximum (the 1st the minimum), so no
          rating is ever far: 20 ratings of 50 among 1,000 stars, or one among 30,
          warn of nothing and set the scale; declare it to be safe.
        - None: no scale, predictions unclipped (a fold-in user of extreme ratings
          may then be predicted past the scale, e.g. 5.4 on 1-5); ``rating_scale_``
          is None.
    duplicates : {"mean", "last", "raise"}, default="mean"
        What a (user, item) pair given on several rows becomes, in ``fit``,
        ``partial_fit`` (within one call's ratings) and fold-in: one rating, their
        mean ("mean": a rating recorded twice, or a change of mind between close
        values, counts once, as Surprise and Spark users expect of a rating matrix),
        the pair's last row in the input's order ("last": the rows of a pandas frame
        or an array; a dask DataFrame's partitions in order, then their rows), or an
        :class:`~dask_dgd.exceptions.InputError` ("raise").  A merge is said by a
        :class:`~dask_dgd.exceptions.DuplicateRatingsWarning` naming the rows merged,
        and by ``n_duplicates_``; everything the fit counts (the global mean, the
        batches, ``tol``'s scale, the held-out split, ``shard_ratings_``, the seen
        items) is of the merged ratings.
    rating_col : str, default="rating"
        Column of the ratings in DataFrame input.

    Attributes
    ----------
    user_ids_, item_ids_, user_factors_, item_factors_, factors_used_, n_iter_, history_, loss_curve_, \
shard_ratings_, bytes_communicated_
        See :class:`~dask_dgd.recommender.FactorizationBase`.
    user_bias_, item_bias_ : ndarray
    global_mean_ : float
        The mean of the training ratings (duplicates merged).
    n_duplicates_ : int
        Rows of the last ``fit`` or ``partial_fit`` merged into an earlier row of the
        same pair (see ``duplicates``).
    rating_scale_ : (float, float) or None
        The scale predictions are clipped to: the declared ``rating_scale``, or with
        ``"auto"`` the ``(min, max)`` of the ratings seen in ``fit`` and
        ``partial_fit``; None with ``rating_scale=None``.
    alpha_, alpha_bias_ : float
        The penalties of the fitted model (``alpha`` and ``alpha_bias``, or the ones
        ``"auto"`` chose).
    residual_std_ : float
        The residual standard deviation of the ratings: with ``alpha="auto"`` the
        held-out RMSE of the chosen row of ``validation_path_``, else the RMS of the
        training residuals over the ratings it trained on (duplicates merged;
        unclipped; kept by ``partial_fit``).  ``recommend`` and
        ``recommend_all`` rank by the predicted rating less ``confidence`` times
        ``residual_std_ / sqrt(item_counts_ + alpha_bias_)``, the standard error of
        the item's bias.
    item_counts_ : ndarray of int
        The number of ratings each item's bias rests on, in the order of
        ``item_ids_``: fit's (merged) and ``partial_fit``'s; ``fold_in_items`` sets an
        item's to its known users, ``fold_in_users`` leaves them (it does not refit
        the item biases).  A model saved without them counts the seen pairs.
    validation_path_ : pandas.DataFrame or None
        ``alpha="auto"``: one row per penalty fitted on the held-out split (``stage``:
        "biases" or "factors", ``point``: "grid" or "midpoint", ``alpha``,
        ``alpha_bias``, ``val_rmse``: the held-out RMSE that counts, ``n_iter``: the
        epochs to reach it, ``epochs_run``, ``val_gain`` and ``val_gain_se``: the
        factors' mean improvement in held-out squared error over the bias model and
        its standard error, ``min_gain``: the improvement it had to exceed besides two
        standard errors (0.1% of the bias model's held-out mean squared error),
        ``passed``: whether it exceeded both (``min_gain`` and ``passed`` are missing,
        NaN, in the bias model's rows), ``chosen``: the row refitted); None otherwise.
        ``history_`` then holds the path fits'
        records (``stage="validation"``, with ``val_rmse``) before the refit's
        (``stage="refit"``); ``loss_curve_`` is the refit's.

    Notes
    -----
    ``score`` is the **negative** root-mean-squared error, so that greater is better
    (scikit-learn's convention: GridSearchCV maximises it).

    Examples
    --------
    >>> import pandas as pd
    >>> from dask_dgd import MatrixFactorization
    >>> ratings = pd.DataFrame({"user": ["a", "a", "b", "b", "c"], "item": [1, 2, 1, 3, 2],
    ...                         "rating": [5.0, 3.0, 4.0, 1.0, 2.0]})
    >>> mf = MatrixFactorization(n_components=2, max_iter=50, random_state=0).fit(ratings)
    >>> mf.predict(pd.DataFrame({"user": ["a"], "item": [3]})).shape
    (1,)
    """

    _kind = "explicit"
    _auto_als_kinds = ("explicit",)
    _duplicates_options = ("mean", "last", "raise")
    _parameter_constraints = {
        **FactorizationBase._common_constraints,
        "alpha": [Interval(numbers.Real, 0, None, "left"), Options("auto")],
        "n_components": [Interval(numbers.Integral, 0, None, "left")],
        "alpha_bias": [None, Interval(numbers.Real, 0, None, "left")],
        "rating_scale": [None, Options("auto"), _rating_scale_like],
        "duplicates": [Options(*_duplicates_options)],
        "rating_col": [str],
    }

    def _declared_scale(self):
        if self.rating_scale is None or isinstance(self.rating_scale, str):
            return None
        return tuple(float(v) for v in self.rating_scale)

    def _rating_scale(self):
        if isinstance(self.rating_scale, str):  # "auto": the fitted one
            return getattr(self, "rating_scale_", None)
        return self._declared_scale()

    def _scale_seen(self, facts, rating_col, continued):
        """``rating_scale_``: the declared scale, or (``"auto"``) the ratings' range,
        widened by ``partial_fit``, with a :class:`RatingScaleWarning` when some
        ratings lie far outside the bulk of the others (see ``rating_scale``)."""
        if not isinstance(self.rating_scale, str):
            return {"rating_scale_": self._declared_scale()}
        scale = (float(facts["rating_min"]), float(facts["rating_max"]))
        old = getattr(self, "rating_scale_", None) if continued else None
        if old is not None:
            scale = (min(old[0], scale[0]), max(old[1], scale[1]))
        beyond = ratings_beyond(facts["profiles"], old) if old is not None else None
        if beyond is not None:
            w = old[1] - old[0]
            how_many = ("at least " if beyond["at_least"] else "") + f"{beyond['n']:,}"
            warnings.warn(
                f"{type(self).__name__}.partial_fit: {how_many} of the {facts['n']:,} new values of the "
                f"{rating_col!r} column (from {beyond['low']:g} to {beyond['high']:g}) lie more than the fitted "
                f"scale's width ({w:g}) beyond rating_scale_ ({old[0]:g}, {old[1]:g}): below {old[0] - w:g} or above "
                f"{old[1] + w:g}; with rating_scale='auto' they widen the scale to ({scale[0]:g}, {scale[1]:g}) "
                "that predictions are clipped to and are trained on. Declare the scale with rating_scale=(low, "
                "high) (ratings outside it are then refused), or clean those ratings",
                RatingScaleWarning, stacklevel=user_stacklevel(),
            )
        far = far_ratings(facts["profiles"])
        if far is not None:
            name = type(self).__name__
            (lo, hi), how_many = far["bulk"], ("at least " if far["at_least"] else "") + f"{far['n']:,}"
            warnings.warn(
                f"{name}: {how_many} of the {facts['n']:,} values of the {rating_col!r} column (from "
                f"{far['low']:g} to {far['high']:g}) lie far outside the bulk of the others (98% of them from "
                f"{lo:g} to {hi:g}: more than its width beyond it); with rating_scale='auto' they set the scale "
                f"({scale[0]:g}, {scale[1]:g}) that predictions are clipped to and are trained on. Declare the "
                f"scale with rating_scale=(low, high) (ratings outside it are then refused), or clean those ratings",
                RatingScaleWarning, stacklevel=user_stacklevel(),
            )
        return {"rating_scale_": scale}

    def score(self, X, y=None):
        """Negative root-mean-squared error of the predicted ratings (greater is better).

        Every row of ``X`` is scored as given: a (user, item) pair on two rows counts
        twice (held-out ratings are not merged by ``duplicates``).

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
        check_rows(row_facts(frame, *cols), cols[2], self._kind_now(), "scoring")
        pred = self._score_part(frame)
        r = frame[cols[2]].to_numpy(dtype=np.float64)
        if len(r) == 0:
            raise InputError("the ratings to score are empty (0 rows)")
        return -float(np.sqrt(np.mean((pred - r) ** 2)))


@_shared_parameters
@init_from(factorization_signature(("loss", "wls"), ("alpha", "auto"), ("alpha_bias", None), ("confidence_scale", 1.0),
                                   ("duplicates", "sum"), rating_col=None, n_components="auto"), positional=1)
class ImplicitMatrixFactorization(FactorizationBase):
    """Implicit-feedback matrix factorization (clicks, plays, purchases).

    ``loss="bpr"`` (Rendle et al. 2009) ranks each observed item above one negative item
    drawn uniformly per observed pair and step (redrawn if the user has it):

    .. math::

        \\frac{1}{N} \\sum_{(u,i)} \\left[\\log(1 + e^{-(x_{ui} - x_{uj})})
        + \\alpha(\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2 + \\lVert q_j\\rVert^2)
        + \\alpha_b (b_i^2 + b_j^2)\\right], \\quad x_{ui} = b_i + p_u \\cdot q_i.

    ``loss="wls"`` (Hu, Koren and Volinsky 2008) fits preference 1 for every observed
    pair with confidence :math:`c_{ui} = 1 + \\text{confidence\\_scale} \\cdot r_{ui}`
    and preference 0 with confidence 1 for *every* other pair, without enumerating them:

    .. math::

        \\frac{1}{N}\\left[\\sum_{u,i} x_{ui}^2 + \\sum_{(u,i) \\text{ obs.}}
        \\left(c_{ui}(1 - x_{ui})^2 - x_{ui}^2 + \\alpha(\\lVert p_u\\rVert^2 + \\lVert q_i\\rVert^2)\\right)\\right],
        \\quad x_{ui} = p_u \\cdot q_i,

    where :math:`\\sum_{u,i} x_{ui}^2 = \\sum_u p_u^T (Q^T Q) p_u`: each step the
    driver sends the k x k Gram matrix of the items and the shards send back that of
    their users.

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        Rank of the factors.  "auto" (with ``alpha="auto"``): chosen inside ``fit`` with
        the penalty, on the same held-out pairs: the ranks 8, 24 and 64 in turn
        (:data:`~dask_dgd.recommender._auto.RANK_LADDER`, smallest first), each with its
        own penalty path (see ``alpha``), until a rank's best held-out NDCG is not above
        the previous rank's (a larger rank overfits more); the chosen row (see
        ``alpha``) gives the fitted ``n_components_``.  No fixed rank suits all
        data: on the held-out positives of MovieLens-small and InstEval rank 64 ranks
        best (rank 10, :class:`MatrixFactorization`'s default, worse than
        ``implicit``'s ALS), on generated interactions of rank 5 rank 64 loses to
        popularity and rank 8 beats it by about 20%.  With a numeric ``alpha``, or when
        nothing can be held out, or for ``partial_fit`` of an unfitted model, "auto" is
        the ladder's largest rank, 64.  An int: that rank (one penalty path).
    loss : {"wls", "bpr"}, default="wls"
        "wls": the weighted least squares of all pairs (the model of ``implicit``'s and
        Spark's ALS), trained by alternating least squares; "bpr": the pairwise ranking
        loss, trained by annealed gradient steps (both above).
    alpha : float or "auto", default="auto"
        L2 penalty of the factors, applied per observed pair.
        "auto": chosen inside ``fit`` by the ranking of held-out pairs: 10% of every
        user's pairs (a seeded hash of each pair; every user keeps one) are held out
        where they live, and the penalties 1, 0.3, 0.1, 0.03, 0.01, 0.003 and 0.001
        (:data:`~dask_dgd.recommender._auto.IMPLICIT_GRID`) are fitted in turn on the
        rest (most regularised first: at 1 the factors all but vanish), each
        cold-started and trained as the refit is (to ``tol``; bpr with the default
        rate, synchronous: its ``max_iter`` annealed epochs), until one scores worse
        than the best so far, once that best beats popularity (below; for each rank of
        ``n_components="auto"``'s ladder).  Each fit is
        scored by the mean NDCG@10 of its final model's recommendations to the users
        with held-out pairs (their training items excluded; when n > 5,000 users
        have held-out pairs, each is evaluated with probability 5,000 / n: about
        5,000), computed on the shards, and so is the popularity ranking (training
        pairs per item) on the same users.  A row passes if it beats popularity by
        more than two standard errors of the paired mean difference of NDCG (user by
        user); the highest NDCG among the rows that pass (penalty and
        rank) is refitted on all the pairs, as a numeric ``alpha`` is (``max_iter``, to
        ``tol`` unless annealed); when none passes, the model **falls back to
        popularity**: its factors are exactly zero
        (``factors_used_`` False, ``alpha_`` the top of the path, 1, ``n_components_``
        the first rank tried), ``item_bias_`` is ``log(1 + n_i)`` (``n_i``: item ``i``'s
        pairs in the training data), so ``recommend`` ranks by popularity, and
        ``recommend``, ``recommend_all`` and ``similar_items`` warn so with a
        :class:`~dask_dgd.exceptions.BiasOnlyWarning`.  A fit costs as many fits as the
        path has rows (2 to 7 per rank, 1 to 3 ranks with ``n_components="auto"``: 4 to
        21, each on 90% of the pairs; 14 or 15 on MovieLens-small and InstEval) plus the
        refit; the path trains synchronously (``mode``, ``callbacks``, ``max_time`` and
        ``checkpoint`` apply to the refit) and, on a cluster, fits whole in one task per
        worker for small data (see :mod:`dask_dgd.recommender._auto`).  When no pair is
        held out (every user keeps one, and each of its others is held out with
        probability 10%, so a user with few pairs may have none held out), ``fit`` warns
        and uses ``alpha=0.1`` (wls; bpr: 0.01, where its held-out ranking is best on
        MovieLens-small and InstEval), as ``partial_fit`` of an unfitted model does.
        A number: one fit at that penalty.  Unlike :class:`MatrixFactorization`,
        ``fit`` then does not judge the size of the factors it leaves: implicit scores
        are only ranked, and have no ratings whose spread would say what size matters
        (measure the rankings instead: ``score``).
    alpha_bias : float or None, default=None
        L2 penalty of the item biases (bpr; None: ``alpha``, the chosen ``alpha_``
        with ``alpha="auto"``).
    confidence_scale : float, default=1.0
        wls: confidence of an observed pair is ``1 + confidence_scale * strength``.  1
        suits counts (plays, clicks); strengths in larger units (seconds of play) make
        every observed pair outweigh the unobserved ones by far, so that no factors beat
        popularity: give about 1 / a typical strength (or fit on ``log1p`` of them).
    duplicates : {"sum", "max", "raise"}, default="sum"
        What a (user, item) pair given on several rows becomes, in ``fit``,
        ``partial_fit`` (within one call's interactions) and fold-in: one pair whose
        strength is the sum of theirs ("sum": repeated events add up, as in
        ``implicit``'s user-item matrix), the largest ("max"), or an
        :class:`~dask_dgd.exceptions.InputError` ("raise").  Without a ``rating_col``
        a pair counts once, strength 1, however often it repeats (to count events,
        give a column of ones as ``rating_col``).  Event logs repeat pairs as a rule,
        so a merge warns nothing: ``n_duplicates_`` says it.  BPR uses each pair once
        either way.
    rating_col : str or None, default=None
        Column of interaction strengths (counts, play time), used by wls; they must be
        >= 0 for either loss (:class:`~dask_dgd.exceptions.InputError` otherwise; 0 is
        an observed pair of confidence 1).  A ``rating_col`` that is not a column of
        the ``fit`` or ``partial_fit`` input (nor given as ``y``) is an
        :class:`~dask_dgd.exceptions.InputError` naming the columns there (it would
        make every strength 1); so is it in wls fold-in's ``user_items`` /
        ``item_users`` (``recommend``, ``predict``, ``fold_in_users``,
        ``fold_in_items``), which weigh pairs by it as ``fit`` does.  Held-out
        interactions (``score``, ``evaluate_ranking``) and BPR's fold-in need only the
        user and item columns (relevance is binary; BPR does not use strengths).
        None: every observed pair has strength 1; with None, a numeric column of ``X`` named like ratings
        (:data:`RATING_LIKE`: "rating", "ratings", "score", "stars", "strength",
        "weight", "count" or "confidence", in any case) is left out with an
        :class:`~dask_dgd.exceptions.UnusedRatingsWarning` naming the fixes (pass it as
        ``rating_col`` with ``loss="wls"``, keep only the positives, e.g. ratings >= 4,
        or drop it).  BPR treats every pair alike: with a ``rating_col`` it warns
        (:class:`~dask_dgd.exceptions.UnusedRatingsWarning`) that the strengths are
        only checked, not used.

    Attributes
    ----------
    user_ids_, item_ids_, user_factors_, item_factors_, n_iter_, history_, loss_curve_, \
shard_ratings_, bytes_communicated_
        See :class:`~dask_dgd.recommender.FactorizationBase`.
    n_components_ : int
        The rank of the fitted factors: ``n_components``, or the one ``"auto"`` chose
        (the ladder's largest, 64, without a validation path).
    item_bias_ : ndarray
        The items' biases: bpr's; a model that fell back to popularity (wls too, only
        then): ``log(1 + n_i)``.
    factors_used_ : bool
        False when ``alpha="auto"`` fell back to popularity (every factor exactly zero).
    alpha_, alpha_bias_ : float
        The penalties of the fitted model (``alpha``, or the one ``"auto"`` chose; the
        biases' is ``alpha_`` unless ``alpha_bias`` is given).
    validation_path_ : pandas.DataFrame or None
        ``alpha="auto"``: one row per penalty fitted on the held-out split (``stage``
        "factors", ``point`` "grid", ``n_components``: the rank of the fit, ``alpha``,
        ``alpha_bias`` (bpr), ``val_ndcg``: the mean NDCG@10 of the held-out pairs,
        ``val_pop_ndcg``: popularity's on the same users, ``val_gain`` and
        ``val_gain_se``: their paired mean difference and its standard error,
        ``n_users``: the users evaluated, ``n_iter`` and ``epochs_run``: the fit's
        iterations (epochs), ``passed``: whether ``val_gain`` exceeds two standard
        errors, ``chosen``: the row refitted, the highest ``val_ndcg`` among those
        that passed, none when none passed and the model fell back to popularity);
        None otherwise.  ``history_`` then holds the path fits' records
        (``stage="validation"``) before the refit's (``stage="refit"``; after a
        fallback, one iteration that only sets up the model before its factors are
        zeroed); ``loss_curve_`` is the refit's.
    n_duplicates_ : int
        Rows of the last ``fit`` or ``partial_fit`` merged into an earlier row of the
        same pair (see ``duplicates``).

    Notes
    -----
    ``score`` is the mean NDCG@10 of the recommendations for the users of ``X`` against
    the items they have in ``X`` (items seen in fit excluded), see
    :func:`dask_dgd.recommender.ndcg_at_k`.
    """

    _kind = None
    _auto_als_kinds = ("wls",)
    _duplicates_options = ("sum", "max", "raise")
    _parameter_constraints = {
        **FactorizationBase._common_constraints,
        "n_components": [Interval(numbers.Integral, 1, None, "left"), Options("auto")],
        "loss": [Options("bpr", "wls")],
        "alpha": [Interval(numbers.Real, 0, None, "left"), Options("auto")],
        "alpha_bias": [None, Interval(numbers.Real, 0, None, "left")],
        "confidence_scale": [Interval(numbers.Real, 0, None, "left")],
        "duplicates": [Options(*_duplicates_options)],
        "rating_col": [None, str],
    }

    def _kind_now(self):
        return self.loss

    def _anneals(self):
        """BPR with the default rate of a named optimizer, synchronous: its objective is
        sampled (new negatives every step), so a relative-change test would stop it on
        noise; the rate is annealed instead, and the fit runs its ``max_iter`` epochs."""
        return self.loss == "bpr" and self.learning_rate is None and isinstance(self.optimizer, str) \
            and self.mode == "sync"

    def _as_frame(self, X, y, *, need_rating):
        frame, cols = super()._as_frame(X, y, need_rating=False)
        return frame, cols

    def _missing_strengths(self, X, cols, where):
        """An :class:`~dask_dgd.exceptions.InputError` when ``rating_col`` is given but
        is not a column of ``X`` (``cols[2]`` None): its pairs would silently all have
        strength 1."""
        rcol = self.rating_col
        if rcol is None or cols[2] is not None:
            return
        name = type(self).__name__
        has = f"columns {list(X.columns)}" if hasattr(X, "columns") else f"{type(X).__name__} of (user, item) pairs"
        if where == "X":
            fix = ("name the strengths' column with rating_col=..., pass them as y=..., or set rating_col=None to "
                   "count every pair once")
        else:
            fix = f"add the {rcol!r} column (the pairs' strengths, as in fit) to {where}"
        raise InputError(
            f"{name}(rating_col={rcol!r}): {where} has no column {rcol!r} ({has}), so every (user, item) pair "
            f"would have strength 1; {fix}"
        )

    def _folded(self, users, user_items):
        if self.loss == "wls":  # wls weighs the folded-in pairs by their strengths, as fit does
            self._missing_strengths(user_items, self._as_frame(user_items, None, need_rating=False)[1], "user_items")
        return super()._folded(users, user_items)

    def _fold_in(self, interactions, side):
        if self.loss == "wls":
            what = "user_items" if side == "users" else "item_users"
            self._missing_strengths(interactions, self._as_frame(interactions, None, need_rating=False)[1], what)
        return super()._fold_in(interactions, side)

    def _say_unused_ratings(self, X, cols):
        """An :class:`~dask_dgd.exceptions.UnusedRatingsWarning` (once per fit) when
        ``X`` has a rating-like column (:data:`RATING_LIKE`) that ``rating_col=None``
        leaves out, or when BPR is given strengths it does not weigh pairs by; an
        :class:`~dask_dgd.exceptions.InputError` when ``rating_col`` is given and ``X``
        has no such column (see :meth:`_missing_strengths`)."""
        self._missing_strengths(X, cols, "X")
        name = type(self).__name__
        if cols[2] is None and hasattr(X, "columns"):
            found = [c for c in X.columns if isinstance(c, str) and c.lower() in RATING_LIKE
                     and c not in cols[:2] and pd.api.types.is_numeric_dtype(X[c].dtype)
                     and not pd.api.types.is_bool_dtype(X[c].dtype)]
            if found:
                c = found[0]
                warnings.warn(
                    f"{name}: X has a column {c!r} but rating_col=None, so it is not used: every (user, item) "
                    f"pair counts as a positive of strength 1; pass rating_col={c!r} (with loss='wls') to use it "
                    f"as the strengths, or keep only the positives first (e.g. X[X[{c!r}] >= 4]), or drop the "
                    "column", UnusedRatingsWarning, stacklevel=user_stacklevel())
        elif cols[2] is not None and self.loss == "bpr":
            warnings.warn(
                f"{name}(loss='bpr') takes every (user, item) pair as a positive alike: the {cols[2]!r} values are "
                "only checked (finite, >= 0), not used; use loss='wls' to weigh the pairs by them, or keep only "
                f"the positives first (e.g. X[X[{cols[2]!r}] >= 4]) and leave rating_col=None",
                UnusedRatingsWarning, stacklevel=user_stacklevel())

    def score(self, X, y=None):
        """Mean NDCG@10 of the recommendations against the interactions in ``X``."""
        return evaluate_ranking(self, X, k=10)["ndcg"]

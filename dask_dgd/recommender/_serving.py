"""Serving a fitted recommender: predicted ratings or scores, top-k recommendations,
similar items."""

import numbers
import warnings

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from .._backend import asarray_like, is_device_array, to_numpy
from .._engine.runtime.executor import is_dask_collection
from .._validation import user_stacklevel
from ..exceptions import BiasOnlyWarning, InputError, ParameterError
from ._input import ids_preview, pairs_shape_error
from ._objective import grow_state
from ._rankval import top_k

__all__ = ["RecommenderMixin"]

#: Users scored at once by recommend (a users x items block of scores).
RECOMMEND_CHUNK = 1024

#: The default ``confidence`` of an explicit model's ``recommend`` and
#: ``recommend_all``: items are ranked by their predicted rating less this many
#: standard errors of their bias (see :meth:`RecommenderMixin.recommend`).
DEFAULT_CONFIDENCE = 5.0


def _top(s, k):
    """The ``k`` best columns of every row of ``s`` (best first, ties by column index:
    :func:`~._rankval.top_k`, the held-out ranking's) and their scores."""
    return top_k(s, min(k, s.shape[1]))


def _top_unseen(s, seen, k):
    """:func:`_top` of ``s`` with the items of ``seen`` (a CSR block of the rows' seen
    items) scored ``-inf`` (in place): ranked last, padding past the unseen items."""
    block = seen.tocoo()
    s[block.row, block.col] = -np.inf
    return _top(s, k)


def _seen_at(seen, top):
    """Whether each slot of ``top`` (columns of ``seen``'s rows) is a seen item: the
    padding (not the scores: an unseen item's score may be anything)."""
    return np.asarray(seen[np.arange(top.shape[0])[:, None], top].todense(), dtype=bool) if top.size else \
        np.zeros(top.shape, dtype=bool)


def _top_k_frame(users, P, user_part, seen, items, k, scale=None):
    """One partition of ``recommend_all``: the top ``k`` rows of these users (their
    scores clipped to ``scale``, a ``(low, high)`` or None, after ranking)."""
    Q, bias, item_ids = items
    s = P @ Q.T
    if bias is not None:
        s += bias
    if user_part is not None:
        s += user_part[:, None]
    top, scores = _top(s, k) if seen is None else _top_unseen(s, seen, k)
    keep = np.ones(top.shape, dtype=bool) if seen is None else ~_seen_at(seen, top)
    if scale is not None:
        scores = np.clip(scores, *scale)
    rank = np.broadcast_to(np.arange(1, k + 1), top.shape)
    return pd.DataFrame({"user": np.repeat(users, k).reshape(top.shape)[keep], "item": item_ids[top[keep]],
                         "score": scores[keep], "rank": rank[keep].astype(np.int64)})


def _id_kind(values):
    """"numbers" or "strings" (the ids' kind, as pandas infers it), or None (empty,
    mixed or another kind: not compared)."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("integer", "floating", "mixed-integer-float", "decimal"):
        return "numbers"
    return {"string": "strings", "bytes": "bytes"}.get(kind)


class RecommenderMixin:
    """``predict``, ``recommend`` and ``similar_items`` of the fitted factors."""

    @property
    def factors_used_(self):
        """Whether the factors carry anything (False: every item factor is exactly zero).

        False where ``alpha="auto"`` refitted the bias model, or with
        ``n_components=0``: the factor term is then 0 for every user, fitted or folded
        in, and :meth:`recommend` (by default by the biases' lower bounds, see its
        ``confidence``) and :meth:`similar_items` rank by the biases alone.  An implicit
        model is False where ``alpha="auto"`` found no factors that beat popularity on
        the held-out pairs: it is then the popularity model, ``item_bias_`` ``log(1 +
        n_i)`` (``n_i``: the item's training interactions; wls too), and
        ``partial_fit`` refuses it (:class:`~dask_dgd.exceptions.ParameterError`).
        Computed from ``item_factors_``, so it follows ``partial_fit`` and fold-in.
        """
        check_is_fitted(self, "item_factors_")
        return bool(np.any(self.item_factors_))

    def _ranks_by_popularity(self):
        """Whether this is an implicit model's popularity fallback (see
        ``_fall_back_to_popularity``): every factor exactly zero, the item biases
        ``log(1 + n_i)``."""
        return self._kind_now() != "explicit" and hasattr(self, "item_bias_") and not self.factors_used_

    def _warn_bias_only(self, what):
        """Warn that ``what`` ranks by the biases alone, where the model has factor
        columns but every one is zero (asked for with ``n_components=0``: no warning)."""
        if self.item_factors_.shape[1] == 0 or self.factors_used_:
            return
        if self._ranks_by_popularity():
            strengths = ""
            if getattr(self, "loss", None) == "wls" and getattr(self, "rating_col", None) is not None:
                # confidences 1 + confidence_scale * strength: strengths in large units (seconds of
                # play, not plays) drown the unobserved pairs, whatever alpha
                strengths = (f"; with strengths in large units (seconds rather than plays) refit with "
                             f"confidence_scale of about 1 / a typical {self.rating_col!r}, or on log1p of them")
            warnings.warn(
                f"{type(self).__name__}: the model ranks by popularity (item_bias_ = log(1 + the item's "
                "interactions); every factor is exactly zero): alpha='auto' found no factors that beat popularity "
                f"on the held-out pairs by two standard errors: {what}; give a numeric alpha to fit factors anyway "
                f"(factors_used_ is False){strengths}",
                BiasOnlyWarning, stacklevel=user_stacklevel(),
            )
            return
        from ._auto import MIN_GAIN

        why = f"alpha='auto' chose the bias model, alpha_={self.alpha_:g}, as no factors beat its held-out mean " \
            f"squared error by more than {MIN_GAIN:.1%} of it and two standard errors" \
            if getattr(self, "validation_path_", None) is not None else "the fitted factors are all zero"
        warnings.warn(
            f"{type(self).__name__}: every factor is exactly zero ({why}): {what}; give a numeric alpha "
            "to fit factors, or n_components=0 to ask for the bias model (factors_used_ is False)",
            BiasOnlyWarning, stacklevel=user_stacklevel(),
        )

    def _rating_scale(self):
        """The ``(low, high)`` an explicit model clips its predictions to, or None."""
        return None

    def _clip(self, scores):
        """``scores`` clipped to :meth:`_rating_scale` (in place; infinite ones kept:
        ``recommend``'s padding past the unseen items is ``-inf``)."""
        scale = self._rating_scale()
        if scale is not None:
            finite = np.isfinite(scores)
            scores[finite] = np.clip(scores[finite], *scale)
        return scores

    def _codes(self, X):
        check_is_fitted(self, "item_factors_")
        frame, _ = self._as_frame(X, None, need_rating=False)
        return frame

    def _pair_scores(self, users, items, clip=True):
        """Scores of (user, item) id pairs (NumPy); unknown ids contribute nothing."""
        u = self._user_index.get_indexer(users)
        i = self._item_index.get_indexer(items)
        ku, ki = u >= 0, i >= 0
        both = ku & ki
        out = np.zeros(len(u))
        out[both] = np.einsum("ij,ij->i", self.user_factors_[u[both]], self.item_factors_[i[both]])
        if hasattr(self, "item_bias_"):
            out[ki] += self.item_bias_[i[ki]]
        if hasattr(self, "user_bias_"):
            out[ku] += self.user_bias_[u[ku]]
            out += self.global_mean_
        return self._clip(out) if clip else out

    def _score_part(self, df):
        return self._pair_scores(df[self.user_col].to_numpy(), df[self.item_col].to_numpy())

    def _score_block(self, blocks):
        """Scores of a block of pairs (given as the list of its one column block), in the
        block's namespace and device."""
        (block,) = blocks
        pairs = to_numpy(block)
        return asarray_like(self._pair_scores(pairs[:, 0], pairs[:, 1]), block)

    def predict(self, X, user_items=None):
        """Predicted ratings (explicit) or scores (implicit) of (user, item) pairs.

        Unknown users or items fall back to what is known: the rating of an unknown user
        is ``global_mean_ + item_bias_`` (the item's bias model), of an unknown item
        ``global_mean_ + user_bias_``, of both ``global_mean_``; the implicit score of an
        unknown item is 0 and of an unknown user the item's bias (BPR, or the
        popularity model of ``alpha="auto"``: ``log(1 + n_i)``) or 0 (wls).

        Parameters
        ----------
        X : DataFrame or array of shape (n, 2)
            (user, item) pairs, as in ``fit``.
        user_items : DataFrame or None, default=None
            Fold-in (see :meth:`recommend`): the users of ``X`` are scored with factors
            computed from their interactions here, the fitted items fixed (each user of
            ``X`` needs rows there, else :class:`InputError`; ``X`` is
            then computed in memory; the result is NumPy).

        Returns
        -------
        numpy.ndarray of shape (n,), or a dask array for dask input
            For a dask array of pairs, each block of the result is in the namespace and
            on the device of the pairs' block (e.g. CuPy).
        """
        import dask.array as da

        if user_items is not None:
            return self._predict_folded(X, user_items)
        if isinstance(X, da.Array):
            check_is_fitted(self, "item_factors_")
            if X.ndim != 2 or X.shape[1] != 2:
                raise pairs_shape_error(X.shape)
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            meta = asarray_like(np.zeros(0), X._meta)
            # concatenate=False: dask would join a single column block with NumPy
            return da.blockwise(self._score_block, "i", X, "ij", concatenate=False, dtype=np.float64, meta=meta)
        frame = self._codes(X)
        if is_dask_collection(frame):
            import dask.array as da

            out = frame.map_partitions(self._score_part, meta=np.zeros(0))
            return out if isinstance(out, da.Array) else out.to_dask_array()
        return self._score_part(frame)

    def _predict_folded(self, X, user_items):
        """``predict`` with the users' factors folded in from ``user_items``."""
        frame = self._codes(X)
        if hasattr(frame, "compute"):
            frame = frame.compute()
        users = frame[self.user_col].to_numpy()
        unique = pd.unique(users)
        P, user_part, _ = self._folded(unique, user_items)
        row = pd.Index(unique).get_indexer(users)
        i = self._item_index.get_indexer(frame[self.item_col].to_numpy())
        known = i >= 0
        out = np.zeros(len(frame)) if user_part is None else user_part[row].copy()
        out[known] += np.einsum("ij,ij->i", P[row[known]], self.item_factors_[i[known]])
        if hasattr(self, "item_bias_"):
            out[known] += self.item_bias_[i[known]]
        return self._clip(out)

    def _popularity_note(self, method, discount=None):
        if hasattr(self, "item_bias_") and discount is not None:
            return (f"{method} ranks the items by their biases alone less the confidence discount, a lower bound "
                    "returned as the score (popularity: the same order for every user; confidence=0: by the biases)")
        if hasattr(self, "item_bias_"):
            return f"{method} ranks the items by their biases alone (popularity: the same order for every user)"
        return f"{method} scores every item 0 (the model has no item biases): its order is arbitrary"

    @property
    def item_counts_(self):
        """The number of ratings (interactions) each item's bias rests on, in the order
        of ``item_ids_``: its ratings in ``fit`` (after merging duplicates), plus those
        ``partial_fit`` adds; ``fold_in_items`` sets an item's count to its number of
        known users in ``item_users`` (the ratings its row is solved from), and
        ``fold_in_users`` leaves the counts alone (it does not refit the item biases).
        Explicit models' ``recommend`` discounts items by the uncertainty of their bias,
        which shrinks with these counts.  A model saved before the counts were stored
        counts each item's seen (user, item) pairs instead."""
        check_is_fitted(self, "item_factors_")
        counts = getattr(self, "_item_counts", None)
        if counts is None:  # (a model saved before the counts were stored)
            return np.asarray(self._seen.sum(axis=0), dtype=np.int64).ravel()
        return np.array(counts, dtype=np.int64)  # (a copy: the stored counts are not changed through it)

    def _item_discount(self, confidence):
        """What ``recommend`` subtracts from each item's score: ``confidence`` standard
        errors of its bias, ``residual_std_ / sqrt(max(item_counts_ + alpha_bias_, 1))``
        (finite for an item without ratings under ``alpha_bias_`` 0); None for no
        discount (``confidence`` 0, or a model without ratings)."""
        explicit = self._kind_now() == "explicit"
        if confidence is None:
            confidence = DEFAULT_CONFIDENCE if explicit else 0.0
        if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) \
                or not np.isfinite(confidence) or confidence < 0:
            raise ParameterError(f"confidence must be a finite number >= 0 (standard errors; 0: rank by the "
                                 f"predicted ratings) or None (the default); got {confidence!r}")
        if confidence == 0:
            return None
        if not explicit:
            raise ParameterError(
                f"confidence={confidence!r} applies to explicit ratings (MatrixFactorization): the scores of an "
                f"implicit model ({self._kind_now()}) are not ratings with a residual error; leave confidence=None"
            )
        sigma = getattr(self, "residual_std_", None)
        if sigma is None:  # (a model saved before the attribute existed)
            return None
        return float(confidence) * sigma / np.sqrt(np.maximum(self.item_counts_ + self.alpha_bias_, 1.0))

    def _check_id_kinds(self, values, side, where):
        """Refuse ``side`` ("user" or "item") ids of another kind than the fitted ones'
        (strings into a model of integer ids, or the reverse): they would never match a
        fitted id (ignored as unknown), and ``fold_in_*`` would append them as new ids."""
        fitted = getattr(self, f"{side}_ids_")
        have, given = _id_kind(fitted), _id_kind(values)
        if have is None or given is None or have == given:
            return
        example = fitted[0].item() if isinstance(fitted[0], np.generic) else fitted[0]
        cast = "str" if have == "strings" else type(example).__name__ if have == "bytes" else "int"
        raise InputError(
            f"{where}: the {side} ids are {given} ({ids_preview(pd.unique(np.asarray(values, dtype=object)))}) "
            f"but the model's {side} ids are {have} (e.g. {example!r}); they would never match a fitted {side}: "
            f"convert them to the fitted ids' type first (e.g. .astype({cast}))"
        )

    def _integral_ids(self, frame, where):
        """``frame`` with float ids cast to the fitted ids' integer dtype (fold-in
        appends its ids to the model's: a float would turn every id into a float);
        refused unless each is a whole number (NaN ids: left to the checks of fit)."""
        for side, col in (("user", self.user_col), ("item", self.item_col)):
            fitted = getattr(self, f"{side}_ids_")
            if fitted.dtype.kind not in "iu" or frame[col].dtype.kind != "f":
                continue
            values = frame[col].to_numpy()
            if np.isnan(values).any():
                continue
            whole = np.isfinite(values) & (values == np.round(values))
            if not whole.all():
                raise InputError(
                    f"{where}: {int((~whole).sum())} {side} id(s) are not whole numbers "
                    f"({ids_preview(pd.unique(values[~whole]))}) but the model's {side} ids are integers "
                    f"(e.g. {fitted[0].item()!r}); they would be added as new float ids: fix those ids and give "
                    f"integer ones (e.g. .astype(int))"
                )
            frame = frame.copy()
            frame[col] = values.astype(fitted.dtype)
        return frame

    def _check_k(self, k):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
            raise ParameterError(f"k must be an int > 0; got {k!r}")
        return int(k)

    def _known(self, ids, index, what):
        if is_device_array(ids):
            ids = to_numpy(ids)  # ids on a device (CuPy...): looked up on the host
        if isinstance(ids, (str, bytes)) or np.ndim(ids) == 0:
            ids = [ids]  # one id, not a sequence of characters
        ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
        codes = index.get_indexer(ids)
        if np.any(codes < 0):
            unknown = ids[codes < 0]
            raise InputError(
                f"{unknown.size} {what}(s) were not seen in fit: {ids_preview(unknown)}; "
                f"predict() scores unknown {what}s with the bias fallback, recommend/similar_items need known ones"
            )
        return ids, codes

    def recommend(self, users, k=10, exclude_seen=True, user_items=None, confidence=None):
        """The ``k`` best-scored items for each user.

        A model whose factors are all zero (``factors_used_`` False: ``alpha="auto"``
        chose the bias model) predicts ``global_mean_ + user_bias_ + item_bias_``: every
        user gets the same ranking (a popularity ranking, less the items each user has
        seen), by default by the lower bound of ``confidence`` (each item's bias less
        its discount, the bound returned as the score), with ``confidence=0`` by the
        item biases; with a :class:`~dask_dgd.exceptions.BiasOnlyWarning` (none for
        ``n_components=0``, which asks for that model).  So does an implicit model for
        which ``alpha="auto"`` found no factors that beat popularity on the held-out
        pairs: it ranks each user's unseen items by popularity, ``item_bias_ = log(1 +
        n_i)`` (ties by item index), with that warning; users folded in get zero
        factors, so the same order.

        Parameters
        ----------
        users : array-like of user ids
            Users seen in ``fit`` (an unknown user raises :class:`InputError`), or, with
            ``user_items``, any users.
        k : int, default=10
            Items per user (at most the number of items).
        exclude_seen : bool, default=True
            Leave out the items each user rated in ``fit``/``partial_fit`` (with
            ``user_items``: the items each user has there).  Padding is not a
            recommendation: a user with fewer than ``k`` unseen items gets fewer
            recommendations (:meth:`recommend`: the slots past them are masked;
            :meth:`recommend_all`: the user has fewer rows).
        user_items : DataFrame or None, default=None
            Fold-in: the users' interactions (the ``user_col``, ``item_col`` and, if the
            model uses one, rating column), from which each user's factors are computed
            with the fitted items fixed, without refitting (see
            :mod:`dask_dgd.recommender._foldin`): explicit ratings and wls solve the
            user's own least-squares problem exactly, BPR minimises the user's BPR
            objective over all item pairs.  For users unseen in fit, or to recompute a
            known user from other interactions.  Items unknown to the model are
            ignored; a user whose rows there name no known item is ranked by the
            items' biases alone, while a user with no row at all in ``user_items`` (a
            mistyped id, or ``7`` for ``"7"``) is refused (:class:`InputError` naming
            them).  Checked as ``fold_in_users`` checks them (missing ids,
            NaN or infinite ratings, item ids of another type than the fitted ones':
            :class:`InputError`; the users may have ids of any type).
        confidence : float >= 0 or None, default=None
            Explicit ratings: rank by a lower confidence bound of the predicted rating,
            the prediction less ``confidence`` standard errors of the item's bias,
            ``residual_std_ / sqrt(item_counts_ + alpha_bias_)`` (the posterior
            standard deviation of the bias under the model's ridge prior): an item
            rated 5 by one person no longer outranks one rated 4.5 by hundreds.
            None: :data:`DEFAULT_CONFIDENCE` (5) for explicit models, chosen on
            held-out ranking (MovieLens, InstEval, generated ratings); 0: rank by the
            predicted ratings.  Implicit models have no bound: None or 0 only
            (else :class:`ParameterError`).  ``predict`` is not affected.

        Returns
        -------
        item_ids : numpy.ma.MaskedArray of shape (n_users, k)
            Each user's recommendations, best first (equal scores in the order of
            ``item_ids_``).  Always a masked array, its
            mask True on the padding slots of a user with fewer than ``k`` unseen
            items (``exclude_seen``: padding is not a recommendation, as
            :meth:`recommend_all` has no rows for it), all False otherwise.  Under the
            mask lie items the user has seen (scored ``-inf``): read a user's
            recommendations with ``item_ids[u].compressed()``, or fill the slots with
            ``item_ids.filled(value)``; ``numpy.asarray(item_ids)`` drops the mask
            and keeps those seen items.
        scores : numpy.ma.MaskedArray of shape (n_users, k)
            The scores the items are ranked by, with the same mask (``-inf`` under it,
            also its ``fill_value``: ``scores.filled()`` marks the padding ``-inf``):
            explicit models' lower bounds of the predicted ratings (the predicted
            ratings with ``confidence=0``; clipped to ``rating_scale_``), implicit
            models' scores.  ``predict`` gives the predicted ratings themselves.
        """
        check_is_fitted(self, "item_factors_")
        k = min(self._check_k(k), len(self.item_ids_))
        discount = self._item_discount(confidence)
        self._warn_bias_only(self._popularity_note("recommend", discount))
        item_bias = getattr(self, "item_bias_", np.zeros(len(self.item_ids_)))
        if discount is not None:
            item_bias = item_bias - discount
        if user_items is None:
            _, codes = self._known(users, self._user_index, "user")
            P = self.user_factors_[codes]
            user_part = self.user_bias_[codes] + self.global_mean_ if hasattr(self, "user_bias_") else None
            seen = self._seen[codes] if exclude_seen else None
        else:
            P, user_part, seen = self._folded(users, user_items)
            seen = seen if exclude_seen else None
        n = P.shape[0]
        ids = np.empty((n, k), dtype=np.int64)
        scores = np.empty((n, k))
        pad = np.zeros((n, k), dtype=bool)  # slots past a user's unseen items: seen ones
        for a in range(0, n, RECOMMEND_CHUNK):
            b = min(a + RECOMMEND_CHUNK, n)
            s = P[a:b] @ self.item_factors_.T + item_bias
            if user_part is not None:  # explicit: the scores are predicted ratings
                s += user_part[a:b, None]
            if seen is None:
                ids[a:b], scores[a:b] = _top(s, k)
            else:
                ids[a:b], scores[a:b] = _top_unseen(s, seen[a:b], k)
                pad[a:b] = _seen_at(seen[a:b], ids[a:b])
        # (ranked by the scores before clipping)
        return (np.ma.MaskedArray(self.item_ids_[ids], mask=pad),
                np.ma.MaskedArray(self._clip(scores), mask=pad.copy(), fill_value=-np.inf))

    def recommend_all(self, k=10, exclude_seen=True, users_per_partition=RECOMMEND_CHUNK, confidence=None):
        """The ``k`` best-scored items of every user seen in fit, as a lazy dask DataFrame.

        Each partition holds ``users_per_partition`` users (in the order of
        ``user_ids_``) and is computed by its own task, from its block of the user
        factors, its rows of the seen items and the item table (one key, shared by
        every partition): with a distributed client, on the workers, in parallel.  The
        user blocks come from the fitted model (the user factors are not kept on the
        workers after fit).  Without factors (``factors_used_`` False) every user gets
        the same ranking, by default by the lower bound of ``confidence`` (each item's
        bias less its discount), as in :meth:`recommend`, with its warning.

        Parameters
        ----------
        k : int, default=10
        exclude_seen : bool, default=True
            Leave out the items each user rated in fit.  Padding is not a
            recommendation: a user with fewer than ``k`` unseen items gets fewer
            recommendations (:meth:`recommend`: the slots past them are masked;
            :meth:`recommend_all`: the user has fewer rows).
        users_per_partition : int, default=1024
        confidence : float >= 0 or None, default=None
            As in :meth:`recommend`: explicit models rank by the predicted rating less
            ``confidence`` standard errors of the item's bias (None: 5), and ``score``
            is that bound.

        Returns
        -------
        dask.dataframe.DataFrame
            Columns ``user``, ``item``, ``score`` (float64) and ``rank`` (1 = best), one
            row per recommendation, users in the order of ``user_ids_``, best first.
        """
        import dask
        import dask.dataframe as dd

        check_is_fitted(self, "item_factors_")
        k = min(self._check_k(k), len(self.item_ids_))
        discount = self._item_discount(confidence)
        self._warn_bias_only(self._popularity_note("recommend_all", discount))
        size = users_per_partition
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size <= 0:
            raise ParameterError(f"users_per_partition must be an int > 0; got {size!r}")
        n = len(self.user_ids_)
        item_bias = getattr(self, "item_bias_", None)
        if discount is not None:
            item_bias = item_bias - discount
        items = dask.delayed((self.item_factors_, item_bias, self.item_ids_), pure=True, traverse=False)
        user_part = self.user_bias_ + self.global_mean_ if hasattr(self, "user_bias_") else None
        parts = []
        for a in range(0, n, size):
            b = min(a + size, n)
            parts.append(dask.delayed(_top_k_frame, pure=True)(
                self.user_ids_[a:b], self.user_factors_[a:b], None if user_part is None else user_part[a:b],
                self._seen[a:b] if exclude_seen else None, items, k, self._rating_scale()))
        meta = pd.DataFrame({"user": pd.Series([], dtype=self.user_ids_.dtype),
                             "item": pd.Series([], dtype=self.item_ids_.dtype),
                             "score": pd.Series([], dtype=np.float64), "rank": pd.Series([], dtype=np.int64)})
        return dd.from_delayed(parts, meta=meta, verify_meta=False)

    def _folded(self, users, user_items):
        """Fold-in rows of ``users`` from ``user_items``: factors, the explicit user part
        (bias + global mean) or None, and the items each has there (CSR)."""
        import scipy.sparse as sp

        from ._foldin import fold_in

        frame, _ = self._as_frame(user_items, None, need_rating=False)
        if hasattr(frame, "compute"):
            frame = frame.compute()
        if is_device_array(users):
            users = to_numpy(users)
        if isinstance(users, (str, bytes)) or np.ndim(users) == 0:
            users = [users]
        have = set(frame[self.user_col].tolist())
        missing = [u for u in pd.unique(np.asarray(list(users), dtype=object)) if u not in have]
        if missing:
            raise InputError(
                f"{len(missing)} user(s) to score have no rows in user_items: {ids_preview(missing)} (ids of "
                f"another type do not match: 7 is not '7'); give each user's interactions in user_items (fix the "
                "ids), or score users seen in fit without user_items"
            )
        rows, items = fold_in(self, frame, list(users))
        # (the users are not written to the model: any ids; the items must be the model's)
        self._check_id_kinds(frame[self.item_col].to_numpy(), "item", "user_items")
        k = self.item_factors_.shape[1]
        user_part = rows[:, k] + self.global_mean_ if hasattr(self, "user_bias_") else None
        indptr = np.cumsum([0] + [len(i) for i in items])
        seen = sp.csr_matrix((np.ones(indptr[-1], dtype=np.int8), np.concatenate(items + [np.zeros(0, np.int64)]),
                              indptr), shape=(len(items), len(self.item_ids_)))
        return rows[:, :k], user_part, seen

    def fold_in_users(self, user_items):
        """Write the factors of users computed from their interactions into the model,
        the fitted items fixed, without refitting: users new to the model are
        appended (``user_ids_``, ``user_factors_``...), known ones get rows computed
        from ``user_items`` alone (as :meth:`recommend` with ``user_items`` computes
        them; see :mod:`dask_dgd.recommender._foldin`), and their pairs are marked seen.

        Parameters
        ----------
        user_items : DataFrame
            The users' interactions (the ``user_col``, ``item_col`` and, if the model
            uses one, rating column); items unknown to the model are ignored.

        Returns
        -------
        self
            The model, with the users' rows written in.

        Raises
        ------
        InputError
            For missing ids, NaN or infinite ratings (as ``fit``, with its message),
            ratings so large that a row would not be finite, and user or item ids of
            another type than the fitted ones' (strings into a model of integer ids, or
            the reverse); the model is then unchanged.
        """
        return self._fold_in(user_items, "users")

    def fold_in_items(self, item_users):
        """Write the factors of items computed from their interactions into the model,
        the fitted users fixed, without refitting: items new to the model (cold-start
        items) are appended to ``item_ids_``, ``item_factors_`` (and ``item_bias_``),
        known ones get rows computed from ``item_users`` alone, and their pairs are
        marked seen.  Explicit ratings and wls solve each item's least-squares problem
        exactly; BPR minimises the item's expected BPR objective (it is the observed
        item of its users' pairs and a possible negative of every other user's), see
        :mod:`dask_dgd.recommender._foldin`.  A folded item's ``item_counts_`` becomes
        the number of its known users in ``item_users`` (a known item's count is
        replaced).  On an implicit popularity model (``factors_used_`` False:
        ``alpha="auto"`` found no factors that beat popularity) a folded item keeps zero
        factors and gets ``item_bias_ = log(1 + its known users in item_users)``, so it
        is ranked by that count among the fitted items' popularity.

        Parameters
        ----------
        item_users : DataFrame
            The items' interactions, in the columns of :meth:`fold_in_users`'s
            ``user_items``; users unknown to the model are ignored, and an item without
            a known user gets zero factors (and bias).

        Returns
        -------
        self
            The model, with the new items appended and the known ones' rows replaced.

        Raises
        ------
        InputError
            As :meth:`fold_in_users`; the model is then unchanged.
        """
        return self._fold_in(item_users, "items")

    def _fold_in(self, interactions, side):
        import scipy.sparse as sp

        from ._foldin import fold_in

        check_is_fitted(self, "item_factors_")
        frame, _ = self._as_frame(interactions, None, need_rating=False)
        if hasattr(frame, "compute"):
            frame = frame.compute()
        users = side == "users"
        prefix = "user" if users else "item"
        where = "fold_in_users(user_items)" if users else "fold_in_items(item_users)"
        frame = self._integral_ids(frame, where)
        ids = pd.unique(frame[self.user_col if users else self.item_col].to_numpy())
        rows, other = fold_in(self, frame, list(ids), side=side)
        self._check_id_kinds(frame[self.user_col].to_numpy(), "user", where)  # (nothing written yet)
        self._check_id_kinds(frame[self.item_col].to_numpy(), "item", where)
        index = getattr(self, f"_{prefix}_index")
        codes = index.get_indexer(ids)
        new = codes < 0
        k = self.item_factors_.shape[1]
        factors, bias = f"{prefix}_factors_", f"{prefix}_bias_"
        # new arrays, not writes into the model's: a lazy recommend_all() made before keeps its values
        table = np.array(getattr(self, factors), copy=True)
        table[codes[~new]] = rows[~new, :k]
        setattr(self, factors, np.vstack([table, rows[new, :k]]))
        if hasattr(self, bias):
            b = np.array(getattr(self, bias), copy=True)
            b[codes[~new]] = rows[~new, k]
            setattr(self, bias, np.r_[b, rows[new, k]])
        # (stored before the pairs are marked seen: a model saved without the counts counted them)
        counts = self.item_counts_.copy()
        if not users:  # each item's bias now rests on its known users in item_users
            folded = np.array([len(o) for o in other], dtype=np.int64)
            counts[codes[~new]] = folded[~new]
            counts = np.r_[counts, folded[new]]
        self._item_counts = counts
        grown = index.append(pd.Index(ids[new]))
        setattr(self, f"_{prefix}_index", grown)
        setattr(self, f"{prefix}_ids_", np.asarray(grown))
        state = f"_{prefix}_state_"
        setattr(self, state, grow_state(getattr(self, state), int(new.sum()), self._optimizer()))
        codes[new] = np.arange(len(index), len(grown))
        mine = np.repeat(codes, [len(o) for o in other])
        theirs = np.concatenate(other + [np.zeros(0, np.int64)])
        u, i = (mine, theirs) if users else (theirs, mine)
        shape = (len(self.user_ids_), len(self.item_ids_))
        seen = sp.csr_matrix(self._seen, shape=self._seen.shape)
        seen.resize(shape)
        seen = seen + sp.csr_matrix((np.ones(u.size, dtype=np.int8), (u, i)), shape=shape)
        seen.data[:] = 1
        self._seen = seen
        return self

    def similar_items(self, items, k=10, candidates=None):
        """The ``k`` items whose factors have the highest cosine similarity to each item's
        (the item itself left out).

        A model whose factors are all zero (``factors_used_`` False: ``alpha="auto"``
        chose the bias model, or ``n_components=0``) has no cosines to rank by: the
        items are then ranked by how close their biases are to the item's, the scores
        being ``-abs(item_bias_[j] - item_bias_[i])`` (0: the same bias), with a
        :class:`~dask_dgd.exceptions.BiasOnlyWarning` where the model has factor
        columns (the popularity model of an implicit ``alpha="auto"`` fit: the
        closeness of ``log(1 + n_i)``); a model without item biases either raises
        :class:`ParameterError`.

        Parameters
        ----------
        items : array-like of item ids
            Items seen in ``fit``; an unknown one raises :class:`InputError`.
        k : int, default=10
        candidates : array-like of item ids or None, default=None
            Rank only these items (e.g. the ones with enough ratings for their factors
            to mean something); None: all items.

        Returns
        -------
        item_ids : numpy.ndarray of shape (n_items_asked, k)
        scores : numpy.ndarray of shape (n_items_asked, k)
            Cosine similarities (or, without factors, minus the biases' distance).

        Raises
        ------
        InputError
            For an unknown item or candidate, or no candidate other than the item.
        ParameterError
            For ``k <= 0``, or a model with neither factors nor item biases.
        """
        check_is_fitted(self, "item_factors_")
        k = self._check_k(k)
        _, codes = self._known(items, self._item_index, "item")
        pool = np.arange(len(self.item_ids_)) if candidates is None else np.unique(self._known(
            candidates, self._item_index, "candidate item")[1])
        # at most the candidates other than the item itself (for every asked item)
        k = min(k, pool.size - int(np.isin(codes, pool).any()))
        if k < 1:
            raise InputError("similar_items needs at least one candidate other than the item itself")
        if self.factors_used_:
            Q = self.item_factors_
            norms = np.linalg.norm(Q, axis=1)
            norms[norms == 0] = 1.0
            Qn = Q / norms[:, None]
            s = Qn[codes] @ Qn[pool].T
        elif hasattr(self, "item_bias_"):
            self._warn_bias_only("similar_items ranks the items by the closeness of their biases "
                                 "(scores: -|difference of the biases|), not by factor cosines")
            s = -np.abs(self.item_bias_[codes][:, None] - self.item_bias_[pool][None, :])
        else:
            raise ParameterError(
                f"{type(self).__name__} has neither factors (every item factor is exactly zero) nor item biases: "
                "similar_items has nothing to rank by; refit with n_components > 0 and a smaller alpha"
            )
        s[pool[None, :] == codes[:, None]] = -np.inf  # never the item itself
        top = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return self.item_ids_[pool[top]], np.take_along_axis(s, top, axis=1)

"""Serving a fitted recommender: predicted ratings or scores, top-k recommendations,
similar items."""

import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._backend import asarray_like, is_device_array, to_numpy
from .._engine.executor import is_dask_collection
from ..exceptions import InputError, ParameterError
from ._input import ids_preview, pairs_shape_error

__all__ = ["RecommenderMixin"]

#: Users scored at once by recommend (a users x items block of scores).
RECOMMEND_CHUNK = 1024


class RecommenderMixin:
    """``predict``, ``recommend`` and ``similar_items`` of the fitted factors."""

    def _codes(self, X):
        check_is_fitted(self, "item_factors_")
        frame, _ = self._as_frame(X, None, need_rating=False)
        return frame

    def _pair_scores(self, users, items):
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
        return out

    def _score_part(self, df):
        return self._pair_scores(df[self.user_col].to_numpy(), df[self.item_col].to_numpy())

    def _score_block(self, blocks):
        """Scores of a block of pairs (given as the list of its one column block), in the
        block's namespace and device."""
        (block,) = blocks
        pairs = to_numpy(block)
        return asarray_like(self._pair_scores(pairs[:, 0], pairs[:, 1]), block)

    def predict(self, X):
        """Predicted ratings (explicit) or scores (implicit) of (user, item) pairs.

        Unknown users or items fall back to what is known: the rating of an unknown user
        is ``global_mean_ + item_bias_`` (the item's bias model), of an unknown item
        ``global_mean_ + user_bias_``, of both ``global_mean_``; the implicit score of an
        unknown item is 0 and of an unknown user the item's bias (BPR) or 0 (wls).

        Parameters
        ----------
        X : DataFrame or array of shape (n, 2)
            (user, item) pairs, as in ``fit``.

        Returns
        -------
        numpy.ndarray of shape (n,), or a dask array for dask input
            For a dask array of pairs, each block of the result is in the namespace and
            on the device of the pairs' block (e.g. CuPy).
        """
        import dask.array as da

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

    def recommend(self, users, k=10, exclude_seen=True):
        """The ``k`` best-scored items for each user.

        Parameters
        ----------
        users : array-like of user ids
            Users seen in ``fit``; an unknown user raises :class:`InputError`.
        k : int, default=10
            Items per user (at most the number of items).
        exclude_seen : bool, default=True
            Leave out the items each user rated in ``fit``/``partial_fit``.  Slots past a
            user's last unseen item have the score ``-inf``.

        Returns
        -------
        item_ids : numpy.ndarray of shape (n_users, k)
        scores : numpy.ndarray of shape (n_users, k)
        """
        check_is_fitted(self, "item_factors_")
        k = min(self._check_k(k), len(self.item_ids_))
        _, codes = self._known(users, self._user_index, "user")
        item_bias = getattr(self, "item_bias_", np.zeros(len(self.item_ids_)))
        user_part = np.zeros(len(self.user_ids_))
        if hasattr(self, "user_bias_"):  # explicit: the scores are predicted ratings
            user_part = self.user_bias_ + self.global_mean_
        ids = np.empty((codes.size, k), dtype=np.int64)
        scores = np.empty((codes.size, k))
        for a in range(0, codes.size, RECOMMEND_CHUNK):
            c = codes[a : a + RECOMMEND_CHUNK]
            s = self.user_factors_[c] @ self.item_factors_.T + item_bias + user_part[c][:, None]
            if exclude_seen:
                seen = self._seen[c].tocoo()
                s[seen.row, seen.col] = -np.inf
            if k < s.shape[1]:
                top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            else:
                top = np.tile(np.arange(s.shape[1]), (len(c), 1))
            top_s = np.take_along_axis(s, top, axis=1)
            order = np.argsort(-top_s, axis=1, kind="stable")
            ids[a : a + len(c)] = np.take_along_axis(top, order, axis=1)
            scores[a : a + len(c)] = np.take_along_axis(top_s, order, axis=1)
        return self.item_ids_[ids], scores

    def similar_items(self, items, k=10, candidates=None):
        """The ``k`` items whose factors have the highest cosine similarity to each item's
        (the item itself left out).

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
        scores : numpy.ndarray of shape (n_items_asked, k), cosine similarities
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
        Q = self.item_factors_
        norms = np.linalg.norm(Q, axis=1)
        norms[norms == 0] = 1.0
        Qn = Q / norms[:, None]
        s = Qn[codes] @ Qn[pool].T
        s[pool[None, :] == codes[:, None]] = -np.inf  # never the item itself
        top = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return self.item_ids_[pool[top]], np.take_along_axis(s, top, axis=1)

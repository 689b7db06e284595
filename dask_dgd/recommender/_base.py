"""Shared machinery of the matrix-factorization estimators.

Ratings given as a dask array of (user, item) pairs (and ratings ``y``) whose blocks are
not NumPy, e.g. CuPy, are trained where the blocks are: the ids are mapped on the host
(through pandas, as for any input), and each shard keeps its ratings, its users' factors
and their optimizer state in the blocks' namespace and device (see
:mod:`dask_dgd._engine.factorization`).  The fitted attributes are NumPy either way: a
model fitted on a GPU predicts on the CPU; ``predict`` on dask pairs answers in the
namespace and on the device of each block.  DataFrames (pandas or dask) and in-memory
arrays are trained on the host.
"""

import numbers
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._backend import asarray_like, to_numpy
from .._engine.cluster import get_executor, is_dask_collection
from .._engine.factorization import (
    FactorModel,
    block_like,
    build_rating_shards,
    check_scan,
    export_users,
    frame_parts,
    init_rows,
    run_factorization,
    scan,
    shard_factor_init,
)
from .._engine.monitor import Monitor, communicated
from .._validation import ClientParamMixin, Interval, callbacks_like, client_is_a_client, validate_params
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ..optim import FirstOrderOptimizer, Schedule, get_optimizer

__all__ = ["FactorizationBase"]

_OPTIMIZERS = ("adam", "adagrad", "rmsprop", "sgd", "adamw")
#: Users scored at once by recommend (a users x items block of scores).
RECOMMEND_CHUNK = 1024


def _optimizer_like(value):
    """an optimizer name ('adam', 'adagrad', 'rmsprop', 'sgd', 'adamw') or a first-order optimizer object"""
    return (isinstance(value, str) and value in _OPTIMIZERS) or isinstance(value, FirstOrderOptimizer)



def _ids_preview(ids, limit=5):
    shown = ", ".join(repr(v) for v in np.asarray(ids).tolist()[:limit])
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return shown + more


def _host_blocks(a):
    """A dask array with NumPy blocks (a copy from the device per block if needed)."""
    return a.map_blocks(to_numpy, dtype=a.dtype, meta=np.empty((0,) * a.ndim, dtype=a.dtype))


def _pairs_shape_error(shape):
    return InputError(f"X must be a DataFrame or an (n, 2) array of (user, item) pairs; got shape {shape}")


def _id_index(uniques, what):
    """A sorted pd.Index of the distinct ids found in the partitions."""
    values = pd.unique(np.concatenate([np.asarray(u, dtype=object) for u in uniques])) if uniques else []
    try:
        index = pd.Index(values).sort_values()
    except TypeError as err:
        raise InputError(
            f"the {what} ids mix types that cannot be ordered ({err}); use one type (e.g. all str)"
        ) from err
    if index.dtype == object:
        inferred = pd.Index(list(index))  # ints stay ints when every id is an int
        index = inferred if inferred.dtype != object or not len(index) else index
    return index


class FactorizationBase(ClientParamMixin, BaseEstimator):
    """Matrix factorization trained by distributed gradient descent (base class)."""

    _kind = None  # "explicit", "bpr" or "wls"

    _common_constraints = {
        "n_components": [Interval(numbers.Integral, 1, None, "left")],
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        "optimizer": [_optimizer_like],
        "learning_rate": [None, Interval(numbers.Real, 0, None, "neither"), Schedule],
        "batch_size": [None, Interval(numbers.Integral, 1, None, "left")],
        "max_iter": [Interval(numbers.Integral, 1, None, "left")],
        "tol": [Interval(numbers.Real, 0, None, "left")],
        "init_scale": [Interval(numbers.Real, 0, None, "neither")],
        "user_col": [str],
        "item_col": [str],
        "n_shards": [None, Interval(numbers.Integral, 1, None, "left")],
        "max_time": [None, Interval(numbers.Real, 0, None, "neither")],
        "random_state": [None, Interval(numbers.Integral, 0, None, "left"), np.random.RandomState],
        "verbose": [Interval(numbers.Integral, 0, None, "left"), bool],
        "callbacks": [None, callbacks_like],
        "client": [None, client_is_a_client],
    }

    # ------------------------------------------------------------- input
    def _rating_col(self):
        return self.rating_col

    def _as_frame(self, X, y, *, need_rating):
        """``X`` (and ``y``) as a pandas or dask DataFrame with the configured columns."""
        import dask.array as da
        import dask.dataframe as dd

        ucol, icol, rcol = self.user_col, self.item_col, self._rating_col()
        ycol = rcol if rcol is not None else "rating"
        y_given = y is not None
        if isinstance(X, (pd.DataFrame, dd.DataFrame)):
            if y is not None and isinstance(X, dd.DataFrame):
                raise InputError(
                    "with a dask DataFrame, pass the ratings as one of its columns (rating_col=...), not as y: "
                    "a separate y cannot be matched to the rows by position"
                )
            frame = X
        elif isinstance(X, da.Array):
            if X.ndim != 2 or X.shape[1] != 2:
                raise _pairs_shape_error(X.shape)
            X = _host_blocks(X)  # the ids go through pandas
            if y is not None:
                if any(np.isnan(c) for c in X.chunks[0]):
                    X = X.compute_chunk_sizes()
                yv = _host_blocks(y) if isinstance(y, da.Array) else to_numpy(y)
                if yv.ndim == 1 and yv.shape[0] == X.shape[0] and not isinstance(yv, da.Array):
                    yv = da.from_array(yv, chunks=(X.chunks[0],))  # only once the lengths agree
                if yv.ndim != 1 or yv.shape[0] != X.shape[0]:
                    raise InputError(f"y must be 1-D with one value per row of X ({X.shape[0]}); got shape {yv.shape}")
                yv = yv.rechunk((X.chunks[0],))
                # the same row chunks: the two frames get the same index and divisions
                frame = dd.from_dask_array(X, columns=[ucol, icol]).assign(**{ycol: dd.from_dask_array(yv)})
                y = None
            else:
                frame = dd.from_dask_array(X, columns=[ucol, icol])
        else:
            arr = to_numpy(X)
            if arr.ndim != 2 or arr.shape[1] != 2:
                raise _pairs_shape_error(arr.shape)
            frame = pd.DataFrame({ucol: arr[:, 0], icol: arr[:, 1]})
        missing = [c for c in (ucol, icol) if c not in frame.columns]
        if missing:
            raise InputError(
                f"X has no column {missing[0]!r} (columns: {list(frame.columns)}); "
                "name the columns with user_col=..., item_col=..."
            )
        if y is not None:  # in-memory frame: y pairs with the rows by position
            yv = to_numpy(y)
            if yv.ndim != 1 or yv.shape[0] != len(frame):
                raise InputError(f"y must be 1-D with one value per row of X ({len(frame)}); got shape {yv.shape}")
            frame = frame.assign(**{ycol: yv})
        if y_given:
            rcol = ycol
        if need_rating:
            if rcol is None or rcol not in frame.columns:
                raise InputError(
                    f"the ratings have no column {rcol!r} (columns: {list(frame.columns)}); "
                    "pass y=... or name the column with rating_col=..."
                )
        if rcol is not None and rcol in frame.columns:
            dtype = frame[rcol].dtype
            if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
                raise InputError(f"the {rcol!r} column must be numeric; got dtype {frame[rcol].dtype}")
            cols = (ucol, icol, rcol)
        else:
            cols = (ucol, icol, None)
        keep = [c for c in cols if c is not None]
        return frame[keep], cols

    def _seed(self):
        rs = self.random_state
        if isinstance(rs, numbers.Integral):
            return int(rs)
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))

    #: learning rate of a named optimizer when ``learning_rate=None``
    _default_learning_rate = 0.05

    def _optimizer(self):
        """The optimizer: a name gets ``learning_rate`` (None: 0.05); an object keeps its
        own rate unless ``learning_rate`` is given."""
        opt = self.optimizer
        if isinstance(opt, str):
            rate = self._default_learning_rate if self.learning_rate is None else self.learning_rate
            return get_optimizer(opt).with_learning_rate(rate)
        return opt if self.learning_rate is None else opt.with_learning_rate(self.learning_rate)

    # --------------------------------------------------------------- fit
    def _validate(self):
        validate_params(self)

    def _model(self, mu, n_items, seed):
        alpha_bias = getattr(self, "alpha_bias", None)
        return FactorModel(
            kind=self._kind_now(),
            n_components=int(self.n_components),
            alpha=float(self.alpha),
            alpha_bias=float(self.alpha if alpha_bias is None else alpha_bias),
            confidence_scale=float(getattr(self, "confidence_scale", 0.0)),
            init_scale=float(self.init_scale),
            mu=float(mu),
            n_items=int(n_items),
            seed=seed,
        )

    def _kind_now(self):
        return self._kind

    def _train(self, X, y, *, continued):
        self._validate()
        frame, cols = self._as_frame(X, y, need_rating=self._kind_now() == "explicit")
        mem = 0 if is_dask_collection(frame) else int(frame.memory_usage(index=False).sum())
        executor = get_executor(self.client, frame, nbytes=mem)
        parts = frame_parts(executor, frame)
        facts = scan(executor, parts, cols)
        check_scan(facts, cols[2], self._kind_now())
        users = _id_index(facts["users"], "user")
        items = _id_index(facts["items"], "item")
        if continued:
            users = self._grow("user_ids_", users)
            items = self._grow("item_ids_", items)
            seed = self._seed_
            mu = getattr(self, "global_mean_", 0.0)
        else:
            seed = self._seed()
            mu = facts["rating_sum"] / facts["n"] if self._kind_now() == "explicit" else 0.0
        n_shards = self.n_shards or (len(executor.workers()) if executor.kind == "dask" else 1)
        like = block_like(executor, X, y)  # the namespace and device of dask-array blocks
        shards, loads = build_rating_shards(executor, parts, cols, users, items, n_shards, like)
        model = self._model(mu, len(items), seed)
        optimizer = self._optimizer()
        if continued:
            V, item_state, user_init, U_base, state_base = self._continue_from(model, optimizer, len(users), len(items))
        else:
            self._forget_fit()
            V = init_rows(seed + 1, np.arange(len(items)), model.item_width, model.init_scale, model.item_bias)
            item_state, user_init, U_base, state_base = optimizer.init(V), None, None, None
        n_batches = 1
        if self.batch_size is not None:
            n_batches = max(1, int(round(facts["n"] / self.batch_size)))
        max_iter = 1 if continued else self.max_iter
        monitor = Monitor(verbose=self.verbose, callbacks=self.callbacks, total=max_iter * n_batches,
                          desc=type(self).__name__)
        try:
            result = run_factorization(
                shards, model, optimizer, V, item_state, user_init=user_init, max_iter=max_iter,
                tol=self.tol, n_batches=n_batches, n_ratings=facts["n"], monitor=monitor,
                max_time=self.max_time,
            )
            U, user_states, seen_u, seen_i = export_users(shards, len(users), model.user_width, U_base)
        finally:
            monitor.close()
        self._store(model, users, items, U, result, _assemble_state(user_states, U.shape, state_base),
                    seen_u, seen_i, monitor.records, loads, continued)
        if not continued and result.stopped_by == "max_iter" and self.tol > 0:
            warnings.warn(
                f"{type(self).__name__} reached max_iter={self.max_iter} epochs before the objective "
                f"stopped improving by tol={self.tol}; raise max_iter or learning_rate",
                ConvergenceWarning,
                stacklevel=3,
            )
        elif result.stopped_by == "max_time":
            warnings.warn(f"{type(self).__name__} reached max_time={self.max_time} s", ConvergenceWarning, stacklevel=3)
        return self

    def _grow(self, attr, found):
        """The fitted ids followed by the new ones (in sorted order)."""
        old = pd.Index(getattr(self, attr))
        new = found[~found.isin(old)]
        return old.append(new) if len(new) else old

    def _continue_from(self, model, optimizer, n_users, n_items):
        """Item table, item state and user initialiser to continue training (partial_fit)."""
        V_old = self._item_table()
        extra = n_items - V_old.shape[0]
        V = np.vstack([V_old, init_rows(model.seed + 1, np.arange(V_old.shape[0], n_items), model.item_width,
                                        model.init_scale, model.item_bias)])
        item_state = _grow_state(self._item_state_, extra, optimizer)
        U_old = self._user_table()
        n_new = n_users - U_old.shape[0]
        U = np.vstack([U_old, init_rows(model.seed, np.arange(U_old.shape[0], n_users), model.user_width,
                                        model.init_scale, model.user_bias)])
        user_state = _grow_state(self._user_state_, n_new, optimizer)

        def user_init(shards):
            # each shard is sent only its own users' rows
            rows = [(U[users], _state_rows(user_state, users)) for users in shards.shard_users]
            shards.call_groups(shard_factor_init, model, optimizer, name="dgd-mf-init", per_group=rows)

        return V, item_state, user_init, U, user_state

    _FITTED = ("user_ids_", "item_ids_", "_user_index", "_item_index", "user_factors_", "item_factors_",
               "user_bias_", "item_bias_", "global_mean_", "_item_state_", "_user_state_", "_seen", "history_",
               "loss_curve_", "n_iter_", "shard_ratings_", "bytes_communicated_", "_seed_")

    def _forget_fit(self):
        """Drop what an earlier fit left (a refit with other settings starts clean)."""
        for name in self._FITTED:
            self.__dict__.pop(name, None)

    def _store(self, model, users, items, U, result, user_state, seen_u, seen_i, records, loads, continued):
        import scipy.sparse as sp

        k = model.n_components
        self._seed_ = model.seed
        self.user_ids_ = np.asarray(users)
        self.item_ids_ = np.asarray(items)
        self._user_index = pd.Index(users)
        self._item_index = pd.Index(items)
        self.user_factors_ = U[:, :k].copy()
        self.item_factors_ = result.V[:, :k].copy()
        if model.user_bias:
            self.user_bias_ = U[:, k].copy()
            self.global_mean_ = model.mu
        if model.item_bias:
            self.item_bias_ = result.V[:, k].copy()
        self._item_state_ = result.state
        self._user_state_ = user_state
        seen = sp.csr_matrix(
            (np.ones(seen_u.size, dtype=np.int8), (seen_u, seen_i)), shape=(len(users), len(items))
        )
        seen.sum_duplicates()
        if continued and hasattr(self, "_seen"):
            old = self._seen
            old = sp.csr_matrix((old.data, old.indices, old.indptr), shape=(old.shape[0], old.shape[1]))
            old.resize(seen.shape)
            seen = seen + old
        seen.data[:] = 1
        self._seen = seen
        history = pd.DataFrame.from_records(records)
        if continued and hasattr(self, "history_"):
            history = pd.concat([self.history_, history], ignore_index=True)
        self.history_ = history
        self.loss_curve_ = history["loss"].tolist() if len(history) else []
        self.n_iter_ = result.n_iter if not continued else getattr(self, "n_iter_", 0) + result.n_iter
        self.shard_ratings_ = np.asarray(loads)
        self.bytes_communicated_ = communicated(self.history_)

    def _item_table(self):
        cols = [self.item_factors_]
        if hasattr(self, "item_bias_"):
            cols.append(self.item_bias_[:, None])
        return np.hstack(cols)

    def _user_table(self):
        cols = [self.user_factors_]
        if hasattr(self, "user_bias_"):
            cols.append(self.user_bias_[:, None])
        return np.hstack(cols)

    def fit(self, X, y=None):
        """Fit the factors to the ratings.

        Parameters
        ----------
        X : pandas.DataFrame, dask.dataframe.DataFrame or array of shape (n, 2)
            The ratings: a frame with the ``user_col``, ``item_col`` (and ``rating_col``)
            columns, or (user, item) pairs with the ratings in ``y``.  Ids may be of any
            orderable type (str, int); they are mapped to dense indices on the cluster.
            A dask array of pairs whose blocks are CuPy (or another array-API
            namespace) trains on their device: the shards' ratings, user factors and
            optimizer states live there; the fitted attributes are NumPy.
        y : array-like of shape (n,), optional
            The ratings (or strengths), when not a column of ``X``.

        Returns
        -------
        self
        """
        return self._train(X, y, continued=False)

    def partial_fit(self, X, y=None):
        """One more epoch over new ratings, starting from the fitted factors.

        New users and items grow the model (their factors start from the seeded
        initialisation, biases at 0); the optimizer states of the fitted model carry on,
        and users without new ratings keep their factors and state unchanged.  New rows
        share the optimizer's step count, so with Adam their first moves are somewhat
        larger than a fresh fit's (its bias correction assumes moments collected since
        step 1).  The global mean of an explicit model stays that of the first fit.  On
        an unfitted model this is ``fit`` with one epoch.

        Returns
        -------
        self
        """
        if not hasattr(self, "item_factors_"):
            max_iter = self.max_iter
            self.max_iter = 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    return self._train(X, y, continued=False)
            finally:
                self.max_iter = max_iter
        return self._train(X, y, continued=True)

    # ----------------------------------------------------------- predict
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
                raise _pairs_shape_error(X.shape)
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
        if not isinstance(ids, np.ndarray) and hasattr(ids, "__array_namespace__"):
            ids = to_numpy(ids)  # ids on a device (CuPy...): looked up on the host
        if isinstance(ids, (str, bytes)) or np.ndim(ids) == 0:
            ids = [ids]  # one id, not a sequence of characters
        ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
        codes = index.get_indexer(ids)
        if np.any(codes < 0):
            unknown = ids[codes < 0]
            raise InputError(
                f"{unknown.size} {what}(s) were not seen in fit: {_ids_preview(unknown)}; "
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
            top = np.argpartition(-s, k - 1, axis=1)[:, :k] if k < s.shape[1] else np.tile(np.arange(s.shape[1]), (len(c), 1))
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


def _assemble_state(user_states, shape, base=None):
    """One optimizer state for the whole user table from each shard's state rows
    (written over ``base`` when continuing: users without new ratings keep theirs)."""
    if not user_states:
        return base
    first = user_states[0][1]
    fields = {}
    for name, value in first._asdict().items():
        if isinstance(value, np.ndarray) and value.ndim == 2:
            full = np.zeros(shape) if base is None else np.array(getattr(base, name), dtype=np.float64)
            for users, state in user_states:
                full[users] = getattr(state, name)
            fields[name] = full
        else:
            fields[name] = value
    return type(first)(**fields)


def _state_rows(state, users):
    """The rows of ``users`` in a whole-table optimizer state."""
    return type(state)(**{
        name: value[users] if isinstance(value, np.ndarray) and value.ndim == 2 else value
        for name, value in state._asdict().items()
    })


def _grow_state(state, extra, optimizer):
    """An optimizer state with ``extra`` more rows (in their initial state) for new
    users or items."""
    if extra <= 0:
        return state
    fields = {}
    for name, value in state._asdict().items():
        if isinstance(value, np.ndarray) and value.ndim == 2:
            fresh = getattr(optimizer.init(np.zeros((extra, value.shape[1]))), name)
            value = np.vstack([value, fresh])
        fields[name] = value
    return type(state)(**fields)

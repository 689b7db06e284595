"""The matrix-factorization estimators' shell over :func:`dask_dgd.train`.

Ratings given as a dask array of (user, item) pairs (and ratings ``y``) whose blocks are
not NumPy, e.g. CuPy, are trained where the blocks are: the ids are mapped on the host
(through pandas, as for any input), and each shard keeps its ratings, its users' factors
and their optimizer state in the blocks' namespace and device (see
:mod:`._objective`).  The fitted attributes are NumPy either way: a model fitted on a
GPU predicts on the CPU; ``predict`` on dask pairs answers in the namespace and on the
device of each block.  DataFrames (pandas or dask) and in-memory arrays are trained on
the host.
"""

import numbers
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from .._engine.runtime.checkpoint import stable_repr
from .._engine.runtime.executor import get_executor, is_dask_collection
from .._engine.train import seed_of, train
from .._params import MODES, RUNTIME, TRAINING_CONSTRAINTS, fingerprint_params, signature
from .._validation import (
    ClientParamMixin,
    Interval,
    Options,
    one_fit_at_a_time,
    user_stacklevel,
    validate_params,
)
from ..exceptions import BiasOnlyWarning, ConvergenceWarning
from ..optim import CosineDecay, FirstOrderOptimizer, Schedule, get_optimizer
from ._auto import MIN_GAIN, RANK_LADDER, VALIDATION_FRACTION, Setup, choose_alpha, path_in_tasks, refit_in_task
from ._foldin import model_of, new_user_rows
from ._input import as_frame, id_index
from ._objective import FactorizationTraining, FactorModel, grow_state, in_model_units
from ._serving import RecommenderMixin
from ._shards import (
    _Runner,
    block_like,
    build_rating_shards,
    check_model_fits,
    check_scale,
    check_scan,
    frame_parts,
    init_rows,
    is_device_like,
    merge_parts,
    residual_sums,
    scan,
)

__all__ = ["FactorizationBase"]

_OPTIMIZERS = ("adam", "adagrad", "rmsprop", "sgd", "adamw")
#: The penalty of ``partial_fit`` on an unfitted model with ``alpha="auto"``, and of
#: ``alpha="auto"`` when no rating can be held out (but BPR's: :data:`DEFAULT_ALPHA_BPR`).
DEFAULT_ALPHA = 0.1
#: :data:`DEFAULT_ALPHA` of ``loss="bpr"``: its held-out NDCG is best near 0.01 on
#: MovieLens-small and InstEval (wls's at 0.1 or 0.01; see
#: :data:`~dask_dgd.recommender._auto.IMPLICIT_GRID`).
DEFAULT_ALPHA_BPR = 0.01
#: The training pairs (evenly spaced) over which ``fit`` measures the factor term's size
#: (:meth:`FactorizationBase._check_factor_term`).
FACTOR_TERM_PAIRS = 1_000_000


def _optimizer_like(value):
    """an optimizer name ('adam', 'adagrad', 'rmsprop', 'sgd', 'adamw') or a first-order optimizer object"""
    return (isinstance(value, str) and value in _OPTIMIZERS) or isinstance(value, FirstOrderOptimizer)



def factorization_signature(*model, rating_col, n_components=10):
    """The ``__init__`` signature of a matrix factorization: the rank (its default
    ``n_components``), the model's own parameters (``(name, default)``), the solver, the
    columns and the training parameters (:mod:`dask_dgd._params`)."""
    return signature(
        ("n_components", n_components), *model, "solver", ("optimizer", "adam"), ("learning_rate", None), "batch_size",
        "max_iter", ("tol", 5e-4), ("init_scale", 0.1), ("user_col", "user"), ("item_col", "item"),
        ("rating_col", rating_col), ("n_shards", None), *MODES, *RUNTIME,
    )

class FactorizationBase(RecommenderMixin, ClientParamMixin, BaseEstimator):
    """Base class of matrix factorization trained by distributed gradient descent.

    Its subclasses (:class:`~dask_dgd.MatrixFactorization`,
    :class:`~dask_dgd.ImplicitMatrixFactorization`) share these training parameters and
    attributes.  The item table is trained like any model's parameters (its gradient
    reduced over the shards every step); the user factors are each shard's local
    parameters, updated where they live by the same optimizer.

    Parameters
    ----------
    solver : {"auto", "als", "gd"}, default="auto"
        "als": alternating least squares, for the least-squares objectives (explicit
        ratings, ``loss="wls"``): each iteration takes 3 conjugate-gradient steps on
        every user's system where the user lives, then 3 on the item systems, whose
        products with a direction are reduced like gradients
        (:mod:`dask_dgd._engine.solvers.als`); the same objective as "gd";
        synchronous, full batch, NumPy shards; ``optimizer``, ``learning_rate`` and
        ``on_divergence`` do not apply; ``max_iter`` counts iterations and the fit stops
        when one improved the objective by at most ``tol`` (relative, as below).
        "gd": gradient steps of ``optimizer``, in every mode, full or mini-batch;
        for explicit ratings the steps are taken in units of the ratings' standard
        deviation (factors over its square root, biases over it), so that Adam's and
        RMSprop's steps reach the same fit in any rating units.
        "auto": "als" for the models listed in the subclass where it applies (and
        neither ``learning_rate`` nor an optimizer other than the default was given:
        those ask for gradient steps), else "gd".
        ``partial_fit`` always takes gradient steps.
    optimizer : {"adam", "adagrad", "rmsprop", "sgd", "adamw"} or optimizer object, default="adam"
        Update rule, applied to the user factors on their shards and to the item
        factors (all are element-wise, so this is one optimizer on all parameters).
        L-BFGS is not offered: the user factors never leave their shards.
    learning_rate : float, Schedule or None, default=None
        Step size.  None: 0.05 for a named optimizer, an optimizer object's own rate;
        a synchronous BPR fit (``ImplicitMatrixFactorization(loss="bpr")``) with a
        named optimizer anneals that 0.05 to 0 over its steps (cosine) and runs its
        ``max_iter`` epochs: its objective is sampled, and ``tol`` would stop it on the
        noise.
    batch_size : int or None, default=None
        None: full-batch steps (every rating, every step).  An int: about
        ``n_ratings / batch_size`` steps per epoch, each on the ratings whose hashed key
        falls in that step's batch (the same batches however the data is sharded).
    max_iter : int, default=100
        Epochs (passes over the ratings).
    tol : float, default=5e-4
        Relative tolerance: stop when the epoch-mean objective has not improved by more
        than ``tol`` times its starting value for 5 epochs in a row (with a
        ConvergenceWarning if ``max_iter`` comes first); 0 runs exactly ``max_iter``
        epochs.  The starting value, known from the ratings before training, makes the
        rule independent of their units: explicit, the ratings' variance about their
        mean; BPR, log 2; wls, the mean confidence.  At the default, fits on generated
        power-law ratings (5,000 to 100,000 of them, noise 0.3 to 1.0) stop after 35 to
        70 epochs, inside the default ``max_iter=100``; ``tol=1e-4`` gains about 1-3%
        holdout RMSE for about 1.5 times the epochs.
    init_scale : float, default=0.1
        Standard deviation of the initial factors (biases start at 0), for explicit
        ratings times the fourth root of their variance (the square root of their
        standard deviation), so that the factors' products start at the same fraction
        of the ratings whatever their units: ratings in other units (times 1e4, 1e6)
        give the same fit in those units, a numeric ``alpha`` scaled with them too.
    user_col, item_col : str, default="user", "item"
        Column names of the user and item ids in DataFrame input.
    n_shards : int or None, default=None
        Shards of the ratings (partitioned by user, balanced by number of ratings).
        None: one per worker (one in process).
    mode : {"sync", "local", "async"}, default="sync"
        "sync": every step waits for all shards.  "local": each shard takes
        ``local_steps`` steps on its own ratings (its users and a copy of the item
        table), then the item tables are averaged.  "async": a parameter server
        updates the item table on every shard's gradient as it arrives; each shard
        updates its users after each of its steps.
    local_steps, outer_optimizer : see :class:`~dask_dgd.linear_model.DGDLinearModel`
        mode="local".
    max_staleness, staleness_scaling : see :class:`~dask_dgd.linear_model.DGDLinearModel`
        mode="async".
    max_time : float or None, default=None
        Stop after this many seconds (with a ConvergenceWarning).
    on_divergence : {"auto", "backoff", "raise"}, default="auto"
        A NaN/inf objective: "backoff" restores the last good item table and users (on
        their shards) and halves the learning rate; "raise" raises ``DivergenceError``
        naming the step and the remedy.  "auto": "backoff" with the default learning
        rate, "raise" when you chose one.
    checkpoint : str, path or None, default=None
        A folder for ``checkpoint.npz`` every ``checkpoint_every`` steps and at the end:
        the item table, its optimizer state, counters, history, and every shard's users
        (factors and optimizer state).  ``fit(X, resume=True)`` continues from it: exactly
        in the "sync" and "local" modes, to the same kind of solution in "async".
    checkpoint_every : int, default=10
        Steps (rounds, server updates) between checkpoints.
    compression : None, str or compressor object, default=None
        Compress each shard's item gradient (synchronous steps): "fp16", "bf16",
        "topk:RATIO", "randomk:RATIO", "qsgd:LEVELS", "sign", "powersgd:RANK" (the item
        gradient is a matrix), or an object from :mod:`dask_dgd.compression`.
    split_every : int or "auto", default=8
        Fan-in of the tree that adds the shards' item gradients.
    random_state : int, RandomState or None, default=None
        Seeds the initial factors and the batches (and BPR's negative items).
    verbose : int, default=0
        0 silent, 1 a progress bar, 2 also a log line per step.
    callbacks : list of callables or None, default=None
        Each is called with every step record; one returning ``True`` stops the fit
        (see :mod:`dask_dgd.callbacks`).
    client : distributed.Client or None, default=None
        The cluster to train on; None: the default client if any, else in process for
        small in-memory ratings, else an embedded LocalCluster.

    Attributes
    ----------
    user_ids_, item_ids_ : ndarray
        The ids seen in fit (and partial_fit), in the order of the factor rows.
    user_factors_ : ndarray of shape (n_users, k)
    item_factors_ : ndarray of shape (n_items, k)
        ``k`` is ``n_components_``.
    n_components_ : int
        The rank of the fitted factors: ``n_components``, or the one
        ``n_components="auto"`` chose (:class:`ImplicitMatrixFactorization`).
    factors_used_ : bool
        False when every item factor is exactly zero (``alpha="auto"`` refitted the
        bias model, or, implicit, fell back to popularity: ``item_bias_ = log(1 +
        n_i)``; or ``n_components=0``): ``recommend`` then ranks by the item
        biases (popularity) and ``similar_items`` by the biases' closeness, with a
        :class:`~dask_dgd.exceptions.BiasOnlyWarning` where the factors were asked
        for (``n_components > 0``; see those methods).  Factors that are not zero but
        too small to matter, fitted at a numeric ``alpha``, keep it True
        (``MatrixFactorization.fit`` warns instead: see its ``alpha``).
    n_iter_ : int
        Epochs run (iterations of alternating least squares).
    solver_ : str
        The solver of the last ``fit`` or ``partial_fit``: "als" or "gd".
    alpha_, alpha_bias_ : float
        The penalties of the fitted model.
    history_ : pandas.DataFrame
        One record per step (loss, grad_norm, step_time, compute times, bytes_up: the
        item-gradient bytes reduced, bytes_down: the item table sent, ...).
    loss_curve_ : list of float
    shard_ratings_ : ndarray
        Ratings per shard (the shards are balanced by ratings, not users).
    bytes_communicated_ : dict
        Totals of the bytes moved (see :func:`dask_dgd.communication_report`).
    """

    _kind = None  # "explicit", "bpr" or "wls"
    #: the kinds ``solver="auto"`` trains by alternating least squares
    _auto_als_kinds = ()
    #: the policies of the ``duplicates`` parameter (the default first)
    _duplicates_options: tuple[str, ...] = ()

    _common_constraints = {
        **TRAINING_CONSTRAINTS,
        "n_components": [Interval(numbers.Integral, 1, None, "left")],
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        "solver": [Options("auto", "als", "gd")],
        "optimizer": [_optimizer_like],
        "learning_rate": [None, Interval(numbers.Real, 0, None, "neither"), Schedule],
        "batch_size": [None, Interval(numbers.Integral, 1, None, "left")],
        "init_scale": [Interval(numbers.Real, 0, None, "neither")],
        "user_col": [str],
        "item_col": [str],
        "n_shards": [None, Interval(numbers.Integral, 1, None, "left")],
        "random_state": [None, Interval(numbers.Integral, 0, None, "left"), np.random.RandomState],
    }

    #: learning rate of a named optimizer when ``learning_rate=None``
    _default_learning_rate = 0.05

    def __sklearn_tags__(self):
        """scikit-learn's tags: the input is (user, item) id pairs, not a table of features.

        ``two_d_array=False`` tells ``check_estimator`` and ``parametrize_with_checks``
        not to feed random 2-D float arrays (they skip their data checks for such
        estimators, as for text vectorizers); the ids may be strings; the ratings may
        be a column of ``X``, so ``y`` is not required; asynchronous training is not
        deterministic.
        """
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.target_tags.required = False
        tags.non_deterministic = self.mode == "async"
        return tags

    def _rating_col(self):
        return self.rating_col

    def _declared_scale(self):
        """The ``(low, high)`` whose outside ratings ``fit``, ``partial_fit`` and fold-in
        refuse, or None (explicit models: a declared ``rating_scale``)."""
        return None

    def _scale_seen(self, facts, rating_col, continued):
        """The fitted attributes of the ratings' scale, from the scan's ``facts`` (a
        dict; explicit models: ``rating_scale_``)."""
        return {}

    def _as_frame(self, X, y, *, need_rating):
        return as_frame(self, X, y, need_rating=need_rating)

    def _kind_now(self):
        return self._kind

    def _anneals(self):
        """Whether a new fit's default rate is annealed (see :meth:`_optimizer`)."""
        return False

    def _default_alpha(self):
        """The penalty of ``alpha="auto"`` without a path: :data:`DEFAULT_ALPHA`, or
        :data:`DEFAULT_ALPHA_BPR` for ``loss="bpr"``."""
        return DEFAULT_ALPHA_BPR if self._kind_now() == "bpr" else DEFAULT_ALPHA

    def _optimizer(self, decay_steps=None):
        """The optimizer: a name gets ``learning_rate`` (None: 0.05, or with
        ``decay_steps``, 0.05 decayed to 0 over that many steps by a cosine); an object
        keeps its own rate unless ``learning_rate`` is given."""
        opt = self.optimizer
        if isinstance(opt, str):
            rate = self._default_learning_rate if self.learning_rate is None else self.learning_rate
            if decay_steps is not None and self.learning_rate is None:
                rate = CosineDecay(rate, decay_steps)
            return get_optimizer(opt).with_learning_rate(rate)
        return opt if self.learning_rate is None else opt.with_learning_rate(self.learning_rate)

    def _on_divergence(self):
        """"auto": back off with the default learning rate, raise with one you chose."""
        if self.on_divergence != "auto":
            return self.on_divergence
        chosen = self.learning_rate is not None or not isinstance(self.optimizer, str)
        return "raise" if chosen else "backoff"

    def _model(self, mu, n_items, seed, alpha, alpha_bias=None, n_components=None, variance=1.0, unit=1.0):
        """The model's settings (``alpha_bias`` None: the estimator's, else ``alpha``;
        ``n_components`` None: the fitted rank, see :meth:`_rank_now`; ``variance``: the
        ratings' (explicit: the factors start at ``init_scale`` times its fourth root,
        so that their products scale with the ratings' units); ``unit``: the unit of
        the engine's parameters, :meth:`_step_unit`)."""
        if alpha_bias is None:
            alpha_bias = getattr(self, "alpha_bias", None)
        kind = self._kind_now()
        init_scale = float(self.init_scale)
        if kind == "explicit" and np.isfinite(variance) and variance > 0:
            init_scale *= float(variance) ** 0.25
        return FactorModel(
            kind=kind, n_components=int(self._rank_now() if n_components is None else n_components),
            alpha=float(alpha), alpha_bias=float(alpha if alpha_bias is None else alpha_bias),
            confidence_scale=float(getattr(self, "confidence_scale", 0.0)), init_scale=init_scale,
            mu=float(mu), n_items=int(n_items), seed=seed, unit=float(unit),
        )

    def _bias_penalty_of(self, alpha, variance):
        """The biases' penalty of a fit at the factors' ``alpha`` when ``alpha_bias`` is
        None and no path chose one: explicit ratings, ``alpha`` divided by the ratings'
        standard deviation (``variance``'s root).  ``alpha`` is in the ratings' units
        (the factors' penalty, on products of two factors, weighs against squared
        errors as ``alpha / sd``: ratings times 1e4 want ``alpha`` times 1e4), while a
        bias's penalty is a count of ratings whatever their units; so the biases are
        shrunk as strongly, relative to the ratings, as the factors, and ratings in
        other units with ``alpha`` scaled give the same fit.  Implicit feedback:
        ``alpha`` itself (its confidences and preferences have no units).  The
        estimator's ``alpha_bias`` when given."""
        if getattr(self, "alpha_bias", None) is not None:
            return float(self.alpha_bias)  # type: ignore[attr-defined]  # (the estimators that have one)
        if self._kind_now() != "explicit" or not (np.isfinite(variance) and variance > 0):
            return float(alpha)
        return float(alpha) / float(np.sqrt(variance))

    def _step_unit(self, solver, variance, continued):
        """The unit of the parameters gradient steps train (``FactorModel.unit``):
        explicit ratings, the ratings' standard deviation (``variance``'s root; a
        continued fit: its model's, :attr:`_step_unit_`, the unit its optimizer state
        is in; 1 for a model saved before the unit existed), so that the steps reach the
        same fit in any rating units; alternating least squares and implicit feedback: 1."""
        if self._kind_now() != "explicit" or solver == "als":
            return 1.0
        if continued:
            return float(getattr(self, "_step_unit_", 1.0))
        return float(np.sqrt(variance)) if np.isfinite(variance) and variance > 0 else 1.0

    def _rank_now(self, fitted=True):
        """The rank of the factors: the fitted ``n_components_`` (``fitted`` and fitted),
        else ``n_components``, or for ``"auto"`` the largest rank it tries
        (:data:`~._auto.RANK_LADDER`: what a new fit's tables may take)."""
        if fitted and hasattr(self, "n_components_"):
            return int(self.n_components_)
        return max(RANK_LADDER) if self.n_components == "auto" else int(self.n_components)

    # --------------------------------------------------------------- fit
    def _train(self, X, y, *, continued, resume=False, check_factors=False):
        validate_params(self)
        if self.checkpoint is not None and not continued and not isinstance(self.random_state, numbers.Integral):
            from ..exceptions import ParameterError

            raise ParameterError(
                "a checkpoint of a matrix factorization needs an int random_state: its seed shapes the "
                "initial factors and the batches, and a resumed fit must draw the same ones"
            )
        frame, cols = self._as_frame(X, y, need_rating=self._kind_now() == "explicit")
        self._say_unused_ratings(X, cols)
        mem = 0 if is_dask_collection(frame) else int(frame.memory_usage(index=False).sum())
        executor = get_executor(self.client, frame, nbytes=mem)
        parts = frame_parts(executor, frame)
        facts = scan(executor, parts, cols, digest=self.checkpoint is not None and not continued)
        check_scan(facts, cols[2], self._kind_now())
        check_scale(facts, cols[2], self._declared_scale(), "fitting")
        scale_seen = self._scale_seen(facts, cols[2], continued)  # (rating_scale="auto": warns of far ratings)
        users, items = id_index(facts["users"], "user"), id_index(facts["items"], "item")
        parts, n_merged = merge_parts(executor, parts, cols, self.duplicates, users, facts["users"], items)
        if n_merged:  # (refused, or said) and the counts and sums of the merged ratings
            self._merged_duplicates(n_merged, cols, frame=hasattr(X, "columns"))
            facts = scan(executor, parts, cols, digest=self.checkpoint is not None and not continued)
        if continued:
            users, items = self._grow("user_ids_", users), self._grow("item_ids_", items)
            seed, mu = self._seed_, getattr(self, "global_mean_", 0.0)
        else:
            seed = seed_of(self.random_state)[0]
            mu = facts["rating_sum"] / facts["n"] if self._kind_now() == "explicit" else 0.0
        n_shards = self.n_shards or (len(executor.workers()) if executor.kind == "dask" else 1)
        like = block_like(executor, X, y)  # the namespace and device of dask-array blocks
        n_batches = 1 if self.batch_size is None else max(1, int(round(facts["n"] / self.batch_size)))
        solver = "gd" if continued else self._solver(like, facts)
        scale = self._objective_scale(facts, cols[2])
        max_iter, tol, path = (1 if continued else self.max_iter), self.tol * scale, None
        anneal = not continued and self._anneals()
        # annealed: the rate decays to 0 over the fit's steps, which run in full
        optimizer = self._optimizer(decay_steps=max_iter * n_batches if anneal else None)
        # the factor tables fit in memory (the penalty does not matter to their size)
        rank = self._rank_now(fitted=continued)
        check_model_fits(type(self).__name__, len(users), len(items),
                         self._model(mu, len(items), seed, alpha=0.0, n_components=rank),
                         None if solver == "als" else optimizer, in_process=executor.kind != "dask")
        alpha = self._alpha_now(continued)
        factors = True  # (False: alpha="auto" found no factors that beat the bias model)
        alpha_bias = getattr(self, "alpha_bias_", None) if continued else None
        if alpha == "auto":  # the penalty and the epochs chosen on held-out ratings, then refitted on all
            # (ratings so large that their variance overflows: the first fit of the path stops
            # with the documented DivergenceError)
            setup = Setup(executor, parts, cols, users, items, n_shards, like, mu, seed, n_batches,
                          scale if np.isfinite(scale) else 1.0)
            setup.in_tasks = path_in_tasks(setup, facts["n"])
            alpha, alpha_bias, epochs, path, path_history, factors, rank = choose_alpha(self, setup, solver,
                                                                                        optimizer)
            if alpha is None:
                alpha, path = self._default_alpha(), None
                what = "rating" if self._kind_now() == "explicit" else "interaction"
                n, n_users = int(facts["n"]), len(users)
                why = f"every user has a single {what}" if n <= n_users else (
                    f"{VALIDATION_FRACTION:.0%} of each user's {what}s beyond one are held out, chosen by a seeded "
                    f"hash of each pair, and none of these {n} {what}s of {n_users} users was")
                warnings.warn(f"{type(self).__name__}: no {what} could be held out to choose alpha ({why}); "
                              f"alpha='auto' used alpha={alpha}; give a numeric alpha, or fit on more {what}s per "
                              "user", UserWarning, stacklevel=user_stacklevel())
            else:
                if solver != "als" and self._kind_now() == "explicit":
                    # gradient steps: the epochs validated on the held-out ratings (an
                    # implicit path's fits, and so its refit, run as a numeric-alpha fit:
                    # to tol, or annealed BPR's max_iter epochs)
                    max_iter, tol = epochs, 0.0
                path = (path, path_history)
        # an implicit model whose factors did not beat popularity on the held-out pairs
        # falls back to it: no refit, only one iteration at the top of the path for the
        # model's bookkeeping (ids, seen pairs, shards), whose factors are then zeroed
        popular = not factors and self._kind_now() != "explicit"
        if popular:
            max_iter, tol = 1, 0.0
        if alpha_bias is None:
            alpha_bias = self._bias_penalty_of(alpha, scale)
        model = self._model(mu, len(items), seed, alpha=alpha, alpha_bias=alpha_bias,
                            n_components=rank if factors or popular else 0, variance=scale,
                            unit=self._step_unit(solver, scale, continued))
        # a small refit after a path in tasks: one task too (what runs in the caller's
        # process, callbacks, checkpoints and progress output, keeps it on the cluster)
        in_task = path is not None and setup.in_tasks and self.mode == "sync" and self.callbacks is None \
            and self.checkpoint is None and not self.verbose
        if not in_task:
            shards, loads = build_rating_shards(executor, parts, cols, users, items, n_shards, like)
            shards.totals = {"ratings": int(facts["n"]), "rating_sum": f"{facts['rating_sum']:.10g}",
                             "users": len(users), "items": len(items)}
            if "digest" in facts:  # the ratings themselves, whatever their order or partitions
                shards.totals["ratings digest"] = facts["digest"]
        if continued:
            V, item_state, inits, U_base, state_base = self._continue_from(model, optimizer, shards)
        else:
            self._forget_fit()
            V = init_rows(seed + 1, np.arange(len(items)), model.item_width, model.init_scale, model.item_bias)
            item_state = inits = U_base = state_base = None
        train_args = dict(
            solver=solver, optimizer=None if solver == "als" else optimizer, max_iter=max_iter,
            tol=tol, n_iter_no_change=max_iter + 1 if anneal else 5, mode=self.mode, local_steps=self.local_steps,
            outer_optimizer=self.outer_optimizer,
            max_staleness=self.max_staleness, staleness_scaling=self.staleness_scaling, max_time=self.max_time,
            on_divergence=self._on_divergence(), checkpoint=None if continued else self.checkpoint,
            checkpoint_every=self.checkpoint_every, resume=resume, fingerprint=self._fingerprint(alpha, model.unit),
            compression=self.compression, split_every=self.split_every, random_state=seed,
            params0=model.to_engine(V, "item").ravel(), opt_state=_flat_state(item_state), local_init=inits,
            verbose=self.verbose,
            callbacks=self.callbacks, progress_total=max_iter, progress_desc=type(self).__name__,
        )
        if in_task:
            result, loads = refit_in_task(setup, FactorizationTraining(model, n_batches), train_args)
        else:
            result = train(FactorizationTraining(model, n_batches), shards, **train_args, client=self.client)
        result = in_model_units(model, result)
        U, user_states, seen_u, seen_i = _assemble_users(result.local, len(users), model.user_width, U_base,
                                                         optimizer)
        self._store(model, users, items, U, result, _assemble_state(user_states, U.shape, state_base),
                    seen_u, seen_i, loads, continued, path)
        self.n_duplicates_ = n_merged
        self.n_components_ = int(rank)
        if not continued:  # the unit of a later partial_fit's steps (the one its optimizer state is in)
            self._step_unit_ = self._step_unit("gd", scale, False)
        if popular:
            self._fall_back_to_popularity(self._item_counts)
        elif not factors:
            self._zero_factors(optimizer)
        if check_factors:
            self._check_factor_term(scale)
        if self._kind_now() == "explicit" and not continued:
            self.residual_std_ = self._residual_std(executor, parts, cols, path)
            if solver != "als":
                self._warn_if_no_better_than_the_mean(scale, path is not None)
        for name, value in scale_seen.items():
            setattr(self, name, value)
        rise = None if continued or popular else result.objective_rise()
        if rise is not None:
            warnings.warn(
                f"{type(self).__name__}: the objective rose from {rise[0]:.6g} at the start to {rise[1]:.6g}; the "
                "learning rate is too large for these data: lower learning_rate",
                ConvergenceWarning, stacklevel=user_stacklevel(),
            )
        elif not result.converged:
            if result.message.startswith("reached max_time"):
                warnings.warn(f"{type(self).__name__} {result.message}", ConvergenceWarning,
                stacklevel=user_stacklevel())
            elif (not continued and not anneal and not popular and self.tol > 0
                  and (path is None or solver == "als" or self._kind_now() != "explicit")):
                # (an annealed fit runs its max_iter by design)
                what, remedy = ("iterations", "max_iter") if solver == "als" else \
                    ("epochs", "max_iter or learning_rate")
                warnings.warn(
                    f"{type(self).__name__} reached max_iter={self.max_iter} {what} before the objective "
                    f"stopped improving by tol={self.tol}; raise {remedy}",
                    ConvergenceWarning, stacklevel=user_stacklevel(),
                )
        return self

    def _warn_if_no_better_than_the_mean(self, variance, held_out):
        """A gradient-step fit of explicit ratings whose RMSE (``residual_std_``) is within
        1% of the ratings' standard deviation (the global mean's) warns: its steps did not
        reach the users' and items' effects (too few, too small: plain SGD's and
        Adagrad's steps also scale with the gradient), or there are none."""
        sd = float(np.sqrt(variance)) if np.isfinite(variance) and variance > 0 else 0.0
        if sd == 0.0 or not self.residual_std_ >= 0.99 * sd:
            return
        warnings.warn(
            f"{type(self).__name__}: the fit's {'held-out' if held_out else 'training'} RMSE, "
            f"{self.residual_std_:.4g}, is no better than predicting the ratings' mean (their standard deviation "
            f"{sd:.4g}): the ratings carry no user or item effects, or the gradient steps did not reach them; "
            "raise learning_rate or max_iter, use optimizer='adam' (its steps do not depend on the ratings' units), "
            "or solver='als' (synchronous full-batch fits)",
            ConvergenceWarning, stacklevel=user_stacklevel(),
        )

    def _residual_std(self, executor, parts, cols, path):
        """The residual standard deviation of an explicit model's ratings: with
        ``alpha="auto"`` the held-out RMSE of the chosen row of the validation path,
        else the RMS of the training residuals over the ratings it trained on (``parts``:
        the partitions with duplicates merged), one task per partition where it lives
        (through ``executor``, as the scan), each sending back two numbers."""
        if path is not None:
            chosen = path[0].loc[path[0]["chosen"], "val_rmse"]
            if len(chosen) and np.isfinite(chosen.iloc[0]):
                return float(chosen.iloc[0])
        run = _Runner(executor)
        scorer = run.scatter(self._scorer())
        sums = run.gather([run.submit(residual_sums, p, *cols, scorer, name="dgd-mf-residual") for p in parts])
        sq, n = sum(s for s, _ in sums), sum(n for _, n in sums)
        return float(np.sqrt(sq / max(int(n), 1)))

    def _scorer(self):
        """A copy of this fitted model that holds only what ``_pair_scores`` reads (no
        client, no callbacks): cheap to send to the workers."""
        view = object.__new__(type(self))
        keep = ("_user_index", "_item_index", "user_factors_", "item_factors_", "item_bias_", "user_bias_",
                "global_mean_")
        view.__dict__.update({k: self.__dict__[k] for k in keep if k in self.__dict__})
        return view

    def _say_unused_ratings(self, X, cols):
        """Warn of ratings given to the fit that it does not use (implicit models)."""

    def _merged_duplicates(self, n_merged, cols, doing="fitting", arg="X", frame=True):
        """Rows of a (user, item) pair given more than once, merged by the
        ``duplicates`` policy: refused with "raise" (the fix named for the argument
        ``arg`` the caller was given: a DataFrame, or with ``frame=False`` an array of
        pairs with its ratings in ``y``), else said with a
        :class:`~dask_dgd.exceptions.DuplicateRatingsWarning` for explicit ratings (a
        rating given twice is a mistake, or a change of mind); implicit feedback
        repeats events as a rule, so its merges are said by ``n_duplicates_`` alone."""
        from ..exceptions import DuplicateRatingsWarning, InputError

        rows = f"{n_merged} rows repeat" if n_merged != 1 else "1 row repeats"
        rows += f" the ({self.user_col!r}, {self.item_col!r}) pair of an earlier row"
        if self.duplicates == "raise":
            if frame:
                how = f"(e.g. {arg}.drop_duplicates([{self.user_col!r}, {self.item_col!r}], keep='last'))"
            else:
                how = f"(drop the rows of {arg} that repeat an earlier row's (user, item) pair, and their values of y)"
            raise InputError(
                f"{rows} (duplicates='raise'); drop or merge them before {doing} {how}, or let "
                f"{type(self).__name__} merge them: duplicates={self._merge_options()}"
            )
        if self._kind_now() not in ("explicit",):
            return
        what = f"their {cols[2]!r} values" if cols[2] is not None else "them"
        warnings.warn(
            f"{type(self).__name__}: {rows}; merged {what} into one per pair by duplicates={self.duplicates!r} "
            f"while {doing}; choose another policy with duplicates={self._merge_options()}, or drop the "
            "repeated rows first",
            DuplicateRatingsWarning, stacklevel=user_stacklevel(),
        )

    def _merge_options(self):
        """The other policies, in words ("'last' or 'raise'")."""
        return " or ".join(repr(v) for v in self._duplicates_options if v != self.duplicates)

    def _solver(self, like, facts):
        """The solver of a new fit: ``"auto"`` takes alternating least squares where it
        applies (a least-squares objective, synchronous full-batch steps without
        compression, NumPy shards, ratings whose squares do not overflow: the normal
        equations square the confidences), else gradient steps."""
        if is_device_like(like):
            if self.solver == "als":
                from ..exceptions import ParameterError

                raise ParameterError(
                    "solver='als' runs on NumPy shards; the ratings' blocks are of another array namespace "
                    "(e.g. CuPy): use solver='gd' (or 'auto') to train on their device"
                )
            return "gd"
        if self.solver == "als" and self.batch_size is not None:
            from ..exceptions import ParameterError

            raise ParameterError("solver='als' is full-batch only; drop batch_size")
        if self.solver != "auto":
            return self.solver
        quadratic = self._kind_now() in self._auto_als_kinds
        sync_full = self.mode == "sync" and self.batch_size is None and self.compression is None \
            and np.isfinite(facts["rating_sq_sum"])
        steps_asked = self.learning_rate is not None or not (isinstance(self.optimizer, str)
                                                             and self.optimizer == "adam")
        return "als" if quadratic and sync_full and not steps_asked else "gd"

    def _objective_scale(self, facts, rating_col):
        """The objective's value at the start (factors near 0, biases 0), from the scan:
        ``tol`` is relative to it, so the stopping rule does not depend on the ratings'
        units.  Explicit: the ratings' variance about their mean (1 if they are all
        equal); BPR: log 2; wls: the mean confidence ``1 + confidence_scale * strength``."""
        kind, n = self._kind_now(), max(int(facts["n"]), 1)
        if kind == "bpr":
            return float(np.log(2.0))
        mean = facts["rating_sum"] / n
        if kind == "wls":
            strength = mean if rating_col is not None else 1.0
            return 1.0 + float(self.confidence_scale) * strength
        variance = facts["rating_sq_sum"] / n - mean * mean
        return float(variance) if variance > 1e-12 * max(1.0, mean * mean) else 1.0

    def _alpha_now(self, continued):
        """The penalty of this fit: ``alpha`` ("auto" on a new fit), or, to continue
        (``partial_fit`` of a fitted model), the fitted ``alpha_``."""
        if self.alpha != "auto":
            return float(self.alpha)
        return self.alpha_ if continued else "auto"

    def _fingerprint(self, alpha, unit=1.0):
        """What a checkpoint's fit must share with this one: the estimator, the penalty,
        the parameters, and ``unit``, the coordinates its saved parameters are in
        (``FactorModel.unit``; a checkpoint written before gradient steps had a unit has
        none, and is refused rather than read in the wrong coordinates)."""
        unit = {} if unit == 1.0 else {"unit": f"{unit:.10g}"}
        return {"estimator": type(self).__name__, "alpha": f"{alpha:.10g}", **unit,  # (sums in another order)
                **{f"parameter {k}": stable_repr(v)
                   for k, v in sorted(fingerprint_params(self.get_params(deep=False)).items())}}

    def _grow(self, attr, found):
        """The fitted ids followed by the new ones (in sorted order)."""
        old = pd.Index(getattr(self, attr))
        new = found[~found.isin(old)]
        return old.append(new) if len(new) else old

    def _continue_from(self, model, optimizer, shards):
        """Item table, item state and each shard's users to continue training (partial_fit)."""
        n_users, n_items = shards.totals["users"], shards.totals["items"]
        V_old = self._item_table()
        extra = n_items - V_old.shape[0]
        V = np.vstack([V_old, init_rows(model.seed + 1, np.arange(V_old.shape[0], n_items), model.item_width,
                                        model.init_scale, model.item_bias)])
        item_state = grow_state(self._item_state_, extra, optimizer)
        U_old = self._user_table()
        U = np.vstack([U_old, init_rows(model.seed, np.arange(U_old.shape[0], n_users), model.user_width,
                                        model.init_scale, model.user_bias)])
        if n_users > U_old.shape[0]:  # new users start folded in from their ratings, computed where they live
            for idx, rows in shards.map_gather(new_user_rows, model_of(self), V_old, U_old.shape[0], V_old.shape[0],
                                               name="dgd-mf-fold-in"):
                U[idx] = rows
        user_state = grow_state(self._user_state_, n_users - U_old.shape[0], optimizer)
        # each shard is sent only its own users' rows
        inits = [(U[users], _state_rows(user_state, users)) for users in shards.group_meta]
        return V, item_state, inits, U, user_state

    _FITTED = ("user_ids_", "item_ids_", "_user_index", "_item_index", "user_factors_", "item_factors_",
               "user_bias_", "item_bias_", "global_mean_", "_item_state_", "_user_state_", "_seen", "history_",
               "loss_curve_", "n_iter_", "solver_", "shard_ratings_", "bytes_communicated_", "_seed_", "alpha_",
               "alpha_bias_", "validation_path_", "residual_std_", "n_duplicates_", "_item_counts",
               "rating_scale_", "n_components_", "_step_unit_")

    def _forget_fit(self):
        """Drop what an earlier fit left (a refit with other settings starts clean)."""
        for name in self._FITTED:
            self.__dict__.pop(name, None)

    def _store(self, model, users, items, U, result, user_state, seen_u, seen_i, loads, continued, path):
        import scipy.sparse as sp

        if not continued:
            self.alpha_, self.alpha_bias_ = model.alpha, model.alpha_bias
            self.validation_path_ = None if path is None else path[0]

        k = model.n_components
        V = result.params.reshape(model.n_items, model.item_width)
        self._seed_ = model.seed
        self.user_ids_, self.item_ids_ = np.asarray(users), np.asarray(items)
        self._user_index, self._item_index = pd.Index(users), pd.Index(items)
        self.user_factors_ = U[:, :k].copy()
        self.item_factors_ = V[:, :k].copy()
        if model.user_bias:
            self.user_bias_ = U[:, k].copy()
            self.global_mean_ = model.mu
        if model.item_bias:
            self.item_bias_ = V[:, k].copy()
        self._item_state_ = _table_state(result.opt_state, V.shape)
        self._user_state_ = user_state
        seen = sp.csr_matrix((np.ones(seen_u.size, dtype=np.int8), (seen_u, seen_i)), shape=(len(users), len(items)))
        seen.sum_duplicates()
        # the ratings behind each item's bias (item_counts_): the merged ones of this fit, plus
        # the model's own with partial_fit
        counts = np.bincount(np.asarray(seen_i, dtype=np.int64), minlength=len(items))
        if continued and hasattr(self, "_seen"):
            counts[:len(self.item_counts_)] += self.item_counts_
            old = self._seen
            old = sp.csr_matrix((old.data, old.indices, old.indptr), shape=(old.shape[0], old.shape[1]))
            old.resize(seen.shape)
            seen = seen + old
        seen.data[:] = 1
        self._seen = seen
        self._item_counts = counts
        history = result.history
        if path is not None:  # the validation path's records, then the refit's
            refit = history.assign(stage="refit", alpha=model.alpha, alpha_bias=model.alpha_bias)
            history = pd.concat([path[1], refit], ignore_index=True)
            # object, not a chunked Arrow string column: its dask token changed when pickled
            history["stage"] = history["stage"].astype(object)
        if continued and hasattr(self, "history_"):
            history = pd.concat([self.history_, history], ignore_index=True)
        self.history_ = history
        final = history[history["stage"] != "validation"] if "stage" in history else history
        self.loss_curve_ = final["loss"].tolist() if len(final) else []
        self.n_iter_ = result.n_iter if not continued else getattr(self, "n_iter_", 0) + result.n_iter
        self.solver_ = result.solver
        self.shard_ratings_ = np.asarray(loads)
        from .._engine.runtime.monitor import communicated

        self.bytes_communicated_ = communicated(self.history_)

    def _zero_factors(self, optimizer):
        """The bias model refitted by ``alpha="auto"`` (no factors beat it on the held-out
        ratings) as a model of ``n_components`` factors, all exactly zero (their
        optimizer state fresh, before the biases' column)."""
        k = self._rank_now()
        self.user_factors_ = np.zeros((len(self.user_ids_), k))
        self.item_factors_ = np.zeros((len(self.item_ids_), k))
        for name in ("_item_state_", "_user_state_"):
            setattr(self, name, grow_state(getattr(self, name), k, optimizer, columns=True))

    def _fall_back_to_popularity(self, counts):
        """Turn this fitted implicit model into the popularity model (``alpha="auto"``
        found no factors that rank the held-out pairs better than popularity): every
        factor exactly zero (``factors_used_`` False) and ``item_bias_ = log(1 + n_i)``,
        ``n_i`` = ``counts[i]``, the item's interactions in the training data (wls too,
        which has no item biases otherwise); ``item_counts_`` become ``counts``.
        ``recommend`` then ranks every user's unseen items by popularity (ties by item
        index), with a :class:`~dask_dgd.exceptions.BiasOnlyWarning`; fold-in gives
        users zero factors and items the bias of their known users' count;
        ``partial_fit`` refuses the model (it has no factors to train on)."""
        from ..exceptions import InputError

        counts = np.asarray(counts)
        n_items = len(self.item_ids_)
        if counts.shape != (n_items,) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise InputError(f"the popularity counts must be {n_items} integers >= 0, one per item (in the order of "
                             f"item_ids_); got an array of dtype {counts.dtype} and shape {counts.shape}")
        self.user_factors_ = np.zeros_like(self.user_factors_, dtype=np.float64)
        self.item_factors_ = np.zeros_like(self.item_factors_, dtype=np.float64)
        self.item_bias_ = np.log1p(counts.astype(np.float64))
        self._item_counts = counts.astype(np.int64)

    def _factor_term_rms(self):
        """The root-mean-square of the factor term ``p_u . q_i`` over the training pairs
        (the seen pairs; at most :data:`FACTOR_TERM_PAIRS` of them, evenly spaced)."""
        seen = self._seen
        idx = np.unique(np.linspace(0, seen.nnz - 1, min(seen.nnz, FACTOR_TERM_PAIRS)).astype(np.int64))
        rows = np.searchsorted(seen.indptr, idx, side="right") - 1
        total = 0.0
        for at in range(0, idx.size, 1 << 16):  # (a block of pairs at a time: k may be large)
            part = slice(at, at + (1 << 16))
            term = np.einsum("ij,ij->i", self.user_factors_[rows[part]], self.item_factors_[seen.indices[idx[part]]])
            total += float(term @ term)
        return float(np.sqrt(total / max(idx.size, 1)))

    def _check_factor_term(self, variance):
        """After ``fit`` with a numeric ``alpha`` (explicit ratings, ``n_components > 0``):
        warn when the factors carry nothing, the mean square of their term ``p_u . q_i``
        over the training ratings below :data:`~._auto.MIN_GAIN` times the ratings'
        ``variance`` (the share of the variance they could at most account for; the rule
        of ``alpha="auto"``).  The factors are kept as fitted (``factors_used_`` True):
        the penalty was the user's choice."""
        if self._kind_now() != "explicit" or self.alpha == "auto" or self.item_factors_.shape[1] == 0 \
                or not np.isfinite(variance) or variance <= 0:
            return
        rms = self._factor_term_rms()
        if rms * rms >= MIN_GAIN * variance:
            return
        warnings.warn(
            f"{type(self).__name__}(alpha={self.alpha!r}): the factors carry nothing: their term p_u . q_i has a "
            f"root-mean-square of {rms:.3g} over the training ratings, {rms / np.sqrt(variance):.3g} times the "
            f"ratings' standard deviation (below {np.sqrt(MIN_GAIN):.3g}: at most {MIN_GAIN:.1%} of their variance), "
            f"so predict and recommend are in effect the bias model's (alpha_bias_={self.alpha_bias_:g}) and the "
            "cosines of similar_items are noise; lower alpha, or use alpha='auto' to choose it on held-out ratings",
            BiasOnlyWarning, stacklevel=user_stacklevel(),
        )

    def _item_table(self):
        cols = [self.item_factors_] + ([self.item_bias_[:, None]] if hasattr(self, "item_bias_") else [])
        return np.hstack(cols)

    def _user_table(self):
        cols = [self.user_factors_] + ([self.user_bias_[:, None]] if hasattr(self, "user_bias_") else [])
        return np.hstack(cols)

    @one_fit_at_a_time
    def fit(self, X, y=None, resume=False):
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
        resume : bool, default=False
            Continue from the checkpoint in the ``checkpoint`` folder (written by an
            interrupted fit of the same settings on the same ratings): in modes "sync"
            and "local" the result is that of the uninterrupted fit.

        Returns
        -------
        self
        """
        if not isinstance(resume, bool):
            from ..exceptions import ParameterError

            raise ParameterError(f"resume must be True or False; got {resume!r}")
        return self._train(X, y, continued=False, resume=resume, check_factors=True)

    @one_fit_at_a_time
    def partial_fit(self, X, y=None):
        """One more epoch over new ratings, starting from the fitted factors.

        New users and items grow the model: new users start folded in from their
        ratings of known items (:func:`~dask_dgd.recommender._foldin.new_user_rows`, on
        their shards), new items from the seeded initialisation (bias 0).  The
        optimizer states of the fitted model carry on,
        and users without new ratings keep their factors and state unchanged.  New rows
        share the optimizer's step count, so with Adam their first moves are somewhat
        larger than a fresh fit's (its bias correction assumes moments collected since
        step 1).  The global mean of an explicit model stays that of the first fit, and
        so does its penalty (``alpha_``).  On an unfitted model this is ``fit`` with one
        epoch (``alpha="auto"``: at :data:`DEFAULT_ALPHA`, :data:`DEFAULT_ALPHA_BPR` for
        ``loss="bpr"``, without a validation path).
        ``partial_fit`` always takes gradient steps (``solver_ == "gd"``).

        Returns
        -------
        self

        Raises
        ------
        ParameterError
            On an implicit model that fell back to popularity (``alpha="auto"`` found no
            factors that beat it; every factor is zero): fit again instead.
        """
        if hasattr(self, "item_factors_") and self._ranks_by_popularity():
            from ..exceptions import ParameterError

            raise ParameterError(
                f"{type(self).__name__}: this model ranks by popularity (alpha='auto' found no factors that beat "
                "popularity on the held-out pairs by two standard errors; every factor is exactly zero), so "
                "partial_fit has no factors to train on; fit again on all the interactions (more data may "
                "support factors), or with a numeric alpha to fit factors"
            )
        if not hasattr(self, "item_factors_"):
            max_iter, alpha = self.max_iter, getattr(self, "alpha", None)
            self.max_iter = 1
            if alpha == "auto":
                self.alpha = self._default_alpha()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    return self._train(X, y, continued=False)
            finally:
                self.max_iter = max_iter
                if alpha == "auto":
                    self.alpha = alpha
        return self._train(X, y, continued=True)


def _flat_state(state):
    """An item optimizer state as the engine keeps it (flat arrays)."""
    if state is None:
        return None
    return type(state)(**{k: v.ravel() if isinstance(v, np.ndarray) and v.ndim == 2 else v
                          for k, v in state._asdict().items()})


def _table_state(state, shape):
    """The engine's flat item optimizer state in the item table's shape."""
    if state is None:
        return None
    size = shape[0] * shape[1]
    return type(state)(**{k: v.reshape(shape) if isinstance(v, np.ndarray) and v.size == size and v.ndim == 1
                          else v for k, v in state._asdict().items()})


def _assemble_users(exports, n_users, width, U_base, optimizer):
    """Every shard's exported users into one table, with their optimizer state rows and
    the seen (user, item) pairs as CSR arrays (``U_base``: the table to update when
    continuing: users without new ratings keep their rows)."""
    U = np.zeros((n_users, width)) if U_base is None else np.array(U_base, dtype=np.float64)
    states, seen_rows, seen_cols = [], [], []
    for users, Us, state, uptr, gi in exports:
        U[users] = Us
        states.append((users, optimizer.init(Us) if state is None else state))
        seen_rows.append(np.repeat(users, np.diff(uptr)))
        seen_cols.append(gi)
    return U, states, np.concatenate(seen_rows), np.concatenate(seen_cols)


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
    """The rows of ``users`` in a whole-table optimizer state (None: none yet)."""
    if state is None:
        return None
    return type(state)(**{
        name: value[users] if isinstance(value, np.ndarray) and value.ndim == 2 else value
        for name, value in state._asdict().items()
    })

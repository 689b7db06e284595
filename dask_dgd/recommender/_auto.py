"""``alpha="auto"``: a matrix factorization's penalty and number of epochs chosen on
held-out ratings, inside ``fit``.

A share of every user's ratings (:data:`VALIDATION_FRACTION`, each rating by a seeded
hash of its key, every user keeping at least one for training:
:func:`~._shards.holdout_rows`) is held out on the shards themselves.  Two penalty
paths (neither depends on the ratings' units) are fitted from the most to the least
regularised, each fit evaluating the held-out
RMSE in every step's pass and stopping when it has not improved for a few records
(early stopping); a path stops when two penalties in a row do worse than its best:

1. the bias model's (``n_components=0``), :data:`BIAS_GRID`: its best penalty becomes
   ``alpha_bias`` (unless given: then the bias model is fitted at it);
2. the factors' (with that ``alpha_bias``), :data:`FACTOR_GRID` times the ratings'
   standard deviation (the factors' penalty, per rating, scales with the ratings'
   units), starting far above, where the factors all but vanish and the model is the
   bias model of step 1.

Each path then tries the geometric midpoints on either side of its best penalty.

A held-out share is small on small data, and the lowest held-out RMSE of a dozen
penalties is partly luck.  Every step of the factors' path therefore also compares its
held-out errors with the bias model's, rating by rating (:func:`~._shards.with_val_base`):
a factors' penalty is chosen only if its mean improvement in squared error exceeds
:data:`SE_RULE` standard errors of that paired mean (it is not luck) and
:data:`MIN_GAIN` times the bias model's held-out mean squared error (it is worth
having: factors that vanish towards the top of the path improve on the bias model by a
tiny amount that can still be many standard errors, and would only add noise to the
rankings); ``validation_path_`` gives each row's threshold (``min_gain``) and whether
it passed both tests (``passed``).  The chosen penalty is the one with the lowest
held-out RMSE among those.  It is then refitted on all the ratings: to convergence
(alternating least squares), or for the epochs at which it was best (gradient steps).
When no penalty passes, the refit is the bias model itself, its
factors exactly zero (``alpha_`` reports the top of the path, where they vanish).

On a cluster, the fits of the path are small (a fraction of the ratings, about 17 fits
of a few dozen steps), and a step that is a round of tasks costs more than its
arithmetic.  Up to :data:`PATH_IN_TASKS_MAX_RATINGS` ratings every worker therefore
holds a copy of the held-out split, the fit's own shards, and each fit of the path runs
whole in one task, one fit per worker at a time (:class:`_InTasks`): only its row and
records (and a bias model's biases) come back.  The fits are the same, bit for bit, as
fits whose steps are rounds of tasks (the sums merge in the same fixed tree over the
same shards); a batch may fit a penalty past the point where the path stops, and that
fit is dropped.  The refit on all the ratings, a few dozen steps as small, then runs
whole in one task too (:func:`refit_in_task`, when it trains synchronously without
callbacks, checkpoints or progress output, which belong to the caller's process): the
task builds the fit's own shards from the ratings' partitions and trains on them there,
and the driver stores what it returns as it stores a refit whose steps are rounds of
tasks, the same bit for bit.  Only its records tell them apart: they are those of an
in-process fit (``tree_depth`` 0, no driver messages, their own timings).  Larger
ratings, or workers that cannot hold the copy, train the refit on the cluster as any
fit does.

An implicit model (:class:`~dask_dgd.ImplicitMatrixFactorization`) has no ratings to
score and no bias model: its path (:func:`_choose_ranking`) is, for its rank (or each
rank of :data:`RANK_LADDER` with ``n_components="auto"``, smallest first, until a
rank's best held-out NDCG is not above the previous rank's), the penalties
:data:`IMPLICIT_GRID`, most regularised first, each fit cold-started on the held-out
split and trained as its refit is (to ``tol``, or the annealed ``max_iter`` epochs of
BPR), stopping after :data:`IMPLICIT_PATH_PATIENCE`
penalty worse than the best once the best beats popularity.  A fit is scored by the held-out ranking of its final
model, computed on the shards (:func:`~._rankval.ranking_sums`; only sums come back):
the mean NDCG@10 of the users with held-out pairs, and that of the popularity ranking
(the training pairs per item of the split) on the same users.  As for the explicit
path (:func:`_significant`), a row passes when it beats popularity by more than
:data:`SE_RULE` standard errors of the paired mean difference, and the chosen row (its
penalty and rank, refitted) is the highest held-out NDCG among those that pass; when
none passes, the model falls back to popularity (its factors zero, its item
biases ``log(1 + n_i)``).  The path runs where the explicit one runs (in process, in
rounds of tasks, or whole in tasks).
"""

import copy
import dataclasses
import os
import uuid
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._backend import to_numpy
from .._engine.train import train
from ..exceptions import ConvergenceWarning
from ._objective import FactorizationTraining, in_model_units
from ._shards import RATING_BYTES, build_rating_shards, init_rows, with_val_base

__all__ = ["BIAS_GRID", "FACTOR_GRID", "IMPLICIT_GRID", "MIN_GAIN", "RANK_LADDER", "VALIDATION_FRACTION", "Setup",
           "choose_alpha"]

#: The penalties of the biases tried (most regularised first): once per user and item,
#: a bias is its mean residual shrunk by ``n / (n + alpha_bias)`` (``n`` its ratings),
#: so the penalty counts ratings and does not depend on their units.
BIAS_GRID = (100.0, 30.0, 10.0, 3.0, 1.0, 0.3)
#: The penalties of the factors tried, times the ratings' standard deviation: from far above,
#: where the factors vanish and the model is the bias model.
FACTOR_GRID = tuple(3.0 ** -j for j in range(-3, 6))
#: Standard errors by which the factors' paired improvement over the bias model on the
#: held-out ratings must exceed zero for a factors' penalty to be chosen: a one-sided
#: test at about 2% for each penalty, since a dozen penalties are compared (at one
#: standard error, the rule of Hastie, Tibshirani and Friedman, one of 22 held-out
#: ratings' luck passed and lost 2.5% on the test ratings).
SE_RULE = 2.0
#: The share of the bias model's held-out mean squared error by which the factors' paired
#: improvement must also exceed zero for a factors' penalty to be chosen: 0.1%, about
#: 0.05% of its RMSE.  Measured on the paths of the default fit (each user's latest 20%
#: or a random 15% of MovieLens-small held out, InstEval, generated ratings of rank 10):
#: factors that vanish (item factors of at most 0.01) gain at most 4.3e-7 of it, yet up
#: to 5 standard errors; factors that help (MovieLens 5-fold, its latest 10%, generated
#: ratings of rank 2) gain 1.3% to 38%.  The threshold lies 2,000 times above the one
#: and 13 times below the other.
MIN_GAIN = 1e-3
#: The share of each user's ratings held out.
VALIDATION_FRACTION = 0.1
#: Epochs without a held-out RMSE better by more than ``VAL_TOL`` times the ratings'
#: standard deviation before a gradient fit of the path stops (early stopping).
PATIENCE, VAL_TOL = 5, 1e-4
#: Penalties in a row worse than the best (by more than the relative ``WORSE``) before
#: a path stops.
PATH_PATIENCE, WORSE = 2, 1e-4
#: The penalties of an implicit model's factors tried (per observed pair, most
#: regularised first): at 1.0 the factors all but vanish, and the held-out NDCG is about
#: popularity's (MovieLens-small, InstEval: wls at rank 64 is best at 0.1 or 0.01, bpr
#: at 0.01; generated interactions of rank 5: rank 8 to 10 at 0.3), in half-decades.
IMPLICIT_GRID = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
#: Penalties worse than the best held-out NDCG (ties are not worse) before an implicit
#: path stops.
IMPLICIT_PATH_PATIENCE = 1
#: The ranks ``n_components="auto"`` tries (smallest first), each with its own penalty
#: path: the ladder stops after a rank whose best held-out NDCG is not above the
#: previous rank's (a larger rank overfits more).  Rank 64 ranks best on MovieLens-small
#: and InstEval; on generated interactions of rank 5 it loses to popularity, where
#: ranks 5 to 10 beat it by 20%.
RANK_LADDER = (8, 24, 64)


@dataclass
class Setup:
    """What a fit found before training (the scan, the ids, the shards' layout)."""

    executor: object
    parts: object
    cols: tuple
    users: object
    items: object
    n_shards: int
    like: object
    mu: float
    seed: int
    n_batches: int
    scale: float
    #: items none of whose ratings is left for training by the held-out split (set by
    #: :func:`choose_alpha`): their factors start, and stay, at zero
    cold: object = None
    #: whether the fits of the path (and the refit) run whole in tasks
    #: (:func:`path_in_tasks`)
    in_tasks: bool = False
    #: implicit models (set by :class:`_Here`): the training pairs of every item in the
    #: held-out split (the popularity ranking the path is compared with), the share of
    #: the users with held-out pairs whose ranking is evaluated
    #: (:func:`~._rankval.val_rate`), and how many users have held-out pairs
    popularity: object = None
    val_rate: float = 1.0
    n_val_users: int = 0


def _epochs_to(history, j, solver, full_batch):
    """The epochs (iterations) a fit needs to reach record ``j`` of ``history``: an
    alternating-least-squares record follows its iteration's user step; a full-batch
    gradient record is made after ``iteration`` updates; a mini-batch record with a
    held-out RMSE closes its epoch."""
    it = int(history["iteration"].iloc[j])
    return max(1, it + 1 if solver == "als" or not full_batch else it)


def _path(fits, grid, n_components, alpha_bias, stage):
    """Fit the penalties ``grid`` (most regularised first) on the held-out split, then
    the geometric midpoints on either side of the best; returns the best row, the rows
    and the fits' records, or None when nothing was held out (``fits``: :class:`_Here`
    or :class:`_InTasks`)."""
    found = _walk(fits, grid, n_components, alpha_bias, stage)
    if found is None:
        return None
    best, rows, histories = found
    tried = np.asarray([r["alpha" if n_components else "alpha_bias"] for r in rows])
    j = int(np.argmin(np.abs(tried - best["alpha" if n_components else "alpha_bias"])))
    mids = [np.sqrt(tried[j] * tried[i]) for i in (j - 1, j + 1) if 0 <= i < len(tried)]
    if mids:
        more = _walk(fits, mids, n_components, alpha_bias, stage, stop=False, point="midpoint")
        for row in more[1]:
            if row["val_rmse"] < best["val_rmse"]:
                best = row
        rows, histories = rows + more[1], histories + more[2]
    return best, rows, histories


def _by_rmse(row, best):
    """:func:`_walk`'s judge of an explicit path: 1 if ``row``'s held-out RMSE is below
    the best's, -1 if it is above by more than the relative :data:`WORSE` (ties: the
    factors vanish at the top of the path), else 0."""
    rmse = row["val_rmse"]
    if rmse < best["val_rmse"]:
        return 1
    return -1 if rmse > best["val_rmse"] * (1 + WORSE) else 0


def _walk(fits, grid, n_components, alpha_bias, stage, stop=True, point="grid", judge=_by_rmse,
          patience=PATH_PATIENCE):
    """Fit the penalties ``grid`` in order (``stop``: until ``patience`` of them do worse
    than the best, by ``judge(row, best)``: 1 better, -1 worse, 0 neither); the best
    row, the rows and the fits' records, or None when nothing was held out.

    ``fits`` fits ``fits.width`` penalties at a time (:class:`_InTasks`: one per
    worker); the answers past the point where the path stops are dropped, so the rows
    are those of one fit at a time."""
    rows, histories, best, worse = [], [], None, 0
    grid = [float(a) for a in grid]
    for at in range(0, len(grid), fits.width):
        for answer in fits(grid[at : at + fits.width], n_components, alpha_bias):
            if answer is None:
                return None
            row, h = answer
            rows.append({"stage": stage, "point": point, **row})
            histories.append(h)
            verdict = 1 if best is None else judge(row, best)
            if verdict > 0:
                best, worse = rows[-1], 0
            elif verdict < 0:
                worse += 1
                if stop and worse >= patience:
                    return best, rows, histories
    return best, rows, histories


def _fit_point(est, shards, s, solver, optimizer, alpha, n_components, alpha_bias):
    """One fit of the path on the held-out split, at penalty ``alpha``: its row (without
    ``stage`` and ``point``) and its records, or None when nothing was held out."""
    model = est._model(s.mu, len(s.items), s.seed, alpha=float(alpha), alpha_bias=alpha_bias,
                       n_components=n_components, variance=s.scale, unit=est._step_unit(solver, s.scale, False))
    V = init_rows(s.seed + 1, np.arange(len(s.items)), model.item_width, model.init_scale, model.item_bias)
    if s.cold is not None:  # (no rating moves them: their held-out ratings get the bias model's prediction)
        V[s.cold] = 0.0
    als = solver == "als"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # (max_iter: the refit warns)
        result = train(
            FactorizationTraining(model, s.n_batches), shards, solver=solver,
            optimizer=None if als else optimizer, max_iter=est.max_iter, tol=est.tol * s.scale if als else 0.0,
            mode="sync", on_divergence=est._on_divergence(), compression=est.compression,
            split_every=est.split_every, random_state=s.seed, params0=model.to_engine(V, "item").ravel(),
            validation_patience=None if als else PATIENCE, validation_tol=VAL_TOL * np.sqrt(s.scale),
            verbose=est.verbose, progress_desc=f"{type(est).__name__} alpha={alpha:.3g}", client=est.client,
        )
    result = in_model_units(model, result)
    h = result.history
    if "val_rmse" not in h or not h["val_rmse"].notna().any():
        return None
    val = h["val_rmse"].to_numpy(dtype=float)
    # alternating least squares: the converged model's held-out RMSE (its refit runs to
    # convergence too); gradient steps: the best epoch's (early stopping, refitted for
    # as many epochs)
    j = int(np.flatnonzero(np.isfinite(val))[-1]) if als else int(np.nanargmin(val))
    row = {"alpha": float(model.alpha), "alpha_bias": float(model.alpha_bias),
           "val_rmse": float(h["val_rmse"].iloc[j]), "n_iter": _epochs_to(h, j, solver, s.n_batches == 1),
           "epochs_run": int(result.n_iter)}
    if "val_gain" in h:  # paired with the bias model's held-out errors
        row["val_gain"] = float(h["val_gain"].iloc[j])
        row["val_gain_se"] = float(h["val_gain_se"].iloc[j])
    if n_components == 0:  # a bias model: its biases, for the factors' paired comparison
        row["_biases"] = _biases(result, len(s.users), len(s.items))
    return row, h.assign(stage="validation", alpha=float(model.alpha), alpha_bias=float(model.alpha_bias))


def _rank_point(est, shards, s, solver, optimizer, alpha, n_components, alpha_bias):
    """One fit of an implicit model's path on the held-out split, at penalty ``alpha``,
    cold-started and run as the refit runs (to ``tol``, or annealed BPR's ``max_iter``
    epochs), then scored by the held-out ranking of its
    final model, computed on the shards (:func:`~._rankval.ranking_sums`: only sums
    come back): its row (without ``stage`` and ``point``) and its records, or None when
    no user has a held-out pair."""
    from ._rankval import RANKING_K, ranking_sums, summarise

    if s.n_val_users == 0:
        return None
    model = est._model(s.mu, len(s.items), s.seed, alpha=float(alpha), alpha_bias=alpha_bias,
                       n_components=n_components, variance=s.scale, unit=est._step_unit(solver, s.scale, False))
    V = init_rows(s.seed + 1, np.arange(len(s.items)), model.item_width, model.init_scale, model.item_bias)
    if s.cold is not None:  # (no pair moves them)
        V[s.cold] = 0.0
    als = solver == "als"
    anneal = est._anneals()  # (annealed BPR runs its max_iter epochs; every other fit stops by tol, as its refit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # (max_iter: the refit warns)
        result = train(
            FactorizationTraining(model, s.n_batches), shards, solver=solver,
            optimizer=None if als else optimizer, max_iter=est.max_iter, tol=0.0 if anneal else est.tol * s.scale,
            n_iter_no_change=est.max_iter + 1 if anneal else 5,
            mode="sync", on_divergence=est._on_divergence(), compression=est.compression,
            split_every=est.split_every, random_state=s.seed, params0=model.to_engine(V, "item").ravel(),
            verbose=est.verbose, progress_desc=f"{type(est).__name__} alpha={alpha:.3g}", client=est.client,
        )
    result = in_model_units(model, result)
    k = model.n_components
    U = np.zeros((len(s.users), k))
    for users, Us, *_ in result.local:
        U[users] = to_numpy(Us)[:, :k]
    T = result.params.reshape(len(s.items), model.item_width)
    bias = T[:, k].copy() if model.item_bias else None
    found = summarise(shards.map_gather(ranking_sums, U, T[:, :k].copy(), bias, s.popularity, RANKING_K, s.val_rate,
                                        s.seed, name="dgd-mf-rank-val"))
    if found["n_users"] == 0:
        return None
    row = {"n_components": int(k), "alpha": float(model.alpha)}
    if model.item_bias:
        row["alpha_bias"] = float(model.alpha_bias)
    row.update({name: float(found[name]) for name in ("val_ndcg", "val_pop_ndcg", "val_gain", "val_gain_se")})
    row.update(n_users=int(found["n_users"]), n_iter=int(result.n_iter), epochs_run=int(result.n_iter))
    return row, result.history.assign(stage="validation", alpha=float(model.alpha), alpha_bias=float(model.alpha_bias))


def _by_ranking(row, best):
    """:func:`_walk`'s judge of an implicit path: 1 if ``row``'s held-out NDCG is above
    the best's; -1 if below, once the best beats popularity (``val_gain`` above
    :data:`SE_RULE` standard errors: towards the top of the path the factors all but
    vanish and the NDCG is popularity's, give or take noise, which says nothing of the
    penalties below; BPR's item biases keep it there down to 0.3 on MovieLens-small and
    InstEval); else 0."""
    if row["val_ndcg"] > best["val_ndcg"]:
        return 1
    return -1 if row["val_ndcg"] < best["val_ndcg"] and best["val_gain"] > SE_RULE * best["val_gain_se"] else 0


def _walk_ranking(fits, grid, n_components, alpha_bias):
    """An implicit model's path: :func:`_walk` of the penalties ``grid`` until
    :data:`IMPLICIT_PATH_PATIENCE` of them score a held-out NDCG below the best, once
    the best beats popularity (:func:`_by_ranking`)."""
    return _walk(fits, grid, n_components, alpha_bias, "factors", judge=_by_ranking, patience=IMPLICIT_PATH_PATIENCE)


def _choose_ranking(est, s, solver, optimizer):
    """:func:`choose_alpha` of an implicit model: for each rank (:data:`RANK_LADDER`
    with ``n_components="auto"``, smallest first, until a rank's best held-out NDCG is
    not above the previous rank's; else the rank given), the path :data:`IMPLICIT_GRID`
    scored by held-out NDCG@k.  The chosen row is the highest held-out NDCG among the
    rows of all ranks that beat popularity's NDCG on the same users by more than
    :data:`SE_RULE` standard errors of the paired mean (``passed``:
    :func:`_significant_ranking`); when none does, ``factors`` is False (the model
    falls back to popularity, ``alpha`` and the rank those of the first row, the top of
    the first path, where the factors vanish).  The epochs returned are ``max_iter``:
    the refit runs as a numeric-``alpha`` fit (to ``tol``, or annealed BPR's
    ``max_iter`` epochs).  Returns :func:`choose_alpha`'s tuple and the rank."""
    ranks = RANK_LADDER if est.n_components == "auto" else (int(est.n_components),)
    fits = _fits_of(est, s, solver, optimizer)
    rows, histories, best = [], [], None
    try:
        for rank in ranks:
            found = _walk_ranking(fits, IMPLICIT_GRID, rank, est.alpha_bias)
            if found is None:
                return None, None, None, pd.DataFrame(), pd.DataFrame(), True, ranks[-1]
            top, r, h = found
            rows += r
            histories += h
            if best is not None and not top["val_ndcg"] > best["val_ndcg"]:
                break  # (the rank-ladder's patience: one rank no better than the one before)
            best = top
    finally:
        fits.close()
    chosen = _significant_ranking(rows)
    factors = chosen is not None
    path = pd.DataFrame(rows)
    path["chosen"] = [r is chosen for r in rows]
    top = chosen if factors else rows[0]
    return (top["alpha"], top.get("alpha_bias"), int(est.max_iter), path, pd.concat(histories, ignore_index=True),
            factors, int(top["n_components"]))


def _significant_ranking(rows):
    """The row chosen from an implicit path's ``rows`` (all ranks): the highest held-out
    NDCG among those that beat popularity's on the same users by more than
    :data:`SE_RULE` standard errors of the paired mean difference, as
    :func:`_significant` chooses among the rows that beat the bias model; None when none
    does (the model falls back to popularity).  Each row gets ``passed``."""
    for r in rows:
        r["passed"] = bool(r["val_gain"] > SE_RULE * r["val_gain_se"])
    passed = [r for r in rows if r["passed"]]
    return max(passed, key=lambda r: r["val_ndcg"]) if passed else None


def _item_counts(shard, n_items):
    """The training ratings of every item in one shard."""
    return np.bincount(to_numpy(shard.gi), minlength=n_items)


def _biases(result, n_users, n_items):
    """The user and item biases (by global index) of a bias model's fit."""
    bu = np.zeros(n_users)
    for users, Us, *_ in result.local:
        bu[users] = Us[:, -1]
    return bu, result.params.reshape(n_items, -1)[:, -1].copy()


def _significant(best, rows, base_mse):
    """The factors' penalty chosen from the factor path's ``rows``: the lowest held-out
    RMSE among those whose paired improvement over the bias model (mean difference of
    squared errors, rating by rating) exceeds :data:`SE_RULE` standard errors and
    :data:`MIN_GAIN` times ``base_mse`` (the bias model's held-out mean squared error);
    None when none does.  Each row gets ``min_gain`` (that threshold) and ``passed``
    (whether it passed both)."""
    for r in rows:
        r["min_gain"] = MIN_GAIN * base_mse
        gain = r.get("val_gain", np.inf)
        r["passed"] = bool(gain > SE_RULE * r.get("val_gain_se", 0.0) and gain > r["min_gain"])
    passed = [r for r in rows if r["passed"]]
    if not passed:
        return None
    return min(passed, key=lambda r: r["val_rmse"]) if best not in passed else best


class _Here:
    """The path's fits one at a time, on held-out shards of the fit's own executor (in
    process, or on the cluster, each step a round of tasks), or on a copy in a task
    (``shards`` given: :func:`_path_copy`)."""

    width = 1

    def __init__(self, est, s, solver, optimizer, shards=None):
        self.est, self.solver, self.optimizer = est, solver, optimizer
        self.own = shards is None
        if self.own:
            shards, _ = build_rating_shards(s.executor, s.parts, s.cols, s.users, s.items, s.n_shards, s.like,
                                            holdout=(s.seed, VALIDATION_FRACTION), own_inputs=False)
        self.shards, self.paired = shards, None
        try:
            trained = sum(shards.map_gather(_item_counts, len(s.items), name="dgd-mf-item-counts"))
            ranked = {}
            if est._kind_now() != "explicit":  # implicit: scored by the held-out ranking
                from ._rankval import val_rate, val_users

                n_val = int(sum(shards.map_gather(val_users, name="dgd-mf-val-users")))
                ranked = {"popularity": trained, "val_rate": val_rate(n_val), "n_val_users": n_val}
        except BaseException:
            self.close()
            raise
        self.s = dataclasses.replace(s, cold=trained == 0, **ranked)

    def __call__(self, alphas, n_components, alpha_bias):
        shards = self.shards if self.paired is None else self.paired
        fit = _fit_point if self.s.popularity is None else _rank_point
        return [fit(self.est, shards, self.s, self.solver, self.optimizer, a, n_components, alpha_bias)
                for a in alphas]

    def pair(self, biases):
        """Fit on with the held-out errors paired with the bias model's ``biases``
        (:func:`~._shards.with_val_base`)."""
        shards, s = self.shards, self.s
        paired = shards.transform(with_val_base, *biases, s.mu, name="dgd-mf-baseline", token_suffix="-paired")
        paired.group_meta = shards.group_meta
        if s.executor.kind == "dask":  # (what a lost worker costs, as for the shards it copies)
            paired.collective.unrecoverable = shards.collective.unrecoverable
        self.paired = paired

    def close(self):
        if self.own:
            if self.paired is not None:
                self.paired.release()
            self.shards.release()


def _path_copy(est, s, solver, optimizer, *frames):
    """A task's copy of the held-out split (all of it, as shards in this process, the
    same shards as the fit's): a :class:`_Here` that fits there."""
    from .._engine.runtime.executor import InProcessExecutor

    s = dataclasses.replace(s, executor=InProcessExecutor(), parts=None)
    shards, _ = build_rating_shards(s.executor, list(frames), s.cols, s.users, s.items, s.n_shards, None,
                                    holdout=(s.seed, VALIDATION_FRACTION), own_inputs=False)
    return _Here(est, s, solver, optimizer, shards=shards)


def _paired_copy(here, biases):
    """A copy of a task's :class:`_Here` whose fits are paired with ``biases``."""
    out = copy.copy(here)
    out.pair(biases)
    return out


def _fit_in_copy(here, alpha, n_components, alpha_bias):
    """One path fit in a task: its row, and the warnings it raised (message and
    category), which the driver raises again as a fit in its own process would."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = here([alpha], n_components, alpha_bias)[0]
    return row, [(str(w.message), w.category) for w in caught]


class _InTasks:
    """The path's fits on a cluster, each whole fit one task, one per worker at a time
    (on at most as many workers as the longest grid walked has penalties:
    :func:`_path_workers`).

    Every worker holds a copy of the held-out split (:func:`_path_copy`, from the
    ratings' partitions); the fits of a batch of penalties run side by side, one per
    copy, and send back only their row and records (and a bias model's biases, for
    the factors' paired comparison).  The copies are the fit's own shards (the same
    ``n_shards``), so every fit is the same, bit for bit, as one whose steps are rounds
    of tasks over the shards (the sums merge in the same fixed tree)."""

    def __init__(self, est, s, solver, optimizer):
        from sklearn.base import clone

        self.client, self.parts = s.executor.client, s.parts
        self.token = uuid.uuid4().hex[:8]
        self._n = 0
        self.workers = _path_workers(est, s.executor.workers())
        self.width = len(self.workers)
        est = clone(est).set_params(client=None, callbacks=None)  # (only what the fits read travels)
        self._copy_args = (est, dataclasses.replace(s, executor=None, parts=None), solver, optimizer)
        self._biases = None  # (the bias model's, once :meth:`pair` set them)
        self.copies = []
        for lost in _revivals(self.parts, "the path's copies of the held-out split"):
            with lost:
                self.copies = self._make_copies()
                try:
                    s.executor.wait(self.copies)  # (an error of the setup surfaces here)
                except BaseException:
                    self.close()
                    raise

    def _submit(self, fn, *args, worker, name):
        self._n += 1
        return self.client.submit(fn, *args, key=f"{name}-{self.token}-{self._n}", pure=False, workers=[worker],
                                  allow_other_workers=True)

    def _make_copies(self):
        copies = [self._submit(_path_copy, *self._copy_args, *self.parts, worker=w, name="dgd-mf-path-copy")
                  for w in self.workers]
        return copies if self._biases is None else self._paired(copies)

    def _paired(self, copies):
        biases = self.client.scatter(self._biases, broadcast=True, hash=False)
        paired = [self._submit(_paired_copy, c, biases, worker=w, name="dgd-mf-path-paired")
                  for c, w in zip(copies, self.workers)]
        _release(copies)  # (the scheduler keeps them until the paired copies are made)
        return paired

    def __call__(self, alphas, n_components, alpha_bias):
        for lost in _revivals(self.parts, "the path's copies of the held-out split"):
            with lost:
                if lost.revived:  # (the partitions are new: so are the copies made from them)
                    _release(self.copies)
                    self.copies = self._make_copies()
                futures = [self._submit(_fit_in_copy, c, a, n_components, alpha_bias, worker=w,
                                        name="dgd-mf-path-fit")
                           for a, c, w in zip(alphas, self.copies, self.workers)]
                try:
                    done = self.client.gather(futures)
                finally:
                    _release(futures)
        for _, raised in done:  # (the driver's warning filters decide, as for a fit here)
            for message, category in raised:
                warnings.warn(message, category, stacklevel=2)
        return [row for row, _ in done]

    def pair(self, biases):
        self._biases = biases
        self.copies = self._paired(self.copies)

    def close(self):
        _release(self.copies)
        self.copies = []


#: How many times the tasks of a path (or its refit) are submitted again after a
#: worker loss took a partition they need that Dask cannot recompute (:func:`_revivals`).
MAX_REVIVALS = 3


class _Attempt:
    """One try of :func:`_revivals`: a context that swallows the cancellation of a
    lost partition's dependents (``failed``) unless it is the last try."""

    def __init__(self, revived, last, what):
        self.revived, self.last, self.what, self.failed = revived, last, what, False

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        from concurrent.futures import CancelledError

        if kind is None or not issubclass(kind, CancelledError):
            return False
        if self.last:
            from ..exceptions import ClusterError

            raise ClusterError(
                f"worker losses took {self.what} and a partition of the ratings they are made from "
                f"{MAX_REVIVALS + 1} times ({err}): the cluster keeps losing workers; see the workers' logs "
                "(e.g. their memory limits), and fit again once they stay up") from err
        self.failed = True
        return True


def _revivals(parts, what):
    """Tries of tasks that need ``parts`` (a :class:`~._shards._Parts`): a worker lost
    with the only copy of a partition Dask cannot recompute (a scattered piece of a
    pandas frame) cancels the tasks made from it ("already forgotten"); the partitions
    are then made again (:meth:`~._shards._Parts.revive`, ``revived`` is True) and the
    tasks run again, at most :data:`MAX_REVIVALS` times; beyond, ClusterError.  A
    partition Dask can recompute never gets here: Dask recomputes it."""
    import logging

    for attempt in range(MAX_REVIVALS + 1):
        if attempt:
            logging.getLogger("dask_dgd").warning(
                "a lost worker held the only copy of a partition of the ratings, which %s need: the "
                "partitions are sent again and the tasks run again (retry %d of %d)", what, attempt, MAX_REVIVALS)
            parts.revive()
        tried = _Attempt(attempt > 0, attempt == MAX_REVIVALS, what)
        yield tried
        if not tried.failed:
            return


def _path_workers(est, workers):
    """The workers of :class:`_InTasks`: at most as many as the longest grid the path
    walks has penalties (:data:`FACTOR_GRID`, or an implicit model's
    :data:`IMPLICIT_GRID`, walked per rank); more would only fit past where a path stops."""
    grid = FACTOR_GRID if est._kind_now() == "explicit" else IMPLICIT_GRID
    return list(workers)[: len(grid)]


def _release(futures):
    for f in futures:
        f.release()


#: Ratings up to which a fit on a cluster fits the penalty path in tasks, a whole fit
#: per task (:class:`_InTasks`): every worker then holds a copy of the ratings
#: (:data:`~._shards.RATING_BYTES` each, 48 MB here), and a step of such a fit
#: computes for less time than a round of tasks takes.
PATH_IN_TASKS_MAX_RATINGS = 2_000_000
#: ... and whose copy (the ratings' partitions and their shards, about
#: 2 x :data:`~._shards.RATING_BYTES` per rating) takes at most this share of every
#: worker's memory limit: otherwise the path's fits run as rounds of tasks over the
#: fit's own shards, whose memory check then says what does not fit.
PATH_IN_TASKS_MEMORY_SHARE = 0.25


def _worker_facts(dask_scheduler=None):
    # (run on the scheduler) each worker's process id and memory limit (0: none)
    return [(ws.pid, ws.memory_limit or 0) for ws in dask_scheduler.workers.values()]


def _copies_fit(client, n_ratings, pid=None):
    """Whether every worker runs in a process of its own (a task there has the whole
    process: Python's warning filters, which a fit sets, are the process's, so fits in
    threads of the caller's process would change the caller's) and can hold a copy of
    the ratings (:data:`PATH_IN_TASKS_MEMORY_SHARE` of its memory limit)."""
    copy, pid = 2 * RATING_BYTES * n_ratings, os.getpid() if pid is None else pid
    return all(worker != pid and (limit == 0 or copy <= PATH_IN_TASKS_MEMORY_SHARE * limit)
               for worker, limit in client.run_on_scheduler(_worker_facts))


def path_in_tasks(s, n_ratings):
    """Whether the path's fits run whole in tasks (:class:`_InTasks`, and the refit
    :func:`refit_in_task`): a cluster fit of NumPy ratings, up to
    :data:`PATH_IN_TASKS_MAX_RATINGS` of them, on workers in processes of their own whose
    copies fit their memory (:func:`_copies_fit`)."""
    return (s.executor.kind == "dask" and s.like is None and n_ratings <= PATH_IN_TASKS_MAX_RATINGS
            and _copies_fit(s.executor.client, n_ratings))


def _fits_of(est, s, solver, optimizer):
    """Where the path's fits run: :class:`_InTasks` where ``s.in_tasks``
    (:func:`path_in_tasks`), else :class:`_Here`."""
    return _InTasks(est, s, solver, optimizer) if s.in_tasks else _Here(est, s, solver, optimizer)


def _refit_copy(training, s, train_args, *frames):
    """The refit in a task: the fit's own shards of all the ratings (``s.n_shards``,
    built from the partitions ``frames`` in this process), trained there; returns the
    fit's result, the ratings per shard and the warnings raised (message and category)."""
    from .._engine.runtime.executor import InProcessExecutor

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shards, loads = build_rating_shards(InProcessExecutor(), list(frames), s.cols, s.users, s.items,
                                            s.n_shards, None)
        result = train(training, shards, **train_args)
    return result, loads, [(str(w.message), w.category) for w in caught]


def refit_in_task(s, training, train_args):
    """The refit on all the ratings as one task on a worker (``s.in_tasks``): its steps
    are the steps of a fit whose rounds of tasks run over the same shards (the sums merge
    in the same fixed tree), without a round of tasks each.  ``train_args``: the keyword
    arguments of :func:`~dask_dgd._engine.train.train` but ``client``.  Returns the
    fit's result and the ratings per shard; the task's warnings are raised again here,
    under the caller's filters."""
    from .._validation import user_stacklevel

    task = dataclasses.replace(s, executor=None, parts=None)
    try:
        for lost in _revivals(s.parts, "the refit's task"):
            with lost:
                future = s.executor.client.submit(_refit_copy, training, task, train_args, *s.parts,
                                                  key=f"dgd-mf-refit-{uuid.uuid4().hex[:8]}", pure=False)
                try:
                    result, loads, raised = future.result()
                finally:
                    future.release()
    finally:
        _release(s.parts)  # (the partitions are the fit's, done with: as its shards release them)
    for message, category in raised:
        warnings.warn(message, category, stacklevel=user_stacklevel())
    return result, loads


def choose_alpha(est, s, solver, optimizer):
    """Fit the penalty paths on held-out ratings (see the module docstring).

    Returns ``(alpha, alpha_bias, epochs, path, history, factors, rank)``: the chosen
    penalties and number of epochs, one row per penalty fitted (``stage``: "biases" or
    "factors", ``point``: "grid" or "midpoint", ``alpha``, ``alpha_bias``,
    ``val_rmse``, ``n_iter``: epochs to the best held-out RMSE, ``epochs_run``,
    ``val_gain``, ``val_gain_se``, ``min_gain``, ``passed``, ``chosen``), the path fits' step records
    (``stage="validation"``), and whether factors were chosen (False: no factors'
    penalty beat the bias model, whose epochs are returned: the refit is the bias
    model, its factors zero), and the rank of the refit (``n_components``; an implicit
    model's ``"auto"``: the one chosen); ``alpha`` is None when no rating could be
    held out (every user has one rating).

    An implicit model (``loss`` "wls" or "bpr") takes its own path
    (:func:`_choose_ranking`): rows with ``n_components``, ``val_ndcg``, ``val_pop_ndcg``, ``val_gain``,
    ``val_gain_se``, ``n_users``, ``passed`` and ``chosen``; ``factors`` False means
    that it falls back to popularity."""
    if est._kind_now() != "explicit":
        return _choose_ranking(est, s, solver, optimizer)
    fits = _fits_of(est, s, solver, optimizer)
    rows, histories = [], []
    try:
        # the bias model: its own penalty's path, or the one given (the factors' baseline)
        grid = BIAS_GRID if est.alpha_bias is None else (est.alpha_bias,)
        found = _path(fits, np.asarray(grid, dtype=float), 0, None, "biases")
        if found is None:
            return None, None, None, pd.DataFrame(), pd.DataFrame(), True, est.n_components
        best, rows, histories = found
        alpha_bias, epochs, factors = best["alpha_bias"], best["n_iter"], True
        if est.n_components > 0:  # then the factors', from far above: the top is the bias model
            fits.pair(best["_biases"])
            found = _path(fits, np.sqrt(s.scale) * np.asarray(FACTOR_GRID), est.n_components, alpha_bias,
                          "factors")
            bias, (best, r, h) = best, found
            chosen = _significant(best, r, bias["val_rmse"] ** 2)
            factors = chosen is not None
            best = chosen if factors else r[0]
            epochs = best["n_iter"] if factors else bias["n_iter"]
            rows += r
            histories += h
    finally:
        fits.close()
    path = pd.DataFrame([{k: v for k, v in row.items() if k != "_biases"} for row in rows])
    path["chosen"] = [row is best for row in rows]
    return best["alpha"], alpha_bias, epochs, path, pd.concat(histories, ignore_index=True), factors, est.n_components

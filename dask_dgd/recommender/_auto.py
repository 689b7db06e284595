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
:data:`SE_RULE` standard errors of that paired mean.  The chosen penalty is the one with
the lowest held-out RMSE among those.  It is then refitted on all the ratings: to
convergence (alternating least squares), or for the epochs at which it was best
(gradient steps).  When no penalty passes, the refit is the bias model itself, its
factors exactly zero (``alpha_`` reports the top of the path, where they vanish).
"""

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._backend import to_numpy
from .._engine.train import train
from ..exceptions import ConvergenceWarning
from ._objective import FactorizationTraining
from ._shards import build_rating_shards, init_rows, with_val_base

__all__ = ["BIAS_GRID", "FACTOR_GRID", "VALIDATION_FRACTION", "Setup", "choose_alpha"]

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
#: The share of each user's ratings held out.
VALIDATION_FRACTION = 0.1
#: Epochs without a held-out RMSE better by more than ``VAL_TOL`` times the ratings'
#: standard deviation before a gradient fit of the path stops (early stopping).
PATIENCE, VAL_TOL = 5, 1e-4
#: Penalties in a row worse than the best (by more than the relative ``WORSE``) before
#: a path stops.
PATH_PATIENCE, WORSE = 2, 1e-4


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


def _epochs_to(history, j, solver, full_batch):
    """The epochs (iterations) a fit needs to reach record ``j`` of ``history``: an
    alternating-least-squares record follows its iteration's user step; a full-batch
    gradient record is made after ``iteration`` updates; a mini-batch record with a
    held-out RMSE closes its epoch."""
    it = int(history["iteration"].iloc[j])
    return max(1, it + 1 if solver == "als" or not full_batch else it)


def _path(est, shards, s, solver, optimizer, grid, n_components, alpha_bias, stage):
    """Fit the penalties ``grid`` (most regularised first) on the held-out split, then
    the geometric midpoints on either side of the best; returns the best row, the rows
    and the fits' records, or None when nothing was held out."""
    found = _walk(est, shards, s, solver, optimizer, grid, n_components, alpha_bias, stage)
    if found is None:
        return None
    best, rows, histories = found
    tried = np.asarray([r["alpha" if n_components else "alpha_bias"] for r in rows])
    j = int(np.argmin(np.abs(tried - best["alpha" if n_components else "alpha_bias"])))
    mids = [np.sqrt(tried[j] * tried[i]) for i in (j - 1, j + 1) if 0 <= i < len(tried)]
    if mids:
        more = _walk(est, shards, s, solver, optimizer, mids, n_components, alpha_bias, stage, stop=False,
                     point="midpoint")
        for row in more[1]:
            if row["val_rmse"] < best["val_rmse"]:
                best = row
        rows, histories = rows + more[1], histories + more[2]
    return best, rows, histories


def _walk(est, shards, s, solver, optimizer, grid, n_components, alpha_bias, stage, stop=True, point="grid"):
    """Fit the penalties ``grid`` in order (``stop``: until two in a row do worse than
    the best); the best row, the rows and the fits' records, or None when nothing was
    held out."""
    rows, histories, best, worse = [], [], None, 0
    for alpha in grid:
        model = est._model(s.mu, len(s.items), s.seed, alpha=float(alpha), alpha_bias=alpha_bias,
                           n_components=n_components)
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
                split_every=est.split_every, random_state=s.seed, params0=V.ravel(),
                validation_patience=None if als else PATIENCE, validation_tol=VAL_TOL * np.sqrt(s.scale),
                verbose=est.verbose, progress_desc=f"{type(est).__name__} alpha={alpha:.3g}", client=est.client,
            )
        h = result.history
        if "val_rmse" not in h or not h["val_rmse"].notna().any():
            return None
        val = h["val_rmse"].to_numpy(dtype=float)
        # alternating least squares: the converged model's held-out RMSE (its refit runs to
        # convergence too); gradient steps: the best epoch's (early stopping, refitted for
        # as many epochs)
        j = int(np.flatnonzero(np.isfinite(val))[-1]) if als else int(np.nanargmin(val))
        rows.append({"stage": stage, "point": point, "alpha": float(model.alpha), "alpha_bias": float(model.alpha_bias),
                     "val_rmse": float(h["val_rmse"].iloc[j]), "n_iter": _epochs_to(h, j, solver, s.n_batches == 1),
                     "epochs_run": int(result.n_iter)})
        if "val_gain" in h:  # paired with the bias model's held-out errors
            rows[-1]["val_gain"] = float(h["val_gain"].iloc[j])
            rows[-1]["val_gain_se"] = float(h["val_gain_se"].iloc[j])
        if n_components == 0:  # a bias model: its biases, for the factors' paired comparison
            rows[-1]["_biases"] = _biases(result, len(s.users), len(s.items))
        histories.append(h.assign(stage="validation", alpha=float(model.alpha), alpha_bias=float(model.alpha_bias)))
        rmse = rows[-1]["val_rmse"]
        if best is None or rmse < best["val_rmse"]:
            best, worse = rows[-1], 0
        elif rmse > best["val_rmse"] * (1 + WORSE):  # (ties: the factors vanish at the top of the path)
            worse += 1
            if stop and worse >= PATH_PATIENCE:
                break
    return best, rows, histories


def _item_counts(shard, n_items):
    """The training ratings of every item in one shard."""
    return np.bincount(to_numpy(shard.gi), minlength=n_items)


def _biases(result, n_users, n_items):
    """The user and item biases (by global index) of a bias model's fit."""
    bu = np.zeros(n_users)
    for users, Us, *_ in result.local:
        bu[users] = Us[:, -1]
    return bu, result.params.reshape(n_items, -1)[:, -1].copy()


def _significant(best, rows):
    """The factors' penalty chosen from the factor path's ``rows``: the lowest held-out
    RMSE among those whose paired improvement over the bias model (mean difference of
    squared errors, rating by rating) exceeds :data:`SE_RULE` standard errors; None
    when none does."""
    passed = [r for r in rows if r.get("val_gain", np.inf) > SE_RULE * r.get("val_gain_se", 0.0)]
    if not passed:
        return None
    return min(passed, key=lambda r: r["val_rmse"]) if best not in passed else best


def choose_alpha(est, s, solver, optimizer):
    """Fit the penalty paths on held-out ratings (see the module docstring).

    Returns ``(alpha, alpha_bias, epochs, path, history, factors)``: the chosen
    penalties and number of epochs, one row per penalty fitted (``stage``: "biases" or
    "factors", ``point``: "grid" or "midpoint", ``alpha``, ``alpha_bias``,
    ``val_rmse``, ``n_iter``: epochs to the best held-out RMSE, ``epochs_run``,
    ``val_gain``, ``val_gain_se``, ``chosen``), the path fits' step records
    (``stage="validation"``), and whether factors were chosen (False: no factors'
    penalty beat the bias model, whose epochs are returned: the refit is the bias
    model, its factors zero); ``alpha`` is None when no rating could be held out
    (every user has one rating)."""
    shards, _ = build_rating_shards(s.executor, s.parts, s.cols, s.users, s.items, s.n_shards, s.like,
                                    holdout=(s.seed, VALIDATION_FRACTION), own_inputs=False)
    rows, histories, paired = [], [], None
    try:
        trained = sum(shards.map_gather(_item_counts, len(s.items), name="dgd-mf-item-counts"))
        s = dataclasses.replace(s, cold=trained == 0)
        # the bias model: its own penalty's path, or the one given (the factors' baseline)
        grid = BIAS_GRID if est.alpha_bias is None else (est.alpha_bias,)
        found = _path(est, shards, s, solver, optimizer, np.asarray(grid, dtype=float), 0, None, "biases")
        if found is None:
            return None, None, None, pd.DataFrame(), pd.DataFrame(), True
        best, rows, histories = found
        alpha_bias, epochs, factors = best["alpha_bias"], best["n_iter"], True
        if est.n_components > 0:  # then the factors', from far above: the top is the bias model
            paired = shards.transform(with_val_base, *best["_biases"], s.mu, name="dgd-mf-baseline",
                                      token_suffix="-paired")
            paired.group_meta = shards.group_meta
            if s.executor.kind == "dask":  # (what a lost worker costs, as for the shards it copies)
                paired.collective.unrecoverable = shards.collective.unrecoverable
            found = _path(est, paired, s, solver, optimizer, np.sqrt(s.scale) * np.asarray(FACTOR_GRID),
                          est.n_components, alpha_bias, "factors")
            bias, (best, r, h) = best, found
            chosen = _significant(best, r)
            factors = chosen is not None
            best = chosen if factors else r[0]
            epochs = best["n_iter"] if factors else bias["n_iter"]
            rows += r
            histories += h
    finally:
        if paired is not None:
            paired.release()
        shards.release()
    path = pd.DataFrame([{k: v for k, v in row.items() if k != "_biases"} for row in rows])
    path["chosen"] = [row is best for row in rows]
    return best["alpha"], alpha_bias, epochs, path, pd.concat(histories, ignore_index=True), factors

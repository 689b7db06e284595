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
   ``alpha_bias`` (unless given);
2. the factors' (with that ``alpha_bias``), :data:`FACTOR_GRID` times the ratings'
   standard deviation (the factors' penalty, per rating, scales with the ratings'
   units), starting far above,
   where the factors all but vanish and the model is the bias model of step 1: the
   chosen model does no worse on the held-out ratings than the bias model.

Each path then tries the geometric midpoints on either side of its best penalty.  The
factors' penalty with the lowest held-out RMSE is then refitted on all the ratings: to
convergence (alternating least squares), or for the epochs at which it was best
(gradient steps).
"""

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._engine.train import train
from ..exceptions import ConvergenceWarning
from ._objective import FactorizationTraining
from ._shards import build_rating_shards, init_rows

__all__ = ["BIAS_GRID", "FACTOR_GRID", "VALIDATION_FRACTION", "Setup", "choose_alpha"]

#: The penalties of the biases tried (most regularised first): once per user and item,
#: a bias is its mean residual shrunk by ``n / (n + alpha_bias)`` (``n`` its ratings),
#: so the penalty counts ratings and does not depend on their units.
BIAS_GRID = (100.0, 30.0, 10.0, 3.0, 1.0, 0.3)
#: The penalties of the factors tried, times the ratings' standard deviation: from far above,
#: where the factors vanish and the model is the bias model.
FACTOR_GRID = tuple(3.0 ** -j for j in range(-3, 6))
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
        histories.append(h.assign(stage="validation", alpha=float(model.alpha), alpha_bias=float(model.alpha_bias)))
        rmse = rows[-1]["val_rmse"]
        if best is None or rmse < best["val_rmse"]:
            best, worse = rows[-1], 0
        elif rmse > best["val_rmse"] * (1 + WORSE):  # (ties: the factors vanish at the top of the path)
            worse += 1
            if stop and worse >= PATH_PATIENCE:
                break
    return best, rows, histories


def choose_alpha(est, s, solver, optimizer):
    """Fit the penalty paths on held-out ratings (see the module docstring).

    Returns ``(alpha, alpha_bias, epochs, path, history)``: the chosen penalties and
    number of epochs, one row per penalty fitted (``stage``: "biases" or "factors",
    ``point``: "grid" or "midpoint", ``alpha``, ``alpha_bias``, ``val_rmse``,
    ``n_iter``: epochs to the best held-out RMSE, ``epochs_run``), and the path fits'
    step records (``stage="validation"``); ``alpha`` is None when no rating could be
    held out (every user has one rating)."""
    shards, _ = build_rating_shards(s.executor, s.parts, s.cols, s.users, s.items, s.n_shards, s.like,
                                    holdout=(s.seed, VALIDATION_FRACTION), own_inputs=False)
    rows, histories = [], []
    try:
        alpha_bias = est.alpha_bias
        if alpha_bias is None:  # the bias model's own penalty first
            found = _path(est, shards, s, solver, optimizer, np.asarray(BIAS_GRID), 0, None, "biases")
            if found is None:
                return None, None, None, pd.DataFrame(), pd.DataFrame()
            best, r, h = found
            alpha_bias = best["alpha"]
            rows += r
            histories += h
        if est.n_components > 0:  # then the factors', from far above: the top is the bias model
            found = _path(est, shards, s, solver, optimizer, np.sqrt(s.scale) * np.asarray(FACTOR_GRID),
                          est.n_components, alpha_bias, "factors")
            if found is None:
                return None, None, None, pd.DataFrame(), pd.DataFrame()
            best, r, h = found
            rows += r
            histories += h
    finally:
        shards.release()
    return best["alpha"], alpha_bias, best["n_iter"], pd.DataFrame(rows), pd.concat(histories, ignore_index=True)

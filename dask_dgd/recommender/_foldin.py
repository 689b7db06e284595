"""Fold-in: the factors of users (items) from their interactions, with the fitted items
(users) fixed.

``recommend(users, user_items=...)`` and ``predict(X, user_items=...)`` score users (new
ones, or known ones with other interactions) without refitting; ``fold_in_users`` and
``fold_in_items`` write such rows into the model (new ids appended).  Each row minimises
the model's own objective with the other side fixed, as a fit's alternating step does:

- explicit ratings and confidence-weighted least squares: the row solves its normal
  equations exactly (:func:`solve_rows`, the systems of :mod:`dask_dgd.losses._als`
  with the fitted penalty; the two sides are symmetric);
- BPR, a user: the user's BPR objective over *every* (observed, unobserved) item pair,
  not a sample, with the L2 penalty, minimised by L-BFGS (:func:`bpr_rows`);
- BPR, an item: the expectation, over the fit's uniform draws of negative items, of
  every BPR term the item enters: as the observed item of its users' pairs (against
  each of their unobserved items) and as the drawn negative of every other user's
  observed pairs (:func:`bpr_item_rows`), with the penalties of those draws.  Items
  folded in together are not each other's negatives.

Ids of the other side unknown to the model are ignored (they have no factors); a row
left without a known counterpart is zero (the biases alone rank a user; an item gets
no factors and no bias).

The interactions are checked as ``fit`` checks its ratings, with its messages
(:func:`~dask_dgd.recommender._shards.check_rows`): missing ids, NaN or infinite
ratings and negative wls strengths are refused; so are finite ratings so large that
a row's problem overflows (an explicit rating whose squared error overflows, on which
``fit`` stops too, or any whose row would not be finite).  Nothing is written to the
model before the rows are computed and checked.
"""

import warnings

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.special

from .._validation import user_stacklevel
from ..exceptions import InputError, RatingScaleWarning
from ._input import ids_preview
from ._shards import check_rows, check_scale, merge_duplicates, row_facts

__all__ = ["bpr_item_rows", "bpr_rows", "fold_in", "model_of", "new_user_rows", "solve_rows"]


def solve_rows(model, V, groups):
    """Each row's exact solution: ``groups`` is a list of ``(codes, values)`` of the
    other side, whose fitted table is ``V`` (the explicit bias last)."""
    kind, k = model["kind"], model["n_components"]
    explicit = kind == "explicit"
    width = k + 1 if explicit else k
    gram = None if explicit else V.T @ V
    out = np.zeros((len(groups), width))
    for g, (items, values) in enumerate(groups):
        if not len(items):
            continue
        Q = V[items]
        n = float(len(items))
        with np.errstate(over="ignore", invalid="ignore"):  # (huge ratings: checked below)
            if explicit:
                Z = np.hstack([Q[:, :k], np.ones((len(items), 1))])
                t = values - model["mu"] - Q[:, k]
                A = Z.T @ Z + np.diag([n * model["alpha"]] * k + [model["alpha_bias"]])  # bias: once per user
                b = Z.T @ t
            else:
                w = model["confidence_scale"] * values
                A = gram + (Q.T * w) @ Q + n * model["alpha"] * np.eye(width)
                b = Q.T @ (1.0 + w)
        try:
            if not (np.isfinite(A).all() and np.isfinite(b).all()):
                raise np.linalg.LinAlgError("overflow")
            out[g] = np.linalg.solve(A, b)
        except np.linalg.LinAlgError:  # overflowed, or singular in float64 (huge confidences)
            out[g] = np.nan  # (fold_in refuses the row)
    return out


def _bpr_value_grad(p, Qp, Qn, bp, bn, alpha):
    """A user's BPR objective over all (observed, unobserved) pairs, and its gradient."""
    d = (Qp @ p + bp)[:, None] - (Qn @ p + bn)[None, :]  # observed minus unobserved
    loss = np.logaddexp(0.0, -d).mean() + alpha * (p @ p)
    coef = -scipy.special.expit(-d) / d.size  # d softplus(-d) / dd, per pair
    grad = Qp.T @ coef.sum(axis=1) - Qn.T @ coef.sum(axis=0) + 2.0 * alpha * p
    return loss, grad


def bpr_rows(model, V, groups):
    """Each user's row minimising its BPR objective over all (observed, unobserved) pairs
    (``V``: items x (k + 1), the item bias last)."""
    k, alpha = model["n_components"], model["alpha"]
    Q, bias = V[:, :k], V[:, k]
    out = np.zeros((len(groups), k))
    for g, (items, _) in enumerate(groups):
        pos = np.zeros(len(V), dtype=bool)
        pos[items] = True
        if not pos.any() or pos.all():
            continue
        args = (Q[pos], Q[~pos], bias[pos], bias[~pos], alpha)
        res = scipy.optimize.minimize(_bpr_value_grad, np.zeros(k), args=args, jac=True, method="L-BFGS-B",
                                      options={"maxiter": 100, "gtol": 1e-6})
        out[g] = res.x
    return out


def _bpr_item_value_grad(theta, Up, Sp, mask, Ur, s_r, w_r, lam, lam_b, weight):
    """An item's expected BPR objective (see the module docstring), divided by
    ``weight``, and its gradient: ``theta`` is (factors, bias); ``Up`` its users'
    factors, ``Sp`` their scores of every fitted item and ``mask`` their unobserved
    items (as weights summing to 1 per user); ``Ur``, ``s_r``, ``w_r`` the other users'
    observed pairs: the user's factors, the pair's score and the chance that the item
    is drawn as its negative."""
    q, b = theta[:-1], theta[-1]
    x = (Up @ q + b)[:, None] - Sp  # the item against each unobserved item of its users
    gx = -scipy.special.expit(-x) * mask
    y = s_r - (Ur @ q + b)  # each other observed pair against the item
    gy = scipy.special.expit(-y) * w_r  # d softplus(-y) / d(score of the item), weighted
    value = (np.logaddexp(0.0, -x) * mask).sum() + w_r @ np.logaddexp(0.0, -y) \
        + weight * (lam * (q @ q) + lam_b * b * b)
    grad_q = Up.T @ gx.sum(axis=1) + Ur.T @ gy + 2.0 * weight * lam * q
    grad_b = gx.sum() + gy.sum() + 2.0 * weight * lam_b * b
    return value / weight, np.r_[grad_q, grad_b] / weight


def bpr_item_rows(model, U, V, seen, groups, own):
    """Each item's row (factors, bias) minimising its expected BPR objective (module
    docstring) with the users' factors ``U`` and the fitted items ``V`` (items x (k +
    1)) fixed; ``seen``: the fitted (user, item) pairs (CSR); ``groups``: each item's
    user codes; ``own``: each item's fitted code, or -1 (a known item is computed
    anew: its fitted row is neither its rival nor its pairs' negative)."""
    k, lam, lam_b = model["n_components"], model["alpha"], model["alpha_bias"]
    coo = seen.tocoo()
    rows, cols = coo.row, coo.col
    s_pairs = np.einsum("ij,ij->i", U[rows], V[cols, :k]) + V[cols, k]
    per_user = np.diff(seen.indptr)[rows]
    out = np.zeros((len(groups), k + 1))
    for g, (users, _) in enumerate(groups):
        if not len(users):
            continue
        unobserved = 1.0 - seen[users].toarray()
        if own[g] >= 0:
            unobserved[:, own[g]] = 0.0
        mask = unobserved / np.maximum(unobserved.sum(axis=1, keepdims=True), 1.0)
        others = ~np.isin(rows, users) & (cols != own[g])
        n_items = V.shape[0] + (own[g] < 0)  # the fitted items and a new one
        w_pairs = 1.0 / (n_items - per_user)  # a negative: uniform over the user's unobserved items
        weight = len(users) + w_pairs[others].sum()  # the draws that penalise the item
        args = (U[users], U[users] @ V[:, :k].T + V[:, k], mask, U[rows[others]], s_pairs[others],
                w_pairs[others], lam, lam_b, weight)
        res = scipy.optimize.minimize(_bpr_item_value_grad, np.zeros(k + 1), args=args, jac=True,
                                      method="L-BFGS-B", options={"maxiter": 200, "gtol": 1e-8})
        out[g] = res.x
    return out


def model_of(est):
    """What fold-in needs of a fitted estimator's model."""
    return {"kind": est._kind_now(), "n_components": est.item_factors_.shape[1], "alpha": est.alpha_,
            "alpha_bias": est.alpha_bias_, "mu": getattr(est, "global_mean_", 0.0),
            "confidence_scale": float(getattr(est, "confidence_scale", 0.0))}


def new_user_rows(shard, model, V, n_users, n_items):
    """On a rating shard (a ``partial_fit``'s): the fold-in rows of its users new to the
    model (global index >= ``n_users``), from their ratings of the items the model
    knows (index < ``n_items``; ``V``: their table).  Returns (global indices, rows)."""
    from .._backend import to_numpy

    users = np.asarray(shard.users)
    mine = np.flatnonzero(users >= n_users)
    uptr, gi, r = (to_numpy(a) for a in (shard.uptr, shard.gi, shard.r))
    groups = []
    for lu in mine:
        items, values = gi[uptr[lu]:uptr[lu + 1]], r[uptr[lu]:uptr[lu + 1]]
        known = items < n_items
        groups.append((items[known].astype(np.int64), values[known]))
    rows = bpr_rows(model, V, groups) if model["kind"] == "bpr" else solve_rows(model, V, groups)
    return users[mine], rows


def fold_in(est, frame, ids, side="users"):
    """The rows of ``ids`` (users, or items with ``side="items"``) computed from
    ``frame`` (their interactions) with ``est``'s fitted other side fixed; also the
    other side's codes each has in ``frame`` (to leave out, or to mark seen).

    Returns ``(rows, codes)``: ``rows`` of shape (len(ids), n_components (+1 for an
    explicit user's or an explicit or BPR item's bias)), ``codes`` a list of arrays."""
    users = side == "users"
    key_col, other_col = (est.user_col, est.item_col) if users else (est.item_col, est.user_col)
    other_index = est._item_index if users else est._user_index
    rcol = est._rating_col()
    if est._kind_now() == "explicit" and rcol not in frame.columns:
        what = "user_items" if users else "item_users"
        raise InputError(f"{what} has no {rcol!r} column: an explicit-rating model folds {side} in from their "
                         f"ratings (columns: {list(frame.columns)})")
    rated = rcol is not None and rcol in frame.columns
    # what fit refuses (NaN or infinite ratings, missing ids, negative wls strengths)
    facts = row_facts(frame, est.user_col, est.item_col, rcol if rated else None)
    check_rows(facts, rcol, est._kind_now(), "folding them in")
    check_scale(facts, rcol, est._declared_scale(), "folding them in")
    # a pair given on several rows: merged by the model's duplicates policy, as fit merges them
    frame, n_merged = merge_duplicates(frame, est.user_col, est.item_col, rcol if rated else None, est.duplicates)
    if n_merged:
        est._merged_duplicates(n_merged, (est.user_col, est.item_col, rcol if rated else None), "folding them in",
                               arg="user_items" if users else "item_users")
    codes = other_index.get_indexer(frame[other_col].to_numpy())
    known = codes >= 0
    if rated:
        values = frame[rcol].to_numpy(dtype=np.float64)
    else:
        values = np.ones(len(frame))
    by_id = {}
    for key, c, v in zip(frame[key_col].to_numpy()[known], codes[known], values[known]):
        by_id.setdefault(key, ([], []))
        by_id[key][0].append(c)
        by_id[key][1].append(v)
    groups = []
    for key in ids:
        other, vals = by_id.get(key, ([], []))
        other = np.asarray(other, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        order = np.argsort(other, kind="stable")  # (by item, as fit's shards hold them)
        groups.append((other[order], vals[order]))
    model = model_of(est)
    V = est._item_table()
    if est._ranks_by_popularity():  # (no factors: a user gets none, an item the bias of its users' count)
        k = est.item_factors_.shape[1]
        rows = np.zeros((len(groups), k if users else k + 1))
        if not users:
            rows[:, k] = np.log1p([len(g[0]) for g in groups])
    elif model["kind"] == "bpr":
        rows = bpr_rows(model, V, groups) if users else bpr_item_rows(
            model, est.user_factors_, V, est._seen, groups, est._item_index.get_indexer(list(ids)))
    else:
        rows = solve_rows(model, V if users else est._user_table(), groups)
    _check_finite(rows, groups, ids, model, side, rcol if rated else None)
    if rated:  # (accepted: rating_scale="auto" says so of far ones)
        _warn_far(est, frame[rcol], rcol)
    return rows, [g[0] for g in groups]


def _warn_far(est, values, rcol):
    """``rating_scale="auto"``: warn of fold-in ratings far outside ``rating_scale_``,
    more than its width ``high - low`` beyond it (fit's notion of far, measured from
    the fitted scale): they are accepted, but fold-in does not widen the scale, so the
    predictions they lead to are clipped to it."""
    scale = getattr(est, "rating_scale_", None)
    if not isinstance(getattr(est, "rating_scale", None), str) or scale is None:
        return
    low, high = scale
    width = high - low
    if not width > 0:  # (a scale of one value: none is far, as in fit)
        return
    r = np.asarray(values, dtype=np.float64)
    far = r[np.isfinite(r) & ((r < low - width) | (r > high + width))]
    if far.size:
        warnings.warn(
            f"{type(est).__name__}: {far.size} of the {r.size} values of the {rcol!r} column folded in (from "
            f"{far.min():g} to {far.max():g}) lie far outside rating_scale_=({low:g}, {high:g}) (more than its width "
            "beyond it); fold-in does not widen the scale, so their predictions are clipped to it. Fix those "
            "ratings (another scale?), or train on them with partial_fit, which widens rating_scale_",
            RatingScaleWarning, stacklevel=user_stacklevel(),
        )


def _check_finite(rows, groups, ids, model, side, rcol):
    """Refuse rows whose least-squares problem overflows or is singular in float64
    (huge ratings, or a row without a penalty): explicit ratings whose squared error
    overflows (``fit`` stops on them: its objective is not finite at the start), and
    any row that came out NaN or infinite.  Nothing has been written to the model yet."""
    bad = ~np.isfinite(rows).all(axis=1)
    if model["kind"] == "explicit":
        with np.errstate(over="ignore"):
            bad |= np.array([not np.isfinite(np.square(v - model["mu"]).sum()) for _, v in groups], dtype=bool)
    if not bad.any():
        return
    what = ""
    if rcol is not None:
        largest = max(float(np.abs(v).max()) for (_, v), b in zip(groups, bad) if b and len(v))
        what = f" (the largest magnitude of their {rcol!r} values: {largest:g})"
    raise InputError(
        f"{int(bad.sum())} {side} ({ids_preview(pd.Index(list(ids))[bad])}) would get factors that are not finite: "
        f"the {model['kind']} model's least-squares problem of each overflows or is singular in float64{what}; "
        "rescale the ratings (or use alpha > 0), or drop those rows before folding them in"
    )

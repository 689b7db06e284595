"""Fold-in: the factors of users from their interactions, with the fitted items fixed.

``recommend(users, user_items=...)`` scores users (new ones, or known ones with other
interactions) without refitting: each user's row minimises the model's own objective
with the item table fixed, as a fit's user step does.

- explicit ratings and confidence-weighted least squares: the row solves the user's
  normal equations exactly (:func:`solve_rows`, the systems of
  :mod:`dask_dgd.losses._als` with the fitted penalty);
- BPR: the user's BPR objective over *every* (observed, unobserved) item pair, not a
  sample, with the L2 penalty, minimised by L-BFGS (:func:`bpr_rows`).

Items of ``user_items`` unknown to the model are ignored (they have no factors); a user
left without a known item gets the bias-only row (zeros: the items' biases alone rank).
"""

import numpy as np
import scipy.optimize
import scipy.special

__all__ = ["fold_in"]


def solve_rows(model, V, groups):
    """Each user's exact row: ``groups`` is a list of ``(item codes, values)``."""
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
        if explicit:
            Z = np.hstack([Q[:, :k], np.ones((len(items), 1))])
            t = values - model["mu"] - Q[:, k]
            A = Z.T @ Z + np.diag([n * model["alpha"]] * k + [model["alpha_bias"]])  # bias: once per user
            b = Z.T @ t
        else:
            w = model["confidence_scale"] * values
            A = gram + (Q.T * w) @ Q + n * model["alpha"] * np.eye(width)
            b = Q.T @ (1.0 + w)
        out[g] = np.linalg.solve(A, b)
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


def fold_in(est, frame, users):
    """The rows of ``users`` computed from ``frame`` (their interactions) with ``est``'s
    fitted items fixed; also the items each user has in ``frame`` (codes), to leave out.

    Returns ``(U, seen)``: ``U`` of shape (len(users), n_components (+1 for the explicit
    user bias)), ``seen`` a list of item-code arrays."""
    ucol, icol = est.user_col, est.item_col
    rcol = est._rating_col()
    if est._kind_now() == "explicit" and rcol not in frame.columns:
        from ..exceptions import InputError

        raise InputError(f"user_items has no {rcol!r} column: an explicit-rating model folds users in from their "
                         f"ratings (columns: {list(frame.columns)})")
    codes = est._item_index.get_indexer(frame[icol].to_numpy())
    known = codes >= 0
    if rcol is not None and rcol in frame.columns:
        values = frame[rcol].to_numpy(dtype=np.float64)
    else:
        values = np.ones(len(frame))
    by_user = {}
    for u, c, v in zip(frame[ucol].to_numpy()[known], codes[known], values[known]):
        by_user.setdefault(u, ([], []))
        by_user[u][0].append(c)
        by_user[u][1].append(v)
    groups = []
    for u in users:
        items, vals = by_user.get(u, ([], []))
        items = np.asarray(items, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        if len(items):  # a pair given twice counts once, with its last value
            last = len(items) - 1 - np.unique(items[::-1], return_index=True)[1]
            items, vals = items[last], vals[last]
        groups.append((items, vals))
    model = {"kind": est._kind_now(), "n_components": est.item_factors_.shape[1], "alpha": est.alpha_,
             "alpha_bias": est.alpha_bias_, "mu": getattr(est, "global_mean_", 0.0),
             "confidence_scale": float(getattr(est, "confidence_scale", 0.0))}
    V = est._item_table()
    rows = bpr_rows(model, V, groups) if model["kind"] == "bpr" else solve_rows(model, V, groups)
    return rows, [g[0] for g in groups]

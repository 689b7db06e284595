"""Separated classes: the maximum-likelihood estimate of a logistic model does not exist.

When the features separate the classes (completely, or quasi-completely with ties on
the boundary; Albert and Anderson 1984), the unpenalised logistic likelihood has no
maximum: the coefficients grow with every iteration and the fit stops where ``tol`` or
``max_iter`` says, not at an estimate.  After every unpenalised fit (``alpha == 0``) of
the logistic or binomial loss (binary or multinomial) whose test has at most
:data:`LP_MAX_UNKNOWNS` unknowns (the design's columns, times the classes less one),
one pass over the shards counts, where the rows live, the rows of positive weight whose
fitted probability is within ``10 eps`` of 0 or 1 (R's ``glm.fit`` rule, "fitted
probabilities numerically 0 or 1 occurred"; for the multinomial model, of any class),
takes the columns' largest |values| and, from every shard, its share of the rows
nearest the fitted boundary (smallest ``|eta|``; multinomial: the smallest margin
between a row's own class and the next).

The exact test follows, whatever the fitted probabilities (a fit by first-order steps,
or to a loose ``tol``, stops long before any is near 0 or 1): the linear programme of
Konis (2007), as R's ``detectseparation`` (:func:`mle_missing`; its multinomial form
after Albert and Anderson), on centred and scaled columns (:func:`conditioning`),
solved by cutting planes (:func:`search`): on the rows nearest the boundary first, then
on the rows each pass over the shards finds violating the programme's direction (or,
where the rows taken do not span the design, the rows outside their span), until the
direction holds on every row (separated) or only the zero direction remains (not
separated).  No more than the rows taken reach the driver, whatever the number of rows;
most finite fits are cleared by the first programme.  The warning then says the classes
are separated, and a finite estimate is never reported (R's rule alone also fires on
large effects over many rows).  Models with more unknowns, and the rare search not
settled in :data:`LP_ROUNDS` passes, are not decided (``separated_`` None): they warn
by R's rule alone, saying the classes *may* be separated (a quasi-separation with no
fitted probability that close to 0 or 1 then goes unreported); their pass is skipped
when X's largest value bounds every linear predictor within :data:`SCREEN_ETA`.
"""

import math
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.linalg import null_space

from .._backend import get_namespace, is_sparse, take_rows, to_numpy
from .._engine.data.blocks import _block_error
from .._validation import user_stacklevel
from ..exceptions import ConvergenceWarning
from ..losses._pointwise import BinaryLogistic, MultinomialLogistic

__all__ = ["CERTAIN", "LP_MAX_UNKNOWNS", "LP_ROUNDS", "SCREEN_ETA", "applies", "certain_mask",
           "mle_missing", "search", "separated", "separation_message", "warn_if_separated"]

#: A fitted probability within this of 0 or 1 is numerically certain (R's glm: 10 eps).
CERTAIN = 10 * float(np.finfo(np.float64).eps)
#: A linear predictor beyond this in absolute value (a fitted probability within 3.4e-4
#: of 0 or 1) screens a pointwise climate GLM's cell for its exact test; a model too
#: large for the exact test whose linear predictors X's largest value bounds within it
#: has no numerically certain row, and no pass is made.
SCREEN_ETA = 8.0
#: The most unknowns of the exact test's linear programme: the design's columns (the
#: intercept's included), times the classes less one for a multinomial model.  Its time
#: grows with them (a binary programme on 2,000 rows x 500 columns took 4.5 s).
LP_MAX_UNKNOWNS = 100
#: The most passes over the shards of one exact test (each adds the rows it finds).
LP_ROUNDS = 30
#: A direction's slack below minus this on some row violates it; the programme's optimum
#: (the summed slack of the rows taken) above it is a separation of those rows.
SLACK_TOL = 1e-6
#: A row whose component outside the span of the rows taken is above this (columns
#: under :func:`conditioning`: of a largest |value| near 1) widens the span.
SPAN_TOL = 1e-8


def certain_mask(prob, xp):
    """Rows whose probability (of class 1, shape ``(n,)``; or of each class, shape
    ``(n, K)``) is within :data:`CERTAIN` of 0 or 1 for some class."""
    certain = (prob < CERTAIN) | (prob > 1 - CERTAIN)
    return xp.any(certain, axis=1) if len(prob.shape) == 2 else certain


def separation_message(name, finding, untested=None):
    """The warning of a separated fit, ``finding`` saying how it was found;
    ``untested``: why the linear programme did not decide (R's rule alone: "may"), or
    None where it confirmed the separation."""
    consequence = (
        "the coefficients grow with the iterations and stop where tol and max_iter say, and their standard errors "
        "and p-values are not valid; pass alpha > 0 for a finite penalised fit, or leave out the separating features"
    )
    if untested is None:
        return (f"{name}: {finding}: the features separate the classes (completely or quasi-completely), so that the "
                f"maximum-likelihood estimate does not exist: {consequence}")
    return (
        f"{name}: {finding}: the features may separate the classes (completely or quasi-completely; not tested "
        f"exactly: {untested}), or the effects are large; if they separate them, the maximum-likelihood estimate "
        f"does not exist: {consequence}"
    )


def too_many_unknowns(unknowns):
    """``untested`` of :func:`separation_message`: a programme too large."""
    return (f"the exact test, a linear programme, runs on models of at most {LP_MAX_UNKNOWNS} unknowns (the design's "
            f"columns, times the classes less one); this one has {unknowns}")


NOT_SETTLED = f"the exact test, a linear programme, did not settle in {LP_ROUNDS} passes over the data"


def certain_finding(n_rows, where):
    """R's rule, as :func:`separation_message`'s ``finding``."""
    return f"fitted probabilities numerically 0 or 1 occurred for {n_rows} {where} (as R's glm warns)"


LP_FINDING = ("a linear programme (Konis 2007, as R's detectseparation) finds a direction of the coefficients along "
              "which the likelihood grows without bound")


def _host(X):
    """A block's X (or some of its rows) as a dense float64 host array."""
    X = X.toarray() if sp.issparse(X) else (to_numpy(X.toarray()) if is_sparse(X) else to_numpy(X))
    return np.asarray(X, dtype=np.float64)


def _design(objective, X):
    """The observed design of rows of X on the host: ``[1, X]`` with an intercept, else
    ``X`` (offset columns left out)."""
    X = _host(objective.features_of(X))
    return np.column_stack([np.ones(len(X)), X]) if objective.fit_intercept else X


def _kept(block):
    """The block's rows of positive weight (host bools) and its targets (host float64)."""
    y = to_numpy(block.y).astype(np.float64)
    keep = np.ones(len(y), dtype=bool) if block.sample_weight is None else to_numpy(block.sample_weight) > 0
    return keep, y


def _margin(raw, y):
    """How far each row is from its class's boundary: ``|eta|`` (binary), else the
    smallest ``|eta_y - eta_k|`` over the other classes (host arrays)."""
    return np.abs(raw[:, 0] if raw.shape[1] == 1 else _margin_signed(raw, y))


def conditioning(rows, colmax, intercept):
    """The affine map ``(design - shift) / scale`` the programme sees, from some rows of
    the design and every column's largest |value|: with an intercept (the first column
    of ones) the other columns are centred on the rows' mean and scaled by the rows'
    largest distance from it, else scaled by their largest |value|.

    The map changes the coefficients' coordinates, not the verdict: with an intercept
    ``x_j - c_j`` spans what ``x_j`` does.  It keeps the programme well posed where a
    column's values share a large offset (a timestamp in seconds, a year): there the
    columns of ones and of the offset values are nearly parallel once scaled by their
    largest values, and the solver's tolerances found "directions" that separated
    nothing (1e7 + 0..399 with two labels swapped at the cut)."""
    colmax = np.asarray(colmax, dtype=np.float64)
    shift = np.zeros_like(colmax)
    scale = np.where(colmax > 0, colmax, 1.0)
    if intercept and len(rows):
        shift[1:] = rows[:, 1:].mean(axis=0)
        spread = np.max(np.abs(rows[:, 1:] - shift[1:]), axis=0)
        # a column constant on these rows keeps its largest |value| (beyond them it varies)
        scale[1:] = np.where(spread > 0, spread, np.maximum(scale[1:], np.abs(shift[1:])))
        scale[0] = 1.0
    return shift, scale


def _conditioned(X):
    """Rows in memory under :func:`conditioning` of themselves (an intercept where the
    first column is all ones)."""
    intercept = X.shape[1] > 0 and len(X) > 0 and bool(np.all(X[:, 0] == 1.0))
    shift, scale = conditioning(X, np.max(np.abs(X), axis=0) if len(X) else np.zeros(X.shape[1]), intercept)
    return (X - shift) / scale


def _shard_screen(shard, objective, params, near, n_rows):
    """A shard's part of the pass after the fit, over its rows of positive weight: the
    rows whose fitted probability is numerically certain (R's rule), the design's
    largest |value| per column, and its share (``near * rows / n_rows``; none when 0)
    of the rows nearest the fitted boundary (design, target)."""
    certain = 0
    colmax = np.zeros(objective.n_features + objective.fit_intercept)
    quota = math.ceil(near * shard.n_rows / max(n_rows, 1)) if near else 0
    margins, picks = [], []
    for b, block in enumerate(shard.blocks):
        if block.n_rows == 0:
            continue
        try:
            xp = get_namespace(block.X)
            raw = objective.raw_prediction(params, block.X)
            with np.errstate(over="ignore", under="ignore"):
                prob = objective.loss.inverse_link(raw, xp)
            keep, y = _kept(block)
            rows = np.flatnonzero(keep)
            certain += int(to_numpy(certain_mask(prob, xp))[keep].sum())
            if not quota or len(rows) == 0:
                continue
            features = objective.features_of(block.X)
            sparse = sp.issparse(features) or is_sparse(features)
            absmax = _host(abs(features).max(axis=0) if sparse else xp.max(xp.abs(features), axis=0)).ravel()
            colmax[int(objective.fit_intercept):] = np.maximum(colmax[int(objective.fit_intercept):], absmax)
            if objective.fit_intercept:
                colmax[0] = 1.0
            margin = _margin(_host(raw)[rows], y[rows])
            order = np.argsort(margin, kind="stable")[:quota]
            margins.append(margin[order])
            picks.append((b, rows[order]))
        except Exception as err:  # name the block
            raise _block_error(err, block) from err
    if not quota:
        return certain, colmax, None
    if not picks:
        return certain, colmax, (np.zeros((0, len(colmax))), np.zeros(0))
    order = np.argsort(np.concatenate(margins), kind="stable")[:quota]
    which = np.concatenate([np.full(len(r), b) for b, r in picks])[order]
    index = np.concatenate([r for _, r in picks])[order]
    X_rows, y_rows = [], []
    for b, _ in picks:
        block = shard.blocks[b]
        take = np.sort(index[which == b])
        X_rows.append(_design(objective, take_rows(block.X, take)))
        y_rows.append(_kept(block)[1][take])
    return certain, colmax, (np.concatenate(X_rows), np.concatenate(y_rows))


def _violation(design, y, direction):
    """How much each row violates ``direction``: minus its slack (binary: ``s x . d``
    with ``s`` = +1 where y is 1, -1 where it is 0, ``-|x . d|`` in between; multinomial:
    ``x . (d_y - d_k)`` at the worst other class ``k``)."""
    if direction.ndim == 1:
        z = design @ direction
        slack = np.where(y >= 1.0, z, np.where(y <= 0.0, -z, -np.abs(z)))
    else:
        slack = _margin_signed(design @ direction, y)
    return -slack


def _margin_signed(scores, y):
    """``scores_y - max_{k != y} scores_k`` per row."""
    own = np.take_along_axis(scores, y.astype(np.int64)[:, None], axis=1)[:, 0]
    others = scores.copy()
    np.put_along_axis(others, y.astype(np.int64)[:, None], -np.inf, axis=1)
    return own - others.max(axis=1)


def _off_span(design, y, basis):
    """Each row's largest component along ``basis`` (the directions outside the span of
    the rows taken)."""
    return np.abs(design @ basis).max(axis=1)


def _shard_worst(shard, objective, shift, scale, badness, arg, tol, quota):
    """A shard's rows of positive weight whose ``badness((design - shift) / scale, y,
    arg)`` is above ``tol``: their count and the ``quota`` worst (mapped design, target)."""
    count, bads, rows, ys = 0, [], [], []
    for block in shard.blocks:
        if block.n_rows == 0:
            continue
        try:
            keep, y = _kept(block)
            design = (_design(objective, block.X)[keep] - shift) / scale
            bad = badness(design, y[keep], arg)
            hits = np.flatnonzero(bad > tol)
            count += len(hits)
            worst = hits[np.argsort(-bad[hits], kind="stable")[:quota]]
            bads.append(bad[worst])
            rows.append(design[worst])
            ys.append(y[keep][worst])
        except Exception as err:  # name the block
            raise _block_error(err, block) from err
    if not bads:
        return 0, (np.zeros((0, len(scale))), np.zeros(0))
    worst = np.argsort(-np.concatenate(bads), kind="stable")[:quota]
    return count, (np.concatenate(rows)[worst], np.concatenate(ys)[worst])


def _lp(design, y, n_classes):
    """The linear programme of Konis (2007) on rows ``design`` (under
    :func:`conditioning`), ``y`` (binary: in [0, 1]; multinomial: class indices):
    maximise the summed slack of the rows (see :func:`_violation`) subject to every
    slack >= 0 (binary rows strictly between 0 and 1: ``x . d = 0``) and ``|d_j| <= 1``
    (multinomial: ``d`` one column per class, the last class's fixed at 0).

    Returns ``(optimum, direction)`` (``direction`` of shape ``(p,)`` binary, ``(p, K)``
    multinomial), or ``(None, None)`` where the solver failed."""
    from scipy.optimize import linprog

    n, p = design.shape
    if n_classes <= 2:
        low, high = y <= 0.0, y >= 1.0
        edge = low | high
        signed = np.where(high, 1.0, -1.0)[edge, None] * design[edge]
        middle = design[~edge]
        a_eq = middle if len(middle) else None
        b_eq = np.zeros(len(middle)) if len(middle) else None
        unknowns = p
    else:
        k = n_classes
        unknowns = p * (k - 1)
        own = y.astype(np.int64)
        parts = []
        for other in range(k):
            rows = np.flatnonzero(own != other)
            entries = []
            for cls, sign, mask in ((own[rows], 1.0, own[rows] < k - 1), (np.full(len(rows), other), -1.0,
                                                                            np.full(len(rows), other < k - 1))):
                r = np.repeat(np.arange(len(rows))[mask], p)
                c = (cls[mask][:, None] * p + np.arange(p)).ravel()
                entries.append((sign * design[rows[mask]].ravel(), r, c))
            data, r, c = (np.concatenate([e[i] for e in entries]) for i in range(3))
            parts.append(sp.csr_matrix((data, (r, c)), shape=(len(rows), unknowns)))
        signed = sp.vstack(parts).tocsr() if parts else sp.csr_matrix((0, unknowns))
        a_eq = b_eq = None
    if signed.shape[0] == 0:
        return 0.0, np.zeros(p) if n_classes <= 2 else np.zeros((p, n_classes))
    res = linprog(-np.asarray(signed.sum(axis=0)).ravel(), A_ub=-signed, b_ub=np.zeros(signed.shape[0]),
                  A_eq=a_eq, b_eq=b_eq, bounds=[(-1.0, 1.0)] * unknowns, method="highs")
    if res.status != 0:
        return None, None
    d = res.x if n_classes <= 2 else np.column_stack([res.x.reshape(n_classes - 1, p).T, np.zeros(p)])
    return float(-res.fun), d


def search(design, y, n_classes, violated, off_span, rounds=LP_ROUNDS):
    """Whether the rows of a logistic model have no finite maximum-likelihood estimate,
    by cutting planes: the programme of :func:`_lp` on the rows taken (``design``,
    under one :func:`conditioning` with the callbacks', ``y``), which grow by the rows the callbacks find.

    - A positive optimum gives a direction separating the rows taken;
      ``violated(direction)`` returns the number of all the rows that violate it and
      some of them ``(design, y)``: none, and it separates all the rows (True); else
      they join the rows taken.
    - An optimum of 0 leaves only directions with every slack 0 on the rows taken:
      their span's complement (the null space of ``design``).  Empty: only the zero
      direction, which separates nothing (False).  Else ``off_span(basis)`` returns the
      number of all the rows with a component along ``basis`` and some of them: none,
      and those directions have every slack 0 on all the rows (False); else they join.

    Returns True, False, or None where the solver failed or ``rounds`` passes did not
    settle it."""
    for _ in range(rounds):
        optimum, direction = _lp(design, y, n_classes)
        if optimum is None:
            return None
        if optimum > SLACK_TOL:
            count, (more_X, more_y) = violated(direction)
        else:
            basis = null_space(design) if len(design) else np.eye(design.shape[1])
            if basis.shape[1] == 0:
                return False
            count, (more_X, more_y) = off_span(basis)
        if count == 0:
            return optimum > SLACK_TOL
        design, y = np.concatenate([design, more_X]), np.concatenate([y, more_y])
    return None


def separated(X, y, eta, n_classes=2, near=None):
    """:func:`search` on rows in memory: ``X`` the design (a column of ones where the
    model has an intercept), ``y`` (binary in [0, 1]; multinomial class indices),
    ``eta`` the fitted linear predictors (``(n,)`` or ``(n, K)``), starting from the
    ``near`` rows nearest the fitted boundary (default ``max(1000, 20 * unknowns)``)."""
    Xs = _conditioned(X)
    eta = np.asarray(eta, dtype=np.float64).reshape(len(X), -1)
    unknowns = X.shape[1] * max(n_classes - 1, 1)
    near = max(1000, 20 * unknowns) if near is None else near
    start = np.argsort(_margin(eta, y), kind="stable")[:near]
    quota = max(100, 2 * unknowns)

    def worst(badness, tol):
        def find(arg):
            bad = badness(Xs, y, arg)
            hits = np.flatnonzero(bad > tol)
            top = hits[np.argsort(-bad[hits], kind="stable")[:quota]]
            return len(hits), (Xs[top], y[top])
        return find

    return search(Xs[start], y[start], n_classes, worst(_violation, SLACK_TOL), worst(_off_span, SPAN_TOL))


def _gathered_worst(shards, objective, shift, scale, badness, tol, quota):
    """The callback of :func:`search` over the shards: one pass, where the rows live."""
    def find(arg):
        parts = shards.map_gather(_shard_worst, objective, shift, scale, badness, arg, tol,
                                  max(1, math.ceil(quota / max(shards.n_groups, 1))), name="dgd-separation-rows")
        return (sum(p[0] for p in parts),
                (np.concatenate([p[1][0] for p in parts]), np.concatenate([p[1][1] for p in parts])))
    return find


def _predictor_bound(objective, params, x_abs_max):
    """An upper bound of ``max |raw_k - raw_l|`` over rows and outputs (binary: of
    ``|raw|``), from X's largest |value| (offset columns included)."""
    coef, intercept = objective.unpack(params)
    per_output = x_abs_max * (np.abs(coef).sum(axis=0) + (1.0 if objective.offset else 0.0)) + np.abs(intercept)
    return float(per_output.max()) * (2.0 if objective.n_outputs > 1 else 1.0)


def applies(objective, alpha):
    """Whether a fit's estimate may not exist for separated classes: an unpenalised
    (``alpha == 0``) logistic or binomial fit."""
    return alpha == 0 and isinstance(objective.loss, (BinaryLogistic, MultinomialLogistic))


def warn_if_separated(est, shards, objective, params, alpha):
    """After an unpenalised logistic or binomial fit (``alpha == 0``): warn
    :class:`~dask_dgd.exceptions.ConvergenceWarning` when the features separate the
    classes (see the module's note).

    Returns True (the linear programme found the classes separated), False (it found
    them not separated, or not an unpenalised logistic fit) or None (not decided: more
    than :data:`LP_MAX_UNKNOWNS` unknowns, or not settled in :data:`LP_ROUNDS` passes;
    a warning says the classes *may* be separated where R's rule finds numerically
    certain rows).
    """
    if not applies(objective, alpha):
        return False
    params = np.asarray(params.toarray() if sp.issparse(params) else params, dtype=np.float64).ravel()
    name = type(est).__name__
    n_classes = max(objective.n_outputs, 2)
    unknowns = (objective.n_features + objective.fit_intercept) * (n_classes - 1)
    testable = unknowns <= LP_MAX_UNKNOWNS
    x_abs_max = getattr(shards, "x_abs_max", math.inf)
    if not testable and math.isfinite(x_abs_max) and _predictor_bound(objective, params, x_abs_max) <= SCREEN_ETA:
        return None  # not tested, and no fitted probability near 0 or 1: no pass over the data
    near = max(1000, 20 * unknowns) if testable else 0
    parts = shards.map_gather(_shard_screen, objective, params, near, shards.n_rows, name="dgd-separation")
    certain = sum(p[0] for p in parts)
    untested = too_many_unknowns(unknowns)
    if testable:
        rows = np.concatenate([p[2][0] for p in parts])
        shift, scale = conditioning(rows, np.max([p[1] for p in parts], axis=0), objective.fit_intercept)
        quota = max(100, 2 * unknowns)
        found = search((rows - shift) / scale, np.concatenate([p[2][1] for p in parts]), n_classes,
                       _gathered_worst(shards, objective, shift, scale, _violation, SLACK_TOL, quota),
                       _gathered_worst(shards, objective, shift, scale, _off_span, SPAN_TOL, quota))
        if found is False:
            return False  # the estimate exists (R's rule alone may warn here: large effects, many rows)
        if found:
            warnings.warn(separation_message(name, LP_FINDING), ConvergenceWarning, stacklevel=user_stacklevel())
            return True
        untested = NOT_SETTLED
    if certain:
        warnings.warn(separation_message(name, certain_finding(certain, "training row(s)"), untested),
                      ConvergenceWarning, stacklevel=user_stacklevel())
    return None


def mle_missing(X, y, family):
    """Whether the maximum-likelihood estimate of one cell does not exist: its
    observed design ``X`` (n, p; the intercept's column of ones first) and target
    ``y`` (binomial: proportions in [0, 1]; poisson: counts).

    It does not exist exactly when a direction ``d != 0`` of the coefficients
    increases the likelihood without bound (complete or quasi-complete separation,
    Albert and Anderson 1984): ``x . d >= 0`` on every step whose target is 1, ``x . d
    <= 0`` where it is 0, ``x . d = 0`` in between (binomial; poisson: ``<= 0`` where
    the count is 0, ``= 0`` where it is positive), with some inequality strict.  The
    linear programme of Konis (2007), as R's ``detectseparation`` (:func:`_lp`, on all
    the rows, under :func:`conditioning`); a positive optimum is a separation."""
    if X.shape[0] == 0:
        return False
    Xs = _conditioned(X)
    # poisson: a zero count is a binomial 0; a positive count lies on x . d = 0
    target = y if family == "binomial" else np.where(y <= 0.0, 0.0, 0.5)
    optimum, _ = _lp(Xs, target, 2)
    return bool(optimum is not None and optimum > SLACK_TOL)

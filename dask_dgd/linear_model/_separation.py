"""Separated classes: the maximum-likelihood estimate of a logistic model does not exist.

When the features separate the classes (completely, or quasi-completely with ties on
the boundary; Albert and Anderson 1984), the unpenalised logistic likelihood has no
maximum: the coefficients grow with every iteration and the fit stops where ``tol`` or
``max_iter`` says, not at an estimate.  After an unpenalised fit (``alpha == 0``) of
the logistic or binomial loss, one pass over the shards counts, where the rows live,

- the rows of positive weight whose fitted probability is within ``10 eps`` of 0 or 1
  (R's ``glm.fit`` rule, "fitted probabilities numerically 0 or 1 occurred"; for the
  multinomial model, of any class);
- those whose linear predictor is beyond :data:`SCREEN_ETA` (a fitted probability
  within 3.4e-4 of 0 or 1; binary models): a separated fit may stop on the way out,
  before R's rule applies.

A binary model of at most :data:`LP_ALWAYS_VALUES` values of X is tested exactly
whatever the screen says (a fit by first-order steps may stop before any row is
screened).  Otherwise, when some row is screened, a binary model of at most
:data:`LP_MAX_VALUES` values of X and :data:`LP_MAX_COLUMNS` columns (wherever they
live: its rows of positive weight are gathered) is tested exactly by
the linear programme of Konis (2007), as R's ``detectseparation`` (:func:`mle_missing`;
on the rows nearest the fitted boundary first, which clears most finite fits on a few
rows per column, see :func:`separated`):
the warning then says the classes are separated, and a finite estimate is never
reported (R's rule alone also fires on large effects over many rows).  Larger and
multinomial models warn by R's rule alone, saying the classes *may* be separated (a
multinomial model's quasi-separation with no fitted probability that close to 0 or 1,
or a larger binary one stopped short of it, goes unreported).  The pass is skipped when
X's largest value bounds every linear predictor within the screen.
"""

import math
import warnings

import numpy as np
import scipy.sparse as sp

from .._backend import get_namespace, is_sparse, to_numpy
from .._engine.data.blocks import _block_error
from .._validation import user_stacklevel
from ..exceptions import ConvergenceWarning
from ..losses._pointwise import BinaryLogistic, MultinomialLogistic

__all__ = ["CERTAIN", "LP_ALWAYS_VALUES", "LP_MAX_COLUMNS", "LP_MAX_VALUES", "SCREEN_ETA", "certain_mask",
           "mle_missing", "separated", "separation_message", "warn_if_separated"]

#: A fitted probability within this of 0 or 1 is numerically certain (R's glm: 10 eps).
CERTAIN = 10 * np.finfo(np.float64).eps
#: A row whose linear predictor is beyond this in absolute value (binary) screens the
#: fit for the exact test (the pointwise climate GLMs' screen too).
SCREEN_ETA = 8.0
#: The most values of X (rows x columns, the intercept's column included) tested by the
#: linear programme (on the driver: about a second at this size and a few columns) ...
LP_MAX_VALUES = 1_000_000
#: ... and the most columns (its time grows with them: 2,000 x 500 took 4 s).
LP_MAX_COLUMNS = 100
#: At most this many values, the exact test runs on every unpenalised binary fit.
LP_ALWAYS_VALUES = 100_000


def certain_mask(prob, xp):
    """Rows whose probability (of class 1, shape ``(n,)``; or of each class, shape
    ``(n, K)``) is within :data:`CERTAIN` of 0 or 1 for some class."""
    certain = (prob < CERTAIN) | (prob > 1 - CERTAIN)
    return xp.any(certain, axis=1) if len(prob.shape) == 2 else certain


def separation_message(name, finding, exact=True):
    """The warning of a separated fit, ``finding`` saying how it was found; ``exact``:
    the linear programme confirmed it (else R's rule alone: "may")."""
    consequence = (
        "the coefficients grow with the iterations and stop where tol and max_iter say, and their standard errors "
        "and p-values are not valid; pass alpha > 0 for a finite penalised fit, or leave out the separating features"
    )
    if exact:
        return (f"{name}: {finding}: the features separate the classes (completely or quasi-completely), so that the "
                f"maximum-likelihood estimate does not exist: {consequence}")
    return (
        f"{name}: {finding}: the features may separate the classes (completely or quasi-completely; not tested "
        f"exactly: the exact test, a linear programme, runs on binary models of at most {LP_MAX_VALUES:,} values "
        f"of X and {LP_MAX_COLUMNS} columns), or the effects are large; if they separate them, the "
        f"maximum-likelihood estimate does not exist: {consequence}"
    )


def certain_finding(n_rows, where):
    """R's rule, as :func:`separation_message`'s ``finding``."""
    return f"fitted probabilities numerically 0 or 1 occurred for {n_rows} {where} (as R's glm warns)"


LP_FINDING = ("a linear programme (Konis 2007, as R's detectseparation) finds a direction of the coefficients along "
              "which the likelihood grows without bound")


def _shard_screen(shard, objective, params):
    """The rows of a shard with positive weight whose fitted probability is numerically
    certain, and those whose linear predictor is beyond :data:`SCREEN_ETA` (binary)."""
    certain = screened = 0
    for block in shard.blocks:
        if block.n_rows == 0:
            continue
        try:
            xp = get_namespace(block.X)
            raw = objective.raw_prediction(params, block.X)
            with np.errstate(over="ignore", under="ignore"):
                prob = objective.loss.inverse_link(raw, xp)
            weighted = None if block.sample_weight is None else block.sample_weight > 0
            rows = [certain_mask(prob, xp)]
            if objective.n_outputs == 1:
                rows.append(xp.abs(raw[:, 0]) > SCREEN_ETA)
            counts = [int(xp.sum(xp.astype(r if weighted is None else r & weighted, xp.int64))) for r in rows]
            certain += counts[0]
            screened += counts[1] if len(counts) > 1 else 0
        except Exception as err:  # name the block
            raise _block_error(err, block) from err
    return certain, screened


def _predictor_bound(objective, params, x_abs_max):
    """An upper bound of ``max |raw_k - raw_l|`` over rows and outputs (binary: of
    ``|raw|``), from X's largest |value| (offset columns included)."""
    coef, intercept = objective.unpack(params)
    per_output = x_abs_max * (np.abs(coef).sum(axis=0) + (1.0 if objective.offset else 0.0)) + np.abs(intercept)
    return float(per_output.max()) * (2.0 if objective.n_outputs > 1 else 1.0)


def _shard_design(shard, objective, params):
    """The observed design (``[1, X]`` with an intercept, else ``X``; offset columns left
    out), targets and fitted linear predictors of a shard's rows of positive weight, on
    the host (the exact test's input)."""
    Xs, ys, etas = [], [], []
    for block in shard.blocks:
        eta = to_numpy(objective.raw_prediction(params, block.X))[:, 0]
        X = objective.features_of(block.X)
        X = X.toarray() if sp.issparse(X) else (to_numpy(X.toarray()) if is_sparse(X) else to_numpy(X))
        y = to_numpy(block.y).astype(np.float64)
        keep = np.ones(len(y), dtype=bool) if block.sample_weight is None else to_numpy(block.sample_weight) > 0
        Xs.append(np.asarray(X, dtype=np.float64)[keep])
        ys.append(y[keep])
        etas.append(np.asarray(eta, dtype=np.float64)[keep])
    X = np.concatenate(Xs) if Xs else np.zeros((0, objective.n_features))
    design = np.column_stack([np.ones(len(X)), X]) if objective.fit_intercept else X
    return (design, np.concatenate(ys) if ys else np.zeros(0),
            np.concatenate(etas) if etas else np.zeros(0))


def separated(X, y, eta):
    """Whether the rows ``X`` (the design: a column of ones where the model has an
    intercept), ``y`` (in [0, 1]) have no finite logistic estimate (:func:`mle_missing`),
    trying a subset first.

    Any direction that separates all the rows satisfies the sign constraints on the
    rows nearest the fitted boundary (smallest ``|eta|``; where classes overlap) too.
    When those rows have full column rank and their linear programme finds no direction
    that moves any of them (only ``d = 0`` satisfies their constraints), no direction
    separates all the rows: exact, and on a few rows per column.  Otherwise the
    programme runs on all the rows."""
    m = max(1000, 20 * X.shape[1])
    if len(y) > m:
        near = np.argsort(np.abs(eta), kind="stable")[:m]
        Xs = X[near]
        scale = np.max(np.abs(Xs), axis=0)
        full_rank = np.linalg.matrix_rank(Xs / np.where(scale > 0, scale, 1.0)) == X.shape[1]
        if full_rank and not mle_missing(Xs, y[near], "binomial"):
            return False
    return mle_missing(X, y, "binomial")


def warn_if_separated(est, shards, objective, params, alpha):
    """After an unpenalised logistic or binomial fit (``alpha == 0``): warn
    :class:`~dask_dgd.exceptions.ConvergenceWarning` when the features separate the
    classes (see the module's note).

    Returns True (the linear programme found the classes separated), None (R's rule
    found numerically certain rows and no exact test ran: a multinomial model, or more
    than :data:`LP_MAX_VALUES` values of X or :data:`LP_MAX_COLUMNS` columns) or False
    (not separated, not screened, or not an unpenalised logistic fit).
    """
    if alpha != 0 or not isinstance(objective.loss, (BinaryLogistic, MultinomialLogistic)):
        return False
    params = np.asarray(params.toarray() if sp.issparse(params) else params, dtype=np.float64).ravel()
    name = type(est).__name__
    columns = objective.n_features + objective.fit_intercept
    small = objective.n_outputs == 1 and shards.n_rows * columns <= LP_ALWAYS_VALUES
    x_abs_max = getattr(shards, "x_abs_max", math.inf)
    if not small and math.isfinite(x_abs_max) and _predictor_bound(objective, params, x_abs_max) <= SCREEN_ETA:
        return False  # no row can be screened: no pass over the data
    certain = screened = 0
    if not small:
        counts = shards.map_gather(_shard_screen, objective, params, name="dgd-separation")
        certain, screened = (sum(c[i] for c in counts) for i in (0, 1))
    testable = objective.n_outputs == 1 and shards.n_rows * columns <= LP_MAX_VALUES and columns <= LP_MAX_COLUMNS
    if small or (screened and testable):
        parts = shards.map_gather(_shard_design, objective, params, name="dgd-separation-design")
        if not separated(*(np.concatenate([p[i] for p in parts]) for i in range(3))):
            return False  # the estimate exists (R's rule alone may warn here: large effects, many rows)
        warnings.warn(separation_message(name, LP_FINDING), ConvergenceWarning, stacklevel=user_stacklevel())
        return True
    if not certain:
        return False
    warnings.warn(separation_message(name, certain_finding(certain, "training row(s)"), exact=False),
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
    linear programme of Konis (2007), as R's ``detectseparation``: maximise the sum of
    ``|x . d|`` over the steps at 0 or 1 subject to those signs and ``|d_j| <= 1``
    (the columns scaled to a largest value of 1); a positive optimum is a
    separation."""
    from scipy.optimize import linprog

    if X.shape[0] == 0:
        return False
    scale = np.max(np.abs(X), axis=0)
    Xs = X / np.where(scale > 0, scale, 1.0)
    low = y <= 0.0
    high = (y >= 1.0) if family == "binomial" else np.zeros_like(low)
    edge = low | high
    if not edge.any():
        return False
    signed = np.where(high, 1.0, -1.0)[edge, None] * Xs[edge]
    middle = ~edge
    res = linprog(-signed.sum(axis=0), A_ub=-signed, b_ub=np.zeros(len(signed)),
                  A_eq=Xs[middle] if middle.any() else None, b_eq=np.zeros(int(middle.sum())) if middle.any() else None,
                  bounds=[(-1.0, 1.0)] * X.shape[1], method="highs")
    return bool(res.status == 0 and -res.fun > 1e-6)

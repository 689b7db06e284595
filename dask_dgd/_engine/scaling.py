r"""Training in scaled coordinates: a change of variables that keeps the optimum.

Unscaled columns (a year near 1950 beside a population in the hundreds of thousands)
make the objective's curvature differ by many orders of magnitude from one
coefficient to another; a solver whose stop rule and steps are in those units stops
short or diverges.  glum and Spark MLlib standardise the columns internally; so do the
full-batch solvers here (``"newton"``, ``"cd"``, ``"lbfgs"``), without touching the data:

.. math:: \beta_j = s_j / \sigma_j, \qquad b = c - \sum_j \mu_j \beta_j,

with :math:`\mu_j` the weighted mean of column :math:`j` and :math:`\sigma_j` its
weighted standard deviation, widened by the L2 penalty's share (:func:`column_scaling`)
(centring only when the model has an intercept to take it, on dense and sparse columns
alike: it is a map of the parameters, the blocks keep their data).
The solver sees the objective :math:`F(T s)` of the scaled parameters :math:`s`: its
gradient :math:`T^\top \nabla F`, its Hessian :math:`T^\top H T` (summed by the blocks
from their own centred and scaled columns, :mod:`.solvers.curvature`) and the L1 weights
:math:`\lambda / \sigma_j` are those of standardised columns, while every evaluation
is the model's own objective (loss and penalty in original units) at the original
parameters :math:`T s`.  So the minimiser is the same one, only better conditioned,
and the tolerance ``tol`` is judged on the gradient of standardised columns
(scikit-learn's and glum's meaning on standardised data), whatever the data's units.

:func:`column_scaling` measures :math:`\mu, \sigma` on an even sample of rows (any
centre and scale keep the optimum; they only need to be close), with the L2 penalty's
share of the curvature in :math:`\sigma` (the diagonal of the Hessian, not only of the
data);
:class:`ScaledTraining` is the training objective in scaled coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:

    import numpy.typing as npt

    from ..losses import LinearObjective, Penalty
    from ..losses._path import PathObjective, PathPenalty
    from .data.blocks import Shard
    from .data.shards import ShardSet
    from .objective import BoundPenalty, LinearTraining
    from .runtime.group_steps import BlockSums, Draw
    from .runtime.reduce import Partial
    from .solvers.curvature import LeastSquaresModel

__all__ = ["ColumnScaling", "ScaledPenalty", "ScaledTraining", "column_scaling", "ridge_level"]


@dataclass(frozen=True, eq=False)
class ColumnScaling:
    r"""The map :math:`T` from scaled to original parameters of a linear model.

    Parameters
    ----------
    mean : ndarray of shape (n_features,)
        The columns' centres :math:`\mu` (zeros: no centring).
    scale : ndarray of shape (n_features,)
        The columns' scales :math:`\sigma > 0`.
    n_outputs : int
    fit_intercept : bool

    Notes
    -----
    The parameter layout is :class:`~dask_dgd.losses.LinearObjective`'s: the
    ``(n_features, n_outputs)`` coefficients row by row, then the intercepts.
    """

    mean: np.ndarray
    scale: np.ndarray
    n_outputs: int = 1
    fit_intercept: bool = True
    centred: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", np.asarray(self.mean, dtype=np.float64))
        object.__setattr__(self, "scale", np.asarray(self.scale, dtype=np.float64))
        object.__setattr__(self, "centred", bool(self.fit_intercept and np.any(self.mean != 0)))

    @property
    def n_coef(self) -> int:
        return self.scale.size * self.n_outputs

    def to_original(self, params: npt.ArrayLike) -> np.ndarray:
        """:math:`T s`: original parameters from scaled ones."""
        s = np.asarray(params, dtype=np.float64)
        d, k = self.scale.size, self.n_outputs
        coef = s[: d * k].reshape(d, k) / self.scale[:, None]
        out = s.copy()
        out[: d * k] = coef.ravel()
        if self.centred:
            out[d * k:] = s[d * k:] - self.mean @ coef
        return out

    def to_scaled(self, params: npt.ArrayLike) -> np.ndarray:
        """:math:`T^{-1} p`: scaled parameters from original ones."""
        p = np.asarray(params, dtype=np.float64)
        d, k = self.scale.size, self.n_outputs
        coef = p[: d * k].reshape(d, k)
        out = p.copy()
        out[: d * k] = (coef * self.scale[:, None]).ravel()
        if self.centred:
            out[d * k:] = p[d * k:] + self.mean @ coef
        return out

    def grad_to_scaled(self, grad: npt.ArrayLike) -> np.ndarray:
        r""":math:`T^\top g` along the first axis: the gradient (or the rows of a
        matrix) with respect to the scaled parameters."""
        g = np.asarray(grad, dtype=np.float64)
        d, k = self.scale.size, self.n_outputs
        G = g.reshape(g.shape[0], -1)
        coef = G[: d * k].reshape(d, k, -1)
        if self.centred:
            coef = coef - self.mean[:, None, None] * G[d * k:].reshape(1, k, -1)
        out = G.copy()
        out[: d * k] = (coef / self.scale[:, None, None]).reshape(d * k, -1)
        return out.reshape(g.shape)

    def columns(self, X: Any) -> np.ndarray:
        """A sample of rows (dense or CSR; any offset columns after the features kept as
        they are) in these coordinates: the features centred and scaled, dense."""
        Z = np.array(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
        d = self.scale.size
        Z[:, :d] = (Z[:, :d] - (self.mean if self.centred else 0.0)) / self.scale
        return Z

    def largest_ridge(self, l2: float) -> float:
        r"""The largest diagonal entry of an L2 strength ``l2`` in these coordinates
        (:math:`l_2 / \sigma_j^2`)."""
        return float(l2) * float(np.max(1.0 / self.scale**2, initial=0.0))

    @cached_property
    def l1_factor(self) -> np.ndarray:
        """The factor of every parameter's L1 weight in scaled coordinates
        (:math:`1/\\sigma_j` on the coefficients)."""
        factor = np.ones(self.n_coef + (self.n_outputs if self.fit_intercept else 0))
        factor[: self.n_coef] = np.repeat(1.0 / self.scale, self.n_outputs)
        return factor


#: Rows of the even sample (over all blocks) the columns' centres and scales are measured
#: on (dask config ``dgd.scaling-sample-rows``): any centre and scale give the same
#: optimum, so estimates serve; a sample is gathered in one round trip where two passes
#: over the data cost as much as two of L-BFGS's iterations (2,000,000 x 100).
SCALING_SAMPLE_ROWS = 65536


def _weighted_moments(X: Any, w: np.ndarray, centre: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, sum w (x - c)^2 / sum w)`` of the columns of ``X`` (dense or CSR), ``c``
    the mean when ``centre`` else zero; the squares of a sparse matrix's implicit zeros
    counted without cancellation."""
    total = float(w.sum())
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        mean = np.asarray(X.T @ w, dtype=np.float64).ravel() / total
        c = mean if centre else np.zeros_like(mean)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        ws = w[rows]
        d = X.shape[1]
        out = np.bincount(X.indices, ws * (X.data - c[X.indices]) ** 2, minlength=d)
        full = np.bincount(X.indices, minlength=d) == X.shape[0]  # no implicit zeros
        zeros = np.where(full, 0.0, total - np.bincount(X.indices, ws, minlength=d))
        return mean, (out + c**2 * zeros) / total
    X = np.asarray(X, dtype=np.float64)
    mean = w @ X / total
    c = mean if centre else np.zeros_like(mean)
    D = X - c  # squared in place: one temporary of X's size, not two
    np.square(D, out=D)
    return mean, w @ D / total


def ridge_level(objective: LinearObjective, penalty: Penalty) -> float:
    r""":math:`\lambda / \kappa`: the L2 strength over the loss's curvature bound (1 where
    it has none), what a column's variance is compared with in its scale."""
    bound = getattr(objective.loss, "curvature_bound", None)
    return float(penalty.l2_strength) / (1.0 if bound is None else float(bound))


def column_scaling(shards: ShardSet, objective: LinearObjective | PathObjective, ridge: float = 0.0) -> ColumnScaling:
    r"""The :class:`ColumnScaling` of a linear ``objective``'s columns on ``shards`` (or
    a stacked path's: every model's columns scaled alike).

    Weighted means, and scales :math:`\sigma_j = \sqrt{v_j + r}` from the weighted
    variances :math:`v_j` about them and ``ridge`` :math:`r` (:func:`ridge_level`:
    :math:`\lambda/\kappa`), on an even sample of ``dgd.scaling-sample-rows`` rows
    (:data:`SCALING_SAMPLE_ROWS`; all rows of smaller data), in block order, so they
    depend only on the data and its chunking.  :math:`\sigma_j^2` is then proportional
    to the Hessian's diagonal of an average curvature, the penalty's share included
    (the Jacobi preconditioner): a rare sparse column, whose variance is far below the
    L2 strength, would otherwise leave the penalty's curvature :math:`\lambda/v_j`
    unscaled, and L-BFGS needs hundreds of iterations on a hashed or one-hot design
    where it needs tens with it.  Without an intercept the columns are not centred and
    scaled by their root mean square.  A column that does not vary in the sample (or is
    all zeros) keeps scale :math:`\sqrt{r}`, or 1 without a ridge.
    """
    import dask

    from .objective import gather_sample

    d = objective.n_features
    outputs = objective.n_params // (d + objective.fit_intercept)  # a stacked path's: its columns' outputs
    sample = gather_sample(shards, int(dask.config.get("dgd.scaling-sample-rows", SCALING_SAMPLE_ROWS)))
    if sample is None or not np.sum(sample[2]) > 0:
        return ColumnScaling(np.zeros(d), np.ones(d), outputs, objective.fit_intercept)
    X, _, w = sample
    mean, var = _weighted_moments(X[:, :d], np.asarray(w, dtype=np.float64), objective.fit_intercept)
    scale = np.sqrt(np.maximum(var, 0.0))
    # a column that varies only at rounding level of its centre is constant
    flat = ~(scale > 1e-12 * np.maximum(np.abs(mean), 1e-300))
    scale = np.sqrt(scale**2 + ridge)
    scale[flat] = math.sqrt(ridge) if ridge > 0 else 1.0
    centre = mean if objective.fit_intercept else np.zeros(d)
    return ColumnScaling(centre, scale, outputs, objective.fit_intercept)


@dataclass(frozen=True)
class ScaledPenalty:
    """The penalty's parts the solvers use, in scaled coordinates: the L1 thresholds are
    ``lambda / sigma_j`` (the L2 part is the model's, in its original units, inside
    the objective's value); ``base`` a path's in :class:`ScaledPathPenalty`."""

    base: BoundPenalty | PathPenalty
    scaling: ColumnScaling

    @property
    def has_l1(self) -> bool:
        return self.base.has_l1

    @property
    def decay_mask(self) -> Any:
        return self.base.decay_mask

    def prox(self, params: npt.ArrayLike, step: float) -> np.ndarray:
        params = np.asarray(params, dtype=np.float64)
        out = params.copy()
        n = self.scaling.n_coef
        bound = cast("BoundPenalty", self.base)  # (ScaledPathPenalty has its own prox)
        threshold = float(step) * bound.penalty.l1_strength * self.scaling.l1_factor[:n]
        out[:n] = np.sign(params[:n]) * np.maximum(np.abs(params[:n]) - threshold, 0.0)
        return out


@dataclass(frozen=True)
class ScaledPathPenalty(ScaledPenalty):
    """A stacked path's :class:`~dask_dgd.losses._path.PathPenalty` (``base``) in scaled
    coordinates, for proximal gradient: column ``k``'s thresholds on feature ``j`` are
    ``l1_k / sigma_j``, and a multinomial's recentring (``recenter``) minimises
    ``l1_k |w| / sigma_j + l2_k w^2 / (2 sigma_j^2)`` along each class row."""

    def prox(self, params: npt.ArrayLike, step: float) -> np.ndarray:
        from ..losses._penalty import shifted_to_penalty_minimum

        pen = cast("PathPenalty", self.base)
        d, K, m = pen.n_features, len(pen.l1), pen.n_outputs
        out = np.array(params, dtype=np.float64, copy=True).reshape(-1, K, m)
        inv = 1.0 / self.scaling.scale[:, None, None]
        l1 = np.asarray(pen.l1, dtype=np.float64)[None, :, None] * inv
        coef = out[:d]
        coef = np.sign(coef) * np.maximum(np.abs(coef) - float(step) * l1, 0.0)
        if pen.recenter and m > 1:
            coef = shifted_to_penalty_minimum(coef, l1, np.asarray(pen.l2, dtype=np.float64)[None, :, None] * inv**2)
        out[:d] = coef
        return out.ravel()


@dataclass(frozen=True)
class ScaledTraining:
    """A linear model's training objective (``base``, a
    :class:`~.objective.LinearTraining`) in the scaled coordinates of ``scaling`` (see
    the module docstring).  The blocks evaluate the base objective at the original
    parameters; the driver maps the gradient.  With ``curvature="gram"`` every
    evaluation also reduces the Hessian sums in scaled coordinates, with ``"qr"`` the
    R factor of the Newton step's least-squares problem (:mod:`.solvers.curvature`), and
    :meth:`hessian` gives the model from them.  Everything else is the base objective's."""

    base: LinearTraining
    scaling: ColumnScaling
    curvature: str | None = None

    def __getattr__(self, name: str) -> Any:
        if name in ("base", "scaling", "curvature") or name.startswith("__"):  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self.base, name)

    # ------------------------------------------------------------- worker side
    def group_sums(self, shard: Shard, params: np.ndarray, aux: Any, draw: Draw | None, local: Any,
                   memory: dict | None = None) -> tuple[dict[int, BlockSums], Any]:
        original = self.scaling.to_original(params)
        sums, local_grad = self.base.group_sums(shard, original, aux, draw, local, memory)
        if self.curvature is None:
            return sums, local_grad
        from .solvers.curvature import block_r_factor, block_scaled_gram, with_block_extra

        obj = self.base.objective
        if self.curvature == "qr":
            return with_block_extra(sums, shard, "r", lambda b: block_r_factor(
                obj, original, b.X, b.y, b.sample_weight, self.scaling)), local_grad
        return with_block_extra(sums, shard, "hessian", lambda b: block_scaled_gram(
            obj, original, b.X, b.y, b.sample_weight, self.scaling, memory, ("centred", b.index))), local_grad

    # ------------------------------------------------------------- driver side
    def finish(self, partial: Partial, params: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.base.finish(partial, self.scaling.to_original(params))
        return value, self.scaling.grad_to_scaled(grad)

    def l1_value(self, params: np.ndarray) -> float:
        return self.base.l1_value(self.scaling.to_original(params))

    @cached_property
    def ridge(self) -> np.ndarray:
        """The L2 penalty's Hessian diagonal in scaled coordinates."""
        return self.base.penalty_spec.l2_strength * self.base.penalty.decay_mask * self.scaling.l1_factor**2

    @cached_property
    def invariant(self) -> np.ndarray:
        """Orthonormal columns along which the objective does not change (a softmax's
        unpenalised rows, :func:`~.solvers.curvature.shift_directions`), in scaled
        coordinates: a Newton step holds still along them."""
        from .solvers.curvature import shift_directions

        return shift_directions(self.base.objective, (self.ridge > 0) | (self.l1_weights() > 0))

    def gauge(self, params: np.ndarray) -> np.ndarray:
        """``params`` (scaled) moved along the directions only the penalty sees: for a
        softmax, each row of coefficients (a feature's, the intercepts) shifted by the
        constant that minimises its penalty (glmnet's recentring; the row's strengths
        are equal across the classes), a row no penalty sees to its classes' mean zero
        (scikit-learn's convention).  Other losses: unchanged."""
        from ..losses import MultinomialLogistic
        from ..losses._penalty import softmax_gauge

        if not isinstance(self.base.objective.loss, MultinomialLogistic):
            return params
        return softmax_gauge(params, self.l1_weights(), self.ridge, self.base.objective.n_outputs)

    def hessian(self, partial: Partial) -> np.ndarray | LeastSquaresModel:
        """The Hessian of the smooth objective in scaled coordinates (``"gram"``), or the
        :class:`~.solvers.curvature.LeastSquaresModel` of the Newton step (``"qr"``);
        either definite along :attr:`invariant`."""
        from .solvers.curvature import LeastSquaresModel, pinned_hessian

        if self.curvature == "qr":
            model = LeastSquaresModel(partial.extras["r"].R, float(partial.weight_sum), self.ridge)
            return model.pinned(self.invariant)
        H = partial.extras["hessian"] / partial.weight_sum
        H[np.diag_indices_from(H)] += self.ridge
        return pinned_hessian(H, self.invariant)

    @property
    def hessian_size(self) -> int:
        """Floats of the curvature one partial carries."""
        q = self.base.n_params
        return (q + 1) ** 2 if self.curvature == "qr" else q * q

    def least_squares(self) -> ScaledTraining | None:
        """The same objective with Newton steps from R factors (None when it has them)."""
        return None if self.curvature == "qr" else ScaledTraining(self.base, self.scaling, "qr")

    def l1_weights(self) -> np.ndarray:
        """The L1 strength of every parameter in scaled coordinates (zero for the intercept)."""
        return self.base.penalty_spec.l1_strength * self.base.penalty.decay_mask * self.scaling.l1_factor

    @cached_property
    def penalty(self) -> ScaledPenalty | ScaledPathPenalty:
        from .objective import PathTraining

        if isinstance(self.base, PathTraining):
            return ScaledPathPenalty(self.base.penalty, self.scaling)
        return ScaledPenalty(self.base.penalty, self.scaling)

    def lipschitz(self, shards: ShardSet, params: np.ndarray) -> float:
        """The base's Lipschitz estimate in scaled coordinates (proximal gradient's step)."""
        return self.base.lipschitz(shards, params, self.scaling)

r"""Training in scaled coordinates: a change of variables that keeps the optimum.

Unscaled columns (a year near 1950 beside a population in the hundreds of thousands)
make the objective's curvature differ by many orders of magnitude from one
coefficient to another; a solver whose stop rule and steps are in those units stops
short or diverges.  glum and Spark MLlib standardise the columns internally; so do the
full-batch solvers here (``"newton"``, ``"cd"``, ``"lbfgs"``), without touching the data:

.. math:: \beta_j = s_j / \sigma_j, \qquad b = c - \sum_j \mu_j \beta_j,

with :math:`\mu_j, \sigma_j` the weighted mean and standard deviation of column
:math:`j` (centring only when the model has an intercept to take it, on dense and
sparse columns alike: it is a map of the parameters, the blocks keep their data).
The solver sees the objective :math:`F(T s)` of the scaled parameters :math:`s`: its
gradient :math:`T^\top \nabla F`, its Hessian :math:`T^\top H T` (summed by the blocks
from their own centred and scaled columns, :mod:`.curvature`) and the L1 weights
:math:`\lambda / \sigma_j` are those of standardised columns, while every evaluation
is the model's own objective (loss and penalty in original units) at the original
parameters :math:`T s`.  So the minimiser is the same one, only better conditioned,
and the tolerance ``tol`` is judged on the gradient of standardised columns
(scikit-learn's and glum's meaning on standardised data), whatever the data's units.

:func:`column_scaling` measures :math:`\mu, \sigma` (two passes over the blocks, the
second centred, summed in the fixed block tree); :class:`ScaledTraining` is the
training objective in scaled coordinates.
"""

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .._backend import get_namespace, is_sparse, to_numpy

__all__ = ["ColumnScaling", "ScaledPenalty", "ScaledTraining", "column_scaling"]


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

    def __post_init__(self):
        object.__setattr__(self, "mean", np.asarray(self.mean, dtype=np.float64))
        object.__setattr__(self, "scale", np.asarray(self.scale, dtype=np.float64))
        object.__setattr__(self, "centred", bool(self.fit_intercept and np.any(self.mean != 0)))

    @property
    def n_coef(self):
        return self.scale.size * self.n_outputs

    def to_original(self, params):
        """:math:`T s`: original parameters from scaled ones."""
        s = np.asarray(params, dtype=np.float64)
        d, k = self.scale.size, self.n_outputs
        coef = s[: d * k].reshape(d, k) / self.scale[:, None]
        out = s.copy()
        out[: d * k] = coef.ravel()
        if self.centred:
            out[d * k:] = s[d * k:] - self.mean @ coef
        return out

    def to_scaled(self, params):
        """:math:`T^{-1} p`: scaled parameters from original ones."""
        p = np.asarray(params, dtype=np.float64)
        d, k = self.scale.size, self.n_outputs
        coef = p[: d * k].reshape(d, k)
        out = p.copy()
        out[: d * k] = (coef * self.scale[:, None]).ravel()
        if self.centred:
            out[d * k:] = p[d * k:] + self.mean @ coef
        return out

    def grad_to_scaled(self, grad):
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

    @cached_property
    def l1_factor(self):
        """The factor of every parameter's L1 weight in scaled coordinates
        (:math:`1/\\sigma_j` on the coefficients)."""
        factor = np.ones(self.n_coef + (self.n_outputs if self.fit_intercept else 0))
        factor[: self.n_coef] = np.repeat(1.0 / self.scale, self.n_outputs)
        return factor


def _block_first_moments(block, n_features):
    """``[sum w, sum w x_1, ..., sum w x_d]`` of one block's feature columns."""
    X, w = _features_weights(block, n_features)
    if X is None:
        return np.zeros(n_features + 1)
    if is_sparse(X):
        col = np.asarray(to_numpy(X.T @ w), dtype=np.float64).ravel()
    else:
        xp = get_namespace(X)
        col = np.asarray(to_numpy(w @ xp.astype(X, xp.float64, copy=False)), dtype=np.float64).ravel()
    return np.concatenate([[float(to_numpy(w).sum())], col])


def _block_centred_squares(block, n_features, mean):
    """``sum w (x_j - mean_j)^2`` of one block's feature columns."""
    X, w = _features_weights(block, n_features)
    if X is None:
        return np.zeros(n_features)
    if is_sparse(X):  # the stored entries' squares about the centre, and the zeros'
        X = sp.csr_matrix(to_numpy(X) if not sp.issparse(X) else X, dtype=np.float64)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        ws = w[rows]
        out = np.bincount(X.indices, ws * (X.data - mean[X.indices]) ** 2, minlength=n_features)
        # the weight of the implicit zeros: none where a column stores every row
        full = np.bincount(X.indices, minlength=n_features) == X.shape[0]
        zeros = np.where(full, 0.0, w.sum() - np.bincount(X.indices, ws, minlength=n_features))
        return out + mean**2 * zeros
    xp = get_namespace(X)
    Xc = xp.astype(X, xp.float64, copy=False) - xp.asarray(mean, device=getattr(X, "device", None))
    return np.asarray(to_numpy(w @ (Xc * Xc)), dtype=np.float64).ravel()


def _features_weights(block, n_features):
    """A block's feature columns (not its offset columns) and its weights (float64, in
    the block's namespace); ``(None, None)`` for an empty block."""
    if block.n_rows == 0:
        return None, None
    X = block.X[:, :n_features]
    if is_sparse(X):
        w = np.ones(block.n_rows) if block.sample_weight is None else to_numpy(block.sample_weight)
        return X, np.asarray(w, dtype=np.float64)
    xp = get_namespace(X)
    if block.sample_weight is None:
        return X, xp.ones(block.n_rows, dtype=xp.float64, device=getattr(X, "device", None))
    return X, xp.astype(block.sample_weight, xp.float64, copy=False)


def column_scaling(shards, objective):
    r"""The :class:`ColumnScaling` of a linear ``objective``'s columns on ``shards``.

    Weighted means (first pass) and standard deviations about them (second pass),
    each summed in the fixed block tree.  Without an intercept the columns are not
    centred and scaled by their root mean square.  A column that does not vary (or is
    all zeros) keeps scale 1.
    """
    d = objective.n_features
    first = shards.tree_sum(_block_first_moments, d, name="dgd-scaling-mean")
    total = first[0]
    mean = first[1:] / total if total > 0 else np.zeros(d)
    centre = mean if objective.fit_intercept else np.zeros(d)
    squares = shards.tree_sum(_block_centred_squares, d, centre, name="dgd-scaling-scale")
    var = np.maximum(squares / total, 0.0) if total > 0 else np.ones(d)
    scale = np.sqrt(var)
    # a column that varies only at rounding level of its centre is constant: scale 1
    flat = ~(scale > 1e-12 * np.maximum(np.abs(mean), 1e-300))
    scale[flat] = 1.0
    return ColumnScaling(centre, scale, objective.n_outputs, objective.fit_intercept)


@dataclass(frozen=True)
class ScaledPenalty:
    """The penalty's parts the solvers use, in scaled coordinates: the L1 thresholds are
    ``lambda / sigma_j`` (the L2 part is the model's, in its original units, inside
    the objective's value)."""

    base: object
    scaling: ColumnScaling

    @property
    def has_l1(self):
        return self.base.has_l1

    @property
    def decay_mask(self):
        return self.base.decay_mask

    def prox(self, params, step):
        params = np.asarray(params, dtype=np.float64)
        out = params.copy()
        n = self.scaling.n_coef
        threshold = float(step) * self.base.penalty.l1_strength * self.scaling.l1_factor[:n]
        out[:n] = np.sign(params[:n]) * np.maximum(np.abs(params[:n]) - threshold, 0.0)
        return out


@dataclass(frozen=True)
class ScaledTraining:
    """A linear model's training objective (``base``, a
    :class:`~.objective.LinearTraining`) in the scaled coordinates of ``scaling`` (see
    the module docstring).  The blocks evaluate the base objective at the original
    parameters; the driver maps the gradient.  With ``curvature="gram"`` every
    evaluation also reduces the Hessian sums in scaled coordinates, with ``"qr"`` the
    R factor of the Newton step's least-squares problem (:mod:`.curvature`), and
    :meth:`hessian` gives the model from them.  Everything else is the base objective's."""

    base: object
    scaling: ColumnScaling
    curvature: str = None

    def __getattr__(self, name):
        if name in ("base", "scaling", "curvature") or name.startswith("__"):  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self.base, name)

    # ------------------------------------------------------------- worker side
    def group_sums(self, shard, params, aux, draw, local, memory=None):
        original = self.scaling.to_original(params)
        sums, local_grad = self.base.group_sums(shard, original, aux, draw, local, memory)
        if self.curvature is None:
            return sums, local_grad
        from .blocks import _block_error
        from .curvature import block_r_factor, block_scaled_gram
        from .kernels import BlockSums

        block_fn, key = (block_r_factor, "r") if self.curvature == "qr" else (block_scaled_gram, "hessian")
        obj = self.base.objective
        out = {}
        for b in shard.blocks:
            s = sums[b.index]
            try:
                with np.errstate(all="ignore"):
                    extra = block_fn(obj, original, b.X, b.y, b.sample_weight, self.scaling)
            except Exception as err:
                raise _block_error(err, b) from err
            out[b.index] = BlockSums(s.loss, s.grad, s.weight, {**s.extras, key: extra})
        return out, local_grad

    # ------------------------------------------------------------- driver side
    def finish(self, partial, params):
        value, grad = self.base.finish(partial, self.scaling.to_original(params))
        return value, self.scaling.grad_to_scaled(grad)

    def l1_value(self, params):
        return self.base.l1_value(self.scaling.to_original(params))

    @cached_property
    def ridge(self):
        """The L2 penalty's Hessian diagonal in scaled coordinates."""
        return self.base.penalty_spec.l2_strength * self.base.penalty.decay_mask * self.scaling.l1_factor**2

    def hessian(self, partial):
        """The Hessian of the smooth objective in scaled coordinates (``"gram"``), or the
        :class:`~.curvature.LeastSquaresModel` of the Newton step (``"qr"``)."""
        if self.curvature == "qr":
            from .curvature import LeastSquaresModel

            return LeastSquaresModel(partial.extras["r"].R, float(partial.weight_sum), self.ridge)
        H = partial.extras["hessian"] / partial.weight_sum
        H[np.diag_indices_from(H)] += self.ridge
        return H

    @property
    def hessian_size(self):
        """Floats of the curvature one partial carries."""
        q = self.base.n_params
        return (q + 1) ** 2 if self.curvature == "qr" else q * q

    def least_squares(self):
        """The same objective with Newton steps from R factors (None when it has them)."""
        return None if self.curvature == "qr" else ScaledTraining(self.base, self.scaling, "qr")

    def l1_weights(self):
        """The L1 strength of every parameter in scaled coordinates (zero for the intercept)."""
        return self.base.penalty_spec.l1_strength * self.base.penalty.decay_mask * self.scaling.l1_factor

    @cached_property
    def penalty(self):
        return ScaledPenalty(self.base.penalty, self.scaling)

r"""Statistical inference for the fitted single-output GLMs: the covariance of the
coefficients, standard errors, Wald statistics, p-values and confidence intervals.

One distributed pass over the data: every block computes, where it lives, the Fisher
information :math:`\tilde X^\top \operatorname{diag}(s_i w_i) \tilde X` of its rows
(:math:`\tilde X = [\mathbf 1, X]`, :math:`s_i` the sample weights, :math:`w_i` the
expected second derivative of the loss), the sandwich's meat for robust errors and
the Pearson statistic for the dispersion; they are summed over the fixed block tree
(each worker group its subtrees, the driver the rest: a few small matrices travel per
group, and the sum does not depend on placement, bit for bit).

The numbers are statsmodels' ``GLM(...).fit()`` defaults: the expected information, the
dispersion estimated by Pearson's :math:`\chi^2 / (n - p)` where the family has one
(Gaussian, Gamma, Tweedie) and 1 where it does not (Poisson, binomial, negative binomial
with a fixed theta), normal (:math:`z`) reference distribution.  ``robust=True`` is the
HC0 sandwich with the expected information as bread (R's ``sandwich::vcovHC(fit,
"HC0")`` for a ``glm``): statsmodels' ``cov_type="HC0"`` for the canonical links
(Gaussian, Poisson, binomial); statsmodels takes the observed Hessian instead, which
differs for the log link of Gamma, Tweedie and negative binomial models.
"""

import numbers
import warnings

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.sparse as sp
from scipy.stats import norm
from sklearn.utils.validation import check_array, check_is_fitted

from .._backend import asarray_like, get_namespace, is_sparse, to_numpy
from .._engine.data.blocks import _all_finite, _block_error, encode_shard
from .._engine.data.ingest import build_shardset
from .._engine.runtime.executor import get_executor, is_dask_collection
from .._frames import is_frame
from .._validation import user_stacklevel
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ..losses._gram import weighted_gram
from ..losses._pointwise import BinaryLogistic
from ._input import check_n_features
from ._predict import coef_matrix
from ._separation import certain_finding, certain_mask, separation_message

__all__ = ["InferenceMixin"]


def _append_column(X, offset):
    """``[X, offset]`` as float64: the offset travels as a last column of the block,
    so that it sits next to its rows on the worker (SciPy/CuPy sparse stay sparse)."""
    if isinstance(X, list):  # a dask block given as the list of its column chunks
        (X,) = X
    if sp.issparse(X):
        column = sp.csr_matrix(np.asarray(offset, dtype=np.float64)[:, None])
        return sp.hstack([X.astype(np.float64), column], format="csr")
    if is_sparse(X):  # CuPy sparse
        import cupyx.scipy.sparse as cusp

        column = cusp.csr_matrix(asarray_like(to_numpy(offset)[:, None], X, dtype=np.float64))
        return cusp.hstack([X.astype(np.float64), column], format="csr")
    xp = get_namespace(X)
    X = xp.astype(X, xp.float64)
    column = asarray_like(to_numpy(offset), X, dtype=xp.float64)
    return xp.concat([X, column[:, None]], axis=1)


def _block_information(block, loss, coef, intercept, fit_intercept, has_offset, robust, pearson):
    """Fisher information, HC0 meat, Pearson statistic, count of weighted rows and, for
    the logistic loss, of those with a fitted probability numerically 0 or 1 of one block."""
    X = block.X
    xp = get_namespace(X)
    X = X.astype(np.float64) if is_sparse(X) else xp.astype(X, xp.float64)
    raw = None
    if has_offset:  # the last column (see _append_column)
        d = X.shape[1] - 1
        if is_sparse(X):
            raw = X[:, d].toarray()[:, 0]
            X = X[:, :d].tocsr()
        else:
            raw = X[:, d]
            X = X[:, :d]
    # targets and weights are in X's namespace and on its device (NumPy for SciPy sparse X)
    y = xp.astype(block.y, xp.float64)
    w = xp.ones_like(y) if block.sample_weight is None else xp.astype(block.sample_weight, xp.float64)
    eta = X @ asarray_like(coef, X, dtype=xp.float64)
    eta = eta + intercept if raw is None else eta + intercept + raw
    eta = eta[:, None]
    mu = loss.inverse_link(eta, xp)
    # The loss's second derivative is linear in y (exponential families), so at y = mu it
    # is its expectation: the expected information, as statsmodels' IRLS (equal to the
    # observed one for canonical links).
    out = {"fisher": weighted_gram(X, w * loss.hessian_weight(mu, eta, xp), fit_intercept, intercept_first=True),
           "n_obs": int(xp.sum(xp.astype(w > 0, xp.int64))), "n_certain": 0}
    if isinstance(loss, BinaryLogistic):  # fitted probabilities numerically 0 or 1 (separation)
        out["n_certain"] = int(xp.sum(xp.astype(certain_mask(mu, xp) & (w > 0), xp.int64)))
    if robust:
        score = w * loss.loss_gradient(y, eta, xp)[1][:, 0]
        out["meat"] = weighted_gram(X, score * score, fit_intercept, intercept_first=True)
    if pearson:
        resid = (y - mu) * (y - mu) / loss.unit_variance(mu, xp)
        out["pearson"] = float(xp.sum(xp.where(w > 0, w * resid, xp.zeros_like(w))))
    if not np.all(np.isfinite(out["fisher"])):
        where = f"block {block.index} (shape {tuple(block.X.shape)})"
        if not _all_finite(X) or (raw is not None and not _all_finite(raw)):
            raise InputError(
                f"Input X{' or offset' if has_offset else ''} contains NaN or infinity in {where}; drop or "
                "impute those rows"
            )
        raise InputError(
            f"the predictions overflow in {where}: the linear predictor reaches {float(xp.max(xp.abs(eta))):.4g}; "
            "are X and the offset those of the fit?"
        )
    return out


def block_information(block, loss, coef, intercept, fit_intercept, has_offset, robust, pearson):
    """:func:`_block_information` of one block as one flat array (for the block tree's
    sum): the Fisher information, the meat if ``robust``, the Pearson statistic, the
    count of weighted rows and that of numerically certain ones."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite sums are refused, the block named
            out = _block_information(block, loss, coef, intercept, fit_intercept, has_offset, robust, pearson)
    except Exception as err:  # name the block
        raise _block_error(err, block) from err
    parts = [out["fisher"].ravel()] + ([out["meat"].ravel()] if robust else [])
    return np.concatenate(parts + [[out.get("pearson", 0.0), float(out["n_obs"]), float(out["n_certain"])]])


def _offset_in_memory(offset, n_rows):
    if is_dask_collection(offset):
        raise InputError(
            "offset is a dask collection but X is not; pass both as dask collections (or both in memory)"
        )
    try:
        offset = check_array(offset, ensure_2d=False, dtype=np.float64, ensure_all_finite=True, input_name="offset")
    except ValueError as err:  # NaN, strings, an empty array: scikit-learn's message, our error type
        raise InputError(str(err)) from err
    if offset.shape != (n_rows,):
        raise InputError(
            f"offset must have shape ({n_rows},), one value per row of X; got {offset.shape}"
        )
    return offset


def _offset_dask(X, offset):
    """``[X, offset]`` for dask input, the offset cut into X's row blocks."""
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(X, dd.DataFrame):
        X = X.to_dask_array(lengths=True)
    elif not isinstance(X, da.Array):
        X = da.asarray(X)
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    if isinstance(offset, (dd.Series, dd.DataFrame)):
        offset = offset.to_dask_array(lengths=True)
    if isinstance(offset, da.Array):
        if offset.ndim != 1 or offset.shape[0] != X.shape[0]:
            raise InputError(
                f"offset must have shape ({X.shape[0]},), one value per row of X; got {offset.shape}"
            )
        offset = offset.rechunk({0: X.chunks[0]})
    else:
        offset = da.from_array(_offset_in_memory(offset, X.shape[0]), chunks=(X.chunks[0],))
    return da.blockwise(_append_column, "ij", X, "ij", offset, "i", adjust_chunks={"j": lambda n: n + 1},
                        dtype=np.float64, meta=X._meta.astype(np.float64))


def _n_columns(X):
    """Columns of X before any validation (None when X does not say)."""
    if is_frame(X):
        return len(X.columns)
    shape = getattr(X, "shape", None)
    return shape[1] if shape is not None and len(shape) == 2 else None


def _inverse_information(fisher):
    """Inverse of the (symmetric, positive semi-definite) Fisher information, or
    :class:`InputError` when it is singular to working precision.

    The rank is judged on the matrix scaled to a unit diagonal (as numpy's
    ``matrix_rank``: eigenvalues below ``p * eps`` times the largest), so that it does
    not depend on the features' units.
    """
    fisher = 0.5 * (fisher + fisher.T)
    p = fisher.shape[0]
    diag = np.diag(fisher)
    singular = not np.all(diag > 0)
    if not singular:
        scale = 1.0 / np.sqrt(diag)
        scaled = fisher * scale[:, None] * scale[None, :]
        eig = scipy.linalg.eigvalsh(scaled)
        singular = eig[0] <= eig[-1] * p * np.finfo(np.float64).eps
    if singular:
        raise InputError(
            "the Fisher information of the data is singular: features are collinear or constant "
            "(or a constant feature duplicates the intercept), or a feature is zero in every row "
            "of positive weight; drop the redundant columns"
        )
    inverse = scipy.linalg.cho_solve(scipy.linalg.cho_factor(scaled), np.eye(p))
    return inverse * scale[:, None] * scale[None, :]


class InferenceMixin:
    """Covariance of the coefficients and Wald inference for single-output GLMs.

    The methods take the data (a pass over it computes the Fisher information), in the
    style of glum's ``covariance_matrix`` / ``std_errors`` / ``coef_table``.  Rows and
    columns of the covariance, and the rows of the table, are the intercept first (when
    fitted), then the features in ``coef_`` order.
    """

    def _inference_loss(self):
        """The fitted model's pointwise loss, after refusing what inference cannot do."""
        check_is_fitted(self, "coef_")
        name = type(self).__name__
        coef, _ = coef_matrix(self)
        if coef.shape[1] != 1:
            classes = np.asarray(getattr(self, "classes_", [])).tolist()
            raise InputError(
                f"{name} has {coef.shape[1]} outputs (classes {classes}): standard "
                "errors are computed for single-output models (linear, Poisson, binary logistic, ... regression); "
                "fit one binary model per class to test its coefficients"
            )
        alpha = getattr(self, "alpha_", getattr(self, "alpha", 0.0))
        if alpha is not None and alpha > 0:
            raise ParameterError(
                f"{name} was fitted with a penalty (alpha={alpha!r}): the standard errors, p-values and "
                "confidence intervals here are those of the unpenalised maximum-likelihood fit, which a "
                f"penalised fit is not; refit with {name}(alpha=0, ...) to use them"
            )
        link_loss = getattr(self, "_link_loss", None)
        loss = link_loss() if callable(link_loss) else getattr(self, "_loss", None)
        if not all(hasattr(loss, trait) for trait in ("hessian_weight", "unit_variance", "fixed_dispersion")):
            raise ParameterError(
                f"{name}'s loss {type(loss).__name__} declares no variance function and expected information "
                "(traits unit_variance, hessian_weight, fixed_dispersion); inference needs a GLM family"
            )
        return loss

    def _information(self, X, y, sample_weight, offset, robust):
        """Summed Fisher information, HC0 meat, Pearson statistic and weighted-row count."""
        loss = self._inference_loss()
        if not isinstance(robust, bool):
            raise ParameterError(f"robust must be True or False; got {robust!r}")
        n_columns = _n_columns(X)
        if n_columns is not None:
            check_n_features(self, n_columns)
        X, y, sample_weight = self._validate_fit_input(X, y, sample_weight, reset=False)
        has_offset = offset is not None
        if has_offset:
            if is_dask_collection(X) or is_dask_collection(y):
                X = _offset_dask(X, offset)
            else:
                X = _append_column(X, _offset_in_memory(offset, X.shape[0]))
        classifier = self._is_classifier()
        shards = build_shardset(get_executor(self.client, X), X, y, sample_weight, y_numeric=not classifier,
                                rebalance=False)
        sets = [shards]
        try:
            if classifier:
                cw = getattr(self, "class_weight", None)
                if isinstance(cw, str):
                    raise ParameterError(
                        f"class_weight={cw!r} weighs classes by counts that inference does not recompute; "
                        "pass the class weights as a dict, or fold them into sample_weight"
                    )
                weights = None if cw is None else np.array([cw.get(c, 1.0) for c in self.classes_.tolist()],
                                                           dtype=np.float64)
                shards = shards.transform(encode_shard, self.classes_, weights, name="dgd-encode")
                sets.append(shards)
            coef, intercept = coef_matrix(self)
            flat = shards.tree_sum(
                block_information, loss, coef[:, 0], float(intercept[0]), bool(self.fit_intercept), has_offset,
                robust, not loss.fixed_dispersion, name="dgd-inference",
            )
        finally:
            for s in sets:
                s.release()
        q = coef.shape[0] + bool(self.fit_intercept)
        total = {"fisher": flat[: q * q].reshape(q, q), "pearson": float(flat[-3]), "n_obs": int(round(flat[-2])),
                 "n_certain": int(round(flat[-1]))}
        if robust:
            total["meat"] = flat[q * q: 2 * q * q].reshape(q, q)
        return loss, total

    def covariance_matrix(self, X, y, sample_weight=None, offset=None, robust=False):
        r"""Covariance matrix of the estimated intercept and coefficients.

        Parameters
        ----------
        X : array-like, sparse matrix, dask array or dask DataFrame of shape (n_samples, n_features)
            The training data (or any data of the model's population).
        y : array-like or dask array of shape (n_samples,)
            Targets (class labels for a classifier).
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            The weights of the fit.  They act as statsmodels' ``var_weights``: a row of
            weight 2 counts as a row with half the variance.
        offset : array-like or dask array of shape (n_samples,), default=None
            Added to the linear predictor (e.g. ``log(exposure)``), as in the fit.
        robust : bool, default=False
            Heteroskedasticity-robust (sandwich, ``HC0``) covariance instead of the
            model-based one; its bread is the expected information (see Notes).

        Returns
        -------
        cov : ndarray of shape (n_features + fit_intercept, n_features + fit_intercept)
            Rows and columns: the intercept first (when fitted), then the features.

        Raises
        ------
        NotFittedError
            Before ``fit``.
        ParameterError
            For a penalised fit (``alpha > 0``) or ``class_weight="balanced"``.
        InputError
            For a multinomial model, data of another shape than the fit's, a singular
            information matrix (collinear features), or fewer weighted rows than
            parameters when the dispersion is estimated.

        Notes
        -----
        With :math:`\tilde X = [\mathbf 1, X]`, sample weights :math:`s_i`, linear
        predictor :math:`\eta_i`, mean :math:`\mu_i`, variance function :math:`V` and the
        loss :math:`\ell` (half the unit deviance), the expected information is
        :math:`F = \tilde X^\top \operatorname{diag}(s_i\, E[\partial^2_\eta \ell_i]) \tilde X`
        and the covariance is

        .. math:: \hat\phi\, F^{-1}, \qquad
                  \hat\phi = \frac{1}{n - p} \sum_i s_i \frac{(y_i - \mu_i)^2}{V(\mu_i)}

        (:math:`\hat\phi = 1` for Poisson and binomial; :math:`n` counts the rows of
        positive weight, :math:`p` the parameters), or with ``robust=True``

        .. math:: F^{-1} \Big(\sum_i (s_i\, \partial_\eta \ell_i)^2\,
                  \tilde x_i \tilde x_i^\top\Big) F^{-1} .

        These are statsmodels' ``GLM(y, X, family, offset=..., var_weights=...).fit()``
        with its default scale, and for the canonical links (Gaussian, Poisson,
        binomial) its ``cov_type="HC0"``; for other links statsmodels' HC0 bread is the
        observed Hessian, ours the expected information, as R's ``sandwich`` package
        for a ``glm`` (both are consistent when the mean is right).  Penalised fits are
        refused: their coefficients are not maximum-likelihood estimates.
        """
        return self._covariance(X, y, sample_weight, offset, robust)[0]

    def _covariance(self, X, y, sample_weight, offset, robust):
        """:meth:`covariance_matrix` and the summed statistics it came from."""
        loss, total = self._information(X, y, sample_weight, offset, robust)
        inverse = _inverse_information(total["fisher"])
        p = inverse.shape[0]
        if robust:
            cov = inverse @ total["meat"] @ inverse
        else:
            dispersion = 1.0
            if not loss.fixed_dispersion:
                df = total["n_obs"] - p
                if df <= 0:
                    raise InputError(
                        f"the dispersion needs more rows of positive weight than parameters: "
                        f"{total['n_obs']} rows, {p} parameters"
                    )
                dispersion = total["pearson"] / df
            cov = dispersion * inverse
        return 0.5 * (cov + cov.T), total

    def std_errors(self, X, y, sample_weight=None, offset=None, robust=False):
        """Standard errors of the intercept (first, when fitted) and the coefficients.

        Parameters
        ----------
        X, y, sample_weight, offset, robust
            As in :meth:`covariance_matrix`.

        Returns
        -------
        se : ndarray of shape (n_features + fit_intercept,)
        """
        return np.sqrt(np.diag(self.covariance_matrix(X, y, sample_weight, offset, robust)))

    def coef_table(self, X, y, sample_weight=None, offset=None, robust=False, confidence_level=0.95):
        """Estimates, standard errors, Wald z statistics, p-values and confidence intervals.

        Parameters
        ----------
        X, y, sample_weight, offset, robust
            As in :meth:`covariance_matrix`.
        confidence_level : float in (0, 1), default=0.95
            Coverage of the confidence intervals.

        Returns
        -------
        table : pandas.DataFrame
            Index: ``"intercept"`` (when fitted), then ``feature_names_in_`` (or
            ``x0 .. x{d-1}``).  Columns: ``coef``, ``se``, ``z``, ``p_value`` (two-sided,
            normal), ``ci_lower``, ``ci_upper``.  ``table.attrs["converged"]`` is False
            (and a ``ConvergenceWarning`` says so) when the fit stopped short.  A
            binary logistic or binomial model's table also warns
            (``ConvergenceWarning``) when fitted probabilities numerically 0 or 1 occur
            among the rows given (R's ``glm`` rule, 10 eps, counted in the same pass)
            and the fit could not test them exactly (``separated_`` None), or its fit
            found the classes separated (``separated_`` True): the estimates then do
            not exist.

        Examples
        --------
        >>> import numpy as np
        >>> from dask_dgd import PoissonRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((500, 2))
        >>> y = rng.poisson(np.exp(0.3 + X @ [0.5, 0.0]))
        >>> est = PoissonRegressor(alpha=0, solver="newton", tol=1e-10).fit(X, y)
        >>> table = est.coef_table(X, y)
        >>> list(table.index), list(table.columns)
        (['intercept', 'x0', 'x1'], ['coef', 'se', 'z', 'p_value', 'ci_lower', 'ci_upper'])
        >>> bool(table.loc["x0", "p_value"] < 1e-6)
        True
        """
        level = confidence_level
        if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
            raise ParameterError(f"confidence_level must be a number in (0, 1), e.g. 0.95; got {level!r}")
        cov, total = self._covariance(X, y, sample_weight, offset, robust)
        se = np.sqrt(np.diag(cov))
        if not getattr(self, "converged_", True):
            warnings.warn(
                f"{type(self).__name__} did not converge (see the warning of fit, or history_): the estimates and "
                "their standard errors are not those of the optimum; refit with a larger max_iter",
                ConvergenceWarning, stacklevel=user_stacklevel())
        coef, intercept = coef_matrix(self)
        estimates = coef[:, 0]
        names = getattr(self, "feature_names_in_", None)
        names = [f"x{j}" for j in range(len(estimates))] if names is None else [str(n) for n in names]
        if self.fit_intercept:
            estimates = np.concatenate([intercept[:1], estimates])
            names = ["intercept", *names]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = estimates / se
        q = norm.ppf(0.5 + level / 2)
        table = pd.DataFrame(
            {"coef": estimates, "se": se, "z": z, "p_value": 2 * norm.sf(np.abs(z)),
             "ci_lower": estimates - q * se, "ci_upper": estimates + q * se},
            index=pd.Index(names),
        )
        table.attrs["converged"] = bool(getattr(self, "converged_", True))
        # the fit's exact test decides where it ran (separated_ True or False); R's rule otherwise
        separated = getattr(self, "separated_", None)
        if separated:
            warnings.warn(separation_message(type(self).__name__, "its fit found the classes separated (see the "
                                             "warning of fit)"), ConvergenceWarning, stacklevel=user_stacklevel())
        elif total["n_certain"] and separated is None:
            warnings.warn(separation_message(type(self).__name__, certain_finding(total["n_certain"], "row(s)"),
                                             "the fit's exact test did not decide (see the warning of fit)"),
                          ConvergenceWarning, stacklevel=user_stacklevel())
        return table


"""ClimateRegressor: pooled and pointwise regression on xarray gridded datasets.

The block functions (:func:`cell_stats`, :func:`_pointwise_block`,
:func:`_pooled_block`, :func:`_score_block`) work in the array namespace of their
block (NumPy, CuPy, ``array_api_strict``) and move the small NumPy inputs (weights,
coefficients) onto its device once per task; the fitted attributes are NumPy, so a
model fitted on GPU blocks predicts on NumPy blocks and the other way round.
"""

import math
import numbers

import array_api_compat
import dask
import dask.array as da
import numpy as np
import xarray as xr
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._validation import ClientParamMixin, Interval, Options, client_is_a_client, validate_params
from ..exceptions import InputError
from ._design import DesignMatrix, FeatureSpec, Fields, _split, block_features
from ._namespace import align, to_host

__all__ = ["ClimateRegressor"]

_FAMILIES = ("gaussian", "poisson", "binomial")


# --------------------------------------------------------------- pointwise math
def cell_stats(order, yb, wb, *blocks):
    """Per-cell sufficient statistics of one (time chunk, spatial chunk) block.

    ``blocks`` are the block's full-grid fields then its time-only fields (see
    :class:`~._design.Fields`).  Returns a NumPy array of shape ``(1, *space, p*p + p +
    3)``: the weighted Gram matrix of ``[1, x]``, the weighted ``[1, x]^T y``, ``sum w
    y^2``, ``sum w`` and the number of unmasked time steps of every cell.  Masked time
    steps (NaN anywhere, weight <= 0) contribute nothing.

    NumPy blocks go through the Numba kernel (:mod:`._kernels`); blocks of any other
    namespace (CuPy, ``array_api_strict``) through :func:`cell_stats_xp` on their
    device, and only the statistics come back to the host.
    """
    xp, (yb, wb, *blocks) = align(yb, wb, *blocks)
    n_t = yb.shape[0]
    space = tuple(yb.shape[1:])
    full, timef = _split(order, blocks)
    if not array_api_compat.is_numpy_namespace(xp):
        out = to_host(cell_stats_xp(
            xp, order, xp.reshape(yb, (n_t, -1)), xp.reshape(wb, (-1,)),
            [xp.reshape(b, (n_t, -1)) for b in full], list(timef),
        ))
        return out.reshape((1,) + space + (out.shape[1],))
    from ._kernels import cell_stats_kernel

    kind = np.array([k for k, _ in order], dtype=np.int64)
    pos = np.array([i for _, i in order], dtype=np.int64)
    n_full = len(full)
    fields = np.empty((max(n_full, 1), n_t, math.prod(space)))
    for i, b in enumerate(full):
        fields[i] = np.asarray(b, dtype=np.float64).reshape(n_t, -1)
    time_fields = np.empty((max(len(timef), 1), n_t))
    for i, b in enumerate(timef):
        time_fields[i] = np.asarray(b, dtype=np.float64)
    y = np.ascontiguousarray(yb, dtype=np.float64).reshape(n_t, -1)
    w = np.ascontiguousarray(wb, dtype=np.float64).reshape(-1)
    p = len(order) + 1
    out = np.empty((y.shape[1], p * p + p + 3))
    cell_stats_kernel(fields, time_fields, kind, pos, y, w, out)
    return out.reshape((1,) + space + (out.shape[1],))


def cell_stats_xp(xp, order, y, w, full, timef):
    """The statistics of :func:`cell_stats` with the Array API functions of ``xp``:
    ``(cells, p*p + p + 3)`` on the device of ``y``.

    ``y``: (time, cells); ``w``: (cells,); ``full``: (time, cells) fields; ``timef``:
    (time,) fields; all of ``xp`` on one device.  The masked design ``A`` (cells, p,
    time), ``[1, x]`` with zeros where a step is masked, gives the Gram matrices as
    one batched ``A diag(w) A^T`` (``matmul``) and ``[1, x]^T y`` as ``A diag(w) y``;
    the same masking as the kernel, summed in another order (equal to it up to
    rounding: within about 1e-15 of the block's largest statistic).
    """
    n_t, n_c = y.shape
    dtype, device = y.dtype, array_api_compat.device(y)
    ok = xp.isfinite(y) & xp.reshape(w > 0.0, (1, n_c))
    for f in full:
        ok = ok & xp.isfinite(f)
    for g in timef:
        ok = ok & xp.reshape(xp.isfinite(g), (n_t, 1))
    wm = xp.where(ok, xp.reshape(w, (1, n_c)), 0.0)
    ym = xp.where(ok, y, 0.0)
    cols = [xp.ones((n_t, n_c), dtype=dtype, device=device)]
    for kind, pos in order:
        cols.append(full[pos] if kind == 0 else xp.broadcast_to(xp.reshape(timef[pos], (n_t, 1)), (n_t, n_c)))
    A = xp.permute_dims(xp.where(ok, xp.stack(cols, axis=0), 0.0), (2, 0, 1))  # (cells, p, time)
    p = A.shape[1]
    Aw = A * xp.reshape(xp.permute_dims(wm, (1, 0)), (n_c, 1, n_t))
    gram = xp.matmul(Aw, xp.matrix_transpose(A))
    i = xp.arange(p, device=device)
    upper = xp.reshape(i, (p, 1)) <= xp.reshape(i, (1, p))
    gram = xp.where(upper, gram, xp.matrix_transpose(gram))  # exactly symmetric, as the kernel's
    xy = xp.matmul(Aw, xp.reshape(xp.permute_dims(ym, (1, 0)), (n_c, n_t, 1)))
    tail = [xp.sum(wm * ym * ym, axis=0), xp.sum(wm, axis=0), xp.sum(xp.astype(ok, dtype), axis=0)]
    return xp.concat([xp.reshape(gram, (n_c, p * p)), xp.reshape(xy, (n_c, p)),
                      xp.stack(tail, axis=1)], axis=1)


def solve_cells(stats, p, alpha):
    """Weighted least squares (ridge ``alpha`` on the slopes) of every cell from its
    summed statistics: ``(*space, p)`` coefficients, intercept first; NaN for cells
    without any unmasked step.

    As scikit-learn does, the intercept is taken out by centring: the slopes solve
    ``(Sxx - sw m m^T + alpha I) b = Sxy - sw m my`` (``m``, ``my`` the weighted means),
    and the intercept is ``my - m . b``.  A cell whose centred system is singular or
    ill-conditioned (a feature constant in the cell, fewer steps than features) gets the
    minimum-norm slopes (``lstsq``), like ``LinearRegression``.
    """
    space = stats.shape[:-1]
    s = stats.reshape(-1, stats.shape[-1])
    gram = s[:, : p * p].reshape(-1, p, p)
    xy = s[:, p * p : p * p + p]
    count = s[:, p * p + p + 2]
    out = np.full((s.shape[0], p), np.nan)
    ok = count > 0
    overflow = ok & ~np.all(np.isfinite(s[:, : p * p + p + 1]), axis=1)
    if overflow.any():  # the sums of squares of a cell overflowed: no system to solve
        raise InputError(
            f"the least-squares sums of {int(overflow.sum())} grid cell(s) overflow float64: a feature or the "
            "target has values too large for sums of squares (|x| above about 1e150); scale the variables "
            "(e.g. other units) before fitting"
        )
    if ok.any():
        G, b = gram[ok], xy[ok]
        sw = G[:, 0, 0]
        m = G[:, 0, 1:] / sw[:, None]
        my = b[:, 0] / sw
        C = G[:, 1:, 1:] - sw[:, None, None] * m[:, :, None] * m[:, None, :] + float(alpha) * np.eye(p - 1)
        c = b[:, 1:] - sw[:, None] * m * my[:, None]
        # relative conditioning of each cell's centred system
        bad = np.linalg.cond(C) > 1e10 if p > 1 else np.zeros(len(C), dtype=bool)
        beta = np.empty_like(c)
        good = ~bad
        if good.any():
            beta[good] = np.linalg.solve(C[good], c[good][..., None])[..., 0]
        for i in np.flatnonzero(bad):  # rank-deficient cells: minimum-norm slopes
            beta[i] = np.linalg.lstsq(C[i], c[i], rcond=1e-10)[0]
        out[ok, 0] = my - np.einsum("cp,cp->c", m, beta)
        out[ok, 1:] = beta
    return out.reshape(space + (p,))


def _pointwise_block(order, coef, wb, *blocks):
    """Predictions of one grid block from its cells' coefficients (``coef``: (*space,
    p), NumPy), in the namespace of the block and on its device."""
    xp, (coef, wb, *blocks) = align(coef, wb, *blocks)
    shape = (blocks[0].shape[0],) + tuple(wb.shape)  # every field block spans the time chunk
    c = xp.reshape(coef, (1, -1, coef.shape[-1]))
    X = xp.reshape(block_features(order, shape, blocks), (shape[0], c.shape[1], len(order)))
    return xp.reshape(c[..., 0] + xp.sum(X * c[..., 1:], axis=-1), shape)


def _pooled_block(order, coef, intercept, family, wb, *blocks):
    """Predictions of one grid block of a pooled model (identity, log or logit link)."""
    xp, (coef, wb, *blocks) = align(np.asarray(coef, dtype=np.float64), wb, *blocks)
    shape = (blocks[0].shape[0],) + tuple(wb.shape)
    eta = xp.matmul(block_features(order, shape, blocks), coef) + float(intercept)
    if family == "poisson":
        eta = xp.exp(eta)
    elif family == "binomial":
        eta = 1.0 / (1.0 + xp.exp(-eta))
    return xp.reshape(eta, shape)


def _score_block(yb, pb, wb):
    """``(1, ..., 1, 5)`` NumPy sums of a grid block for :meth:`ClimateRegressor.evaluate`:
    ``sum w``, ``sum w y``, ``sum w y^2``, ``sum w e^2``, cells scored."""
    xp, (yb, pb, wb) = align(yb, pb, wb)
    n_t = yb.shape[0]
    y = xp.reshape(yb, (n_t, -1))
    pred = xp.reshape(pb, (n_t, -1))
    w = xp.broadcast_to(xp.reshape(wb, (1, -1)), y.shape)
    ok = xp.isfinite(y) & xp.isfinite(pred) & (w > 0)
    w = xp.where(ok, w, 0.0)
    y0 = xp.where(ok, y, 0.0)
    e = xp.where(ok, pred - y, 0.0)
    sums = xp.stack([xp.sum(w), xp.sum(w * y0), xp.sum(w * y0 * y0), xp.sum(w * e * e),
                     xp.sum(xp.astype(ok, y.dtype))])
    return to_host(sums).reshape((1,) * len(yb.shape) + (5,))


class ClimateRegressor(ClientParamMixin, BaseEstimator):
    """Regression on an xarray Dataset's grid cells: one pooled model or one per cell.

    Parameters
    ----------
    features : str or list of str
        Predictor variables (any subset of ``sample_dims``; e.g. a ``(time,)`` index is
        broadcast to every cell).
    target : str
        The variable to predict.
    model : {"pooled", "pointwise"}, default="pooled"
        ``"pooled"``: one model for all cells, trained by distributed gradient descent
        (the linear-model engine) over the time-and-space blocks of the design matrix.
        ``"pointwise"``: one weighted least-squares model per grid cell, all at once:
        each (time chunk, spatial chunk) block gives its cells' Gram matrices, which
        are summed over the time chunks only (a tree reduction per spatial chunk, so
        the parameters are sharded by spatial chunk) and solved per cell — for this
        quadratic objective the Newton step from zero is exact.
    sample_dims, time_dim, lags, lead, seasonal, area_weights, lat
        How the design matrix is built; see :func:`dask_dgd.climate.to_design_matrix`.
    family : {"gaussian", "poisson", "binomial"}, default="gaussian"
        Pooled model: the link (identity, log, logit); the target must be counts >= 0
        for poisson and 0/1 for binomial.  Pointwise models are gaussian.
    alpha : float, default=0.0
        L2 penalty.  Pooled: on the weighted *mean* loss, as in
        :class:`dask_dgd.LinearRegression`; pointwise: per cell on the weighted *sum* of
        squared errors, as ``sklearn.linear_model.Ridge(alpha)`` (intercept unpenalised).
    solver, optimizer, learning_rate, batch_size, max_iter, tol, random_state, verbose, callbacks
        Pooled model: passed to the linear estimator (see :class:`dask_dgd.LinearRegression`).
    split_every : int, default=8
        Fan-in of the reduction trees.
    client : distributed.Client or None, default=None

    Attributes
    ----------
    feature_names_ : list of str
        Columns of the design matrix (``var``, ``var_lagK``, ``sinK``, ``cosK``).
    coef_ : xarray.DataArray
        Pooled: over ``feature``; pointwise: over the spatial dimensions and ``feature``.
    intercept_ : float or xarray.DataArray
        Pooled: a float; pointwise: on the spatial grid.
    estimator_ : the fitted linear estimator (pooled)
    n_samples_ : xarray.DataArray (pointwise)
        Unmasked time steps of each cell.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from dask_dgd.climate import ClimateRegressor
    >>> t = xr.date_range("2000-01-01", periods=24, freq="MS", calendar="noleap", use_cftime=True)
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(24, 3, 4))
    >>> ds = xr.Dataset({"x": (("time", "lat", "lon"), x), "y": (("time", "lat", "lon"), 2 * x + 1)},
    ...                 coords={"time": t, "lat": [-10.0, 0.0, 10.0], "lon": [0.0, 1.0, 2.0, 3.0]})
    >>> model = ClimateRegressor("x", "y", model="pointwise").fit(ds)
    >>> float(model.coef_.sel(feature="x").mean()), model.predict(ds).dims
    (2.0, ('time', 'lat', 'lon'))
    """

    _parameter_constraints = {
        "target": [str],
        "model": [Options("pooled", "pointwise")],
        "sample_dims": [tuple, list],
        "time_dim": [str],
        "lead": [Interval(numbers.Integral, 0, None, "left")],
        "seasonal": [None, Interval(numbers.Integral, 1, None, "left")],
        "area_weights": [bool],
        "lat": [str],
        "family": [Options(*_FAMILIES)],
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        "split_every": [Interval(numbers.Integral, 2, None, "left")],
        "client": [None, client_is_a_client],
    }

    def __init__(
        self,
        features,
        target,
        *,
        model="pooled",
        sample_dims=("time", "lat", "lon"),
        time_dim="time",
        lags=None,
        lead=0,
        seasonal=None,
        area_weights=True,
        lat="auto",
        family="gaussian",
        alpha=0.0,
        solver="auto",
        optimizer=None,
        learning_rate="auto",
        batch_size=None,
        max_iter=100,
        tol=1e-4,
        split_every=8,
        random_state=None,
        verbose=0,
        callbacks=None,
        client=None,
    ):
        self.features = features
        self.target = target
        self.model = model
        self.sample_dims = sample_dims
        self.time_dim = time_dim
        self.lags = lags
        self.lead = lead
        self.seasonal = seasonal
        self.area_weights = area_weights
        self.lat = lat
        self.family = family
        self.alpha = alpha
        self.solver = solver
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.split_every = split_every
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.client = client

    # ----------------------------------------------------------------- helpers
    def _spec(self):
        validate_params(self)
        return FeatureSpec(self.features, self.target, self.sample_dims, self.time_dim, self.lags, self.lead,
                           self.seasonal, self.area_weights, self.lat)

    def _compute(self, *arrays):
        if self.client is not None:
            return tuple(self.client.gather(self.client.compute(list(arrays))))
        return dask.compute(*arrays)

    def _linear_estimator(self):
        from ..linear_model import LinearRegression, LogisticRegression, PoissonRegressor

        common = dict(alpha=self.alpha, solver=self.solver, optimizer=self.optimizer,
                      learning_rate=self.learning_rate, batch_size=self.batch_size, max_iter=self.max_iter,
                      tol=self.tol, split_every=self.split_every, random_state=self.random_state,
                      verbose=self.verbose, callbacks=self.callbacks, client=self.client)
        if self.family == "poisson":
            return PoissonRegressor(**common)
        if self.family == "binomial":
            return LogisticRegression(**common)
        return LinearRegression(**common)

    # --------------------------------------------------------------------- fit
    _FITTED = ("spec_", "feature_names_", "target_attrs_", "grid_", "coef_", "intercept_", "n_samples_",
               "n_iter_", "estimator_", "history_", "_coef_table")

    def fit(self, ds, y=None):
        """Fit on a Dataset holding the features and the target.

        Parameters
        ----------
        ds : xarray.Dataset
        y : None
            Ignored; the target is the ``target`` variable of ``ds``.

        Returns
        -------
        self
        """
        for name in self._FITTED:  # a refit starts clean (also if it fails)
            self.__dict__.pop(name, None)
        spec = self._spec()
        spec.check(ds, need_target=True)
        fields = Fields(spec, ds)
        grid = {d: (ds.sizes[d], np.asarray(ds[d].values) if d in ds.coords else None) for d in spec.space_dims()}
        if self.model == "pointwise":
            self._fit_pointwise(spec, fields)
        else:
            self._fit_pooled(spec, fields)
        self.spec_ = spec
        self.feature_names_ = spec.names
        self.target_attrs_ = dict(ds[self.target].attrs)
        self.grid_ = grid
        return self

    def _fit_pooled(self, spec, fields):
        dm = DesignMatrix(spec, fields)
        est = self._linear_estimator()
        try:
            est.fit(dm.X, dm.y, sample_weight=dm.sample_weight)
        except InputError as err:
            if any(word in str(err) for word in ("empty", "0 rows", "no rows", "0 sample")):
                raise InputError(
                    f"every cell of {self.target!r} or its features is masked (NaN) or has zero weight: nothing to fit"
                ) from err
            raise
        self.estimator_ = est
        coef = np.ravel(est.coef_)
        self.coef_ = xr.DataArray(coef, dims="feature", coords={"feature": spec.names})
        self.intercept_ = float(np.ravel(est.intercept_)[0])
        self.n_iter_ = est.n_iter_
        self.history_ = est.history_

    def _fit_pointwise(self, spec, fields):
        p = fields.p + 1
        n_stats = p * p + p + 3
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        stats = da.blockwise(
            cell_stats, index + "s", fields.order, None, *fields.blockwise_args(index),
            new_axes={"s": n_stats}, adjust_chunks={"t": lambda n: 1}, dtype=np.float64,
            meta=np.empty((0,) * (len(index) + 1)),  # the statistics come back to the host
        )
        total = stats.sum(axis=0, split_every=self.split_every)  # reduces over time chunks only
        coef = total.map_blocks(solve_cells, p, float(self.alpha), chunks=total.chunks[:-1] + ((p,),),
                                dtype=np.float64)
        coef, count = self._compute(coef, total[..., -1])
        if not np.any(count > 0):
            raise InputError(
                f"every cell of {self.target!r} or its features is masked (NaN) or has zero weight: nothing to fit"
            )
        space = spec.space_dims()
        coords = {name: c for name, c in fields.coords.items() if c.dims and set(c.dims) <= set(space)}
        names = {"feature": spec.names}
        self.intercept_ = xr.DataArray(coef[..., 0], dims=space, coords=coords, name="intercept")
        self.coef_ = xr.DataArray(coef[..., 1:], dims=space + ("feature",), coords={**coords, **names}, name="coef")
        self.n_samples_ = xr.DataArray(count.astype(np.int64), dims=space, coords=coords, name="n_samples")
        self.n_iter_ = 1
        self._coef_table = coef

    # ----------------------------------------------------------------- predict
    def _check_grid(self, spec, ds):
        for d, (size, values) in self.grid_.items():
            got = np.asarray(ds[d].values) if d in ds.coords else None
            same_size = d in ds.sizes and ds.sizes[d] == size
            same_values = values is None or (got is not None and np.array_equal(got, values))
            if not (same_size and same_values):
                shown = f"{ds.sizes.get(d, 0)} values" + ("" if got is None else f", {got[:1].tolist()}..")
                fitted = f"{size} values" + ("" if values is None else f", {values[:1].tolist()}..")
                raise InputError(
                    f"the {d!r} dimension of this Dataset ({shown}) differs from the grid the pointwise model was "
                    f"fitted on ({fitted}); pointwise models predict on their own grid only"
                )

    def predict(self, ds):
        """The target predicted on every cell of ``ds``, lazily.

        Returns
        -------
        xarray.DataArray
            The ``sample_dims`` of ``ds`` with their coordinates, the target's name and
            attributes; NaN where a feature is NaN (or, pointwise, where the cell had no
            training data).  Poisson: the expected count; binomial: the probability.
            Its dask blocks are of the array type of the Dataset's blocks, on their
            device (CuPy-backed data gives CuPy predictions), whatever the model was
            fitted on.
        """
        check_is_fitted(self, "coef_")
        spec = self.spec_  # the settings of the fit, not parameters changed since
        spec.check(ds, need_target=False)
        fields = Fields(spec, ds, need_target=False)
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        args = fields.blockwise_args(index, with_target=False)  # the weights (for the shape), the fields
        if self.model == "pointwise":
            self._check_grid(spec, ds)
            chunks = fields.grid_chunks[1:] + ((self._coef_table.shape[-1],),)
            coef = da.from_array(self._coef_table, chunks=chunks)
            out = da.blockwise(_pointwise_block, index, fields.order, None, coef, index[1:] + "p", *args,
                               concatenate=True, dtype=np.float64, meta=fields.meta(len(index)))
        else:
            coef = np.asarray(self.coef_.values, dtype=np.float64)
            out = da.blockwise(_pooled_block, index, fields.order, None, coef, None, self.intercept_, None,
                               self.family, None, *args, dtype=np.float64, meta=fields.meta(len(index)))
        pred = xr.DataArray(out, dims=spec.sample_dims, coords=fields.coords, name=spec.target,
                            attrs=dict(self.target_attrs_))
        return pred.transpose(*fields.out_dims)

    def evaluate(self, ds):
        """Area-weighted skill on ``ds``: ``{"r2": ..., "rmse": ..., "n": cells scored}``.

        Cells where the target or the prediction is NaN are left out; weights are
        ``cos(latitude)`` (ones with ``area_weights=False``).
        """
        check_is_fitted(self, "coef_")
        spec = self.spec_
        spec.check(ds, need_target=True)
        fields = Fields(spec, ds, need_target=True)
        pred = self.predict(ds).transpose(*spec.sample_dims).data
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        sums = da.blockwise(_score_block, index + "s", fields.y, index, pred, index, fields.weight, index[1:],
                            new_axes={"s": 5}, adjust_chunks={i: (lambda n: 1) for i in index}, dtype=np.float64,
                            meta=np.empty((0,) * (len(index) + 1)))
        (sums,) = self._compute(sums.sum(axis=tuple(range(len(index))), split_every=self.split_every))
        sw, swy, swy2, swe2, n = (float(v) for v in sums)
        if sw <= 0:
            raise InputError("no cell has both a target and a prediction to score")
        mean = swy / sw
        ss_tot = swy2 - sw * mean * mean
        ss_res = swe2
        return {"r2": float(1.0 - ss_res / ss_tot) if ss_tot > 0 else float("nan"),
                "rmse": float(np.sqrt(ss_res / sw)), "n": int(n)}

    def score(self, ds, y=None):
        """Area-weighted coefficient of determination R^2 on ``ds``."""
        return self.evaluate(ds)["r2"]


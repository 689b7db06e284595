"""Diagnostics of fitted estimators."""

from sklearn.utils.validation import check_is_fitted

from ._engine.monitor import communicated

__all__ = ["communication_report"]


def communication_report(estimator):
    """Bytes moved by a fit and where its step time went.

    Parameters
    ----------
    estimator : a fitted dask_dgd estimator

    Returns
    -------
    dict
        ``up_raw``, ``up``, ``down``, ``total`` (bytes, as in ``bytes_communicated_``),
        ``compression_ratio`` (raw / sent on the way up), ``steps``,
        ``bytes_up_per_step``, ``compute_seconds`` (sum over steps of the slowest
        group's compute time), ``communication_seconds`` (sum of step time minus that:
        broadcast, reduction, waiting and driver work) and ``communication_share``.

    Examples
    --------
    >>> import numpy as np, dask_dgd
    >>> X = np.random.default_rng(0).standard_normal((200, 3))
    >>> est = dask_dgd.LinearRegression(solver="gd", compression="fp16").fit(X, X @ [1.0, 2.0, 3.0])
    >>> report = dask_dgd.communication_report(est)
    >>> report["compression_ratio"]  # 4 parameters: 48 bytes up raw, 32 as fp16
    1.5
    """
    check_is_fitted(estimator, "history_")
    h = estimator.history_
    totals = communicated(h)
    n = len(h)
    compute = float(h["compute_time_max"].fillna(0).sum()) if n else 0.0
    step = float(h["step_time"].fillna(0).sum()) if n else 0.0
    comm = max(0.0, step - compute)
    return {
        **totals,
        "steps": n,
        "bytes_up_per_step": totals["up"] / n if n else 0.0,
        "compute_seconds": compute,
        "communication_seconds": comm,
        "communication_share": comm / step if step > 0 else 0.0,
    }

"""Diagnostics of fitted estimators: where the time and the bytes went, and plots.

Every function takes a fitted estimator (anything with a ``history_`` DataFrame: the
linear models, the recommenders, a pooled ``ClimateRegressor`` through its
``estimator_``) or a ``history_`` DataFrame itself.  For the scheduler's own view of a
fit (task stream, worker profiles), wrap it in ``distributed.performance_report`` (it
needs bokeh, installed by the ``plot`` extra, and a default client)::

    from distributed import performance_report
    with performance_report(filename="fit.html"):
        est.fit(X, y)
"""

import math

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from ._engine.runtime.monitor import communicated
from .exceptions import InputError

__all__ = ["communication_report", "performance_report", "plot_history"]


def _history(obj):
    """The ``history_`` of an estimator (or of its ``estimator_``), or a DataFrame."""
    if isinstance(obj, pd.DataFrame):
        h = obj
    else:
        inner = getattr(obj, "estimator_", None)
        if not hasattr(obj, "history_") and inner is not None and hasattr(inner, "history_"):
            obj = inner
        check_is_fitted(obj, "history_")
        h = obj.history_
    if not len(h):
        raise InputError("the history is empty (a fit that took no step): nothing to report")
    return h


def _column(h, name):
    if name not in h.columns:
        return np.zeros(len(h))
    return pd.to_numeric(h[name], errors="coerce").to_numpy(dtype=np.float64)


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
    h = _history(estimator)
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


def performance_report(estimator):
    """Where a fit's time went, and how evenly the workers shared it.

    Parameters
    ----------
    estimator : a fitted dask_dgd estimator, or its ``history_`` DataFrame

    Returns
    -------
    dict
        ``steps`` and ``total_seconds`` (sum of step times);
        ``phases``: seconds summed over steps of ``compute`` (the slowest group's
        compute time), ``broadcast`` (driver sends -> last group starts),
        ``reduce`` (last group done -> sums on the driver), ``update`` (driver work
        between steps) and ``other`` (what is left of each step: waiting, driver work);
        ``phase_shares``: the same as fractions of the total.  Broadcast, compute and
        reduce can overlap within a step (the first group computes while the last one
        is still being sent to), so the shares may add up to a little more than 1;
        ``straggler_gap_seconds``: median over steps of slowest minus fastest group
        compute time, and ``straggler_gap_share`` its ratio to the slowest;
        ``balance``: median fastest / slowest compute (1 = perfectly balanced);
        ``compute_share``: median share of a step in which the slowest group computes
        (the ceiling of scaling efficiency: the rest is communication and driver work);
        ``parallel_efficiency``: ``compute_share * (1 + balance) / 2``, an estimate of
        the mean group's busy share (only the slowest and fastest groups are recorded);
        ``skew``: ``{"by", "imbalance", ...}`` from the fit's ``skew_report_`` (max/mean
        worker load after placement) or, for recommenders, the ratings per shard; None
        for in-process fits; ``bytes``: the totals of :func:`communication_report`.

    Examples
    --------
    >>> import numpy as np, dask_dgd
    >>> X = np.random.default_rng(0).standard_normal((500, 3))
    >>> est = dask_dgd.LinearRegression(solver="gd", max_iter=5, tol=0).fit(X, X @ [1.0, 2.0, 3.0])
    >>> report = dask_dgd.performance_report(est)
    >>> sorted(report["phases"])
    ['broadcast', 'compute', 'other', 'reduce', 'update']
    """
    h = _history(estimator)
    step = _column(h, "step_time")
    comp_max = _column(h, "compute_time_max")
    comp_min = _column(h, "compute_time_min")
    phases = {
        "compute": float(np.nansum(comp_max)),
        "broadcast": float(np.nansum(_column(h, "broadcast_time"))),
        "reduce": float(np.nansum(_column(h, "reduce_time"))),
        "update": float(np.nansum(_column(h, "update_time"))),
    }
    total = float(np.nansum(step))
    rest = step - np.nan_to_num(comp_max) - np.nan_to_num(_column(h, "broadcast_time")) - np.nan_to_num(
        _column(h, "reduce_time"))
    phases["other"] = float(np.nansum(np.clip(rest, 0.0, None)))
    gap = comp_max - comp_min
    ok = comp_max > 0
    balance = float(np.nanmedian(comp_min[ok] / comp_max[ok])) if ok.any() else math.nan
    share = float(np.nanmedian(comp_max[step > 0] / step[step > 0])) if (step > 0).any() else math.nan
    skew = None
    if not isinstance(estimator, pd.DataFrame):
        report = getattr(estimator, "skew_report_", None)
        if report is None and getattr(estimator, "estimator_", None) is not None:
            report = getattr(estimator.estimator_, "skew_report_", None)
        if report is not None:  # the linear engine's skew_report_: load after placement
            skew = {"by": report.get("cost"), "imbalance": report.get("imbalance_after"), **dict(report)}
        elif hasattr(estimator, "shard_ratings_"):
            loads = np.asarray(estimator.shard_ratings_, dtype=np.float64)
            skew = {"by": "ratings per shard", "loads": loads.tolist(),
                    "imbalance": float(loads.max() / loads.mean()) if loads.size and loads.mean() > 0 else math.nan}
    return {
        "steps": int(len(h)),
        "total_seconds": total,
        "phases": phases,
        "phase_shares": {k: (v / total if total > 0 else math.nan) for k, v in phases.items() if k != "update"},
        "straggler_gap_seconds": float(np.nanmedian(gap)) if len(gap) else math.nan,
        "straggler_gap_share": float(np.nanmedian(gap[ok] / comp_max[ok])) if ok.any() else math.nan,
        "balance": balance,
        "compute_share": share,
        "parallel_efficiency": (share * (1 + balance) / 2 if not (math.isnan(share) or math.isnan(balance))
                                else math.nan),
        "skew": skew,
        "bytes": communicated(h),
    }


def plot_history(estimator, path=None, *, title=None):
    """A figure of a fit's history: loss, gradient norm, step time by phase, bytes.

    Parameters
    ----------
    estimator : a fitted dask_dgd estimator, or its ``history_`` DataFrame
    path : str or path-like, optional
        Also save the figure there (the format from the suffix, e.g. ``.png``).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Four panels against the step: the objective (log scale when positive), the
        gradient norm (log), the step time stacked as compute (slowest group),
        broadcast, reduce and the rest (waiting, driver work), and the bytes moved per
        step (up raw, up as sent, down).  Made without pyplot, so it works headless
        and leaves pyplot's state alone.  Needs matplotlib (``pip install "dask-dgd[plot]"``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - matplotlib is in the test extra
        raise ImportError('plot_history needs matplotlib: pip install "dask-dgd[plot]"') from err
    h = _history(estimator)
    x = _column(h, "step")
    if not np.any(x):
        x = np.arange(1, len(h) + 1, dtype=np.float64)
    fig = Figure(figsize=(10, 7), layout="constrained")
    (ax_loss, ax_grad), (ax_time, ax_bytes) = fig.subplots(2, 2)
    loss = _column(h, "loss")
    ax_loss.plot(x, loss, marker="." if len(h) < 60 else None)
    if np.all(loss[np.isfinite(loss)] > 0):
        ax_loss.set_yscale("log")
    ax_loss.set(title="objective", xlabel="step")
    grad = _column(h, "grad_norm")
    ax_grad.plot(x, grad, color="tab:orange")
    if np.all(grad[np.isfinite(grad)] > 0):
        ax_grad.set_yscale("log")
    ax_grad.set(title="gradient norm", xlabel="step")
    compute = np.nan_to_num(_column(h, "compute_time_max"))
    broadcast = np.nan_to_num(_column(h, "broadcast_time"))
    reduce = np.nan_to_num(_column(h, "reduce_time"))
    rest = np.clip(np.nan_to_num(_column(h, "step_time")) - compute - broadcast - reduce, 0, None)
    ax_time.stackplot(x, 1e3 * compute, 1e3 * broadcast, 1e3 * reduce, 1e3 * rest,
                      labels=["compute (slowest group)", "broadcast", "reduce", "wait / driver"])
    ax_time.set(title="step time", xlabel="step", ylabel="ms")
    ax_time.legend(loc="upper right", fontsize="small")
    series = {label: np.nan_to_num(_column(h, name)) for name, label in
              (("bytes_up_raw", "up (raw)"), ("bytes_up", "up (sent)"), ("bytes_down", "down"))}
    top = max((float(v.max()) for v in series.values() if v.size), default=0.0)
    unit, scale = next(((u, f) for u, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if top >= f), ("B", 1))
    for label, values in series.items():
        ax_bytes.plot(x, values / scale, label=label)
    ax_bytes.set(title="bytes per step", xlabel="step", ylabel=unit)
    ax_bytes.legend(loc="upper right", fontsize="small")
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig

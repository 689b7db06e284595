"""Diagnostics: performance_report, plot_history, and dask's own HTML report."""

import warnings

import dask.array as da
import numpy as np
import pytest
from distributed import performance_report as dask_performance_report

import dask_dgd
from dask_dgd import InputError, NotFittedError
from dask_dgd.datasets import make_ratings, make_regression
from dask_dgd.testing import straggler


@pytest.fixture(scope="module")
def data():
    X, y = make_regression(200_000, 20, chunks=25_000, random_state=0)
    return X, y


def _fit(client, X, y):
    # blocks stay where they are: dynamic balancing would move them off a straggler
    est = dask_dgd.LinearRegression(solver="gd", max_iter=8, tol=0, rebalance=False, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def test_performance_report_adds_up_and_sees_a_straggler(client, data):
    X, y = data
    X, y = client.persist([X, y])
    even = dask_dgd.performance_report(_fit(client, X, y))
    assert even["steps"] == 9 and even["total_seconds"] > 0
    parts = even["phases"]
    assert parts["compute"] <= even["total_seconds"]
    # the phases cover every step (they may overlap a little: broadcast while computing)
    assert sum(parts[k] for k in ("compute", "broadcast", "reduce", "other")) >= even["total_seconds"] * (1 - 1e-9)
    assert 1.0 - 1e-9 <= sum(even["phase_shares"].values()) < 1.5
    assert 0 < even["compute_share"] <= 1 and 0 < even["parallel_efficiency"] <= 1
    assert even["skew"] is not None and "imbalance" in even["skew"]  # the fit's skew_report_
    slow = sorted(client.scheduler_info()["workers"])[-1]
    with straggler(client, slow, factor=9.0):
        slowed = dask_dgd.performance_report(_fit(client, X, y))
    # the slow worker's groups take 10x as long (gap share 9/10, balance 1/10 if nothing
    # else varied): the report shows it, far beyond what a busy machine's noise does
    assert slowed["straggler_gap_share"] > 0.5 and slowed["straggler_gap_share"] > even["straggler_gap_share"]
    assert slowed["balance"] < 0.5 and slowed["balance"] < even["balance"]
    # the estimate discounts the idle share of the fast groups
    assert slowed["parallel_efficiency"] < slowed["compute_share"]


def test_reports_for_recommenders_and_climate_models(client, tmp_path):
    ratings, _ = make_ratings(200, 80, 3000, random_state=0)
    mf = dask_dgd.MatrixFactorization(n_components=3, max_iter=5, tol=0, n_shards=2, client=client).fit(ratings)
    report = dask_dgd.performance_report(mf)
    assert report["skew"]["by"] == "ratings per shard" and report["skew"]["imbalance"] < 1.05
    fig = dask_dgd.plot_history(mf, tmp_path / "mf.png", title="matrix factorization")
    assert (tmp_path / "mf.png").stat().st_size > 20_000
    assert [ax.get_title() for ax in fig.axes] == ["objective", "gradient norm", "step time", "bytes per step"]


def test_plot_history_writes_a_png(client, data, tmp_path):
    X, y = data
    est = _fit(client, X, y)
    path = tmp_path / "history.png"
    fig = dask_dgd.plot_history(est, path)
    assert path.stat().st_size > 20_000
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    loss_line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(loss_line.get_ydata(), est.history_["loss"].to_numpy())
    assert fig.axes[0].get_yscale() == "log"
    dask_dgd.plot_history(est.history_)  # a history DataFrame works too


def test_dask_html_report_of_a_fit(client, data, tmp_path):
    X, y = data
    path = tmp_path / "fit.html"
    with client.as_current(), dask_performance_report(filename=str(path)):
        _fit(client, X, y)
    assert path.stat().st_size > 10_000 and "<html" in path.read_text()[:2000].lower()


def test_diagnostics_errors():
    with pytest.raises(NotFittedError):
        dask_dgd.performance_report(dask_dgd.LinearRegression())
    import pandas as pd

    with pytest.raises(InputError, match="the history is empty"):
        dask_dgd.plot_history(pd.DataFrame({"step": [], "loss": []}))
    assert da  # dask.array imported for the fixtures' collections

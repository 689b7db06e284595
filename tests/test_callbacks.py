"""The callbacks= parameter and the HistoryWriter callback."""

import warnings

import numpy as np
import pandas as pd
import pytest

import dask_dgd
from dask_dgd import ParameterError
from dask_dgd.callbacks import HistoryWriter
from dask_dgd.datasets import make_ratings


def _data():
    X = np.random.default_rng(0).standard_normal((500, 3))
    return X, X @ np.array([1.0, -2.0, 0.5])


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_history_writer_streams_the_history(tmp_path, suffix):
    X, y = _data()
    path = tmp_path / f"history.{suffix}"
    seen_sizes = []

    def watch(record):  # the file exists and grows while the fit runs (CSV)
        if suffix == "csv" and path.exists():
            seen_sizes.append(path.stat().st_size)

    writer = HistoryWriter(path, every=3)
    est = dask_dgd.LinearRegression(solver="gd", max_iter=10, tol=0, callbacks=[writer, watch])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    written = writer.read()
    assert len(written) == len(est.history_) == 11
    np.testing.assert_allclose(written["loss"], est.history_["loss"])
    np.testing.assert_array_equal(written["step"], est.history_["step"])
    if suffix == "csv":
        assert seen_sizes == sorted(seen_sizes) and len(set(seen_sizes)) == len(seen_sizes) > 5
        assert str(written["updates_per_group"].iloc[0]) == "1"  # tuples as ";"-joined text
    else:
        assert not list(tmp_path.glob(".history.parquet.tmp*"))  # written through a temp file


def test_a_callback_can_stop_the_fit():
    X, y = _data()
    est = dask_dgd.LinearRegression(solver="gd", max_iter=50, tol=0,
                                    callbacks=[lambda rec: rec["step"] >= 4]).fit(X, y)
    assert len(est.history_) == 4
    ratings, _ = make_ratings(60, 30, 600, random_state=0)
    mf = dask_dgd.MatrixFactorization(n_components=2, alpha=0.1, max_iter=30, tol=0,
                                      callbacks=[lambda rec: rec["step"] >= 3]).fit(ratings)
    # ALS: one record per iteration of 4 steps (steps 1, 5, ...): the second one stops it
    assert mf.history_["step"].tolist() == [1, 5] and mf.n_iter_ == 2
    # with alpha="auto", the callbacks see (and may stop) the refit; the path runs without them
    auto = dask_dgd.MatrixFactorization(n_components=2, max_iter=30, tol=0, random_state=0,
                                        callbacks=[lambda rec: rec["step"] >= 3]).fit(ratings)
    refit = auto.history_[auto.history_["stage"] == "refit"]
    assert refit["step"].tolist() == [1, 5] and len(auto.history_) > 2


def test_callback_errors(tmp_path):
    X, y = _data()
    with pytest.raises(ParameterError, match="'callbacks' parameter of LinearRegression must be"):
        dask_dgd.LinearRegression(callbacks=["not callable"]).fit(X, y)
    with pytest.raises(ParameterError, match="'callbacks' parameter of MatrixFactorization must be"):
        dask_dgd.MatrixFactorization(callbacks=print).fit(pd.DataFrame({"user": [1], "item": [1], "rating": [1.0]}))
    with pytest.raises(ParameterError, match="HistoryWriter writes .csv or .parquet files; got"):
        HistoryWriter(tmp_path / "h.json")
    with pytest.raises(ParameterError, match="every must be an int >= 1; got 0"):
        HistoryWriter(tmp_path / "h.csv", every=0)

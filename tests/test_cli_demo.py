"""``dask-dgd demo``: Numba compilation happens in a warm-up, before any timed fit."""

import argparse
import contextlib
import io

import pytest

from dask_dgd import cli
from dask_dgd.cli import _demo, _warm


def _record_fits(monkeypatch, log):
    from dask_dgd import (
        ClimateRegressor,
        LinearRegression,
        LogisticRegression,
        MatrixFactorization,
        PoissonRegressor,
    )

    for cls in (LogisticRegression, LinearRegression, PoissonRegressor, MatrixFactorization, ClimateRegressor):
        def fit(self, *args, _fit=cls.fit, **kwargs):
            log.append(type(self).__name__)
            return _fit(self, *args, **kwargs)

        monkeypatch.setattr(cls, "fit", fit)


@pytest.mark.parametrize("linear_only", [False, True])
def test_warm_up_fits_every_model_on_the_cluster(linear_only, client, monkeypatch):
    compiled, fits = [], []
    monkeypatch.setattr(_warm, "warm_cache", lambda c, parts: compiled.append((c, parts)) or {})
    _record_fits(monkeypatch, fits)
    seconds = _demo.warm_up(client, argparse.Namespace(features=3, seed=0), linear_only=linear_only)
    # the kernels are compiled once per part, side by side, before the fits on the cluster
    assert compiled == [(client, ("linear",) if linear_only else _warm.PARTS)]
    linear = ["LogisticRegression", "LinearRegression", "PoissonRegressor"]
    assert fits == linear + ([] if linear_only else ["MatrixFactorization", "ClimateRegressor"])
    assert seconds > 0


def test_warm_cache_runs_each_part_once_in_a_task_on_a_worker(client, monkeypatch):
    from distributed import get_worker

    ran = []
    monkeypatch.setitem(_warm._FITS, "linear", lambda: ran.append(("linear", get_worker().address)))
    monkeypatch.setitem(_warm._FITS, "recommender", lambda: ran.append(("recommender", get_worker().address)))
    times = _warm.warm_cache(client, ("linear", "recommender"))
    assert list(times) == ["linear", "recommender"] and all(t >= 0 for t in times.values())
    workers = set(client.scheduler_info()["workers"])
    assert sorted(name for name, _ in ran) == ["linear", "recommender"]
    assert all(address in workers for _, address in ran)


def test_warm_cache_part_names_are_checked():
    with pytest.raises(ValueError, match=r"unknown part 'nope'; choose among \('climate', 'linear', 'recommender'\)"):
        _warm.compile_part("nope")


def test_compile_part_fits_the_linear_models_in_this_process(monkeypatch):
    fits = []
    _record_fits(monkeypatch, fits)
    assert _warm.compile_part("linear") > 0
    assert fits == ["LogisticRegression", "LinearRegression", "PoissonRegressor"]


@pytest.mark.slow
def test_demo_warms_up_before_any_timed_fit(monkeypatch):
    events = []
    real_warm_up = _demo.warm_up

    def warm_up(client, args, linear_only=False):
        events.append("warm-up")
        return real_warm_up(client, args, linear_only=linear_only)

    monkeypatch.setattr(_demo, "warm_up", warm_up)
    def logged(name):
        real = getattr(_demo, name)

        def task(*args, **kwargs):
            events.append(name)
            return real(*args, **kwargs)

        return task

    for name in ("_logistic_task", "_linear_task", "_poisson_task", "recommender_task", "climate_task"):
        monkeypatch.setattr(_demo, name, logged(name))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["demo", "--rows", "400", "--small-rows", "200", "--features", "3", "--ratings", "400",
                         "--cells", "8", "--max-iter", "20"])
    out = stdout.getvalue()
    assert code == 0, out
    assert events == ["warm-up", "_logistic_task", "_linear_task", "_poisson_task", "recommender_task",
                      "climate_task"]
    assert "outside the timed fits" in out and "(not in any wall time below)" in out
    assert out.index("outside the timed fits") < out.index("[logistic] dask_dgd.LogisticRegression")
    assert "not the\n  Numba compilation" in out  # the table's notes say so too

"""Progress bars (verbose >= 1): labelled with the estimator, out of max_iter iterations."""

import pytest

from dask_dgd import LinearRegression, LogisticRegression, train
from dask_dgd._engine.runtime.monitor import progress_label
from dask_dgd.datasets import make_classification, make_regression
from dask_dgd.losses import HalfSquaredError, LinearObjective

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.mark.parametrize("solver", ["lbfgs", "gd", "sgd"])
def test_linear_fit_bar_is_labelled_with_the_estimator_and_max_iter(solver, bars, capsys):
    X, y = make_classification(400, 3, random_state=0)
    kw = {"batch_size": 100, "random_state": 0} if solver == "sgd" else {}
    est = LogisticRegression(solver=solver, max_iter=7, tol=0, verbose=1, **kw).fit(X, y)
    err = capsys.readouterr().err
    assert "LogisticRegression:" in err and "/7 [" in err, err
    assert "dask-dgd" not in err
    (bar,) = bars
    assert bar.desc.startswith("LogisticRegression") and bar.total == 7 and bar.unit == "iter"
    assert bar.closed_at == est.n_iter_


def test_a_linear_fit_in_local_mode_counts_epochs(bars):
    X, y = make_regression(400, 3, random_state=0)
    est = LinearRegression(mode="local", solver="sgd", batch_size=50, max_iter=3, tol=0, local_steps=2,
                           random_state=0, verbose=1).fit(X, y)
    (bar,) = bars
    assert bar.desc == "LinearRegression" and bar.total == 3
    assert bar.closed_at == est.n_iter_ == 3


def test_train_labels_its_bar_and_an_enclosing_label_wins(bars):
    X, y = make_regression(200, 2, random_state=0)
    objective = LinearObjective(HalfSquaredError(), 2)
    train(objective, (X, y), solver="gd", max_iter=4, tol=0, verbose=1)
    with progress_label("MyModel"):
        train(objective, (X, y), solver="gd", max_iter=4, tol=0, verbose=1, progress_desc="inner")
    assert [(b.desc, b.total, b.closed_at) for b in bars] == [("dask_dgd.train", 4, 4), ("MyModel", 4, 4)]


def test_verbose_zero_opens_no_bar(bars):
    X, y = make_regression(100, 2, random_state=0)
    LinearRegression(verbose=0, max_iter=3, tol=0, solver="gd").fit(X, y)
    assert bars == []


def test_a_fit_that_stops_at_its_tolerance_shows_max_iter_as_a_limit_without_time_left(bars, capsys):
    """With tol > 0 (the default) max_iter is only a limit: a 0.1 s fit that converges in
    a few of 100 iterations showed an ETA of over a minute.  Its bar counts the
    iterations "(at most 100)", without a percentage or time left."""
    from dask_dgd._engine.runtime.monitor import CAPPED_FORMAT

    X, y = make_classification(400, 3, random_state=0)
    est = LogisticRegression(solver="lbfgs", verbose=1).fit(X, y)
    err = capsys.readouterr().err
    (bar,) = bars
    assert bar.total == 100 and bar.closed_at == est.n_iter_ < 100
    assert bar.bar_format == CAPPED_FORMAT and "{remaining}" not in CAPPED_FORMAT
    assert "LogisticRegression: 0 iter (at most 100) [" in err, err
    assert "%|" not in err and "<" not in err, err


@pytest.mark.parametrize("params", [dict(early_stopping=True, solver="gd", tol=0.0),
                                    dict(max_time=60.0, solver="gd", tol=0.0)], ids=["early_stopping", "max_time"])
def test_early_stopping_or_a_time_limit_also_make_max_iter_a_limit(params, bars):
    X, y = make_classification(400, 3, random_state=0)
    LogisticRegression(max_iter=3, verbose=1, **params).fit(X, y)
    (bar,) = bars
    assert bar.total == 3 and "(at most {total_fmt})" in bar.bar_format


def test_tol_zero_keeps_the_forecast(bars):
    """Nothing but max_iter ends the fit: the total is what it will run, and tqdm's own
    format (percentage, time left) is true."""
    X, y = make_classification(400, 3, random_state=0)
    LogisticRegression(solver="gd", max_iter=3, tol=0, verbose=1).fit(X, y)
    (bar,) = bars
    assert bar.bar_format is None and bar.closed_at == 3


def test_a_capped_bar_renders_count_limit_and_postfix():
    from dask_dgd._engine.runtime.monitor import progress_bar

    bar = progress_bar(1, 50, "Model", "iter", capped=True)
    try:
        bar.update(4)
        bar.set_postfix({"loss": "0.25"}, refresh=False)
        text = str(bar)
    finally:
        bar.close()
    assert text.startswith("Model: 4 iter (at most 50) [") and text.endswith(", loss=0.25]"), text
    unbounded = progress_bar(1, None, "Model", "iter", capped=True)
    unbounded.close()
    assert unbounded.bar_format is None  # no total: tqdm's own format, which has no time left then

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

"""Early stopping on a validation set held out where the data lives; custom metrics."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, make_scorer, r2_score

from dask_dgd import ConvergenceWarning, InputError, LinearRegression, LogisticRegression, ParameterError
from dask_dgd._engine.data.holdout import holdout_mask

rng = np.random.default_rng(0)
# few rows, many features, no penalty: the validation loss turns up while training goes on
X = rng.standard_normal((400, 60))
Y = (X[:, :3] @ [1.0, -1.0, 0.5] + rng.standard_normal(400) > 0).astype(int)
CHUNK = 100


def _held_out(fraction, seed, n=400, chunk=CHUNK):
    return np.concatenate([holdout_mask(b * chunk, min(chunk, n - b * chunk), (seed, 1), fraction)
                           for b in range(-(-n // chunk))])


def test_the_split_depends_on_the_rows_position_not_the_chunking():
    """One rule for every holdout (issue 42): a row's draw is a function of the seed and
    its position, as the cross-validation folds' (it was seeded by the block index)."""
    whole = _held_out(0.25, 3, chunk=400)
    for chunk in (1, 7, 100, 399):
        np.testing.assert_array_equal(_held_out(0.25, 3, chunk=chunk), whole)
    assert 70 < whole.sum() < 130  # about a quarter
    assert not np.array_equal(_held_out(0.25, 4), whole)  # another seed, another split


def test_stops_when_the_validation_loss_stalls():
    kw = dict(solver="sgd", batch_size=32, optimizer="adam", learning_rate=0.01, alpha=0.0, max_iter=200,
              tol=0.0, random_state=0)
    est = LogisticRegression(**kw, early_stopping=True, n_iter_no_change=3).fit(X, Y)
    assert est.n_iter_ < 200
    scores = est.history_["val_score"].dropna()
    assert len(scores) == est.n_iter_ + 1  # at the start and after every epoch
    # stopped exactly when 3 epochs in a row missed the best score by tol
    best = scores.cummax()
    assert (scores.iloc[-3:] <= best.iloc[-4]).all() and est.best_validation_score_ == scores.max()
    # it stopped because the validation loss turned up, not the training loss
    train = est.history_.groupby("iteration")["loss"].mean()
    assert train.iloc[-1] < train.iloc[-4]
    assert est.history_["val_loss"].dropna().iloc[-1] > est.history_["val_loss"].min()


def test_validation_rows_are_not_trained_on(client):
    """With a patience that never ends, the fit equals a plain fit on the training rows
    (the starting intercept too comes from the training rows' class balance)."""
    kw = dict(solver="gd", optimizer="adam", learning_rate=0.05, alpha=0.01, max_iter=30, tol=0.0, random_state=4,
              class_weight="balanced")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LogisticRegression(**kw, early_stopping=True, validation_fraction=0.25, n_iter_no_change=1000,
                                 client=client)
        est.fit(da.from_array(X, chunks=(CHUNK, -1)), da.from_array(Y, chunks=CHUNK))
        held = _held_out(0.25, 4)
        assert 60 < held.sum() < 140
        train = LogisticRegression(**kw).fit(X[~held], Y[~held])
    # (4 blocks on the cluster, 1 in process: equal up to the rounding of the sums)
    np.testing.assert_allclose(est.coef_, train.coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(est.intercept_, train.intercept_, rtol=0, atol=1e-8)
    # and the validation loss is the mean log-loss of the held-out rows
    p = est.predict_proba(X[held])[:, 1]
    counts = np.bincount(Y[~held])  # "balanced" weights, from the training rows
    w = (counts.sum() / (2 * counts))[Y[held]]
    log_loss = -np.average(Y[held] * np.log(p) + (1 - Y[held]) * np.log(1 - p), weights=w)
    assert est.history_["val_loss"].iloc[-1] == pytest.approx(log_loss, rel=1e-10)


@pytest.mark.slow
def test_same_stop_whatever_the_reduction_tree(client):
    """The split is a function of the seed and the rows' positions: another reduction
    tree (or placement) stops at the same epoch with the same model, up to rounding."""
    kw = dict(solver="sgd", batch_size=50, optimizer="adam", learning_rate=0.01, alpha=0.0, max_iter=100,
              random_state=2, early_stopping=True, client=client)
    Xd, yd = da.from_array(X, chunks=(CHUNK, -1)), da.from_array(Y, chunks=CHUNK)
    a = LogisticRegression(**kw).fit(Xd, yd)
    b = LogisticRegression(**kw, split_every=2, rebalance=False).fit(Xd, yd)
    assert a.n_iter_ == b.n_iter_ < 100
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=0, atol=1e-10)


def test_custom_metric_and_scorer_names():
    kw = dict(solver="gd", optimizer="adam", learning_rate=0.05, alpha=0.0, max_iter=40, tol=0.0,
              early_stopping=True, n_iter_no_change=1000, random_state=1)
    held = _held_out(0.1, 1, chunk=400)  # in process: one block
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LogisticRegression(**kw, scoring="accuracy").fit(X, np.array(["no", "yes"])[Y])
        assert est.validation_score_ == accuracy_score(np.array(["no", "yes"])[Y[held]], est.predict(X[held]))
        y = X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(400)
        metric = make_scorer(lambda t, p: -np.max(np.abs(t - p)))  # a custom metric: minus the worst error
        reg = LinearRegression(**kw, scoring=metric).fit(X, y)
        assert reg.validation_score_ == pytest.approx(-np.max(np.abs(y[held] - reg.predict(X[held]))), rel=1e-12)
        reg2 = LinearRegression(**kw, scoring="r2").fit(X, y)
        assert reg2.validation_score_ == pytest.approx(r2_score(y[held], reg2.predict(X[held])), rel=1e-12)


def test_early_stopping_errors():
    with pytest.raises(ParameterError, match=r"early_stopping needs synchronous first-order training .*got solver='lbfgs'"):
        LogisticRegression(early_stopping=True).fit(X, Y)
    with pytest.raises(ParameterError, match=r"got solver='gd', mode='async'"):
        LogisticRegression(solver="gd", mode="async", early_stopping=True).fit(X, Y)
    with pytest.raises(ParameterError, match=r"'validation_fraction' parameter .* a float in \(0, 1\); got 1.0"):
        LogisticRegression(solver="gd", early_stopping=True, validation_fraction=1.0).fit(X, Y)
    with pytest.raises(ParameterError, match=r"'n_iter_no_change' parameter .* got 0"):
        LogisticRegression(solver="gd", early_stopping=True, n_iter_no_change=0).fit(X, Y)
    with pytest.raises(ParameterError, match=r"scoring='acuracy' is not a scikit-learn scorer name"):
        LogisticRegression(solver="gd", early_stopping=True, scoring="acuracy").fit(X, Y)
    with pytest.raises(InputError, match=r"validation_fraction=0.01 of 5 rows leaves the validation set empty"):
        LogisticRegression(solver="gd", early_stopping=True, validation_fraction=0.01, random_state=0).fit(
            X[:5], [0, 1, 0, 1, 1])
    with pytest.raises(ParameterError, match="early_stopping with a checkpoint needs an int random_state"):
        LogisticRegression(solver="gd", early_stopping=True, checkpoint="x").fit(X, Y)


# ------------------------------------------------------------------ the callback
def test_early_stopping_callback_on_any_field_and_mode(client):
    from dask_dgd.callbacks import EarlyStopping

    Xd, yd = da.from_array(X, chunks=(CHUNK, -1)), da.from_array(Y, chunks=CHUNK)
    for mode in ("sync", "local"):
        stop = EarlyStopping(monitor="loss", patience=2, min_delta=1e-3)
        est = LogisticRegression(solver="gd", mode=mode, max_iter=500, tol=0.0, alpha=1e-2, callbacks=[stop],
                                 client=client).fit(Xd, yd)
        losses = est.history_["loss"].to_numpy()
        assert stop.stopped_at == est.history_["step"].iloc[-1] and len(losses) < 500
        # the last two records missed the best by at most min_delta
        assert np.all(losses[-2:] > losses[:-2].min() - 1e-3)
    # on the validation score, maximised
    stop = EarlyStopping(monitor="val_score", mode="max", patience=2)
    est = LogisticRegression(solver="gd", optimizer="adam", learning_rate=0.05, alpha=0.0, max_iter=300, tol=0.0,
                             early_stopping=True, n_iter_no_change=1000, random_state=0, callbacks=[stop]).fit(X, Y)
    assert est.n_iter_ < 300 and stop.best == est.history_["val_score"].max()


def test_early_stopping_callback_errors():
    from dask_dgd.callbacks import EarlyStopping

    with pytest.raises(ParameterError, match="mode must be 'min' or 'max'; got 'up'"):
        EarlyStopping(mode="up")
    with pytest.raises(ParameterError, match="patience must be an int >= 1; got 0"):
        EarlyStopping(patience=0)
    with pytest.raises(ParameterError, match="min_delta must be a number >= 0; got -1"):
        EarlyStopping(min_delta=-1)
    with pytest.raises(ParameterError, match="EarlyStopping monitors 'val_acc', which the step records do not have"):
        LinearRegression(solver="gd", callbacks=[EarlyStopping(monitor="val_acc")]).fit(X, X[:, 0])


def test_scorer_on_a_dataframe_sees_the_column_names(client):
    import dask.dataframe as dd
    import pandas as pd

    frame = pd.DataFrame(X[:, :5], columns=list("abcde"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "X does not have valid feature names" would fail
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LogisticRegression(solver="gd", max_iter=5, tol=0.0, early_stopping=True, scoring="accuracy",
                                 random_state=0, client=client).fit(
            dd.from_pandas(frame, npartitions=4), da.from_array(Y, chunks=100))
    assert 0.5 < est.validation_score_ <= 1.0


def test_sgd_early_stopping_is_not_cut_short_by_the_training_objective_rule():
    # the validation score improves every epoch: only max_iter may stop the fit
    kw = dict(solver="sgd", batch_size=100, optimizer="sgd", learning_rate=1e-4, alpha=0.0, max_iter=12,
              tol=0.0, early_stopping=True, n_iter_no_change=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LogisticRegression(**kw).fit(X, Y)
    scores = est.history_["val_score"].dropna().to_numpy()
    assert np.all(np.diff(scores) > 0) and est.n_iter_ == 12

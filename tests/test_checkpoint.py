"""Checkpoints: interrupt a fit, resume it, get the uninterrupted result; bad files refused."""

import logging
import os
import pickle
import warnings

import dask.array as da
import numpy as np
import pytest
from interrupts import Interrupted, StopAfter, StopAt

from dask_dgd import (
    CheckpointError,
    ConvergenceWarning,
    DivergenceError,
    LinearRegression,
    LogisticRegression,
    ParameterError,
    PoissonRegressor,
    optim,
)
from dask_dgd._files.archive import decode, read_archive
from dask_dgd.compression import TopK

rng = np.random.default_rng(0)
X = rng.standard_normal((3000, 5))
Y_BIN = (X @ [1.0, -1.0, 0.5, 0.0, 2.0] + rng.standard_normal(3000) > 0).astype(int)
Y_MULTI = np.digitize(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(3000), [-0.5, 0.5])


CASES = {
    "gd-adam": (LogisticRegression, dict(solver="gd", optimizer="adam", max_iter=40, tol=0.0), Y_BIN),
    "sgd-momentum": (LogisticRegression, dict(solver="sgd", batch_size=256, optimizer="rmsprop", max_iter=4,
                                              tol=0.0, random_state=5), Y_MULTI),
    # each block compresses its own sums (with its own residual): any placement
    "gd-topk": (LinearRegression, dict(solver="gd", compression="topk:0.4", max_iter=30, tol=0.0),
                X @ [1.0, 2.0, 0.0, -1.0, 0.5]),
    # EF21 estimates on the blocks, their sum and the parameters' copy on the driver (the
    # groups' copies are synced in full after the resume: the same values)
    "gd-topk-downlink": (LinearRegression, dict(solver="gd", compression=TopK(0.2, downlink=True), max_iter=30,
                                                tol=0.0), X @ [1.0, 2.0, 0.0, -1.0, 0.5]),
    "gd-l1": (LinearRegression, dict(solver="gd", alpha=0.05, l1_ratio=0.5, max_iter=30, tol=0.0),
              X @ [1.0, 2.0, 0.0, -1.0, 0.5]),
    # the quasi-Newton pairs and the line search are in the checkpoint too
    "lbfgs": (LogisticRegression, dict(solver="lbfgs", max_iter=30, tol=1e-12), Y_MULTI),
    # local SGD: the groups' own optimizer states are gathered into the checkpoint
    "local": (LinearRegression, dict(solver="gd", mode="local", local_steps=2, optimizer="adam", max_iter=40,
                                     tol=0.0), X @ [1.0, 2.0, 0.0, -1.0, 0.5]),
    # local SGD's compressed round changes: the groups' EF21 estimates and the driver's sum
    "local-topk": (LinearRegression, dict(solver="gd", mode="local", local_steps=2, compression="topk:0.4",
                                          max_iter=40, tol=0.0), X @ [1.0, 2.0, 0.0, -1.0, 0.5]),
}


def _dask(y):
    return da.from_array(X, chunks=(700, -1)), da.from_array(y, chunks=700)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("where", ["cluster", "in-process"])
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, client, case, where):
    cls, params, y = CASES[case]
    Xf, yf = client.persist(_dask(y)) if where == "cluster" else (X, y)  # one placement for all fits
    kw = dict(client=client) if where == "cluster" else {}
    ref = cls(**params, **kw).fit(Xf, yf)
    folder = tmp_path / "ckpt"
    est = cls(**params, **kw, checkpoint=folder, checkpoint_every=3, callbacks=[StopAt(11)])
    with pytest.raises(Interrupted):
        est.fit(Xf, yf)
    assert os.listdir(folder) == ["checkpoint.npz"]
    resumed = cls(**params, **kw, checkpoint=folder, checkpoint_every=3).fit(Xf, yf, resume=True)
    if where == "cluster" and params.get("mode") == "local" and (
            resumed.skew_report_["placement"] != ref.skew_report_["placement"]):
        # local SGD averages per group: on a busy machine Dask may have replicated a
        # block between the reference fit and the interrupted one, which then grouped
        # the blocks otherwise (the resumed fit follows the interrupted one's grouping)
        np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=0.05)
        return
    np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(resumed.intercept_, ref.intercept_, rtol=0, atol=1e-12)
    # the history is the whole fit's: steps 1..9 from the checkpoint, the rest after it
    assert resumed.history_["step"].tolist() == ref.history_["step"].tolist()
    np.testing.assert_allclose(resumed.history_["loss"], ref.history_["loss"], rtol=0, atol=1e-12)
    assert resumed.n_iter_ == ref.n_iter_


def test_random_state_none_resumes_with_the_interrupted_fit_draws(tmp_path):
    from dask_dgd._files.archive import decode, read_archive

    params = dict(solver="sgd", batch_size=300, optimizer="adam", max_iter=3, tol=0.0, random_state=None)
    est = LogisticRegression(**params, checkpoint=tmp_path, checkpoint_every=4, callbacks=[StopAt(14)])
    with pytest.raises(Interrupted):
        est.fit(X, Y_BIN)
    content, arrays = read_archive(tmp_path / "checkpoint.npz", "checkpoint")
    seed = decode(content["state"], arrays)["seed"]
    assert len(seed) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        resumed = LogisticRegression(**params, checkpoint=tmp_path).fit(X, Y_BIN, resume=True)
        ref = LogisticRegression(**{**params, "random_state": int(seed[0])}).fit(X, Y_BIN)
    np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=1e-12)


def test_resuming_a_finished_fit_returns_it(tmp_path):
    est = LinearRegression(solver="gd", checkpoint=tmp_path, max_iter=500).fit(X, X[:, 0] - X[:, 1])
    again = LinearRegression(solver="gd", checkpoint=tmp_path, max_iter=500).fit(X, X[:, 0] - X[:, 1], resume=True)
    np.testing.assert_array_equal(again.coef_, est.coef_)
    assert again.n_iter_ == est.n_iter_ and len(again.history_) == len(est.history_)


def test_resume_without_a_checkpoint_starts_afresh(tmp_path):
    est = LinearRegression(solver="gd", checkpoint=tmp_path / "new").fit(X, X[:, 0], resume=True)
    ref = LinearRegression(solver="gd").fit(X, X[:, 0])
    np.testing.assert_array_equal(est.coef_, ref.coef_)


def test_other_settings_or_data_are_refused(tmp_path):
    LogisticRegression(solver="gd", max_iter=5, checkpoint=tmp_path).fit(X, Y_BIN)
    with pytest.raises(CheckpointError, match=r"written by another fit \(parameter alpha: checkpoint '0.0001', now '0.5'\); resume with the same"):
        LogisticRegression(solver="gd", alpha=0.5, checkpoint=tmp_path).fit(X, Y_BIN, resume=True)
    with pytest.raises(CheckpointError, match=r"n_rows: checkpoint 3000, now 2999"):
        LogisticRegression(solver="gd", checkpoint=tmp_path).fit(X[1:], Y_BIN[1:], resume=True)
    with pytest.raises(CheckpointError, match=r"estimator: checkpoint 'LogisticRegression', now 'PoissonRegressor'"):
        PoissonRegressor(solver="gd", alpha=1.0, checkpoint=tmp_path).fit(X, Y_BIN, resume=True)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("finished", [True, False])
def test_other_X_with_the_same_shape_and_y_is_refused(tmp_path, client, finished):
    """The fingerprint covers X block by block (issue 22, item 3): a finished checkpoint
    returned the old model for new X, an unfinished one continued on it."""
    Xd, yd = _dask(Y_BIN)
    kw = dict(solver="gd", max_iter=40 if finished else 200, tol=1e-12 if not finished else 1e-3, client=client,
              checkpoint_every=1)
    if finished:
        LogisticRegression(checkpoint=tmp_path, **kw).fit(Xd, yd)
    else:
        with pytest.raises(Interrupted):
            LogisticRegression(checkpoint=tmp_path, callbacks=[StopAt(10)], **kw).fit(Xd, yd)
    X2 = X.copy()
    X2[1500, 3] += 1e-9  # one value in block 2 of 5 (700 rows each)
    with pytest.raises(CheckpointError, match=r"written by another fit \(data: X differs in block 2 \(of 5 blocks\)\); "
                                              r"resume with the same estimator settings and data"):
        LogisticRegression(checkpoint=tmp_path, **kw).fit(da.from_array(X2, chunks=(700, -1)), yd, resume=True)
    X3 = X[::-1].copy()  # the rows in another order, y unchanged: every block differs
    with pytest.raises(CheckpointError, match=r"data: X differs in blocks 0, 1, 2, 3, 4 \(of 5 blocks\)"):
        LogisticRegression(checkpoint=tmp_path, **kw).fit(da.from_array(X3, chunks=(700, -1)), yd, resume=True)
    # the same data resume (any placement: the digests are per block)
    LogisticRegression(checkpoint=tmp_path, **kw).fit(Xd, yd, resume=True)


def _checkpoint_file(tmp_path):
    LogisticRegression(solver="gd", max_iter=5, checkpoint=tmp_path).fit(X, Y_BIN)
    return tmp_path / "checkpoint.npz"


def test_flipped_truncated_and_pickled_checkpoints_are_refused(tmp_path):
    path = _checkpoint_file(tmp_path)
    raw = open(path, "rb").read()
    est = LogisticRegression(solver="gd", max_iter=5, checkpoint=tmp_path)
    # one flipped byte in the middle of the arrays
    bad = bytearray(raw)
    bad[len(raw) // 2] ^= 0xFF
    path.write_bytes(bad)
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd checkpoint file"):
        est.fit(X, Y_BIN, resume=True)
    # truncated
    path.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd checkpoint file.*(truncated|corrupted)"):
        est.fit(X, Y_BIN, resume=True)
    # a pickle, under the checkpoint's name
    path.write_bytes(pickle.dumps({"params": np.zeros(6)}))
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd checkpoint file"):
        est.fit(X, Y_BIN, resume=True)
    # an npz holding an object (pickled) array
    # (its metadata is checked first, before any array is read: the pickle is never loaded)
    np.savez(path, __meta__=np.frombuffer(b"{}", np.uint8), params=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd checkpoint file: unknown format"):
        est.fit(X, Y_BIN, resume=True)
    # a saved model is not a checkpoint
    LogisticRegression().fit(X, Y_BIN).save(path)
    with pytest.raises(CheckpointError, match="is a dask_dgd model file, not a checkpoint file"):
        est.fit(X, Y_BIN, resume=True)


def test_checkpoint_parameter_errors(tmp_path):
    with pytest.raises(ParameterError, match=r"resume=True needs checkpoint=<folder>"):
        LinearRegression().fit(X, X[:, 0], resume=True)
    with pytest.raises(ParameterError, match=r"'checkpoint_every' parameter .* got 0"):
        LinearRegression(solver="gd", checkpoint=tmp_path, checkpoint_every=0).fit(X, X[:, 0])
    with pytest.raises(ParameterError, match=r"'checkpoint' parameter .* got 3"):
        LinearRegression(solver="gd", checkpoint=3).fit(X, X[:, 0])


# ------------------------------------------------------------------ divergence guard
def test_on_divergence_raise_names_step_loss_and_remedy():
    y = np.exp(X[:, 0])  # a large fixed step makes the Poisson objective overflow
    with pytest.raises(DivergenceError, match=r"the objective (is not finite|exploded \(initial loss [0-9.e+-]+\)) "
                       r"at step \d+ \(loss=.*\) with learning rate 50; pass a smaller learning_rate.*"
                       r"on_divergence='backoff'"):
        PoissonRegressor(solver="gd", learning_rate=50.0, max_iter=50).fit(X, y)  # auto: raise


def test_on_divergence_backoff_recovers_from_the_same_step():
    y = np.exp(X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = PoissonRegressor(solver="gd", learning_rate=50.0, max_iter=300, on_divergence="backoff").fit(X, y)
    ref = PoissonRegressor(solver="lbfgs").fit(X, y)
    assert np.all(np.isfinite(est.coef_))
    assert est.history_["step_size"].iloc[-1] < 50.0  # halved
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.05)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_resume_keeps_the_count_of_learning_rate_halvings(tmp_path):
    """``lr_halvings`` (the guard's count over the whole fit, issue 46) goes on from the
    checkpoint: the resumed history's column is the uninterrupted one's."""
    y = np.exp(X[:, 0])
    kw = dict(solver="gd", learning_rate=50.0, max_iter=40, tol=0.0, on_divergence="backoff")
    ref = PoissonRegressor(**kw).fit(X, y)
    halvings = ref.history_["lr_halvings"]
    assert halvings.iloc[-1] > 0
    stop = int(ref.history_["step"][halvings > 0].iloc[0]) + 1  # after the first halving
    with pytest.raises(Interrupted):
        PoissonRegressor(**kw, checkpoint=tmp_path, checkpoint_every=1, callbacks=[StopAt(stop)]).fit(X, y)
    resumed = PoissonRegressor(**kw, checkpoint=tmp_path).fit(X, y, resume=True)
    assert resumed.history_["lr_halvings"].tolist() == halvings.tolist()


def test_exploding_loss_is_caught_before_it_overflows():
    # momentum SGD with too long a step on badly scaled least squares grows
    # geometrically (a momentum method may rise for a while, so only explosion stops it)
    Xs = X * [1.0, 1.0, 1.0, 1.0, 30.0]
    opt = optim.sgd(learning_rate=0.01, momentum=0.5)
    with pytest.raises(DivergenceError, match=r"the objective exploded \(initial loss [0-9.]+\) at step \d+"):
        LinearRegression(solver="gd", optimizer=opt, max_iter=500).fit(Xs, Xs[:, 4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = LinearRegression(solver="gd", optimizer=opt, max_iter=500, on_divergence="backoff").fit(Xs, Xs[:, 4])
    losses = est.history_["loss"]
    assert np.isfinite(losses).all() and losses.max() < 1e6 * losses.iloc[0]
    assert losses.iloc[-1] < 1e-3 * losses.iloc[0]


@pytest.mark.parametrize("mode", ["local", "async"])
def test_on_divergence_raise_in_local_and_async_modes(client, mode):
    y = np.exp(X[:, 0])
    Xd, yd = da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000)
    with pytest.raises(DivergenceError, match=r"diverged .*\(on_divergence='raise'\); pass a smaller learning_rate"):
        PoissonRegressor(solver="gd", mode=mode, learning_rate=50.0, max_iter=20, client=client).fit(Xd, yd)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["gd", "sgd"])
def test_resume_honours_a_new_max_iter(tmp_path, solver):
    """A finished fit resumed with a larger max_iter continues as if it had been given
    that max_iter from the start; an interrupted one resumed with a smaller max_iter
    stops at once."""
    kw = dict(solver=solver, optimizer="adam", tol=0.0, random_state=3,
              **({"batch_size": 500} if solver == "sgd" else {}))
    short = LogisticRegression(**kw, max_iter=4, checkpoint=tmp_path).fit(X, Y_BIN)
    longer = LogisticRegression(**kw, max_iter=9, checkpoint=tmp_path).fit(X, Y_BIN, resume=True)
    ref = LogisticRegression(**kw, max_iter=9).fit(X, Y_BIN)
    assert short.n_iter_ == 4 and longer.n_iter_ == ref.n_iter_ == 9
    np.testing.assert_allclose(longer.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert longer.history_["step"].tolist() == ref.history_["step"].tolist()
    assert list(longer.history_.columns) == list(ref.history_.columns)  # column order kept
    # interrupted late, resumed with a smaller limit: no further step
    folder = tmp_path / "late"
    with pytest.raises(Interrupted):
        LogisticRegression(**kw, max_iter=9, checkpoint=folder, checkpoint_every=2,
                           callbacks=[StopAt(ref.history_["step"].iloc[-2])]).fit(X, Y_BIN)
    stopped = LogisticRegression(**kw, max_iter=2, checkpoint=folder).fit(X, Y_BIN, resume=True)
    assert len(stopped.history_) < len(ref.history_)
    assert stopped.history_["step"].iloc[-1] < ref.history_["step"].iloc[-1]


def test_fingerprint_covers_weights_and_is_the_same_in_every_process(tmp_path):
    from dask_dgd._engine.runtime.checkpoint import stable_repr

    LinearRegression(solver="gd", max_iter=3, checkpoint=tmp_path).fit(X, X[:, 0], sample_weight=np.ones(3000))
    with pytest.raises(CheckpointError, match=r"weight_sum: checkpoint '3000', now '15000'"):
        LinearRegression(solver="gd", checkpoint=tmp_path).fit(X, X[:, 0], sample_weight=np.full(3000, 5.0),
                                                                 resume=True)
    with pytest.raises(CheckpointError, match=r"weighted_target_sum"):
        LinearRegression(solver="gd", checkpoint=tmp_path).fit(X, X[:, 1], resume=True)
    # functions by name (not address), dicts whatever their order
    assert stable_repr(stable_repr) == "dask_dgd._engine.runtime.checkpoint.stable_repr"
    assert stable_repr({1: 2.0, 0: 1.0}) == stable_repr({0: 1.0, 1: 2.0})


# ------------------------------------------------------------------ asynchronous fits
def test_async_checkpoint_written_when_one_poll_sees_the_whole_fit(tmp_path, client, monkeypatch):
    """A slow driver can first poll after the server already stopped; a callback that
    interrupts at that poll must still find the checkpoint."""
    from dask_dgd._engine.modes import async_

    monkeypatch.setattr(async_, "POLL_INTERVAL", 3.0)  # the 40 updates end before the first poll
    y = X @ [1.0, 2.0, 0.0, -1.0, 0.5]
    folder = tmp_path / "ckpt"
    kw = dict(solver="gd", mode="async", optimizer="sgd", learning_rate=0.1, max_iter=40, tol=0.0,
              max_staleness=1, client=client, checkpoint=folder, checkpoint_every=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(Interrupted):
            LinearRegression(**kw, callbacks=[StopAfter(5)]).fit(*_dask(y))
    content, arrays = read_archive(folder / "checkpoint.npz", "checkpoint")
    state = decode(content["state"], arrays)
    assert state["stop"] is None and state["solver"]["core"]["version"] >= 10  # the poll's, not a final write


def test_async_resumes_a_checkpoint_written_before_the_server_had_a_guard(tmp_path):
    """The server's backoff goes through the shared Guard, saved with its state; a
    checkpoint from before (the count, the setting and the explosion limit as fields of
    the server) still resumes."""
    from dask_dgd._files.archive import Encoder, write_archive

    y = X @ [1.0, 2.0, 0.0, -1.0, 0.5]
    folder = tmp_path / "ckpt"
    path = folder / "checkpoint.npz"
    kw = dict(solver="gd", mode="async", optimizer="sgd", learning_rate=0.1, max_iter=80, tol=0.0,
              checkpoint=folder, checkpoint_every=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(Interrupted):
            LinearRegression(**kw, callbacks=[StopAfter(30)]).fit(X, y)
        content, arrays = read_archive(path, "checkpoint")
        state = decode(content["state"], arrays)
        core = state["solver"]["core"]
        guard = core.pop("guard")
        assert guard.first_value > 0 and guard.backoffs == 0 and not guard.full_batch
        core.update(max_backoffs=30, backoffs=0, explosion_limit=guard.limit())  # the old fields
        enc = Encoder()
        write_archive(path, "checkpoint", {**content, "state": enc(state)}, enc.arrays)
        resumed = LinearRegression(**kw).fit(X, y, resume=True)
    exact = np.linalg.lstsq(np.c_[X, np.ones(3000)], y, rcond=None)[0]
    np.testing.assert_allclose(resumed.coef_, exact[:5], atol=2e-3)
    content, arrays = read_archive(path, "checkpoint")
    saved = decode(content["state"], arrays)["solver"]["core"]
    assert "max_backoffs" not in saved and saved["guard"].limit() == guard.limit()


@pytest.mark.parametrize("where", ["cluster", "in-process"])
def test_async_interrupted_and_resumed_reaches_the_uninterrupted_optimum(tmp_path, client, where, caplog):
    y = X @ [1.0, 2.0, 0.0, -1.0, 0.5] + 0.1 * rng.standard_normal(3000)
    Xf, yf = client.persist(_dask(y)) if where == "cluster" else (X, y)
    kw = dict(solver="gd", mode="async", optimizer="sgd", learning_rate=0.1, max_iter=150, tol=0.0,
              max_staleness=1, **({"client": client} if where == "cluster" else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LinearRegression(**kw).fit(Xf, yf)
        folder = tmp_path / "ckpt"
        with pytest.raises(Interrupted):
            LinearRegression(**kw, checkpoint=folder, checkpoint_every=20, callbacks=[StopAfter(60)]).fit(Xf, yf)
        content, arrays = read_archive(folder / "checkpoint.npz", "checkpoint")
        at = decode(content["state"], arrays)["solver"]["core"]["version"]
        assert at >= 20  # written during the interrupted fit (at a poll: updates come in batches)
        with caplog.at_level(logging.INFO, logger="dask_dgd"):
            resumed = LinearRegression(**kw, checkpoint=folder, checkpoint_every=20).fit(Xf, yf, resume=True)
    assert any(f"(step {at + 1})" in r.getMessage() for r in caplog.records if "resuming from" in r.getMessage())
    # the history before the checkpoint is the interrupted fit's, kept
    assert (resumed.history_["step"] <= at + 1).sum() >= 1

    content, arrays = read_archive(folder / "checkpoint.npz", "checkpoint")
    assert decode(content["state"], arrays)["stop"] is not None
    steps = resumed.history_["step"].to_numpy()
    assert steps[0] == 1 and np.all(np.diff(steps) >= 0) and steps[-1] > 60
    # asynchronous: the same optimum within the mode's tolerance, not the same updates
    exact = np.linalg.lstsq(np.c_[X, np.ones(3000)], y, rcond=None)[0]
    np.testing.assert_allclose(resumed.coef_, exact[:5], atol=2e-3)
    np.testing.assert_allclose(resumed.coef_, ref.coef_, atol=2e-3)
    assert resumed.n_iter_ <= 150


def test_local_sgd_resumes_with_the_checkpoints_grouping(tmp_path, client):
    """Local SGD averages per group: a resumed fit puts the blocks back where the
    interrupted fit had them (here the input was persisted anew on one worker), and
    then continues exactly."""
    params = dict(solver="gd", mode="local", local_steps=2, optimizer="adam", max_iter=20, tol=0.0,
                  rebalance=False, client=client)
    y = X @ [1.0, 2.0, 0.0, -1.0, 0.5]
    Xd, yd = client.persist(_dask(y))
    ref = LinearRegression(**params).fit(Xd, yd)
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        LinearRegression(**params, checkpoint=folder, checkpoint_every=2, callbacks=[StopAt(7)]).fit(Xd, yd)
    content, arrays = read_archive(folder / "checkpoint.npz", "checkpoint")
    saved = decode(content["state"], arrays)["placement"]
    assert len(set(saved)) == 2
    one = sorted(client.scheduler_info()["workers"])[0]
    X1, y1 = client.persist(_dask(y), workers=[one])  # the same rows, every block on one worker
    resumed = LinearRegression(**params, checkpoint=folder, checkpoint_every=2).fit(X1, y1, resume=True)
    assert resumed.skew_report_["placement"] == saved  # regrouped as the checkpoint's fit was
    if ref.skew_report_["placement"] == saved:  # (Dask placed the reference the same way)
        np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=1e-12)
        assert resumed.history_["step"].tolist() == ref.history_["step"].tolist()

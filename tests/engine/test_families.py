"""Every model family on the one engine: each mode, compression, checkpoints with exact
resume, backoff on divergence and the time limit, on a real LocalCluster.

The families are the linear models, explicit and implicit matrix factorization (whose
user factors are the groups' local parameters) and the pooled climate model.
"""

import warnings

import dask.array as da
import numpy as np
import pytest
from interrupts import Interrupted, StopAfter

from dask_dgd import ConvergenceWarning, ImplicitMatrixFactorization, LogisticRegression, MatrixFactorization
from dask_dgd.climate import ClimateRegressor
from dask_dgd.datasets import make_ratings

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _grid(T=36, Y=4, X=5, seed=0):
    import xarray as xr

    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar="noleap", use_cftime=True)
    a = rng.normal(size=(T, Y, X))
    y = 2.0 * a + 1.0 + 0.1 * rng.normal(size=(T, Y, X))
    return xr.Dataset({"a": (("time", "lat", "lon"), a), "y": (("time", "lat", "lon"), y)},
                      coords={"time": time, "lat": np.linspace(-60, 60, Y), "lon": np.arange(X) * 30.0}
                      ).chunk({"time": 12})


class Family:
    """How to fit, score and compare one model family."""

    def __init__(self, name, client):
        self.name, self.client = name, client
        if name == "linear":
            rng = np.random.default_rng(0)
            X = rng.standard_normal((4000, 5))
            y = (X @ [1.0, -1.0, 0.5, 0.0, 2.0] + rng.standard_normal(4000) > 0).astype(int)
            self.data = client.persist([da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500)])
        elif name in ("mf", "implicit"):
            ratings, _ = make_ratings(120, 40, 3000, random_state=0)
            self.data = [ratings]
        else:
            self.data = [_grid()]

    def make(self, **kw):
        if self.name == "linear":
            return LogisticRegression(**{"solver": "gd", "optimizer": "adam", "max_iter": 30, "tol": 0.0,
                                         "client": self.client, **kw})
        if self.name == "mf":
            # one fit by gradient steps (alpha="auto" fits a path; "auto" would take ALS)
            return MatrixFactorization(**{"n_components": 3, "alpha": 0.1, "solver": "gd", "max_iter": 20,
                                          "random_state": 0, "client": self.client, **kw})
        if self.name == "implicit":
            return ImplicitMatrixFactorization(**{"n_components": 3, "loss": "wls", "alpha": 0.01, "max_iter": 20,
                                                  "random_state": 0, "client": self.client, **kw})
        return ClimateRegressor("a", "y", **{"model": "pooled", "seasonal": 2, "solver": "gd", "max_iter": 30, "tol": 0.0,
                                             "client": self.client, **kw})

    def fit(self, est, **kw):
        return est.fit(*self.data, **kw)

    def params(self, est):
        """The fitted parameters, flat (matrix factorization: items and users)."""
        if self.name in ("mf", "implicit"):
            return np.concatenate([est.item_factors_.ravel(), est.user_factors_.ravel()])
        if self.name == "climate":
            return np.append(est.coef_.values, est.intercept_)
        return np.append(est.coef_.ravel(), est.intercept_)

    def losses(self, est):
        return est.history_["loss"].to_numpy()


FAMILIES = ["linear", "mf", "implicit", "climate"]


@pytest.fixture(params=FAMILIES)
def family(request, client):
    return Family(request.param, client)


@pytest.mark.parametrize("mode", ["sync", "local", "async"])
def test_every_family_trains_in_every_mode(family, mode):
    est = family.fit(family.make(mode=mode, **({"local_steps": 2} if mode == "local" else {})))
    losses = family.losses(est)
    assert np.all(np.isfinite(family.params(est)))
    assert losses[-1] < losses[0]  # it trained
    if mode != "sync":
        assert set(est.history_["updates_per_group"].iloc[1:].map(sum)) != {0}


@pytest.mark.parametrize("mode", ["sync", "local", "async"])
def test_every_family_trains_with_compression(family, mode):
    """Error feedback keeps a top-k compressed fit near the plain one: its last loss at
    most 1.5 times the plain fit's (+1e-3).

    The asynchronous fits run in lock-step (``max_staleness=0``) for all their epochs
    (``tol=0``).  Without a bound the interleaving is the machine's:
    under load a group can fall far behind, its users' factors (local to the group) get
    few updates and the ``tol`` rule can stop early (the known limitation in the user
    guide, "Asynchronous training", whose cure is a bound or ``tol=0``), so the two fits
    differed by more than compression does (issue 44: implicit-async at 0.881 against
    the bound 0.765).  In lock-step every group takes the same number of updates in both
    fits, which differ only in the order of arrivals within a step; what is left is
    compression.  Only for the implicit model does a fit without error feedback
    (``topk:0.3+noef``) fail the bound (0.92 against 0.81); for the others top-k 30% ends
    within it either way (measured, lock-step async).  The linear and climate models
    have no local parameters, but under load one
    group running ahead changes their path as much (climate-async failed 2 of 10 loaded
    runs): they run in lock-step too.
    """
    kw = dict(mode=mode, **({"local_steps": 2} if mode == "local" else {}))
    if mode == "async":
        kw.update(max_staleness=0, tol=0.0)
    plain = family.fit(family.make(**kw))
    est = family.fit(family.make(compression="topk:0.3", **kw))
    h = est.history_
    assert (h["bytes_up"].iloc[1:] < h["bytes_up_raw"].iloc[1:]).all()
    assert family.losses(est)[-1] < family.losses(est)[0]
    # error feedback: the compressed fit ends near the plain one
    assert family.losses(est)[-1] <= family.losses(plain)[-1] * 1.5 + 1e-3


@pytest.mark.parametrize("mode", ["sync", "local"])
def test_every_family_resumes_a_checkpoint_exactly(family, mode, tmp_path):
    kw = dict(mode=mode, **({"local_steps": 2} if mode == "local" else {}))
    ref = family.fit(family.make(**kw))
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        family.fit(family.make(**kw, checkpoint=folder, checkpoint_every=2, callbacks=[StopAfter(7)]))
    resumed = family.fit(family.make(**kw, checkpoint=folder, checkpoint_every=2), resume=True)
    if mode == "local" and family.name == "climate":
        # local SGD averages per group (the blocks a worker holds), and the climate
        # model's design matrix is placed anew by each fit: the uninterrupted fit may
        # have grouped the blocks otherwise, so it is the same optimisation, not the
        # same rounds (the linear data here is persisted once, and matrix factorization
        # shards its ratings by a fixed rule: exact for them)
        assert family.losses(resumed)[-1] <= 1.05 * family.losses(ref)[-1] + 1e-3
        return
    assert resumed.history_["step"].tolist() == ref.history_["step"].tolist()
    np.testing.assert_allclose(family.params(resumed), family.params(ref), rtol=0, atol=1e-12)
    np.testing.assert_allclose(family.losses(resumed), family.losses(ref), rtol=0, atol=1e-12)


def test_every_family_resumes_an_asynchronous_checkpoint(family, tmp_path):
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        family.fit(family.make(mode="async", checkpoint=folder, checkpoint_every=4, callbacks=[StopAfter(8)]))
    resumed = family.fit(family.make(mode="async", checkpoint=folder, checkpoint_every=4), resume=True)
    steps = resumed.history_["step"].to_numpy()
    assert steps[0] == 1 and np.all(np.diff(steps) >= 0)
    assert np.all(np.isfinite(family.params(resumed)))
    assert family.losses(resumed)[-1] < family.losses(resumed)[0]


def test_every_family_backs_off_on_divergence(family):
    # plain gradient descent halves a step that raises the objective; matrix
    # factorization's Adam only one that makes it explode
    big = {"linear": 50.0, "mf": 1e3, "implicit": 1e3, "climate": 50.0}[family.name]
    kw = {"optimizer": "sgd"} if family.name in ("linear", "climate") else {}
    est = family.fit(family.make(learning_rate=big, on_divergence="backoff", max_iter=40, **kw))
    assert np.all(np.isfinite(family.params(est)))
    assert est.history_["step_size"].dropna().iloc[-1] < big  # halved until stable
    assert np.isfinite(family.losses(est)).all()


def test_every_family_stops_at_max_time(family):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est = family.fit(family.make(max_time=1e-9))
    assert len(est.history_) == 1  # the first step already took longer than that
    assert any("max_time" in str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning))

"""The ``wide`` suite's dask_dgd runs: the fit, its held-out curve, the driver's memory and
the bytes per step, and the L-BFGS and asynchronous ladders.
"""

import gc
import math
import threading
import time
import warnings

import numpy as np

from ..._common import median
from .problems import click_log_dask, heldout_logloss


class HeldOut:
    """A ``train`` validator: held-out logloss of the parameters after every epoch (and
    at the start), on the driver; keeps ``curve`` = [(perf_counter at entry, logloss)]
    and the seconds it spent, to subtract from the fit's time."""

    def __init__(self, X_test, y_test, n_features):
        self.X_test, self.y_test, self.n_features = X_test, y_test, int(n_features)
        self.curve, self.spent = [], 0.0

    def evaluate(self, params):
        t0 = time.perf_counter()
        loss = heldout_logloss(params, self.X_test, self.y_test, self.n_features)
        self.curve.append((t0, self.spent, loss))
        self.spent += time.perf_counter() - t0
        return {"val_loss": loss, "val_score": -loss}


class ValidationCurve:
    """The same ``curve`` and ``spent`` as :class:`HeldOut`, read from the records of a
    fit given ``validation_data`` (held-out rows that ``train`` scores where they live:
    with sharded parameters the coefficients never come to the driver).  A callback:
    each record that carries a ``val_loss`` was made just after that evaluation, which
    took ``val_time`` seconds."""

    def __init__(self):
        self.curve, self.spent = [], 0.0

    def __call__(self, record):
        if record.get("val_loss") is None:
            return
        seconds = float(record["val_time"])
        self.curve.append((time.perf_counter() - seconds, self.spent, float(record["val_loss"])))
        self.spent += seconds


# ----------------------------------------------------------------------------- dask_dgd
def fit_dask_dgd(X_train, y_train, X_test, y_test, *, sharding, epochs, client, n_features=2**22, alpha=1e-6,
                 batch_size=20_000, optimizer="sgd", learning_rate="auto", random_state=0, validator=None,
                 validation_data=None, callbacks=None, ctr=None):
    """Fit hashed logistic regression with dask_dgd; returns the ``FitResult``.

    Parameters
    ----------
    X_train, y_train : dask arrays (CSR blocks, 0/1 float labels), persisted on ``client``.
    X_test, y_test : in-memory CSR and labels (held out; used by ``validator`` only).
    sharding : False, True or "auto"
        ``param_sharding`` of ``train``.
    epochs : int
        ``max_iter`` (mini-batch epochs).
    validator : object or None
        Passed to ``train`` (``evaluate(params) -> {"val_loss", "val_score"}`` after every
        epoch; early stopping is switched off with ``n_iter_no_change=epochs + 1``).
    validation_data : tuple or None
        Held-out ``(X, y)`` passed to ``train``, scored where they live after every epoch
        (the way with sharded parameters; the scores are in the records).
    callbacks : list or None
        Passed to ``train`` (called with every step record).
    ctr : float or None
        The training CTR: the intercept starts at its log-odds (:func:`intercept_start`).
    """
    import dask_dgd
    from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty

    objective = LinearObjective(BinaryLogistic(), n_features=int(n_features))
    return dask_dgd.train(
        objective, (X_train, y_train), penalty=Penalty(alpha=alpha), solver="sgd", optimizer=optimizer,
        learning_rate=learning_rate, batch_size=int(batch_size), max_iter=int(epochs), tol=0.0,
        n_iter_no_change=int(epochs) + 1, validator=validator, validation_data=validation_data,
        random_state=random_state, client=client,
        param_sharding=sharding, callbacks=callbacks, params0=intercept_start(n_features, ctr),
    )


def intercept_start(n_features, ctr):
    """The start every dask_dgd run takes, as the estimators do (and Spark): the
    intercept at the log-odds of the training CTR, the coefficients at 0 (a sparse row:
    no ``d`` floats on the driver); None without a CTR."""
    import scipy.sparse as sp

    if ctr is None:
        return None
    return sp.csr_matrix(([math.log(ctr / (1 - ctr))], ([0], [int(n_features)])), shape=(1, int(n_features) + 1))




class RSSSampler:
    """Peak RSS of this process above its RSS at entry, sampled by a background thread
    every ``interval`` seconds (psutil)."""

    def __init__(self, interval=0.02):
        import psutil

        self.proc, self.interval = psutil.Process(), interval
        self.idle = self.peak = 0
        self._stop = threading.Event()

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        gc.collect()
        self.idle = self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def above_idle_mb(self):
        return (self.peak - self.idle) / 2**20


def _block_columns(X):
    return np.unique(X.indices)


def worker_columns(client, X):
    """``{worker: distinct non-zero columns of the blocks of X it holds}`` (before the fit)."""
    from distributed import futures_of

    by_key = {f.key: f for f in futures_of(X)}
    futures = [by_key[k[0]] for k in X.__dask_keys__()]
    who = client.who_has(futures)
    cols = client.gather([client.submit(_block_columns, f, pure=False) for f in futures])
    out = {}
    for f, c in zip(futures, cols):
        w = min(who[f.key])
        out[w] = np.union1d(out.get(w, np.empty(0, dtype=c.dtype)), c)
    return {w: int(c.size) for w, c in out.items()}


def _curve(validator, t_start, n_epochs, wall, final):
    """``[{"epoch", "time", "logloss"}]``: the validator's records (at the start and after
    every epoch but the last: the fit ends on its last update) and ``final`` at the end
    (time: since the fit started, validator time excluded)."""
    out = [{"epoch": e, "time": t0 - t_start - spent, "logloss": loss}
           for e, (t0, spent, loss) in enumerate(validator.curve[:n_epochs])]
    out.append({"epoch": n_epochs, "time": wall, "logloss": final})
    return out


def run_dask_dgd(client, data, p, sharding, log, *, n_features=None, epochs=None, X=None, y=None):
    d = int(n_features or p["n_features"])
    epochs = int(epochs or p["epochs"])
    X_test = data["X_test"] if X is None else data["X_test_d"]
    held = None
    if sharding is False:
        val = HeldOut(X_test, data["y_test"], d)
    else:  # the held-out rows on the cluster too: the coefficients stay there
        held = tuple(client.persist(list(click_log_dask(p, "test", n_features=d, intercept=data["intercept"]))))
        val = ValidationCurve()
    sampler = RSSSampler(p["sample_ms"] / 1e3)
    training = []  # the peak so far at every step record: the fit before its result is assembled

    def peak_so_far(record):
        training.append(sampler.peak)

    with warnings.catch_warnings(), sampler as mem:
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = fit_dask_dgd(data["X"] if X is None else X, data["y"] if y is None else y, X_test, data["y_test"],
                           sharding=sharding, epochs=epochs, client=client, n_features=d, alpha=p["alpha"],
                           batch_size=p["batch_size"], optimizer=p["optimizer"], learning_rate=p["learning_rate"],
                           random_state=p["seed"], validator=None if held else val, validation_data=held,
                           callbacks=[peak_so_far] + ([val] if held else []),
                           ctr=data["ref"]["ctr_train"])
        wall = time.perf_counter() - t0
    del held
    h = res.history
    groups = max(1, len(res.history["updates_per_group"].iloc[-1])) if len(h) else p["workers"]
    final = heldout_logloss(res.params, X_test, data["y_test"], d)
    wall -= val.spent
    up = [float(v) for v in h["bytes_up"]]
    down = [float(v) for v in h["bytes_down"]]
    out = {
        "tool": "dask_dgd", "sharding": sharding,
        "label": f"dask_dgd (param_sharding={sharding})" + ("" if epochs == p["epochs"] else f", {epochs} epoch(s)"),
        "threads": f"{p['workers']} workers x 1 thread", "cores": p["workers"], "n_features": d,
        "wall": wall, "validator_time": val.spent, "epochs": res.n_iter, "n_steps": res.n_steps,
        "curve": _curve(val, t0, res.n_iter, wall, final), "final_logloss": final,
        "setup": (val.curve[0][0] - t0) if val.curve else None,
        "driver_peak_mb": mem.above_idle_mb, "driver_idle_mb": mem.idle / 2**20, "groups": groups,
        "driver_peak_training_mb": (max(training) - mem.idle) / 2**20 if training else None,
        "param_sharding": bool(res.param_sharding),
        "bytes_up_per_step_worker": median(up) / groups if up else None,
        "bytes_down_per_step_worker": median(down) / groups if down else None,
        "learning_rate": getattr(res.optimizer, "learning_rate", None),
        "step_time": median([float(v) for v in h["step_time"]]) if len(h) else None,
    }
    log(f"{out['label']} d=2**{int(math.log2(d))}: {out['wall']:.1f}s, held-out logloss {final:.5f}, "
        f"driver +{out['driver_peak_mb']:.0f} MB, {out['bytes_up_per_step_worker'] or 0:.3g} B up/step/worker")
    return out


def lbfgs_objectives(history):
    """The objective after 0, 1, 2, ... iterations of a dask_dgd L-BFGS fit (as Spark's
    ``objectiveHistory``): the start's, then the best value the trials of each iteration
    reached (they are recorded under the iteration they start from)."""
    per = history.iloc[1:].groupby("iteration")["loss"].min()
    return [float(history["loss"].iloc[0]), *(float(v) for v in per)]


def _sharded_ladder(client, data, p, log, tool, label, ks, fit_kwargs, describe):
    """One sharded fit per ``max_iter`` of ``ks`` (and ``epochs``), each timed from
    scratch (``fit_kwargs``: the solver's settings; ``describe(result)``: what the
    curve and the log keep of each fit)."""
    import dask_dgd
    from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty

    objective = LinearObjective(BinaryLogistic(), n_features=int(p["n_features"]))
    curve = [{"epoch": 0, "time": 0.0, "logloss": data["ref"]["constant"]}]
    for k in sorted(set(ks) | {p["epochs"]}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            res = dask_dgd.train(objective, (data["X"], data["y"]), penalty=Penalty(alpha=p["alpha"]), max_iter=int(k),
                                 param_sharding=True, client=client, **fit_kwargs(k),
                                 params0=intercept_start(p["n_features"], data["ref"]["ctr_train"]))
            wall = time.perf_counter() - t0
        loss = heldout_logloss(res.params, data["X_test"], data["y_test"], p["n_features"])
        facts, text = describe(res)
        curve.append({"epoch": int(k), "time": wall, "logloss": loss, **facts,
                      "objective": lbfgs_objectives(res.history)})
        log(f"{label} max_iter={k}: {wall:.1f}s, {text}, held-out logloss {loss:.5f}")
    at_e = next(c for c in curve if c["epoch"] == p["epochs"])
    return {"tool": tool, "label": label, "sharding": True, "threads": f"{p['workers']} workers x 1 thread",
            "cores": p["workers"], "curve": curve, "ladder": True, "wall": at_e["time"],
            "final_logloss": at_e["logloss"], "epochs": p["epochs"]}


def run_dask_dgd_lbfgs(client, data, p, log):
    """dask_dgd's default solver, L-BFGS, with sharded parameters: one fit per
    ``max_iter`` of ``lbfgs_iters`` (and ``epochs``), each timed from scratch, as Spark's
    ladder (an iteration is at least one pass over the rows)."""
    def describe(res):
        return ({"iterations": int(res.n_iter), "evaluations": int(res.n_steps)}, f"{res.n_steps} evaluations")

    return _sharded_ladder(client, data, p, log, "dask_dgd-lbfgs", "dask_dgd L-BFGS (param_sharding=True)",
                           p["lbfgs_iters"], lambda k: dict(solver="lbfgs", tol=1e-12), describe)


def run_dask_dgd_async(client, data, p, log):
    """Asynchronous mini-batch SGD with sharded parameters (the owners are the
    parameter server): one fit per ``max_iter`` of ``async_epochs`` (and ``epochs``),
    each timed from scratch (no per-epoch validation in the asynchronous mode)."""
    def settings(k):
        return dict(solver="sgd", mode="async", optimizer=p["optimizer"], learning_rate=p["learning_rate"],
                    batch_size=int(p["batch_size"]), tol=0.0, n_iter_no_change=int(k) + 1, random_state=p["seed"])

    def describe(res):
        h = res.history.iloc[1:]
        pushes = max(1, int(h["updates_per_group"].map(sum).sum()))
        per = float(h["bytes_up"].sum() + h["bytes_down"].sum()) / pushes
        return {"pushes": pushes, "bytes_per_push": per}, f"{pushes} pushes ({per / 2**20:.2f} MiB each)"

    return _sharded_ladder(client, data, p, log, "dask_dgd-async", "dask_dgd SGD, mode='async' (param_sharding=True)",
                           p["async_epochs"], settings, describe)


def online_tool(in_process, sharded):
    """The ``tool`` key of an online run (see :func:`run_dask_dgd_online`)."""
    return "dask_dgd-online-1" if in_process else "dask_dgd-online-sharded" if sharded else "dask_dgd-online"


def run_dask_dgd_online(client, data, p, log, *, in_process=False, sharded=False):
    """``solver="online"`` (issue 43): compiled per-row passes on each worker's group,
    averaged every round, unsharded (``sharded``: ``param_sharding=True``, each group's
    passes on a compact copy of its columns, the owners averaging their slices); one
    fit per ``max_iter`` of 1 ... ``epochs``, each timed from scratch (the solver takes
    no per-epoch validator).  ``in_process``: the driver's in-memory CSR in one group
    on the driver, without Dask (the kernel's speed on one core)."""
    import dask_dgd
    from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty

    d = int(p["n_features"])
    objective = LinearObjective(BinaryLogistic(), n_features=d)
    where = "in process, 1 group" if in_process else f"{p['workers']} workers" + (", sharded" if sharded else "")
    label = f"dask_dgd online ({p['online_optimizer'] or 'default'}, {where})"
    tool = online_tool(in_process, sharded)
    train_data = (data["Xn"], data["yn"]) if in_process else (data["X"], data["y"])
    curve = [{"epoch": 0, "time": 0.0, "logloss": data["ref"]["constant"]}]
    for k in range(1, int(p["epochs"]) + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            res = dask_dgd.train(objective, train_data, penalty=Penalty(alpha=p["alpha"]), solver="online",
                                 optimizer=p["online_optimizer"], max_iter=k, tol=0.0, n_iter_no_change=k + 1,
                                 random_state=p["seed"], client=None if in_process else client,
                                 param_sharding=sharded,
                                 params0=intercept_start(d, data["ref"]["ctr_train"]).toarray().ravel())
            wall = time.perf_counter() - t0
        loss = heldout_logloss(res.params, data["X_test"], data["y_test"], d)
        curve.append({"epoch": k, "time": wall, "logloss": loss})
        log(f"{label} max_iter={k}: {wall:.2f}s, held-out logloss {loss:.5f}")
    cores = 1 if in_process else p["workers"]
    return {"tool": tool, "label": label, "sharding": sharded, "ladder": True, "cores": cores,
            "threads": "1 (the driver)" if in_process else f"{p['workers']} workers x 1 thread", "curve": curve,
            "wall": curve[-1]["time"], "final_logloss": curve[-1]["logloss"], "epochs": int(p["epochs"])}

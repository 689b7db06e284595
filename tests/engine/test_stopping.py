"""The stop rules (``_engine/stopping.py``): the one place max_iter and max_time are applied.

No cluster and no clocks that tick during a test: a monitor's elapsed time is set by
hand, and a WallClock is started in the past.
"""

import time
import warnings

import numpy as np
import pytest

from dask_dgd import ConvergenceWarning, LogisticRegression, optim
from dask_dgd._engine.modes.server import ServerCore
from dask_dgd._engine.objective import LinearTraining
from dask_dgd._engine.runtime.reduce import Partial
from dask_dgd._engine.solvers.base import Outcome
from dask_dgd._engine.stopping import Stop, StopRules, WallClock
from dask_dgd.losses import BinaryLogistic, LinearObjective, Penalty


class _Monitor:
    def __init__(self, elapsed=0.0, stop_requested=False):
        self.seconds, self.stop_requested = elapsed, stop_requested

    def elapsed(self):
        return self.seconds


class _Solver:
    """A solver as the stop rules see it: its own rule and its progress in max_iter's unit."""

    def __init__(self, iterations, own=None):
        self.iterations, self.own, self.asked = iterations, own, 0

    def stop_rule(self, outcome):
        self.asked += 1
        return self.own


def _check(rules, solver):
    return rules.check(solver, Outcome())


def test_limit_is_reached_at_max_iter_with_its_message():
    rules = StopRules(_Monitor(), max_iter=3)
    assert rules.limit(2) is None
    stop = rules.limit(3)
    assert isinstance(stop, Stop) and not stop.converged and stop.message == "reached max_iter=3"
    assert rules.limit(None) is None  # a solver that bounds parts of itself (the CV path's stages)
    assert StopRules(_Monitor()).limit(10**9) is None  # no max_iter: no limit
    assert type(StopRules(_Monitor(), max_iter=np.int64(4)).max_iter) is int


def test_iteration_limit_comes_after_the_solvers_own_rule():
    rules = StopRules(_Monitor(), max_iter=2)
    assert _check(rules, _Solver(1)) is None
    stop = _check(rules, _Solver(2))
    assert (stop.converged, stop.message) == (False, "reached max_iter=2")
    # converging on the step that reaches max_iter is converging
    stop = _check(rules, _Solver(2, own=Stop(True)))
    assert (stop.converged, stop.message) == (True, "")
    # a limit of the solver's own (L-BFGS's evaluations) is its rule, before max_iter
    stop = _check(rules, _Solver(5, own=Stop(False, "reached 50 evaluations of the objective")))
    assert stop.message == "reached 50 evaluations of the objective"


def test_time_limit_comes_before_the_solvers_rule_and_the_user_before_both():
    solver = _Solver(7, own=Stop(True))
    stop = _check(StopRules(_Monitor(elapsed=2.0), max_iter=3, max_time=1.5), solver)
    assert (stop.converged, stop.message) == (False, "reached max_time=1.5 s")
    assert solver.asked == 0  # the solver's rule (which may keep state) was not asked
    assert _check(StopRules(_Monitor(elapsed=1.0), max_time=1.5), _Solver(0)) is None
    stop = _check(StopRules(_Monitor(elapsed=2.0, stop_requested=True), max_iter=3, max_time=1.5), solver)
    assert (stop.converged, stop.message) == (True, "")


def test_wall_clock_counts_from_its_start_and_never_requests_a_stop():
    clock = WallClock(started=time.time() - 100.0)
    assert clock.elapsed() >= 100.0 and clock.stop_requested is False
    assert 0.0 <= WallClock().elapsed() < 100.0
    assert StopRules(clock, max_time=50).out_of_time()


# ------------------------------------------------------------ the parameter server
def _server(stops):
    obj = LinearObjective(BinaryLogistic(), 2)
    opt = optim.sgd(learning_rate=0.5)
    params = np.zeros(obj.n_params)
    return ServerCore(params, opt, opt.init(params), LinearTraining(obj, Penalty(alpha=0.0)), 2, n_rows=100,
                      tol=0.0, stops=stops)


def _push(core, g, rows=10):
    core.pull(g)
    core.push(g, {"version": core.version, "partial": Partial(5.0, np.array([1.0, 0, 0]), 10.0, 0.01, 0.01),
                  "rows": rows, "time": 0.01})


def test_server_stops_by_the_same_rules():
    # max_iter: epochs of rows, the same message as every solver's
    core = _server(StopRules(WallClock(), max_iter=2))
    for _ in range(19):
        _push(core, 0)
    assert not core.stopped and core.iterations == 1
    _push(core, 1)
    assert core.stopped and not core.converged and core.message == "reached max_iter=2"
    assert core.result()["epochs"] == 2
    # max_time: on the fit's clock (started before the server), the fit's max_time in the message
    late = _server(StopRules(WallClock(started=time.time() - 10.0), max_iter=2, max_time=5))
    _push(late, 0)
    assert late.stopped and not late.converged and late.message == "reached max_time=5 s"
    # no stop rules given: no limit
    free = _server(None)
    for _ in range(30):
        _push(free, 0)
    assert not free.stopped and free.result()["epochs"] == 3


# ------------------------------------------------------------ every solver's limit
X = np.random.default_rng(0).normal(size=(200, 3))
y = (X @ np.array([1.0, -2.0, 0.5]) + np.random.default_rng(1).normal(size=200) > 0).astype(int)


@pytest.mark.parametrize("kw", [
    {"solver": "gd"},
    {"solver": "sgd", "batch_size": 50},
    {"solver": "lbfgs"},
    {"solver": "newton"},
    {"solver": "gd", "mode": "local", "local_steps": 3},
    {"solver": "sgd", "batch_size": 50, "mode": "async"},
], ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_every_solver_stops_at_max_iter_with_the_stop_rules_message(kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = LogisticRegression(max_iter=2, tol=1e-14, alpha=0.0, **kw).fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert est.n_iter_ == 2
    assert any("(reached max_iter=2)" in m for m in messages), messages

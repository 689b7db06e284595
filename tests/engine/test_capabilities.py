"""The capability table (``dask_dgd._engine.capabilities.SOLVERS``): every solver's
refusals come from its row, in the same words for every solver."""

import re

import pytest

from dask_dgd import optim
from dask_dgd._engine.capabilities import SOLVERS, resolve_solver
from dask_dgd.exceptions import ParameterError

COMMON = dict(batch_size=None, mode="sync", compression=None, has_l1=False)
EXACT = sorted(n for n, t in SOLVERS.items() if t.exact)
FIRST_ORDER = sorted(n for n, t in SOLVERS.items() if not t.exact and not t.own_rounds)


def _resolve(solver, **kw):
    args = {**COMMON, "batch_size": 32 if SOLVERS[solver].mini_batch else None, **kw}
    return resolve_solver(solver, kw.pop("optimizer", None), **{k: v for k, v in args.items() if k != "optimizer"})


def test_the_table_has_every_solver():
    assert set(SOLVERS) == {"lbfgs", "newton", "cd", "als", "gd", "sgd", "online"}
    assert EXACT == ["als", "cd", "lbfgs", "newton"] and FIRST_ORDER == ["gd", "sgd"]
    assert [n for n, t in SOLVERS.items() if t.own_rounds] == ["online"]


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("mode", ["local", "async"])
def test_exact_solvers_are_synchronous_only(solver, mode):
    with pytest.raises(ParameterError, match=rf"mode='{mode}' takes first-order steps; solver='{solver}' is "
                                             r"synchronous only\. Use solver='sgd' \(with batch_size\) or 'gd'"):
        _resolve(solver, mode=mode)


@pytest.mark.parametrize("solver", EXACT)
def test_exact_solvers_take_no_compression(solver):
    with pytest.raises(ParameterError, match=rf"compression needs a first-order solver \('gd' or 'sgd'\): "
                                             rf"solver='{solver}' relies on exact gradients"):
        _resolve(solver, compression="topk:0.1")


@pytest.mark.parametrize("solver", EXACT)
def test_exact_solvers_are_full_batch_only(solver):
    with pytest.raises(ParameterError, match=rf"solver='{solver}' is full-batch only; drop batch_size"):
        _resolve(solver, batch_size=64)


@pytest.mark.parametrize("solver", [n for n, t in SOLVERS.items() if t.optimizer == "none"])
def test_solvers_without_an_optimizer_refuse_one(solver):
    with pytest.raises(ParameterError, match=rf"solver='{solver}' takes no optimizer; got Adam"):
        _resolve(solver, optimizer="adam")


@pytest.mark.parametrize("solver", [n for n, t in SOLVERS.items() if not t.l1])
def test_solvers_without_l1_say_what_to_use(solver):
    with pytest.raises(ParameterError, match=rf"solver='{solver}' cannot handle an L1 penalty \(l1_ratio > 0\); "
                                             + re.escape(f"use {SOLVERS[solver].l1_instead}")):
        _resolve(solver, has_l1=True)


@pytest.mark.parametrize("solver", FIRST_ORDER)
def test_first_order_solvers_run_in_every_mode_with_compression_and_l1(solver):
    for mode in ("sync", "local", "async"):
        name, opt = _resolve(solver, mode=mode, compression="topk:0.1", has_l1=True)
        assert name == solver and opt.plain_step
    with pytest.raises(ParameterError, match=rf"the L-BFGS optimizer needs solver='lbfgs' \(or 'auto'\); "
                                             rf"got solver='{solver}'"):
        _resolve(solver, optimizer=optim.LBFGS())


def test_optimizers_are_asked_by_traits():
    from dask_dgd.compression import TopK

    sgd, adam = optim.get_optimizer("sgd"), optim.get_optimizer("adam")
    assert optim.LBFGS().full_batch_only and not sgd.full_batch_only
    assert sgd.plain_step and not optim.SGD(learning_rate=0.1, momentum=0.9).plain_step
    assert not adam.plain_step and not adam.proximal_exact
    with pytest.raises(ParameterError, match=r"compression momentum \(DGC's momentum correction\).*not Adam"):
        _resolve("gd", optimizer="adam", compression=TopK(0.1, momentum=0.9))


# ------------------------------------------------------------------ the modes' table (MODES)
def test_every_row_names_a_class_that_builds_itself():
    """Each row of SOLVERS and MODES names a solver class of the engine (built by its
    ``build``): what train() constructs, never a branch on the name."""
    from dask_dgd._engine.capabilities import MODES, solver_class
    from dask_dgd._engine.solvers.base import Solver

    for mode, row in MODES.items():
        solvers = ["gd", "sgd"] if row.first_order_only else list(SOLVERS)
        for solver in solvers:
            for sharded in (False, True):
                if sharded and (row.sharded if row.build is not None else SOLVERS[solver].sharded) is None:
                    continue
                cls = solver_class(solver, mode, sharded)
                assert isinstance(cls, type) and issubclass(cls, Solver), (mode, solver, sharded, cls)


def test_a_new_mode_is_one_row(monkeypatch):
    """A mode is its class plus one row of MODES: train() runs what the row names, and
    the refusals (first-order only, no downlink, parameter sharding) come from the row."""
    import numpy as np

    from dask_dgd import train
    from dask_dgd._engine import capabilities
    from dask_dgd.losses import HalfSquaredError, LinearObjective

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = X @ np.array([1.0, -2.0, 0.5])
    obj = LinearObjective(HalfSquaredError(), 3)
    row = capabilities.ModeTraits(build="solvers.first_order:FirstOrder", sharded=None, first_order_only=True,
                                  downlink=False, keeps_group_memory=False, rebalances=False)
    monkeypatch.setitem(capabilities.MODES, "plain", row)
    got = train(obj, (X, y), solver="gd", mode="plain", max_iter=30, tol=0.0)
    ref = train(obj, (X, y), solver="gd", mode="sync", max_iter=30, tol=0.0)
    np.testing.assert_array_equal(got.params, ref.params)  # the synchronous first-order solver, by its row
    assert got.mode == "plain"
    with pytest.raises(ParameterError, match="mode='plain' takes first-order steps; solver='lbfgs'"):
        train(obj, (X, y), solver="lbfgs", mode="plain")
    with pytest.raises(ParameterError, match="downlink compression applies to synchronous steps; mode='plain'"):
        train(obj, (X, y), solver="gd", mode="plain", compression="topk:0.5+down")
    from dask_dgd._engine.capabilities import sharding_refusals

    assert sharding_refusals("gd", "plain") == ["mode='plain' is not supported (only 'sync' and 'async')"]

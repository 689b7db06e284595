"""Which solver trains what: the engine's capability table, and the resolution of a
fit's ``solver``/``optimizer``/``batch_size``/``mode``/``compression``/L1 settings into
one solver and one optimizer.

:data:`SOLVERS` says, for each solver, whether it needs the exact full-batch sums (then
it runs synchronous steps only, without compression), what it takes as ``optimizer``,
whether it trains an L1 penalty, whether it takes mini-batches, which models it can
train (``support``) and what to use instead.  :func:`resolve_solver` asks the table,
never the solver's name, and every refusal message is made from it, so adding a solver
is one row.  Optimizers are asked by their traits (``full_batch_only``, ``plain_step``,
``proximal_exact``), never by their type.

:data:`MODES` says the same of the training modes (``mode="sync"``, ``"local"``,
``"async"``): which solver class runs a fit (:func:`solver_class`), with and without
parameter sharding, and what the mode needs.  A row names the class as
``"module:Class"`` under ``dask_dgd._engine``, imported when a fit is assembled: the
class builds itself from the context and the fit's :class:`~.solvers.base.Settings`
(``Solver.build``), so adding a mode is its module plus one row here.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..compression import get_compressor
from ..exceptions import ParameterError
from ..optim import LBFGS, Schedule, get_optimizer
from ..optim._first_order import ONLINE_SCHEDULES
from .objective import LinearTraining, PathTraining
from .solvers.newton import cd_max_params, cd_model_params, newton_support

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeAlias

    from ..compression import Compressor
    from ..optim import FirstOrderOptimizer
    from .objective import PathTraining
    from .protocols import TrainingObjective
    from .solvers.base import Solver

    #: What a fit's ``optimizer`` resolves to (asked by its traits, never its type).
    Optimizer: TypeAlias = "FirstOrderOptimizer | LBFGS"

__all__ = [
    "MODES",
    "NEWTON_AUTO_WORK",
    "ONLINE_AUTO_PARAMS",
    "ONLINE_AUTO_ROWS",
    "SOLVERS",
    "ModeTraits",
    "SolverTraits",
    "first_order_optimizer",
    "learning_rate_mode",
    "newton_auto_work",
    "online_auto",
    "resolve_feedback",
    "resolve_solver",
    "scaled_solve",
]


def scaled_solve(objective: TrainingObjective) -> bool:
    """Whether a full-batch solver (newton, cd, lbfgs) trains ``objective`` in scaled
    coordinates (:mod:`.scaling`): a linear model's or a stacked path's (L-BFGS and
    proximal gradient on the whole path; coordinate descent column by column, its passes
    in the data's units, :mod:`.solvers.cd_path`), unless the dask config
    ``dgd.scale-features`` is False (the benchmarks' comparison)."""
    import dask

    return isinstance(getattr(objective, "base", objective), (LinearTraining, PathTraining)) and bool(
        dask.config.get("dgd.scale-features", True))


def _newton_support(objective: TrainingObjective) -> str | None:
    """:func:`~.solvers.newton.newton_support` (and ``cd_support``: the same), and a
    multi-output model only in scaled coordinates."""
    reason = newton_support(objective)
    if reason is None and objective.objective.loss.n_outputs > 1 and not scaled_solve(objective):  # type: ignore[attr-defined]  # (supported: a linear model)
        reason = "a multi-output model's Hessian is summed in scaled coordinates, and dgd.scale-features is off"
    return reason


def _online_support(objective: TrainingObjective) -> str | None:
    if not isinstance(objective, LinearTraining):
        return f"it trains linear models in compiled passes, not {type(objective).__name__}"
    from ..losses._online import supports

    return supports(objective.objective.loss)


def _als_support(objective: TrainingObjective) -> str | None:
    return objective.als_support() if hasattr(objective, "als_support") else f"not {type(objective).__name__}"


@dataclass(frozen=True)
class SolverTraits:
    """What one solver can train (a row of :data:`SOLVERS`).

    ``exact``: it needs the exact full-batch sums (synchronous steps, no compression,
    no mini-batches).  ``optimizer``: what it takes as ``optimizer``, "first-order",
    "lbfgs" or "none".  ``l1``: it trains an L1 penalty, else ``l1_instead`` says what
    does.  ``mini_batch``: it needs a ``batch_size``.  ``support(objective)``: why it
    cannot train that model (None: it can); the refusal reads ``refusal`` (with
    ``{name}``, ``{reason}`` and ``{instead}``).  ``hessian``: it takes exact Newton
    steps on the Hessian's sums.  ``scaled``: it runs in scaled coordinates when
    :func:`scaled_solve` says so.  ``build``: its class (``"module:Class"``) in the
    synchronous mode, ``sharded`` its class with parameter sharding (None: sharding
    does not support it), ``path`` its class on a cross-validation path's stacked
    objective (None: it takes the path's objective as any other).  ``batch_optional``:
    it takes a ``batch_size`` or none.  ``own_rounds``: it runs its own rounds, each
    group keeping state between them (synchronous mode only; checkpoints gather the
    state, the blocks do not move).  ``default_optimizer``: the optimizer it runs
    without one given.  ``optimizer="online"``: it takes the optimizers that have a
    per-row rule (their ``online_rule``)."""

    exact: bool
    optimizer: str
    l1: bool
    mini_batch: bool = False
    support: Callable[[TrainingObjective], str | None] | None = None
    instead: str = ""
    l1_instead: str = ""
    refusal: str = "solver={name!r} cannot train this model: {reason}; use {instead}"
    batch_advice: str = " or use solver='sgd'"
    hessian: bool = False
    scaled: bool = False
    build: str = ""
    sharded: str | None = None
    path: str | None = None
    batch_optional: bool = False
    own_rounds: bool = False
    default_optimizer: str = "sgd"


SOLVERS = {
    "lbfgs": SolverTraits(exact=True, optimizer="lbfgs", l1=False, scaled=True,
                          l1_instead="solver='gd' (proximal gradient) or solver='auto'",
                          build="solvers.first_order:LBFGS", sharded="sharded.driver:ShardedLBFGS"),
    "newton": SolverTraits(exact=True, optimizer="none", l1=False, support=_newton_support,
                           instead="solver='lbfgs'", hessian=True, scaled=True, build="solvers.newton:IRLSCD",
                           path="solvers.cd_path:PathIRLSCD",
                           l1_instead="solver='cd' (coordinate descent on the same Newton steps) or solver='auto'"),
    "cd": SolverTraits(exact=True, optimizer="none", l1=True, support=_newton_support,
                       instead="solver='gd' (proximal gradient; without an L1 penalty also 'lbfgs')",
                       hessian=True, scaled=True, build="solvers.newton:IRLSCD", path="solvers.cd_path:PathIRLSCD"),
    "als": SolverTraits(exact=True, optimizer="none", l1=False, support=_als_support, batch_advice="",
                        l1_instead="solver='gd'", build="solvers.als:ALS",
                        refusal="solver={name!r} trains matrix factorizations whose objective is quadratic in each "
                                "side's factors (explicit ratings, or loss='wls'): {reason}"),
    "gd": SolverTraits(exact=False, optimizer="first-order", l1=True, build="solvers.first_order:FirstOrder",
                       sharded="sharded.driver:ShardedFirstOrder"),
    "sgd": SolverTraits(exact=False, optimizer="first-order", l1=True, mini_batch=True,
                        build="solvers.first_order:FirstOrder", sharded="sharded.driver:ShardedFirstOrder"),
    "online": SolverTraits(exact=False, optimizer="online", l1=False, batch_optional=True, own_rounds=True,
                           default_optimizer="normalized", support=_online_support, instead="solver='sgd'",
                           l1_instead="solver='sgd' (proximal steps) or 'gd'", build="modes.online:OnlineEpochs",
                           sharded="sharded.driver:ShardedOnline"),
}


@dataclass(frozen=True)
class ModeTraits:
    """What one training mode is (a row of :data:`MODES`).

    ``build``: the class that runs the mode (``"module:Class"``); None: the solver's own
    (:data:`SOLVERS`), as in synchronous training.  ``sharded``: its class with
    parameter sharding (None: the solver's for a mode without its own class; refused
    for one with it).  ``first_order_only``: it takes first-order steps, so the exact
    solvers and L-BFGS are refused.  ``downlink``: it sends parameters that downlink
    compression may compress.  ``keeps_group_memory``: each group keeps state of its
    own between steps (checkpoints gather it).  ``rebalances``: the blocks may move
    between steps to follow uneven workers."""

    build: str | None
    sharded: str | None
    first_order_only: bool
    downlink: bool
    keeps_group_memory: bool
    rebalances: bool


MODES = {
    "sync": ModeTraits(build=None, sharded=None, first_order_only=False, downlink=True, keeps_group_memory=False,
                       rebalances=True),
    "local": ModeTraits(build="modes.local:LocalSGD", sharded=None, first_order_only=True, downlink=False,
                        keeps_group_memory=True, rebalances=False),
    "async": ModeTraits(build="modes.async_:AsyncTraining", sharded="sharded.driver:ShardedAsync",
                        first_order_only=True, downlink=False, keeps_group_memory=False, rebalances=False),
}


def _load(path: str) -> type[Solver]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def solver_class(solver: str, mode: str, sharded: bool, path: bool = False) -> type[Solver]:
    """The class that runs a fit of ``solver`` in ``mode`` (sharded or not, on a
    cross-validation ``path`` or not), from the tables; :func:`sharding_refusals` has
    said why a combination cannot be sharded."""
    row = MODES[mode]
    traits = SOLVERS[solver]
    if row.build is None:
        where = traits.sharded if sharded else (traits.path if path and traits.path else traits.build)
    else:
        where = row.sharded if sharded else row.build
    return _load(where)  # type: ignore[arg-type]  # (None: sharding_refusals refused the fit)


def sharding_refusals(solver: str, mode: str) -> list[str]:
    """Why parameter sharding cannot run ``solver`` in ``mode`` (a list; empty: it can),
    in the tables' words."""
    reasons: list[str] = []
    if MODES[mode].build is not None and MODES[mode].sharded is None:
        ok = [m for m, row in MODES.items() if row.build is None or row.sharded is not None]
        reasons.append(f"mode={mode!r} is not supported (only {_either(ok)})")
    if SOLVERS[solver].sharded is None:
        ok = [s for s, row in SOLVERS.items() if row.sharded is not None]
        reasons.append(f"solver={solver!r} is not supported (only {_either(ok)})")
    return reasons


def _either(names: Iterable[str]) -> str:
    quoted = [repr(n) for n in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0]


def _check_compression(compression: str | Compressor | None, solver: str, opt: Optimizer | None, mode: str) -> None:
    comp = get_compressor(compression)  # a bad name fails here, clearly
    if not MODES[mode].downlink and comp.downlink:
        raise ParameterError(
            f"downlink compression applies to synchronous steps; mode={mode!r} sends the parameters in "
            "full (drop '+down' / downlink=True, or use mode='sync')"
        )
    if (solver in SOLVERS and SOLVERS[solver].exact) or (opt is not None and opt.full_batch_only):
        raise ParameterError(
            f"compression needs a first-order solver ('gd' or 'sgd'): solver={solver!r} relies on exact gradients"
        )
    if comp.momentum and opt is not None and not opt.plain_step:  # type: ignore[union-attr]  # (L-BFGS refused above)
        raise ParameterError(
            f"compression momentum (DGC's momentum correction) keeps the momentum with the blocks; the "
            f"driver's optimizer must be plain SGD, not {type(opt).__name__} with momentum or adaptive steps"
        )


def _check_mode(mode: str, solver: str, opt: Optimizer | None) -> None:
    if solver in SOLVERS and SOLVERS[solver].exact:
        raise ParameterError(
            f"mode={mode!r} takes first-order steps; solver={solver!r} is synchronous only. Use solver='sgd' "
            "(with batch_size) or 'gd', or mode='sync'"
        )
    if opt is not None and opt.full_batch_only:
        raise ParameterError(f"mode={mode!r} needs a first-order optimizer; L-BFGS is synchronous full-batch only")


#: With the dask config ``dgd.online-auto`` True (off by default: on the ``wide_default``
#: click log the online default took 1.2x L-BFGS's time, to a held-out logloss 5e-4
#: worse), ``solver="auto"`` picks "online" for sparse data with at least this many
#: parameters (dask config ``dgd.online-auto-params``).
ONLINE_AUTO_PARAMS = 2**18
#: ... and at least this many rows (dask config ``dgd.online-auto-rows``): on fewer, a
#: few passes of per-row SGD are not converged, and the exact solvers are cheap anyway.
ONLINE_AUTO_ROWS = 100_000


def online_auto(*, opt: Optimizer | None, batch_size: int | None, mode: str, compression: str | Compressor | None,
                has_l1: bool, objective: TrainingObjective | None, early_stopping: bool, sparse: bool,
                n_rows: int | None, learning_rate: float | str | Schedule = "auto") -> bool:
    """Whether ``solver="auto"`` picks "online": a linear model with a compiled row
    loss on sparse data of at least ``dgd.online-auto-params`` parameters and
    ``dgd.online-auto-rows`` rows (:data:`ONLINE_AUTO_ROWS`), no
    ``batch_size``, no L1, synchronous, no compression, no early stopping, and no
    optimizer or one with a per-row rule (and a learning rate the passes evaluate:
    a number or a ``ONLINE_SCHEDULES`` schedule); only with the dask config
    ``dgd.online-auto`` True (off by default)."""
    import dask

    if not dask.config.get("dgd.online-auto", False) or objective is None or batch_size is not None:
        return False
    if has_l1 or mode != "sync" or compression is not None or early_stopping or not sparse:
        return False
    if n_rows is None or n_rows < int(dask.config.get("dgd.online-auto-rows", ONLINE_AUTO_ROWS)):
        return False
    if opt is not None and (opt.full_batch_only or opt.online_rule is None):  # type: ignore[union-attr]  # (L-BFGS: the first test)
        return False
    if isinstance(learning_rate, Schedule) and not isinstance(learning_rate, ONLINE_SCHEDULES):
        return False
    return _online_support(objective) is None and \
        objective.n_params >= int(dask.config.get("dgd.online-auto-params", ONLINE_AUTO_PARAMS))


def _auto(*, opt: Optimizer | None, batch_size: int | None, mode: str, compression: str | Compressor | None,
          has_l1: bool, objective: TrainingObjective | None, early_stopping: bool, n_rows: int | None,
          sparse: bool = False, learning_rate: float | str | Schedule = "auto") -> str:
    """``solver="auto"``'s choice (see :func:`resolve_solver`)."""
    if online_auto(opt=opt, batch_size=batch_size, mode=mode, compression=compression, has_l1=has_l1,
                   objective=objective, early_stopping=early_stopping, sparse=sparse, n_rows=n_rows,
                   learning_rate=learning_rate):
        return "online"
    if batch_size is not None:
        return "sgd"
    if MODES[mode].first_order_only or compression is not None or (opt is not None and not opt.full_batch_only):
        return "gd"
    linear = cast("LinearTraining | PathTraining", objective)  # read only where the support rule admits it
    small = objective is not None and _newton_support(objective) is None \
        and cd_model_params(linear) <= cd_max_params() and not early_stopping and opt is None
    cheap = n_rows is None or n_rows * cd_model_params(linear) ** 2 <= newton_auto_work() if small else False
    return ("cd" if small else "gd") if has_l1 else ("newton" if small and cheap else "lbfgs")


def _check_solver(name: str, traits: SolverTraits, opt: Optimizer | None, *, batch_size: int | None, has_l1: bool,
                  objective: TrainingObjective | None) -> None:
    """Refuse what the solver ``name`` cannot take, in the table's words."""
    if traits.optimizer == "none" and opt is not None:
        raise ParameterError(f"solver={name!r} takes no optimizer; got {type(opt).__name__}")
    if traits.optimizer == "lbfgs" and opt is not None and not opt.full_batch_only:
        raise ParameterError(
            f"optimizer {type(opt).__name__} is a first-order optimizer; it needs solver='gd' (full batch) or "
            f"solver='sgd' (mini-batch), not {name!r}"
        )
    if traits.optimizer in ("first-order", "online") and opt is not None and opt.full_batch_only:
        raise ParameterError(f"the L-BFGS optimizer needs solver='lbfgs' (or 'auto'); got solver={name!r}")
    if traits.optimizer == "online" and opt is not None and opt.online_rule is None:  # type: ignore[union-attr]  # (first-order: L-BFGS refused above)
        raise ParameterError(
            f"solver={name!r} runs per-row rules in compiled passes: optimizer 'normalized', 'adagrad' or 'sgd' "
            f"(no momentum; a constant, InverseScaling or InverseTime learning rate); got {opt!r}"
        )
    if traits.optimizer != "online" and opt is not None and getattr(opt, "online_only", False):
        raise ParameterError(
            f"optimizer {type(opt).__name__} runs only in solver='online' (it needs each row's features); "
            f"got solver={name!r}: use optimizer='adagrad', or solver='online'"
        )
    if traits.mini_batch and batch_size is None:
        raise ParameterError(f"solver={name!r} needs a batch_size (rows per step), e.g. 256")
    if not traits.mini_batch and not traits.batch_optional and batch_size is not None:
        if traits.exact:
            raise ParameterError(f"solver={name!r} is full-batch only; drop batch_size{traits.batch_advice}")
        raise ParameterError(
            f"solver={name!r} takes full-batch steps but batch_size={batch_size} was given; use solver='sgd' "
            "(or 'auto') for mini-batches"
        )
    if has_l1 and not traits.l1:
        raise ParameterError(f"solver={name!r} cannot handle an L1 penalty (l1_ratio > 0); use {traits.l1_instead}")
    reason = None if objective is None or traits.support is None else traits.support(objective)
    if reason is not None:
        raise ParameterError(traits.refusal.format(name=name, reason=reason, instead=traits.instead))


def resolve_solver(solver: str, optimizer: str | Optimizer | None, *, batch_size: int | None, mode: str,
                   compression: str | Compressor | None, has_l1: bool, learning_rate: float | str = "auto",
                   objective: TrainingObjective | None = None, early_stopping: bool = False,
                   n_rows: int | None = None, sparse: bool = False) -> tuple[str, Optimizer | None]:
    """``(solver, optimizer)`` from the solver/optimizer/batch_size/L1 settings: "auto"
    picks the exact-Hessian solver when the training ``objective`` is given and can
    take it (a loss with a Hessian, a multinomial one in scaled coordinates, at most ``dgd.cd-max-params``
    parameters, no early stopping, no optimizer given): "cd" for an L1 penalty, and
    "newton" when a pass's Hessian costs at most ``dgd.newton-auto-work`` (rows x
    parameters^2, :data:`NEWTON_AUTO_WORK`; ``n_rows`` None: any size); otherwise
    "lbfgs", or "gd" for an L1 penalty; "gd" also for a first-order optimizer (and in
    the local/async modes or with compression), or "sgd" when ``batch_size`` is set.
    Before all these, "online" for wide ``sparse`` data (:func:`online_auto`).
    What a solver cannot take is refused from :data:`SOLVERS`."""
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {tuple(MODES)}; got {mode!r}")
    opt = None if optimizer is None else get_optimizer(optimizer)
    if compression is not None:
        _check_compression(compression, solver, opt, mode)
    if MODES[mode].first_order_only:
        _check_mode(mode, solver, opt)
    if solver == "auto":
        solver = _auto(opt=opt, batch_size=batch_size, mode=mode, compression=compression, has_l1=has_l1,
                       objective=objective, early_stopping=early_stopping, n_rows=n_rows, sparse=sparse,
                       learning_rate=learning_rate)
    traits = SOLVERS[solver]
    _check_solver(solver, traits, opt, batch_size=batch_size, has_l1=has_l1, objective=objective)
    if traits.own_rounds:
        _check_own_rounds(solver, mode=mode, compression=compression, early_stopping=early_stopping)
    if traits.optimizer == "none":
        return solver, None
    if traits.optimizer == "lbfgs":
        return solver, opt or LBFGS()
    opt = first_order_optimizer(opt, has_l1=has_l1, learning_rate=learning_rate, default=traits.default_optimizer)
    if traits.optimizer == "online" and opt.online_rule is None:  # (with the learning rate: a schedule it cannot run)
        _check_solver(solver, traits, opt, batch_size=batch_size, has_l1=has_l1, objective=objective)
    if traits.own_rounds and compression is not None:
        _check_online_compression(solver, opt, compression)
    return solver, opt


def _check_online_compression(name: str, opt: Optimizer, compression: str | Compressor) -> None:
    """Refuse the compression a solver with its own rounds cannot send: the adaptive
    rules' entry-by-entry average, and residual error feedback (a group's next pass
    moves again along what the residual still holds: sent twice, measured to drift the
    objective up from the third round)."""
    if opt.online_rule != "sgd":  # type: ignore[union-attr]  # (first-order: resolved above)
        raise ParameterError(
            f"solver={name!r} compresses the round changes of optimizer='sgd' only (models averaged by sample "
            f"weight); the {opt.online_rule!r} rule averages them entry by entry by the round's squared "  # type: ignore[union-attr]
            "gradients, sent uncompressed: pass optimizer='sgd' or drop compression"
        )
    comp = get_compressor(compression)
    if comp.downlink:
        raise ParameterError(
            f"solver={name!r} broadcasts the averaged model in full each round; drop '+down' / downlink=True"
        )
    if comp.feedback == "residual":
        raise ParameterError(
            f"solver={name!r} sends each group's change over a whole pass; residual error feedback would send "
            f"again what the next pass moves anyway: use error_feedback='ef21' or False (got {comp!r})"
        )


def _check_own_rounds(name: str, *, mode: str, compression: str | Compressor | None, early_stopping: bool) -> None:
    """Refuse what a solver that runs its own rounds (``own_rounds``) does not do yet."""
    if mode != "sync":
        raise ParameterError(
            f"solver={name!r} runs its own rounds (whole passes on each group, then an average); use mode='sync', "
            f"not mode={mode!r}"
        )
    if early_stopping:
        raise ParameterError(
            f"solver={name!r} does not stop early on validation data; drop early_stopping/validation_data, or use "
            "solver='sgd'"
        )


#: ``solver="auto"`` picks "newton" (rather than "lbfgs") for smooth models whose
#: Hessian costs at most this many rows x parameters^2 a pass (dask config
#: ``dgd.newton-auto-work``): about 0.1-0.2 s of BLAS a pass on one core.  Above it the
#: Hessian's pass costs tens of gradient passes, more than L-BFGS's extra iterations on
#: scaled columns (measured: 400,000 x 100 logistic, 0.67 s against 6.8 s).
NEWTON_AUTO_WORK = 10**9


def newton_auto_work() -> float:
    """The size limit of ``solver="auto"``'s choice of "newton" (see :data:`NEWTON_AUTO_WORK`)."""
    import dask

    return float(dask.config.get("dgd.newton-auto-work", NEWTON_AUTO_WORK))


def first_order_optimizer(opt: FirstOrderOptimizer | None, *, has_l1: bool,
                          learning_rate: float | str, default: str = "sgd") -> FirstOrderOptimizer:
    """``opt`` (default: the optimizer named ``default``, plain SGD unless the solver's
    row says otherwise) with ``learning_rate`` applied unless "auto"; an L1 penalty
    needs an optimizer whose proximal step is exact."""
    if opt is None:
        opt = get_optimizer(default)
    if has_l1 and not opt.proximal_exact:
        raise ParameterError(
            f"an L1 penalty is applied by a proximal step, which is exact only for plain gradient "
            f"steps; optimizer {type(opt).__name__} would converge to another solution. Use "
            "optimizer='sgd' (no momentum), or l1_ratio=0"
        )
    if learning_rate != "auto":
        opt = opt.with_learning_rate(learning_rate)
    return opt


def resolve_feedback(compressor: Compressor | None, *, full_batch: bool, has_local: bool,
                     optimizer: Optimizer | None = None, own_rounds: bool = False) -> Compressor | None:
    """The compressor with its default feedback settled: EF21 (where it is the
    compressor's default) for full-batch steps of a model without local parameters, the
    residual otherwise: a mini-batch, or local parameters that move between steps
    (matrix factorization's users), change each block's gradient every step, and the
    EF21 estimate lags (measured: implicit matrix factorization, 20 steps of top-k 30%,
    loss 0.61 with EF21 against 0.38 uncompressed).  The same rule holds for local SGD's
    round changes and the asynchronous pushes.  A driver optimizer with momentum or
    adaptive steps also takes the residual: it amplifies the entries of the EF21
    estimate that lag (measured: 41 parameters, top-k 5%, 400 steps: momentum 0.9 at
    0.635 and Adam at 0.531 with EF21, 0.4870 and 0.4874 with the residual, against
    0.4849 uncompressed; plain gradient descent 0.4849 with EF21).  A solver with its
    own rounds (``own_rounds``: ``solver="online"``, whole passes a round, mini-batch or
    not) keeps EF21: the residual is refused there (:func:`_check_online_compression`)."""
    if compressor is None or compressor.error_feedback is not None or compressor.feedback != "ef21":
        return compressor
    if own_rounds or (full_batch and not has_local and (optimizer is None or optimizer.plain_step)):  # type: ignore[union-attr]  # (compression refuses L-BFGS)
        return dataclasses.replace(compressor, error_feedback="ef21")
    return dataclasses.replace(compressor, error_feedback=True)


def learning_rate_mode(optimizer: str | Optimizer | None, learning_rate: float | str) -> str:
    """ "auto" when the engine should derive the step (an optimizer given by name or
    none, and learning_rate="auto"); otherwise the optimizer's own."""
    by_name = optimizer is None or isinstance(optimizer, str)
    return "auto" if by_name and learning_rate == "auto" else "fixed"

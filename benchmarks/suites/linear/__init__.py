"""Suite ``linear``: binary logistic regression, dask_dgd against scikit-learn, dask-ml
and Spark MLlib, side by side in one run on the same data.

Data
----
``rows`` x ``features`` float64 (full: 2,000,000 x 100) is generated on the workers of a
``LocalCluster`` of ``workers`` single-threaded worker processes as a dask array of
``chunks`` row blocks, persisted and waited for before anything is timed.  Labels come
from a known logistic model with Bernoulli noise, so the problem is not separable.
dask_dgd and dask-ml fit the persisted dask arrays with the same client; scikit-learn
(lbfgs, ``threads`` BLAS threads, the cores the cluster gets) and Spark MLlib
(``local[threads]``) fit the same data gathered into the driver.

One objective for every tool
----------------------------
:func:`objective` evaluates every tool's final coefficients on the driver, in NumPy::

    F(w, b) = mean_i [log(1 + exp(z_i)) - y_i z_i] + alpha / 2 ||w||^2,   z = X w + b,

with ``alpha = 1 / (C n)`` (``C`` = 1) and the intercept ``b`` unpenalised.  Each tool's
regularisation is mapped onto it:

* scikit-learn ``LogisticRegression(C=C)`` minimises ``C sum(loss) + ||w||^2 / 2``,
  which is ``C n F``.
* dask_dgd ``LogisticRegression(alpha=1 / (C n))`` minimises ``F``.
* dask-ml ``LogisticRegression(C=C)`` passes ``lamduh = 1 / C`` to dask_glm, whose lbfgs
  and admm minimise ``sum(loss) + lamduh * ||beta||^2 / 2`` (``dask_glm.regularizers.L2``
  is ``||beta||^2 / 2``), which is ``n F`` except that ``beta`` includes the intercept
  (dask-ml appends a column of ones, so the intercept is penalised too).  dask_glm's
  solvers standardise X by default and would then penalise the *standardised*
  coefficients; ``solver_kwargs={"normalize": False}`` keeps the penalty on ``w``
  itself.  dask-ml drops the penalty for newton and gradient_descent, which therefore
  minimise the unpenalised loss.  Both differences move the minimiser by O(alpha) and
  ``F`` at it by O(alpha^2), far below the band at these sizes.
* Spark ``LogisticRegression(regParam=alpha, elasticNetParam=0, standardization=False)``
  minimises the mean loss + ``regParam / 2 ||w||^2`` (intercept unpenalised), i.e. ``F``
  (Spark's regParam is on the mean loss, like dask_dgd's alpha).

Whatever each tool thinks it minimised, the shared objective decides who is in band.

Time to optimum
---------------
The wall time of a fit whose final ``F`` is within ``band`` (1e-6) relative of the best
``F`` any run reached.  Each configuration runs down a ladder of tolerances (``tols``,
loosest first; 1e-4 is every tool's default), one run per rung; the loosest rung in the
band is run again up to ``repeats`` runs and its median is the time to optimum.
Exceptions: dask-ml's admm ignores ``tol`` (it stops on ``abstol=1e-4, reltol=1e-2``) and
its per-chunk L-BFGS makes each iteration slow, so it runs once at its own rule with
``max_iter=admm_max_iter``; and once a rung took more than ``rung_limit_s`` seconds the
tighter (slower) rungs of that configuration are skipped.  A configuration that never
reaches the band is not repeated; its time to optimum is then only bounded below.

Per step
--------
From ``history_`` of the dask_dgd fits: median ``step_time``, ``compute_time_max``,
overhead = ``step_time - compute_time_max``, and ``broadcast_time``, ``reduce_time``,
``update_time`` when the engine records them.  They are compared with the one-pass read
of X on the same cluster in the same run: one task per worker summing
(``block.sum()``) the blocks it holds, pinned to it, all workers at once.

Targets
-------
dask_dgd / scikit-learn time to optimum <= 0.7; fastest dask-ml solver / dask_dgd >= 10;
Spark (fit only, loading excluded) / dask_dgd >= 10; step / one-pass read <= 2.5;
overhead <= 15 ms.  dask_dgd's time is its fastest configuration in band.  The targets
are set for the full size: at the small size (100,000 rows, a one-minute check) the
fixed costs of a step and of the peers weigh more, and the ratios come out worse.

Machines are shared and noisy: quote the medians and the ratios, not single times.
"""

import dataclasses
import math
import statistics
import time

from ..._common import gather_to_driver, make_data, start_cluster
from ..._common import one_line as _one_line
from .peers import PROFILE_COLUMNS, configurations, spark_setup
from .problems import alignment_census, block_placement, cluster_read, driver_read, objective
from .report import (
    _in_band,
    _tol,
    optimum_table,
    render,
    step_table,
    summarise,
    targets,
    targets_table,
    title,
)

__all__ = [
    "DASK_ML_SOLVERS", "DESCRIPTION", "NAME", "PEERS", "PROFILE_COLUMNS", "SIZES", "Config", "benchmark",
    "make_config", "objective", "run", "targets", "targets_table",
]

NAME = "linear"
DESCRIPTION = (
    "Binary logistic regression: time to optimum and per-step cost of dask_dgd against "
    "scikit-learn, dask-ml and Spark MLlib on the same data"
)

#: Peers this suite knows, in report order.
PEERS = ("sklearn", "dask-ml", "spark")
#: dask-ml solvers run when dask-ml is importable.
DASK_ML_SOLVERS = ("lbfgs", "newton", "gradient_descent", "admm")


#: Size parameters; ``run(size, **overrides)`` replaces any of them.
SIZES = {
    "small": dict(
        rows=100_000,
        features=100,
        chunks=8,
        workers=2,
        repeats=1,
        tols=(1e-4, 1e-6),
        peers=PEERS,
        read_repeats=3,
        admm_max_iter=2,
        rung_limit_s=10.0,
    ),
    "full": dict(
        rows=2_000_000,
        features=100,
        chunks=16,
        workers=2,
        repeats=3,
        tols=(1e-4, 1e-5, 1e-6, 1e-8),
        peers=PEERS,
        read_repeats=7,
        admm_max_iter=5,
        rung_limit_s=300.0,
    ),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Parameters of one run (a size's values plus any overrides).

    ``threads`` (BLAS threads of scikit-learn, Spark's ``local[threads]``) defaults to
    ``workers``; ``tols`` are sorted loosest first; ``peers`` must be among
    :data:`PEERS`; ``spark_memory`` is Spark's driver heap (``spark.driver.memory``).
    """

    rows: int
    features: int
    chunks: int
    workers: int
    repeats: int
    tols: tuple
    peers: tuple
    read_repeats: int
    admm_max_iter: int
    rung_limit_s: float
    threads: int | None = None
    seed: int = 0
    C: float = 1.0
    band: float = 1e-6
    max_iter: int = 1000
    max_iter_gd: int = 5000
    dgd_solvers: tuple = ("lbfgs", "newton", "gd")
    dask_ml_solvers: tuple = DASK_ML_SOLVERS
    spark_memory: str = "8g"

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalise in place once
        set_(self, "threads", self.threads or self.workers)
        set_(self, "tols", tuple(sorted({float(t) for t in self.tols}, reverse=True)))
        set_(self, "peers", tuple(self.peers))
        set_(self, "dgd_solvers", tuple(self.dgd_solvers))
        set_(self, "dask_ml_solvers", tuple(self.dask_ml_solvers))
        unknown = sorted(set(self.peers) - set(PEERS))
        if unknown:
            raise ValueError(f"unknown peers {unknown}; choose among {list(PEERS)}")
        if not 1 <= self.chunks <= self.rows:
            raise ValueError("chunks must be between 1 and rows")
        if not self.tols:
            raise ValueError("tols needs at least one tolerance")
        if self.repeats < 1 or self.read_repeats < 1:
            raise ValueError("repeats and read_repeats must be at least 1")

    @property
    def alpha(self):
        """The penalty of the shared objective, ``1 / (C n)``."""
        return 1.0 / (self.C * self.rows)


def make_config(size, repeats=None, **overrides):
    """The :class:`Config` of ``size`` with ``repeats`` and ``overrides`` applied."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose among {list(SIZES)}")
    params = {**SIZES[size], **overrides}
    if repeats is not None:
        params["repeats"] = repeats
    return Config(**params)


def warm_up(data, tools, cfg, log):
    """One untimed short fit per tool (worker imports, JIT); returns the wall times."""
    out = {}
    short = dataclasses.replace(cfg, max_iter=2, max_iter_gd=2, admm_max_iter=1)
    for tool in tools:
        # dask_dgd: every solver (the newton solver also runs the block kernel on the
        # driver, where it compiles on first use); peers: one fit each
        key = f"{tool.name}/{tool.solver}" if tool.name == "dask_dgd" else tool.name
        if key in out:
            continue
        t0 = time.perf_counter()
        try:
            tool.runner(data, tool.ladder[0], short)
        except Exception as err:  # noqa: BLE001 - the timed runs will report it
            log(f"{key}: warm-up failed: {_one_line(err)}")
        out[key] = time.perf_counter() - t0
        log(f"{key}: warm-up fit {out[key]:.2f}s")
    return out


# ----------------------------------------------------------------------------- the benchmark
def _timed_run(tool, data, tol, cfg, Xn, yn):
    """One fit of ``tool`` at ``tol``, its coefficients replaced by the shared objective."""
    r = tool.runner(data, tol, cfg)
    r["objective"] = objective(Xn, yn, r.pop("coef"), r.pop("intercept"), cfg.alpha)
    return r


def benchmark(cfg, log):
    """Generate the data, run every configuration, return the raw numbers."""
    result = {"config": dataclasses.asdict(cfg)}
    tools, unavailable = configurations(cfg)
    result["unavailable"] = unavailable
    for peer, why in unavailable.items():
        log(f"{peer}: unavailable: {why}")

    log(f"starting LocalCluster: {cfg.workers} workers x 1 thread (processes)")
    cluster, client = start_cluster(cfg.workers)
    spark = None
    try:
        t0 = time.perf_counter()
        X, y = make_data(client, cfg.rows, cfg.features, cfg.chunks, cfg.seed)
        result["generate_time"] = time.perf_counter() - t0
        futures, owners = block_placement(client, X)
        log(f"data {X.shape} {X.dtype} in {X.numblocks[0]} blocks: {result['generate_time']:.1f}s")

        t0 = time.perf_counter()
        Xn, yn = gather_to_driver(X, y)
        result["gather_to_driver_time"] = time.perf_counter() - t0
        result["positive_rate"] = float(yn.mean())
        data = {"client": client, "X": X, "y": y, "Xn": Xn, "yn": yn}
        result["alignment"] = {"generated": alignment_census(client, futures)}

        # One-pass reads over the blocks where Dask generated them, before any fit moves
        # data (a moved copy may be misaligned, see alignment_census).
        reads = {}
        for kind in ("sum", "gemv", "kernel"):
            reads[kind] = cluster_read(client, futures, owners, kind, cfg.read_repeats)
            log(f"one pass ({kind}): {statistics.median(reads[kind]['max_task_time']):.3f}s")
        result["cluster_read"] = reads
        result["driver_read_sum"] = driver_read(Xn, cfg.read_repeats)

        if any(t.name == "spark-mllib" for t in tools):
            try:
                spark, data["spark_df"], started, loaded = spark_setup(data, cfg)
                result["spark_session_time"], result["spark_load_time"] = started, loaded
                log(f"spark: session {started:.1f}s, data loaded in {loaded:.1f}s")
            except Exception as err:  # noqa: BLE001 - report and go on without Spark
                unavailable["spark"] = f"setup failed: {_one_line(err)}"
                log(f"spark: {unavailable['spark']}")
                tools = [t for t in tools if t.name != "spark-mllib"]

        # Warm-up, untimed: worker imports, the JVM's JIT and, for dask_dgd, the one-off
        # move of blocks to the worker of their shard (later fits find them local).
        result["warmup"] = warm_up(data, tools, cfg, log)

        # Phase 1: the tolerance ladder, one run per rung.
        runs = {}
        for tool in tools:
            rec = runs[tool.key] = {
                "name": tool.name, "solver": tool.solver, "ladder": [], "error": None, "skipped": None
            }
            for i, tol in enumerate(tool.ladder):
                if rec["ladder"] and rec["ladder"][-1]["runs"][0]["wall"] > cfg.rung_limit_s:
                    rec["skipped"] = list(tool.ladder[i:])
                    log(f"{tool.key}: last rung over {cfg.rung_limit_s:g}s, skipping tol {rec['skipped']}")
                    break
                try:
                    r = _timed_run(tool, data, tol, cfg, Xn, yn)
                except Exception as err:  # noqa: BLE001 - a peer's failure is reported, not fatal
                    rec["error"] = _one_line(err)
                    log(f"{tool.key}: failed: {rec['error']}")
                    break
                rec["ladder"].append({"tol": tol, "runs": [r]})
                log(
                    f"{tool.key}: tol={_tol(tol)} wall={r['wall']:.2f}s iter={r['n_iter']} "
                    f"obj={r['objective']:.12g}"
                )

        objectives = [r["objective"] for rec in runs.values() for g in rec["ladder"] for r in g["runs"]]
        best = min(objectives) if objectives else math.nan
        result["best_objective"] = best

        # Phase 2: the loosest rung in the band, repeated.
        for tool in tools:
            rec = runs[tool.key]
            in_band = _in_band(rec["ladder"], best, cfg.band)
            rec["reached"] = bool(in_band)
            if not in_band:
                continue
            rung = in_band[0]
            for _ in range(cfg.repeats - 1):
                log(f"{tool.key}: repeat at tol={_tol(rung['tol'])}")
                try:
                    rung["runs"].append(_timed_run(tool, data, rung["tol"], cfg, Xn, yn))
                except Exception as err:  # noqa: BLE001
                    rec["error"] = _one_line(err)
                    break

        result["alignment"]["after_fits"] = alignment_census(client, futures)
        result["runs"] = runs
    finally:
        if spark is not None:
            spark.stop()
        client.close()
        cluster.close()
    return result


def run(size, *, repeats=None, log=print, **overrides):
    """Run the suite at ``size`` (``"small"`` or ``"full"``); see the module docstring.

    ``overrides`` replace fields of :class:`Config` (e.g. ``rows=20000, peers=("sklearn",)``).
    """
    cfg = make_config(size, repeats=repeats, **overrides)
    result = benchmark(cfg, log)
    summarise(result, cfg)
    markdown = render(result, cfg)
    table = "\n\n".join(
        [
            "Time to optimum:\n\n" + optimum_table(result),
            "Per step:\n\n" + step_table(result),
            "Targets:\n\n" + targets_table(result),
        ]
    )
    return {"title": title(cfg), "markdown": markdown, "table": table, "data": result}

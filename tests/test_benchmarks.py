"""Tests of the ``linear`` benchmark suite (tiny sizes) and of the runner's results file."""

import importlib.util
import json
import math

import numpy as np
import pytest

from benchmarks.__main__ import _jsonable, main, parse_params, section_markers, update_results
from benchmarks.suites import SUITES, linear
from benchmarks.suites._peers import why_no_spark

#: A configuration that runs in seconds (plus the peers' own start-up costs).
TINY = dict(
    rows=20_000, features=10, chunks=8, repeats=1, tols=(1e-6,), read_repeats=2, admm_max_iter=2
)


def _quiet(msg):
    """A ``log`` for the suite that drops the progress lines."""


def _has(module):
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def tiny():
    """One tiny run with scikit-learn and, when it is installed, dask-ml."""
    return linear.run("small", peers=("sklearn", "dask-ml"), log=_quiet, **TINY)


def _rows(data):
    return {(r["name"], r["solver"]): r for r in data["table"]}


# ----------------------------------------------------------------------------- the suite
def test_suite_is_registered():
    assert "linear" in SUITES
    assert linear.NAME == "linear" and linear.DESCRIPTION
    assert set(linear.SIZES) == {"small", "full"}
    full = linear.make_config("full")
    # The reference contract: 2,000,000 x 100 in 16 blocks on 2 workers, 3 repeats, all peers.
    assert (full.rows, full.features, full.chunks, full.workers, full.repeats) == (
        2_000_000, 100, 16, 2, 3
    )
    assert full.peers == linear.PEERS and full.tols == (1e-4, 1e-5, 1e-6, 1e-8)
    assert full.alpha == pytest.approx(5e-7)


def test_config_overrides_and_validation():
    cfg = linear.make_config("small", repeats=2, tols=(1e-8, 1e-4, 1e-4), workers=3)
    assert cfg.repeats == 2
    assert cfg.tols == (1e-4, 1e-8)  # loosest first, deduplicated
    assert cfg.threads == 3  # defaults to the workers
    with pytest.raises(ValueError, match="unknown peers"):
        linear.make_config("small", peers=("nope",))
    with pytest.raises(ValueError, match="unknown size"):
        linear.make_config("huge")
    with pytest.raises(ValueError, match="chunks"):
        linear.make_config("small", rows=10, chunks=11)
    with pytest.raises(TypeError):
        linear.make_config("small", no_such_parameter=1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_run_structure(tiny):
    assert set(tiny) == {"title", "markdown", "table", "data"}
    assert tiny["title"].startswith("Logistic regression, 20,000 x 10 float64, 8 blocks")
    for section in ("### Time to optimum", "### Per step", "### Targets", "### Tolerance ladder"):
        assert section in tiny["markdown"]
    for heading in ("Time to optimum:", "Per step:", "Targets:"):
        assert heading in tiny["table"]
    assert "| scikit-learn | lbfgs |" in tiny["markdown"]
    assert "| dask_dgd | lbfgs |" in tiny["markdown"]
    assert "| dask_dgd | gd |" in tiny["markdown"]

    data = tiny["data"]
    json.dumps(_jsonable(data))  # the runner can save it
    rows = _rows(data)
    sk, dgd, gd = rows["scikit-learn", "lbfgs"], rows["dask_dgd", "lbfgs"], rows["dask_dgd", "gd"]
    for row in (sk, dgd, gd):
        assert row["error"] is None
        assert row["wall"] > 0 and row["reached"]

    # Same objective, same optimum: dask_dgd within 1e-6 relative of scikit-learn.
    assert abs(dgd["objective"] - sk["objective"]) <= 1e-6 * abs(sk["objective"])
    # The shared objective is the penalised mean log-loss: below log(2) here (labels are
    # predictable), and the best is the minimum over every run.
    assert 0 < data["best_objective"] < math.log(2)
    assert data["best_objective"] == min(
        g["runs"][0]["objective"] for rec in data["runs"].values() for g in rec["ladder"]
    )

    # Per-step figures come from history_ and the one-pass read of X on the cluster.
    for row in (dgd, gd):
        assert row["n_steps"] >= row["n_iter"] >= 1
        assert row["step_time"] > 0 and row["compute_time_max"] > 0
        assert row["overhead"] is not None
        assert row["step_over_read"] > 0
    assert data["read_summary"]["sum"]["equal_share"] > 0
    assert sum(data["read_summary"]["blocks_per_worker"].values()) == 8

    # Spark was not asked for: neither run nor reported unavailable.
    assert "spark" not in data["unavailable"]
    assert not any(r["name"] == "spark-mllib" for r in data["table"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_run_profile_columns(tiny):
    """broadcast / reduce / update are reported exactly when history_ records them."""
    data = tiny["data"]
    for key in ("dask_dgd/lbfgs", "dask_dgd/gd"):
        raw = data["runs"][key]["ladder"][0]["runs"][0]
        row = next(r for r in data["table"] if r["key"] == key)
        for col in linear.PROFILE_COLUMNS:
            assert (raw[col] is None) == (row[col] is None)
            if row[col] is not None:
                assert 0 <= row[col] <= row["step_time"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_run_dask_ml(tiny):
    """dask-ml runs every solver on the same arrays when installed, else says why not."""
    data = tiny["data"]
    rows = _rows(data)
    target = _target(data["targets"], "fastest dask-ml")
    if not _has("dask_ml"):
        assert "\n" not in data["unavailable"]["dask-ml"]
        assert target["measured"].startswith("unavailable")
        return
    assert "dask-ml" not in data["unavailable"]
    best = data["best_objective"]
    for solver in linear.DASK_ML_SOLVERS:
        row = rows["dask-ml", solver]
        assert row["error"] is None, row["error"]
        assert row["wall"] > 0
        assert math.isfinite(row["objective"]) and row["objective"] >= best
    # Same (penalised) objective as the others: its lbfgs lands in the band.
    assert rows["dask-ml", "lbfgs"]["reached"]
    assert rows["dask-ml", "admm"]["tol"] is None  # its own stopping rule
    assert target["value"] > 0


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_tiny_run_spark():
    """Spark MLlib runs on the same data when pyspark and Java work, else says why not."""
    result = linear.run(
        "small", peers=("spark",), dgd_solvers=("lbfgs",), log=_quiet, **TINY
    )
    data = result["data"]
    target = _target(data["targets"], "Spark")
    why = why_no_spark()
    if why:
        assert "\n" not in data["unavailable"]["spark"]
        assert target["measured"].startswith("unavailable")
        return
    assert "spark" not in data["unavailable"]
    spark = _rows(data)["spark-mllib", "lbfgs"]
    dgd = _rows(data)["dask_dgd", "lbfgs"]
    assert spark["error"] is None and spark["reached"]
    assert abs(spark["objective"] - dgd["objective"]) <= 1e-6 * abs(dgd["objective"])
    assert data["spark_load_time"] > 0 and data["spark_session_time"] > 0
    assert "loading the data" in result["markdown"]
    assert target["value"] > 0


# ----------------------------------------------------------------------------- objectives
def test_objective_matches_sklearn_scaling():
    """The shared objective is scikit-learn's, divided by C * n."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = (rng.random(200) < 0.5).astype(float)
    C = 0.7
    est = LogisticRegression(C=C, tol=1e-10, max_iter=1000).fit(X, y)
    coef, b = est.coef_.ravel(), float(est.intercept_[0])
    z = X @ coef + b
    sk_value = C * np.sum(np.logaddexp(0, z) - y * z) + 0.5 * coef @ coef
    ours = linear.objective(X, y, coef, b, alpha=1 / (C * len(y)))
    assert ours == pytest.approx(sk_value / (C * len(y)), rel=1e-12)


@pytest.mark.skipif(not _has("dask_glm"), reason="dask-ml (dask_glm) is not installed")
def test_objective_matches_dask_glm_scaling():
    """dask-ml's lbfgs / admm objective with lamduh = 1 / C is n times ours, plus the
    intercept's penalty (dask_glm penalises the appended column of ones too)."""
    from dask_glm.families import Logistic
    from dask_glm.regularizers import L2

    rng = np.random.default_rng(1)
    n = 300
    X = rng.standard_normal((n, 4))
    y = (rng.random(n) < 0.4).astype(float)
    coef, b, C = rng.standard_normal(4), 0.3, 2.0
    beta = np.r_[coef, b]
    theirs = Logistic.pointwise_loss(beta, np.c_[X, np.ones(n)], y) + (1 / C) * L2().f(beta)
    alpha = 1 / (C * n)
    ours = linear.objective(X, y, coef, b, alpha=alpha)
    assert theirs / n == pytest.approx(ours + 0.5 * alpha * b * b, rel=1e-12)


# ----------------------------------------------------------------------------- targets
def _fake_result(dask_ml_rows, unavailable=None):
    table = [
        {"key": "scikit-learn/lbfgs", "name": "scikit-learn", "solver": "lbfgs", "wall": 2.0,
         "reached": True},
        {"key": "dask_dgd/lbfgs", "name": "dask_dgd", "solver": "lbfgs", "wall": 1.0,
         "reached": True, "step_over_read": 2.0, "overhead": 0.02},
        *dask_ml_rows,
    ]
    return {
        "table": table,
        "unavailable": unavailable or {},
        "reference": {"scikit-learn": "scikit-learn/lbfgs", "dask_dgd": "dask_dgd/lbfgs"},
    }


def _dml(solver, wall, reached):
    return {"key": f"dask-ml/{solver}", "name": "dask-ml", "solver": solver, "wall": wall,
            "reached": reached, "ladder": [{"wall": wall}]}


def _target(rows, prefix):
    (row,) = [r for r in rows if r["target"].startswith(prefix)]
    return row


def test_targets_rows():
    cfg = linear.make_config("small")
    rows = linear.targets(
        _fake_result([_dml("lbfgs", 30.0, True), _dml("newton", 12.0, True), _dml("admm", 5.0, False)],
                     {"spark": "no working java"}),
        cfg,
    )
    sk = _target(rows, "dask_dgd / scikit-learn")
    assert sk["value"] == pytest.approx(0.5) and sk["met"] is True
    # The fastest dask-ml solver *in band* decides, not the fastest one.
    dml = _target(rows, "fastest dask-ml")
    assert dml["value"] == pytest.approx(12.0) and dml["met"] is True
    spark = _target(rows, "Spark")
    assert spark["met"] is None and "no working java" in spark["measured"]
    assert _target(rows, "dask_dgd lbfgs: step / one-pass read")["met"] is True
    assert _target(rows, "dask_dgd lbfgs: step overhead")["met"] is False
    assert "| **no** |" in linear.targets_table({"targets": rows})


def test_targets_lower_bound_when_no_peer_reaches_the_band():
    cfg = linear.make_config("small")
    rows = linear.targets(_fake_result([_dml("admm", 25.0, False)]), cfg)
    row = _target(rows, "fastest dask-ml")
    assert row["measured"].startswith("> 25.0")
    assert row["met"] is True  # its time to optimum exceeds 25 x dask_dgd's


# ----------------------------------------------------------------------------- the runner
def test_update_results_replaces_only_its_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    begin, end = section_markers("linear", "small")
    other_begin, other_end = section_markers("modes", "small")
    path.write_text(
        "# Benchmark results\n\nPreamble.\n\n"
        f"{begin}\nold linear text\n{end}\n\n"
        f"{other_begin}\nmodes text\n{other_end}\n"
    )
    update_results(path, "linear", "small", "new linear text\n")
    text = path.read_text()
    assert "old linear text" not in text
    assert f"{begin}\nnew linear text\n{end}" in text
    assert f"{other_begin}\nmodes text\n{other_end}" in text
    assert text.startswith("# Benchmark results\n\nPreamble.")
    assert text.count(begin) == 1

    # Another size is a separate section, appended; a missing file is created.
    update_results(path, "linear", "full", "full text")
    assert path.read_text().count("new linear text") == 1
    assert path.read_text().rstrip().endswith(section_markers("linear", "full")[1])
    fresh = tmp_path / "new.md"
    update_results(fresh, "linear", "small", "x")
    assert fresh.read_text().startswith("# Benchmark results")
    assert f"{begin}\nx\n{end}" in fresh.read_text()


def test_param_overrides_are_python_literals_and_need_no_write():
    """``--param NAME=VALUE`` reaches the suite as an override; a malformed one is
    refused with what was given, and a run with any is not written to RESULTS.md
    (it is not the suite's recorded form)."""
    assert parse_params(["stores=False", "memory_repeats=3", "grids=((1, 2),)"]) == {
        "stores": False, "memory_repeats": 3, "grids": ((1, 2),)}
    with pytest.raises(SystemExit, match="NAME=VALUE.*'stores'"):
        parse_params(["stores"])
    with pytest.raises(SystemExit, match="stores: 'no' is not a Python literal"):
        parse_params(["stores=no"])
    with pytest.raises(SystemExit, match="add --no-write"):
        main(["run", "--suite", "climate_scale", "--param", "stores=False"])


@pytest.mark.slow
def test_first_use_benchmark_runs_and_reports_each_command(capsys):
    """``python -m benchmarks.first_use``: every start-up command with its exit status
    (the usage errors exit 2, the others 0) and the in-task search of both estimators."""
    from benchmarks import first_use

    assert first_use.main(["--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines() if line.startswith("| ")}
    exits = {name: cells[1].strip() for name, cells in rows.items()
             if len(cells) == 2 and name not in ("command", "estimator") and "LogisticRegression" not in name}
    assert exits == {"import sklearn (peer)": "0", "import dask_dgd": "0", "dask-dgd --help": "0",
                     "usage error (--target nope)": "2", "bad --param (max_iter=-3)": "2", "train, 4-row CSV": "0",
                     "predict, 4-row CSV": "0"}
    assert float(rows["sklearn LogisticRegression"][1].strip().rstrip("x")) == 1.0
    assert float(rows["dask_dgd LogisticRegression"][0]) > 0


@pytest.mark.slow
def test_item_fold_in_benchmark_compares_fold_in_refit_and_fallback():
    """``python -m benchmarks.item_fold_in``: cold items folded in predict their held-out
    ratings better than the unknown-item fallback, close to a refit."""
    from benchmarks import item_fold_in

    lines = []
    rows, medians = item_fold_in.run(draws=1, n_items=30, log=lines.append)
    assert set(rows[0]) == {"fold-in", "refit", "no fold-in"} and lines[-1].startswith("median: fold-in")
    assert medians["fold-in"] < medians["no fold-in"] and medians["fold-in"] < 1.05 * medians["refit"]


@pytest.mark.slow
def test_mf_cluster_refit_benchmark_compares_the_refit_in_a_task_with_rounds():
    """``python -m benchmarks.mf_cluster_refit``: the default fit on a cluster with its
    refit in one task and in rounds of tasks, the same predictions bit for bit, beside
    SVD++."""
    from benchmarks import mf_cluster_refit
    from benchmarks._common import why_unimportable

    lines = []
    out = mf_cluster_refit.run(repeats=1, users=40, log=lines.append)
    task, rounds = out["refit in one task"], out["refit as rounds of tasks"]
    assert out["same"] and task["rmse"] == rounds["rmse"]
    assert 0 < task["after_path"] < task["wall"]
    if why_unimportable("surprise") is None:  # the bench extra: the peer runs beside it
        assert out["svdpp"]["wall"] > 0 and "x SVD++)" in lines[-2]
    else:  # the test extra alone: the peer is said to be unavailable, no ratio is made up
        assert out["svdpp"] is None
        assert any(line.startswith("Surprise SVDpp: unavailable (") for line in lines)
        assert "SVD++" not in lines[-2]
    assert lines[-1] == "predictions equal bit for bit: True"


def test_hashing_throughput_benchmark_times_both_hashers():
    """``python -m benchmarks.hashing_throughput``: both hashers timed on the same frame,
    one row per variant, the ratio against dask_dgd's category hashing."""
    from benchmarks import hashing_throughput

    lines = []
    out = hashing_throughput.run(rows=2000, columns=3, repeats=1, log=lines.append)
    assert set(out) == {"dask_dgd (category columns)", "dask_dgd (text columns)", "scikit-learn (strings given)",
                        "scikit-learn (strings built from the frame)"}
    assert all(t > 0 for t in out.values())
    assert lines[0].startswith("2,000 rows x 3 categorical columns") and len(lines) == 3 + len(out)
    assert lines[3].endswith("| 1.00 |")

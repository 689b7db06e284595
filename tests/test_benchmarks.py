"""Smoke test of the benchmark scripts in benchmarks/ at a tiny size."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_logistic_tiny(tmp_path, capsys):
    bench = _load("bench_logistic")
    out_json = tmp_path / "logistic.json"
    result = bench.main(
        [
            "--rows", "20000",
            "--features", "10",
            "--chunks", "8",
            "--repeats", "1",
            "--tols", "1e-6",
            "--read-repeats", "2",
            "--peers", "sklearn",
            "--json", str(out_json),
        ]
    )
    report = capsys.readouterr().out

    # The tables and their rows.
    assert "### Time to optimum" in report
    assert "### Per step" in report
    assert "| scikit-learn | lbfgs |" in report
    assert "| dask_dgd | lbfgs |" in report
    assert "| dask_dgd | gd |" in report

    rows = {(r["name"], r["solver"]): r for r in result["table"]}
    sk, dgd, gd = rows["scikit-learn", "lbfgs"], rows["dask_dgd", "lbfgs"], rows["dask_dgd", "gd"]
    for row in (sk, dgd, gd):
        assert row["error"] is None
        assert row["wall"] > 0

    # Same objective, same optimum: dask_dgd within 1e-6 relative of scikit-learn.
    assert abs(dgd["objective"] - sk["objective"]) <= 1e-6 * abs(sk["objective"])
    assert dgd["reached"] and sk["reached"]
    # The shared objective is the penalised mean log-loss: below log(2) here (labels are
    # predictable), and the best is the minimum over the runs.
    assert 0 < result["best_objective"] < math.log(2)
    assert result["best_objective"] == min(r["objective"] for r in (sk, dgd, gd))

    # Per-step figures come from history_ and the one-pass read of X on the cluster.
    for row in (dgd, gd):
        assert row["n_steps"] >= row["n_iter"] >= 1
        assert row["step_time"] > 0 and row["compute_time_max"] > 0
        assert row["step_over_read"] > 0
    assert result["read_summary"]["sum"]["equal_share"] > 0
    assert sum(result["read_summary"]["blocks_per_worker"].values()) == 8

    # Peers not asked for are not run; the JSON holds the raw numbers.
    assert result["unavailable"] == {}
    saved = json.loads(out_json.read_text())
    assert saved["best_objective"] == pytest.approx(result["best_objective"])
    assert {r["key"] for r in saved["table"]} == {"scikit-learn/lbfgs", "dask_dgd/lbfgs", "dask_dgd/gd"}


def test_bench_logistic_objective_matches_sklearn_scaling():
    """The shared objective is scikit-learn's, divided by C * n."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    bench = _load("bench_logistic")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = (rng.random(200) < 0.5).astype(float)
    C = 0.7
    est = LogisticRegression(C=C, tol=1e-10, max_iter=1000).fit(X, y)
    coef, b = est.coef_.ravel(), float(est.intercept_[0])
    z = X @ coef + b
    sk_value = C * np.sum(np.logaddexp(0, z) - y * z) + 0.5 * coef @ coef
    ours = bench.objective(X, y, coef, b, alpha=1 / (C * len(y)))
    assert ours == pytest.approx(sk_value / (C * len(y)), rel=1e-12)


def test_bench_logistic_args():
    bench = _load("bench_logistic")
    args = bench.parse_args(["--tols", "1e-8,1e-4", "--peers", "sklearn,spark", "--workers", "3"])
    assert args.tols == [1e-4, 1e-8]
    assert args.threads == 3
    assert args.peers == ["sklearn", "spark"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--peers", "nope"])

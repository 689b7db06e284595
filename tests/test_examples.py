"""Every script in examples/ runs and does what it says."""

import re
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name, capsys):
    """The example's namespace; importing it must not run it (``__main__`` guard)."""
    namespace = runpy.run_path(str(EXAMPLES / name), run_name="example")
    assert capsys.readouterr().out == ""
    return namespace


def test_every_example_is_tested():
    tested = {
        "logistic_regression_cluster.py", "sparse_text_classification.py", "pipeline_gridsearch.py",
        "movielens_recommender.py", "climate_projection.py",
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def _printed_number(out, label):
    line = next(line for line in out.splitlines() if line.startswith(label))
    return float(line.split()[-1])


@pytest.mark.slow
def test_logistic_regression_cluster():
    """Run as a script: the cluster's worker processes re-import it safely."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "logistic_regression_cluster.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "predict returns Array with 8 blocks" in out
    assert _printed_number(out, "training accuracy:") > 0.75
    assert _printed_number(out, "max |coef - scikit-learn coef|:") < 1e-3
    assert _printed_number(out, "max |proba - scikit-learn proba|:") < 1e-3


@pytest.mark.slow
def test_sparse_text_classification(capsys):
    result = _load("sparse_text_classification.py", capsys)["main"]()
    out = capsys.readouterr().out
    assert "chunktype=scipy.csr_matrix" in out  # the blocks stayed sparse
    assert result["sparse"]
    assert result["accuracy"] > 0.9
    assert result["coef_diff"] < 1e-2
    assert result["proba_diff"] < 1e-3
    assert result["predicted"] == [1, 0]  # sports, finance (labels index sorted(TOPICS))
    assert "   sports: the team scored" in out


def test_pipeline_gridsearch(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning in the search
        result = _load("pipeline_gridsearch.py", capsys)["main"]()
    out = capsys.readouterr().out
    assert "best: {'logisticregression__alpha'" in out
    assert len(result["cv_results"]["params"]) == 6
    assert result["best_params"]["logisticregression__alpha"] in (1e-4, 1e-2)
    assert result["test_accuracy"] > 0.7
    # lbfgs and gd reach the same models, so the same cross-validated scores.
    scores = dict(zip(map(str, result["cv_results"]["params"]), result["cv_results"]["mean_test_score"]))
    for alpha in (1e-4, 1e-2):
        lbfgs = scores[str({"logisticregression__alpha": alpha, "logisticregression__solver": "lbfgs"})]
        gd = scores[str({"logisticregression__alpha": alpha, "logisticregression__solver": "gd"})]
        assert lbfgs == pytest.approx(gd, abs=0.005)


# ---------------------------------------------------------------- code in the docs
ROOT = EXAMPLES.parent


def _python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.slow
def test_user_guide_code_runs(capsys, tmp_path, monkeypatch):
    """The user guide's blocks run in order, in one namespace, without a cluster."""
    monkeypatch.chdir(tmp_path)  # files the guide writes land here
    blocks = _python_blocks(ROOT / "docs" / "user_guide.md")
    assert len(blocks) >= 5
    namespace = {"__name__": "user_guide"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"user_guide.md block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "The 'solver' parameter of LogisticRegression must be one of" in out
    assert "Input X contains NaN or infinity in block 0" in out
    assert "(4, 1) (4,)" in out
    assert (tmp_path / "history.png").stat().st_size > 20_000  # plot_history's example


@pytest.mark.slow
def test_readme_usage_runs(capsys):
    (block,) = [b for b in _python_blocks(ROOT / "README.md") if "LocalCluster" in b]
    exec(compile(block, "README.md usage", "exec"), {"__name__": "__main__"})
    n_iter, score, shape = capsys.readouterr().out.split(maxsplit=2)
    assert int(n_iter) >= 1 and float(score) > 0.75
    assert shape.strip() == "(1, 20)"


@pytest.mark.slow
def test_movielens_recommender(capsys, client):
    result = _load("movielens_recommender.py", capsys)["main"](epochs=30, implicit_epochs=15, client=client)
    out = capsys.readouterr().out
    assert "test RMSE, matrix factorization:" in out and "movies closest to Toy Story (among the" in out
    # real data, real signal: factors beat the bias model, implicit factors beat popularity
    assert result["rmse_mf"] < result["rmse_bias"] < 1.0
    assert result["ndcg_implicit"] > 1.2 * result["ndcg_popular"]
    assert len(result["recommended"]) == 5 and len(set(result["similar"])) == 5


@pytest.mark.slow
def test_climate_projection(capsys, client, tmp_path):
    result = _load("climate_projection.py", capsys)["main"](client=client, out_dir=str(tmp_path))
    out = capsys.readouterr().out
    scores = result["scores"]
    assert "calendar 360_day" in out
    # the per-cell models beat both baselines on the 60 held-out years
    assert scores["pointwise"][0] < scores["persistence"][0] < scores["climatology"][0]
    assert scores["pooled"][0] < scores["climatology"][0]
    import xarray as xr

    written = xr.open_dataarray(result["path"])
    assert written.dims == ("time", "latitude", "longitude") and written.sizes["time"] == 63
    written.close()

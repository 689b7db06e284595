"""The ``dask-dgd`` command: the demo's comparison, help, and one-line errors."""

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dask_dgd import cli

TASKS = ("logistic", "linear", "poisson")
FAMILIES = ("recommend", "climate")


def _table(text):
    """{(task, tool): fields} from the demo's printed table."""
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 9 and parts[0] in TASKS + FAMILIES and parts[1] in ("dask_dgd", "scikit-learn", "bias-model"):
            rows[parts[0], parts[1]] = {
                "rows": int(parts[2].replace(",", "")),
                "wall_s": float(parts[3]),
                "iters": parts[4],
                "objective": float(parts[5]),
                "metric": parts[6],
                "score": float(parts[7]),
                "diff": parts[8],
            }
    return rows


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One demo run, through the installed ``dask-dgd`` console script as a user runs it
    (every demo start pays a LocalCluster and the Numba warm-up, so the console-script
    test reads this run too).  Python shows every DeprecationWarning here, so one raised
    in dask_dgd's code (an error in this process's tests) shows on stderr: the tests
    below refuse it."""
    out_dir = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "PYTHONWARNINGS": "default::DeprecationWarning"}
    proc = subprocess.run(
        [_console_script(), "demo", "--rows", "5000", "--features", "5", "--ratings", "4000", "--cells", "48",
         "--out", str(out_dir)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    return proc.returncode, proc.stdout, proc.stderr, out_dir


#: A DeprecationWarning raised in a dask_dgd module, as Python prints it ("path:line: DeprecationWarning: ...").
DASK_DGD_DEPRECATION = re.compile(r"dask_dgd[/\\][^\n]*:\d+: DeprecationWarning")


@pytest.mark.slow
def test_demo_prints_the_comparison(demo_run):
    code, out, err, _ = demo_run
    assert code == 0, err
    assert "Traceback" not in out + err
    assert "warning:" not in out + err  # e.g. no ConvergenceWarning at the demo's (default) max_iter
    assert not DASK_DGD_DEPRECATION.search(err), err
    table = _table(out)
    assert set(table) == {(t, tool) for t in TASKS for tool in ("dask_dgd", "scikit-learn")} | {
        ("recommend", "dask_dgd"), ("recommend", "bias-model"), ("climate", "dask_dgd"), ("climate", "scikit-learn")}
    for task in TASKS:
        ours, theirs = table[task, "dask_dgd"], table[task, "scikit-learn"]
        assert ours["rows"] == theirs["rows"] == 4000  # 20% of 5000 held out
        # Both tools reach the same optimum of the same objective.
        assert float(ours["diff"]) < 1e-3
        assert ours["objective"] == pytest.approx(theirs["objective"], rel=1e-6)
        assert abs(ours["score"] - theirs["score"]) < 0.01
        assert int(ours["iters"]) >= 1
    assert table["logistic", "dask_dgd"]["metric"] == "accuracy"
    assert table["logistic", "dask_dgd"]["score"] > 0.75
    assert table["linear", "dask_dgd"]["metric"] == "R2"
    assert table["poisson", "dask_dgd"]["metric"] == "D2"
    # the factor model beats the bias baseline on held-out ratings
    assert table["recommend", "dask_dgd"]["metric"] == "RMSE"
    assert table["recommend", "dask_dgd"]["score"] < 0.95 * table["recommend", "bias-model"]["score"]
    # one pass per cell gives scikit-learn's per-cell least squares
    ours, theirs = table["climate", "dask_dgd"], table["climate", "scikit-learn"]
    assert float(ours["diff"]) < 1e-8 and ours["score"] == pytest.approx(theirs["score"], rel=1e-8)
    assert ours["objective"] == pytest.approx(theirs["objective"], rel=1e-8)


@pytest.mark.slow
def test_demo_names_the_cluster_and_the_penalty_mapping(demo_run):
    _, out, _, _ = demo_run
    assert "LocalCluster with 2 single-threaded worker processes" in out
    assert "over 2 workers" in out
    assert "C=1/(alpha*n)=2.5" in out  # 1 / (1e-4 * 4000)
    assert "Ridge alpha=alpha*n=0.4" in out


@pytest.mark.slow
def test_demo_writes_outputs(demo_run):
    code, out, _, out_dir = demo_run
    assert code == 0
    with open(out_dir / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [(r["task"], r["tool"]) for r in summary] == [
        (t, tool) for t in TASKS for tool in ("dask_dgd", "scikit-learn")
    ] + [("recommend", "dask_dgd"), ("recommend", "bias-model"), ("climate", "dask_dgd"), ("climate", "scikit-learn")]
    for r in summary:
        if r["tool"] == "dask_dgd" and r["task"] != "recommend":  # no peer optimum for MF
            assert float(r["max_abs_diff"]) < 1e-3
    history = pd.read_csv(out_dir / "history.csv")
    assert set(history["task"]) == set(TASKS) | {"recommend"}
    assert {"step", "loss", "grad_norm"} <= set(history.columns)
    if cli._has_module("matplotlib"):
        png = out_dir / "loss_curve.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {png}" in out


def test_outputs_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    result = cli.Result("logistic", "dask_dgd", "alpha=1", 10, 2, 0.1, 3, 0.5, "accuracy", 0.9, 0.0)
    history = pd.DataFrame({"step": [1, 2], "loss": [0.7, 0.5]})
    cli._write_outputs(str(tmp_path), [result], {"logistic": history}, {"logistic": 0.5})
    out = capsys.readouterr().out
    assert "matplotlib is not installed: skipped loss_curve.png" in out
    assert (tmp_path / "summary.csv").exists() and not (tmp_path / "loss_curve.png").exists()


def test_help(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dask-dgd")
    assert "demo" in out and "--traceback" in out
    assert out.endswith(cli.EXIT_STATUS + "\n")
    for status in ("  0    success", "  1    the data cannot be used", "  2    usage error", "  130  interrupted"):
        assert status in out


@pytest.mark.parametrize("command", ["demo", "train", "predict", "bench"])
def test_every_command_help_ends_with_the_exit_status(command, capsys):
    assert cli.main(["--traceback", command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(cli.EXIT_STATUS + "\n") and "examples:" in out


def test_help_shows_only_real_defaults(capsys):
    assert cli.main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in out and "(default: [])" not in out and "(default: False)" not in out
    assert "the user id column (default: user)" in out
    assert "--target TARGET the target column (tables) or variable (grids); for mf/implicit-mf the rating " \
           "(strength) column --features" in out  # required: no default shown
    assert "started for the command (default: no cluster for small input; see above)" in out


def test_interrupted_is_status_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "COMMANDS", [cli.Command("train", "h", "d", lambda p: None, interrupted)])
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err == "dask-dgd train: interrupted\n"


def test_demo_help_lists_every_option(capsys):
    assert cli.main(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--rows", "--features", "--small-rows", "--workers", "--alpha", "--tol",
                   "--max-iter", "--seed", "--out"):
        assert option in out
    assert "(default: 200000)" in out
    assert "examples:" in out


def test_version(capsys):
    from dask_dgd import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dask-dgd {__version__}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--rows", "abc"], "dask-dgd demo: error: argument --rows: expected an integer, got 'abc'"),
        (["demo", "--rows", "10"], "dask-dgd demo: error: argument --rows: must be at least 100, got 10"),
        (["demo", "--alpha", "0"], "dask-dgd demo: error: argument --alpha: must be a finite number > 0"),
        (["demo", "--workers", "0"], "dask-dgd demo: error: argument --workers: must be at least 1"),
        (["demo", "--bogus"], "dask-dgd: error: unrecognized arguments: --bogus"),
        (["frobnicate"], "dask-dgd: error: argument COMMAND: invalid choice: 'frobnicate'"),
        ([], "dask-dgd: error: choose a command: demo"),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(argv, message, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(message)
    assert "--help" in lines[0]


def test_runtime_error_is_one_line_with_status_1(tmp_path, capsys):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    assert cli.main(["demo", "--out", str(not_a_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"dask-dgd demo: error: --out {not_a_dir} is a file; pass a directory "
        "(it is created if missing)\n"
    )
    assert "Traceback" not in captured.out + captured.err


def test_unexpected_error_names_its_type(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("the cluster\nwent away")

    monkeypatch.setattr(cli, "COMMANDS", [cli.Command("demo", "h", "d", lambda p: None, boom)])
    assert cli.main(["demo"]) == 1
    assert capsys.readouterr().err == "dask-dgd demo: error: RuntimeError: the cluster went away\n"
    with pytest.raises(RuntimeError, match="went away"):
        cli.main(["--traceback", "demo"])


def _console_script():
    script = Path(sys.executable).with_name("dask-dgd")
    if script.exists():
        return str(script)
    found = shutil.which("dask-dgd")
    # The README's test command installs the package; a missing script is a packaging bug.
    assert found is not None, "the dask-dgd console script is not installed: pip install ."
    return found


@pytest.mark.slow
def test_console_script_demo(demo_run):
    code, out, err, _ = demo_run  # run by the installed dask-dgd console script
    assert code == 0, err[-2000:]
    assert "Traceback" not in out + err
    table = _table(out)
    assert len(table) == 10  # three linear tasks, the recommender and the climate model, two rows each
    for task in TASKS:
        assert table[task, "dask_dgd"]["rows"] == 4000
        assert float(table[task, "dask_dgd"]["diff"]) < 1e-3
    assert "total" in out.splitlines()[-1]


# ------------------------------------------------------------------------------ bench
def test_bench_help_and_errors(tmp_path, capsys):
    from dask_dgd.cli import main

    assert main(["bench", "--help"]) == 0
    assert "benchmarks/RESULTS.md" in capsys.readouterr().out
    assert main(["bench", "--suite", "linear", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dask-dgd bench: error: no benchmarks/ folder in") and "\n" not in err
    root = str(Path(__file__).resolve().parent.parent)
    assert main(["bench", "--suite", "nope", "--root", root]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dask-dgd bench: error: unknown suite 'nope'; choose one of linear,") and "\n" not in err
    assert err.endswith(" or all (see 'dask-dgd bench --help')")
    assert main(["bench", "--suite", "linear", "--repeats", "0"]) == 2


@pytest.mark.slow
def test_bench_runs_a_suite(capsys):
    from dask_dgd.cli import main

    root = str(Path(__file__).resolve().parent.parent)
    assert main(["bench", "--suite", "climate", "--size", "small", "--repeats", "1", "--no-write", "--root", root]) == 0
    out = capsys.readouterr().out
    assert "pointwise fit, 400 cells x 500 steps" in out and "|---|" in out

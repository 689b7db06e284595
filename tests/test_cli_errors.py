"""``dask-dgd`` as a user runs it: ``python -m dask_dgd`` in a child process.

Every error path prints exactly one documented line on stderr, with exit status 2 for a
usage error and 1 for data that cannot be used; parsing (``--help``, usage errors)
imports nothing heavy.  Nothing here measures time.
"""

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

import dask_dgd
from dask_dgd import cli

ROOT = Path(__file__).resolve().parent.parent

#: Modules that parsing the command line must not import.
HEAVY = ("dask", "distributed", "numpy", "pandas", "pyarrow", "scipy", "sklearn", "xarray",
         "dask_dgd.linear_model", "dask_dgd.exceptions")


def _env():
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _run(args, cwd):
    proc = subprocess.run([sys.executable, "-m", "dask_dgd", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Small files, and a model trained on four.csv (in this process, no cluster)."""
    path = tmp_path_factory.mktemp("cli")
    (path / "four.csv").write_text("a,b,y\n1,2,3\n2,1,4\n3,5,9\n4,4,8\n")
    (path / "header.csv").write_text("a,b,y\n")
    (path / "empty.csv").write_text("")
    (path / "text.csv").write_text("a,b,y\n1,x,3\n2,z,4\n")
    (path / "nan.csv").write_text("a,b,y\n1,,3\n2,1,4\n")
    (path / "no_b.csv").write_text("a,y\n1,3\n2,4\n")
    (path / "bad.npz").write_bytes(b"not a model")
    (path / "taken.csv").write_text("kept\n")
    (path / "folder.csv").mkdir()
    (path / "set.parquet").mkdir()  # a Parquet dataset: a folder of parts
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [2.0, 1.0, 5.0], "y": [3.0, 4.0, 9.0]}).to_parquet(
        path / "set.parquet" / "part.0.parquet")
    assert cli.main(["train", str(path / "four.csv"), "--model", "linear", "--target", "y",
                     "--out", str(path / "m.npz")]) == 0
    (path / "m.csv").write_bytes((path / "m.npz").read_bytes())  # a model file under another name
    return path


def _linear_params():
    return ", ".join(sorted(n for n in inspect.signature(dask_dgd.LinearRegression).parameters if n != "client"))


TRAIN = ["train", "four.csv", "--model", "linear", "--target", "y", "--out", "out.npz"]
TRAIN_HINT = " (see 'dask-dgd train --help')"
PREDICT_HINT = " (see 'dask-dgd predict --help')"

USAGE_ERRORS = [
    (["train", "four.csv", "--model", "linear", "--target", "nope", "--out", "out.npz"],
     "dask-dgd train: error: --target: four.csv has no column 'nope'; its columns: a, b, y" + TRAIN_HINT),
    ([*TRAIN, "--features", "a,zz,qq"],
     "dask-dgd train: error: --features: four.csv has no columns 'zz', 'qq'; its columns: a, b, y" + TRAIN_HINT),
    (["train", "four.csv", "--model", "mf", "--target", "y", "--out", "out.npz"],
     "dask-dgd train: error: --user-col: four.csv has no column 'user'; its columns: a, b, y" + TRAIN_HINT),
    ([*TRAIN, "--workers", "0"],
     "dask-dgd train: error: argument --workers: must be at least 1, got 0" + TRAIN_HINT),
    (["predict", "m.npz", "four.csv", "--out", "p.csv", "--workers", "0"],
     "dask-dgd predict: error: argument --workers: must be at least 1, got 0" + PREDICT_HINT),
    ([*TRAIN, "--workers", "2", "--scheduler", "tcp://localhost:8786"],
     "dask-dgd train: error: argument --scheduler: not allowed with argument --workers" + TRAIN_HINT),
    ([*TRAIN[:-1], "m.pkl"],
     "dask-dgd train: error: argument --out: the model is saved in dask_dgd's format, a NumPy .npz file: "
     "name it *.npz, got 'm.pkl'" + TRAIN_HINT),
    ([*TRAIN, "--param", "max_iter=-3"],
     "dask-dgd train: error: --param: The 'max_iter' parameter of LinearRegression must be an int in [1, inf); "
     "got -3" + TRAIN_HINT),
    ([*TRAIN, "--param", "colour=1"],
     "dask-dgd train: error: --param colour: LinearRegression has no parameter 'colour'; its parameters: "
     "{linear_params}" + TRAIN_HINT),
    ([*TRAIN, "--param", "client=1"],
     "dask-dgd train: error: --param client=... is set by the command (use its flags: --model, --target, "
     "--features, --user-col, --item-col, --scheduler)" + TRAIN_HINT),
    (["train", "four.csv", "--model", "climate-pooled", "--target", "y", "--features", "a", "--out", "c.npz"],
     "dask-dgd train: error: --model climate-pooled needs gridded data; four.csv is a table" + TRAIN_HINT),
    (["predict", "m.npz", "four.csv", "--out", "p.csv", "--keep", "a,zz"],
     "dask-dgd predict: error: --keep: four.csv has no column 'zz'; its columns: a, b, y" + PREDICT_HINT),
    (["predict", "m.npz", "four.csv", "--out", "p.nc"],
     "dask-dgd predict: error: a LinearRegression writes a table: name --out *.parquet or *.csv" + PREDICT_HINT),
    ([], "dask-dgd: error: choose a command: demo, train, predict, bench (see 'dask-dgd --help')"),
]


@pytest.mark.parametrize("args, line", USAGE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_usage_errors_are_the_documented_line_with_status_2(folder, args, line):
    code, out, err = _run(args, folder)
    assert (code, out, err) == (2, "", line.format(linear_params=_linear_params()) + "\n")


OUT_ERRORS = [
    (["train", "four.csv", "--model", "linear", "--target", "y", "--out", ""],
     "dask-dgd train: error: argument --out: expected a file name, got ''" + TRAIN_HINT),
    (["predict", "m.npz", "four.csv", "--out", ""],
     "dask-dgd predict: error: argument --out: expected a file name, got ''" + PREDICT_HINT),
    (["predict", "m.npz", "four.csv", "--out", "folder.csv"],
     "dask-dgd predict: error: argument --out: 'folder.csv' is a directory; name a file" + PREDICT_HINT),
    (["predict", "m.npz", "four.csv", "--out", "new.csv/"],
     "dask-dgd predict: error: argument --out: 'new.csv/' ends with '/': it names a directory; name a file"
     + PREDICT_HINT),
    (["predict", "m.npz", "four.csv", "--out", "nodir/p.csv"],
     "dask-dgd predict: error: argument --out: the folder of 'nodir/p.csv' does not exist" + PREDICT_HINT),
    (["train", "four.csv", "--model", "linear", "--target", "y", "--out", "four.csv/m.npz"],
     "dask-dgd train: error: argument --out: the folder of 'four.csv/m.npz', {folder}/four.csv, is not a "
     "directory" + TRAIN_HINT),
    (["predict", "m.npz", "four.csv", "--out", "four.csv"],
     "dask-dgd predict: error: --out four.csv is the data file four.csv: writing there would replace it; "
     "name another file" + PREDICT_HINT),
    (["predict", "m.npz", "four.csv", "--out", "./four.csv", "--overwrite"],
     "dask-dgd predict: error: --out ./four.csv is the data file four.csv: writing there would replace it; "
     "name another file" + PREDICT_HINT),
    (["predict", "m.csv", "four.csv", "--out", "m.csv", "--overwrite"],
     "dask-dgd predict: error: --out m.csv is the model file m.csv: writing there would replace it; "
     "name another file" + PREDICT_HINT),
    (["train", "set.parquet", "--model", "linear", "--target", "y", "--out", "set.parquet/m.npz"],
     "dask-dgd train: error: --out set.parquet/m.npz is inside the data folder set.parquet: writing there would "
     "change it; name a file outside it" + TRAIN_HINT),
    (["train", "four.csv", "--model", "linear", "--target", "y", "--out", "m.npz"],
     "dask-dgd train: error: --out m.npz exists; pass --overwrite to replace it, or name another file"
     + TRAIN_HINT),
    (["predict", "m.npz", "four.csv", "--out", "taken.csv"],
     "dask-dgd predict: error: --out taken.csv exists; pass --overwrite to replace it, or name another file"
     + PREDICT_HINT),
    # a special file system: os.access says yes (as root), creating a file fails; the
    # command trained 25 s and then failed with a raw FileNotFoundError (issue 44)
    pytest.param(
        ["train", "four.csv", "--model", "linear", "--target", "y", "--out", "/proc/m.npz"],
        "dask-dgd train: error: argument --out: cannot create a file in the folder of '/proc/m.npz', /proc (No such "
        "file or directory); name a file in a folder that can be written to" + TRAIN_HINT,
        marks=pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc file system here")),
]


@pytest.mark.parametrize("args, line", OUT_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_out_is_the_documented_line_with_status_2_and_replaces_nothing(folder, args, line):
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    code, out, err = _run(args, folder)
    assert (code, out, err) == (2, "", line.format(folder=folder) + "\n")
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert os.listdir(folder / "set.parquet") == ["part.0.parquet"]


@pytest.mark.slow
def test_overwrite_replaces_an_existing_out(folder, tmp_path):
    (tmp_path / "four.csv").write_bytes((folder / "four.csv").read_bytes())
    for name in ("m.npz", "p.csv"):
        (tmp_path / name).write_text("old\n")
    code, out, err = _run(["train", "four.csv", "--model", "linear", "--target", "y", "--out", "m.npz",
                           "--overwrite"], tmp_path)
    assert (code, err) == (0, "") and out.endswith("saved to m.npz\n")
    code, out, err = _run(["predict", "m.npz", "four.csv", "--out", "p.csv", "--overwrite"], tmp_path)
    assert (code, out, err) == (0, "wrote 4 predictions to p.csv\n", "")
    assert list(pd.read_csv(tmp_path / "p.csv").columns) == ["prediction"]


def test_out_in_a_folder_that_cannot_be_written_is_a_usage_error(folder, monkeypatch, capsys):
    # os.access is what the check asks (as root, chmod would not make the folder unwritable)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == str(folder) else access(path, mode))
    code = cli.main(["predict", str(folder / "m.npz"), str(folder / "four.csv"), "--out", str(folder / "q.csv")])
    assert (code, *capsys.readouterr()) == (
        2, "", f"dask-dgd predict: error: argument --out: cannot write to the folder of '{folder}/q.csv', {folder}: "
               f"permission denied{PREDICT_HINT}\n")
    assert not (folder / "q.csv").exists()


def test_out_in_a_folder_that_refuses_files_is_a_usage_error_before_any_data_is_read(folder, monkeypatch, capsys):
    # a read-only mount, a full disk or a special file system: the folder passes
    # os.access, creating a file in it fails; found before the data is read or trained on
    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(pd, "read_csv", lambda *a, **k: pytest.fail("the data was read"))
    code = cli.main(["train", str(folder / "four.csv"), "--model", "linear", "--target", "y",
                     "--out", str(folder / "r.npz")])
    assert (code, *capsys.readouterr()) == (
        2, "", f"dask-dgd train: error: argument --out: cannot create a file in the folder of '{folder}/r.npz', "
               f"{folder} (Read-only file system); name a file in a folder that can be written to{TRAIN_HINT}\n")
    assert not (folder / "r.npz").exists()


@pytest.mark.slow
def test_the_out_check_leaves_no_file_behind(folder):
    code, out, err = _run(["train", "four.csv", "--model", "linear", "--target", "y", "--out", "probe.npz"], folder)
    assert (code, err) == (0, "")
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith((".", "probe"))) == ["probe.npz"]


def _text_dtype(folder):
    return pd.read_csv(folder / "text.csv")["b"].dtype


DATA_ERRORS = [
    (["train", "header.csv", "--model", "linear", "--target", "y", "--out", "out.npz"],
     "dask-dgd train: error: header.csv has no rows, only a header line"),
    (["train", "empty.csv", "--model", "linear", "--target", "y", "--out", "out.npz"],
     "dask-dgd train: error: empty.csv is empty: expected a header line and rows"),
    (["train", "text.csv", "--model", "linear", "--target", "y", "--out", "out.npz"],
     "dask-dgd train: error: text.csv: feature column 'b' (dtype {text_dtype}) is not numeric; leave it out "
     "with --features, or encode it as numbers first (categories such as Yes/No as one-hot 0/1 columns, e.g. with "
     "pandas.get_dummies)"),
    (["train", "nan.csv", "--model", "linear", "--target", "y", "--out", "out.npz"],
     "dask-dgd train: error: Input X contains NaN or infinity in block 0 (shape (2, 2)), first at row 0 of the "
     "block; drop or impute those rows before fitting"),
    (["predict", "m.npz", "no_b.csv", "--out", "p.csv"],
     "dask-dgd predict: error: no_b.csv has no column 'b'; its columns: a, y (the LinearRegression in m.npz "
     "needs a, b)"),
    (["predict", "bad.npz", "four.csv", "--out", "p.csv"],
     "dask-dgd predict: error: 'bad.npz' is not a valid dask_dgd model file: it is not a NumPy .npz archive "
     "(truncated, or another format)"),
]


@pytest.mark.parametrize("args, line", DATA_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_data_errors_are_the_documented_line_with_status_1(folder, args, line):
    code, out, err = _run(args, folder)
    assert (code, out, err) == (1, "", line.format(text_dtype=_text_dtype(folder)) + "\n")
    assert not (folder / "out.npz").exists()


@pytest.mark.slow
def test_train_and_predict_a_small_csv_print_only_their_summary(folder):
    code, out, err = _run(["train", "four.csv", "--model", "linear", "--target", "y", "--out", "ok.npz"], folder)
    assert (code, err) == (0, "")
    assert re.fullmatch(r"trained LinearRegression \(linear\) on four.csv: n_iter=\d+, R² on the training rows \S+, "
                        r"final objective \S+ \(the penalised mean training loss as minimised, terms in y alone left "
                        r"out\)\n"
                        r"saved to ok.npz\n", out), out
    assert "nan" not in out
    code, out, err = _run(["predict", "ok.npz", "four.csv", "--out", "ok.csv", "--keep", "a"], folder)
    assert (code, out, err) == (0, "wrote 4 predictions to ok.csv\n", "")
    assert list(pd.read_csv(folder / "ok.csv").columns) == ["a", "prediction"]


def _run_together(commands, cwd):
    """``_run`` of each command, all started at once (each its own process and, with
    ``--workers``, its own LocalCluster on ports of its own): independent commands
    overlap their interpreter and cluster start-ups instead of paying them in turn."""
    procs = [subprocess.Popen([sys.executable, "-m", "dask_dgd", *args], cwd=cwd, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in commands]
    try:
        outputs = [proc.communicate(timeout=300) for proc in procs]
        return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs)]
    finally:
        for proc in procs:
            proc.kill()  # no-op for those that ended


@pytest.mark.slow
def test_workers_start_a_local_cluster_quietly(folder):
    # nullable and boolean columns of a Parquet file, read by dask: no warning, no noise
    pd.DataFrame({"a": pd.array([1, 2, 3, 4, 5, 6], dtype="Int64"), "b": [True, False, True, True, False, False],
                  "y": [1.0, 2.0, 3.5, 4.0, 5.0, 6.5]}).to_parquet(folder / "ext.parquet")
    # the three trainings are independent; so are the three predictions
    train, train_ext, train_nan = _run_together([
        ["train", "four.csv", "--model", "linear", "--target", "y", "--workers", "1", "--out", "w.npz"],
        ["train", "ext.parquet", "--model", "linear", "--target", "y", "--workers", "1", "--out", "e.npz"],
        # a data error on the workers: the command's one line, not the workers' report first
        ["train", "nan.csv", "--model", "linear", "--target", "y", "--workers", "1", "--out", "w2.npz"],
    ], folder)
    code, out, err = train
    assert (code, err) == (0, "") and out.endswith("saved to w.npz\n")
    # a small input: the command says what the cluster cost and that it can do without
    assert re.search(r"^note: starting the LocalCluster of 1 worker took \d+\.\d s and the fit \d+\.\d s, .*"
                     r"four.csv \(0\.0 MiB\) is small enough to be fitted in this process: leave out --workers to "
                     r"skip both$", out, re.M), out
    code, out, err = train_ext
    assert (code, err) == (0, "") and out.endswith("saved to e.npz\n")
    code, out, err = train_nan
    assert (code, err) == (1, "dask-dgd train: error: Input X contains NaN or infinity in block 0 (shape (2, 2)), "
                              "first at row 0 of the block; drop or impute those rows before fitting\n")
    predict, predict_ext, predict_nan = _run_together([
        ["predict", "w.npz", "four.csv", "--out", "pw.csv", "--keep", "a", "--workers", "1"],
        ["predict", "e.npz", "ext.parquet", "--out", "e.csv", "--keep", "a", "--workers", "1"],
        ["predict", "w.npz", "nan.csv", "--out", "pw2.csv", "--workers", "1"],
    ], folder)
    assert predict == (0, "wrote 4 predictions to pw.csv\n", "")
    assert predict_ext == (0, "wrote 6 predictions to e.csv\n", "")
    assert list(pd.read_csv(folder / "e.csv")["a"]) == [1, 2, 3, 4, 5, 6]
    code, out, err = predict_nan
    assert (code, err) == (1, "dask-dgd predict: error: Input X contains NaN or infinity; predictions need finite "
                              "features: drop or impute those rows\n")


# --------------------------------------------------------------------- what parsing imports
_PROBE = """\
import json, sys
from dask_dgd.cli import main
code = main(sys.argv[1:])
print("\\nIMPORTED " + json.dumps([m for m in {heavy!r} if m in sys.modules]))
sys.exit(code)
"""


@pytest.mark.parametrize("args, code", [
    (["--help"], 0),
    (["--version"], 0),
    (["train", "--help"], 0),
    (["predict", "--help"], 0),
    (["bench", "--help"], 0),
    ([], 2),
    (["train", "four.csv", "--model", "ridge", "--target", "y", "--out", "out.npz"], 2),
    ([*TRAIN, "--workers", "0"], 2),
    ([*TRAIN[:-1], "m.pkl"], 2),
    (["train", "four.csv", "--model", "linear", "--target", "nope", "--out", "out.npz"], 2),
    (["train", "four.csv", "--model", "climate-pooled", "--target", "y", "--features", "a", "--out", "c.npz"], 2),
    (["predict", "m.npz", "four.csv", "--out", "p.csv", "--keep", "zz"], 2),
    (["predict", "m.npz", "four.csv", "--out", "four.csv"], 2),
    (["predict", "m.npz", "four.csv", "--out", "taken.csv"], 2),
    (["predict", "m.npz", "four.csv", "--out", "new.csv/"], 2),
    (["train", "header.csv", "--model", "linear", "--target", "y", "--out", "out.npz"], 1),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_help_and_usage_errors_import_nothing_heavy(folder, args, code):
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1].removeprefix("IMPORTED ")) == []


def test_import_dask_dgd_imports_nothing_heavy():
    probe = f"import sys, dask_dgd; print([m for m in {HEAVY!r} if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


def test_the_lazy_names_of_dask_dgd_resolve():
    from dask_dgd import exceptions

    assert dask_dgd.ConvergenceWarning is exceptions.ConvergenceWarning
    assert issubclass(dask_dgd.ParameterError, ValueError) and dask_dgd.exceptions is exceptions
    assert {"exceptions", "InputError", "NotFittedError"} <= set(dir(dask_dgd))

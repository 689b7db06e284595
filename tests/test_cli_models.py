"""``dask-dgd train --model NAME``: every public estimator through one table, the quick
``--param`` check (no scikit-learn imported), ``--table`` (coef_table), ``predict --proba``.

The command runs in a child process where what it imports or prints matters, in this one
(``cli.main``) where only the result does.  Nothing here measures time.
"""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dask_dgd
from dask_dgd import cli
from dask_dgd._validation import validate_params
from dask_dgd.cli import _models
from dask_dgd.cli._common import UsageError
from dask_dgd.exceptions import ParameterError

ROOT = Path(__file__).resolve().parent.parent

#: Modules a usage error of ``train`` must not import.
HEAVY = ("dask", "distributed", "numpy", "pandas", "scipy", "sklearn", "dask_dgd.linear_model",
         "dask_dgd.exceptions")

#: Runs ``dask-dgd ARGS`` with cli.main, then prints the heavy modules it imported.
WRAPPER = (
    "import sys\n"
    "from dask_dgd import cli\n"
    "code = cli.main(sys.argv[1:])\n"
    f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    "sys.exit(code)\n"
)


def _env():
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _child(args, cwd, wrapper=False):
    command = [sys.executable, "-c", WRAPPER] if wrapper else [sys.executable, "-m", "dask_dgd"]
    proc = subprocess.run([*command, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _main(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A table with a target for every kind of tabular model (300 rows)."""
    path = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(0)
    n = 300
    X = rng.standard_normal((n, 2))
    eta = 0.3 + X @ [0.5, -0.2]
    trials = rng.integers(1, 20, n)
    pd.DataFrame({
        "a": X[:, 0], "b": X[:, 1],
        "y": eta + 0.1 * rng.standard_normal(n),  # linear
        "count": rng.poisson(np.exp(eta)),  # poisson, tweedie, negative binomial
        "cost": np.exp(eta) * rng.gamma(2.0, 0.5, n),  # gamma
        "share": rng.binomial(trials, 1 / (1 + np.exp(-eta))) / trials, "trials": trials,  # binomial
        "label": np.where(X[:, 0] + 0.3 * rng.standard_normal(n) > 0, "yes", "no"),  # classifiers
    }).to_csv(path / "data.csv", index=False)
    return path


# ------------------------------------------------------------------------------ the table
def _public_estimators():
    return sorted(name for name in dask_dgd.__all__
                  if inspect.isclass(getattr(dask_dgd, name))
                  and hasattr(getattr(dask_dgd, name), "fit") and hasattr(getattr(dask_dgd, name), "predict"))


def test_every_public_estimator_is_a_model_listed_by_train_help(folder):
    estimators = _public_estimators()
    assert "LogisticRegressionCV" in estimators and "FeatureHasher" not in estimators  # a transformer
    assert {spec.cls for spec in _models.MODELS.values()} == set(estimators)
    code, out, err = _child(["train", "--help"], folder)
    assert (code, err) == (0, "")
    listed = out.split("models (--model NAME):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split() for line in listed] == [[name, spec.cls, f"({spec.kind})"]
                                                 for name, spec in _models.MODELS.items()]


def test_the_parameter_table_is_the_estimators_constraints():
    written = (ROOT / "dask_dgd" / "cli" / "_param_table.py").read_text(encoding="utf-8")
    assert written == _models.render(), (
        "dask_dgd/cli/_param_table.py is out of date: run python -m dask_dgd.cli._models --write")
    # and it imports to the same table (its text names objects it must import, e.g. inf)
    import importlib

    from dask_dgd.cli import _param_table

    assert importlib.reload(_param_table).PARAMETERS == _models.parameter_table()


@pytest.mark.parametrize("name", list(_models.MODELS))
def test_a_model_has_coef_table_where_the_table_says(name):
    spec = _models.MODELS[name]
    assert hasattr(getattr(dask_dgd, spec.cls), "coef_table") == spec.coef_table


#: Values of every kind a --param can take (Python literals and bare words).
CANDIDATES = [None, True, False, -1, 0, 1, 3, 0.5, 1.5, -0.5, 1e9, "auto", "adam", "bogus", "sync", "gd",
              "pooled", [0.1, 0.5], (1, 2), {"a": 1}]


@pytest.mark.parametrize("cls", sorted({spec.cls for spec in _models.MODELS.values()}))
def test_the_quick_check_refuses_what_the_estimator_refuses_with_its_message(cls):
    spec = next(spec for spec in _models.MODELS.values() if spec.cls == cls)
    estimator = getattr(dask_dgd, cls)
    checked = 0
    for name in estimator._parameter_constraints:
        if name in _models.RESERVED or name in spec.fixed:
            continue
        for value in CANDIDATES:
            try:
                _models.check_params(spec, {name: value})
                quick = None
            except UsageError as err:
                quick = str(err)
            try:
                validate_params(estimator(**spec.fixed, **{name: value}))
                full = None
            except ParameterError as err:
                full = f"--param: {err}"
            if quick is not None:  # refused at once: the estimator refuses it too, in the same words
                assert quick == full, (name, value)
                checked += 1
            elif full is not None:  # left to the estimator: only where a constraint is a predicate
                assert _has_predicate(cls, name), (name, value, full)
    assert checked > 0


def _has_predicate(cls, name):
    from dask_dgd.cli._param_table import PARAMETERS

    return any(entry[0] == "predicate" for entry in PARAMETERS[cls][name])


# ------------------------------------------------------------------ the quick --param check
TRAIN = ["train", "data.csv", "--model", "logistic", "--target", "label", "--features", "a,b", "--out", "m.npz"]
HINT = " (see 'dask-dgd train --help')"


@pytest.mark.parametrize("extra, line", [
    (["--param", "tol=-1"],
     "--param: The 'tol' parameter of LogisticRegression must be a float in [0, inf); got -1"),
    (["--param", "solver=fast"], "--param: The 'solver' parameter of LogisticRegression must be one of "),
    (["--param", "max_iter=lots"],
     "--param: The 'max_iter' parameter of LogisticRegression must be an int in [1, inf); got 'lots'"),
    (["--param", "colour=red"], "--param colour: LogisticRegression has no parameter 'colour'; its parameters: "),
    (["--param", "model=pooled"], "--param model=... is set by the command"),
])
def test_a_bad_param_is_refused_before_scikit_learn_is_imported(folder, extra, line):
    code, out, err = _child([*TRAIN, *extra], folder, wrapper=True)
    assert code == 2
    assert out == "[]\n"  # none of HEAVY imported
    assert err.startswith(f"dask-dgd train: error: {line}") and err.endswith(HINT + "\n") and err.count("\n") == 1
    assert not (folder / "m.npz").exists()


def test_a_good_param_left_to_the_estimator_is_still_checked_by_it(folder, capsys):
    # cv's constraint is a predicate ("an int >= 2"): the estimator refuses it, a usage error
    code, out, err = _main(["train", str(folder / "data.csv"), "--model", "logistic-cv", "--target", "label",
                            "--out", str(folder / "m.npz"), "--param", "cv=1"], capsys)
    assert code == 2 and "The 'cv' parameter of LogisticRegressionCV must be an int >= 2 (the number of folds); " \
                          "got 1" in err


# ------------------------------------------------------------------------- every model
#: The target column of each tabular model in ``folder``'s table.
TARGETS = {"linear": "y", "logistic": "label", "poisson": "count", "gamma": "cost", "tweedie": "count",
           "negative-binomial": "count", "binomial": "share", "elasticnet-cv": "y", "logistic-cv": "label",
           "poisson-cv": "count", "gamma-cv": "cost", "tweedie-cv": "count", "negative-binomial-cv": "count",
           "binomial-cv": "share"}


def test_every_tabular_model_has_a_target_here():
    assert set(TARGETS) == {n for n, s in _models.MODELS.items() if s.data == "table"}


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_tabular_model_trains_and_predicts_from_the_command(folder, tmp_path, name, capsys):
    spec = _models.MODELS[name]
    model, preds = str(tmp_path / "m.npz"), str(tmp_path / "p.csv")
    weight = ["--sample-weight", "trials"] if name.startswith("binomial") else []
    code, out, err = _main(["train", str(folder / "data.csv"), "--model", name, "--target", TARGETS[name],
                            "--features", "a,b", *weight, "--param", "random_state=0", "--out", model], capsys)
    assert code == 0, err
    est = dask_dgd.load(model)
    assert type(est).__name__ == spec.cls and list(est.feature_names_in_) == ["a", "b"]
    frame = pd.read_csv(folder / "data.csv")
    X, y = frame[["a", "b"]], frame[TARGETS[name]]
    score = est.score(X, y, sample_weight=frame["trials"] if weight else None)
    assert out.startswith(f"trained {spec.cls} ({name}) on {folder / 'data.csv'}: n_iter=")
    assert f"{spec.score_name} on the training rows {score:.4g}" in out
    assert _main(["predict", model, str(folder / "data.csv"), "--out", preds], capsys)[0] == 0
    np.testing.assert_array_equal(pd.read_csv(preds)["prediction"], est.predict(X))


def test_the_objective_is_named_and_the_deviance_explained_reported(folder, tmp_path, capsys):
    code, out, err = _main(["train", str(folder / "data.csv"), "--model", "poisson", "--target", "count",
                            "--features", "a,b", "--out", str(tmp_path / "m.npz")], capsys)
    assert code == 0, err
    assert "D² (share of deviance explained) on the training rows 0." in out
    assert "final objective " in out and "(the penalised mean training loss as minimised, terms in y alone left out)" \
        in out


# --------------------------------------------------------------------------- --proba
def test_predict_proba_writes_a_column_per_class(folder, tmp_path, capsys):
    model, preds = str(tmp_path / "m.npz"), str(tmp_path / "p.parquet")
    assert _main(["train", str(folder / "data.csv"), "--model", "logistic", "--target", "label",
                  "--features", "a,b", "--out", model], capsys)[0] == 0
    code, out, err = _main(["predict", model, str(folder / "data.csv"), "--out", preds, "--keep", "label",
                            "--proba"], capsys)
    assert (code, out, err) == (0, f"wrote 300 predictions to {preds}\n", "")
    got = pd.read_parquet(preds)
    assert list(got.columns) == ["label", "prediction", "proba_no", "proba_yes"]
    est = dask_dgd.load(model)
    X = pd.read_csv(folder / "data.csv")[["a", "b"]]
    np.testing.assert_allclose(got[["proba_no", "proba_yes"]], est.predict_proba(X), rtol=1e-12)
    np.testing.assert_array_equal(got["prediction"], est.predict(X))


def test_predict_proba_of_a_regressor_is_a_usage_error(folder, tmp_path):
    model = str(tmp_path / "m.npz")
    assert cli.main(["train", str(folder / "data.csv"), "--model", "poisson", "--target", "count",
                     "--features", "a,b", "--out", model]) == 0
    code, out, err = _child(["predict", model, "data.csv", "--out", str(tmp_path / "p.csv"), "--proba"], folder)
    assert (code, out) == (2, "")
    assert err == ("dask-dgd predict: error: --proba: a PoissonRegressor predicts values, not class probabilities; "
                   "--proba is for the classifiers (dask-dgd train --model logistic or logistic-cv) "
                   "(see 'dask-dgd predict --help')\n")
    assert not (tmp_path / "p.csv").exists()


# --------------------------------------------------------------------------- --table
def test_table_prints_or_writes_the_coef_table(folder, tmp_path, capsys):
    model, table = str(tmp_path / "m.npz"), str(tmp_path / "coef.csv")
    argv = ["train", str(folder / "data.csv"), "--model", "binomial", "--target", "share", "--features", "a,b",
            "--sample-weight", "trials", "--param", "alpha=0", "--out", model]
    code, out, err = _main([*argv, "--table"], capsys)
    assert code == 0, err
    printed = out.splitlines()[2:]
    assert printed[0].split() == ["coef", "se", "z", "p_value", "ci_lower", "ci_upper"]
    assert [line.split()[0] for line in printed[1:]] == ["intercept", "a", "b"]
    code, out, err = _main([*argv, "--overwrite", "--table", table], capsys)
    assert code == 0, err
    assert out.endswith(f"wrote the coefficient table to {table}\n"), out
    frame = pd.read_csv(folder / "data.csv")
    expected = dask_dgd.load(model).coef_table(frame[["a", "b"]], frame["share"], sample_weight=frame["trials"])
    got = pd.read_csv(table, index_col="term")
    assert list(got.index) == ["intercept", "a", "b"]
    np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("args, line", [
    (["--model", "poisson-cv", "--target", "count", "--table"],
     "--table: a PoissonRegressorCV (poisson-cv) has no coef_table; the models with one: linear, logistic, poisson, "
     "gamma, tweedie, negative-binomial, binomial"),
    (["--model", "mf", "--target", "count", "--table"],
     "--table: a MatrixFactorization (mf) has no coef_table; the models with one: "),
    (["--model", "poisson", "--target", "count", "--table"],
     "--table: coef_table's standard errors are those of an unpenalised fit, and this PoissonRegressor has "
     "alpha=1.0; pass --param alpha=0"),
    (["--model", "logistic", "--target", "label", "--table", "--param", "C=2.0"],
     "--table: coef_table's standard errors are those of an unpenalised fit, and this LogisticRegression has "
     "C=2.0; leave C out and pass --param alpha=0"),
    (["--model", "poisson", "--target", "count", "--table", "coef.txt"],
     "argument --table: the coefficient table is written as CSV: name it *.csv, got 'coef.txt'"),
    (["--model", "poisson", "--target", "count", "--table", "data.csv"],
     "--table data.csv is the data file data.csv: writing there would replace it; name another file"),
    (["--model", "poisson", "--target", "count", "--table", "/proc/coef.csv"],
     "argument --table: cannot create a file in the folder of '/proc/coef.csv', /proc"),
    (["--model", "binomial", "--target", "share", "--sample-weight", "share"],
     "--sample-weight share is the target column; name the column of row weights"),
    (["--model", "binomial", "--target", "share", "--sample-weight", "trials", "--features", "a,trials"],
     "--sample-weight trials is also a feature (--features); leave it out of --features"),
    (["--model", "mf", "--target", "count", "--sample-weight", "trials"],
     "--sample-weight: a MatrixFactorization (mf) takes no row weights; it is for the regressors and classifiers"),
])
def test_table_and_sample_weight_errors_come_before_training(folder, args, line):
    if "/proc/coef.csv" in args and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc file system here")
    code, out, err = _child(["train", "data.csv", *args, "--out", "t.npz"], folder)
    assert (code, out) == (2, "")
    assert err.startswith(f"dask-dgd train: error: {line}") and err.count("\n") == 1, err
    assert not (folder / "t.npz").exists()


@pytest.mark.parametrize("out, line", [
    ("nodir/m.npz", "argument --out: the folder of 'nodir/m.npz' does not exist"),
    ("/proc/m.npz", "argument --out: cannot create a file in the folder of '/proc/m.npz', /proc"),
])
def test_a_bad_out_fails_before_anything_is_imported_or_read(folder, out, line):
    if out.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc file system here")
    code, stdout, err = _child(["train", "data.csv", "--model", "poisson", "--target", "count", "--out", out],
                               folder, wrapper=True)
    assert (code, stdout) == (2, "[]\n")  # nothing heavy imported: refused while parsing
    assert err.startswith(f"dask-dgd train: error: {line}") and err.count("\n") == 1, err

"""dask-dgd train / predict: files in, a saved model, predictions out; one-line errors."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dask_dgd
from dask_dgd import cli
from dask_dgd.datasets import make_ratings


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame["id"] = np.arange(3000)
    frame["y"] = 1.0 + X @ [2.0, -1.0, 0.5] + 0.1 * rng.standard_normal(3000)
    frame["label"] = np.where(frame["y"] > 1.0, "high", "low")
    path = tmp_path / "train.parquet"
    frame.to_parquet(path, row_group_size=1000)
    return frame, str(path)


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_then_predict_round_trips_on_parquet(tmp_path, table, cluster, capsys):
    frame, path = table
    model = str(tmp_path / "model.npz")
    code, out, err = _run(["train", path, "--model", "linear", "--target", "y", "--features", "a,b,c",
                           "--param", "solver=gd", "--param", "optimizer=adam", "--param", "max_iter=300",
                           "--param", "tol=1e-8", "--out", model, "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    assert "trained LinearRegression (linear)" in out and f"saved to {model}" in out
    est = dask_dgd.load(model)
    np.testing.assert_allclose(est.coef_, [2.0, -1.0, 0.5], atol=0.02)
    assert list(est.feature_names_in_) == ["a", "b", "c"]
    preds = str(tmp_path / "pred.parquet")
    code, out, err = _run(["predict", model, path, "--out", preds, "--keep", "id",
                           "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    got = pd.read_parquet(preds)
    assert list(got.columns) == ["id", "prediction"] and len(got) == 3000
    np.testing.assert_array_equal(got["id"], frame["id"])
    np.testing.assert_allclose(got["prediction"], est.predict(frame[["a", "b", "c"]]), rtol=1e-12)


def test_train_logistic_from_csv_with_string_labels(tmp_path, table, cluster, capsys):
    frame, _ = table
    csv = tmp_path / "train.csv"
    frame.drop(columns=["y", "id"]).to_csv(csv, index=False)
    model = str(tmp_path / "clf.npz")
    code, out, err = _run(["train", str(csv), "--model", "logistic", "--target", "label", "--out", model,
                           "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    est = dask_dgd.LogisticRegression.load(model)
    assert list(est.classes_) == ["high", "low"] and list(est.feature_names_in_) == ["a", "b", "c"]
    preds = str(tmp_path / "pred.csv")
    assert _run(["predict", model, str(csv), "--out", preds, "--scheduler", cluster.scheduler_address], capsys)[0] == 0
    got = pd.read_csv(preds)
    assert (got["prediction"] == frame["label"]).mean() > 0.95


def test_train_and_predict_a_recommender(tmp_path, cluster, capsys):
    ratings, _ = make_ratings(n_users=80, n_items=40, n_ratings=2000, random_state=0)
    path = tmp_path / "ratings.parquet"
    ratings.to_parquet(path)
    model = str(tmp_path / "mf.npz")
    code, out, err = _run(["train", str(path), "--model", "mf", "--target", "rating", "--param", "n_components=4",
                           "--param", "random_state=0", "--out", model, "--scheduler", cluster.scheduler_address],
                          capsys)
    assert code == 0, err
    preds = str(tmp_path / "pred.parquet")
    assert _run(["predict", model, str(path), "--out", preds, "--keep", "rating",
                 "--scheduler", cluster.scheduler_address], capsys)[0] == 0
    got = pd.read_parquet(preds)
    est = dask_dgd.load(model)
    np.testing.assert_allclose(got["prediction"], est.predict(ratings[["user", "item"]]))
    assert np.sqrt(np.mean((got["prediction"] - got["rating"]) ** 2)) < ratings["rating"].std()


def test_train_and_predict_a_climate_model_on_netcdf(tmp_path, cluster, capsys):
    rng = np.random.default_rng(2)
    time = xr.date_range("2000-01-01", periods=24, freq="MS", calendar="noleap", use_cftime=True)
    a = rng.normal(size=(24, 3, 4))
    ds = xr.Dataset({"a": (("time", "lat", "lon"), a), "tas": (("time", "lat", "lon"), 280 + 2 * a)},
                    coords={"time": time, "lat": [-10.0, 0.0, 10.0], "lon": [0.0, 1.0, 2.0, 3.0]})
    path = tmp_path / "grid.nc"
    ds.to_netcdf(path)
    model = str(tmp_path / "c.npz")
    code, out, err = _run(["train", str(path), "--model", "climate-pointwise", "--target", "tas", "--features", "a",
                           "--out", model, "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    preds = str(tmp_path / "pred.nc")
    assert _run(["predict", model, str(path), "--out", preds, "--scheduler", cluster.scheduler_address], capsys)[0] == 0
    with xr.open_dataset(preds) as got:
        np.testing.assert_allclose(got["tas"].values, ds["tas"].values, atol=1e-8)
        assert got.indexes["time"].calendar == "noleap"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "missing.parquet", "--model", "linear", "--target", "y", "--out", "m.npz"],
         "argument data: no such file or directory: 'missing.parquet'"),
        (["train", "{data}", "--model", "ridge", "--target", "y", "--out", "m.npz"],
         "argument --model: invalid choice: 'ridge'"),
        (["train", "{data}", "--model", "linear", "--target", "y", "--out", "m.npz", "--param", "oops"],
         "expected KEY=VALUE (e.g. tol=1e-6), got 'oops'"),
        (["train", "{data}", "--model", "linear", "--out", "m.npz"], "the following arguments are required: --target"),
        (["train", "{data}", "--model", "linear", "--target", "y", "--out", "/no/such/dir/m.npz"],
         "the folder of '/no/such/dir/m.npz' does not exist"),
        (["predict", "missing.npz", "{data}", "--out", "p.parquet"], "no such model file: 'missing.npz'"),
        (["train", "{txt}", "--model", "linear", "--target", "y", "--out", "m.npz"],
         "cannot tell the format of"),
    ],
)
def test_bad_flags_and_missing_files_are_one_line_with_status_2(tmp_path, table, argv, message, capsys):
    _, path = table
    txt = tmp_path / "data.txt"
    txt.write_text("x")
    argv = [a.format(data=path, txt=txt) for a in argv]
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_a_parquet_folder_of_several_files(tmp_path, table, cluster, capsys):
    frame, _ = table
    folder = tmp_path / "parts.parquet"
    folder.mkdir()
    for i, lo in enumerate(range(0, 3000, 1000)):
        frame.iloc[lo:lo + 1000].to_parquet(folder / f"part-{i}.parquet")
    model, preds = str(tmp_path / "m.npz"), str(tmp_path / "p.parquet")
    code, _, err = _run(["train", str(folder), "--model", "linear", "--target", "y", "--features", "a,b,c",
                         "--out", model, "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    code, _, err = _run(["predict", model, str(folder), "--out", preds, "--keep", "id",
                         "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0, err
    got = pd.read_parquet(preds)
    np.testing.assert_array_equal(got["id"], frame["id"])
    np.testing.assert_allclose(got["prediction"], dask_dgd.load(model).predict(frame[["a", "b", "c"]]), rtol=1e-12)


@pytest.mark.parametrize("extra, message", [
    (["--param", "colour=1"], "--param colour: LinearRegression has no parameter 'colour'; its parameters: alpha, "),
    (["--param", "client=1"], "--param client=... is set by the command"),
    (["--param", "target=y"], "--param target=... is set by the command"),
    (["--param", "max_iter=-3"], "--param: The 'max_iter' parameter of LinearRegression must be an int in [1, inf); "
                                 "got -3 (see 'dask-dgd train --help')"),
    (["--param", "alpha=-1"], "--param: The 'alpha' parameter of LinearRegression must be a float in [0, inf); got -1"),
])
def test_bad_params_are_usage_errors(tmp_path, table, capsys, extra, message):
    _, path = table
    code, out, err = _run(["train", path, "--model", "linear", "--target", "y", "--out", str(tmp_path / "m.npz"),
                           *extra], capsys)
    assert (code, out) == (2, "") and err.startswith(f"dask-dgd train: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "m.npz").exists()


def test_output_paths_are_checked(tmp_path, table, capsys):
    _, path = table
    code, _, err = _run(["train", path, "--model", "linear", "--target", "y", "--out", str(tmp_path)], capsys)
    assert code == 2 and "is a directory; name a file" in err
    model = tmp_path / "m.npz"
    model.write_bytes(b"x")
    code, _, err = _run(["predict", str(model), path, "--out", str(tmp_path / "p.json")], capsys)
    assert code == 2 and "cannot tell the format of" in err


def test_output_must_be_npz(tmp_path, table, capsys):
    _, path = table
    code, _, err = _run(["train", path, "--model", "linear", "--target", "y", "--out", str(tmp_path / "m.pkl")], capsys)
    assert code == 2 and "argument --out: the model is saved in dask_dgd's format, a NumPy .npz file" in err
    assert not (tmp_path / "m.pkl").exists()


def test_missing_columns_are_usage_errors_and_missing_model_features_data_errors(tmp_path, table, capsys):
    frame, path = table
    code, _, err = _run(["train", path, "--model", "linear", "--target", "nope", "--out", str(tmp_path / "m.npz")],
                        capsys)
    assert (code, err) == (2, f"dask-dgd train: error: --target: {path} has no column 'nope'; its columns: a, b, c, "
                              "id, y, label (see 'dask-dgd train --help')\n")
    model = str(tmp_path / "m.npz")
    assert _run(["train", path, "--model", "linear", "--target", "y", "--features", "a,b,c", "--out", model],
                capsys)[0] == 0
    partial = tmp_path / "partial.parquet"
    frame[["a", "b", "id"]].to_parquet(partial)
    code, _, err = _run(["predict", model, str(partial), "--out", str(tmp_path / "p.csv")], capsys)
    assert (code, err) == (1, f"dask-dgd predict: error: {partial} has no column 'c'; its columns: a, b, id "
                              f"(the LinearRegression in {model} needs a, b, c)\n")
    code, _, err = _run(["predict", model, str(partial), "--out", str(tmp_path / "p.csv"), "--keep", "id,zz"], capsys)
    assert (code, err) == (2, f"dask-dgd predict: error: --keep: {partial} has no column 'zz'; its columns: a, b, id "
                              "(see 'dask-dgd predict --help')\n")


def test_a_parquet_file_without_rows_is_a_data_error(tmp_path, table, capsys):
    frame, _ = table
    empty = tmp_path / "empty.parquet"
    frame.iloc[:0].to_parquet(empty)
    code, _, err = _run(["train", str(empty), "--model", "linear", "--target", "y", "--out", str(tmp_path / "m.npz")],
                        capsys)
    assert (code, err) == (1, f"dask-dgd train: error: {empty} has no rows\n")


def test_a_bad_model_file_is_a_data_error(tmp_path, table, capsys):
    _, path = table
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a model")
    code, _, err = _run(["predict", str(bad), path, "--out", str(tmp_path / "p.parquet")], capsys)
    assert code == 1 and "is not a valid dask_dgd model file" in err and err.count("\n") == 1


def test_small_input_is_fitted_and_predicted_without_starting_a_cluster(tmp_path, table, monkeypatch, capsys):
    import distributed

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster or client was started")

    monkeypatch.setattr(distributed.LocalCluster, "__init__", no_cluster)
    monkeypatch.setattr(distributed.Client, "__init__", no_cluster)
    frame, path = table
    model, preds = str(tmp_path / "m.npz"), str(tmp_path / "p.parquet")
    code, out, err = _run(["train", path, "--model", "linear", "--target", "y", "--features", "a,b,c",
                           "--out", model], capsys)
    assert (code, err) == (0, ""), err
    np.testing.assert_allclose(dask_dgd.load(model).coef_, [2.0, -1.0, 0.5], atol=0.02)
    code, out, err = _run(["predict", model, path, "--out", preds, "--keep", "id"], capsys)
    assert (code, out, err) == (0, f"wrote 3000 predictions to {preds}\n", "")
    got = pd.read_parquet(preds)
    np.testing.assert_array_equal(got["id"], frame["id"])


def test_pointwise_climate_summary_reports_no_objective(tmp_path, capsys):
    path = tmp_path / "grid.nc"
    a = np.random.default_rng(3).normal(size=(12, 2, 3))
    # area weights need latitudes in degrees (a bare latitude dimension is refused)
    xr.Dataset({"a": (("time", "lat", "lon"), a), "tas": (("time", "lat", "lon"), 1 + 2 * a)},
               coords={"lat": [-10.0, 10.0], "lon": [0.0, 1.0, 2.0]}).to_netcdf(path)
    model = str(tmp_path / "c.npz")
    code, out, err = _run(["train", str(path), "--model", "climate-pointwise", "--target", "tas", "--features", "a",
                           "--out", model], capsys)
    assert (code, err) == (0, "")
    assert out == (f"trained ClimateRegressor (climate-pointwise) on {path}: n_iter=1, solved in one pass "
                   f"(no training objective to report)\nsaved to {model}\n")

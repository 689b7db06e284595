"""``dask-dgd train`` and ``dask-dgd predict``: fit from files, save, predict to files.

Tables (Parquet, CSV) are read lazily with dask.dataframe; gridded data (NetCDF, Zarr)
with xarray.  The model is saved in dask_dgd's safe format (``est.save``) and loaded by
``predict`` with :func:`dask_dgd.load`.  Training runs on ``--scheduler ADDRESS`` (an
existing cluster, e.g. ``dask scheduler`` + ``dask worker``) or on a LocalCluster of
``--workers`` processes started for the command.
"""

import argparse
import ast
import contextlib
import os
import warnings

import pandas as pd

from ._common import CommandError, UsageError, _quiet_distributed

__all__ = ["MODELS", "train_arguments", "predict_arguments", "run_train", "run_predict"]

#: --model name -> (estimator class path, kind)
MODELS = {
    "linear": ("LinearRegression", "table"),
    "logistic": ("LogisticRegression", "table"),
    "poisson": ("PoissonRegressor", "table"),
    "mf": ("MatrixFactorization", "ratings"),
    "implicit-mf": ("ImplicitMatrixFactorization", "ratings"),
    "climate-pooled": ("ClimateRegressor", "grid"),
    "climate-pointwise": ("ClimateRegressor", "grid"),
}
_TABLES = (".parquet", ".pq", ".csv")
_GRIDS = (".nc", ".nc4", ".netcdf", ".zarr")


def _existing_path(text):
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no such file or directory: {text!r}")
    if not text.rstrip("/").lower().endswith(_TABLES + _GRIDS):
        raise argparse.ArgumentTypeError(
            f"cannot tell the format of {text!r}: name it *.parquet, *.csv, *.nc or *.zarr"
        )
    return text


def _model_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such model file: {text!r}")
    return text


def _output_path(text):
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    if os.path.isdir(text) and not text.rstrip("/").endswith(".zarr"):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name a file")
    return text


def _predictions_path(text):
    text = _output_path(text)
    if not text.rstrip("/").lower().endswith((".parquet", ".pq", ".csv") + _GRIDS):
        raise argparse.ArgumentTypeError(
            f"cannot tell the format of {text!r}: name it *.parquet, *.csv (tables), *.nc or *.zarr (grids)"
        )
    return text


def _param(text):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. tol=1e-6), got {text!r}")
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass  # a bare word: a string (e.g. optimizer=adam)
    return key, value


def _cluster_arguments(p):
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="address of a running Dask scheduler (e.g. tcp://10.0.0.5:8786); "
                        "default: start a LocalCluster for this command")
    p.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster")


def train_arguments(p):
    p.add_argument("data", type=_existing_path, help="training data: *.parquet, *.csv, *.nc or *.zarr")
    p.add_argument("--model", required=True, choices=sorted(MODELS), help="what to train")
    p.add_argument("--target", required=True,
                   help="the target column (tables) or variable (grids); for mf/implicit-mf the "
                        "rating (strength) column")
    p.add_argument("--features", help="comma-separated feature columns or variables "
                                      "(default: every column but the target; required for grids)")
    p.add_argument("--user-col", default="user", help="mf/implicit-mf: the user id column")
    p.add_argument("--item-col", default="item", help="mf/implicit-mf: the item id column")
    p.add_argument("--out", required=True, type=_output_path, help="where to save the model (*.npz)")
    p.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                   help="an estimator parameter, repeatable (e.g. --param solver=gd --param max_iter=50 "
                        "--param optimizer=adam); values are Python literals or bare words")
    _cluster_arguments(p)


def predict_arguments(p):
    p.add_argument("model", type=_model_file, help="a model saved by 'dask-dgd train' (*.npz)")
    p.add_argument("data", type=_existing_path, help="data to predict on: *.parquet, *.csv, *.nc or *.zarr")
    p.add_argument("--out", required=True, type=_predictions_path,
                   help="where to write the predictions: *.parquet or *.csv for tables (a 'prediction' "
                        "column, plus --keep columns), *.nc or *.zarr for grids")
    p.add_argument("--keep", default="", help="comma-separated input columns copied next to the predictions")
    _cluster_arguments(p)


@contextlib.contextmanager
def _client(args):
    from distributed import Client, LocalCluster

    with _quiet_distributed():
        if args.scheduler:
            try:
                client = Client(args.scheduler, timeout="10s")
            except OSError as err:
                raise CommandError(f"cannot reach the scheduler at {args.scheduler}: {err}") from err
            with client:
                yield client
        else:
            with LocalCluster(n_workers=max(1, args.workers), threads_per_worker=1,
                              dashboard_address=":0") as cluster, Client(cluster) as client:
                yield client


def _is_grid(path):
    return path.rstrip("/").lower().endswith(_GRIDS)


def _read_table(path):
    import dask.dataframe as dd

    if path.rstrip("/").lower().endswith(".csv"):
        return dd.read_csv(path)
    return dd.read_parquet(path)


def _read_grid(path):
    import xarray as xr

    if path.rstrip("/").lower().endswith(".zarr"):
        return xr.open_zarr(path)
    return xr.open_dataset(path, chunks={})


def _columns(spec, available, what):
    names = [c.strip() for c in spec.split(",") if c.strip()]
    missing = [c for c in names if c not in available]
    if missing:
        raise CommandError(f"{what} {missing} not in the data; it has {sorted(map(str, available))}")
    return names


def _build(cls, **kwargs):
    """``cls(**kwargs)``; an unknown parameter is a usage error (exit status 2)."""
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise UsageError(f"--param: {err}; see the parameters of dask_dgd.{cls.__name__}") from err


#: Estimator parameters the command sets itself (from its flags), never --param.
_RESERVED = ("client", "features", "target", "user_col", "item_col", "rating_col", "model")


def run_train(args):
    """``dask-dgd train``: read, fit on the cluster, save."""
    import dask_dgd

    cls_name, kind = MODELS[args.model]
    params = dict(args.param)
    reserved = sorted(set(params) & set(_RESERVED))
    if reserved:
        raise UsageError(f"--param {reserved[0]}=... is set by the command (use its flags: --model, --target, "
                         "--features, --user-col, --item-col, --scheduler)")
    if args.model.startswith("climate-"):
        params["model"] = args.model.split("-", 1)[1]
    grid = _is_grid(args.data)
    if kind != "table" and (kind == "grid") != grid:
        raise CommandError(f"--model {args.model} needs {'gridded' if kind == 'grid' else 'tabular'} data; "
                           f"{args.data} is {'gridded' if grid else 'a table'}")
    with _client(args) as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cls = getattr(dask_dgd, cls_name)
        if kind == "grid":
            ds = _read_grid(args.data)
            if not args.features:
                raise CommandError("--features is required for gridded data (the predictor variables)")
            features = _columns(args.features, ds.data_vars, "--features")
            _columns(args.target, ds.data_vars, "--target")
            est = _build(cls, features=features, target=args.target, client=client, **params).fit(ds)
        elif kind == "ratings":
            frame = _read_table(args.data)
            _columns(",".join([args.user_col, args.item_col, args.target]), frame.columns, "columns")
            est = _build(cls, user_col=args.user_col, item_col=args.item_col, rating_col=args.target,
                         client=client, **params).fit(frame[[args.user_col, args.item_col, args.target]])
        else:
            if grid:  # a gridded file as a table: one row per grid point, incomplete rows dropped
                frame = _read_grid(args.data).to_dask_dataframe().dropna()
            else:
                frame = _read_table(args.data)
            _columns(args.target, frame.columns, "--target")
            features = (_columns(args.features, frame.columns, "--features") if args.features
                        else [c for c in frame.columns if c != args.target])
            est = _build(cls, client=client, **params).fit(frame[features], frame[args.target])
        est.set_params(client=None)
        path = est.save(args.out)
    for w in caught:
        if issubclass(w.category, dask_dgd.ConvergenceWarning):
            print(f"warning: {' '.join(str(w.message).split())}")
    loss = est.history_["loss"].iloc[-1] if len(getattr(est, "history_", [])) else float("nan")
    print(f"trained {cls_name} ({args.model}) on {args.data}: n_iter={est.n_iter_}, final objective {loss:.6g}")
    print(f"saved to {path}")
    return 0


def run_predict(args):
    """``dask-dgd predict``: load, read, predict, write."""
    import dask_dgd

    try:
        est = dask_dgd.load(args.model)
    except dask_dgd.CheckpointError as err:
        raise CommandError(str(err)) from err
    name = type(est).__name__
    out_grid = _is_grid(args.out)
    with _client(args) as client:
        if name == "ClimateRegressor":
            if not out_grid:
                raise CommandError("a climate model writes gridded predictions: name --out *.nc or *.zarr")
            est.set_params(client=client)
            pred = est.predict(_read_grid(args.data)).to_dataset()
            (pred.to_zarr(args.out, mode="w") if args.out.rstrip("/").endswith(".zarr")
             else pred.to_netcdf(args.out))
            print(f"wrote {pred[est.target].size} predictions on the grid to {args.out}")
            return 0
        if out_grid:
            raise CommandError(f"a {name} writes a table: name --out *.parquet or *.csv")
        frame = _read_grid(args.data).to_dask_dataframe() if _is_grid(args.data) else _read_table(args.data)
        keep = _columns(args.keep, frame.columns, "--keep") if args.keep else []
        if name in ("MatrixFactorization", "ImplicitMatrixFactorization"):
            cols = _columns(f"{est.user_col},{est.item_col}", frame.columns, "the model's id columns")
            pdf = frame[cols + [c for c in keep if c not in cols]].compute()
            result = pdf[keep].copy() if keep else pdf[[]].copy()
            result["prediction"] = est.predict(pdf[cols])
            _write_table(result.reset_index(drop=True), args.out)
            print(f"wrote {len(result)} predictions to {args.out}")
            return 0
        features = list(getattr(est, "feature_names_in_", []))
        if not features:
            raise CommandError(f"the {name} in {args.model} was not trained on named columns")
        _columns(",".join(features), frame.columns, "the model's features")
        est.set_params(client=client)
        import dask

        # the predictions and the kept columns, partition by partition in the same order
        pred, kept = dask.compute(est.predict(frame[features]), frame[keep] if keep else None)
        result = kept.reset_index(drop=True) if keep else pd.DataFrame(index=range(len(pred)))
        result["prediction"] = pred
        _write_table(result, args.out)
        print(f"wrote {len(result)} predictions to {args.out}")
    return 0


def _write_table(pdf, path):
    if path.lower().endswith(".csv"):
        pdf.to_csv(path, index=False)
    else:
        pdf.to_parquet(path, index=False)

"""``dask-dgd train`` and ``dask-dgd predict``: fit from files, save, predict to files.

Each command checks what it can before it reads any data: ``--out`` (a file in a
folder that can be written to, neither an input file nor, without ``--overwrite``, an
existing file), the columns named on the command line (``--target``, ``--features``,
``--user-col``, ``--item-col``, ``--keep``) and those a saved model needs against the
file's header (CSV, read with :mod:`csv`) or schema
(Parquet, read with pyarrow; NetCDF and Zarr, opened lazily with xarray), and the
``--param`` values against the estimator's constraints.  Only then does it read the data
and start or reach a cluster.

Tables (Parquet, CSV) of at most :data:`SMALL_INPUT_BYTES` on disk are read into memory
with pandas, larger ones lazily with dask.dataframe; gridded data (NetCDF, Zarr) with
xarray.  Training runs on ``--scheduler ADDRESS`` (an existing cluster, e.g. ``dask
scheduler`` + ``dask worker``), on a LocalCluster of ``--workers`` processes started for
the command, or, when neither is given, with ``client=None``: small in-memory input is
fitted in this process and larger input on dask_dgd's embedded cluster (see the user
guide, "Which cluster is used").  Predictions need no cluster; they are computed in this
process unless ``--scheduler`` or ``--workers`` is given.  The model is saved in dask_dgd's
safe format (``est.save``) and loaded by ``predict`` with :func:`dask_dgd.load`.

This module imports only the standard library when loaded; pandas, dask, xarray and the
estimators are imported by :func:`run_train` and :func:`run_predict`.
"""

import argparse
import ast
import contextlib
import csv
import logging
import math
import os
import tempfile
import warnings

from ._common import CommandError, UsageError, _int_at_least, _quiet_distributed

__all__ = ["MODELS", "SMALL_INPUT_BYTES", "train_arguments", "predict_arguments", "run_train", "run_predict"]

#: --model name -> (estimator class name in dask_dgd, kind of data)
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

#: Tables up to this many bytes on disk are read into memory (pandas), larger ones lazily (dask).
SMALL_INPUT_BYTES = 32 * 2**20

#: Column names shown in an error message, at most.
_SHOWN_COLUMNS = 20


# ----------------------------------------------------------------------- argument types
def _suffix_of(path):
    return path.rstrip("/").lower()


def _existing_path(text):
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no such file or directory: {text!r}")
    if not _suffix_of(text).endswith(_TABLES + _GRIDS):
        raise argparse.ArgumentTypeError(
            f"cannot tell the format of {text!r}: name it *.parquet, *.csv, *.nc or *.zarr"
        )
    return text


def _model_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such model file: {text!r}")
    return text


def _output_path(text):
    """A path the command can write to: not empty, not a directory (but a Zarr store), in
    an existing folder that can be written to.  Whether it exists is checked by
    :func:`_check_out` (it depends on ``--overwrite`` and the input files)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, got {text!r}")
    zarr = _suffix_of(text).endswith(".zarr")
    if not zarr and os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name a file")
    if not zarr and text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} ends with {text[-1]!r}: it names a directory; name a file")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.exists(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r}, {folder}, is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write to the folder of {text!r}, {folder}: permission denied")
    _probe_folder(text, folder)
    return text


def _probe_folder(text, folder):
    """Create and remove an empty file in ``folder``: a special file system (``/proc``,
    ``/sys``), a read-only mount or one that is full refuses files even where
    :func:`os.access` (as root, it always says yes) allows them, and the command would
    otherwise find out only when it saves, after reading and training."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dask-dgd-probe-", dir=folder)
    except OSError as err:
        raise argparse.ArgumentTypeError(
            f"cannot create a file in the folder of {text!r}, {folder} ({err.strerror or err}); "
            "name a file in a folder that can be written to"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _model_path(text):
    text = _output_path(text)
    if not text.lower().endswith(".npz"):
        raise argparse.ArgumentTypeError(
            f"the model is saved in dask_dgd's format, a NumPy .npz file: name it *.npz, got {text!r}"
        )
    return text


def _predictions_path(text):
    text = _output_path(text)
    if not _suffix_of(text).endswith(_TABLES + _GRIDS):
        raise argparse.ArgumentTypeError(
            f"cannot tell the format of {text!r}: name it *.parquet, *.csv (tables), *.nc or *.zarr (grids)"
        )
    return text


def _is_inside(path, folder):
    """Whether ``path`` is ``folder`` or lies under it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _check_out(args, inputs):
    """Refuse an ``--out`` that is one of the ``inputs`` (``(what, path)`` pairs) or lies
    in an input folder (a Parquet dataset, a Zarr store), even with ``--overwrite``, and
    an existing ``--out`` without ``--overwrite``: usage errors, found before any data is
    read, so that no input and no earlier result is replaced by mistake."""
    for what, path in inputs:
        if os.path.exists(args.out) and os.path.samefile(args.out, path):
            raise UsageError(f"--out {args.out} is the {what} file {path}: writing there would replace it; "
                             "name another file")
        if os.path.isdir(path) and _is_inside(args.out, path):
            raise UsageError(f"--out {args.out} is inside the {what} folder {path}: writing there would change "
                             "it; name a file outside it")
    if os.path.lexists(args.out) and not args.overwrite:
        raise UsageError(f"--out {args.out} exists; pass --overwrite to replace it, or name another file")


def _param(text):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. tol=1e-6), got {text!r}")
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass  # a bare word: a string (e.g. optimizer=adam)
    return key, value


def _overwrite_argument(p):
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out if it exists (without it an existing --out is refused; an input file "
                        "is never replaced)")


def _cluster_arguments(p, what):
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help=f"{what} on the cluster of a running Dask scheduler (e.g. tcp://10.0.0.5:8786)")
    where.add_argument("--workers", type=_int_at_least(1), metavar="N",
                       help=f"{what} on a LocalCluster of N worker processes started for the command "
                            "(default: no cluster for small input; see above)")


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
    p.add_argument("--out", required=True, type=_model_path,
                   help="where to save the model: a *.npz file (NumPy archive with JSON metadata)")
    p.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                   help="an estimator parameter, repeatable (e.g. --param solver=gd --param max_iter=50 "
                        "--param optimizer=adam); values are Python literals or bare words")
    _overwrite_argument(p)
    _cluster_arguments(p, "train")


def predict_arguments(p):
    p.add_argument("model", type=_model_file, help="a model saved by 'dask-dgd train' (*.npz)")
    p.add_argument("data", type=_existing_path, help="data to predict on: *.parquet, *.csv, *.nc or *.zarr")
    p.add_argument("--out", required=True, type=_predictions_path,
                   help="where to write the predictions: *.parquet or *.csv for tables (a 'prediction' "
                        "column, plus --keep columns), *.nc or *.zarr for grids")
    p.add_argument("--keep", default="", help="comma-separated input columns copied next to the predictions")
    _overwrite_argument(p)
    _cluster_arguments(p, "predict")


# -------------------------------------------------------------------- the file's columns
def _is_grid(path):
    return _suffix_of(path).endswith(_GRIDS)


def _is_csv(path):
    return _suffix_of(path).endswith(".csv")


def _csv_columns(path):
    """The header of a CSV file; a file without a data row is refused."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            has_rows = any(any(cell.strip() for cell in row) for row in reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise CommandError(f"cannot read the header of {path}: {err}") from err
    if not header:
        raise CommandError(f"{path} is empty: expected a header line and rows")
    if not has_rows:
        raise CommandError(f"{path} has no rows, only a header line")
    return header


def _parquet_columns(path):
    """The columns of a Parquet file or folder, from its schema (pandas' index columns left out)."""
    import pyarrow.dataset

    try:
        dataset = pyarrow.dataset.dataset(path, format="parquet")
        schema, n_rows = dataset.schema, dataset.count_rows()
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise CommandError(f"cannot read the schema of {path}: {' '.join(str(err).split())}") from err
    if n_rows == 0:
        raise CommandError(f"{path} has no rows")
    index = [c for c in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)]
    return [name for name in schema.names if name not in index]


def _open_grid(path):
    import xarray as xr

    try:
        if _suffix_of(path).endswith(".zarr"):
            return xr.open_zarr(path)
        return xr.open_dataset(path, chunks={})
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot open {path}: {' '.join(str(err).split())}") from err


def _table_columns(path):
    """The column names of a table file (read from its header or schema only), or of a
    gridded file read as a table (one row per grid point)."""
    if _is_grid(path):
        return list(_open_grid(path).to_dask_dataframe().columns)
    return _csv_columns(path) if _is_csv(path) else _parquet_columns(path)


def _shown(names):
    names = [str(n) for n in names]
    more = f", ... ({len(names)} in all)" if len(names) > _SHOWN_COLUMNS else ""
    return ", ".join(names[:_SHOWN_COLUMNS]) + more


def _missing(names, available, path, noun="column"):
    """The sentence that ``path`` lacks ``names``, or None when it has them all."""
    absent = [n for n in names if n not in available]
    if not absent:
        return None
    plural = "s" if len(absent) > 1 else ""
    quoted = ", ".join(repr(n) for n in absent)
    return f"{path} has no {noun}{plural} {quoted}; its {noun}s: {_shown(available)}"


def _named(option, spec, available, path, noun="column"):
    """The names listed in ``spec`` (comma-separated, given as ``option``); a name the file
    lacks is a usage error."""
    names = [c.strip() for c in spec.split(",") if c.strip()]
    if not names:
        raise UsageError(f"{option}: expected comma-separated {noun} names, got {spec!r}")
    problem = _missing(names, available, path, noun)
    if problem:
        raise UsageError(f"{option}: {problem}")
    return names


# ------------------------------------------------------------------------ reading data
def _input_bytes(path):
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def _is_small(path):
    return _input_bytes(path) <= SMALL_INPUT_BYTES


def _read_table(path, columns, in_memory):
    """``columns`` of a table file: a pandas DataFrame when ``in_memory``, else a dask one."""
    if _is_grid(path):
        frame = _open_grid(path).to_dask_dataframe()[columns].dropna()  # incomplete grid points dropped
        return frame.compute() if in_memory else frame
    if not in_memory:
        import dask.dataframe as dd

        return dd.read_csv(path, usecols=columns) if _is_csv(path) else dd.read_parquet(path, columns=columns)
    import pandas as pd

    try:
        return pd.read_csv(path, usecols=columns) if _is_csv(path) else pd.read_parquet(path, columns=columns)
    except (OSError, ValueError) as err:  # pandas' ParserError is a ValueError
        raise CommandError(f"cannot read {path}: {' '.join(str(err).split())}") from err


# -------------------------------------------------------------------------- the cluster
def _wants_cluster(args):
    return bool(args.scheduler) or args.workers is not None


@contextlib.contextmanager
def _client(args):
    """The client of ``--scheduler`` or of a LocalCluster of ``--workers``; None (no
    cluster) when neither was given."""
    if not _wants_cluster(args):
        yield None
        return
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
            # silence_logs: also the workers' (a data error would print their "Compute
            # Failed" report before the command's one line)
            with LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0",
                              silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
                yield client


@contextlib.contextmanager
def _library_errors():
    """dask_dgd's errors as the command's: a bad estimator parameter (only --param sets
    them) is a usage error, any other (bad data, a cluster that cannot run) exit status 1."""
    from ..exceptions import DGDError, ParameterError

    try:
        yield
    except ParameterError as err:
        raise UsageError(f"--param: {err}") from err
    except DGDError as err:
        raise CommandError(str(err)) from err


# ------------------------------------------------------------------------------- train
#: Estimator parameters the command sets itself (from its flags), never --param.
_RESERVED = ("client", "features", "target", "user_col", "item_col", "rating_col", "model")


def _user_params(args):
    params = dict(args.param)
    reserved = sorted(set(params) & set(_RESERVED))
    if reserved:
        raise UsageError(f"--param {reserved[0]}=... is set by the command (use its flags: --model, --target, "
                         "--features, --user-col, --item-col, --scheduler)")
    return params


def _check_data_kind(args, kind):
    grid = _is_grid(args.data)
    if kind != "table" and (kind == "grid") != grid:
        raise UsageError(f"--model {args.model} needs {'gridded' if kind == 'grid' else 'tabular'} data; "
                         f"{args.data} is {'gridded' if grid else 'a table'}")
    if kind == "grid" and not args.features:
        raise UsageError("--features is required for gridded data (the predictor variables)")


def _train_columns(args, kind):
    """The estimator's column arguments and the columns to read, checked against the file."""
    if kind == "grid":
        names = list(_open_grid(args.data).data_vars)
        target = _named("--target", args.target, names, args.data, "variable")[0]
        features = _named("--features", args.features, names, args.data, "variable")
        return {"features": features, "target": target}, None
    names = _table_columns(args.data)
    if kind == "ratings":
        cols = {"user_col": _named("--user-col", args.user_col, names, args.data)[0],
                "item_col": _named("--item-col", args.item_col, names, args.data)[0],
                "rating_col": _named("--target", args.target, names, args.data)[0]}
        return cols, list(cols.values())
    target = _named("--target", args.target, names, args.data)[0]
    features = (_named("--features", args.features, names, args.data) if args.features
                else [c for c in names if c != target])
    if not features:
        raise CommandError(f"{args.data} has no column besides the target {target!r}: nothing to train on")
    return {"features": features, "target": target}, list(dict.fromkeys([*features, target]))


def _estimator(cls_name, params, user_params):
    """``dask_dgd.<cls_name>(**params, **user_params)`` with its parameters checked; an
    unknown or bad ``--param`` is a usage error."""
    import inspect

    import dask_dgd

    from .._validation import validate_params

    cls = getattr(dask_dgd, cls_name)
    known = [name for name in inspect.signature(cls).parameters if name not in _RESERVED]
    unknown = sorted(set(user_params) - set(known))
    if unknown:
        raise UsageError(f"--param {unknown[0]}: {cls_name} has no parameter {unknown[0]!r}; "
                         f"its parameters: {', '.join(sorted(known))}")
    est = cls(**params, **user_params)
    with _library_errors():
        validate_params(est)
    return est


def _check_numeric(frame, features, path):
    """A feature column that does not hold numbers (as read: pandas' or dask's dtypes) is a data error."""
    from pandas.api.types import is_numeric_dtype

    bad = [c for c in features if not is_numeric_dtype(frame[c].dtype)]
    if bad:
        dtypes = ", ".join(f"{c!r} (dtype {frame[c].dtype})" for c in bad)
        verb = "are" if len(bad) > 1 else "is"
        raise CommandError(f"{path}: feature column{'s' if len(bad) > 1 else ''} {dtypes} {verb} not numeric; "
                           "leave it out with --features, or encode it as numbers first (categories such as "
                           "Yes/No as one-hot 0/1 columns, e.g. with pandas.get_dummies)")


def _fit(est, kind, args, roles, columns, client):
    """Read the data and fit ``est`` on it (in memory when the input is small and no cluster was asked for)."""
    if kind == "grid":
        ds = _open_grid(args.data)
        return est.fit(ds.load() if client is None and _is_small(args.data) else ds)
    frame = _read_table(args.data, columns, in_memory=client is None and _is_small(args.data))
    if kind == "ratings":
        return est.fit(frame[columns])
    _check_numeric(frame, roles["features"], args.data)
    return est.fit(frame[roles["features"]], frame[roles["target"]])


def _summary(est, cls_name, args):
    history = getattr(est, "history_", None)
    if history is not None and len(history) and "loss" in history and math.isfinite(history["loss"].iloc[-1]):
        how = f"n_iter={est.n_iter_}, final objective {history['loss'].iloc[-1]:.6g}"
    elif getattr(est, "family", "gaussian") != "gaussian":  # climate-pointwise GLMs stopped after their start
        how = f"n_iter={est.n_iter_} Newton passes over the grid (every cell converged or warned)"
    else:  # e.g. climate-pointwise: least squares solved cell by cell in one pass
        how = f"n_iter={est.n_iter_}, solved in one pass (no training objective to report)"
    return f"trained {cls_name} ({args.model}) on {args.data}: {how}"


def run_train(args):
    """``dask-dgd train``: check --out and the command line against the file, read, fit, save."""
    _check_out(args, [("data", args.data)])
    cls_name, kind = MODELS[args.model]
    user_params = _user_params(args)
    _check_data_kind(args, kind)
    roles, columns = _train_columns(args, kind)
    if kind == "grid":
        roles["model"] = args.model.split("-", 1)[1]
    est = _estimator(cls_name, {} if kind == "table" else roles, user_params)
    from ..exceptions import ConvergenceWarning

    with _client(args) as client, _library_errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.set_params(client=client)
        _fit(est, kind, args, roles, columns, client)
        est.set_params(client=None)
        path = est.save(args.out)
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            print(f"warning: {' '.join(str(w.message).split())}")
    print(_summary(est, cls_name, args))
    print(f"saved to {path}")
    return 0


# ----------------------------------------------------------------------------- predict
_RECOMMENDERS = ("MatrixFactorization", "ImplicitMatrixFactorization")


def _load_model(path):
    import dask_dgd

    try:
        return dask_dgd.load(path)
    except dask_dgd.CheckpointError as err:
        raise CommandError(str(err)) from err


def _model_columns(est, name, model_path):
    """The columns a tabular model predicts from."""
    if name in _RECOMMENDERS:
        return [est.user_col, est.item_col]
    features = [str(f) for f in getattr(est, "feature_names_in_", [])]
    if not features:
        raise CommandError(f"the {name} in {model_path} was not trained on named columns")
    return features


def _predict_grid(est, args, client):
    ds = _open_grid(args.data)
    problem = _missing(list(est.spec_.features), list(ds.data_vars), args.data, "variable")
    if problem:
        raise CommandError(f"{problem} (the model's features)")
    est.set_params(client=client)
    with _library_errors():
        pred = est.predict(ds.load() if client is None and _is_small(args.data) else ds).to_dataset()
    (pred.to_zarr(args.out, mode="w") if _suffix_of(args.out).endswith(".zarr") else pred.to_netcdf(args.out))
    return pred[est.target].size


def _predict_table(est, name, args, client):
    features = _model_columns(est, name, args.model)
    names = _table_columns(args.data)
    keep = _named("--keep", args.keep, names, args.data) if args.keep else []
    problem = _missing(features, names, args.data)
    if problem:
        raise CommandError(f"{problem} (the {name} in {args.model} needs {_shown(features)})")
    columns = features + [c for c in keep if c not in features]
    frame = _read_table(args.data, columns, in_memory=client is None and _is_small(args.data))
    est.set_params(client=client)
    import dask
    import pandas as pd

    with _library_errors():
        if name in _RECOMMENDERS:  # predicts on pandas rows
            frame = frame.compute() if dask.is_dask_collection(frame) else frame
        if dask.is_dask_collection(frame):
            # one dask DataFrame computation: the predictions as a column next to the
            # kept columns, partition by partition (computing a dask array beside the
            # frame would mix graph kinds, which dask warns about on stderr)
            dtype = est.classes_.dtype if hasattr(est, "classes_") else "float64"
            meta = pd.Series([], name="prediction", dtype=dtype)  # inferring it would predict on made-up rows
            pred = frame[features].map_partitions(_predict_partition, est, meta=meta)
            result = (frame[keep].assign(prediction=pred) if keep else pred.to_frame()).compute()
            result = result.reset_index(drop=True)
        else:
            result = frame[keep].reset_index(drop=True) if keep else pd.DataFrame(index=range(len(frame)))
            result["prediction"] = est.predict(frame[features])
    _write_table(result, args.out)
    return len(result)


def _predict_partition(part, est):
    """``est``'s predictions for a pandas partition, as a Series on its index."""
    import pandas as pd

    return pd.Series(est.predict(part), index=part.index, name="prediction")


def run_predict(args):
    """``dask-dgd predict``: check --out and --keep, load the model, check the file's
    columns, read, predict, write."""
    _check_out(args, [("model", args.model), ("data", args.data)])
    grid_out = _is_grid(args.out)
    if grid_out and args.keep:
        raise UsageError("--keep copies input columns into a table of predictions; --out names a grid")
    if args.keep:
        _named("--keep", args.keep, _table_columns(args.data), args.data)
    est = _load_model(args.model)
    name = type(est).__name__
    grid_model = name == "ClimateRegressor"
    if grid_model and not grid_out:
        raise UsageError("a climate model writes gridded predictions: name --out *.nc or *.zarr")
    if grid_out and not grid_model:
        raise UsageError(f"a {name} writes a table: name --out *.parquet or *.csv")
    with _client(args) as client:
        if grid_model:
            print(f"wrote {_predict_grid(est, args, client)} predictions on the grid to {args.out}")
        else:
            print(f"wrote {_predict_table(est, name, args, client)} predictions to {args.out}")
    return 0


def _write_table(pdf, path):
    if _is_csv(path):
        pdf.to_csv(path, index=False)
    else:
        pdf.to_parquet(path, index=False)

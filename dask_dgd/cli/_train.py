"""``dask-dgd train`` and ``dask-dgd predict``: fit from files, save, predict to files.

Each command checks what it can before it reads any data: ``--out`` (a file in a
folder that can be written to, neither an input file nor, without ``--overwrite``, an
existing file), the columns named on the command line (``--target``, ``--features``,
``--user-col``, ``--item-col``, ``--keep``) and those a saved model needs against the
file's header (CSV, read with :mod:`csv`) or schema
(Parquet, read with pyarrow; NetCDF and Zarr, opened lazily with xarray), and the
``--param`` values against the estimator's constraints (first, from
:mod:`._models`' copy of them, without importing the estimators).  Only then does it read
the data and start or reach a cluster.

``--model NAME`` is a row of :data:`~._models.MODELS` (the class and its kind); what the
command does with the model follows from the kind, never from the name: the data it
reads, ``--sample-weight``, ``--table`` (``coef_table``), ``predict --proba`` (the
classifiers) and the summary's training score.

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
import time
import warnings

from ._common import CommandError, UsageError, _int_at_least, _quiet_distributed
from ._models import MODELS, RESERVED, check_params, model_names

__all__ = ["MODELS", "SMALL_INPUT_BYTES", "train_arguments", "predict_arguments", "run_train", "run_predict"]

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


def _check_out(args, inputs, outputs=None):
    """Refuse an ``--out`` (or another of the ``outputs``, ``(option, path)`` pairs) that
    is one of the ``inputs`` (``(what, path)`` pairs) or lies in an input folder (a
    Parquet dataset, a Zarr store), even with ``--overwrite``, and an existing one without
    ``--overwrite``: usage errors, found before any data is read, so that no input and no
    earlier result is replaced by mistake.  Two outputs may not name one file."""
    outputs = outputs or [("--out", args.out)]
    for option, out in outputs:
        for what, path in inputs:
            if os.path.exists(out) and os.path.samefile(out, path):
                raise UsageError(f"{option} {out} is the {what} file {path}: writing there would replace it; "
                                 "name another file")
            if os.path.isdir(path) and _is_inside(out, path):
                raise UsageError(f"{option} {out} is inside the {what} folder {path}: writing there would change "
                                 "it; name a file outside it")
        if os.path.lexists(out) and not args.overwrite:
            raise UsageError(f"{option} {out} exists; pass --overwrite to replace it, or name another file")
    for (option, out), (other, path) in zip(outputs, outputs[1:]):
        if os.path.abspath(out) == os.path.abspath(path):
            raise UsageError(f"{other} {path} is also {option}: name two files")


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


def _coef_table_path(text):
    """``--table``'s file: a CSV file that can be written (``-``: print the table)."""
    if text == "-":
        return text
    if not text.lower().endswith(".csv"):
        raise argparse.ArgumentTypeError(f"the coefficient table is written as CSV: name it *.csv, got {text!r}")
    return _output_path(text)


def train_arguments(p):
    p.add_argument("data", type=_existing_path, help="training data: *.parquet, *.csv, *.nc or *.zarr")
    p.add_argument("--model", required=True, choices=list(MODELS), metavar="NAME",
                   help="what to train: one of the models listed below")
    p.add_argument("--target", required=True,
                   help="the target column (tables) or variable (grids); for mf/implicit-mf the "
                        "rating (strength) column")
    p.add_argument("--features", help="comma-separated feature columns or variables "
                                      "(default: every column but the target and --sample-weight; required for "
                                      "grids)")
    p.add_argument("--sample-weight", metavar="COLUMN",
                   help="tables: the column of row weights, passed to fit as sample_weight (binomial, "
                        "binomial-cv: the number of trials, with the target the share of successes)")
    p.add_argument("--user-col", default="user", help="mf/implicit-mf: the user id column")
    p.add_argument("--item-col", default="item", help="mf/implicit-mf: the item id column")
    p.add_argument("--out", required=True, type=_model_path,
                   help="where to save the model: a *.npz file (NumPy archive with JSON metadata)")
    p.add_argument("--table", type=_coef_table_path, nargs="?", const="-", metavar="CSV",
                   help="regressors and classifiers: after training, print the fitted model's coef_table "
                        "(estimates, standard errors, z, p-values and 95%% intervals, on the training rows; "
                        "needs an unpenalised fit, --param alpha=0), or write it to the *.csv file CSV")
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
    p.add_argument("--proba", action="store_true",
                   help="classifiers: also write the probability of each class, a column 'proba_<class>' per "
                        "class (predict_proba), next to the predicted label")
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
    from distributed import Client

    from .._engine.runtime.clusters import local_cluster

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
            with local_cluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0",
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
def _user_params(args, spec):
    """The ``--param`` values, checked against the estimator's names and constraints
    without importing it (:func:`~._models.check_params`)."""
    params = dict(args.param)
    reserved = sorted(set(params) & (set(RESERVED) | set(spec.fixed)))
    if reserved:
        raise UsageError(f"--param {reserved[0]}=... is set by the command (use its flags: --model, --target, "
                         "--features, --user-col, --item-col, --scheduler)")
    check_params(spec, params)
    return params


def _check_options(args, spec):
    """The options that only some kinds of model take, checked before any data is read."""
    grid = _is_grid(args.data)
    if spec.data != "table" and (spec.data == "grid") != grid:
        raise UsageError(f"--model {args.model} needs {'gridded' if spec.data == 'grid' else 'tabular'} data; "
                         f"{args.data} is {'gridded' if grid else 'a table'}")
    if spec.data == "grid" and not args.features:
        raise UsageError("--features is required for gridded data (the predictor variables)")
    if args.table and not spec.coef_table:
        with_table = ", ".join(name for name, other in MODELS.items() if other.coef_table)
        raise UsageError(f"--table: a {spec.cls} ({args.model}) has no coef_table; the models with one: "
                         f"{with_table}")
    if args.sample_weight and spec.data != "table":
        raise UsageError(f"--sample-weight: a {spec.cls} ({args.model}) takes no row weights; it is for the "
                         "regressors and classifiers")


def _train_columns(args, spec):
    """The estimator's column arguments and the columns to read, checked against the file."""
    if spec.data == "grid":
        names = list(_open_grid(args.data).data_vars)
        target = _named("--target", args.target, names, args.data, "variable")[0]
        features = _named("--features", args.features, names, args.data, "variable")
        return {"features": features, "target": target}, None
    names = _table_columns(args.data)
    if spec.data == "ratings":
        cols = {"user_col": _named("--user-col", args.user_col, names, args.data)[0],
                "item_col": _named("--item-col", args.item_col, names, args.data)[0],
                "rating_col": _named("--target", args.target, names, args.data)[0]}
        return cols, list(cols.values())
    target = _named("--target", args.target, names, args.data)[0]
    weight = _named("--sample-weight", args.sample_weight, names, args.data)[0] if args.sample_weight else None
    if weight == target:
        raise UsageError(f"--sample-weight {weight} is the target column; name the column of row weights")
    features = (_named("--features", args.features, names, args.data) if args.features
                else [c for c in names if c not in (target, weight)])
    if weight in features:
        raise UsageError(f"--sample-weight {weight} is also a feature (--features); leave it out of --features")
    if not features:
        raise CommandError(f"{args.data} has no column besides the target {target!r}: nothing to train on")
    roles = {"features": features, "target": target, "sample_weight": weight}
    return roles, list(dict.fromkeys([*features, target, *([weight] if weight else [])]))


def _estimator(spec, params, user_params):
    """``dask_dgd.<spec.cls>(**params, **user_params)``, its parameters checked by the
    estimator itself too (a predicate :func:`~._models.check_params` cannot evaluate, or a
    check across parameters): a bad ``--param`` is a usage error."""
    import dask_dgd

    from .._validation import validate_params

    est = getattr(dask_dgd, spec.cls)(**spec.fixed, **params, **user_params)
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


def _fit(est, spec, args, roles, columns, client):
    """Read the data and fit ``est`` on it (in memory when the input is small and no
    cluster was asked for); the training arguments ``(X, y, sample_weight)`` of a
    tabular model (for its score and coef_table), else None."""
    if spec.data == "grid":
        ds = _open_grid(args.data)
        est.fit(ds.load() if client is None and _is_small(args.data) else ds)
        return None
    frame = _read_table(args.data, columns, in_memory=client is None and _is_small(args.data))
    if spec.data == "ratings":
        est.fit(frame[columns])
        return None
    _check_numeric(frame, roles["features"], args.data)
    weight = frame[roles["sample_weight"]] if roles["sample_weight"] else None
    data = (frame[roles["features"]], frame[roles["target"]], weight)
    est.fit(*data[:2], sample_weight=weight)
    return data


def _summary(est, spec, args, score):
    """What the command prints after training: the iterations, the training score by name
    (R², D², accuracy) and the final objective with what it is."""
    history = getattr(est, "history_", None)
    how = f"n_iter={est.n_iter_}"
    if score is not None:
        how += f", {spec.score_name} on the training rows {score:.4g}"
    if history is not None and len(history) and "loss" in history and math.isfinite(history["loss"].iloc[-1]):
        how += (f", final objective {history['loss'].iloc[-1]:.6g} (the penalised mean training loss as "
                "minimised, terms in y alone left out)")
    elif spec.kind == "climate" and getattr(est, "family", "gaussian") != "gaussian":
        how += " Newton passes over the grid (every cell converged or warned)"
    elif spec.kind == "climate":  # least squares solved cell by cell in one pass
        how += ", solved in one pass (no training objective to report)"
    return f"trained {spec.cls} ({args.model}) on {args.data}: {how}"


def _training_score(est, data):
    """The model's own ``score`` on the training rows (R², D² or accuracy), or None."""
    if data is None:
        return None
    X, y, weight = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(est.score(X, y, sample_weight=weight))


def _coef_table(est, data):
    """The fitted model's ``coef_table`` on the training rows."""
    X, y, weight = data
    return est.coef_table(X, y, sample_weight=weight)


def _write_coef_table(table, target):
    """Print ``table`` (``target`` "-") or write it as CSV."""
    if target == "-":
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.width", 120):
            print(table.to_string(float_format=lambda v: f"{v:.6g}"))
    else:
        table.to_csv(target, index_label="term")
        print(f"wrote the coefficient table to {target}")


def _small_input_note(args, start_s, fit_s):
    """Why ``--workers`` made a small input slow: the cluster's start and the workers'
    first imports (scikit-learn, dask_dgd, its compiled kernels: 10 to 15 s of a 24 s run
    on 10,000 rows, 2 workers on 2 busy cores), which a fit in this process skips."""
    size = _input_bytes(args.data) / 2**20
    return (f"note: starting the LocalCluster of {args.workers} worker{'s' if args.workers > 1 else ''} took "
            f"{start_s:.1f} s and the fit {fit_s:.1f} s, which includes each worker's first import of dask_dgd and "
            f"its kernels (several seconds); {args.data} ({size:.1f} MiB) is small enough to be fitted in this "
            "process: leave out --workers to skip both")


def run_train(args):
    """``dask-dgd train``: check --out, --param and the command line against the file,
    read, fit, save (and print or write the coefficient table)."""
    table_out = [("--table", args.table)] if args.table and args.table != "-" else []
    _check_out(args, [("data", args.data)], [("--out", args.out), *table_out])
    spec = MODELS[args.model]
    user_params = _user_params(args, spec)
    _check_options(args, spec)
    roles, columns = _train_columns(args, spec)
    est = _estimator(spec, {} if spec.data == "table" else roles, user_params)
    alpha, C = est.get_params().get("alpha"), est.get_params().get("C")
    if args.table and C is not None and C != float("inf"):
        raise UsageError(f"--table: coef_table's standard errors are those of an unpenalised fit, and this "
                         f"{spec.cls} has C={C!r}; leave C out and pass --param alpha=0")
    if args.table and C is None and alpha is not None and alpha > 0:
        raise UsageError(f"--table: coef_table's standard errors are those of an unpenalised fit, and this "
                         f"{spec.cls} has alpha={alpha!r}; pass --param alpha=0")
    from ..exceptions import ConvergenceWarning

    started = time.perf_counter()
    with _client(args) as client, _library_errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.set_params(client=client)
        fitting = time.perf_counter()
        data = _fit(est, spec, args, roles, columns, client)
        fitted = time.perf_counter()
        score = _training_score(est, data)
        table = _coef_table(est, data) if args.table else None
        est.set_params(client=None)
        path = est.save(args.out)
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            print(f"warning: {' '.join(str(w.message).split())}")
    print(_summary(est, spec, args, score))
    if args.workers is not None and _is_small(args.data):
        print(_small_input_note(args, fitting - started, fitted - fitting))
    print(f"saved to {path}")
    if table is not None:
        _write_coef_table(table, args.table)
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
            # one dask DataFrame computation: the predictions as columns next to the
            # kept columns, partition by partition (computing a dask array beside the
            # frame would mix graph kinds, which dask warns about on stderr)
            meta = pd.concat([frame[keep]._meta, _predictions(None, est, args.proba)], axis=1)
            result = frame[columns].map_partitions(_kept_and_predicted, est, args.proba, features, keep,
                                                   meta=meta).compute()
            result = result.reset_index(drop=True)
        else:
            result = frame[keep].reset_index(drop=True) if keep else pd.DataFrame(index=range(len(frame)))
            result = pd.concat([result, _predictions(frame[features], est, args.proba).reset_index(drop=True)],
                               axis=1)
    _write_table(result, args.out)
    return len(result)


def _proba_columns(est):
    return [f"proba_{c}" for c in est.classes_]


def _kept_and_predicted(part, est, proba, features, keep):
    """The ``keep`` columns of a pandas partition next to ``est``'s predictions from its ``features``."""
    import pandas as pd

    return pd.concat([part[keep], _predictions(part[features], est, proba)], axis=1)


def _predictions(part, est, proba):
    """``est``'s predictions for a pandas frame, as a frame on its index: the column
    'prediction' and, with ``proba``, one 'proba_<class>' column per class; ``part``
    None: the empty frame with those columns and dtypes (dask's ``meta``)."""
    import pandas as pd

    if part is None:
        dtype = est.classes_.dtype if hasattr(est, "classes_") else "float64"
        columns = {"prediction": pd.Series([], dtype=dtype)}
        columns.update({c: pd.Series([], dtype="float64") for c in (_proba_columns(est) if proba else [])})
        return pd.DataFrame(columns)
    result = pd.DataFrame({"prediction": est.predict(part)}, index=part.index)
    if proba:
        result[_proba_columns(est)] = est.predict_proba(part)
    return result


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
    if args.proba and not hasattr(est, "predict_proba"):
        raise UsageError(f"--proba: a {name} predicts values, not class probabilities; --proba is for the "
                         f"classifiers (dask-dgd train --model {model_names('classifier').replace(', ', ' or ')})")
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

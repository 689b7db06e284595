"""Saving and loading estimators in the safe format: round trips, and files refused."""

import json
import os
import pickle
import zipfile

import numpy as np
import pytest
import xarray as xr

import dask_dgd
from dask_dgd import (
    CheckpointError,
    ImplicitMatrixFactorization,
    LinearRegression,
    LogisticRegression,
    MatrixFactorization,
    PoissonRegressor,
    optim,
)
from dask_dgd.climate import ClimateRegressor
from dask_dgd.datasets import make_ratings

rng = np.random.default_rng(0)
X = rng.standard_normal((300, 4))
Y_LABELS = np.array(["cat", "dog", "eel"])[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)]


def _grid():
    r = np.random.default_rng(1)
    time = xr.date_range("2000-01-01", periods=36, freq="MS", calendar="360_day", use_cftime=True)
    a = r.normal(size=(36, 3, 4))
    y = 280 + 1.5 * a + 0.1 * r.normal(size=a.shape)
    y[:, 0, 0] = np.nan
    return xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "tas": (("time", "lat", "lon"), y, {"units": "K"})},
        coords={"time": time, "lat": [-30.0, 0.0, 30.0], "lon": [0.0, 90.0, 180.0, 270.0]},
    ).chunk({"time": 12})


def _linear_cases():
    y_reg = X @ [1.0, -2.0, 0.5, 0.0] + 0.1 * rng.standard_normal(300)
    return [
        (LinearRegression(), y_reg),
        (LogisticRegression(solver="gd", optimizer=optim.adam(learning_rate=optim.CosineDecay(0.5, 50)),
                            compression="topk:0.5", random_state=np.random.RandomState(3), max_iter=30), Y_LABELS),
        (PoissonRegressor(solver="sgd", batch_size=64, max_iter=3, random_state=0), np.exp(0.3 * X[:, 0]).round()),
    ]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("case", range(3))
def test_linear_round_trip(tmp_path, case):
    est, y = _linear_cases()[case]
    est.fit(X, y)
    path = est.save(tmp_path / "model.npz")
    back = type(est).load(path)
    assert type(back) is type(est)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.coef_, est.coef_)
    assert back.n_iter_ == est.n_iter_
    pd_equal = back.history_.equals(est.history_)
    assert pd_equal, (back.history_.dtypes, est.history_.dtypes)
    expect = {k: v for k, v in est.get_params().items() if k != "random_state"}
    assert {k: v for k, v in back.get_params().items() if k != "random_state"} == expect
    if isinstance(est.random_state, np.random.RandomState):  # the generator's state comes back too
        assert back.random_state.randint(10**9) == est.random_state.randint(10**9)
    # the optimizer state comes back: partial_fit continues identically
    if est.solver_ in ("gd", "sgd"):
        assert type(back._opt_state_) is type(est._opt_state_)
        a, b = clone_fit_partial(est, y), clone_fit_partial(back, y)
        np.testing.assert_array_equal(a, b)


def clone_fit_partial(est, y):
    kwargs = {"classes": est.classes_} if hasattr(est, "classes_") else {}
    return np.ravel(pickle.loads(pickle.dumps(est)).partial_fit(X, y, **kwargs).coef_)


def test_recommenders_round_trip(tmp_path, client):
    frame, _ = make_ratings(n_users=60, n_items=40, n_ratings=1500, random_state=0)
    frame["user"] = "u" + frame["user"].astype(str)  # string ids survive the trip
    for est in (MatrixFactorization(n_components=3, max_iter=10, random_state=0),
                ImplicitMatrixFactorization(n_components=3, loss="bpr", alpha=0.01, max_iter=5, random_state=0)):
        est.fit(frame)
        back = dask_dgd.load(est.save(tmp_path / f"{type(est).__name__}.npz"))
        users = frame["user"].unique()[:5]
        np.testing.assert_array_equal(back.predict(frame.head(50)), est.predict(frame.head(50)))
        ids_a, scores_a = est.recommend(users, k=4)
        ids_b, scores_b = back.recommend(users, k=4)
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_array_equal(scores_a, scores_b)
        assert back.user_ids_.dtype == est.user_ids_.dtype


@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_climate_round_trip(tmp_path, model):
    ds = _grid()
    est = ClimateRegressor(features=["a"], target="tas", model=model).fit(ds)
    back = ClimateRegressor.load(est.save(tmp_path / "climate.npz"))
    xr.testing.assert_identical(back.predict(ds).compute(), est.predict(ds).compute())
    if model == "pointwise":
        xr.testing.assert_identical(back.coef_, est.coef_)


def test_nested_estimator_drops_user_code(tmp_path):
    ds = _grid()
    est = ClimateRegressor(features=["a"], target="tas", model="pooled", callbacks=[_count]).fit(ds)
    back = ClimateRegressor.load(est.save(tmp_path / "c.npz"))
    assert back.callbacks is None and back.estimator_.callbacks is None
    xr.testing.assert_identical(back.predict(ds).compute(), est.predict(ds).compute())


def _count(record):
    return False


def test_unfitted_and_client_not_saved(tmp_path, client):
    est = LinearRegression(alpha=0.5, client=client, callbacks=[print])
    back = LinearRegression.load(est.save(tmp_path / "m.npz"))
    assert back.alpha == 0.5 and back.client is None and back.callbacks is None
    assert not hasattr(back, "coef_")


# ------------------------------------------------------------------ refused files
@pytest.fixture
def saved(tmp_path):
    est = LinearRegression().fit(X, X[:, 0])
    return est.save(tmp_path / "model.npz")


def test_flipped_byte_is_refused(saved):
    raw = bytearray(open(saved, "rb").read())
    with zipfile.ZipFile(saved) as z:  # flip a byte inside an array, not the zip headers
        info = [i for i in z.infolist() if i.filename != "__meta__.npy"][0]
    raw[info.header_offset + 30 + len(info.filename) + info.file_size - 3] ^= 0x01
    open(saved, "wb").write(raw)
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd model file.*(checksum|corrupted)"):
        dask_dgd.load(saved)


def test_every_flipped_byte_is_refused(saved):
    raw = open(saved, "rb").read()
    reference = dask_dgd.load(saved)
    refused = 0
    positions = range(0, len(raw), max(1, len(raw) // 300))
    for pos in positions:
        bad = bytearray(raw)
        bad[pos] ^= 0x20
        open(saved, "wb").write(bad)
        try:
            dask_dgd.load(saved)
        except CheckpointError:
            refused += 1
        else:  # harmless flips: zip header bytes no reader uses (times, version fields)
            est = dask_dgd.load(saved)
            np.testing.assert_array_equal(est.coef_, reference.coef_)
            assert est.get_params() == reference.get_params()
    assert refused >= 0.8 * len(positions)  # measured: 87% of positions


def test_truncated_is_refused(saved):
    raw = open(saved, "rb").read()
    for cut in (10, len(raw) // 2, len(raw) - 5):
        open(saved, "wb").write(raw[:cut])
        with pytest.raises(CheckpointError, match="is not a valid dask_dgd model file.*(truncated|corrupted)"):
            dask_dgd.load(saved)


def test_pickle_is_refused(tmp_path, saved):
    # an npz holding a pickled object array
    evil = tmp_path / "evil.npz"
    np.savez(evil, __meta__=np.frombuffer(b"{}", np.uint8), coef=np.array([object()], dtype=object))
    with pytest.raises(CheckpointError, match="unknown format"):  # the metadata is checked first
        dask_dgd.load(evil)
    # with forged, self-consistent metadata: the pickle is still never loaded
    with np.load(saved) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["coef_"] = np.array([object()], dtype=object)
    np.savez(evil, **arrays)
    _rewrite_meta(evil, lambda meta: meta.update(sizes=None, meta_sha256="recompute"))
    with pytest.raises(CheckpointError, match="contains pickled Python objects, which are never loaded"):
        dask_dgd.load(evil)
    # a plain pickle file
    plain = tmp_path / "model.pkl"
    plain.write_bytes(pickle.dumps(LinearRegression()))
    with pytest.raises(CheckpointError, match="is not a valid dask_dgd model file: it is not a NumPy .npz archive"):
        dask_dgd.load(plain)


def _rewrite_meta(path, change):
    with np.load(path, allow_pickle=True) as npz:  # the test's own files
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    change(meta)
    from dask_dgd._files.archive import _meta_digest

    meta["meta_sha256"] = _meta_digest(meta) if meta.get("meta_sha256") == "recompute" else meta.get("meta_sha256")
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)


def test_edited_metadata_is_refused(saved):
    def edit(meta):
        meta["content"]["params"]["alpha"] = 123.0

    _rewrite_meta(saved, edit)
    with pytest.raises(CheckpointError, match="the metadata checksum does not match"):
        dask_dgd.load(saved)


def test_class_outside_the_package_is_refused(saved):
    from dask_dgd._files.archive import _meta_digest

    def edit(meta):
        meta["content"]["class"] = "os:system"
        meta["meta_sha256"] = _meta_digest(meta)  # a forger who recomputes the checksum

    _rewrite_meta(saved, edit)
    with pytest.raises(CheckpointError, match="names class 'os:system', outside dask_dgd; refused"):
        dask_dgd.load(saved)


@pytest.mark.parametrize("name, message", [
    # a name a dask_dgd module imported, not a dask_dgd class: could truncate a file
    ("dask_dgd._engine.runtime.checkpoint:logging.FileHandler", "defined outside dask_dgd; refused"),
    ("dask_dgd._engine.runtime.clusters:LocalCluster", "defined outside dask_dgd; refused"),
    # importing dask_dgd.__main__ would run the command line
    ("dask_dgd.__main__:main", "outside dask_dgd; refused"),
    # a dask_dgd class that is not an estimator
    ("dask_dgd.optim._first_order:SGD", "which is not a dask_dgd estimator; refused"),
])
def test_forged_class_names_are_refused(saved, tmp_path, name, message):
    from dask_dgd._files.archive import _meta_digest

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")

    def edit(meta):
        meta["content"]["class"] = name
        meta["content"]["params"] = {"filename": str(victim), "mode": "w"}
        meta["meta_sha256"] = _meta_digest(meta)

    _rewrite_meta(saved, edit)
    with pytest.raises(CheckpointError, match=message):
        dask_dgd.load(saved)
    assert victim.read_text() == "keep me"


def test_signed_files_with_an_archive_key(tmp_path):
    import dask

    from dask_dgd._files.archive import _meta_digest

    est = LinearRegression().fit(X, X[:, 0])
    unsigned = est.save(tmp_path / "unsigned.npz")
    with dask.config.set({"dgd.archive-key": "s3cret-s3cret-s3cret"}):
        signed = est.save(tmp_path / "signed.npz")
        np.testing.assert_array_equal(dask_dgd.load(signed).coef_, est.coef_)
        with pytest.raises(CheckpointError, match=r"not signed with this dgd.archive-key \(unsigned\)"):
            dask_dgd.load(unsigned)

        def forge(meta):  # a forger without the key recomputes the checksum
            meta["content"]["params"]["alpha"] = 123.0
            meta["meta_sha256"] = _meta_digest(meta)

        _rewrite_meta(signed, forge)
        with pytest.raises(CheckpointError, match=r"wrong signature: tampered, or another key"):
            dask_dgd.load(signed)
    with dask.config.set({"dgd.archive-key": "s3cret-s3cret-s3cret"}):
        resigned = est.save(tmp_path / "resigned.npz")
    with dask.config.set({"dgd.archive-key": "other-other-other-key"}):
        with pytest.raises(CheckpointError, match="wrong signature: tampered, or another key"):
            dask_dgd.load(resigned)


def test_paths_and_scoring_callables(tmp_path):
    from sklearn.metrics import make_scorer, r2_score

    est = LinearRegression(solver="gd", checkpoint=tmp_path / "ck", scoring=make_scorer(r2_score)).fit(X, X[:, 0])
    back = dask_dgd.load(est.save(tmp_path / "m.npz"))
    assert back.checkpoint == tmp_path / "ck" and back.scoring is None
    np.testing.assert_array_equal(back.coef_, est.coef_)
    named = LinearRegression(scoring="r2").save(tmp_path / "n.npz")
    assert dask_dgd.load(named).scoring == "r2"


def test_non_archives_are_named_as_such(tmp_path):
    text = tmp_path / "m.npz"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="it is not a NumPy .npz archive"):
        dask_dgd.load(text)


def test_wrong_class_and_missing_file(tmp_path, saved):
    with pytest.raises(CheckpointError, match="holds a LinearRegression, not a LogisticRegression"):
        LogisticRegression.load(saved)
    with pytest.raises(CheckpointError, match="no model file at"):
        dask_dgd.load(tmp_path / "nothing.npz")
    with pytest.raises(CheckpointError, match="parameter .optimizer. cannot be saved: cannot save a value of type"):
        LinearRegression(optimizer=optim.sgd(learning_rate=_NotOurs())).save(tmp_path / "x.npz")


class _NotOurs(optim.Schedule):
    def __call__(self, count):
        return 0.1


def test_atomic_write_leaves_no_temporary(tmp_path):
    LinearRegression().fit(X, X[:, 0]).save(tmp_path / "m.npz")
    assert os.listdir(tmp_path) == ["m.npz"]


# ------------------------------------------- issue 44: every array field validated on load
def _estimator_classes():
    from sklearn.base import BaseEstimator

    found = [getattr(dask_dgd, n) for n in dask_dgd.__all__]
    return [c for c in found if isinstance(c, type) and issubclass(c, BaseEstimator)]


def _tiny_fits(cls, client):
    """Small fitted instances of ``cls``, in the configurations that hold the most arrays
    (an optimizer state, a sparse coef_, several classes, a grid)."""
    import pandas as pd

    name = cls.__name__
    Xs = X[:120]
    if name in ("MatrixFactorization", "ImplicitMatrixFactorization"):
        frame, _ = make_ratings(n_users=12, n_items=9, n_ratings=80, random_state=0)
        bpr = {"loss": "bpr", "alpha": 0.01} if name == "ImplicitMatrixFactorization" else {}
        return [cls(n_components=2, max_iter=3, random_state=0, client=client, **bpr).fit(frame),
                cls(n_components=2, solver="gd", max_iter=3, random_state=0, client=client, **bpr).fit(frame)]
    if name == "ClimateRegressor":
        return [cls(features=["a"], target="tas", model=m, client=client).fit(_grid()) for m in ("pooled", "pointwise")]
    if name == "FeatureHasher":
        return [cls(n_features=8).fit(pd.DataFrame({"a": ["x", "y"], "b": ["u", "v"]}))]
    positive = np.exp(0.3 * Xs[:, 0]).round() + 1
    y = {"LogisticRegression": Y_LABELS[:120], "LogisticRegressionCV": Y_LABELS[:120],
         "BinomialRegressor": (Xs[:, 0] > 0).astype(float), "BinomialRegressorCV": (Xs[:, 0] > 0).astype(float),
         "LinearRegression": Xs[:, 0], "ElasticNetCV": Xs[:, 0]}.get(name, positive)
    if name.endswith("CV"):
        return [cls(max_iter=5).fit(Xs, y)]
    fits = [cls(solver="gd", optimizer="adam", max_iter=3).fit(Xs, y)]
    if name == "LinearRegression":
        fits.append(cls(solver="gd", alpha=0.1, l1_ratio=1.0, sparse_coef=True, max_iter=3).fit(Xs, y))
    if name == "LogisticRegression":
        fits.append(cls().fit(Xs, (Xs[:, 0] > 0).astype(int)))
    return fits


def _is_array(value):
    import pandas as pd
    import scipy.sparse as sp

    return isinstance(value, (np.ndarray, xr.DataArray, pd.Index)) or sp.issparse(value)


def _array_fields(est):
    """``(label, owner class, attribute, array, put)`` for every array among the fitted
    attributes of ``est`` (inside optimizer states, dicts, tuples and nested estimators);
    ``put(new)`` is a copy of ``est`` with that array replaced."""
    import copy

    from sklearn.base import BaseEstimator

    def walk(label, value, put, owner, top):
        if _is_array(value):
            yield label, owner, top, value, put
        elif isinstance(value, tuple) and hasattr(value, "_fields"):
            for f, v in zip(value._fields, value):
                yield from walk(f"{label}.{f}", v, lambda new, f=f: put(value._replace(**{f: new})), owner, top)
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                yield from walk(f"{label}[{i}]", v,
                                lambda new, i=i: put(type(value)([*value[:i], new, *value[i + 1:]])), owner, top)
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from walk(f"{label}[{k!r}]", v, lambda new, k=k: put({**value, k: new}), owner, top)
        elif isinstance(value, BaseEstimator):
            for lbl, own, t, v, p in _array_fields(value):
                yield f"{label}.{lbl}", own, t, v, lambda new, p=p: put(p(new))

    params = est.get_params(deep=False)
    for name, value in vars(est).items():
        if name not in params and name not in ("history_", "validation_path_"):  # frames: logs, not arrays
            def put(new, name=name):
                out = copy.copy(est)
                setattr(out, name, new)
                return out

            yield from walk(name, value, put, type(est), name)


def _mutations(arr, finite, free_length):
    """``{kind: mutated copy}``: another dtype, one more dimension, one more row, a NaN
    where the attribute is declared finite (``finite="masked"``: an infinity, NaN marking
    a grid cell without data), an index past the shape (sparse)."""
    import pandas as pd
    import scipy.sparse as sp

    out = {}
    if isinstance(arr, pd.Index):
        out["dtype"] = pd.Index(np.zeros(len(arr), complex))
        out["length"] = arr.append(pd.Index([max(arr) + 1 if arr.dtype.kind in "iuf" else "zz-new"]))
        return out
    if isinstance(arr, xr.DataArray):
        out["dtype"] = arr.copy(data=np.zeros(arr.shape, complex))
        out["ndim"] = arr.expand_dims("extra")
        out["length"] = xr.concat([arr, arr.isel({arr.dims[0]: [0]})], dim=arr.dims[0])
        if finite and arr.dtype.kind == "f" and arr.size:
            out["nan"] = arr.copy(data=_poisoned(arr.values, finite))
        return out
    if sp.issparse(arr):
        out["dtype"] = arr.astype(complex)
        out["ndim"] = arr.toarray()[np.newaxis]
        out["length"] = type(arr)(sp.vstack([arr, arr[:1]]))
        bad = arr.copy()
        bad.indices = bad.indices.copy()
        if bad.nnz:
            bad.indices[0] = arr.shape[1 if arr.format == "csr" else 0] + 10**9
            out["index"] = bad
        if finite and arr.nnz:
            nan = arr.copy()
            nan.data = _poisoned(nan.data, finite)
            out["nan"] = nan
        return out
    out["dtype"] = np.zeros(arr.shape, complex)
    out["ndim"] = arr[np.newaxis]
    if not free_length:
        out["length"] = np.concatenate([arr, arr[:1]])
    if finite and arr.dtype.kind == "f" and arr.size:
        out["nan"] = _poisoned(arr, finite)
    return out


def _poisoned(values, finite):
    """A copy of ``values`` with a NaN first (an infinity where NaN marks a cell without data)."""
    out = np.array(values, copy=True)
    out.flat[0] = np.inf if finite == "masked" else np.nan
    return out


#: Arrays whose length no other attribute has: a recommender's ratings per shard.
FREE_LENGTH = {"shard_ratings_"}


def _declared_finite(cls, attribute):
    from dask_dgd._files.schema import ByLabel, Either, OptimizerState, fitted_attributes

    spec = fitted_attributes(cls)[attribute]
    while True:
        if isinstance(spec, Either):
            spec = spec.specs[-1]
        elif isinstance(spec, OptimizerState):
            spec = spec.array
        elif isinstance(spec, ByLabel):
            spec = spec.spec
        else:
            return getattr(spec, "finite", False) and ("masked" if getattr(spec, "masked", False) or
                                                       type(spec).__name__ == "GridArray" else "finite")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("cls", _estimator_classes(), ids=lambda c: c.__name__)
def test_every_array_field_of_every_estimator_is_validated_on_load(cls, tmp_path, client):
    """Each array among an estimator's fitted attributes, given another dtype, one more
    dimension, one more row, a NaN where it must be finite, or (sparse) an index past its
    shape, is refused on load with CheckpointError (a sparse coef_ index of 10**9 used to
    load, and predict crashed the process)."""
    accepted, tried = [], 0
    for i, est in enumerate(_tiny_fits(cls, client)):
        path = dask_dgd.save(est, tmp_path / f"ok{i}.npz")
        dask_dgd.load(path)  # the unmutated file loads
        fields = list(_array_fields(est))
        assert fields, f"{cls.__name__} has no array fields"
        for label, owner, attribute, arr, put in fields:
            muts = _mutations(arr, _declared_finite(owner, attribute), attribute in FREE_LENGTH)
            for kind, new in muts.items():
                tried += 1
                path = dask_dgd.save(put(new), tmp_path / "mutated.npz")
                try:
                    dask_dgd.load(path)
                except CheckpointError:
                    continue
                accepted.append(f"{label}: {kind}")
    assert accepted == [], f"{cls.__name__}: mutated arrays loaded ({len(accepted)} of {tried})"


@pytest.mark.parametrize("cls", _estimator_classes(), ids=lambda c: c.__name__)
def test_the_loader_knows_every_fitted_attribute_an_estimator_declares(cls):
    """An estimator that lists its fitted attributes (``_FITTED``) has each of them in the
    loader's allow-list, and none of them is a name its class defines (a new attribute
    must be declared in ``dask_dgd._files.schema.SCHEMAS`` to be saved and loaded)."""
    from dask_dgd._files.schema import fitted_attributes

    schema = fitted_attributes(cls)
    assert schema, f"{cls.__name__} declares no fitted attributes in dask_dgd._files.schema.SCHEMAS"
    assert set(getattr(cls, "_FITTED", ())) <= set(schema)
    assert [name for name in schema if hasattr(cls, name)] == []


def test_files_naming_the_engine_modules_before_the_sub_packages_still_load():
    """Files written before the engine was laid out in sub-packages name the value
    classes at their old modules; those names still resolve, to the same classes."""
    from dask_dgd._engine.runtime.reduce import Partial
    from dask_dgd._engine.solvers.curvature import LeastSquaresModel
    from dask_dgd._files.schema import allowed_class

    assert allowed_class("dask_dgd._engine.reduce:Partial", "type") is Partial
    assert allowed_class("dask_dgd._engine.curvature:LeastSquaresModel", "type") is LeastSquaresModel
    with pytest.raises(CheckpointError, match="which this dask_dgd does not have"):
        allowed_class("dask_dgd._engine.kernels:BlockSums", "type")


def _binomial_fit():
    return dask_dgd.BinomialRegressor(alpha=0.1).fit(X, (X[:, 0] > 0).astype(float))


def _logistic_cv_fit():
    return dask_dgd.LogisticRegressionCV(Cs=3, cv=3, max_iter=20).fit(X, Y_LABELS)


def _poisson_cv_fit():
    return dask_dgd.PoissonRegressorCV(alphas=3, cv=3, max_iter=20).fit(X, np.exp(0.3 * X[:, 0]).round())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("fit, old_path", [
    (_binomial_fit, "dask_dgd.linear_model._binomial:BinomialRegressor"),
    (_logistic_cv_fit, "dask_dgd.linear_model._cv:LogisticRegressionCV"),
    (_poisson_cv_fit, "dask_dgd.linear_model._cv:PoissonRegressorCV"),
])
def test_files_naming_an_estimator_at_its_module_before_the_files_were_cut_by_concern_still_load(
        tmp_path, fit, old_path):
    """Files written before the estimators moved beside their sibling families or
    helpers name them at their old modules; such a file loads, to the class now, and
    predicts as the fitted estimator it was written from."""
    est = fit()
    path = est.save(tmp_path / "model.npz")
    now = f"{type(est).__module__}:{type(est).__qualname__}"
    assert now != old_path

    def edit(meta):
        assert meta["content"]["class"] == now
        meta["content"]["class"] = old_path  # as the file was written then
        meta["meta_sha256"] = "recompute"

    _rewrite_meta(path, edit)
    back = dask_dgd.load(path)
    assert type(back) is type(est)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_cv_file_whose_refit_names_binomial_at_its_old_module_still_loads(tmp_path):
    """The refitted estimator a CV file nests names its class too: a BinomialRegressorCV
    file written before BinomialRegressor moved names ``_binomial`` there."""
    est = dask_dgd.BinomialRegressorCV(alphas=3, cv=3, max_iter=20).fit(X, (X[:, 0] > 0).astype(float))
    path = est.save(tmp_path / "model.npz")

    def edit(meta):
        nested = meta["content"]["state"]["estimator_"]
        assert nested["__object__"] == "dask_dgd.linear_model._families:BinomialRegressor"
        nested["__object__"] = "dask_dgd.linear_model._binomial:BinomialRegressor"
        meta["meta_sha256"] = "recompute"

    _rewrite_meta(path, edit)
    back = dask_dgd.load(path)
    assert type(back.estimator_) is dask_dgd.BinomialRegressor
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


def _gd_ratings_model():
    ratings, _ = make_ratings(60, 30, 900, random_state=0)
    ratings["rating"] *= 100.0  # (a unit far from 1)
    return dask_dgd.MatrixFactorization(n_components=2, alpha=1.0, solver="gd", max_iter=5, random_state=0).fit(
        ratings), ratings


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("bad", [0.0, -2.0])
def test_the_unit_of_matrix_factorization_steps_is_saved_and_checked(tmp_path, bad):
    """``_step_unit_`` (the unit ``partial_fit`` continues the optimizer state in) comes
    back from a file; one that is not > 0 (a division by it, a square root) is refused;
    a file written before it existed loads, and its ``partial_fit`` steps in unit 1, the
    unit its state was built in then."""
    est, ratings = _gd_ratings_model()
    path = est.save(tmp_path / "mf.npz")
    back = dask_dgd.load(path)
    assert back._step_unit_ == est._step_unit_ == pytest.approx(ratings["rating"].std(ddof=0))
    np.testing.assert_array_equal(back.predict(ratings), est.predict(ratings))

    def edit(meta):
        meta["content"]["state"]["_step_unit_"] = bad
        meta["meta_sha256"] = "recompute"

    _rewrite_meta(path, edit)
    with pytest.raises(CheckpointError, match=rf"_step_unit_.* is {bad!r}, not a number > 0"):
        dask_dgd.load(path)

    old = est.save(tmp_path / "old.npz")
    _rewrite_meta(old, lambda meta: (meta["content"]["state"].pop("_step_unit_"), meta.update(meta_sha256="recompute")))
    older = dask_dgd.load(old)
    assert not hasattr(older, "_step_unit_")
    assert older._step_unit("gd", 1e4, continued=True) == 1.0
    older.partial_fit(ratings.iloc[:100])
    assert np.all(np.isfinite(older.predict(ratings)))

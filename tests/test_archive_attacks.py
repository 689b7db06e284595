"""The red-team's archive attacks, each kept as a case (issue 22): signing keys from the
environment, zip bombs, crafted content, forged callbacks, file permissions, and a fuzz
test over random mutations of valid files (every one refused with CheckpointError)."""

import io
import json
import os
import resource
import stat
import struct
import zipfile
import zlib

import dask
import numpy as np
import pytest

import dask_dgd
from dask_dgd import LinearRegression
from dask_dgd._files.archive import _meta_digest
from dask_dgd.callbacks import HistoryWriter
from dask_dgd.exceptions import CheckpointError

X = np.random.default_rng(0).normal(size=(60, 3))
KEY = "k" * 32


@pytest.fixture
def model():
    return LinearRegression().fit(X, X @ [1.0, 2.0, 3.0])


def _members(path):
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _write_members(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _forge(path, change, arrays=None):
    """Rewrite the metadata (and arrays) of the archive at ``path`` as a forger would:
    checksums recomputed, no key."""
    with np.load(path) as npz:
        stored = {k: npz[k] for k in npz.files}
    meta = json.loads(stored.pop("__meta__").tobytes())
    stored.update(arrays or {})
    change(meta)
    meta["arrays"] = {k: __import__("dask_dgd._files.archive", fromlist=["_digest"])._digest(v) for k, v in stored.items()}
    meta["sizes"] = {k: [v.dtype.str, list(v.shape)] for k, v in stored.items()}
    meta["meta_sha256"] = _meta_digest(meta)
    np.savez(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **stored)


# ------------------------------------------------------------------------ signing keys
@pytest.mark.parametrize("value", [42, 0, 64, True, 1e3, 10**20, None, ["a"]])
def test_a_key_that_is_not_text_is_refused_not_used(value, model, tmp_path):
    with dask.config.set({"dgd.archive-key": value}):
        with pytest.raises(CheckpointError, match=r"dask config dgd.archive-key must be a string of at least 16 "
                                                  r"characters; got "):
            model.save(tmp_path / "m.npz")


@pytest.mark.parametrize("value", ["short", b"0123456789"])
def test_a_short_key_is_refused(value, model, tmp_path):
    with dask.config.set({"dgd.archive-key": value}):
        with pytest.raises(CheckpointError, match=r"dgd.archive-key is \d+ bytes long; at least 16 are needed"):
            model.save(tmp_path / "m.npz")


def test_a_file_signed_with_one_key_does_not_load_under_another(model, tmp_path):
    with dask.config.set({"dgd.archive-key": KEY}):
        path = model.save(tmp_path / "m.npz")
        np.testing.assert_array_equal(dask_dgd.load(path).coef_, model.coef_)
    with dask.config.set({"dgd.archive-key": KEY[:-1] + "x"}), pytest.raises(CheckpointError, match="wrong signature"):
        dask_dgd.load(path)


# ------------------------------------------------------------------------ zip bombs
def _zip_of_zeros(path, name, header, n_bytes):
    """A zip archive of one member ``name``: ``header`` then ``n_bytes`` zero bytes,
    deflated (zlib's raw stream), its sizes and CRC-32 true, written in seconds.

    zlib deflates 16 MiB of zeros to the same bytes every time after a full flush
    (which resets its window and aligns its output to a byte), so the stream is
    those bytes repeated and a final empty block: deflating 3 GB of zeros takes zlib about 16 s here."""
    chunk = bytes(2**24)
    assert n_bytes % len(chunk) == 0
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = z.compress(header) + z.flush(zlib.Z_FULL_FLUSH)
    piece = z.compress(chunk) + z.flush(zlib.Z_FULL_FLUSH)
    tail = z.flush(zlib.Z_FINISH)
    crc = zlib.crc32(header)
    for _ in range(n_bytes // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    size, packed = len(header) + n_bytes, len(head) + len(piece) * (n_bytes // len(chunk)) + len(tail)
    assert size < 2**32 and packed < 2**32  # (no zip64 fields needed)
    fields = (20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, crc, packed, size, len(name.encode()))  # (0x21: 1980-01-01)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + name.encode()
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *fields, 0, 0, 0, 0, 0, 0) + name.encode()
    with open(path, "wb") as fh:
        fh.write(local + head)
        for _ in range(n_bytes // len(chunk)):
            fh.write(piece)
        fh.write(tail)
        offset = fh.tell()
        fh.write(central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), offset, 0))


def test_the_zip_of_zeros_is_a_valid_archive(tmp_path):
    """The bomb's builder, at 32 MiB: zipfile reads the member back, its CRC checked."""
    path = tmp_path / "zeros.zip"
    _zip_of_zeros(path, "z.npy", b"head", 2 * 2**24)
    with zipfile.ZipFile(path) as zf:
        assert [(i.filename, i.file_size) for i in zf.infolist()] == [("z.npy", 4 + 2 * 2**24)]
        data = zf.read("z.npy")  # (BadZipFile on a wrong CRC)
    assert data[:4] == b"head" and not any(data[4:])


@pytest.mark.slow
def test_a_zip_bomb_is_refused_before_decompressing(model, tmp_path):
    """3 GB of zeros compresses to a few MB: refused from the zip's declared sizes, with
    the process's memory nowhere near the bomb's size."""
    path = model.save(tmp_path / "m.npz")
    members = _members(path)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (3 * 2**27,)})
    bomb = tmp_path / "bomb.npz"
    _zip_of_zeros(bomb, "bomb.npy", header.getvalue(), 3 * 2**27 * 8)
    with zipfile.ZipFile(bomb, "a", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    assert os.path.getsize(bomb) < 10 * 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match=r"would take 3,221,\d{3},\d{3} bytes once decompressed, over the "
                                              r"limit of 2,147,483,648 \(dask config dgd.archive-max-bytes"):
        dask_dgd.load(bomb)
    with dask.config.set({"dgd.archive-max-bytes": 2**33}), pytest.raises(
            CheckpointError, match=r"holds members \['bomb.npy'\] that its metadata does not list"):
        dask_dgd.load(bomb)  # under a raised cap: an unlisted member, still not decompressed
    with dask.config.set({"dgd.archive-max-bytes": 2**30}), pytest.raises(
            CheckpointError, match=r"over the limit of 1,073,741,824 \(dask config dgd.archive-max-bytes"):
        dask_dgd.load(bomb)
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kib < 512 * 1024  # ru_maxrss is in KiB on Linux: far below the bomb's 3 GiB


def test_an_array_larger_than_its_recorded_shape_is_refused(tmp_path):
    wide = np.random.default_rng(1).normal(size=(40, 1000))  # a coefficient vector of 8,000 bytes
    path = LinearRegression().fit(wide, wide[:, 0]).save(tmp_path / "m.npz")
    _forge(path, lambda meta: None)
    members = _members(path)
    name = max((k for k in members if k != "__meta__.npy"), key=lambda k: len(members[k]))[:-4]
    meta = json.loads(np.load(io.BytesIO(members["__meta__.npy"])).tobytes())
    meta["sizes"][name][1] = [0]
    meta["meta_sha256"] = _meta_digest(meta)
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    members["__meta__.npy"] = buf.getvalue()
    _write_members(path, members)
    with pytest.raises(CheckpointError, match=rf"array '{name}' declares [\d,]+ bytes, not the 0 of its recorded shape"):
        dask_dgd.load(path)


# ------------------------------------------------------------------- crafted content
def _raw_meta_file(path, text):
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(text.encode(), np.uint8))
    _write_members(path, {"__meta__.npy": buf.getvalue()})


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"format": ' + "9" * 10_000 + "}"],
                         ids=["deeply-nested-json", "10000-digit-integer"])
def test_crafted_metadata_is_a_checkpoint_error(text, tmp_path):
    path = tmp_path / "m.npz"
    _raw_meta_file(path, text)
    with pytest.raises(CheckpointError, match="its metadata is not valid JSON"):
        dask_dgd.load(path)


def _forged(kind, ref):
    return {
        "sparse": {"__sparse__": "csr", "shape": [5, 5], "data": ref, "indices": ref, "indptr": ref},
        "randomstate": {"__randomstate__": ["MT19937", ref, 0, 0, 0.0]},
        "dtype": {"__dtype__": "no-such-dtype"},
        "float": {"__float__": "not a number"},
    }[kind]


@pytest.mark.parametrize("kind", ["sparse", "randomstate", "dtype", "float"])
def test_forged_entries_are_a_checkpoint_error(kind, model, tmp_path):
    """Entries a forger wrote (checksums recomputed, no key) whose decoding raises
    ValueError or TypeError deep in SciPy/NumPy."""
    path = model.save(tmp_path / "m.npz")

    def change(meta):
        ref = {"__array__": next(iter(meta["arrays"]))}  # an array the file has
        meta["content"]["state"]["coef_"] = _forged(kind, ref)

    _forge(path, change)
    # a forged sparse entry is now refused by name before SciPy sees it
    message = "sparse matrix indices of dtype float64" if kind == "sparse" else r"malformed content \("
    with pytest.raises(CheckpointError, match=r"is not a valid dask_dgd model file: " + message):
        dask_dgd.load(path)


def test_a_forged_callback_is_never_restored(model, tmp_path):
    """The docs say callbacks come back as None: a forged unsigned file naming a
    HistoryWriter must not make the next fit write where it says.  It is now refused
    outright (a callback is not a type files hold, issue 44); a forged list of values
    files may hold still comes back as None."""
    path = model.save(tmp_path / "m.npz")
    target = tmp_path / "written-by-forgery.csv"
    from dask_dgd._files.archive import Encoder

    enc = Encoder()
    forged = enc([HistoryWriter(str(target))])

    def change(meta):
        meta["content"]["params"]["callbacks"] = forged
        meta["content"]["state"]["callbacks"] = forged

    _forge(path, change, arrays=enc.arrays)
    with pytest.raises(CheckpointError, match=r"names class 'dask_dgd.callbacks:HistoryWriter', which is not one of "
                                              r"the types dask_dgd files hold"):
        dask_dgd.load(path)

    def plain(meta):
        meta["content"]["params"]["callbacks"] = ["print", 1.0]
        meta["content"]["state"]["callbacks"] = ["print"]

    _forge(path, plain)
    with pytest.raises(CheckpointError, match=r"it sets parameter 'callbacks' of LinearRegression among its fitted "
                                              r"attributes; refused"):
        dask_dgd.load(path)
    _forge(path, lambda meta: meta["content"]["state"].pop("callbacks"))
    back = dask_dgd.load(path)
    assert back.callbacks is None
    back.fit(X, X[:, 0])
    assert not target.exists()


# ----------------------------------------------------------------------- permissions
def test_saved_files_follow_the_umask_and_keep_an_existing_mode(model, tmp_path):
    old = os.umask(0o022)
    try:
        path = model.save(tmp_path / "m.npz")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
        os.chmod(path, 0o640)
        model.save(path)  # overwritten: keeps its mode
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    finally:
        os.umask(old)


# ---------------------------------------------------------------------------- fuzzing
def test_random_mutations_of_valid_files_are_all_checkpoint_errors(model, tmp_path):
    """1,000 mutations (flipped, inserted and deleted bytes, truncation, swapped zip
    members) of a saved model and of a checkpoint: each loads or raises CheckpointError,
    never another exception type."""
    rng = np.random.default_rng(22)
    originals = [open(model.save(tmp_path / "m.npz"), "rb").read()]
    LinearRegression(solver="gd", max_iter=3, tol=0, checkpoint=tmp_path / "ckpt").fit(X, X[:, 0])
    (ckpt,) = (tmp_path / "ckpt").glob("*.npz")
    originals.append(open(ckpt, "rb").read())
    other_types = []
    for case in range(1000):
        data = bytearray(originals[case % 2])
        kind = case % 4
        if kind == 0:
            for _ in range(rng.integers(1, 8)):
                data[rng.integers(len(data))] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            at = int(rng.integers(len(data)))
            data[at:at] = rng.bytes(int(rng.integers(1, 64)))
        elif kind == 2:
            at = int(rng.integers(len(data)))
            del data[at:at + int(rng.integers(1, 64))]
        else:
            data = data[: int(rng.integers(len(data)))]
        path = tmp_path / f"fuzz{case % 2}.npz"
        path.write_bytes(bytes(data))
        try:
            if case % 2 == 0:
                dask_dgd.load(path)
            else:
                from dask_dgd._files.archive import read_archive

                read_archive(path, "checkpoint")
        except CheckpointError:
            pass
        except Exception as err:  # noqa: BLE001 - what the test looks for
            other_types.append((case, kind, type(err).__name__, str(err)[:200]))
    assert other_types == []


@pytest.mark.parametrize("drop", ["n_steps", "solver"])
def test_a_forged_checkpoint_state_is_a_checkpoint_error(drop, tmp_path):
    est = LinearRegression(solver="gd", max_iter=3, tol=0, checkpoint=tmp_path / "ckpt")
    est.fit(X, X[:, 0])
    (path,) = (tmp_path / "ckpt").glob("*.npz")
    _forge(path, lambda meta: meta["content"]["state"]["__dict__"].pop(drop))
    with pytest.raises(CheckpointError, match=rf"holds a malformed state \(KeyError: '{drop}'\)"):
        est.fit(X, X[:, 0], resume=True)


def test_checkpoint_at_an_existing_file_is_a_parameter_error(tmp_path):
    """It was a raw FileExistsError naming a temporary file, after training had started."""
    from dask_dgd.exceptions import ParameterError

    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    with pytest.raises(ParameterError, match=r"checkpoint must name a folder \(created if missing\); '.*notes.txt' is "
                                             r"an existing file"):
        LinearRegression(solver="gd", max_iter=3, checkpoint=existing).fit(X, X[:, 0])
    assert existing.read_text() == "mine"


# ------------------------------------------------- issue 44: every way to set the key signs
_KEY_A, _KEY_B = "a" * 24, "b" * 24
_KEY_SCRIPT = """
import contextlib, json, os, sys
import dask
import numpy as np
import dask_dgd
from dask_dgd import LinearRegression
from dask_dgd.exceptions import CheckpointError

how, path, yaml, key_a, key_b = sys.argv[1:6]


def setting(key):
    if how.startswith("set"):
        return dask.config.set({"dgd.archive-key" if how == "set-dash" else "dgd.archive_key": key})
    if how == "env":  # as dask reads the environment at import
        dask.config.refresh(env={} if key is None else {"DASK_DGD__ARCHIVE_KEY": key})
    elif key is None:
        os.remove(yaml)
        dask.config.refresh(env={})
    else:
        with open(yaml, "w") as fh:
            fh.write("dgd:\\n  " + ("archive-key" if how == "yaml-dash" else "archive_key") + ": " + key + "\\n")
        dask.config.refresh(env={})
    return contextlib.nullcontext()


def load():
    try:
        return "loaded %s" % dask_dgd.load(path).alpha
    except CheckpointError as err:
        return "refused " + str(err)


# key A as the process started with it (environment, YAML file) or as set in code
with setting(key_a) if how.startswith("set") else contextlib.nullcontext():
    LinearRegression(alpha=0.25).save(path)
    with np.load(path) as npz:
        print("signed" if "hmac_sha256" in json.loads(npz["__meta__"].tobytes()) else "unsigned")
    print(load())
with setting(key_b):
    print(load())
with setting(None) if not how.startswith("set") else contextlib.nullcontext():
    print(load())
"""


@pytest.mark.parametrize("how", ["env", "yaml-dash", "yaml-underscore", "set-dash", "set-underscore"])
@pytest.mark.slow
def test_every_documented_way_to_set_the_key_signs(how, tmp_path):
    """DASK_DGD__ARCHIVE_KEY reaches dask as dgd.archive_key: the loader tested the raw
    dict for "archive-key", found nothing, and wrote and read every file unsigned.  In a
    fresh process (the environment and YAML files are read at import): a file saved under
    key A is signed, loads under A, and is refused under key B and under no key."""
    import subprocess
    import sys

    config = tmp_path / "dask-config"
    config.mkdir()
    yaml = config / "dgd.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["DASK_CONFIG"] = str(config)
    if how == "env":
        env["DASK_DGD__ARCHIVE_KEY"] = _KEY_A
    elif how.startswith("yaml"):
        yaml.write_text(f"dgd:\n  {'archive-key' if how == 'yaml-dash' else 'archive_key'}: {_KEY_A}\n")
    args = [sys.executable, "-c", _KEY_SCRIPT, how, str(tmp_path / "m.npz"), str(yaml), _KEY_A, _KEY_B]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    signed, under_a, under_b, under_none = out.stdout.strip().splitlines()
    assert (signed, under_a) == ("signed", "loaded 0.25")
    assert under_b.startswith("refused") and "wrong signature: tampered, or another key" in under_b, under_b
    assert under_none.startswith("refused") and "it is signed (HMAC-SHA256) but no dgd.archive-key is set" in under_none


# ------------------------------------------- issue 44: files never name functions or shadow methods
def _deferred(module, name):
    return {"__dataclass__": "dask_dgd.cli._main:_Deferred", "fields": {"module": module, "name": name}}


@pytest.mark.parametrize(("where", "name", "value"), [
    ("state", "save", _deferred("os", "remove")),
    ("state", "predict", _deferred("builtins", "print")),
    ("params", "scoring", _deferred("os", "system")),
])
def test_a_file_cannot_name_a_function_to_call(where, name, value, model, tmp_path):
    """The red team's forgeries (checksums recomputed, no key): ``save`` became os.remove,
    ``predict`` called print, a forged ``scoring`` was called in fit."""
    victim = tmp_path / "important.txt"
    victim.write_text("keep me")
    path = model.save(tmp_path / "m.npz")
    _forge(path, lambda meta: meta["content"][where].__setitem__(name, value))
    with pytest.raises(CheckpointError, match=r"names dataclass 'dask_dgd.cli._main:_Deferred', which is not one of "
                                              r"the types dask_dgd files hold .*; refused"):
        dask_dgd.load(path)
    assert victim.read_text() == "keep me"


_SCHEDULE = {"__dataclass__": "dask_dgd.optim._schedules:Constant", "fields": {"value": 0.1}}


@pytest.mark.parametrize(("where", "name", "message"), [
    ("state", "predict", r"it sets attribute 'predict' on LinearRegression, which is not one of its parameters or "
                         r"fitted attributes; refused"),
    ("state", "__class__", r"it sets attribute '__class__' on LinearRegression, which is not one"),
    ("state", "_parameter_constraints", r"it sets attribute '_parameter_constraints' on LinearRegression"),
    ("params", "scoring", r"parameter 'scoring' of LinearRegression is a Constant; files hold a scorer name or None"),
    ("params", "save", r"LinearRegression has no parameter 'save'; refused"),
])
def test_a_file_cannot_shadow_a_method_with_an_allowed_type(where, name, message, model, tmp_path):
    """Even a type files may hold (a schedule, which is callable) never replaces a method,
    a class attribute or a parameter that is never a callable."""
    path = model.save(tmp_path / "m.npz")
    _forge(path, lambda meta: meta["content"][where].__setitem__(name, _SCHEDULE))
    with pytest.raises(CheckpointError, match=message):
        dask_dgd.load(path)


def test_a_nested_estimator_cannot_shadow_a_method(tmp_path):
    from dask_dgd import ElasticNetCV

    path = ElasticNetCV().save(tmp_path / "m.npz")
    nested = {"__object__": "dask_dgd.linear_model._glm:LinearRegression", "state": {"fit": _SCHEDULE}}
    _forge(path, lambda meta: meta["content"]["state"].__setitem__("estimator_", nested))
    with pytest.raises(CheckpointError, match=r"the nested LinearRegression in the file: it sets attribute 'fit' on "
                                              r"LinearRegression, which is not one of its parameters"):
        dask_dgd.load(path)


def test_a_checkpoint_object_cannot_shadow_a_method():
    from dask_dgd._files.archive import decode

    forged = {"__object__": "dask_dgd._engine.stopping:WallClock", "state": {"elapsed": _SCHEDULE}}
    with pytest.raises(CheckpointError, match=r"the file sets 'elapsed' on a WallClock, a name its class defines"):
        decode(forged, {})
    for path in ("dask_dgd.callbacks:HistoryWriter", "dask_dgd.cli._common:Command", "dask_dgd._engine.train:Context"):
        with pytest.raises(CheckpointError, match=rf"names (class|dataclass) '{path}', which is not one of the types"):
            decode({"__object__" if "History" in path else "__dataclass__": path, "state": {}, "fields": {}}, {})


def test_the_command_line_defers_only_its_own_functions():
    from dask_dgd.cli._main import _Deferred

    with pytest.raises(ValueError, match=r"only public functions of \['._demo'\] \(in dask_dgd.cli\) are deferred"):
        _Deferred("os", "remove")
    forged = object.__new__(_Deferred)  # as a decoder would make it, without __post_init__
    object.__setattr__(forged, "module", "os")
    object.__setattr__(forged, "name", "remove")
    with pytest.raises(ValueError, match="only public functions"):
        forged("anything")
    object.__setattr__(forged, "module", "._demo")
    object.__setattr__(forged, "name", "np")  # a module the demo imported, not its function
    with pytest.raises(ValueError, match="dask_dgd.cli._demo defines no such function"):
        forged("anything")


# ---------------------------------------------------------------- issue 44: the allow-list fuzzed
def _fuzz_names(rng):
    from dask_dgd._files.schema import allowed_types

    allowed = sorted(f"{c.__module__}:{c.__qualname__}" for c in allowed_types())
    refused = ["dask_dgd.cli._main:_Deferred", "dask_dgd.callbacks:HistoryWriter", "dask_dgd.cli._common:Command",
               "dask_dgd._engine.runtime.clusters:LocalCluster", "os:remove", "builtins:print", "dask_dgd.__main__:main",
               "dask_dgd.persistence:save", "dask_dgd._validation:Interval", "dask_dgd", ":", "x" * 300]
    attributes = ["coef_", "intercept_", "n_features_in_", "classes_", "history_", "_opt_state_", "alpha", "solver",
                  "scoring", "callbacks", "client", "save", "predict", "fit", "get_params", "__class__", "__dict__",
                  "_parameter_constraints", "_FITTED", "__reduce__", "score", "", "0", "coef_ "]
    return allowed, refused, attributes


def _fuzz_value(rng, allowed, refused, attributes, arrays, depth=0):
    pick = int(rng.integers(12 if depth < 4 else 5))
    if pick == 0:
        return None
    if pick == 1:
        return float(rng.normal())
    if pick == 2:
        return int(rng.integers(-5, 5))
    if pick == 3:
        return str(rng.choice(attributes))
    if pick == 4:
        return {"__array__": str(rng.choice(list(arrays)))}
    sub = [_fuzz_value(rng, allowed, refused, attributes, arrays, depth + 1) for _ in range(int(rng.integers(3)))]
    fields = {str(rng.choice(attributes)): _fuzz_value(rng, allowed, refused, attributes, arrays, depth + 1)
              for _ in range(int(rng.integers(3)))}
    name = str(rng.choice(allowed if rng.random() < 0.7 else refused))
    if pick == 5:
        return sub
    if pick == 6:
        return {"__dataclass__": name, "fields": fields}
    if pick == 7:
        return {"__object__": name, "state": fields}
    if pick == 8:
        return {"__namedtuple__": name, "fields": sub}
    if pick == 9:
        return {"__dict__": fields}
    if pick == 10:
        return {"__tuple__": sub}
    return {"__sparse__": "csr", "shape": [int(rng.integers(-1, 4)), int(rng.integers(-1, 4))],
            "data": {"__array__": str(rng.choice(list(arrays)))}, "indices": {"__array__": str(rng.choice(list(arrays)))},
            "indptr": {"__array__": str(rng.choice(list(arrays)))}}


@pytest.mark.slow
def test_the_loader_fuzzed_over_the_allow_list_rebuilds_nothing_else(model):
    """2,000 forged contents (random allowed and refused type names, attribute names that
    are fitted attributes, parameters, methods and dunders, nested values): each load
    raises CheckpointError or gives an estimator holding only its parameters and declared
    fitted attributes, none of them a name its class defines or a callable outside the
    allow-list."""
    import copy

    import dask_dgd._files.archive as archive
    from dask_dgd._files.schema import allowed_types, fitted_attributes
    from dask_dgd.persistence import _from_content

    rng = np.random.default_rng(44)
    allowed, refused, attributes = _fuzz_names(rng)
    enc = archive.Encoder()
    base = {"params": {k: enc(v) for k, v in model.get_params().items() if k not in ("client", "callbacks")},
            "state": {k: enc(v) for k, v in model.__getstate__().items() if k not in model.get_params()}}  # as save
    arrays = {**enc.arrays, "i": np.arange(3), "big": np.array([10**9]), "f": np.array([np.nan, 1.0]),
              "s": np.array(["x", "y"])}
    classes = ["dask_dgd.linear_model._glm:LinearRegression", "dask_dgd.linear_model._logistic:LogisticRegression",
               "dask_dgd.recommender._mf:MatrixFactorization", "dask_dgd.cli._main:_Deferred", "os:remove"]
    loaded, other = 0, []
    for case in range(2000):
        content = copy.deepcopy(base)
        content["class"] = classes[case % len(classes)] if case % 7 == 0 else "dask_dgd.linear_model._glm:LinearRegression"
        where = "params" if rng.random() < 0.3 else "state"
        for _ in range(int(rng.integers(1, 4))):
            content[where][str(rng.choice(attributes))] = _fuzz_value(rng, allowed, refused, attributes, arrays)
        try:
            est = _from_content(content, arrays, "fuzz.npz")
        except CheckpointError:
            continue
        except Exception as err:  # noqa: BLE001 - what the test looks for
            other.append((case, type(err).__name__, str(err)[:200]))
            continue
        loaded += 1
        cls = type(est)
        params = set(cls._get_param_names())
        for name, value in vars(est).items():
            assert name in params or name in fitted_attributes(cls), (case, name)
            assert name in params or not hasattr(cls, name), (case, name)
            assert not callable(value) or type(value) in allowed_types(), (case, name, value)
    assert other == []
    assert loaded >= 10  # the fuzz also reaches files that are accepted


# ------------------------------------------------------- issue 44: arrays checked before use
def test_a_forged_sparse_index_is_refused_not_a_segfault(tmp_path):
    """A sparse coef_ index of 10**9 in a 5-feature model loaded, and predict ended in a
    segmentation fault in a Numba kernel without bounds checks."""
    import scipy.sparse as sp

    X5 = np.random.default_rng(1).normal(size=(40, 5))
    est = LinearRegression(solver="gd", alpha=0.1, l1_ratio=1.0, sparse_coef=True, max_iter=3).fit(X5, X5[:, 0])
    assert sp.issparse(est.coef_)
    est.coef_ = sp.csr_matrix((np.array([1.0]), np.array([10**9]), np.array([0, 1])), shape=(1, 5))
    with pytest.raises(CheckpointError, match=r"sparse csr matrix of shape \(1, 5\) has index 1000000000 outside "
                                              r"\[0, 5\) \(crafted\)"):
        dask_dgd.load(est.save(tmp_path / "m.npz"))


def test_a_coefficient_of_the_wrong_length_is_refused(model, tmp_path):
    model.coef_ = np.append(model.coef_, 1.0)
    with pytest.raises(CheckpointError, match=r"attribute 'coef_' of LinearRegression has 4 along n_features, but "
                                              r"n_features_in_ has 3; refused"):
        dask_dgd.load(model.save(tmp_path / "m.npz"))


# ------------------------------------------------- issue 44: forged members never decompressed
def test_a_forged_member_is_refused_without_being_decompressed(model, tmp_path):
    """A member whose declared sizes are consistent (metadata and zip) but whose bytes
    are not those the checksum names was decompressed whole before the checksum failed
    (the red team's 1.9 GiB member peaked at twice dgd.archive-max-bytes): its bytes are
    now streamed through the checksum first, and nothing the size of the member is
    allocated."""
    import tracemalloc

    path = model.save(tmp_path / "m.npz")
    n = 8 * 2**20  # 64 MiB of float64 zeros: a few hundred KiB deflated
    members = _members(path)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
    meta = json.loads(np.load(io.BytesIO(members.pop("__meta__.npy"))).tobytes())
    meta["arrays"]["forged"] = "0" * 64
    meta["sizes"]["forged"] = ["<f8", [n]]
    meta["meta_sha256"] = _meta_digest(meta)
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__meta__.npy", buf.getvalue())
        for name, data in members.items():
            zf.writestr(name, data)
        with zf.open("forged.npy", "w") as fh:
            fh.write(header.getvalue())
            for _ in range(8):
                fh.write(bytes(2**23))
    assert os.path.getsize(path) < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"the checksum of array 'forged' does not match"):
            dask_dgd.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak:,} bytes allocated for a forged member of {8 * n:,}"


def test_a_missing_member_is_named(model, tmp_path):
    """It read "holds members [] that its metadata does not list"."""
    path = model.save(tmp_path / "m.npz")
    members = _members(path)
    gone = next(name for name in sorted(members) if name != "__meta__.npy")
    del members[gone]
    _write_members(path, members)
    with pytest.raises(CheckpointError, match=rf"member '{gone}' that its metadata lists is missing from the file "
                                              r"\(truncated, or removed: tampered\)"):
        dask_dgd.load(path)

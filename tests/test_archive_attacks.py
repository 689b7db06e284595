"""The red-team's archive attacks, each kept as a case (issue 22): signing keys from the
environment, zip bombs, crafted content, forged callbacks, file permissions, and a fuzz
test over random mutations of valid files (every one refused with CheckpointError)."""

import io
import json
import os
import resource
import stat
import zipfile

import dask
import numpy as np
import pytest

import dask_dgd
from dask_dgd import LinearRegression
from dask_dgd._archive import _meta_digest
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
    meta["arrays"] = {k: __import__("dask_dgd._archive", fromlist=["_digest"])._digest(v) for k, v in stored.items()}
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
def test_a_zip_bomb_is_refused_before_decompressing(model, tmp_path):
    """3 GB of zeros compresses to a few MB: refused from the zip's declared sizes, with
    the process's memory nowhere near the bomb's size."""
    path = model.save(tmp_path / "m.npz")
    members = _members(path)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (3 * 2**27,)})
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        with zf.open("bomb.npy", "w", force_zip64=True) as fh:
            fh.write(header.getvalue())
            chunk = bytes(2**24)
            for _ in range(3 * 2**27 * 8 // len(chunk)):
                fh.write(chunk)
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
    with pytest.raises(CheckpointError, match=r"is not a valid dask_dgd model file: malformed content \("):
        dask_dgd.load(path)


def test_a_forged_callback_is_never_restored(model, tmp_path):
    """The docs say callbacks come back as None: a forged unsigned file naming a
    HistoryWriter must not make the next fit write where it says."""
    path = model.save(tmp_path / "m.npz")
    target = tmp_path / "written-by-forgery.csv"
    from dask_dgd._archive import Encoder

    enc = Encoder()
    forged = enc([HistoryWriter(str(target))])

    def change(meta):
        meta["content"]["params"]["callbacks"] = forged
        meta["content"]["state"]["callbacks"] = forged

    _forge(path, change, arrays=enc.arrays)
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
                from dask_dgd._archive import read_archive

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

"""The safe on-disk format of checkpoints and saved models: one ``.npz`` file.

An archive is a NumPy ``.npz`` file (a zip of ``.npy`` arrays) read with
``allow_pickle=False``: every array is plain numbers or fixed-width strings, and the
structure around them (what each array is, scalars, strings, lists) is JSON, stored in
the same file as the array ``__meta__`` (UTF-8 bytes).  Nothing is ever unpickled, so
loading an archive cannot run code.

Integrity: the metadata holds the SHA-256 of every array (its dtype, shape and bytes)
and of itself; a truncated file, a flipped byte, an array added or removed, or an
object (pickle) array is refused with :class:`~dask_dgd.exceptions.CheckpointError`.
Checksums catch corruption and careless edits, not a forger, who can recompute them.
Against deliberate tampering set a secret key (dask config ``dgd.archive-key``, spelt
with ``-`` or ``_``, set in code, a YAML config file or the environment variable
``DASK_DGD__ARCHIVE_KEY``): files are then signed with HMAC-SHA256, and only files with
a valid signature under that key are read; a signed file is refused where no key is set.
Arrays are read streaming, each member bounded by the size its header and the metadata
record and by ``dgd.archive-max-bytes``, and (C-ordered ones) checked against their
checksum before any memory is allocated for them.
Writes are atomic: the file is written under a temporary name in the same folder,
flushed to disk, then renamed over the target, so a reader sees the old file or the new
one, never half of one.  The temporary name holds the writer's host and process id
(``.dgd-<host>-<pid>-*.npz.tmp``), so that one left by a process killed mid-write can
be told from one being written (:func:`stale_temporaries`; a checkpoint removes those
of its folder when it is written).

Python values are encoded by :func:`encode`: None, bools, numbers, strings, lists,
tuples, dicts, NumPy arrays and scalars, SciPy CSR/CSC matrices, pandas DataFrames and
Indexes, xarray DataArrays, NumPy RandomStates, and dask_dgd's own objects (estimators,
optimizers, optimizer states, schedules, compressors, climate feature specs).  Decoding
recreates only those types: a class must be one of
:func:`dask_dgd._files.schema.allowed_types`, whatever the file says, and an estimator is
rebuilt from its declared parameters and fitted attributes only (:mod:`dask_dgd._files.schema`).
"""

import dataclasses
import hashlib
import hmac
import json
import math
import os
import tempfile
import zipfile
from pathlib import Path, PurePath

import numpy as np

from ..exceptions import CheckpointError
from .schema import _PACKAGE, UNSAVED_PARAMS, allowed_class, rebuild_object

__all__ = ["read_archive", "write_archive", "encode", "decode", "stale_temporaries"]

FORMAT = "dask_dgd-archive"
VERSION = 1
_META = "__meta__"


# ------------------------------------------------------------------ files
def _digest(arr):
    h = hashlib.sha256()
    h.update(f"{arr.dtype.str}|{arr.shape}|".encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _meta_digest(meta):
    body = {k: v for k, v in meta.items() if k not in ("meta_sha256", "hmac_sha256")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


#: The shortest signing key accepted (bytes; a str is UTF-8 encoded): HMAC pads short
#: keys with zeros, so a short key is close to no key at all.
MIN_KEY_BYTES = 16

#: Largest total size (bytes) of an archive's arrays once decompressed, unless dask config
#: ``dgd.archive-max-bytes`` says otherwise: checked against the sizes the zip declares,
#: before anything is decompressed (a 3 MB zip bomb declares its 3 GB).
MAX_BYTES_DEFAULT = 2 * 2**30

#: Largest metadata (JSON) accepted, bytes.
MAX_META_BYTES = 256 * 2**20


_UNSET = object()


def _archive_key():
    """The signing key (bytes) from dask config ``dgd.archive-key``, or None when it is not
    set.  Only a str or bytes of at least :data:`MIN_KEY_BYTES` bytes is a key: dask's
    config parses ``DASK_DGD__ARCHIVE_KEY=42`` as the integer 42 (``bytes(42)`` would be 42
    zero bytes, which HMAC treats as the empty key), ``True`` as a bool, ``None`` as
    None; every such value is refused, never used or ignored."""
    import dask

    # dask.config.get canonicalises "-" and "_": DASK_DGD__ARCHIVE_KEY arrives as
    # dgd.archive_key, a YAML file may spell either; a raw ``in`` test on the dict missed
    # the underscore spelling and wrote and read every file unsigned
    key = dask.config.get("dgd.archive-key", _UNSET)
    if key is _UNSET:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes):
        raise CheckpointError(
            f"dask config dgd.archive-key must be a string of at least {MIN_KEY_BYTES} characters; got "
            f"{type(key).__name__} {key!r} (an environment value that looks like a number, a boolean or None is "
            "parsed as one: use a longer random string, e.g. from python -c 'import secrets; "
            "print(secrets.token_hex(32))', or unset it to write unsigned files)"
        )
    if len(key) < MIN_KEY_BYTES:
        raise CheckpointError(
            f"dask config dgd.archive-key is {len(key)} bytes long; at least {MIN_KEY_BYTES} are needed "
            "(HMAC pads short keys with zeros): use a longer random string"
        )
    return key


def _max_bytes():
    import dask

    value = dask.config.get("dgd.archive-max-bytes", MAX_BYTES_DEFAULT)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"dask config dgd.archive-max-bytes must be an int > 0; got {value!r}")
    return value


def _signature(key, meta):
    return hmac.new(key, _meta_digest(meta).encode(), hashlib.sha256).hexdigest()


def write_archive(path, kind, content, arrays):
    """Write ``content`` (JSON-able) and ``arrays`` (name -> ndarray) to ``path`` atomically.

    ``kind`` says what the archive holds ("model" or "checkpoint"); readers check it.
    """
    path = os.fspath(path)
    for name, arr in arrays.items():
        if arr.dtype.hasobject:
            raise CheckpointError(f"array {name!r} holds Python objects; archives store numbers and strings only")
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "content": content,
        "arrays": {name: _digest(arr) for name, arr in arrays.items()},
        # what each array decompresses to, checked against the zip before decompressing
        "sizes": {name: [arr.dtype.str, list(arr.shape)] for name, arr in arrays.items()},
    }
    meta["meta_sha256"] = _meta_digest(meta)
    key = _archive_key()
    if key is not None:
        meta["hmac_sha256"] = _signature(key, meta)
    # insertion order kept in the file (e.g. history columns); the checksum is over a
    # canonical (sorted) form, so it does not depend on the order
    raw = np.frombuffer(json.dumps(meta, allow_nan=False).encode(), dtype=np.uint8)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # named by its writer (host, process): a file left by a writer that died mid-write
    # can be told from one being written (see stale_temporaries)
    fd, tmp = tempfile.mkstemp(prefix=f".dgd-{_writer_tag()}-", suffix=_TMP_SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **{_META: raw}, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(path))  # mkstemp's 0600 would ignore the umask
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


_TMP_SUFFIX = ".npz.tmp"


def _host():
    import socket

    return "".join(c for c in socket.gethostname() if c.isascii() and c.isalnum())[:32]


def _writer_tag():
    return f"{_host()}-{os.getpid()}"


def stale_temporaries(folder):
    """The temporary files in ``folder`` left by :func:`write_archive` calls whose
    process died mid-write (killed): written on this host by a process that no longer
    exists.  A file of a live process (being written) or of another host (whose
    processes cannot be seen from here) is never listed."""
    import re

    if os.name != "posix":  # (elsewhere os.kill(pid, 0) would end the process)
        return []
    pattern = re.compile(rf"\.dgd-{re.escape(_host())}-(\d+)-.*{re.escape(_TMP_SUFFIX)}")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    stale = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            stale.append(os.path.join(folder, name))
        except (OverflowError, OSError):
            pass  # alive under another user (PermissionError), or not a process id
    return stale


def _umask():
    """This process's umask (read from /proc where it can be, without changing it)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode(path):
    """The permissions a written file gets: those of the file it replaces, else the
    usual ``0o666`` less the umask (as ``open`` would give)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def read_archive(path, kind):
    """``(content, arrays)`` of the archive at ``path``, verified; CheckpointError if it
    is missing, truncated, tampered with, holds pickles, or is not a ``kind`` archive."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"no {kind} file at {path!r}")
    what = f"{path!r} is not a valid dask_dgd {kind} file"
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{what}: it is not a NumPy .npz archive (truncated, or another format)")
    try:
        with zipfile.ZipFile(path) as zf:
            members = {info.filename: info for info in zf.infolist()}
            meta = _read_meta(zf, members, what)
            _check_signature(meta, what)
            _check_header(meta, path, kind, what)
            _check_sizes(meta, members, what)
            arrays = _read_arrays(zf, members, meta, what)
    except CheckpointError:
        raise
    except Exception as err:  # zipfile and numpy raise many types on damaged bytes
        raise CheckpointError(f"{what}: {type(err).__name__}: {err} (truncated or corrupted)") from err
    return meta["content"], arrays


def _check_header(meta, path, kind, what):
    """The metadata's version, kind and the entries every archive has."""
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{what}: format version {meta.get('version')} (this dask_dgd reads {VERSION})")
    if meta.get("kind") != kind:
        raise CheckpointError(f"{path!r} is a dask_dgd {meta.get('kind')} file, not a {kind} file")
    expected = meta.get("arrays")
    if not isinstance(expected, dict) or "content" not in meta or not all(
            isinstance(v, str) for v in expected.values()):
        raise CheckpointError(f"{what}: its metadata is malformed (corrupted)")


def _read_meta(zf, members, what):
    """The archive's metadata, parsed; refused if missing, oversized or not JSON."""
    info = members.get(_META + ".npy")
    if info is None:
        raise CheckpointError(f"{what}: it has no dask_dgd metadata")
    if info.file_size > MAX_META_BYTES:
        raise CheckpointError(f"{what}: its metadata declares {info.file_size:,} bytes (corrupted or crafted)")
    with zf.open(info) as fh:
        dtype, shape, fortran = _npy_header(fh, what)
        if dtype != np.uint8 or len(shape) != 1 or fortran:
            raise CheckpointError(f"{what}: its metadata is not a byte string (corrupted)")
        raw = _read_exactly(fh, shape[0], what, _META)
    try:
        meta = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: JSON, or a huge integer
        raise CheckpointError(f"{what}: its metadata is not valid JSON (corrupted)") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{what}: unknown format")
    try:
        digest = _meta_digest(meta)
    except (ValueError, TypeError, RecursionError) as err:
        raise CheckpointError(f"{what}: its metadata cannot be checked ({type(err).__name__})") from err
    if meta.get("meta_sha256") != digest:
        raise CheckpointError(f"{what}: the metadata checksum does not match (corrupted or edited)")
    return meta


def _check_signature(meta, what):
    key = _archive_key()
    if key is None and "hmac_sha256" in meta:
        # it was written where a key was set: loading it unverified would hide a key that
        # did not reach this process (as DASK_DGD__ARCHIVE_KEY once failed to)
        raise CheckpointError(
            f"{what}: it is signed (HMAC-SHA256) but no dgd.archive-key is set here; set the key it was signed "
            "with (dask config dgd.archive-key or DASK_DGD__ARCHIVE_KEY)"
        )
    if key is not None:
        signature = meta.get("hmac_sha256")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _signature(key, meta)):
            raise CheckpointError(
                f"{what}: it is not signed with this dgd.archive-key ("
                f"{'unsigned' if signature is None else 'wrong signature: tampered, or another key'})"
            )


def _check_sizes(meta, members, what):
    """Before any array is decompressed: the zip's members are the arrays the metadata
    lists, their declared sizes within the cap, and (files that record them) equal to
    what the metadata says each array is."""
    others = sorted(name for name in members if not name.endswith(".npy"))
    if others:
        raise CheckpointError(f"{what}: it holds {others[0]!r}, which is not an array")
    declared = sum(info.file_size for name, info in members.items() if name != _META + ".npy")
    limit = _max_bytes()
    if declared > limit:
        raise CheckpointError(
            f"{what}: its arrays would take {declared:,} bytes once decompressed, over the limit of "
            f"{limit:,} (dask config dgd.archive-max-bytes; a zip bomb, or raise the limit)"
        )
    sizes = meta.get("sizes")
    if sizes is None:  # files written before sizes were recorded: the cap alone
        return
    _check_members(meta, members, what)
    if not isinstance(sizes, dict) or set(sizes) != set(meta["arrays"]):
        raise CheckpointError(f"{what}: its recorded array sizes do not name the arrays it lists (tampered)")
    try:
        for name, (dtype, shape) in sizes.items():
            info = members[name + ".npy"]
            nbytes = np.dtype(dtype).itemsize * math.prod(int(n) for n in shape)
            if not nbytes <= info.file_size <= nbytes + 4096:  # the .npy header is at most a few KiB
                raise CheckpointError(
                    f"{what}: array {name!r} declares {info.file_size:,} bytes, not the {nbytes:,} of its "
                    "recorded shape (corrupted or crafted)"
                )
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{what}: its array sizes are malformed or do not match ({err!r})") from err


def _check_members(meta, members, what):
    """The zip holds exactly the arrays the metadata lists; else which are extra, or missing."""
    held = {name[:-4] for name in members if name.endswith(".npy")} - {_META}
    listed = set(meta["arrays"])
    if held - listed:
        raise CheckpointError(
            f"{what}: it holds members {sorted(f'{n}.npy' for n in held - listed)} that its metadata does not "
            "list (tampered)"
        )
    if listed - held:
        missing = sorted(f"{n}.npy" for n in listed - held)
        raise CheckpointError(
            f"{what}: member{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} that its "
            "metadata lists "
            f"{'are' if len(missing) > 1 else 'is'} missing from the file (truncated, or removed: tampered)"
        )


#: Bytes decompressed at a time: an array's bytes are streamed, never read whole.
_CHUNK = 2**20


def _npy_header(fh, what):
    """``(dtype, shape, fortran_order)`` from the ``.npy`` header at ``fh``'s position."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise CheckpointError(f"{what}: it contains pickled Python objects, which are never loaded") from err
        raise CheckpointError(f"{what}: {err} (truncated or corrupted)") from err
    if dtype.hasobject:
        raise CheckpointError(f"{what}: it contains pickled Python objects, which are never loaded")
    return dtype, shape, fortran


def _read_exactly(fh, nbytes, what, name, into=None, digest=None):
    """Stream ``nbytes`` from ``fh`` in chunks into the buffer ``into`` (or into a
    ``bytes`` when None; ``digest``: a hash object fed each chunk); refused as soon as
    the member ends early or holds more than ``nbytes``."""
    view = None if into is None else memoryview(into.reshape(-1).view(np.uint8))
    parts = [] if into is None and digest is None else None
    done = 0
    while done < nbytes:
        chunk = fh.read(min(_CHUNK, nbytes - done))
        if not chunk:
            raise CheckpointError(f"{what}: array {name!r} ends after {done:,} of its {nbytes:,} bytes (truncated)")
        if view is not None:
            view[done:done + len(chunk)] = chunk
        if digest is not None:
            digest.update(chunk)
        if parts is not None:
            parts.append(chunk)
        done += len(chunk)
    if fh.read(1):
        raise CheckpointError(f"{what}: array {name!r} holds more than the {nbytes:,} bytes of its header (crafted)")
    return b"".join(parts) if parts is not None else None


def _read_arrays(zf, members, meta, what):
    """Every array, each checked before it is kept: its ``.npy`` header against the
    recorded dtype and shape, then (C-ordered arrays) its bytes streamed through its
    checksum before anything is allocated, so that a forged member is refused without
    ever being held in memory; only then is it read into an array of its size."""
    sizes = meta.get("sizes")
    budget = _max_bytes()
    arrays = {}
    for member, info in members.items():
        if member == _META + ".npy":
            continue
        name = member[:-4]
        with zf.open(info) as fh:
            dtype, shape, fortran = _npy_header(fh, what)
            if name not in meta["arrays"]:
                _check_members(meta, members, what)
            if sizes is not None and [dtype.str, list(shape)] != sizes[name]:
                raise CheckpointError(
                    f"{what}: array {name!r} is {dtype.str} {tuple(shape)} in its header, not the recorded "
                    f"{sizes[name][0]} {tuple(sizes[name][1])} (tampered)"
                )
            nbytes = dtype.itemsize * math.prod(shape)
            budget -= nbytes
            if budget < 0 or fh.tell() + nbytes != info.file_size:
                raise CheckpointError(
                    f"{what}: array {name!r} declares {info.file_size:,} bytes, not the {nbytes:,} of its header "
                    "(corrupted or crafted)"
                )
            if not fortran:  # the checksum first, streamed: nothing allocated for a forged member
                digest = hashlib.sha256(f"{dtype.str}|{tuple(shape)}|".encode())
                _read_exactly(fh, nbytes, what, name, digest=digest)
                _check_digest(meta, name, digest.hexdigest(), what)
        with zf.open(info) as fh:
            _npy_header(fh, what)
            arr = np.empty(shape[::-1] if fortran else shape, dtype=dtype)
            _read_exactly(fh, nbytes, what, name, into=arr)
        if fortran:
            arr = arr.T
            _check_digest(meta, name, _digest(arr), what)
        arrays[name] = arr
    _check_members(meta, members, what)  # files without recorded sizes: once their headers are read
    return arrays


def _check_digest(meta, name, digest, what):
    if not hmac.compare_digest(digest, meta["arrays"][name]):
        raise CheckpointError(f"{what}: the checksum of array {name!r} does not match (corrupted or tampered)")


# ------------------------------------------------------------------ values
def _class_path(cls):
    return f"{cls.__module__}:{cls.__qualname__}"


#: dtype kinds an array in a file may have: booleans, numbers, strings, dates and times.
_ARRAY_KINDS = "biufcSUMm"


class Encoder:
    """Turns Python values into JSON plus arrays (collected in ``self.arrays``)."""

    def __init__(self):
        self.arrays = {}

    def array(self, arr):
        arr = np.asarray(arr)
        tag = {}
        if arr.dtype.hasobject:
            flat = arr.ravel()
            if all(isinstance(v, str) for v in flat):
                arr = arr.astype(str) if arr.size else np.zeros(arr.shape, dtype="U1")
                tag["object"] = True
            else:
                kinds = sorted({type(v).__name__ for v in flat})
                raise CheckpointError(f"cannot save an array of Python objects of types {kinds}")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = arr
        return {"__array__": name, **tag}

    def __call__(self, value):
        import pandas as pd
        import scipy.sparse as sp

        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
            return int(value) if isinstance(value, int) else {"__scalar__": self.array(np.asarray(value))}
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, (np.generic,)):
            return {"__scalar__": self.array(np.asarray(value))}
        if isinstance(value, np.ndarray):
            return self.array(value)
        if isinstance(value, np.dtype):
            return {"__dtype__": value.str}
        if isinstance(value, PurePath):
            return {"__path__": str(value)}
        if isinstance(value, np.random.RandomState):
            name, keys, pos, has_gauss, cached = value.get_state()
            return {"__randomstate__": [name, self.array(keys), int(pos), int(has_gauss), float(cached)]}
        if sp.issparse(value):
            m = value.tocsr() if value.format not in ("csr", "csc") else value
            return {"__sparse__": m.format, "shape": list(m.shape), "data": self.array(m.data),
                    "indices": self.array(m.indices), "indptr": self.array(m.indptr)}
        if isinstance(value, pd.DataFrame):
            return {"__dataframe__": [self(str(c)) for c in value.columns],
                    "data": [self._column(value[c]) for c in value.columns],
                    "index": self(value.index)}
        if isinstance(value, pd.Index):
            return {"__index__": self._column(value), "name": self(value.name)}
        if _is_dataarray(value):
            return {"__dataarray__": self(value.name), "dims": list(value.dims), "values": self.array(value.values),
                    "coords": {k: {"dims": list(c.dims), "values": self.array(c.values), "attrs": self(dict(c.attrs))}
                               for k, c in value.coords.items()},
                    "attrs": self(dict(value.attrs))}
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):
            return {"__namedtuple__": _class_path(type(value)), "fields": [self(v) for v in value]}
        if isinstance(value, tuple):
            return {"__tuple__": [self(v) for v in value]}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self(v) for k, v in value.items()}}
            return {"__items__": [[self(k), self(v)] for k, v in value.items()]}
        cls = type(value)
        if cls.__module__.split(".")[0] == _PACKAGE:
            if dataclasses.is_dataclass(value):
                fields = {f.name: self(getattr(value, f.name)) for f in dataclasses.fields(value)}
                return {"__dataclass__": _class_path(cls), "fields": fields}
            state = value.__getstate__() if hasattr(value, "__getstate__") else vars(value)
            if isinstance(state, dict) and hasattr(value, "get_params"):  # a nested estimator
                state = {k: (None if k in UNSAVED_PARAMS or (k == "scoring" and callable(v)) else v)
                         for k, v in state.items()}
            if isinstance(state, dict):
                return {"__object__": _class_path(cls), "state": {k: self(v) for k, v in state.items()}}
        raise CheckpointError(
            f"cannot save a value of type {cls.__module__}.{cls.__qualname__} in a dask_dgd file "
            "(numbers, strings, arrays, data frames and dask_dgd objects only)"
        )

    def _column(self, col):
        values = np.asarray(col)
        if values.dtype.hasobject and not all(isinstance(v, str) for v in values):
            return {"__list__": [self(v) for v in values]}
        return self.array(values)


def _is_dataarray(value):
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - xarray is a dependency of the climate extra
        return False
    return isinstance(value, xr.DataArray)


def encode(value):
    """``(json_value, arrays)`` for a Python value; see the module docstring."""
    enc = Encoder()
    return enc(value), enc.arrays


def decode(data, arrays):
    """The Python value that :func:`encode` gave ``(data, arrays)`` for.

    Only the classes of :func:`dask_dgd._files.schema.allowed_types` are rebuilt, by
    :func:`dask_dgd._files.schema.rebuild_object`: a plain object's state may not set a name
    its class defines (a method, property or class attribute), and an estimator holds
    its parameters and the fitted attributes it declares, each checked.  Sparse
    matrices are checked in full (indices within the shape, ``indptr`` non-decreasing)."""
    def arr(ref):
        name = ref.get("__array__")
        if not isinstance(name, str) or name not in arrays:
            raise CheckpointError(f"the file refers to a missing array {name!r} (corrupted)")
        a = arrays[name]
        if a.dtype.kind not in _ARRAY_KINDS or a.dtype.fields is not None:
            raise CheckpointError(f"array {name!r} has dtype {a.dtype}, which dask_dgd files never hold (crafted)")
        if ref.get("object"):
            if a.dtype.kind != "U":
                raise CheckpointError(f"array {name!r} is marked as strings but has dtype {a.dtype} (crafted)")
            return a.astype(object)
        return a

    def go(v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [go(x) for x in v]
        if not isinstance(v, dict):
            raise CheckpointError(f"unexpected value {v!r} in the file (corrupted)")
        if "__array__" in v:
            return arr(v)
        if "__scalar__" in v:
            return arr(v["__scalar__"])[()]
        if "__float__" in v:
            return float(v["__float__"])
        if "__dtype__" in v:
            dtype = np.dtype(v["__dtype__"])
            if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
                raise CheckpointError(f"the file names dtype {dtype}, which dask_dgd files never hold (crafted)")
            return dtype
        if "__path__" in v:
            return Path(v["__path__"])
        if "__tuple__" in v:
            return tuple(go(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {k: go(x) for k, x in v["__dict__"].items()}
        if "__items__" in v:
            return {_hashable(go(k)): go(x) for k, x in v["__items__"]}
        if "__list__" in v:
            out = np.empty(len(v["__list__"]), dtype=object)
            out[:] = [go(x) for x in v["__list__"]]
            return out
        if "__randomstate__" in v:
            name, keys, pos, has_gauss, cached = v["__randomstate__"]
            rs = np.random.RandomState()
            rs.set_state((name, arr(keys), pos, has_gauss, cached))
            return rs
        if "__sparse__" in v:
            return _sparse(v, arr)
        if "__dataframe__" in v:
            import pandas as pd

            cols = [go(c) for c in v["__dataframe__"]]
            data = {c: go(d) for c, d in zip(cols, v["data"])}
            return pd.DataFrame(data, columns=cols, index=go(v["index"]))
        if "__index__" in v:
            import pandas as pd

            return pd.Index(go(v["__index__"]), name=go(v["name"]))
        if "__dataarray__" in v:
            import xarray as xr

            coords = {k: xr.Variable(c["dims"], arr(c["values"]), attrs=go(c["attrs"])) for k, c in v["coords"].items()}
            return xr.DataArray(arr(v["values"]), dims=v["dims"], coords=coords, name=go(v["__dataarray__"]),
                                attrs=go(v["attrs"]))
        if "__namedtuple__" in v:
            cls = allowed_class(v["__namedtuple__"], "named tuple")
            if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
                raise CheckpointError(f"{v['__namedtuple__']!r} is not a named tuple")
            fields = v["fields"]
            if not isinstance(fields, list) or len(fields) != len(cls._fields):
                raise CheckpointError(f"{v['__namedtuple__']!r} has {len(cls._fields)} fields, not what the file holds")
            return cls(*[go(x) for x in fields])
        if "__dataclass__" in v:
            cls = allowed_class(v["__dataclass__"], "dataclass")
            if not dataclasses.is_dataclass(cls):
                raise CheckpointError(f"{v['__dataclass__']!r} is not a dataclass")
            obj = object.__new__(cls)
            names = {f.name for f in dataclasses.fields(cls)}
            for k, x in v["fields"].items():
                if k not in names:
                    raise CheckpointError(f"{v['__dataclass__']!r} has no field {k!r}")
                object.__setattr__(obj, k, go(x))
            return obj
        if "__object__" in v:
            cls = allowed_class(v["__object__"], "class")
            return rebuild_object(cls, {k: go(x) for k, x in v["state"].items()})
        raise CheckpointError(f"unknown value {sorted(v)} in the file (corrupted or from a newer dask_dgd)")

    return go(data)


def _sparse(v, arr):
    """A CSR/CSC matrix from the file, checked in full before anything uses it (a forged
    column index past the shape used to crash a Numba kernel)."""
    import scipy.sparse as sp

    fmt, shape = v["__sparse__"], v["shape"]
    if fmt not in ("csr", "csc"):
        raise CheckpointError(f"sparse format {fmt!r} in the file; dask_dgd files hold csr and csc only")
    if (not isinstance(shape, list) or len(shape) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**62 for n in shape)):
        raise CheckpointError(f"sparse matrix of shape {shape!r} in the file (crafted)")
    data, indices, indptr = arr(v["data"]), arr(v["indices"]), arr(v["indptr"])
    if data.ndim != 1 or data.dtype.kind not in "biuf":
        raise CheckpointError(f"sparse matrix values of dtype {data.dtype}, shape {data.shape} in the file (crafted)")
    for what, a in (("indices", indices), ("indptr", indptr)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise CheckpointError(f"sparse matrix {what} of dtype {a.dtype} and shape {a.shape} in the file (crafted)")
    major, minor = shape if fmt == "csr" else shape[::-1]
    if (len(indptr) != major + 1 or len(indices) != len(data) or (len(indptr) and indptr[0] != 0)
            or (len(indptr) and indptr[-1] != len(indices)) or np.any(np.diff(indptr.astype(np.int64)) < 0)):
        raise CheckpointError(
            f"sparse {fmt} matrix of shape {tuple(shape)} with inconsistent indptr (length {len(indptr)}) "
            f"for {len(indices)} entries (crafted)"
        )
    bad = indices[(indices < 0) | (indices >= minor)] if len(indices) else indices
    if len(bad):
        raise CheckpointError(
            f"sparse {fmt} matrix of shape {tuple(shape)} has index {int(bad[0])} outside [0, {minor}) (crafted)"
        )
    make = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    return make((data, indices, indptr), shape=tuple(shape))


def _hashable(k):
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k

"""Blocks on the workers: assembled, checked and summarised where they live.

A :class:`Block` is one row block (features, targets, weights); a :class:`Shard` the
blocks of one group.  These functions run where the data is (as setup tasks, or in
process): they turn a group's chunks into a shard of validated blocks, summarise them
(total weight, target sums, label counts), encode class labels, and take row samples.
Errors name the block.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ..._backend import asarray_like, dtype_name, finfo_max, get_namespace, is_sparse, take_rows, to_numpy
from ...exceptions import BlockError, ChunkingError, DGDError, InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import TypeVar

    import dask.array as da
    import numpy.typing as npt

    T = TypeVar("T")

__all__ = [
    "Block",
    "Shard",
    "check_block_values",
    "check_chunking",
    "check_finite_block",
    "encode_shard",
    "make_shard",
    "shard_check_finite",
    "shard_sample",
    "shard_summary",
    "block_digest",
    "take_blocks",
    "combine_shards",
]


@dataclass(frozen=True)
class Block:
    """One row block: features, targets and optional sample weights."""

    # (arrays of any namespace: NumPy, CuPy, or their sparse matrices)
    index: int
    X: Any
    y: Any
    sample_weight: Any = None

    @property
    def n_rows(self) -> int:
        return self.X.shape[0]


@dataclass(frozen=True)
class Shard:
    """The blocks of one group, in block order; lives in a worker's memory."""

    blocks: tuple[Block, ...]

    @property
    def n_rows(self) -> int:
        return sum(b.n_rows for b in self.blocks)


def take_blocks(shard: Shard, indices: Iterable[int]) -> Shard:
    """The shard of only these blocks (runs where ``shard`` lives; shares the arrays)."""
    keep = set(indices)
    return Shard(tuple(b for b in shard.blocks if b.index in keep))


def _aligned(a: T) -> T:
    # (the ignores on requirements="CA": NumPy reads the flags letter by letter; its stubs want a list)
    return np.require(a, requirements="CA") if isinstance(a, np.ndarray) else a  # type: ignore[arg-type]


def combine_shards(*shards: Shard) -> Shard:
    """One shard of all these shards' blocks, in block order (runs on the new worker).

    Arrays that arrived over the network are made C-contiguous and aligned again, as at
    assembly, so that moved blocks sum exactly as they did before the move.
    """
    blocks = sorted((b for s in shards for b in s.blocks), key=lambda b: b.index)
    return Shard(tuple(
        Block(b.index, _aligned(b.X), _aligned(b.y), None if b.sample_weight is None else _aligned(b.sample_weight))
        for b in blocks
    ))


def _describe(block: Block, name: str = "X") -> str:
    """Where a bad value is: the block and the shape of the array ``name`` there
    (X, y or sample_weight: each its own shape, a 1-D y is not X's)."""
    a = {"X": block.X, "y": block.y, "sample_weight": block.sample_weight}[name]
    shape = tuple(a.shape)
    return f"block {block.index} (shape {shape})" if name == "X" else f"block {block.index} ({name}'s shape {shape})"


def _first_row(a: Any, bad: Callable[[Any, Any], Any]) -> int | None:
    """The first row of a block's array (dense or sparse, 1-D or 2-D) where
    ``bad(values, xp)`` holds for some entry, or None; for error messages only (a
    host copy of the mask)."""
    if is_sparse(a):
        a = a.tocsr()
        hits = np.flatnonzero(to_numpy(bad(a.data, get_namespace(a.data))))
        return int(np.searchsorted(to_numpy(a.indptr), hits[0], side="right") - 1) if len(hits) else None
    mask = np.asarray(to_numpy(bad(a, get_namespace(a))))
    hits = np.flatnonzero(mask.any(axis=1) if mask.ndim == 2 else mask)
    return int(hits[0]) if len(hits) else None


def _where(block: Block, name: str, bad: Callable[[Any, Any], Any]) -> str:
    """``_describe`` and the first bad row: "block 3 (y's shape (10,)), first at row 4 of the block"."""
    a = {"X": block.X, "y": block.y, "sample_weight": block.sample_weight}[name]
    row = _first_row(a, bad)
    return _describe(block, name) + ("" if row is None else f", first at row {row} of the block")


def _not_finite(a: Any, xp: Any) -> Any:
    return ~xp.isfinite(a)


def _bad_weight(a: Any, xp: Any) -> Any:
    return ~xp.isfinite(a) | (a < 0)


def _above(limit: float) -> Callable[[Any, Any], Any]:
    def above(a: Any, xp: Any) -> Any:
        return xp.abs(a) > limit
    return above


def _all_finite(a: Any) -> bool:
    if a is None:
        return True
    if is_sparse(a):
        a = a.data
    xp = get_namespace(a)
    return bool(xp.all(xp.isfinite(a)))


def _as_float(a: Any, *, sparse_ok: bool) -> Any:
    """Cast a block to float64 or float32 (float32 stays float32; float16 and integers
    become float64, as scikit-learn's ``validate_data(dtype=[np.float64, np.float32])``
    makes them for in-memory X), CSR for sparse.

    NumPy blocks are also made C-contiguous and aligned: an array deserialised from the
    network can sit at an odd offset in its buffer, and NumPy then skips BLAS for a
    slower loop that sums in another order, so results would depend on the transfer.
    """
    if is_sparse(a):
        if not sparse_ok:
            raise InputError(f"y must be dense; got a sparse {type(a).__name__}")
        a = a.tocsr()
        if a.dtype not in (np.float64, np.float32):
            a = a.astype(np.float64)
        return a
    xp = get_namespace(a)
    if a.dtype != xp.float64 and a.dtype != xp.float32:
        a = xp.astype(a, xp.float64)
    if isinstance(a, np.ndarray):
        a = np.require(a, requirements="CA")  # type: ignore[arg-type]  # (see _aligned)
    return a


def _like_X(a: Any, X: Any) -> Any:
    """A NumPy ``y`` or weight block moved to the namespace and device of a device
    ``X`` block (CuPy, CuPy sparse, ...): users pass host targets and weights freely."""
    if a is None or not isinstance(a, np.ndarray) or isinstance(X, np.ndarray) or sp.issparse(X):
        return a
    return asarray_like(a, X)


def make_shard(indices: int | Sequence[int], xs: Sequence[Any], ys: Sequence[Any], sws: Sequence[Any],
               y_numeric: bool = True) -> Shard:
    """Validate blocks and wrap them as a :class:`Shard` (runs where the data lives).

    ``indices`` are the blocks' indices (ascending), or the first index of a
    contiguous run.
    """
    if isinstance(indices, int):
        indices = range(indices, indices + len(xs))
    blocks = []
    for index, X, y, sw in zip(indices, xs, ys, sws):
        if X.ndim != 2:
            raise InputError(f"X must be 2-D; block {index} has shape {tuple(X.shape)}")
        X = _as_float(X, sparse_ok=True)
        if y_numeric:
            y = _as_float(_like_X(y, X), sparse_ok=False)
        if y.ndim != 1:
            raise InputError(
                f"y must be 1-D; block {index} of y has shape {tuple(y.shape)}; "
                "use y.ravel() for a column vector"
            )
        if y.shape[0] != X.shape[0]:
            raise InputError(
                f"X and y have different numbers of rows in block {index}: "
                f"X has {X.shape[0]}, y has {y.shape[0]}"
            )
        if sw is not None:
            sw = _as_float(_like_X(sw, X), sparse_ok=False)
        xp = get_namespace(X)
        if not is_sparse(X) and X.dtype != xp.float64:
            # float32 X: targets and weights in the same dtype once, not every step
            y = xp.astype(y, X.dtype) if y_numeric else y
            sw = None if sw is None else xp.astype(sw, X.dtype)
        if sw is not None:
            if sw.shape != y.shape:
                raise InputError(
                    f"sample_weight has shape {tuple(sw.shape)} in block {index}, "
                    f"expected ({X.shape[0]},)"
                )
        block = Block(index, X, y, sw)
        # X's finiteness is not checked here: that would be one more pass over all of
        # X per fit.  A non-finite X makes the first step's sums non-finite, and only
        # then does the engine run shard_check_finite to name the block.
        if getattr(y.dtype, "kind", "f") in "fc" and not _all_finite(y):
            raise InputError(
                f"Input y contains NaN or infinity in {_where(block, 'y', _not_finite)}; drop those rows "
                "before fitting"
            )
        if sw is not None:
            xp = get_namespace(sw)
            if not _all_finite(sw) or bool(xp.any(sw < 0)):
                raise InputError(
                    f"sample_weight contains negative, NaN or infinite values in "
                    f"{_where(block, 'sample_weight', _bad_weight)}; weights must be finite and non-negative"
                )
        blocks.append(block)
    return Shard(tuple(blocks))


def shard_check_finite(shard: Shard) -> None:
    """Raise :class:`InputError` naming the first block of X with NaN or infinity.

    Run only when a step's sums came out non-finite (see :class:`Evaluator`): every
    NaN or infinity in X reaches the loss or the gradient (``0 * inf`` is NaN), so
    finite sums prove finite data without a separate pass over X.
    """
    for block in shard.blocks:
        if not _all_finite(block.X):
            raise InputError(
                f"Input X contains NaN or infinity in {_where(block, 'X', _not_finite)}; drop or impute "
                "those rows before fitting"
            )


def max_abs_value(largest: float) -> float:
    """Largest magnitude accepted in X, y and sample_weight of a float dtype whose
    largest number is ``largest``: the power of ten below its cube root (1e102 for
    float64, 1e12 for float32), so that products of three such numbers (feature x
    coefficient x residual, the squares in the gradient's norm) stay finite."""
    return 10.0 ** math.floor(math.log10(largest) / 3)


def _abs_max(a: Any) -> float:
    """Largest |value| of a dense or sparse block (NaN if it holds NaN; 0 if empty)."""
    if is_sparse(a):
        a = a.data
    if a.size == 0:
        return 0.0
    xp = get_namespace(a)
    return max(float(xp.max(a)), -float(xp.min(a)))


def check_block_values(block: Block, labels: bool = False) -> float:
    """Raise :class:`InputError` for NaN/inf in X, or for values of X, y (regressors)
    or sample_weight so large that the loss and its gradient overflow (one pass over
    the block, at setup; see :func:`max_abs_value`).  Returns X's largest |value|."""
    x_abs_max = 0.0
    parts = [("X", block.X, "scale the features (e.g. sklearn.preprocessing.StandardScaler, or other units)")]
    if not labels:
        parts.append(("y", block.y, "scale the target (e.g. divide it by its standard deviation, or other units)"))
    if block.sample_weight is not None:
        parts.append(("sample_weight", block.sample_weight,
                      "divide the weights by their maximum (only their ratios matter)"))
    for name, a, fix in parts:
        big = _abs_max(a)
        if name == "X" and not math.isfinite(big):
            raise InputError(
                f"Input X contains NaN or infinity in {_where(block, 'X', _not_finite)}; drop or impute "
                "those rows before fitting"
            )
        if name == "X":
            x_abs_max = big
        limit = max_abs_value(finfo_max(a.dtype, a))
        if big > limit:
            where = _where(block, name, _above(limit))
            raise InputError(
                f"Input {name} has values up to {big:.3g} in absolute value in {where}; "
                f"above {limit:.0e} ({dtype_name(a.dtype)}) the loss and its gradient overflow: {fix}"
            )
    return x_abs_max


def _label_error(block_or_none: Block | None, y: npt.NDArray[Any], err: Exception) -> InputError:
    import pandas as pd

    where = "" if block_or_none is None else f" in {_describe(block_or_none, 'y')}"
    missing: npt.NDArray[np.intp] | list[int] = np.flatnonzero(pd.isna(y)) if y.dtype == object else []
    if len(missing):
        rows = ", ".join(str(i) for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
        return InputError(
            f"y has {len(missing)} missing label(s) (None or NaN){where}, at row(s) {rows}"
            f"{' of the block' if where else ''}; drop those rows or give them a class before "
            "fitting"
        )
    return InputError(
        f"y mixes label types that cannot be ordered{where} ({err}); use one type for all "
        "labels, e.g. y.astype(str)"
    )


def _crc(a: Any) -> str | None:
    """CRC-32 of an array's values (host copy; object labels by their text)."""
    if a is None:
        return None
    if is_sparse(a):
        a = a.tocsr()
        crc = zlib.crc32(np.asarray(a.shape, dtype=np.int64).tobytes())
        for part in (a.indptr, a.indices, a.data):
            crc = zlib.crc32(np.ascontiguousarray(part), crc)  # type: ignore[arg-type]  # (an ndarray is a buffer)
        return f"{crc:08x}"
    a = to_numpy(a)
    if a.dtype == object:
        return f"{zlib.crc32(repr(a.tolist()).encode()):08x}"
    crc = zlib.crc32(str((a.shape, a.dtype.str)).encode())
    return f"{zlib.crc32(np.ascontiguousarray(a), crc):08x}"  # type: ignore[arg-type]  # (a buffer)


def block_digest(block: Block) -> dict[str, Any]:
    """A cheap digest of one block (CRC-32 of X, y and sample_weight, about 1 GB/s):
    what a resumed fit's data must match block by block (see
    :class:`~..runtime.checkpoint.Checkpointer`); CuPy blocks are copied to the host for it."""
    return {"block": int(block.index), "X": _crc(block.X), "y": _crc(block.y),
            "sample_weight": _crc(block.sample_weight)}


def _offset_column(X: Any) -> npt.NDArray[np.float64]:
    """The last column of a block (its offset), dense float64 on the host."""
    col = X[:, X.shape[1] - 1 :]
    col = col.toarray() if is_sparse(col) else col
    return np.asarray(to_numpy(col), dtype=np.float64).reshape(-1)


def shard_summary(shard: Shard, labels: bool = False, digest: bool = False, offset: bool = False) -> dict[str, Any]:
    """Weight sum, and the weighted y sum, minimum and maximum of y, or the labels with their
    counts and weight totals (``labels``, ``label_counts``, ``label_weights``: the
    sample weights of each class summed where the rows live, for
    ``class_weight="balanced"``); ``digest``: also each block's :func:`block_digest`
    (fits that write checkpoints); ``offset`` (X's last column is an offset): also
    ``wo_sum``, the weighted sum of the offsets, and ``o_max`` and ``w_exp_o`` with
    ``sum(w * exp(o)) == exp(o_max) * w_exp_o`` (a log link's starting intercept).

    Also checks every block's values (:func:`check_block_values`): NaN/inf in X, and
    magnitudes that would overflow the loss; ``x_abs_max`` is X's largest |value|
    (offsets included), which bounds the linear predictor."""
    out: dict[str, Any] = {"weight_sum": 0.0, "wy_sum": 0.0, "y_min": math.inf, "y_max": -math.inf,
                           "x_abs_max": 0.0}
    if offset:
        out.update(wo_sum=0.0, o_max=-math.inf, w_exp_o=0.0)
    if digest:
        out["digests"] = [block_digest(b) for b in shard.blocks]
    for b in shard.blocks:
        if b.n_rows == 0:
            continue
        out["x_abs_max"] = max(out["x_abs_max"], check_block_values(b, labels))
        y = to_numpy(b.y)
        w = None if b.sample_weight is None else to_numpy(b.sample_weight)
        out["weight_sum"] += float(b.n_rows if w is None else w.sum())
        if not labels:
            out["wy_sum"] += float(y.sum() if w is None else w @ y)
            out["y_min"] = min(out["y_min"], float(y.min()))
            out["y_max"] = max(out["y_max"], float(y.max()))
        if offset:
            o = _offset_column(b.X)
            ws = np.ones_like(o) if w is None else w.astype(np.float64)
            out["wo_sum"] += float(ws @ o)
            top = max(out["o_max"], float(o.max()))
            out["w_exp_o"] = out["w_exp_o"] * math.exp(out["o_max"] - top) + float(ws @ np.exp(o - top))
            out["o_max"] = top
    if labels:
        parts = [to_numpy(b.y) for b in shard.blocks if b.n_rows]
        y = np.concatenate(parts) if parts else np.array([])
        weights = [np.ones(b.n_rows) if b.sample_weight is None else to_numpy(b.sample_weight).astype(np.float64)
                   for b in shard.blocks if b.n_rows]
        try:
            out["labels"], inverse, out["label_counts"] = np.unique(y, return_inverse=True, return_counts=True)
            out["label_weights"] = np.bincount(
                inverse.reshape(-1), weights=np.concatenate(weights) if weights else None, minlength=len(out["labels"])
            ).astype(np.float64)
        except TypeError as err:  # None/NaN among object labels, or mixed types
            for b in shard.blocks:  # name the first block that cannot be sorted
                part = to_numpy(b.y)
                try:
                    np.unique(part)
                except TypeError:
                    raise _label_error(b, part, err) from err
            raise _label_error(None, y, err) from err
    return out


def encode_shard(shard: Shard, classes: npt.NDArray[Any],
                 class_weight: npt.NDArray[np.float64] | None = None) -> Shard:
    """Replace labels by their index in ``classes``; fold class weights into weights."""
    blocks = []
    for b in shard.blocks:
        y = to_numpy(b.y)
        codes = np.searchsorted(classes, y)
        codes = np.minimum(codes, len(classes) - 1)
        if y.size and not np.all(classes[codes] == y):
            bad = y[classes[codes] != y][:3]
            raise InputError(
                f"labels {bad.tolist()} in block {b.index} are not among classes "
                f"{classes.tolist()}"
            )
        sw = b.sample_weight
        y_new = codes.astype(np.float64)
        if class_weight is not None:
            cw = class_weight[codes]
            sw = cw if sw is None else to_numpy(sw) * cw
        if not sp.issparse(b.X):  # targets and weights in X's namespace, device and dtype
            y_new = asarray_like(y_new, b.X, dtype=b.X.dtype)
            if class_weight is not None:
                sw = asarray_like(sw, b.X, dtype=b.X.dtype)
        blocks.append(Block(b.index, b.X, y_new, sw))
    return Shard(tuple(blocks))


def shard_sample(shard: Shard, take: Sequence[int] | npt.NDArray[np.integer],
                 ) -> list[tuple[int, Any, npt.NDArray[Any], npt.NDArray[np.float64]]]:
    """Evenly spaced rows of each block, ``take[b]`` of block ``b``, as host arrays.

    Returns a list of ``(block index, X rows, y rows, sample weights)``; the driver
    puts them in block order, so the sample does not depend on placement.
    """
    out = []
    for b in shard.blocks:
        k = min(b.n_rows, int(take[b.index]))
        if k <= 0:
            continue
        if k == b.n_rows:  # every row (small data): the block itself, no index pass or copy
            sw = np.ones(k) if b.sample_weight is None else to_numpy(b.sample_weight)
            out.append((b.index, to_numpy(b.X), to_numpy(b.y), sw))
            continue
        rows = np.unique(np.linspace(0, b.n_rows - 1, k).round().astype(np.int64))
        sw = np.ones(len(rows)) if b.sample_weight is None else to_numpy(take_rows(b.sample_weight, rows))
        out.append((b.index, to_numpy(take_rows(b.X, rows)), to_numpy(take_rows(b.y, rows)), sw))
    return out


def _block_error(err: Exception, block: Block) -> DGDError:
    if isinstance(err, DGDError):
        return err
    return BlockError(f"{type(err).__name__} in {_describe(block)}: {err}")


def check_finite_block(X: T, block_info: dict[Any, Any] | None = None) -> T:
    """``X`` unchanged, or :class:`InputError` naming the row block if it holds NaN or
    infinity (dask ``map_blocks`` at predict time, where the rows are not checked
    otherwise: a NaN row would silently become class 0 or a NaN prediction)."""
    if not _all_finite(X):
        where = ""
        if block_info and 0 in block_info:
            start, stop = block_info[0]["array-location"][0]
            where = f" in row block {block_info[0]['chunk-location'][0]}"
            if not (math.isnan(start) or math.isnan(stop)):  # unknown chunk sizes: no rows
                where += f" (rows {int(start)} to {int(stop) - 1})"
        raise InputError(
            f"Input X contains NaN or infinity{where}; predictions need finite features: "
            "drop or impute those rows"
        )
    return X


def check_chunking(X: da.Array) -> None:
    """X must have a single chunk along columns (dask array)."""
    if X.ndim != 2:
        fix = "X.reshape(-1, 1) for a single feature" if X.ndim == 1 else "X.reshape(X.shape[0], -1) to flatten"
        raise InputError(
            f"X must be 2-D; got an array of shape {X.shape}: (n_samples, n_features) is "
            f"needed, use {fix}"
        )
    if X.numblocks[1] != 1:
        raise ChunkingError(
            f"X is chunked along columns ({X.numblocks[1]} column chunks: {X.chunks[1]}); "
            "training needs whole rows in each block; use X.rechunk({1: -1})"
        )


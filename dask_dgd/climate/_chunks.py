"""A hint for a grid in dask blocks far below a useful size (a file opened with
``chunks={}``: one step per block), with the chunks to use instead."""

import math
import warnings

import dask.array as da
import numpy as np
from dask.utils import format_bytes

from .._validation import user_stacklevel
from ..exceptions import ChunkSizeWarning

__all__ = ["warn_tiny_chunks"]


#: A fit's grid is in blocks "far below a useful size" when it has more than
#: ``_MIN_BLOCKS`` of them and their mean (as float64) is below ``_MIN_BLOCK_BYTES``:
#: there each block's task overhead outweighs its arithmetic: on a 480 x 64 x 128
#: float64 grid, blocks of 0.75 MiB fitted 1.5-3.9x slower than dask's "auto" chunks,
#: of 2.5 MiB 0.8-2.0x (benchmarks/climate_chunks.py; see benchmarks/RESULTS.md).
_MIN_BLOCK_BYTES = 2**20
_MIN_BLOCKS = 16


def warn_tiny_chunks(spec, fields):
    """A :class:`ChunkSizeWarning` when the grid's dask blocks are many and far below a
    useful size (see ``_MIN_BLOCK_BYTES``), naming their number, their mean size and
    the chunks to use instead: dask's ``"auto"`` chunks along time with the spatial
    chunks kept, or, when that is still too small and more blocks than dask's
    ``"auto"`` chunks along every sample dimension, those.  A
    grid fitted in process (one NumPy block) is never warned about."""
    chunks = fields.grid_chunks
    n_blocks = math.prod(len(c) for c in chunks)
    shape = tuple(sum(c) for c in chunks)
    mean = math.prod(shape) / n_blocks
    itemsize = np.dtype(np.float64).itemsize
    if fields.in_process or n_blocks <= _MIN_BLOCKS or mean * itemsize >= _MIN_BLOCK_BYTES:
        return
    normalize = da.core.normalize_chunks
    dims = spec.sample_dims
    along_time = normalize(("auto",) + tuple(chunks[1:]), shape, dtype=np.float64)
    along_all = normalize("auto", shape, dtype=np.float64)
    n_time, n_all = (math.prod(len(c) for c in cs) for cs in (along_time, along_all))
    if n_time <= n_all or math.prod(shape) / n_time * itemsize >= _MIN_BLOCK_BYTES:
        fix = {dims[0]: along_time[0][0]}
    else:
        fix = {d: c[0] for d, c in zip(dims, along_all)}
    warnings.warn(
        f"the grid of {spec.target!r} is in {n_blocks} dask blocks of {mean:,.0f} cells "
        f"({format_bytes(int(mean * itemsize))} as float64) on average, far below a useful size: each block "
        f"costs a task's overhead, which outweighs its arithmetic below about "
        f"{format_bytes(_MIN_BLOCK_BYTES)}, so this fit can take several times longer than with larger "
        f"blocks; rechunk, e.g. ds = ds.chunk({fix}) (dask's \"auto\" chunks for this grid), or open the file with "
        f"xr.open_dataset(path, chunks={fix})",
        ChunkSizeWarning, stacklevel=user_stacklevel(),
    )

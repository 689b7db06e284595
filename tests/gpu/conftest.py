"""The GPU test module: ``pytest -m gpu`` (or ``pytest tests/gpu``).

Every test here is marked ``gpu`` and runs the estimators on CuPy-backed dask arrays.
Without CuPy or without a CUDA device the tests are skipped, with the reason; the same
code paths run in every CI run on ``array_api_strict`` blocks (see
``tests/test_array_namespaces.py``), which fails on any NumPy-only call.
"""

import pathlib

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent


def _cuda_reason():
    try:
        import cupy
    except ImportError as exc:  # the gpu extra is not installed
        return f"CuPy is not installed (pip install '.[gpu]'): {exc}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device
        return f"no CUDA device: {type(exc).__name__}: {exc}"
    if n < 1:
        return "no CUDA device: cupy.cuda.runtime.getDeviceCount() == 0"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if HERE not in pathlib.Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if not checked:
            reason, checked = _cuda_reason(), True
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="session")
def on_gpu(cp):
    """``on_gpu(x)``: a NumPy array as a CuPy array, a dask array with CuPy blocks."""
    import dask.array as da

    def convert(x):
        if isinstance(x, da.Array):
            return x.map_blocks(cp.asarray, dtype=x.dtype, meta=cp.empty((0,) * x.ndim, dtype=x.dtype))
        return cp.asarray(np.asarray(x))

    return convert

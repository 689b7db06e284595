"""The fused Numba block kernel against the array-API path."""

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import scipy.sparse as sp

from dask_dgd.exceptions import ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    _fused,
)

LOSSES = {
    "squared": (HalfSquaredError(), lambda rng, n: rng.standard_normal(n)),
    "logistic": (BinaryLogistic(), lambda rng, n: (rng.random(n) < 0.5) * 1.0),
    "poisson": (HalfPoisson(), lambda rng, n: rng.poisson(2.0, n) * 1.0),
    "multinomial": (MultinomialLogistic(4), lambda rng, n: rng.integers(0, 4, n) * 1.0),
}


def test_numba_is_installed_and_the_kernel_compiles():
    # numba is a core dependency: without it every dense block takes the slow path
    assert _fused.available()


_CALL_THE_KERNEL = """
import numpy as np
from dask_dgd.losses import HalfSquaredError, LinearObjective, _fused
objective = LinearObjective(HalfSquaredError(), 3, True)
print(_fused.dense_block_sums(objective, np.zeros((4, 1)), np.ones((10, 3)), np.zeros(10), None))
"""


@pytest.mark.slow
def test_a_fresh_process_loads_the_compiled_kernel_from_the_disk_cache(tmp_path):
    """Every fresh worker process (and each one a nanny restarts) used to compile the
    kernel again, about 2 s per dtype, and leave one more file in ``__pycache__``: a
    closure's Numba cache key held a dispatcher that pickles differently in each process."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DEBUG_CACHE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    runs = [subprocess.run([sys.executable, "-c", _CALL_THE_KERNEL], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    first, second = (run.stdout + run.stderr for run in runs)
    assert "data saved" in first
    assert "data loaded" in second and "data saved" not in second, second


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_equals_array_api_path(name, dtype, fit_intercept, weighted):
    loss, make_y = LOSSES[name]
    rng = np.random.default_rng(zlib.crc32(f"{name}-{fit_intercept}-{weighted}".encode()))  # the same in every process
    n, d = 1037, 9  # d not a multiple of 4: the dot product's tail loop runs
    X = rng.standard_normal((n, d)).astype(dtype)
    y = make_y(rng, n).astype(dtype)
    w = rng.random(n) if weighted else None
    fused = LinearObjective(loss, d, fit_intercept)
    generic = LinearObjective(loss, d, fit_intercept, kernel="array-api")
    params = rng.standard_normal(fused.n_params) * 0.3
    assert _fused.supports(loss, X, y, w)
    lf, gf, wf = fused.block_sums(params, X, y, w)
    lg, gg, wg = generic.block_sums(params, X, y, w)
    # float32 blocks: the array-API path computes in float32, the kernel in float64
    tol = 1e-11 if dtype == np.float64 else 1e-4
    assert lf == pytest.approx(lg, rel=tol)
    np.testing.assert_allclose(gf, gg, rtol=tol, atol=tol * np.abs(gg).max())
    assert wf == pytest.approx(wg, rel=1e-12)
    assert gf.shape == (fused.n_params,) and gf.dtype == np.float64
    # deterministic: the same call gives the same bits
    lf2, gf2, _ = fused.block_sums(params, X, y, w)
    assert lf2 == lf and np.array_equal(gf2, gf)


def test_fused_kernel_is_used_only_where_it_applies():
    loss = BinaryLogistic()
    X = np.ones((10, 4))
    y = np.zeros(10)
    assert _fused.supports(loss, X, y, None)
    assert not _fused.supports(loss, np.asfortranarray(X[:, :3]), y, None)  # not C order
    assert not _fused.supports(loss, X.astype(np.int64), y, None)
    assert not _fused.supports(loss, sp.csr_matrix(X), y, None)
    assert not _fused.supports(loss, X, y.tolist(), None)

    class MyLoss(HalfSquaredError):
        fused_code = None  # a loss that changes the math leaves the kernel (a trait)

        def loss_gradient(self, y, raw, xp):
            diff = raw[:, 0] - y
            return diff * diff, 2 * diff[:, None]

    assert not _fused.supports(MyLoss(), X, y, None)  # custom losses: array-API path

    class Plain:  # any object without the trait
        n_outputs = 1

    assert not _fused.supports(Plain(), X, y, None)


def test_empty_block_and_non_contiguous_block():
    obj = LinearObjective(HalfSquaredError(), 3)
    loss, grad, weight = obj.block_sums(np.ones(4), np.zeros((0, 3)), np.zeros(0))
    assert (loss, weight) == (0.0, 0.0) and np.array_equal(grad, np.zeros(4))
    X = np.arange(24.0).reshape(4, 6)[:, ::2]  # a strided view: array-API path
    ref = LinearObjective(HalfSquaredError(), 3, kernel="array-api").block_sums(np.ones(4), X, np.ones(4))
    got = obj.block_sums(np.ones(4), X, np.ones(4))
    assert got[0] == ref[0] and np.array_equal(got[1], ref[1])


def test_kernel_parameter_is_checked():
    with pytest.raises(ParameterError, match="kernel must be 'auto' or 'array-api', got 'cuda'"):
        LinearObjective(HalfSquaredError(), 3, kernel="cuda")


def test_the_kernels_name_the_row_loss_they_inline():
    """Numba keys a kernel's disk cache on its own file: an edit of ``_rowloss.py`` must
    also change the kernels' files (their ``ROWLOSS_SHA256``), or a process with a warm
    cache runs the old formulas."""
    import hashlib
    from pathlib import Path

    from dask_dgd.losses import _fused_kernel, _online_kernels, _rowloss

    digest = hashlib.sha256(Path(_rowloss.__file__).read_bytes()).hexdigest()
    for module in (_fused_kernel, _online_kernels):
        assert module.ROWLOSS_SHA256 == digest, (
            f"{module.__name__}.ROWLOSS_SHA256 is not the sha256 of _rowloss.py ({digest}): set it to that")

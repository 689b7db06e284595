"""Namespace independence (array_api_strict stands in for CuPy), no dask import, doctests."""

import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import array_api_strict as xps
import numpy as np
import pytest
from numpy.testing import assert_allclose

import dask_dgd.optim
from dask_dgd.optim import SGD, Adagrad, Adam, AdamW, RMSprop, StepDecay

OPTIMIZERS = [
    SGD(learning_rate=0.1),
    SGD(learning_rate=StepDecay(0.1, 1), momentum=0.9, nesterov=True),
    Adam(learning_rate=0.1),
    AdamW(learning_rate=0.1, weight_decay=0.5),
    RMSprop(learning_rate=0.1),
    RMSprop(learning_rate=0.1, momentum=0.5, centered=True),
    Adagrad(learning_rate=0.1),
]
STRICT_ARRAY = type(xps.asarray(0.0))
GRADS = [[0.5, -1.0, 2.0], [0.25, 1.0, -3.0], [1.0, 0.0, 0.5]]


def strict(values, dtype=None):
    return xps.asarray(values, dtype=xps.float64 if dtype is None else dtype)


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=repr)
def test_array_api_strict(opt):
    """init/update use only the array API of params, and match NumPy."""
    params_np = np.array([1.0, -2.0, 0.5])
    params_xp = strict(params_np)
    state_np, state_xp = opt.init(params_np), opt.init(params_xp)
    mask = [True, False, True]
    for g in GRADS:
        upd_np, state_np = opt.update(np.array(g), state_np, params_np, decay_mask=np.array(mask))
        upd_xp, state_xp = opt.update(
            strict(g), state_xp, params_xp, decay_mask=xps.asarray(mask)
        )
        assert isinstance(upd_xp, STRICT_ARRAY)
        assert all(isinstance(a, STRICT_ARRAY) for a in state_xp[1:])
        assert_allclose(np.from_dlpack(upd_xp), upd_np, rtol=1e-12)
        params_np, params_xp = params_np + upd_np, params_xp + upd_xp
    assert state_xp.count == state_np.count == len(GRADS)


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=repr)
def test_array_api_strict_float32(opt):
    params = strict([1.0, -2.0], xps.float32)
    state = opt.init(params)
    upd, state = opt.update(strict([0.5, 0.25], xps.float32), state, params)
    assert upd.dtype == xps.float32
    assert all(a.dtype == xps.float32 for a in state[1:])


def test_import_does_not_import_dask():
    """dask_dgd.optim and what it imports never import dask or distributed.

    The package's own ``__init__`` is bypassed (it may import the engine), so that this
    checks exactly the optimizer layer and its dependencies.
    """
    package_dir = Path(dask_dgd.optim.__file__).parent.parent
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('dask_dgd')\n"
        f"pkg.__path__ = [{str(package_dir)!r}]\n"
        "sys.modules['dask_dgd'] = pkg\n"
        "import dask_dgd.optim\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


MODULES = ["_base", "_checks", "_first_order", "_lbfgs", "_registry", "_schedules"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"dask_dgd.optim.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_all_is_explicit_and_complete():
    names = dask_dgd.optim.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(dask_dgd.optim, name)

"""The objective layer is pure: importing it loads no dask."""

import os
import pathlib
import subprocess
import sys

import dask_dgd.losses

ROOT = pathlib.Path(dask_dgd.losses.__file__).resolve().parents[2]

# Any import of dask or distributed fails in the child process.
BLOCK_DASK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"dask_dgd.losses must not import {name}")
sys.meta_path.insert(0, Block())
"""

# Load dask_dgd.losses without running dask_dgd/__init__.py (which may import the
# estimators and the engine): only the layer's own imports are under test.
STUB_PARENT = """
import types
package = types.ModuleType("dask_dgd")
package.__path__ = [{path!r}]
sys.modules["dask_dgd"] = package
"""


def run_child(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )


def test_losses_layer_imports_no_dask():
    code = (
        BLOCK_DASK
        + STUB_PARENT.format(path=str(ROOT / "dask_dgd"))
        + "import dask_dgd.losses\n"
        + "assert not [m for m in sys.modules if m.startswith(('dask.', 'distributed'))]\n"
    )
    result = run_child(code)
    assert result.returncode == 0, result.stderr


def test_public_names():
    assert sorted(dask_dgd.losses.__all__) == sorted(
        [
            "SLICE_BYTES",
            "BinaryLogistic",
            "HalfGamma",
            "HalfNegativeBinomial",
            "HalfTweedie",
            "HalfPoisson",
            "HalfSquaredError",
            "LinearObjective",
            "MultinomialLogistic",
            "Penalty",
            "lipschitz_bound",
            "objective_hessian",
            "objective_value_gradient",
        ]
    )
    for name in dask_dgd.losses.__all__:
        assert getattr(dask_dgd.losses, name) is not None

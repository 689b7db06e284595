"""The engine's type annotations: mypy passes on it, and (almost) every function says
what it takes and returns.

mypy is configured in ``pyproject.toml`` (``[tool.mypy]``: the files are
``dask_dgd/_engine``); it checks the bodies of annotated functions only, so the second
test keeps the annotations from thinning out as the engine grows.
"""

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "dask_dgd" / "_engine"

#: The share of the engine's functions and methods that must be annotated completely.
MIN_ANNOTATED = 0.90


@pytest.mark.slow
def test_mypy_passes_on_the_engine():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the [test] extra: pip install -e '.[test]')")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy failed (exit status {proc.returncode}):\n{proc.stdout}{proc.stderr}"


def _unannotated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """What ``fn`` leaves unannotated: its parameters (but ``self``/``cls``) and its return."""
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if params and params[0].arg in ("self", "cls"):
        params = params[1:]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    missing = [p.arg for p in params if p.annotation is None]
    if fn.returns is None:
        missing.append("return")
    return missing


def _engine_functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method (nested ones included) of ``dask_dgd/_engine/**/*.py``,
    with where it is (``path:line name``)."""
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node))
    return found


def test_engine_functions_are_annotated():
    functions = _engine_functions()
    assert len(functions) > 500, f"found only {len(functions)} functions under {ENGINE}: is the path right?"
    missing = {where: gaps for where, fn in functions if (gaps := _unannotated(fn))}
    share = 1 - len(missing) / len(functions)
    listing = "\n".join(f"  {where}: {', '.join(gaps)}" for where, gaps in sorted(missing.items()))
    assert share >= MIN_ANNOTATED, (
        f"{len(functions) - len(missing)} of {len(functions)} engine functions are fully annotated "
        f"({share:.1%}, below {MIN_ANNOTATED:.0%}); annotate every parameter (but self/cls) and the "
        f"return of:\n{listing}"
    )

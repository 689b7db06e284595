"""The documentation builds with Sphinx in strict mode (every warning is an error)."""

import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.slow
def test_docs_build_strictly(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    html = tmp_path / "html"
    # the API reference is generated from the docstrings; the benchmark results are included
    reference = (html / "reference.html").read_text()
    assert "recommend" in reference and "to_design_matrix" in reference
    assert "Benchmark results" in (html / "benchmarks.html").read_text()
    for page in ("index", "user_guide", "api", "examples", "performance", "design"):
        assert (html / f"{page}.html").stat().st_size > 5_000


# ------------------------------------------------- the API page names every public name
API = (DOCS / "api.md").read_text()
MODULES = ["dask_dgd", "dask_dgd.recommender", "dask_dgd.climate", "dask_dgd.datasets", "dask_dgd.optim",
           "dask_dgd.losses", "dask_dgd.compression", "dask_dgd.testing", "dask_dgd.callbacks",
           "dask_dgd.exceptions", "dask_dgd.linear_model", "dask_dgd.persistence", "dask_dgd.cli", "dask_dgd.hashing",
           "dask_dgd.dashboard"]
ESTIMATORS = ["LinearRegression", "LogisticRegression", "PoissonRegressor", "MatrixFactorization",
              "ImplicitMatrixFactorization", "ClimateRegressor", "FeatureHasher"]


def _public_names():
    import importlib

    for module in MODULES:
        for name in importlib.import_module(module).__all__:
            yield module, name


@pytest.mark.parametrize(("module", "name"), list(_public_names()), ids=lambda v: v)
def test_api_page_names_every_public_name(module, name):
    assert f"`{name}" in API or f"{name}(" in API or f", `{name}`" in API, f"{module}.{name} is not in docs/api.md"


def _signatures(name):
    """The argument lists written after ``name(`` on the API page."""
    import re

    return [m.group(1) for m in re.finditer(rf"\b{re.escape(name)}\(([^()]*(?:\([^()]*\)[^()]*)*)\)", API)]


def _methods():
    import inspect

    import dask_dgd

    for est in ESTIMATORS:
        cls = getattr(dask_dgd, est)
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") or not fn.__module__.startswith("dask_dgd"):
                continue
            params = [p for p in inspect.signature(fn).parameters if p not in ("self", "args", "kwargs")]
            yield est, name, tuple(params)


@pytest.mark.parametrize(("estimator", "method", "params"), list(_methods()), ids=lambda v: str(v))
def test_api_page_gives_every_method_with_all_its_parameters(estimator, method, params):
    """A method written on the page with an argument list that names all of its
    parameters (e.g. ``similar_items(items, k=10, candidates=None)``)."""
    written = _signatures(method)
    assert written, f"{estimator}.{method} is not on docs/api.md"
    import re

    assert any(all(re.search(rf"\b{p}\b", args) for p in params) for args in written), (
        f"{estimator}.{method}{params}: docs/api.md writes it as {written}")


@pytest.mark.parametrize("command", ["demo", "train", "predict", "bench"])
def test_api_page_gives_every_command_and_its_options(command):
    from dask_dgd.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest is not None or a.choices).choices[command]
    assert f"dask-dgd {command}" in API
    for action in sub._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert option in API, f"dask-dgd {command} {option} is not on docs/api.md"


# ------------------------------------------------- every public name has a docstring
def _public_modules():
    """``dask_dgd`` and every module below it with no ``_``-prefixed part in its name."""
    import pkgutil

    import dask_dgd

    yield "dask_dgd"
    for info in pkgutil.walk_packages(dask_dgd.__path__, "dask_dgd.", onerror=lambda name: None):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            yield info.name


def test_public_modules_include_the_api_page_modules():
    assert set(MODULES) <= set(_public_modules())


@pytest.mark.parametrize("module", sorted(_public_modules()))
def test_every_public_name_has_a_docstring(module):
    """A docstring built by concatenation is an expression, not a docstring (``__doc__``
    None): every name of every public ``__all__`` has a non-empty ``__doc__``."""
    import importlib

    mod = importlib.import_module(module)
    assert (mod.__doc__ or "").strip(), f"{module} has no docstring"
    missing = [name for name in getattr(mod, "__all__", ()) if not (getattr(mod, name).__doc__ or "").strip()]
    assert not missing, f"{module}: no docstring on {missing}"


def _relative_references():
    """Every relative cross-reference (``:mod:`..loop```, ``:class:`~.reduce.Partial```)
    in the package's docstrings and comments, as (file, module it is written in, text)."""
    import re

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r":(?:mod|func|class|meth|data|attr|exc):`~?(\.+[\w.]*)`")
    for path in sorted((root / "dask_dgd").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        for ref in pattern.findall(path.read_text()):
            yield str(path.relative_to(root)), ".".join(package), ref


def test_relative_references_in_the_code_name_what_exists():
    """A relative reference in a docstring names a module, or a name in a module, that
    exists: moving a module must move the references to it (the engine was laid out in
    sub-packages once, and references to the old homes would send a reader nowhere)."""
    import importlib

    broken = []
    for file, package, ref in _relative_references():
        dots = len(ref) - len(ref.lstrip("."))
        base = package.split(".")[: len(package.split(".")) - dots + 1]
        parts = base + [p for p in ref[dots:].split(".") if p]
        for k in range(len(parts), 0, -1):  # the longest prefix that is a module
            try:
                obj = importlib.import_module(".".join(parts[:k]))
                break
            except ImportError:
                continue
        else:
            broken.append(f"{file}: {ref}")
            continue
        for name in parts[k:]:
            if not hasattr(obj, name):
                broken.append(f"{file}: {ref} ({'.'.join(parts[:k])} has no {name!r})")
                break
            obj = getattr(obj, name)
    assert not broken, "\n".join(broken)


# ------------------------------------------------- the estimators' docstrings name every parameter
WRITTEN_FROM_SIGNATURE = ["LinearRegression", "LogisticRegression", "PoissonRegressor", "GammaRegressor",
                          "TweedieRegressor", "NegativeBinomialRegressor", "BinomialRegressor",
                          "MatrixFactorization", "ImplicitMatrixFactorization", "linear_model.GammaRegressorCV",
                          "linear_model.TweedieRegressorCV", "linear_model.NegativeBinomialRegressorCV",
                          "linear_model.BinomialRegressorCV", "datasets.make_regression",
                          "datasets.make_classification", "datasets.make_poisson"]


@pytest.mark.parametrize("name", WRITTEN_FROM_SIGNATURE)
def test_parameters_and_other_parameters_name_every_parameter_once(name):
    """The "Other Parameters" that :func:`dask_dgd._docstrings.other_parameters` writes
    and the Parameters section written by hand name each parameter of the signature (a
    class's ``__init__``'s) once, in numpydoc's reading."""
    import inspect

    import dask_dgd
    import dask_dgd.datasets  # noqa: F401 - reached as dask_dgd.datasets below

    docscrape = pytest.importorskip("numpydoc.docscrape")
    obj = dask_dgd
    for part in name.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):
        doc = docscrape.ClassDoc(obj, config={"show_class_members": False})
        assert doc["Attributes"], f"{name} has no Attributes section"
    else:
        doc = docscrape.FunctionDoc(obj)
    named = [n.strip() for section in ("Parameters", "Other Parameters") for p in doc[section]
             for n in p.name.split(",")]
    assert sorted(named) == sorted(inspect.signature(obj).parameters), name

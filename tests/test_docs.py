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

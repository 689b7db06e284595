"""Sphinx configuration: the Markdown pages (MyST) and the API reference from the
docstrings (autodoc + numpydoc).  Built strictly by the test suite:
``python -m sphinx -W --keep-going -b html docs docs/_build``."""

project = "dask_dgd"
author = "dask_dgd developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "numpydoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
numpydoc_show_class_members = False
myst_heading_anchors = 3
html_theme = "alabaster"

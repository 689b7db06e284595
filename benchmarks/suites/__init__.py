"""Benchmark suites.  Each suite is a module, or a package split by concern
(``linear``, ``glm``, ``wide``: ``problems`` makes the data and the objective every tool
is scored on, ``peers`` runs the other tools, ``report`` writes the targets and tables,
``__init__`` holds the sizes and ``run()``; glm's ``runs`` runs each problem, wide's
``dgd`` the dask_dgd fits); peer code that several suites share is in ``_peers``.
Suites use only dask_dgd's public API (the one exception, in ``wide/dgd.py``, says why).
Each suite defines ``NAME``, ``DESCRIPTION``, ``SIZES`` and
``run(size, *, repeats=None, log=print, **overrides) -> dict`` (``overrides`` change
the size parameters, e.g. ``rows=20000``, for the test suite) returning

``{"title": str, "markdown": str, "table": str, "data": dict}``:

* ``markdown``: the body of the suite's section in ``benchmarks/RESULTS.md`` (tables,
  ratios and a short reading), without the header the runner adds (command, machine);
* ``table``: what to print on stdout (usually the main table);
* ``data``: raw numbers, JSON-serialisable (numpy scalars are converted by the runner).
"""

#: Registered suites, in the order ``--suite all`` runs them.
SUITES = ("linear", "glm", "modes", "straggler", "skew", "compression", "scaling", "scale", "memory", "recommender",
          "recommender_peers", "climate", "climate_scale", "gpu", "wide", "wide_default", "accuracy", "small_data",
          "dashboard")

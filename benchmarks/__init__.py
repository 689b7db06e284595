"""dask_dgd's benchmark suite: ``python -m benchmarks run --suite NAME --size small|full``.

Each suite lives in :mod:`benchmarks.suites` and compares dask_dgd with its peers side by
side in one run; the runner prints the suite's table, saves the raw numbers to
``benchmarks/out/<suite>-<size>.json`` and rewrites the suite's section of
``benchmarks/RESULTS.md``.
"""

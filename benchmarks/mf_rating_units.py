"""Explicit matrix factorization by gradient steps in other rating units.

``python -m benchmarks.mf_rating_units`` fits the same half-star ratings (generated:
``make_ratings(600, 250, 12_000, rank=5)`` rounded to half stars, 80% to train) in
units of 1e-2, 1, 1e4 and 1e6 (e.g. cents for dollars) by gradient steps, with a
penalty scaled as the objective asks (the factors' ``alpha`` times the units, the
biases' not, or left to follow ``alpha``; ``alpha="auto"`` chooses its own), and prints each fit's held-out RMSE in
the original units, its epochs and whether it warned.  The same fit in any units gives
the same row; the global mean's RMSE is printed for reference.
"""

import warnings

import numpy as np

CONFIGS = {
    "gd, alpha='auto' (Adam)": dict(solver="gd"),
    "gd, batch_size=1000 (Adam)": dict(solver="gd", batch_size=1000, alpha=0.05, alpha_bias=0.05),
    "gd, RMSprop": dict(solver="gd", optimizer="rmsprop", alpha=0.05, alpha_bias=0.05),
    "local SGD, local_steps=2 (Adam)": dict(solver="gd", mode="local", local_steps=2, alpha=0.05, alpha_bias=0.05),
    "ALS, alpha=0.2 alone (alpha_bias None)": dict(solver="als", alpha=0.2),
    "gd, alpha=0.2 alone (alpha_bias None)": dict(solver="gd", alpha=0.2),
}
UNITS = (1e-2, 1.0, 1e4, 1e6)


def main():
    from dask_dgd import MatrixFactorization
    from dask_dgd.datasets import make_ratings
    from dask_dgd.recommender import train_test_split

    ratings, _ = make_ratings(600, 250, 12_000, rank=5, random_state=0)
    x = ratings["rating"].to_numpy()
    ratings["rating"] = np.clip(np.round((3.0 + (x - x.mean()) / x.std()) * 2) / 2, 0.5, 5.0)
    train, test = train_test_split(ratings, test_size=0.2, random_state=0)
    truth = test["rating"].to_numpy()
    print(f"global mean's held-out RMSE: {np.sqrt(np.mean((truth - train['rating'].mean()) ** 2)):.4f}")
    print("| fit | " + " | ".join(f"units {u:g}" for u in UNITS) + " |")
    print("|---|" + "---|" * len(UNITS))
    for name, kw in CONFIGS.items():
        cells = []
        for u in UNITS:
            k = dict(kw)
            if "alpha" in k:
                k["alpha"] = k["alpha"] * u
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                m = MatrixFactorization(random_state=0, **k).fit(train.assign(rating=train["rating"] * u))
            rmse = float(np.sqrt(np.mean((m.predict(test) / u - truth) ** 2)))
            warned = any("Convergence" in type(w.message).__name__ for w in caught)
            cells.append(f"{rmse:.4f} ({m.n_iter_} ep{', warned' if warned else ''})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

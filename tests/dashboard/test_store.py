"""The scheduler's FitStore, without Dask: protocol messages in, JSON out."""

import json
import math

import pytest

from dask_dgd.dashboard import _store
from dask_dgd.dashboard._store import MAX_FITS, FitStore, json_safe


def start(fit="f1", **fields):
    return {"kind": "start", "protocol": 1, "fit": fit, "estimator": "LogisticRegression", "mode": "sync",
            "max_iter": 100, "max_staleness": None, "n_groups": 2, "workers": ["tcp://a:1", "tcp://b:2"],
            "driver": "host", "pid": 7, "wall": 1000.0, **fields}


def rec(step, **fields):
    return {"step": step, "iteration": step, "loss": 1.0 / step, "grad_norm": 0.5, "time": 0.1 * step,
            "compute_time_max": 0.01, "compute_time_min": 0.01, "compute_time_median": 0.01,
            "staleness_max": 0, "updates_per_group": [1, 1], **fields}


def records(fit="f1", first=0, recs=()):
    return {"kind": "records", "fit": fit, "first": first, "records": list(recs)}


def only_fit(store, **kw):
    (fit,) = store.fits_json(**kw)["fits"]
    return fit


def kinds(fit):
    return [f["kind"] for f in fit["flags"]]


def test_start_records_end_round_trip():
    store = FitStore()
    assert store.apply(start())
    assert store.apply(records(recs=[rec(1), rec(2)]))
    fit = only_fit(store)
    assert (fit["fit"], fit["estimator"], fit["status"], fit["mode"], fit["started"]) == (
        "f1", "LogisticRegression", "running", "sync", 1000.0)
    assert fit["workers"] == ["tcp://a:1", "tcp://b:2"] and fit["max_iter"] == 100 and fit["pid"] == 7
    assert fit["records"] == [rec(1), rec(2)]
    assert (fit["steps"], fit["first"], fit["next"]) == (2, 0, 2)
    assert store.apply({"kind": "end", "fit": "f1", "status": "done", "message": "", "wall": 1005.0})
    fit = only_fit(store)
    assert (fit["status"], fit["ended"], fit["flags"]) == ("done", 1005.0, [])


def test_records_are_idempotent_and_a_gap_appends_in_order():
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1), rec(2)]))
    store.apply(records(first=1, recs=[rec(2), rec(3)]))  # overlaps: only step 3 is new
    store.apply(records(first=0, recs=[rec(1)]))  # already there
    assert [r["step"] for r in only_fit(store)["records"]] == [1, 2, 3]
    store.apply(records(first=5, recs=[rec(6)]))  # indices 3, 4 never came
    fit = only_fit(store)
    assert [r["step"] for r in fit["records"]] == [1, 2, 3, 6] and fit["next"] == 6
    assert [r["step"] for r in only_fit(store, since=4)["records"]] == [6]
    assert only_fit(store, since=4)["first"] == 5


def test_since_and_fit_select_records_and_fits():
    store = FitStore()
    store.apply(start("a"))
    store.apply(start("b"))
    store.apply(records("a", recs=[rec(1), rec(2), rec(3)]))
    out = store.fits_json()
    assert [f["fit"] for f in out["fits"]] == ["b", "a"]  # newest first
    fit = only_fit(store, fit="a", since=2)
    assert [r["step"] for r in fit["records"]] == [3] and fit["first"] == 2
    assert only_fit(store, fit="a", since=3)["records"] == []
    assert store.fits_json(fit="nope") == {"protocol": 1, "fits": []}


@pytest.mark.parametrize("msg", [
    None, "text", ["start"], {"kind": "start"}, {"kind": "start", "fit": 3},
    {"kind": "telemetry", "fit": "f1"}, {"kind": "records", "fit": "f1", "first": -1, "records": []},
    {"kind": "records", "fit": "f1", "first": "0", "records": []}, {"kind": "records", "fit": "f1", "first": 0},
    {"kind": "groups", "fit": "f1", "worker": "tcp://a:1", "times": [[2, 0, 0.1]]},  # no longer in the protocol
])
def test_unreadable_messages_are_ignored(msg):
    store = FitStore()
    assert store.apply(msg) is False
    assert store.fits_json()["fits"] == []


def test_a_newer_protocol_with_unknown_fields_is_read_as_far_as_it_goes():
    store = FitStore()
    assert store.apply(start(protocol=2, colour="blue", mode="async", max_staleness=3))
    assert store.apply({**records(recs=[rec(1, new_field=[1, 2])]), "extra": "ignored"})
    fit = only_fit(store)
    assert (fit["protocol"], fit["mode"], fit["max_staleness"]) == (2, "async", 3)
    assert "colour" not in fit and fit["records"][0]["new_field"] == [1, 2]


def test_records_before_their_start_message_still_show():
    store = FitStore()
    store.apply(records("lost", recs=[rec(1)]))
    fit = only_fit(store)
    assert (fit["fit"], fit["estimator"], fit["status"], len(fit["records"])) == ("lost", "?", "running", 1)


def test_json_turns_nan_and_inf_into_null_and_tuples_into_lists():
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1, loss=math.nan, grad_norm=math.inf, level_times=(0.5, -math.inf))]))
    text = store.to_json()
    assert "NaN" not in text and "Infinity" not in text
    (r,) = json.loads(text)["fits"][0]["records"]
    assert (r["loss"], r["grad_norm"], r["level_times"]) == (None, None, [0.5, None])
    assert json_safe({"a": (1.0, float("nan")), 2: [math.inf]}) == {"a": [1.0, None], "2": [None]}


def test_divergence_flags_non_finite_loss():
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1), rec(2, loss=math.nan), rec(3, loss=math.inf)]))
    fit = only_fit(store)
    assert [(f["kind"], f["step"]) for f in fit["flags"]] == [("divergence", s) for s in (2, 3)]
    assert "not finite at step 2" in fit["flags"][0]["message"]
    assert fit["flag_counts"] == {"divergence": 2}


def test_divergence_flags_each_increase_of_the_learning_rate_halvings():
    # a rejected step makes no record: the cumulative lr_halvings is the only trace of a backoff
    store = FitStore()
    store.apply(start())
    halvings = [0, 0, 1, 1, 3, 3, None]  # None: a record without a guard (e.g. L-BFGS) flags nothing
    store.apply(records(recs=[rec(s, lr_halvings=h) for s, h in enumerate(halvings, start=1)]))
    fit = only_fit(store)
    assert [(f["kind"], f["step"]) for f in fit["flags"]] == [("divergence", 3), ("divergence", 5)]
    assert fit["flags"][0]["message"] == (
        "the learning rate was halved 1 time before step 3 (on_divergence='backoff'; 1 in this fit)")
    assert "halved 2 times before step 5 (on_divergence='backoff'; 3 in this fit)" in fit["flags"][1]["message"]
    store.apply(records(first=len(halvings), recs=[rec(8, lr_halvings=3)]))
    assert only_fit(store)["flag_counts"] == {"divergence": 2}
    # an asynchronous round whose pushes diverged: no loss, and the halving, in one record: one flag
    store.apply(records(first=len(halvings) + 1, recs=[rec(9, loss=math.nan, lr_halvings=4)]))
    fit = only_fit(store)
    assert fit["flag_counts"] == {"divergence": 3}
    assert fit["flags"][-1]["message"] == ("the learning rate was halved 1 time before step 9 (on_divergence="
                                           "'backoff'; 4 in this fit); the objective is not finite at step 9 "
                                           "(loss=nan)")


def test_straggler_from_the_records_median_names_the_group_and_its_worker():
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1, compute_time_max=0.5, compute_time_median=0.01, slowest_group=0),  # warm-up
                              rec(2, compute_time_max=0.019, compute_time_median=0.01),  # 1.9x: no flag
                              rec(3, compute_time_max=0.05, compute_time_median=0.01, slowest_group=1),
                              rec(4, compute_time_max=0.009, compute_time_median=0.001),  # 9x, 8 ms: jitter
                              rec(5, compute_time_max=0.05, compute_time_median=0.01)]))  # group unknown
    fit = only_fit(store)
    assert [(f["kind"], f["step"]) for f in fit["flags"]] == [("straggler", 3), ("straggler", 5)]
    assert fit["flags"][0]["message"] == (
        "group 1 (worker tcp://b:2) computed for 0.05 s at step 3, 5.0x the median group's 0.01 s")
    assert fit["flags"][1]["message"].startswith("the slowest group computed for 0.05 s at step 5")
    assert "group_times" not in fit


def test_straggler_names_no_worker_when_the_workers_are_not_one_per_group():
    store = FitStore()
    store.apply(start(n_groups=3))  # two workers, three groups: which holds group 1 is unknown
    store.apply(records(recs=[rec(2, compute_time_max=0.05, compute_time_median=0.01, slowest_group=1)]))
    assert only_fit(store)["flags"][0]["message"].startswith("group 1 computed for 0.05 s at step 2")


def test_staleness_is_flagged_once_per_episode_at_its_bound_and_counted():
    store = FitStore()
    store.apply(start(mode="async", max_staleness=3))
    stale = [2, 3, 3, 3, 1, 3, 4, 2]
    store.apply(records(recs=[rec(s, staleness_max=v) for s, v in enumerate(stale, start=1)]))
    fit = only_fit(store)
    assert [(f["kind"], f["step"]) for f in fit["flags"]] == [("staleness", 2), ("staleness", 6)]
    assert "max_staleness=3" in fit["flags"][0]["message"]
    assert fit["staleness_at_bound"] == 5
    sync = FitStore()
    sync.apply(start())  # no max_staleness: nothing is at a bound
    sync.apply(records(recs=[rec(1, staleness_max=5)]))
    assert (only_fit(sync)["staleness_at_bound"], only_fit(sync)["flags"]) == (0, [])


@pytest.mark.parametrize(("status", "flag"), [("error", "error"), ("stopped", "stopped early")])
def test_end_status_error_and_stopped_are_flagged(status, flag):
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1), rec(2)]))
    store.apply({"kind": "end", "fit": "f1", "status": status, "message": "why", "wall": 1.0})
    fit = only_fit(store)
    assert fit["status"] == status and fit["flags"] == [{"step": 2, "kind": flag, "message": "why"}]


def test_worker_lost_flags_only_running_fits_of_that_worker():
    store = FitStore()
    store.apply(start("uses"))
    store.apply(start("other", workers=["tcp://c:3"]))
    store.apply(start("done"))
    store.apply({"kind": "end", "fit": "done", "status": "done"})
    assert store.worker_lost("tcp://b:2") == ["uses"]
    assert kinds(only_fit(store, fit="uses")) == ["worker lost"]
    assert kinds(only_fit(store, fit="other")) == kinds(only_fit(store, fit="done")) == []


def test_worker_metrics_are_kept_for_running_fits_only():
    store = FitStore()
    store.apply(start())
    assert store.running_workers() == {"tcp://a:1", "tcp://b:2"}
    store.add_metrics(10.0, {"tcp://a:1": (50.0, 1e6), "tcp://z:9": (1.0, 1.0)})
    store.apply({"kind": "end", "fit": "f1", "status": "done"})
    store.add_metrics(11.0, {"tcp://a:1": (60.0, 2e6)})
    assert only_fit(store)["worker_metrics"] == {"tcp://a:1": {"time": [10.0], "cpu": [50.0], "memory": [1e6]}}
    assert store.running_workers() == set()


def test_eta_from_the_recent_iteration_rate():
    store = FitStore()
    store.apply(start(max_iter=100))
    store.apply(records(recs=[rec(1, time=1.0), rec(2, time=1.5), rec(11, iteration=11, time=6.0)]))
    # 10 iterations in 5 s: 2 per second, 89 left
    assert only_fit(store)["eta_seconds"] == pytest.approx(44.5)
    store.apply({"kind": "end", "fit": "f1", "status": "done"})
    assert only_fit(store)["eta_seconds"] is None


def test_eta_unknown_without_max_iter_or_progress():
    store = FitStore()
    store.apply(start(max_iter=None))
    store.apply(records(recs=[rec(1), rec(2)]))
    assert only_fit(store)["eta_seconds"] is None
    store.apply(start("g"))
    store.apply(records("g", recs=[rec(1, time=1.0), rec(2, iteration=1, time=2.0)]))
    assert only_fit(store, fit="g")["eta_seconds"] is None


def test_at_most_max_fits_and_finished_ones_go_first():
    store = FitStore()
    store.apply(start("running-0"))
    for i in range(1, MAX_FITS):
        store.apply(start(f"done-{i}"))
        store.apply({"kind": "end", "fit": f"done-{i}", "status": "done"})
    store.apply(start("new"))
    ids = [f["fit"] for f in store.fits_json()["fits"]]
    assert len(ids) == MAX_FITS and "running-0" in ids and "done-1" not in ids and ids[0] == "new"


def test_all_running_the_oldest_goes():
    store = FitStore()
    for i in range(MAX_FITS + 1):
        store.apply(start(f"r{i}"))
    ids = {f["fit"] for f in store.fits_json()["fits"]}
    assert len(ids) == MAX_FITS and "r0" not in ids and f"r{MAX_FITS}" in ids


def test_old_records_are_thinned_beyond_max_records(monkeypatch):
    monkeypatch.setattr(_store, "MAX_RECORDS", 10)
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(s) for s in range(1, 12)]))  # 11 > 10: the older half thinned
    fit = only_fit(store)
    assert [r["step"] for r in fit["records"]] == [1, 3, 5, 6, 7, 8, 9, 10, 11]
    assert fit["next"] == 11
    assert [r["step"] for r in only_fit(store, since=3)["records"]] == [5, 6, 7, 8, 9, 10, 11]
    store.apply(records(first=11, recs=[rec(12)]))
    assert [r["step"] for r in only_fit(store)["records"]][-2:] == [11, 12]


def test_flags_are_bounded_but_counted(monkeypatch):
    store = FitStore()
    store.apply(start())
    n = _store.MAX_FLAGS + 5
    store.apply(records(recs=[rec(s, loss=math.nan) for s in range(1, n + 1)]))
    fit = only_fit(store)
    assert len(fit["flags"]) == _store.MAX_FLAGS and fit["flags"][-1]["step"] == n
    assert fit["flag_counts"] == {"divergence": n}


def test_the_module_examples_run():
    import doctest

    result = doctest.testmod(_store)
    assert result.attempted > 0 and result.failed == 0


def test_the_json_joins_each_records_text_encoded_once_and_equals_the_full_encoding():
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(1), rec(2, loss=math.nan, grad_norm=-math.inf), rec(3, bytes_up=(1, 2))]))
    fit = store.fits["f1"]
    assert fit.texts == [json.dumps(json_safe(r), allow_nan=False) for r in fit.records]  # encoded on arrival
    fit.records[0]["loss"] = 123.0  # the response is made of the cached texts, not re-encoded
    body = store.to_json()
    expected = {**fit.summary(), "first": 0, "next": 3, "worker_metrics": {},
                "records": [rec(1), {**rec(2), "loss": None, "grad_norm": None}, {**rec(3), "bytes_up": [1, 2]}]}
    assert json.loads(body) == {"protocol": 1, "fits": [json_safe(expected)]}
    assert store.fits_json() == json.loads(body)
    (since,) = json.loads(store.to_json(fit="f1", since=2))["fits"]
    assert since["records"] == [{**rec(3), "bytes_up": [1, 2]}] and since["first"] == 2


def test_thinning_drops_the_cached_texts_with_their_records_and_is_counted(monkeypatch):
    monkeypatch.setattr(_store, "MAX_RECORDS", 10)
    store = FitStore()
    store.apply(start())
    store.apply(records(recs=[rec(s) for s in range(1, 11)]))
    fit = store.fits["f1"]
    assert fit.thinned == 0
    store.apply(records(first=10, recs=[rec(11)]))
    assert fit.thinned == 1
    assert [json.loads(t)["step"] for t in fit.texts] == [r["step"] for r in fit.records] == [1, 3, 5, 6, 7, 8, 9,
                                                                                                 10, 11]
    assert [r["step"] for r in only_fit(store)["records"]] == [1, 3, 5, 6, 7, 8, 9, 10, 11]


def test_worker_samples_are_counted_past_the_bound(monkeypatch):
    monkeypatch.setattr(_store, "MAX_SAMPLES", 2)
    store = FitStore()
    store.apply(start(workers=["tcp://a:1"]))
    for t in range(1, 5):
        store.add_metrics(float(t), {"tcp://a:1": (10.0, 1e6)})
    fit = store.fits["f1"]
    assert fit.samples_received == 4 and list(fit.worker_metrics["tcp://a:1"]["time"]) == [3.0, 4.0]


def test_notes_become_flags_and_unknown_notes_are_ignored():
    store = FitStore()
    store.apply({"kind": "start", "fit": "n", "estimator": "E"})
    store.apply({"kind": "records", "fit": "n", "first": 0, "records": [{"step": 1}, {"step": 2}]})
    assert store.apply({"kind": "note", "fit": "n", "what": "skew", "entry": {
        "imbalance_before": 1.8, "imbalance_after": 1.02, "action": "rechunked", "moved_blocks": 5}})
    assert store.apply({"kind": "note", "fit": "n", "what": "rebalance", "entry": {
        "step": 2, "moved_blocks": 3, "predicted_step_ratio": 0.7}})
    assert store.apply({"kind": "note", "fit": "n", "what": "retry", "entry": {"lost": ["tcp://a:1"]}})
    assert not store.apply({"kind": "note", "fit": "n", "what": "gossip", "entry": {}})
    assert not store.apply({"kind": "note", "fit": "n", "what": "retry", "entry": "not a dict"})
    flags = [(f["kind"], f["step"], f["message"]) for f in store.fits_json()["fits"][0]["flags"]]
    assert flags == [
        ("skew", None, "data skew at the start: max/mean worker load 1.80 before, 1.02 after (rechunked; 5 blocks "
                       "moved)"),
        ("rebalance", 2, "3 blocks moved toward faster workers (predicted step 0.70x)"),
        ("retry", 2, "lost worker(s) ['tcp://a:1']: shards recomputed, step retried"),
    ]

"""The ``dashboard`` benchmark suite (issue 46: the live page's cost per step): its
interface and tiny real runs (a LocalCluster of worker processes: slow).  They check the
structure and that the arms do what they say (``off`` sends nothing to the page), not
the overhead target (that needs the full size on a quiet machine)."""

import pytest

from benchmarks.__main__ import _jsonable
from benchmarks.suites import SUITES, dashboard


def test_dashboard_suite_interface():
    assert "dashboard" in SUITES
    assert dashboard.NAME == "dashboard" and dashboard.DESCRIPTION
    assert set(dashboard.SIZES) == {"small", "full"}
    full = dashboard.SIZES["full"]
    assert full["workers"] == 2 and full["repeats"] >= 5  # the 2-worker fit, >= 5 repeats per arm
    assert dashboard.SIZES["small"]["rows"] < full["rows"]
    with pytest.raises(TypeError, match=r"unknown parameters for the dashboard suite: \['not_a_parameter'\]"):
        dashboard.run("small", not_a_parameter=1)
    with pytest.raises(ValueError, match=r"unknown size 'huge' for the dashboard suite"):
        dashboard.run("huge")


def _check(result, arms):
    import json

    assert set(result) >= {"title", "markdown", "table", "data"}
    assert "|---|" in result["table"]
    data = result["data"]
    assert tuple(data["runs"]) == arms
    for arm in arms:
        (run,) = data["runs"][arm]
        assert run["steps"] == data["params"]["max_iter"] + 1  # tol=0: every iteration, plus the start
        assert 0 < run["measured_steps"] <= run["steps"]
        assert run["step_time"] > 0 and run["driver_cpu"] >= 0
    assert data["ratio"]["off"] == data["paired_ratio"]["off"] == 1.0
    # the warm-up and the fits with the page on reached the page; the "off" fit did not
    assert data["fits_on_page"] == data["expected_fits_on_page"] == 1 + len(arms) - 1
    json.dumps(_jsonable(data))


@pytest.mark.slow
def test_dashboard_suite_tiny():
    result = dashboard.run("small", repeats=1, rows=4_000, features=5, chunks=4, max_iter=30, browser=False,
                           log=lambda msg: None)
    _check(result, ("off", "on"))
    assert result["data"]["why_no_browser"] == "the browser arm was switched off (browser=False)"
    assert "was not run: the browser arm was switched off" in result["markdown"]


@pytest.mark.slow
@pytest.mark.browser
def test_dashboard_suite_tiny_with_the_page_open():
    why = dashboard.browser_unavailable()
    if why:
        pytest.skip(why)
    # (the fit waits at its first step until the page shows it: a few steps are enough)
    result = dashboard.run("small", repeats=1, rows=4_000, features=5, chunks=4, max_iter=30,
                           log=lambda msg: None)
    _check(result, ("off", "on", "open"))
    (opened,) = result["data"]["runs"]["open"]
    assert 1 <= opened["opened_at"] < opened["steps"]  # (the fit waited at its first step for the page)

"""Fixtures of the engine's fault tests."""

import logging

import pytest


@pytest.fixture
def process_client(make_cluster):
    """A fresh cluster of 3 worker processes (with nannies) for every test that kills or
    freezes a worker: whether and when a nanny brings back an earlier test's victim is
    Dask's business and the machine's load (a CI run under load once waited more than 3
    minutes for it), not these tests'.  Worker processes still stopped (SIGSTOP) at the
    end are killed (``make_cluster``)."""
    return make_cluster(3, silence_logs=logging.CRITICAL)

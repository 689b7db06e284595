"""Fixtures of the recommender tests."""

import pytest


@pytest.fixture(scope="module")
def process_client(make_module_cluster):
    """Two single-threaded worker processes (an ``alpha="auto"`` path runs in tasks only
    on workers in processes of their own)."""
    return make_module_cluster(n_workers=2)

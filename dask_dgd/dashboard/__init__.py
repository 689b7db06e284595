"""The live training page in the Dask dashboard: ``<dashboard>/dgd``.

While a dask_dgd estimator fits on a distributed cluster, its driver sends the step
records (the rows of ``history_``) to the scheduler on the ``"dask_dgd"`` event topic,
and :class:`DashboardPlugin`, a scheduler plugin, keeps them and shows them on the
dashboard users already open: a "Dgd" tab, the page ``<dashboard>/dgd`` (objective,
gradient norm, where each step's time went, stragglers, bytes, staleness, the workers'
cpu and memory, flags) and their JSON at ``<dashboard>/dgd/records.json``.

The estimators register the plugin themselves (dask config ``dgd.dashboard``, default
True).  To have the page before any fit, start the scheduler with it::

    dask scheduler --preload dask_dgd.dashboard
    LocalCluster(scheduler_kwargs={"preload": ["dask_dgd.dashboard"]})

This module imports only distributed and tornado (the scheduler imports it; Bokeh is
imported when the plugin starts, and without it the page is a plain one that points at
the JSON).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._plugin import NAME, TOPIC, DashboardPlugin, plugin_of

if TYPE_CHECKING:
    from distributed import Client, Scheduler

__all__ = ["TOPIC", "DashboardPlugin", "dashboard_url", "dask_setup", "records"]


def dask_setup(scheduler: Scheduler) -> None:
    """Add the plugin to ``scheduler``: the hook of ``dask scheduler --preload
    dask_dgd.dashboard`` (and of ``scheduler_kwargs={"preload": [...]}``)."""
    scheduler.add_plugin(DashboardPlugin(), name=NAME, idempotent=True)


def _fits_on_scheduler(dask_scheduler: Scheduler, fit: str | None = None, since: int = 0) -> str | None:
    plugin = plugin_of(dask_scheduler)  # the JSON text: cheap on the scheduler (its cached record texts)
    return None if plugin is None else plugin.store.to_json(fit=fit, since=since)


def records(client_or_address: Client | str | None = None, *, fit: str | None = None,
            since: int = 0) -> dict[str, Any]:
    """The fits the scheduler's :class:`DashboardPlugin` has seen, as
    ``<dashboard>/dgd/records.json`` serves them, through the client (no HTTP).

    Parameters
    ----------
    client_or_address : distributed.Client, str or None
        A client, a scheduler address (a client is opened and closed), or None for the
        default client.
    fit : str or None
        Only this fit (its id: the ``fit`` field); an unknown id gives no fits.
    since : int
        Only the records from this index on (the ``next`` of an earlier answer).

    Returns
    -------
    dict
        ``{"protocol": 1, "fits": [...]}``, newest fit first; each fit's fields are
        described in the user guide's monitoring section (``records`` are the rows of the
        fitted model's ``history_``, NaN and infinities as None).

    Raises
    ------
    InputError
        When the plugin is not running on that scheduler.
    """
    from distributed import Client, default_client

    from ..exceptions import InputError

    own = isinstance(client_or_address, str)
    client = (Client(client_or_address, set_as_default=False) if isinstance(client_or_address, str)
              else client_or_address if client_or_address is not None else default_client())
    address = client.scheduler.address  # (before a client of our own closes)
    try:
        out = client.run_on_scheduler(_fits_on_scheduler, fit=fit, since=int(since))
    finally:
        if own:
            client.close()
    if out is None:
        raise InputError(f"the scheduler at {address} runs no dask_dgd dashboard plugin; "
                         "register it with client.register_plugin(DashboardPlugin()) or start the scheduler "
                         "with --preload dask_dgd.dashboard")
    return dict(json.loads(out))


def dashboard_url(client: Client) -> str | None:
    """The live page's URL, ``<dashboard>/dgd`` (the client's dashboard link with
    ``/dgd`` in place of ``/status``), or None when the cluster has no dashboard."""
    from .._engine.runtime.publish import page_url

    return page_url(client)

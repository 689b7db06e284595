"""The scheduler plugin behind the live training page: :class:`DashboardPlugin`.

It keeps a :class:`~._store.FitStore` fed by the ``"dask_dgd"`` events (a fit's start
and end) and the drivers' batches of records (:data:`RECORDS_OP`), and serves it on
the scheduler's dashboard port: ``<dashboard>/dgd/records.json`` and the page
``<dashboard>/dgd`` (a Bokeh document in Dask's look; a plain page pointing at the JSON
when the scheduler has no Bokeh).  Adding a page and a navigation tab to Dask's
dashboard uses Dask's private API (``Scheduler.http_application``, the memoized
``distributed.dashboard.scheduler.template_variables``, ``DaskBokehTornado``): each
step is guarded, and a failure only loses that part (logged at debug level).
"""

from __future__ import annotations

import html
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import web
from tornado.ioloop import IOLoop, PeriodicCallback

from ._names import NAME, PAGE, RECORDS_OP, TOPIC
from ._store import FitStore

if TYPE_CHECKING:
    from distributed import Scheduler

__all__ = ["NAME", "RECORDS_OP", "TOPIC", "DashboardPlugin", "dashboard_prefix", "plugin_of"]

logger = logging.getLogger("dask_dgd.dashboard")

#: Milliseconds between two samples of the workers' cpu and memory.
SAMPLE_MS = 1000

#: The HTTP applications our routes were added to (Tornado cannot remove routes: the
#: handlers find the plugin by name at each request, so a plugin registered anew is used).
_ROUTED: weakref.WeakSet[Any] = weakref.WeakSet()


def plugin_of(scheduler: Scheduler) -> DashboardPlugin | None:
    """The scheduler's :class:`DashboardPlugin`, or None."""
    plugin = scheduler.plugins.get(NAME)
    return plugin if isinstance(plugin, DashboardPlugin) else None


def dashboard_prefix(scheduler: Scheduler) -> str:
    """The dashboard's URL prefix ("" or e.g. "/dask"): the scheduler does not keep it;
    its Bokeh application does, and Dask's own ``<prefix>/health`` route shows it (a
    scheduler without Bokeh)."""
    app = getattr(scheduler, "http_application", None)
    for bokeh_app in getattr(app, "applications", ()):
        prefix = getattr(bokeh_app, "prefix", None)
        if isinstance(prefix, str):
            return prefix.rstrip("/")
    for rule in getattr(getattr(app, "wildcard_router", None), "rules", ()):
        path = getattr(rule.matcher, "_path", None)
        if isinstance(path, str) and path.endswith("/health"):
            return path[: -len("/health")].rstrip("/")
    return ""


def _records_handler(scheduler: Scheduler) -> Any:
    """The scheduler's handler of :data:`RECORDS_OP`: a batch of records for the store
    of the plugin registered now (whether it kept them)."""

    def dask_dgd_records(msg: Any = None) -> bool:
        plugin = plugin_of(scheduler)
        return plugin is not None and plugin._apply(msg)

    return dask_dgd_records


class _Handler(web.RequestHandler):
    def initialize(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler


class RecordsHandler(_Handler):
    """``GET .../dgd/records.json[?fit=ID][&since=N]``: :meth:`FitStore.to_json`."""

    def get(self) -> None:
        plugin = plugin_of(self.scheduler)
        if plugin is None:
            raise web.HTTPError(404, reason="the dask_dgd plugin is not running on this scheduler")
        fit = self.get_query_argument("fit", None)
        since = self.get_query_argument("since", "0")
        try:
            start = int(since)
        except ValueError:
            raise web.HTTPError(400, reason=f"since must be an integer record index; got {since!r}") from None
        self.set_header("Content-Type", "application/json")
        self.write(plugin.store.to_json(fit=fit, since=max(0, start)))


class PlainPageHandler(_Handler):
    """``GET .../dgd`` on a scheduler without Bokeh: where the JSON is."""

    def initialize(self, scheduler: Scheduler, prefix: str = "") -> None:
        self.scheduler, self.prefix = scheduler, prefix

    def get(self) -> None:
        self.set_header("Content-Type", "text/html")
        url = html.escape(f"{self.prefix}/{PAGE}/records.json")  # (absolute: the same from /dgd and /dgd/)
        self.write("<!DOCTYPE html><html><head><title>dask_dgd</title></head><body><h1>dask_dgd</h1>"
                   "<p>This scheduler has no Bokeh, so there are no plots here (install bokeh on the "
                   f'scheduler for the live page). The fits\' records are at <a href="{url}">{url}</a>.</p>'
                   "</body></html>")


class DashboardPlugin(SchedulerPlugin):
    """The live training page of dask_dgd fits, on the scheduler's dashboard.

    Register it from a client, ``client.register_plugin(DashboardPlugin())`` (the
    estimators do it when the ``dgd.dashboard`` config is True, the default), or start
    the scheduler with ``--preload dask_dgd.dashboard``.  It is idempotent: a second
    registration keeps the first instance and its records.

    On the scheduler it adds

    - ``<dashboard>/dgd/records.json``: the fits as JSON (see
      :meth:`FitStore.fits_json`); ``?fit=<id>`` for one fit, ``?since=<n>`` for its
      records from index ``n`` on;
    - ``<dashboard>/dgd``: the live page (Bokeh; a plain page naming the JSON's URL when
      the scheduler cannot import Bokeh) and a "Dgd" tab in the dashboard's navigation
      bar;
    - once a second, the cpu and memory of the workers of running fits (from the
      workers' heartbeats).

    The start and end events logged on the ``"dask_dgd"`` topic before the plugin
    started (the last 1000 the scheduler keeps) are replayed.  A fit's records come in
    batches through the scheduler's :data:`RECORDS_OP` operation (the event log would
    keep up to 1000 batches of them, beyond the store's bounds).  A fit whose driver's
    client leaves the scheduler before its end ends as an error.

    Attributes
    ----------
    store : FitStore
        The fits seen (the last :data:`~._store.MAX_FITS`).
    scheduler : distributed.Scheduler or None
        The scheduler, once started.
    """

    name = NAME
    idempotent = True

    def __init__(self) -> None:
        self.store = FitStore()
        self.scheduler: Scheduler | None = None
        self._sampler: PeriodicCallback | None = None
        self._clients: dict[str, str] = {}  # running fit -> the id of its driver's client

    async def start(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        for _, msg in scheduler.get_events(TOPIC):
            self._apply(msg)
        # the records themselves come through a handler of their own, not the event log
        # (which keeps the last 1000 events of a topic whatever their size)
        scheduler.handlers[RECORDS_OP] = _records_handler(scheduler)
        app = getattr(scheduler, "http_application", None)
        if app is not None and app not in _ROUTED:
            _ROUTED.add(app)
            self._add_routes(scheduler, app)
        self._sampler = PeriodicCallback(self.sample, SAMPLE_MS)
        self._sampler.start()

    def _add_routes(self, scheduler: Scheduler, app: Any) -> None:
        prefix = dashboard_prefix(scheduler)
        routes: list[Any] = [(rf"{prefix}/{PAGE}/records\.json", RecordsHandler, {"scheduler": scheduler})]
        try:
            from ._page import bokeh_application

            bokeh_app = bokeh_application(scheduler, prefix)
        except Exception as err:  # noqa: BLE001 - no bokeh (or a Dask that changed): the plain page
            logger.debug("dask_dgd: no Bokeh page on the scheduler (%r); serving a plain page", err)
            routes.append((rf"{prefix}/{PAGE}/?", PlainPageHandler, {"scheduler": scheduler, "prefix": prefix}))
            bokeh_app = None
        app.add_handlers(r".*", routes)
        if bokeh_app is not None:
            app.add_application(bokeh_app)
            bokeh_app.initialize(IOLoop.current())
        try:  # the nav tab: Dask keeps one memoized dict per scheduler, shared by its pages
            from distributed.dashboard.scheduler import template_variables

            pages = template_variables(scheduler)["pages"]
            if PAGE not in pages:
                pages.append(PAGE)
        except Exception as err:  # noqa: BLE001 - private API: no tab, the page still works
            logger.debug("dask_dgd: no navigation tab on the dashboard (%r)", err)

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != TOPIC:
            return
        self._apply(msg)

    def _apply(self, msg: Any) -> bool:
        if not self.store.apply(msg):
            logger.debug("dask_dgd: ignored a message it cannot read: %.200r", msg)
            return False
        if isinstance(msg, dict) and isinstance(msg.get("fit"), str):
            if msg.get("kind") == "start" and isinstance(msg.get("client"), str):
                self._clients[msg["fit"]] = msg["client"]
            elif msg.get("kind") == "end":
                self._clients.pop(msg["fit"], None)
        return True

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        """A driver gone before its fits ended (killed, a kernel restarted, a lost
        connection): they end, as errors, rather than run on the page for ever."""
        for fit in [f for f, c in self._clients.items() if c == client]:
            self._apply({"kind": "end", "fit": fit, "status": "error",
                         "message": "the driver's client left the scheduler before the fit ended", "wall": time.time()})

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self.store.worker_lost(worker)

    def sample(self) -> None:
        """Keep the cpu (percent) and memory (bytes) of the running fits' workers, as
        their last heartbeats reported them; stops sampling once the plugin is no longer
        the scheduler's."""
        if self.scheduler is None:
            return
        if plugin_of(self.scheduler) is not self:  # unregistered (the scheduler does not close it)
            if self._sampler is not None:
                self._sampler.stop()
                self._sampler = None
            return
        wanted = self.store.running_workers()
        if not wanted:
            return
        metrics = {}
        for address in wanted:
            ws = self.scheduler.workers.get(address)
            if ws is not None:
                metrics[address] = (ws.metrics.get("cpu"), ws.metrics.get("memory"))
        if metrics:
            self.store.add_metrics(time.time(), metrics)

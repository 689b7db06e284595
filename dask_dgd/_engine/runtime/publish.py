"""The driver's side of the live training page: a fit's records sent to the scheduler.

A fit on a distributed cluster registers :class:`dask_dgd.dashboard.DashboardPlugin`
on the scheduler (once per scheduler address in this process) and, through a
:class:`Publisher` its :class:`~.monitor.Monitor` owns, sends the scheduler events on
the topic ``"dask_dgd"`` (``Client.log_event``): a ``start`` message, then the new
records every :data:`INTERVAL` seconds from a daemon thread through the plugin's own
scheduler operation (:data:`RECORDS_OP`; the fit's thread only appends to
``Monitor.records``, as it always did), and at the end a last batch and an ``end``
message.  The plugin keeps them for the dashboard's ``/dgd`` page.

Nothing here may fail or slow a fit: a scheduler that cannot import the plugin, or
a send that fails, is logged once and the fit goes on without publishing.  The dask
config ``dgd.dashboard`` (default True) set to False sends and registers nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import dask
import numpy as np

from ...dashboard._names import RECORDS_OP, TOPIC
from ...exceptions import ParameterError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from distributed import Client

__all__ = ["BATCH", "INTERVAL", "PROTOCOL", "TOPIC", "Publisher", "dashboard_enabled", "page_url", "plain",
           "register_page", "start_publisher"]

logger = logging.getLogger("dask_dgd")

#: The version of the messages' layout (in the start message).
PROTOCOL = 1
#: Seconds between two batches of records.
INTERVAL = 0.5
#: Records in one message at most (a longer backlog goes as several).
BATCH = 1000
#: Seconds the end of a fit waits for the last records and the end message to be sent
#: (a scheduler that is gone may hold a send up to the connect timeout; the fit does not wait for it).
CLOSE_TIMEOUT = 10.0

#: Whether the page's plugin is on the scheduler at each address (registered by this process, or refused).
_pages: dict[str, bool] = {}
_pages_lock = threading.Lock()


def dashboard_enabled() -> bool:
    """The dask config ``dgd.dashboard`` (default True): whether fits on a cluster feed
    the live page."""
    value = dask.config.get("dgd.dashboard", True)
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"dask config dgd.dashboard must be True or False; got {value!r}")
    return bool(value)


def page_url(client: Client) -> str | None:
    """The live page's address: the client's dashboard link with ``/dgd`` in place of
    ``/status`` (None when the scheduler has no dashboard)."""
    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None  # (dashboard_link would name the default port anyway)
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 - no dashboard: no link
        return None
    if not link:
        return None
    base, _, last = link.rstrip("/").rpartition("/")
    return f"{base if last == 'status' else link.rstrip('/')}/dgd"


def register_page(client: Client) -> bool:
    """Register the page's plugin on ``client``'s scheduler, once per scheduler address
    in this process; whether it is there.  Logs once per address where the page is, or
    that there is none (the scheduler cannot import ``dask_dgd``, an old one, ...)."""
    address = str(client.scheduler.address)
    try:  # (a scheduler started anew at the same address has its own id, and no plugin yet)
        key = f"{address} {client.scheduler_info().get('id')}"
    except Exception:  # noqa: BLE001 - the address alone
        key = address
    with _pages_lock:
        if key in _pages:
            return _pages[key]
        try:
            from ...dashboard import DashboardPlugin

            client.register_plugin(DashboardPlugin())
        except Exception as err:  # noqa: BLE001 - ImportError first (the scheduler's or ours), any other refusal alike
            # (a warning, shown by default: the one place this process says where the records are)
            why = "cannot import dask_dgd" if isinstance(err, ImportError) else "refused the live page's plugin"
            logger.warning("the scheduler at %s %s (%s: %s): no live training page for fits on it; their records "
                           "are in each fitted model's history_ (plot them with dask_dgd.diagnostics.plot_history)",
                           address, why, type(err).__name__, err)
            _pages[key] = False
        else:
            logger.info("live training page: %s", page_url(client) or f"(the scheduler at {address} has no dashboard)")
            _pages[key] = True
        return _pages[key]


def plain(value: Any) -> Any:
    """``value`` as msgpack takes it: NumPy scalars and arrays as Python numbers and
    lists, tuples as lists, mappings as dicts with string keys (NaN and inf stay floats)."""
    if isinstance(value, np.generic):  # (before float: np.float64 is one, and msgpack wants the exact type)
        return value.item()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


class Publisher:
    """Sends one fit's records to the scheduler's live page (see the module's doc).

    Parameters
    ----------
    client : distributed.Client
    records : list of dict
        The fit's records as the monitor appends them (read, never changed).
    start : mapping
        The start message's fields about the fit (``estimator``, ``mode``,
        ``max_iter``, ``max_staleness``, ``n_groups``, ``workers``).
    notes : callable or None
        Returns ``{what: entries}``: lists the fit appends to (``"skew"``: the data-skew
        placement at the start, ``"rebalance"``: the dynamic moves of blocks,
        ``"retry"``: the steps retried after a worker loss); each new entry is sent
        once, as a ``note`` message, and becomes one of the page's flags.
    """

    def __init__(self, client: Client, records: Sequence[dict[str, Any]], start: Mapping[str, Any],
                 notes: Callable[[], Mapping[str, Sequence[Any]]] | None = None) -> None:
        self.client = client
        self.records = records
        self.notes = notes
        self._noted: dict[str, int] = {}  # entries of each note list sent
        self.fit = uuid.uuid4().hex
        self.sent = 0
        self.failed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._start = {"kind": "start", "protocol": PROTOCOL, "fit": self.fit,
                       **{k: plain(start.get(k)) for k in ("estimator", "mode", "max_iter", "max_staleness",
                                                           "n_groups", "workers")},
                       "driver": socket.gethostname(), "pid": os.getpid(), "client": str(client.id),
                       "wall": time.time()}
        self._end: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"dask_dgd-publish-{self.fit[:8]}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The sending thread: the start, the new records every :data:`INTERVAL`
        seconds, and once :meth:`close` asks, the last ones and the end."""
        try:
            self._send(self._start)
            while not self._stop.wait(INTERVAL) and not self.failed:
                self.flush()
            self.flush()
        except Exception as err:  # noqa: BLE001 - e.g. a record a callback changes while it is read
            logger.info("stopped sending fit %s's records to the live page: %s: %s", self.fit,
                        type(err).__name__, err)
            self._stop.wait()  # (then still the end: the page must not show the fit running for ever)
        if self._end is not None:
            self._send(self._end)

    def flush(self) -> None:
        """Send the records not sent yet, at most :data:`BATCH` a message."""
        with self._lock:
            n = len(self.records)
            while self.sent < n and not self.failed:
                batch = [plain(r) for r in self.records[self.sent:min(n, self.sent + BATCH)]]
                if self._send({"kind": "records", "fit": self.fit, "first": self.sent, "records": batch},
                              records=True):
                    self.sent += len(batch)
            for what, entries in (self.notes() if self.notes is not None else {}).items():
                for entry in list(entries)[self._noted.get(what, 0):]:
                    if not self._send({"kind": "note", "fit": self.fit, "what": what, "entry": plain(entry)},
                                      records=True):
                        return
                    self._noted[what] = self._noted.get(what, 0) + 1

    def close(self, status: str = "done", message: str = "", timeout: float = CLOSE_TIMEOUT) -> None:
        """The last records and the end message (``status``: ``"done"``, ``"error"`` or
        ``"stopped"``), sent before this returns unless that takes over ``timeout``
        seconds (then the page misses them, and says nothing more of this fit)."""
        self._end = {"kind": "end", "fit": self.fit, "status": status, "message": str(message), "wall": time.time()}
        self._stop.set()
        deadline = time.monotonic() + timeout
        # (while the client is connected: once it is not, the scheduler is gone and the sends are lost)
        while (self._thread.is_alive() and time.monotonic() < deadline
               and getattr(self.client, "status", "running") == "running"):
            self._thread.join(min(0.1, max(0.0, deadline - time.monotonic())))
        if self._thread.is_alive():
            self.failed = True
            logger.info("the scheduler did not take fit %s's last records (within %g s, or it is gone): the live "
                        "page misses them", self.fit, timeout)

    def _send(self, msg: dict[str, Any], records: bool = False) -> bool:
        """Send ``msg``: an event of :data:`TOPIC`, or (``records``) a batch of records
        through the plugin's own operation on the scheduler (the event log would keep
        the last 1000 batches, whatever their size)."""
        if self.failed:
            return False
        try:
            if records:
                self.client.sync(getattr(self.client.scheduler, RECORDS_OP), msg=msg)
            else:
                self.client.log_event(TOPIC, msg)
        except Exception as err:  # noqa: BLE001 - a failing send never fails the fit
            if self.failed:  # (close gave up on it already, and said so)
                return False
            self.failed = True
            logger.info("dask_dgd stopped sending fit %s to the live page: %s: %s", self.fit, type(err).__name__, err)
            return False
        return True


def start_publisher(client: Any, records: Sequence[dict[str, Any]], start: Mapping[str, Any],
                    notes: Callable[[], Mapping[str, Sequence[Any]]] | None = None) -> Publisher | None:
    """A :class:`Publisher` of ``records`` when ``client`` is a running distributed
    client, ``dgd.dashboard`` is on and the scheduler has the page; else None."""
    if client is None or not dashboard_enabled():
        return None
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - no distributed: no cluster
        return None
    if not isinstance(client, Client) or client.status != "running":
        return None
    try:
        if not register_page(client):
            return None
        return Publisher(client, records, start, notes)
    except Exception as err:  # noqa: BLE001 - never fails the fit
        logger.info("dask_dgd: no live page for this fit: %s: %s", type(err).__name__, err)
        return None


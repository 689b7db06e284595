"""The live training page: a Bokeh document on the scheduler, in Dask's dashboard look.

Imported only on the scheduler, when the plugin starts (it needs bokeh and
``distributed.dashboard``).  Each browser session gets its own document: a fit selector,
a header line and plots fed by the plugin's store every :data:`UPDATE_MS` milliseconds,
streaming only the records that arrived since the last update (all of them again when the
store has thinned them, :data:`~dask_dgd.dashboard._store.MAX_RECORDS`).  The page follows
the newest running fit (cross-validation folds, loops of fits) until the user picks a fit
in the selector; picking the newest running fit follows again.  Strings from the messages
(estimator, end message) are shown as text, never as HTML, and a part of the update that
fails is logged once and leaves the others updating.

Named models (read by tests and by scripts): ``"dgd-fit"`` (the Select), ``"dgd-header"``
(the Div), ``"dgd-steps"`` (one row per record of the selected fit), ``"dgd-workers"``
(one row per worker: its cpu and memory samples), ``"dgd-flags"`` (the DataTable of
flags) and ``"dgd-flag-rows"`` (its source).
"""

from __future__ import annotations

import datetime
import functools
import html
import logging
import math
from typing import TYPE_CHECKING, Any

import dask
from bokeh.application import Application
from bokeh.application.handlers.function import FunctionHandler
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource
from bokeh.models.widgets import DataTable, Div, Select, TableColumn
from bokeh.palettes import Category10
from bokeh.plotting import figure
from bokeh.server.util import create_hosts_allowlist
from distributed.dashboard.core import DaskBokehTornado

from ._names import NAME, PAGE

if TYPE_CHECKING:
    from bokeh.document import Document
    from distributed import Scheduler

    from ._store import Fit

__all__ = ["ETA_CAP_SECONDS", "STEP_COLUMNS", "UPDATE_MS", "bokeh_application", "make_document"]

logger = logging.getLogger(__name__)

#: Milliseconds between two updates of an open page.
UPDATE_MS = 500
#: Record fields copied into the ``"dgd-steps"`` source (None and missing: NaN), then
#: ``ratio`` (bytes_up_raw / bytes_up).
STEP_COLUMNS = ("step", "iteration", "loss", "grad_norm", "compute_time_max", "compute_time_min",
                "compute_time_median", "wait_time", "update_time", "bytes_up", "bytes_down", "bytes_up_raw",
                "staleness_max", "tree_depth", "val_score")
#: ETAs at or above this (1000 hours) are shown as "> 1000 h" (``max_iter=10**18``: no
#: datetime can hold them).
ETA_CAP_SECONDS = 1000 * 3600
_HEIGHT = 220



def _plugin_of(scheduler: Any) -> Any:
    """The scheduler's dask_dgd plugin (anything with a ``store``), or None."""
    plugin = scheduler.plugins.get(NAME)
    return plugin if hasattr(plugin, "store") else None

def bokeh_application(scheduler: Scheduler, prefix: str) -> DaskBokehTornado:
    """A Bokeh server application serving the page at ``<prefix>/dgd``, made as Dask
    makes its own (``distributed.dashboard.core.BokehApplication``)."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    kwargs = dask.config.get("distributed.scheduler.dashboard.bokeh-application").copy()
    origins = create_hosts_allowlist(kwargs.pop("allow_websocket_origin"), scheduler.http_server.port)
    handler = FunctionHandler(functools.partial(make_document, scheduler, prefix))
    return DaskBokehTornado({f"/{PAGE}": Application(handler)}, prefix=prefix, use_index=False,
                            extra_websocket_origins=origins, absolute_url="", **kwargs)


def _float(value: Any) -> float:
    """A plot value: a finite or infinite float, NaN for None and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _columns(records: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {name: [_float(r.get(name)) for r in records] for name in STEP_COLUMNS}
    data["ratio"] = [raw / up if up > 0 else math.nan for raw, up in zip(data["bytes_up_raw"], data["bytes_up"])]
    return data


def _label(fit: Fit) -> str:
    started = datetime.datetime.fromtimestamp(fit.started).strftime("%H:%M:%S") if fit.started else "?"
    return f"{fit.estimator} · {fit.status} · started {started} · {fit.fit[:8]}"


def _duration(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS``, or ``"> 1000 h"`` at :data:`ETA_CAP_SECONDS` and above."""
    if not seconds < ETA_CAP_SECONDS:  # (NaN too)
        return f"> {ETA_CAP_SECONDS // 3600} h"
    return str(datetime.timedelta(seconds=round(seconds)))


def _header(fit: Fit | None) -> str:
    """The header's HTML; every string from a message is escaped (an estimator name or an
    end message such as ``KilledWorker: (<WorkerState ...>)`` shows as text, never runs)."""
    if fit is None:
        return "<b>No dask_dgd fit yet.</b> Fits on this cluster appear here as they start."
    last = fit.records[-1] if fit.records else {}
    iteration = last.get("iteration")
    limit = "" if fit.max_iter is None else f" / {fit.max_iter}"
    eta = fit.eta_seconds()
    esc = html.escape
    parts = [f"<b>{esc(fit.estimator)}</b> ({esc(fit.mode or '?')})", f"status: <b>{esc(fit.status)}</b>",
             f"steps: {fit.received}", f"iteration: {iteration if iteration is not None else '-'}{limit}"]
    if eta is not None:
        parts.append(f"ETA: {esc(_duration(eta))}")
    if fit.halvings:
        parts.append(f"learning rate halved: {fit.halvings}×")
    if fit.staleness_at_bound:
        parts.append(f"at max_staleness: {fit.staleness_at_bound} of {fit.received} records")
    if fit.flag_counts:
        parts.append("flags: " + ", ".join(f"{esc(k)} ×{n}" for k, n in sorted(fit.flag_counts.items())))
    if fit.message and not fit.running:
        parts.append(esc(fit.message))
    return " &nbsp;|&nbsp; ".join(parts)


def _figure(title: str, y_label: str, y_axis_type: Any = "linear", **kwargs: Any) -> Any:
    p = figure(title=title, height=_HEIGHT, sizing_mode="stretch_width", y_axis_type=y_axis_type,
               tools="pan,wheel_zoom,box_zoom,reset,save,hover", x_axis_label="step", y_axis_label=y_label,
               **kwargs)
    p.toolbar.logo = None
    return p


def make_document(scheduler: Scheduler, prefix: str, doc: Document) -> None:
    """Fill ``doc`` with the page (one per browser session)."""
    colors = Category10[10]
    steps = ColumnDataSource(name="dgd-steps", data={k: [] for k in (*STEP_COLUMNS, "ratio")})
    workers = ColumnDataSource(name="dgd-workers", data={"worker": [], "time": [], "cpu": [], "memory": [],
                                                         "color": []})
    flag_rows = ColumnDataSource(name="dgd-flag-rows", data={"step": [], "kind": [], "message": []})
    select = Select(name="dgd-fit", title="Fit", options=[], value="", sizing_mode="stretch_width")
    header = Div(name="dgd-header", text=_header(None), sizing_mode="stretch_width")

    loss_log = _figure("Objective", "loss", "log")
    loss_lin = _figure("Objective", "loss", visible=False)
    for p in (loss_log, loss_lin):
        p.line("step", "loss", source=steps, line_width=2, color=colors[0])
    grad = _figure("Gradient norm", "grad_norm", "log")
    grad.line("step", "grad_norm", source=steps, line_width=2, color=colors[1])
    times = _figure("Step time: compute / wait / driver", "seconds", "log")
    for i, (name, label) in enumerate([("compute_time_max", "compute (slowest group)"), ("wait_time", "wait"),
                                       ("update_time", "driver")]):
        times.line("step", name, source=steps, color=colors[i], legend_label=label, line_width=2)
    spread = _figure("Group compute time: min / median / max", "seconds", "log")
    spread.varea("step", "compute_time_min", "compute_time_max", source=steps, fill_alpha=0.25, color=colors[0],
                 legend_label="min-max")
    spread.line("step", "compute_time_median", source=steps, color=colors[0], legend_label="median")
    traffic = _figure("Bytes per step", "bytes")
    traffic.line("step", "bytes_up", source=steps, color=colors[0], legend_label="up (sent)", line_width=2)
    traffic.line("step", "bytes_down", source=steps, color=colors[1], legend_label="down", line_width=2)
    ratio = _figure("Compression ratio (raw / sent, up)", "ratio")
    ratio.line("step", "ratio", source=steps, color=colors[2], line_width=2)
    stale = _figure("Staleness (async)", "staleness_max")
    stale.step("step", "staleness_max", source=steps, color=colors[4], line_width=2)
    depth = _figure("Reduction tree depth", "levels")
    depth.step("step", "tree_depth", source=steps, color=colors[5], line_width=2)
    score = _figure("Validation score", "val_score", visible=False)  # shown once a record has one
    score.line("step", "val_score", source=steps, color=colors[6], line_width=2)
    cpu = _figure("Worker CPU", "percent", x_axis_type="datetime")
    cpu.multi_line("time", "cpu", source=workers, color="color", line_width=2)
    memory = _figure("Worker memory", "bytes", x_axis_type="datetime")
    memory.multi_line("time", "memory", source=workers, color="color", line_width=2)
    for p in (cpu, memory):
        p.xaxis.axis_label = "time"
    for p in (times, spread, traffic):
        p.legend.location = "top_left"
        p.legend.click_policy = "hide"
    flags = DataTable(name="dgd-flags", source=flag_rows, height=160, sizing_mode="stretch_width", index_position=None,
                      columns=[TableColumn(field="step", title="step", width=60),
                               TableColumn(field="kind", title="flag", width=110),
                               TableColumn(field="message", title="message", width=800)])
    lines = [row(*figures, sizing_mode="stretch_width") for figures in  # hidden figures take no room
            [(loss_log, loss_lin, grad), (times, spread), (traffic, ratio), (stale, depth, score), (cpu, memory)]]
    doc.add_root(column(header, select, flags, *lines, sizing_mode="stretch_width", name="dgd-page"))

    # fit: the fit shown; picked: the user chose it in the Select (else the page follows the
    # newest running fit); setting: the page itself is setting the Select's value
    state: dict[str, Any] = {"fit": None, "picked": False, "setting": False, "next": 0, "thinned": -1,
                             "flags": -1, "samples": -1}
    failed: set[str] = set()

    def guarded(part: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; a failure is logged (once per part and page) and the other parts
        of the update still run: one bad value cannot freeze the page."""
        try:
            return fn(*args)
        except Exception:
            if part not in failed:
                failed.add(part)
                logger.warning("dask_dgd live page: updating its %s failed (logged once; the rest of the page "
                               "goes on updating)", part, exc_info=True)
            return None

    def reset() -> None:
        state.update(next=0, thinned=-1, flags=-1, samples=-1)
        steps.data = {k: [] for k in (*STEP_COLUMNS, "ratio")}
        workers.data = {"worker": [], "time": [], "cpu": [], "memory": [], "color": []}
        flag_rows.data = {"step": [], "kind": [], "message": []}
        loss_log.visible, loss_lin.visible, score.visible = True, False, False

    def show(fit: Fit | None) -> None:
        state["fit"] = None if fit is None else fit.fit
        reset()
        if fit is not None:
            state["setting"] = True
            try:
                select.value = fit.fit
            finally:
                state["setting"] = False

    def follow(store: Any) -> Fit | None:
        """The fit to show: the user's pick while it is kept, else the newest running fit
        (else the one shown, else the newest); the Select's options kept current."""
        fits = store.ordered()
        options: list[Any] = [(f.fit, _label(f)) for f in fits]
        if options != [tuple(o) for o in select.options if isinstance(o, (tuple, list))]:
            select.options = options
        current = store.fits.get(state["fit"]) if state["fit"] is not None else None
        if current is None:
            state["picked"] = False
        if not state["picked"]:
            choice = next((f for f in fits if f.running), None) or current or (fits[0] if fits else None)
            if choice is not current:
                show(choice)
        return store.fits.get(state["fit"]) if state["fit"] is not None else None

    def update_steps(fit: Fit) -> None:
        if fit.thinned != state["thinned"]:  # the store thinned its records: resend them all
            state.update(thinned=fit.thinned, next=0)
            steps.data = {k: [] for k in (*STEP_COLUMNS, "ratio")}
        new = fit.records_since(state["next"])
        if new:
            data = _columns(new)
            if loss_log.visible and any(not v > 0 for v in data["loss"] if not math.isnan(v)):
                loss_log.visible, loss_lin.visible = False, True  # a log axis cannot show it
            if not score.visible and any(not math.isnan(v) for v in data["val_score"]):
                score.visible = True
            steps.stream(data)
        state["next"] = fit.received

    def update_flags(fit: Fit) -> None:
        if sum(fit.flag_counts.values()) != state["flags"]:
            state["flags"] = sum(fit.flag_counts.values())
            rows = list(fit.flags)
            flag_rows.data = {"step": [r["step"] for r in rows], "kind": [r["kind"] for r in rows],
                              "message": [r["message"] for r in rows]}

    def update_workers(fit: Fit) -> None:
        if fit.samples_received != state["samples"]:  # (a count: the bounded deques stop growing)
            state["samples"] = fit.samples_received
            addresses = sorted(fit.worker_metrics)
            workers.data = {
                "worker": addresses,
                "time": [[_float(t) * 1000 for t in fit.worker_metrics[a]["time"]] for a in addresses],
                "cpu": [[_float(v) for v in fit.worker_metrics[a]["cpu"]] for a in addresses],
                "memory": [[_float(v) for v in fit.worker_metrics[a]["memory"]] for a in addresses],
                "color": [colors[i % 10] for i in range(len(addresses))],
            }

    def update() -> None:
        plugin = _plugin_of(scheduler)
        if plugin is None:
            return
        fit = guarded("fit selector", follow, plugin.store)
        guarded("header", lambda: setattr(header, "text", _header(fit)))
        if fit is None:
            return
        guarded("step plots", update_steps, fit)
        guarded("flags", update_flags, fit)
        guarded("worker plots", update_workers, fit)

    def choose(attr: str, old: Any, new: Any) -> None:
        if state["setting"] or not new or new == state["fit"]:
            return
        plugin = _plugin_of(scheduler)
        newest = None if plugin is None else next((f.fit for f in plugin.store.ordered() if f.running), None)
        state["fit"] = new
        state["picked"] = new != newest  # picking the newest running fit follows it again
        reset()
        update()

    select.on_change("value", choose)
    update()
    doc.add_periodic_callback(update, UPDATE_MS)
    doc.title = "Dask: dgd"
    try:  # Dask's template: the dashboard's navigation bar above the page
        from distributed.dashboard.components.scheduler import env
        from distributed.dashboard.scheduler import template_variables

        doc.template = env.get_template("simple.html")
        doc.template_variables.update({"prefix": prefix, **template_variables(scheduler)})
    except Exception:  # noqa: BLE001, S110 - private API: the page without Dask's navigation bar
        pass

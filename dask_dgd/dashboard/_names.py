"""The names the live page's parts agree on (the plugin, its page, the drivers)."""

__all__ = ["NAME", "PAGE", "RECORDS_OP", "TOPIC"]

#: The event topic the drivers publish a fit's start and end on.
TOPIC = "dask_dgd"
#: The plugin's name on the scheduler (``scheduler.plugins[NAME]``).
NAME = "dask_dgd"
#: The navigation tab's name (the page's path under the dashboard).
PAGE = "dgd"
#: The scheduler's operation a driver sends its batches of records with
#: (``client.scheduler.dask_dgd_records(msg=...)``; start and end are events of :data:`TOPIC`).
RECORDS_OP = "dask_dgd_records"

"""The distributed engine: the only part of dask_dgd that imports ``dask.distributed``."""

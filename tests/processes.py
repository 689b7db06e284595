"""Helpers of the tests that start `dask scheduler` / `dask worker` processes."""

import time


def wait_for_file(proc, path, what, timeout=120):
    """Wait until ``proc`` (a process, e.g. a scheduler) has written ``path`` (its
    scheduler file); fail naming ``what`` if it exits first or takes over ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.stat().st_size:
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} exited with code {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {what} was not ready after {timeout} s")
        time.sleep(0.2)

"""Compile dask_dgd's Numba kernels into Numba's on-disk cache, each once, side by side.

A kernel compiles the first time a process calls it with a new signature, and is then
written to Numba's cache (``__pycache__`` beside the module, or ``NUMBA_CACHE_DIR``), from
which every later process loads it in a fraction of a second.  After an install the
first run compiles them all: about 14 s of one core (measured on a 2-core machine: the
climate kernels 9.5 s, the linear models' and the recommender's about 2 s each).  The
demo used to let every worker of its cluster compile every kernel for itself, all at
once, on cores they share (41 s on 2 workers).  Here each part is compiled once, the
parts side by side (longest first) on the cluster's workers, so the wall time is about
the longest part's, and the demo's fits then load them.

Each part is a tiny fit in the calling process, on NumPy data of the dtypes and layouts
the estimators pass their kernels (float64, C order), so that it compiles the same
signatures a real fit calls.
"""

import time
import uuid
import warnings

import numpy as np

__all__ = ["PARTS", "compile_part", "warm_cache"]

#: The parts, longest to compile first (so that the others fill in beside it).
PARTS = ("climate", "linear", "recommender")


def _linear():
    from .. import LinearRegression, LogisticRegression, PoissonRegressor

    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 4))
    z = X @ np.full(4, 0.1)
    for est, y in ((LogisticRegression(max_iter=2), (z > 0).astype(np.int64)),
                   (LinearRegression(max_iter=2), z),
                   (PoissonRegressor(max_iter=2), np.floor(np.exp(z)))):
        est.fit(X, y)


def _recommender():
    from .. import MatrixFactorization
    from ..datasets import make_ratings

    frame, _ = make_ratings(40, 20, 400, rank=2, random_state=0)
    MatrixFactorization(n_components=2, max_iter=2).fit(frame)


def _climate():
    from ..climate import ClimateRegressor
    from ._demo_grid import demo_grid

    grid = demo_grid(0, 16)
    ClimateRegressor(["a", "index"], "tas", model="pointwise").fit(grid.isel(time=slice(0, 24)))


_FITS = {"climate": _climate, "linear": _linear, "recommender": _recommender}


def compile_part(name):
    """Compile (or load from the cache) the kernels of part ``name`` (one of
    :data:`PARTS`) by a tiny fit in this process; the seconds it took."""
    if name not in _FITS:
        raise ValueError(f"unknown part {name!r}; choose among {PARTS}")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 2-iteration fit does not converge: that is expected
        _FITS[name]()
    return time.perf_counter() - t0


def warm_cache(client, parts=PARTS):
    """Compile ``parts`` side by side as tasks on ``client``'s workers (each part once,
    on whichever worker is free; a task's fit runs in its worker's process).
    ``{part: seconds}``."""
    call = uuid.uuid4().hex[:8]
    futures = [client.submit(compile_part, name, pure=False, key=f"dgd-warm-cache-{name}-{call}") for name in parts]
    return dict(zip(parts, client.gather(futures)))

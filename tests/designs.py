"""Designs shared by the solver tests (module level: importable from any test folder)."""

import numpy as np
import scipy.sparse as sp


def zipf_log(n=6000, d=2000, seed=3):
    """A click-log-like design: Zipf-frequent binary columns (a few in most rows, most
    in a handful), each multiplied by a scale from 1e-2 to 1e2 (unscaled counts), and a
    0/1 label from a sparse hidden model.  Returns ``(X as CSR, y)``."""
    rng = np.random.default_rng(seed)
    cols = np.minimum(rng.zipf(1.3, size=(n, 12)) - 1, d - 1)
    rows = np.repeat(np.arange(n), cols.shape[1])
    X = sp.csr_matrix((np.ones(rows.size), (rows, cols.ravel())), shape=(n, d))
    X.sum_duplicates()
    X.data[:] = 1.0
    w = np.where(rng.random(d) < 0.3, rng.normal(size=d), 0.0)
    y = (X @ w + rng.logistic(size=n) > 0.5).astype(float)
    return sp.csr_matrix(X @ sp.diags(10.0 ** rng.uniform(-2, 2, d))), y

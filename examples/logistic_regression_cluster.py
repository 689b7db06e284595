"""Logistic regression on a local Dask cluster, compared with scikit-learn.

Starts a two-worker LocalCluster, generates a chunked dask array, fits
``dask_dgd.LogisticRegression`` where the chunks live, predicts lazily, and checks the
coefficients against scikit-learn's ``LogisticRegression`` with the matching penalty
``C = 1 / (alpha * n_samples)``.

Run with ``python examples/logistic_regression_cluster.py``.
"""

import dask
import numpy as np
from distributed import Client, LocalCluster
from sklearn.linear_model import LogisticRegression as SkLogisticRegression

import dask_dgd
from dask_dgd.datasets import make_classification


def main(n_samples=20_000, n_features=8, alpha=1e-3):
    """Fit on the cluster; return a dict of what was measured."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        # A lazily generated dask array: 8 row blocks, all columns in each block.
        X, y, true_coef = make_classification(
            n_samples, n_features, chunks=n_samples // 8, random_state=0, return_coef=True
        )
        X, y = client.persist([X, y])  # the blocks now live on the workers

        model = dask_dgd.LogisticRegression(alpha=alpha, tol=1e-6, client=client)
        model.fit(X, y)
        print(f"fitted in {model.n_iter_} {model.solver_} iterations "
              f"({len(model.history_)} distributed gradient steps)")

        # Prediction is lazy: a dask array with one task per block, computed on the cluster.
        y_pred = model.predict(X)
        proba = model.predict_proba(X)
        print(f"predict returns {type(y_pred).__name__} with {y_pred.numblocks[0]} blocks")
        accuracy = float((y_pred == y).mean().compute())

        # scikit-learn on the same rows, in memory, with the same objective.
        X_mem, y_mem, proba_mem = dask.compute(X, y, proba)
        reference = SkLogisticRegression(C=1.0 / (alpha * n_samples), tol=1e-10, max_iter=1000)
        reference.fit(X_mem, y_mem)

    coef_diff = float(np.max(np.abs(np.ravel(model.coef_) - np.ravel(reference.coef_))))
    proba_diff = float(np.max(np.abs(proba_mem - reference.predict_proba(X_mem))))
    print(f"training accuracy:                  {accuracy:.4f}")
    print(f"max |coef - scikit-learn coef|:     {coef_diff:.2e}")
    print(f"max |proba - scikit-learn proba|:   {proba_diff:.2e}")
    true_diff = float(np.max(np.abs(np.ravel(model.coef_) - true_coef)))
    print(f"max |coef - true coef| (sampling):  {true_diff:.2f}")
    return {"accuracy": accuracy, "coef_diff": coef_diff, "proba_diff": proba_diff}


if __name__ == "__main__":
    main()

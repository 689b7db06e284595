"""A dask_dgd estimator inside a scikit-learn Pipeline and GridSearchCV.

dask_dgd estimators follow the scikit-learn estimator contract (``get_params``,
``set_params``, ``clone``, ``fit``/``predict``/``score``), so they compose with
``Pipeline`` and ``GridSearchCV``.  On small NumPy data with no Dask client, each fit
runs in process, so the search needs no cluster at all.

Run with ``python examples/pipeline_gridsearch.py``.
"""

import numpy as np
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import dask_dgd
from dask_dgd.datasets import make_classification


def main():
    X, y = make_classification(3000, 10, n_classes=3, signal=2.0, random_state=0)
    # Badly scaled features: the reason for the StandardScaler step.
    X = X * np.logspace(-2, 2, X.shape[1])
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)

    pipeline = make_pipeline(StandardScaler(), dask_dgd.LogisticRegression(max_iter=500))
    grid = {
        "logisticregression__alpha": [1e-4, 1e-2, 1.0],
        "logisticregression__solver": ["lbfgs", "gd"],
    }
    search = GridSearchCV(pipeline, grid, cv=3, n_jobs=1)
    search.fit(X_train, y_train)

    print("mean cross-validated accuracy:")
    for params, score in zip(search.cv_results_["params"], search.cv_results_["mean_test_score"]):
        print(f"  alpha={params['logisticregression__alpha']:<7g} "
              f"solver={params['logisticregression__solver']:<6} {score:.4f}")
    print(f"best: {search.best_params_}")
    test_accuracy = search.score(X_test, y_test)
    print(f"held-out accuracy of the refitted best pipeline: {test_accuracy:.4f}")
    return {"best_params": search.best_params_, "test_accuracy": float(test_accuracy),
            "cv_results": search.cv_results_}


if __name__ == "__main__":
    main()

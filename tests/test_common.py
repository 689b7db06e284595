"""scikit-learn's own conformance suite over every estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor

ESTIMATORS = [
    LinearRegression(),
    LogisticRegression(alpha=1e-2, tol=1e-8),
    PoissonRegressor(),
]

_TOL_REASON = (
    "optimizer tolerance, not weight handling: weighted and repeated fits agree to about "
    "5e-7 relative (L-BFGS stops at a relative objective decrease of 64 machine epsilons, "
    "as scikit-learn's does; on this 15-sample, 30-feature, 3-class problem that leaves "
    "coefficients ~1e-6 from the optimum) and the check demands 1e-7"
)

#: Checks expected to fail, with the reason.
EXPECTED_FAILED_CHECKS = {
    "LogisticRegression": {
        "check_sample_weight_equivalence_on_dense_data": _TOL_REASON,
        "check_sample_weight_equivalence_on_sparse_data": _TOL_REASON,
    }
}


def _expected(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected)
def test_sklearn_compatible(estimator, check):
    check(estimator)

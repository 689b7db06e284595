"""Every bad input gets a clear error: type and message checked."""

import numpy as np
import pytest

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor
from dask_dgd.exceptions import InputError, NotFittedError, ParameterError

X = np.random.default_rng(0).standard_normal((40, 3))
Y_BIN = (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("bad, where, shape", [(np.nan, "X", r"shape \(40, 3\)"), (np.inf, "X", r"shape \(40, 3\)"),
                                               (-np.inf, "y", r"y's shape \(40,\)"), (np.nan, "y", r"y's shape \(40,\)")])
def test_nan_inf_named_with_block(bad, where, shape):
    """The message names the array with its own shape (a 1-D y is not X's) and the
    first bad row."""
    Xb, yb = X.copy(), X[:, 1].copy()
    (Xb if where == "X" else yb)[[5, 9]] = bad
    with pytest.raises(InputError, match=rf"Input {where} contains NaN or infinity in block 0 \({shape}\), "
                                         r"first at row 5 of the block; drop"):
        LinearRegression().fit(Xb, yb)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_nan_in_X_names_its_first_row_in_the_block(sparse):
    """On dask blocks the row is counted in the block the message names."""
    import dask.array as da
    import scipy.sparse as sps

    Xb = X.copy()
    Xb[[27, 33], 1] = np.nan  # block 1 of rows 20-39: its rows 7 and 13
    Xd = da.from_array(Xb, chunks=(20, 3))
    if sparse:
        Xd = Xd.map_blocks(sps.csr_matrix)
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 1 \(shape \(20, 3\)\), "
                                         r"first at row 7 of the block"):
        LinearRegression().fit(Xd, da.from_array(X[:, 0], chunks=20))


def test_non_numeric_X():
    with pytest.raises(ValueError, match="could not convert string to float|dtype='numeric' is not compatible"):
        LinearRegression().fit(np.array([["a", "b"], ["c", "d"]]), [1.0, 2.0])


def test_length_mismatch():
    with pytest.raises(ValueError, match=r"Found input variables with inconsistent numbers of samples: \[40, 39\]"):
        LinearRegression().fit(X, X[:-1, 0])
    with pytest.raises(InputError, match=r"sample_weight must have shape \(40,\) like y; got \(3,\)"):
        LinearRegression().fit(X, X[:, 0], sample_weight=[1.0, 2.0, 3.0])


def test_single_class():
    with pytest.raises(InputError, match="needs samples of at least 2 classes in the data, but the data contains only one class: 1"):
        LogisticRegression().fit(X, np.ones(40, dtype=int))


def test_continuous_labels():
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        LogisticRegression().fit(X, X[:, 0])


def test_negative_poisson_target():
    y = np.abs(X[:, 0])
    y[3] = -0.5
    with pytest.raises(InputError, match=r"PoissonRegressor requires non-negative y .*smallest value is -0.5"):
        PoissonRegressor().fit(X, y)
    with pytest.raises(InputError, match="positive \\(weighted\\) sum"):
        PoissonRegressor().fit(X, np.zeros(40))


def test_zero_total_weight():
    with pytest.raises(InputError, match="total sample weight is zero"):
        LinearRegression().fit(X, X[:, 0], sample_weight=np.zeros(40))


def test_negative_weight():
    w = np.ones(40)
    w[7] = -1
    with pytest.raises(InputError, match=r"sample_weight contains negative, NaN or infinite values in block 0 "
                                         r"\(sample_weight's shape \(40,\)\), first at row 7 of the block; weights"):
        LinearRegression().fit(X, X[:, 0], sample_weight=w)


@pytest.mark.parametrize("est", [LinearRegression(), LogisticRegression(), PoissonRegressor()])
def test_predict_before_fit(est):
    with pytest.raises(NotFittedError, match="is not fitted yet"):
        est.predict(X)


def test_wrong_number_of_features_at_predict():
    est = LogisticRegression().fit(X, Y_BIN)
    with pytest.raises(ValueError, match="X has 2 features, but LogisticRegression is expecting 3 features as input"):
        est.predict(X[:, :2])


@pytest.mark.parametrize(
    "params, message",
    [
        ({"solver": "bfgs"}, r"The 'solver' parameter of LinearRegression must be one of 'auto', 'cd', 'gd', 'lbfgs', 'newton', 'online', 'sgd'; got 'bfgs'"),
        ({"optimizer": "adamm"}, r"unknown optimizer 'adamm'; expected one of 'adagrad', 'adam', 'adamw', 'lbfgs', 'normalized', 'rmsprop', 'sgd'"),
        ({"optimizer": 3}, r"The 'optimizer' parameter of LinearRegression must be None or an optimizer name"),
        ({"alpha": -1.0}, r"The 'alpha' parameter of LinearRegression must be a float in \[0, inf\); got -1.0"),
        ({"l1_ratio": 1.5}, r"'l1_ratio' parameter .* must be a float in \[0, 1\]; got 1.5"),
        ({"learning_rate": 0.0}, r"'learning_rate' parameter .*got 0.0"),
        ({"batch_size": 0}, r"'batch_size' parameter .* must be None or an int in \[1, inf\); got 0"),
        ({"max_iter": 0}, r"'max_iter' parameter"),
        ({"split_every": 1}, r"'split_every' parameter .* an int in \[2, inf\) or one of 'auto'; got 1"),
        ({"client": "tcp://x"}, r"'client' parameter .* must be None or a distributed.Client; got 'tcp://x'"),
        ({"solver": "lbfgs", "optimizer": "adam"}, r"optimizer Adam is a first-order optimizer; it needs solver='gd'"),
        ({"solver": "lbfgs", "l1_ratio": 0.5, "alpha": 0.1}, r"solver='lbfgs' cannot handle an L1 penalty"),
        ({"solver": "sgd"}, r"solver='sgd' needs a batch_size"),
        ({"solver": "lbfgs", "batch_size": 10}, r"solver='lbfgs' is full-batch only"),
        ({"solver": "gd", "optimizer": "lbfgs"}, r"the L-BFGS optimizer needs solver='lbfgs'"),
        ({"solver": "gd", "batch_size": 10}, r"solver='gd' takes full-batch steps but batch_size=10"),
        ({"alpha": 0.1, "l1_ratio": 0.5, "optimizer": "adam"}, r"an L1 penalty .* optimizer Adam would converge to another solution"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ParameterError, match=message):
        LinearRegression(**params).fit(X, X[:, 0])


def test_bad_class_weight():
    with pytest.raises(ParameterError, match=r"'class_weight' parameter"):
        LogisticRegression(class_weight="even").fit(X, Y_BIN)
    with pytest.raises(InputError, match=r"class_weight has keys \[7\] that are not among the classes \[0, 1\]"):
        LogisticRegression(class_weight={7: 2.0}).fit(X, Y_BIN)
    for bad in ({0: -1.0, 1: 1.0}, {0: float("nan"), 1: 1.0}):
        with pytest.raises(InputError, match="class_weight values must be finite and non-negative"):
            LogisticRegression(class_weight=bad).fit(X, Y_BIN)
    with pytest.raises(InputError, match="class_weight values must be numbers"):
        LogisticRegression(class_weight={0: "heavy"}).fit(X, Y_BIN)


def test_partial_fit_errors():
    with pytest.raises(InputError, match="classes must be passed on the first call to partial_fit"):
        LogisticRegression().partial_fit(X, Y_BIN)
    with pytest.raises(ParameterError, match="partial_fit takes mini-batch steps"):
        LinearRegression(solver="lbfgs").partial_fit(X, X[:, 0])
    with pytest.raises(ParameterError, match="an L1 penalty .* optimizer Adam would converge"):
        LinearRegression(alpha=0.1, l1_ratio=1.0, optimizer="adam").partial_fit(X, X[:, 0])
    est = LogisticRegression().partial_fit(X, Y_BIN, classes=[0, 1])
    with pytest.raises(InputError, match=r"labels \[5\] are not in classes \[0, 1\]"):
        est.partial_fit(X, np.full(40, 5))
    with pytest.raises(InputError, match=r"classes=\[0, 1, 2\] differs from the classes of the first call"):
        est.partial_fit(X, Y_BIN, classes=[0, 1, 2])
    with pytest.raises(ParameterError, match="class_weight='balanced' needs the class counts"):
        LogisticRegression(class_weight="balanced").partial_fit(X, Y_BIN, classes=[0, 1])

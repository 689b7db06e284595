"""The parameter table (``dask_dgd._params``): every shared parameter written once, the
estimators' signatures made from it."""

import inspect

import pytest
from sklearn.base import clone

import dask_dgd
from dask_dgd._params import MODES, PARAMS, RUNTIME, TRAINING_CONSTRAINTS, fingerprint_params, init_from, signature
from dask_dgd.climate import ClimateRegressor

GRADIENT_TRAINED = [cls for cls in (getattr(dask_dgd, n) for n in dask_dgd.__all__)
                    if inspect.isclass(cls) and hasattr(cls, "get_params")
                    and "mode" in inspect.signature(cls.__init__).parameters]
assert ClimateRegressor in GRADIENT_TRAINED


def test_the_gradient_trained_estimators_are_found():
    names = {cls.__name__ for cls in GRADIENT_TRAINED}
    assert {"LinearRegression", "LogisticRegression", "MatrixFactorization", "ClimateRegressor"} <= names
    assert len(names) >= 10


@pytest.mark.parametrize("cls", GRADIENT_TRAINED, ids=lambda c: c.__name__)
def test_every_training_parameter_has_the_table_default_and_constraints(cls):
    params = inspect.signature(cls.__init__).parameters
    for name in (*MODES, *RUNTIME):
        assert name in params, name
        if name in TRAINING_CONSTRAINTS and (name != "split_every" or cls is not ClimateRegressor):
            assert cls._parameter_constraints[name] == TRAINING_CONSTRAINTS[name], name  # (climate: no "auto")
        if name != "random_state":
            assert params[name].default == PARAMS[name].default, name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_a_made_init_stores_its_arguments_and_nothing_else():
    @init_from(signature(("a", 1), "tol", ("b", None)), positional=1)
    class Thing:
        pass

    t = Thing(5, b="x")
    assert vars(t) == {"a": 5, "tol": PARAMS["tol"].default, "b": "x"}
    assert Thing.__init__.__qualname__.endswith("Thing.__init__")
    kinds = [p.kind for p in inspect.signature(Thing.__init__).parameters.values()][1:]
    assert kinds == [inspect.Parameter.POSITIONAL_OR_KEYWORD] + [inspect.Parameter.KEYWORD_ONLY] * 2
    with pytest.raises(TypeError):
        Thing(5, 6)  # keyword only after the first


def test_estimators_made_from_the_table_clone_and_set_params():
    est = dask_dgd.PoissonRegressor(alpha=0.5, max_iter=7)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin is not est
    assert twin.set_params(mode="async").mode == "async"
    assert repr(dask_dgd.LogisticRegression(max_iter=7)) == "LogisticRegression(max_iter=7)"


def test_signature_refuses_unknown_names_and_repeats():
    with pytest.raises(KeyError, match=r"'n_trees' is not in PARAMS: give it as \('n_trees', default\)"):
        signature("n_trees")
    with pytest.raises(ValueError, match=r"a parameter is listed twice"):
        signature("tol", ("tol", 1.0))
    with pytest.raises(ValueError, match=r"'not a name' is not an identifier"):
        init_from((("not a name", 1),))


def test_the_fingerprint_keeps_what_shapes_the_trajectory():
    params = dask_dgd.LinearRegression().get_params()
    kept = fingerprint_params(params)
    assert {"alpha", "solver", "mode", "compression", "random_state"} <= set(kept)
    assert not {"max_iter", "tol", "max_time", "verbose", "callbacks", "client", "checkpoint", "checkpoint_every",
                "warm_start", "rebalance", "split_every", "sparse_coef"} & set(kept)
    assert "n_components" in fingerprint_params(dask_dgd.MatrixFactorization().get_params())  # its own: kept

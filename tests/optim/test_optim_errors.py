"""Every bad optimizer or schedule parameter raises ParameterError with a clear message."""

import re

import numpy as np
import pytest

from dask_dgd.exceptions import ParameterError
from dask_dgd.optim import (
    LBFGS,
    SGD,
    Adagrad,
    Adam,
    AdamW,
    Constant,
    CosineDecay,
    InverseScaling,
    RMSprop,
    StepDecay,
    adagrad,
    adam,
    adamw,
    lbfgs,
    rmsprop,
    sgd,
)

FIRST_ORDER = [SGD, Adam, AdamW, RMSprop, Adagrad, sgd, adam, adamw, rmsprop, adagrad]

BAD = [
    # (constructor, kwargs, exact message)
    (SGD, {"momentum": 1.5}, "momentum must be in [0, 1); got 1.5"),
    (SGD, {"momentum": 1.0}, "momentum must be in [0, 1); got 1.0"),
    (SGD, {"momentum": -0.1}, "momentum must be in [0, 1); got -0.1"),
    (SGD, {"momentum": "0.9"}, "momentum must be in [0, 1); got '0.9'"),
    (SGD, {"nesterov": True}, "nesterov=True requires momentum in (0, 1); got momentum=0.0"),
    (SGD, {"nesterov": "yes"}, "nesterov must be True or False; got 'yes'"),
    (Adam, {"b1": 1.0}, "b1 must be in [0, 1); got 1.0"),
    (Adam, {"b1": float("nan")}, "b1 must be in [0, 1); got nan"),
    (Adam, {"b2": -0.5}, "b2 must be in [0, 1); got -0.5"),
    (Adam, {"eps": 0}, "eps must be in (0, inf); got 0"),
    (Adam, {"eps": float("inf")}, "eps must be in (0, inf); got inf"),
    (AdamW, {"b1": 2}, "b1 must be in [0, 1); got 2"),
    (AdamW, {"eps": -1e-8}, "eps must be in (0, inf); got -1e-08"),
    (AdamW, {"weight_decay": -1}, "weight_decay must be in [0, inf); got -1"),
    (AdamW, {"weight_decay": None}, "weight_decay must be in [0, inf); got None"),
    (RMSprop, {"decay": 1.0}, "decay must be in [0, 1); got 1.0"),
    (RMSprop, {"eps": 0.0}, "eps must be in (0, inf); got 0.0"),
    (RMSprop, {"momentum": 1}, "momentum must be in [0, 1); got 1"),
    (RMSprop, {"centered": 1}, "centered must be True or False; got 1"),
    (
        Adagrad,
        {"initial_accumulator_value": -0.1},
        "initial_accumulator_value must be in [0, inf); got -0.1",
    ),
    (Adagrad, {"eps": 0}, "eps must be in (0, inf); got 0"),
    (LBFGS, {"memory": 0}, "memory must be an int >= 1; got 0"),
    (LBFGS, {"memory": 2.5}, "memory must be an int >= 1; got 2.5"),
    (LBFGS, {"memory": True}, "memory must be an int >= 1; got True"),
    (lbfgs, {"max_linesearch": 0}, "max_linesearch must be an int >= 1; got 0"),
    (lbfgs, {"max_linesearch": "20"}, "max_linesearch must be an int >= 1; got '20'"),
    (Constant, {"value": 0}, "value must be in (0, inf); got 0"),
    (InverseScaling, {"init_value": -1.0}, "init_value must be in (0, inf); got -1.0"),
    (InverseScaling, {"init_value": 1, "power_t": -1}, "power_t must be in [0, inf); got -1"),
    (CosineDecay, {"init_value": 1, "decay_steps": 0}, "decay_steps must be an int >= 1; got 0"),
    (
        CosineDecay,
        {"init_value": 1, "decay_steps": 10, "alpha": 1.5},
        "alpha must be in [0, 1]; got 1.5",
    ),
    (StepDecay, {"init_value": 1, "step_size": 1.5}, "step_size must be an int >= 1; got 1.5"),
    (
        StepDecay,
        {"init_value": 1, "step_size": 2, "gamma": 0},
        "gamma must be in (0, 1]; got 0",
    ),
    (
        StepDecay,
        {"init_value": 1, "step_size": 2, "gamma": 1.1},
        "gamma must be in (0, 1]; got 1.1",
    ),
]


@pytest.mark.parametrize(("make", "kwargs", "message"), BAD, ids=lambda v: getattr(v, "__name__", None) or repr(v)[:40])  # stable ids: pytest-xdist
def test_bad_parameter(make, kwargs, message):
    with pytest.raises(ParameterError, match=f"^{re.escape(message)}$"):
        make(**kwargs)


@pytest.mark.parametrize("make", FIRST_ORDER, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("lr", "shown"), [(0, "0"), (-0.1, "-0.1"), ("fast", "'fast'")])
def test_bad_learning_rate(make, lr, shown):
    msg = f"learning_rate must be a positive float or a Schedule; got {shown}"
    with pytest.raises(ParameterError, match=f"^{re.escape(msg)}$"):
        make(learning_rate=lr)


def test_with_learning_rate_validates():
    with pytest.raises(ParameterError, match=re.escape("got -1.0")):
        SGD().with_learning_rate(-1.0)


@pytest.mark.parametrize("factor", [0, -2.0, float("nan")])
def test_bad_scale_factor(factor):
    msg = f"factor must be in (0, inf); got {factor!r}"
    with pytest.raises(ParameterError, match=f"^{re.escape(msg)}$"):
        Adam().scale_learning_rate(factor)
    with pytest.raises(ParameterError, match=f"^{re.escape(msg)}$"):
        Constant(0.1).scale(factor)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (np.array([True, False]), "got dtype bool and shape (2,)"),
        (np.ones(3), "got dtype float64 and shape (3,)"),
    ],
)
def test_bad_decay_mask(mask, message):
    opt = AdamW()
    params = np.zeros(3)
    message = f"decay_mask must be a bool array of shape (3,); {message}"
    with pytest.raises(ParameterError, match=f"^{re.escape(message)}$"):
        opt.update(np.ones(3), opt.init(params), params, decay_mask=mask)


def test_parameter_error_is_a_value_error():
    with pytest.raises(ValueError, match="momentum"):
        SGD(momentum=2.0)

"""``get_optimizer`` and ``OPTIMIZERS``."""

import re

import pytest

from dask_dgd.exceptions import ParameterError
from dask_dgd.optim import (
    LBFGS,
    OPTIMIZERS,
    SGD,
    Adagrad,
    Adam,
    AdamW,
    CosineDecay,
    RMSprop,
    get_optimizer,
)


def test_names():
    assert OPTIMIZERS == ("adagrad", "adam", "adamw", "lbfgs", "normalized", "rmsprop", "sgd")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("adagrad", Adagrad()),
        ("adam", Adam()),
        ("adamw", AdamW()),
        ("lbfgs", LBFGS()),
        ("rmsprop", RMSprop()),
        ("sgd", SGD()),
    ],
)
def test_by_name(name, expected):
    assert get_optimizer(name) == expected


def test_learning_rate_applied_to_first_order():
    assert get_optimizer("adam", learning_rate=0.5) == Adam(learning_rate=0.5)
    schedule = CosineDecay(0.1, 100)
    assert get_optimizer("sgd", learning_rate=schedule).learning_rate is schedule
    opt = SGD(learning_rate=0.1, momentum=0.9)
    assert get_optimizer(opt, learning_rate=0.2) == SGD(learning_rate=0.2, momentum=0.9)


def test_learning_rate_ignored_for_lbfgs():
    assert get_optimizer("lbfgs", learning_rate=0.5) == LBFGS()


def test_instance_returned_as_is():
    opt = RMSprop(momentum=0.3)
    assert get_optimizer(opt) is opt
    settings = LBFGS(memory=4)
    assert get_optimizer(settings) is settings


def test_bad_learning_rate():
    with pytest.raises(ParameterError, match="learning_rate must be a positive float"):
        get_optimizer("adam", learning_rate=-1.0)


@pytest.mark.parametrize("name", ["adamm", "Adam", "SGD", ""])
def test_unknown_name(name):
    msg = (
        f"unknown optimizer {name!r}; expected one of 'adagrad', 'adam', 'adamw', "
        "'lbfgs', 'normalized', 'rmsprop', 'sgd' or an optimizer object"
    )
    with pytest.raises(ParameterError, match=f"^{re.escape(msg)}$"):
        get_optimizer(name)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3, "3 of type int"),
        (None, "None of type NoneType"),
        (Adam, "<class "),
        (object(), "<object"),
    ],
)
def test_wrong_type(value, shown):
    with pytest.raises(
        ParameterError,
        match=re.escape("optimizer must be a name in OPTIMIZERS or an optimizer object; got ")
        + re.escape(shown),
    ):
        get_optimizer(value)

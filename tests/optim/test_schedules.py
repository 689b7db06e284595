"""Learning-rate schedules and ``as_schedule``."""

import math
import pickle
import re

import pytest

from dask_dgd.exceptions import ParameterError
from dask_dgd.optim import Constant, CosineDecay, InverseScaling, Schedule, StepDecay, as_schedule


def test_constant():
    s = Constant(0.3)
    assert [s(0), s(1), s(10**6)] == [0.3, 0.3, 0.3]


def test_inverse_scaling():
    s = InverseScaling(1.0, power_t=0.5)
    assert s(0) == 1.0
    assert s(3) == 0.5  # 1 / 4**0.5
    assert s(99) == pytest.approx(0.1)  # 1 / 100**0.5
    default = InverseScaling(2.0)  # power_t = 0.25
    assert default(15) == pytest.approx(1.0)  # 2 / 16**0.25


def test_cosine_decay():
    s = CosineDecay(2.0, decay_steps=4, alpha=0.5)
    assert s(0) == 2.0
    # count 2: cos(pi/2) = 0 -> 2 * (0.5 * 0.5 * 1 + 0.5) = 1.5
    assert s(2) == pytest.approx(1.5)
    # count 1: 0.5 * (1 + cos(pi/4)) = 0.853553...
    assert s(1) == pytest.approx(2.0 * (0.5 * 0.5 * (1 + math.sqrt(0.5)) + 0.5))
    assert s(4) == pytest.approx(1.0)
    assert s(100) == pytest.approx(1.0)  # stays at alpha * init after decay_steps
    assert CosineDecay(1.0, 10)(10) == pytest.approx(0.0)


def test_step_decay():
    s = StepDecay(1.0, step_size=3, gamma=0.5)
    assert [s(0), s(2), s(3), s(5), s(6), s(9)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.125]
    assert StepDecay(1.0, 1)(2) == pytest.approx(0.01)  # default gamma 0.1


@pytest.mark.parametrize(
    ("schedule", "scaled"),
    [
        (Constant(0.2), Constant(0.1)),
        (InverseScaling(1.0, power_t=0.5), InverseScaling(0.5, power_t=0.5)),
        (CosineDecay(1.0, 10, alpha=0.2), CosineDecay(0.5, 10, alpha=0.2)),
        (StepDecay(1.0, 3, gamma=0.5), StepDecay(0.5, 3, gamma=0.5)),
    ],
    ids=repr,
)
def test_scale(schedule, scaled):
    assert schedule.scale(0.5) == scaled
    for count in (0, 1, 5, 50):
        assert scaled(count) == pytest.approx(0.5 * schedule(count))


@pytest.mark.parametrize(
    "schedule",
    [Constant(0.2), InverseScaling(1.0), CosineDecay(1.0, 10), StepDecay(1.0, 3)],
    ids=repr,
)
def test_schedules_are_data(schedule):
    assert isinstance(schedule, Schedule)
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    assert hash(schedule) == hash(pickle.loads(pickle.dumps(schedule)))
    assert isinstance(schedule(3), float)


def test_numpy_scalars_are_normalised():
    import numpy as np
    s = StepDecay(np.float32(0.5), np.int64(2), gamma=np.float64(0.5))
    assert s == StepDecay(0.5, 2, gamma=0.5)
    assert repr(s) == "StepDecay(init_value=0.5, step_size=2, gamma=0.5)"
    assert s(np.int64(2)) == 0.25


def test_as_schedule():
    assert as_schedule(0.1) == Constant(0.1)
    assert as_schedule(1) == Constant(1.0)
    s = StepDecay(1.0, 3)
    assert as_schedule(s) is s


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("fast", "'fast'"),
        (0.0, "0.0"),
        (-0.1, "-0.1"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (True, "True"),
        (None, "None"),
    ],
)
def test_as_schedule_errors(value, shown):
    msg = f"learning_rate must be a positive float or a Schedule; got {shown}"
    with pytest.raises(ParameterError, match=f"^{re.escape(msg)}$"):
        as_schedule(value)


def test_as_schedule_rejects_plain_callables():
    with pytest.raises(ParameterError, match="must be a positive float or a Schedule; got <"):
        as_schedule(lambda count: 0.1)

"""Optimizers as data: state, pickling, equality, hashing, immutability, learning rates."""

import dataclasses
import pickle

import numpy as np
import pytest

from dask_dgd.optim import (
    LBFGS,
    SGD,
    Adagrad,
    AdagradState,
    Adam,
    AdamState,
    AdamW,
    Constant,
    FirstOrderOptimizer,
    RMSprop,
    RMSpropState,
    SGDState,
    StepDecay,
    adagrad,
    adam,
    adamw,
    lbfgs,
    rmsprop,
    sgd,
)

OPTIMIZERS = [
    SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
    Adam(learning_rate=StepDecay(0.1, 10)),
    AdamW(weight_decay=0.1),
    RMSprop(momentum=0.5, centered=True),
    Adagrad(initial_accumulator_value=0.0),
    LBFGS(memory=5),
]
FIRST_ORDER = OPTIMIZERS[:-1]

STATE_TYPES = [
    (SGD(), SGDState),
    (Adam(), AdamState),
    (AdamW(), AdamState),
    (RMSprop(), RMSpropState),
    (Adagrad(), AdagradState),
]


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=repr)
def test_pickle_equality_hash(opt):
    again = pickle.loads(pickle.dumps(opt))
    assert again == opt
    assert hash(again) == hash(opt)
    assert {opt: 1}[again] == 1
    assert dataclasses.replace(opt) == opt


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=repr)
def test_frozen(opt):
    field = dataclasses.fields(opt)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(opt, field, 1)


def test_different_classes_with_same_fields_are_not_equal():
    assert Adam() != AdamW(weight_decay=0.0)
    assert SGD(0.1) != SGD(0.2)


@pytest.mark.parametrize(("opt", "state_type"), STATE_TYPES, ids=lambda v: repr(v)[:20])
def test_state_is_a_namedtuple(opt, state_type):
    params = np.array([1.0, -2.0])
    state = opt.init(params)
    assert type(state) is state_type
    assert state._fields[0] == "count"
    assert state.count == 0 and isinstance(state.count, int)
    for array in state[1:]:
        assert isinstance(array, np.ndarray) and array.shape == params.shape
    _, state = opt.update(np.array([0.5, 0.5]), state, params)
    assert type(state) is state_type and state.count == 1
    again = pickle.loads(pickle.dumps(state))
    assert again.count == 1
    for a, b in zip(again[1:], state[1:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_full_batch_only():
    assert LBFGS.full_batch_only is True and lbfgs().full_batch_only is True
    for opt in FIRST_ORDER:
        assert opt.full_batch_only is False
        assert isinstance(opt, FirstOrderOptimizer)
    assert not isinstance(LBFGS(), FirstOrderOptimizer)
    assert not hasattr(LBFGS(), "update")
    assert "full_batch_only" not in {f.name for f in dataclasses.fields(LBFGS)}


def test_factories_match_classes():
    assert sgd(0.1, 0.9, True) == SGD(learning_rate=0.1, momentum=0.9, nesterov=True)
    assert adam(0.1, 0.8, 0.99, 1e-6) == Adam(learning_rate=0.1, b1=0.8, b2=0.99, eps=1e-6)
    assert adamw(weight_decay=0.2) == AdamW(weight_decay=0.2)
    assert rmsprop(0.1, 0.5, 1e-6, 0.3, True) == RMSprop(0.1, 0.5, 1e-6, 0.3, True)
    assert adagrad(0.3, 0.0, 1e-6) == Adagrad(0.3, 0.0, 1e-6)
    assert lbfgs(3, 5) == LBFGS(memory=3, max_linesearch=5)


def test_defaults():
    assert SGD() == SGD(learning_rate=0.01, momentum=0.0, nesterov=False)
    assert Adam() == Adam(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8)
    assert AdamW().weight_decay == 1e-2
    assert RMSprop() == RMSprop(learning_rate=1e-2, decay=0.9, eps=1e-8)
    assert Adagrad() == Adagrad(learning_rate=0.1, initial_accumulator_value=0.1, eps=1e-7)
    assert LBFGS() == LBFGS(memory=10, max_linesearch=20)


def test_values_are_normalised_to_builtins():
    opt = SGD(learning_rate=np.float32(0.5), momentum=np.float64(0.25), nesterov=np.bool_(True))
    assert opt == SGD(learning_rate=0.5, momentum=0.25, nesterov=True)
    assert repr(opt) == "SGD(learning_rate=0.5, momentum=0.25, nesterov=True)"
    assert SGD(learning_rate=1).learning_rate == 1.0
    assert LBFGS(memory=np.int64(4)).memory == 4


def test_current_learning_rate_float():
    opt = Adam(learning_rate=0.05)
    state = opt.init(np.zeros(2))
    assert opt.current_learning_rate(state) == 0.05
    _, state = opt.update(np.ones(2), state, np.zeros(2))
    assert opt.current_learning_rate(state) == 0.05


def test_current_learning_rate_follows_schedule_and_update_uses_it():
    # rates 1.0, 1.0, 0.5, 0.5, 0.25 for counts 0..4
    opt = SGD(learning_rate=StepDecay(1.0, step_size=2, gamma=0.5))
    params = np.zeros(2)
    grads = np.array([1.0, -2.0])
    state = opt.init(params)
    for expected in (1.0, 1.0, 0.5, 0.5, 0.25):
        assert opt.current_learning_rate(state) == expected
        updates, state = opt.update(grads, state, params)
        np.testing.assert_allclose(updates, [-expected, 2 * expected])
    assert state.count == 5


def test_with_learning_rate():
    opt = RMSprop(learning_rate=0.1, momentum=0.5)
    other = opt.with_learning_rate(0.3)
    assert other == RMSprop(learning_rate=0.3, momentum=0.5)
    assert opt.learning_rate == 0.1  # unchanged
    schedule = StepDecay(1.0, 3)
    assert opt.with_learning_rate(schedule).learning_rate is schedule


def test_scale_learning_rate():
    assert SGD(learning_rate=0.2, momentum=0.5).scale_learning_rate(0.5) == SGD(
        learning_rate=0.1, momentum=0.5
    )
    scaled = Adam(learning_rate=StepDecay(1.0, 3, gamma=0.5)).scale_learning_rate(0.5)
    assert scaled == Adam(learning_rate=StepDecay(0.5, 3, gamma=0.5))
    scaled = Adagrad(learning_rate=Constant(0.4)).scale_learning_rate(0.25)
    assert scaled.learning_rate == Constant(0.1)

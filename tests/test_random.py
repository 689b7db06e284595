"""dask_dgd._random pinned against SplitMix64 written here on Python ints (masked to 64 bits)."""

import numpy as np
import pandas as pd
import pytest

from dask_dgd import _random

MASK = (1 << 64) - 1
SEEDS = [0, 1, 2, 42, 12345, 2**31 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 0x0123456789ABCDEF]
COUNTERS = [0, 1, 7, 1000, 2**40 + 3, 2**64 - 1]


def ref_finalize(z):
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_mix64(z):
    return ref_finalize((z + 0x9E3779B97F4A7C15) & MASK)


def ref_keyed(seed, counter, offset):
    return ref_mix64((seed & MASK) ^ ref_mix64((counter + offset) & MASK))


def test_splitmix64_stream_matches_the_published_sequence():
    # SplitMix64 seeded with 1234567: the state advances by GOLDEN, each output is
    # finalize(state) (Vigna's splitmix64.c)
    state, out = 1234567, []
    for _ in range(3):
        out.append(_random.mix64_int(state))
        state = (state + 0x9E3779B97F4A7C15) & MASK
    assert out == [6457827717110365317, 3203168211198807973, 9817491932198370423]


@pytest.mark.parametrize("seed", SEEDS)
def test_mix64_and_finalize_match_the_reference(seed):
    z = np.array([(seed + c) & MASK for c in COUNTERS], dtype=np.uint64)
    assert [int(v) for v in _random.mix64(z)] == [ref_mix64(int(v)) for v in z]
    assert [int(v) for v in _random.finalize(z)] == [ref_finalize(int(v)) for v in z]
    assert _random.mix64_int(seed) == ref_mix64(seed)
    assert int(_random.mix64(np.uint64(seed))) == ref_mix64(seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("counter", COUNTERS)
def test_keyed_matches_the_reference(seed, counter):
    for offset in (0, 0x5851F42D4C957F2D, 0x2545F4914F6CDD1D):
        assert _random.keyed(seed, counter, offset) == ref_keyed(seed, counter, offset)


def test_uniform_is_the_top_53_bits():
    h = np.array([ref_mix64(s) for s in SEEDS] + [0, MASK], dtype=np.uint64)
    u = _random.uniform(h)
    assert u.dtype == np.float64 and np.all((u >= 0) & (u < 1))
    assert u.tolist() == [(int(v) >> 11) / 2.0**53 for v in h]


def test_finalize_is_pandas_integer_hash():
    z = np.random.default_rng(0).integers(0, 2**64, size=1000, dtype=np.uint64)
    assert np.array_equal(_random.finalize(z), pd.util.hash_array(z))


def test_array_api_version_matches():
    array_api_compat = pytest.importorskip("array_api_compat")
    xp = array_api_compat.array_namespace(np.zeros(1))
    z = np.array([(s * 3 + 1) & MASK for s in SEEDS], dtype=np.uint64)
    assert [int(v) for v in _random.mix64(xp.asarray(z), xp)] == [ref_mix64(int(v)) for v in z]
    assert [int(v) for v in _random.finalize(xp.asarray(z), xp)] == [ref_finalize(int(v)) for v in z]


def test_numba_version_matches():
    pytest.importorskip("numba")
    for s in SEEDS:
        assert int(_random.mix64_jit(np.uint64(s))) == ref_mix64(s)

"""Counter-based randomness: SplitMix64's mixer, the one copy the package uses.

A draw is a pure function of ``(seed, counter)``: the same on every worker, in any
chunking and in any implementation (NumPy, an array-API namespace, a Numba kernel).

* :func:`mix64`: SplitMix64's output function ``finalize(z + GOLDEN)`` (Steele, Lea and
  Flood 2014): a bijection of the uint64s with good avalanche; on NumPy arrays or, with
  ``xp``, on arrays of an array-API namespace.  :func:`mix64_int` is the same on a
  Python int (host-side salts), and ``mix64_jit`` (compiled on first use, so that
  importing this module does not import Numba) the same on a uint64 inside a Numba
  kernel.
* :func:`finalize`: the mixer without the golden-ratio increment (Stafford's variant 13,
  as :func:`pandas.util.hash_array` redistributes integers), written through
  :func:`mix64`.
* :func:`keyed`: the salt of a (seed, counter) pair, ``mix64(seed ^ mix64(counter + offset))``.
* :func:`uniform`: floats in ``[0, 1)`` from hashes (their top 53 bits).
"""

import numpy as np

__all__ = ["GOLDEN", "MASK64", "finalize", "keyed", "mix64", "mix64_int", "uniform"]

MASK64 = (1 << 64) - 1
#: SplitMix64's increment (2**64 / golden ratio, odd).
GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _constant(xp, like):
    """A function making uint64 scalars of ``like``'s kind: NumPy's, or the namespace's
    on ``like``'s device (no Python-int promotion rules)."""
    if xp is None:
        return np.uint64
    import array_api_compat

    device = array_api_compat.device(like)
    return lambda value: xp.asarray(value, dtype=xp.uint64, device=device)


def mix64(z, xp=None):
    """SplitMix64's mixer on a uint64 array (arithmetic modulo 2**64).

    Parameters
    ----------
    z : uint64 ndarray (or NumPy uint64 scalar); with ``xp``, a uint64 array of that
        namespace
    xp : array-API namespace or None, default=None
        None: NumPy.
    """
    c = _constant(xp, z)
    with np.errstate(over="ignore"):
        z = z + c(GOLDEN)
        z = (z ^ (z >> c(30))) * c(_MIX1)
        z = (z ^ (z >> c(27))) * c(_MIX2)
        return z ^ (z >> c(31))


def finalize(z, xp=None):
    """:func:`mix64` without the increment: ``finalize(z) = mix64(z - GOLDEN)`` (what
    :func:`pandas.util.hash_array` applies to integers)."""
    c = _constant(xp, z)
    with np.errstate(over="ignore"):
        return mix64(z - c(GOLDEN), xp)


def mix64_int(z):
    """:func:`mix64` on a Python int (taken modulo 2**64); a Python int."""
    return int(mix64(np.array(int(z) & MASK64, dtype=np.uint64)))


def keyed(seed, counter, offset=0):
    """The salt of ``(seed, counter)``: ``mix64(seed ^ mix64(counter + offset))`` on
    Python ints (modulo 2**64); a Python int.  ``offset`` separates streams of the same
    seed and counter."""
    return mix64_int((int(seed) & MASK64) ^ mix64_int((int(counter) + int(offset)) & MASK64))


def uniform(h):
    """Floats in ``[0, 1)`` from uint64 hashes ``h``: their top 53 bits, over 2**53."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0**-53


_GOLDEN_U, _MIX1_U, _MIX2_U = np.uint64(GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)


def _mix64_scalar(z):  # pragma: no cover - compiled (mix64_jit)
    """:func:`mix64` for Numba kernels: a uint64 in, a uint64 out."""
    z = z + _GOLDEN_U
    z = (z ^ (z >> np.uint64(30))) * _MIX1_U
    z = (z ^ (z >> np.uint64(27))) * _MIX2_U
    return z ^ (z >> np.uint64(31))


def __getattr__(name):
    """``mix64_jit``: :func:`mix64` compiled with Numba, made on first access."""
    if name == "mix64_jit":
        import numba

        jit = numba.njit(cache=True, nogil=True)(_mix64_scalar)
        globals()["mix64_jit"] = jit
        return jit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

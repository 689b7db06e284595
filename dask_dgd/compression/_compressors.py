"""The compressors.  See the package docstring for the protocol."""

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..exceptions import ParameterError

__all__ = ["Compressor", "FP16", "BF16", "TopK", "RandomK", "QSGD", "Sign", "PowerSGD", "get_compressor"]


def _payload_nbytes(payload):
    total = 0
    for v in payload.values():
        if isinstance(v, np.ndarray):
            total += v.nbytes
        elif isinstance(v, (int, float, np.integer, np.floating)):
            total += 8
        elif isinstance(v, tuple):
            total += 8 * len(v)
    return int(total)


@dataclasses.dataclass(frozen=True)
class Compressor:
    """Base class: error feedback around a subclass's ``_encode``/``decompress``.

    Subclasses set ``unbiased`` and implement ``_encode(x, state, rng) -> (payload,
    state)`` and ``decompress(payload)``; ``error_feedback=None`` means "the
    compressor's default" (on for the biased ones, off for the casts and the unbiased).
    """

    error_feedback: object = dataclasses.field(default=None, kw_only=True)

    unbiased: ClassVar[bool] = False
    ef_default: ClassVar[bool] = True

    @property
    def uses_error_feedback(self):
        return self.ef_default if self.error_feedback is None else bool(self.error_feedback)

    def init(self, template):
        """The state for gradients shaped like ``template`` (an array in the gradient's
        natural shape, e.g. the parameter matrix; compress takes it flattened)."""
        template = np.asarray(template)
        return {"residual": np.zeros(template.size) if self.uses_error_feedback else None}

    def compress(self, g, state, rng):
        """``(payload, new state)`` for the gradient ``g`` (1-D float64)."""
        g = np.asarray(g, dtype=np.float64)
        residual = state.get("residual")
        x = g if residual is None else g + residual
        payload, state = self._encode(x, dict(state), rng)
        if residual is not None:
            state["residual"] = x - self.decompress(payload)
        return payload, state

    def _encode(self, x, state, rng):
        raise NotImplementedError

    def decompress(self, payload):
        raise NotImplementedError

    def nbytes(self, payload):
        """Bytes of the payload (array bytes, 8 per scalar)."""
        return _payload_nbytes(payload)

    def step_scale(self, n):
        """Factor on the automatic learning rate for gradients of ``n`` entries: 1 for
        compressors that keep the step stable (the casts, sign, PowerSGD)."""
        return 1.0


@dataclasses.dataclass(frozen=True)
class FP16(Compressor):
    """Half precision, scaled by the largest magnitude (no overflow).

    Error bound: ``|decompress(compress(g)) - g| <= 2**-11 * max|g|`` entrywise.
    """

    ef_default: ClassVar[bool] = False

    def _encode(self, x, state, rng):
        scale = float(np.max(np.abs(x), initial=0.0)) or 1.0
        return {"scale": scale, "values": (x / scale).astype(np.float16)}, state

    def decompress(self, payload):
        return payload["values"].astype(np.float64) * payload["scale"]


@dataclasses.dataclass(frozen=True)
class BF16(Compressor):
    """bfloat16 (float32's exponent, 8 significant bits), rounded to nearest even.

    Error bound: ``|decompress(compress(g)) - g| <= 2**-8 * |g|`` entrywise for
    magnitudes between float32's smallest normal (1.2e-38) and about 3.39e38; larger
    ones become infinite, smaller ones lose relative precision (as in any bfloat16).
    """

    ef_default: ClassVar[bool] = False

    def _encode(self, x, state, rng):
        bits = x.astype(np.float32).view(np.uint32)
        rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
        return {"values": ((bits + rounding) >> 16).astype(np.uint16)}, state

    def decompress(self, payload):
        return (payload["values"].astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _check_ratio(name, ratio):
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ParameterError(f"{name} ratio must be a number in (0, 1]; got {ratio!r}")
    return float(ratio)


@dataclasses.dataclass(frozen=True)
class TopK(Compressor):
    """The ``ceil(ratio * n)`` largest-magnitude entries (float32 values, int32 indices).

    Error bound: ``||decompress(compress(g)) - g||**2 <= (1 - k/n) ||g||**2`` (plus the
    float32 rounding of the kept values); biased, error feedback on by default.
    """

    ratio: float = 0.01

    def __post_init__(self):
        object.__setattr__(self, "ratio", _check_ratio("topk", self.ratio))

    def _encode(self, x, state, rng):
        n = x.size
        k = max(1, math.ceil(self.ratio * n))
        idx = np.argpartition(np.abs(x), n - k)[n - k:] if k < n else np.arange(n)
        idx = np.sort(idx).astype(np.int32)
        return {"n": n, "indices": idx, "values": x[idx].astype(np.float32)}, state

    def decompress(self, payload):
        out = np.zeros(payload["n"])
        out[payload["indices"]] = payload["values"]
        return out

    def step_scale(self, n):
        """``min(1, 2.5 k / n)``: error feedback delays the dropped entries, and the step
        must shrink with the share sent (measured on logistic regression: 1/L
        oscillated for k/n < 0.1; on 2 groups, 5 k/n / L still stalled 1e-3 above the
        optimum, 2.5 k/n / L converged)."""
        return min(1.0, 2.5 * max(1, math.ceil(self.ratio * n)) / n)


@dataclasses.dataclass(frozen=True)
class RandomK(Compressor):
    """``ceil(ratio * n)`` entries drawn uniformly, scaled by ``n / k`` (unbiased).

    The indices are re-drawn by the receiver from a 64-bit seed, so only the values
    (float64) and the seed travel.  Variance: ``E||C(g) - g||**2 = (n/k - 1) ||g||**2``.
    """

    ratio: float = 0.1

    unbiased: ClassVar[bool] = True
    ef_default: ClassVar[bool] = False

    def __post_init__(self):
        object.__setattr__(self, "ratio", _check_ratio("randomk", self.ratio))

    @staticmethod
    def _indices(n, k, seed):
        return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))

    def _encode(self, x, state, rng):
        n = x.size
        k = max(1, math.ceil(self.ratio * n))
        seed = int(rng.integers(2**63))
        idx = self._indices(n, k, seed)
        return {"n": n, "k": k, "seed": seed, "values": x[idx] * (n / k)}, state

    def decompress(self, payload):
        out = np.zeros(payload["n"])
        out[self._indices(payload["n"], payload["k"], payload["seed"])] = payload["values"]
        return out

    def step_scale(self, n):
        """``1 / (1 + omega)`` with the variance factor ``omega = n / k - 1``."""
        return max(1, math.ceil(self.ratio * n)) / n


@dataclasses.dataclass(frozen=True)
class QSGD(Compressor):
    """Stochastic quantisation to ``levels`` levels of ``|g_i| / ||g||`` (unbiased).

    Each entry travels as one signed byte (``levels`` <= 127) plus the norm.  Variance:
    ``E||C(g) - g||**2 <= min(n / levels**2, sqrt(n) / levels) ||g||**2``.
    """

    levels: int = 16

    unbiased: ClassVar[bool] = True
    ef_default: ClassVar[bool] = False

    def __post_init__(self):
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or not 1 <= self.levels <= 127:
            raise ParameterError(f"qsgd levels must be an int in [1, 127]; got {self.levels!r}")

    def _encode(self, x, state, rng):
        top = float(np.max(np.abs(x), initial=0.0))  # scaled: no overflow or underflow
        norm = top * float(np.linalg.norm(x / top)) if top > 0 else 0.0
        if norm == 0:
            return {"norm": 0.0, "q": np.zeros(x.size, dtype=np.int8)}, state
        scaled = np.abs(x) / norm * self.levels
        low = np.floor(scaled)
        q = low + (rng.random(x.size) < scaled - low)
        return {"norm": norm, "q": (np.sign(x) * q).astype(np.int8)}, state

    def decompress(self, payload):
        return payload["q"].astype(np.float64) * (payload["norm"] / self.levels)

    def step_scale(self, n):
        """``1 / (1 + omega)`` with the variance bound ``omega``."""
        return 1.0 / (1.0 + min(n / self.levels**2, math.sqrt(n) / self.levels))


@dataclasses.dataclass(frozen=True)
class Sign(Compressor):
    """One bit per entry (its sign, packed) and one scale, the mean magnitude.

    Biased: ``decompress(compress(g)) = mean|g| * sign(g)``, whose error is
    ``||g||**2 - ||g||_1**2 / n`` (zero when all magnitudes are equal); error feedback
    on by default (EF-signSGD).
    """

    def _encode(self, x, state, rng):
        return {"n": x.size, "scale": float(np.mean(np.abs(x))) if x.size else 0.0,
                "bits": np.packbits(x >= 0)}, state

    # step_scale 1: the full automatic step.  With a constant step, error-feedback sign
    # steps stall above the optimum by an amount proportional to the step (measured,
    # logistic regression, 200 features on 2 groups: 2.3e-3 at 1/L, 5e-4 at 0.5/L,
    # 1.4e-4 at 0.25/L); a decaying learning-rate schedule removes it (user guide).

    def decompress(self, payload):
        signs = np.unpackbits(payload["bits"], count=payload["n"]).astype(np.float64) * 2 - 1
        return signs * payload["scale"]


@dataclasses.dataclass(frozen=True)
class PowerSGD(Compressor):
    """Rank-``rank`` approximation of a matrix-shaped gradient by one power iteration.

    The gradient is taken in the shape of the ``init`` template (a linear model's
    parameter matrix ``(n_features + intercept, n_outputs)``, an item table
    ``(n_items, width)``): ``M``; ``P = M Q`` (orthonormalised), ``Q = M^T P``, and
    ``P Q^T`` is received.  ``Q`` is kept from step to step (warm start), the error
    feedback too (Vogels et al., 2019).
    """

    rank: int = 2

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ParameterError(f"powersgd rank must be an int >= 1; got {self.rank!r}")

    def init(self, template):
        template = np.asarray(template)
        if template.ndim != 2 or template.shape[1] < 2:
            raise ParameterError(
                "powersgd compresses matrix-shaped gradients (multinomial models, item "
                f"factors); this gradient has shape {template.shape}: use topk or qsgd"
            )
        state = super().init(template)
        rows, cols = template.shape
        rng = np.random.default_rng(0)
        state["shape"] = (int(rows), int(cols))
        state["Q"] = np.linalg.qr(rng.standard_normal((cols, min(self.rank, cols))))[0]
        return state

    def _encode(self, x, state, rng):
        M = x.reshape(state["shape"])
        P = np.linalg.qr(M @ state["Q"])[0]
        Q = M.T @ P
        state["Q"] = np.linalg.qr(Q)[0]  # the next step's start
        return {"P": P, "Q": Q}, state

    def decompress(self, payload):
        return (payload["P"] @ payload["Q"].T).ravel()


_BY_NAME = {
    "fp16": (FP16, None),
    "bf16": (BF16, None),
    "topk": (TopK, float),
    "randomk": (RandomK, float),
    "qsgd": (QSGD, int),
    "sign": (Sign, None),
    "powersgd": (PowerSGD, int),
}


def get_compressor(spec):
    """A compressor from the ``compression`` parameter (None stays None)."""
    if spec is None or isinstance(spec, Compressor):
        return spec
    if not isinstance(spec, str):
        raise ParameterError(
            f"compression must be None, a name like 'topk:0.01' or a compressor object; got "
            f"{type(spec).__name__}"
        )
    name, _, arg = spec.partition(":")
    if name not in _BY_NAME:
        raise ParameterError(
            f"unknown compression {name!r}; choose among {sorted(_BY_NAME)} (e.g. 'topk:0.01')"
        )
    cls, kind = _BY_NAME[name]
    if not arg:
        return cls()
    if kind is None:
        raise ParameterError(f"compression {name!r} takes no argument; got {spec!r}")
    try:
        value = kind(arg)
    except ValueError:
        raise ParameterError(f"compression {spec!r}: {arg!r} is not a valid {kind.__name__}") from None
    return cls(value)

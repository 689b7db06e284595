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
    state)`` and ``decompress(payload)``.

    ``error_feedback``: None means "the compressor's default"; True keeps the residual
    of what was dropped and adds it to the next gradient (EF-SGD); ``"ef21"`` compresses
    the *change* of the sender's gradient against an estimate that sender and receiver
    both keep (EF21, Richtarik et al. 2021): ``c = C(g - e)``, ``e <- e + decompress(c)``,
    and the receiver adds ``decompress(c)`` to its running sum of the estimates.  The
    estimate converges to the gradient, so the step needs no shortening; the receiver
    must keep the sum (the engine does, see :meth:`accumulates`).  False: no memory.

    ``downlink=True`` compresses the parameters sent down as well: the driver sends
    ``C(x - w)``, where ``w`` is the copy of the parameters the workers hold, and both
    sides add it to ``w`` (so the copies never drift; the gradient is evaluated at
    ``w``, and what was not sent is in ``x - w`` for the next step).

    ``momentum=m`` (in [0, 1); with the residual feedback) is Deep Gradient
    Compression's momentum correction (Lin et al., 2018): the sender keeps the velocity
    ``u <- m u + g`` and accumulates it, ``r <- r + u``; it sends ``C(r)``, keeps
    ``r - sent``, and zeroes ``u`` where entries were sent (momentum factor masking).
    The receiver steps along the sum of what was sent with plain gradient descent: the
    momentum lives with the senders, so a sparse update never feeds the momentum of an
    optimizer that did not see the rest of the gradient.
    """

    error_feedback: object = dataclasses.field(default=None, kw_only=True)
    downlink: bool = dataclasses.field(default=False, kw_only=True)
    momentum: float = dataclasses.field(default=0.0, kw_only=True)

    unbiased: ClassVar[bool] = False
    ef_default: ClassVar[object] = True
    #: sends a few entries (top-k, random-k): DGC's momentum masking applies
    sparse: ClassVar[bool] = False

    def __post_init__(self):
        fb = self.error_feedback
        if not (fb is None or fb is True or fb is False or (isinstance(fb, str) and fb == "ef21")):
            raise ParameterError(
                f"error_feedback must be None, True, False or 'ef21'; got {self.error_feedback!r}"
            )
        if not isinstance(self.downlink, bool):
            raise ParameterError(f"downlink must be True or False; got {self.downlink!r}")
        m = self.momentum
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m < 1:
            raise ParameterError(f"compression momentum must be a number in [0, 1); got {m!r}")
        if m and (fb is False or (isinstance(fb, str) and fb == "ef21")):
            raise ParameterError(
                f"compression momentum (DGC's momentum correction) accumulates in a residual; it cannot go "
                f"with error_feedback={fb!r}"
            )

    @property
    def feedback(self):
        """The scheme in use: ``"ef21"``, ``"residual"`` or None."""
        if self.momentum:
            return "residual"
        fb = self.ef_default if self.error_feedback is None else self.error_feedback
        return "ef21" if fb == "ef21" else ("residual" if fb else None)

    @property
    def uses_error_feedback(self):
        return self.feedback is not None

    @property
    def accumulates(self):
        """Whether a payload is the change of the sender's estimate (EF21): the receiver
        adds it to the running sum it keeps, instead of using it as the gradient."""
        return self.feedback == "ef21"

    def init(self, template):
        """The state for gradients shaped like ``template`` (an array in the gradient's
        natural shape, e.g. the parameter matrix; compress takes it flattened): the
        residual or the estimate (zero), and ``count``, the payloads sent so far."""
        template = np.asarray(template)
        state = {"residual": np.zeros(template.size) if self.uses_error_feedback else None, "count": 0}
        if self.momentum:
            state["velocity"] = np.zeros(template.size)
        return state

    def compress(self, g, state, rng):
        """``(payload, new state)`` for the gradient ``g`` (1-D float64)."""
        g = np.asarray(g, dtype=np.float64)
        memory = state.get("residual")
        velocity = None
        if self.momentum:  # DGC: the velocity is what accumulates
            velocity = self.momentum * state["velocity"] + g
            g = velocity
        if memory is None:
            x = g
        elif self.accumulates:
            x = g - memory
        else:
            x = g + memory
        payload, state = self._encode(x, dict(state), rng)
        if memory is not None:
            sent = self.decompress(payload)
            state["residual"] = memory + sent if self.accumulates else x - sent
            if velocity is not None and self.sparse:  # momentum factor masking
                velocity[sent != 0] = 0.0
        if velocity is not None:
            state["velocity"] = velocity
        state["count"] = state.get("count", 0) + 1
        return payload, state

    def encode_change(self, x, state, rng, bound=np.inf):
        """``(payload, new state)`` for a change ``x`` whose memory the caller keeps (the
        parameters' difference on the way down): no error feedback of its own.  The
        payload is None when what it would leave unsent, ``||x - decompress(payload)||``,
        exceeds ``bound`` (the caller then sends ``x`` in full)."""
        x = np.asarray(x, dtype=np.float64)
        payload, state = self._encode_within(x, dict(state), rng, bound)
        state["count"] = state.get("count", 0) + 1
        if payload is not None and np.isfinite(bound) and np.linalg.norm(x - self.decompress(payload)) > bound:
            payload = None
        return payload, state

    def _encode_within(self, x, state, rng, bound):
        return self._encode(x, state, rng)

    def _encode(self, x, state, rng):
        raise NotImplementedError

    def decompress(self, payload):
        raise NotImplementedError

    def nbytes(self, payload):
        """Bytes of the payload (array bytes, 8 per scalar)."""
        return _payload_nbytes(payload)

    def step_scale(self, n):
        """Factor on the automatic learning rate for gradients of ``n`` entries: 1 for
        compressors that keep the step stable (the casts, sign, PowerSGD, and any
        compressor with EF21 feedback); ``1 - momentum`` with DGC's momentum (the
        velocity sums ``1 / (1 - momentum)`` gradients)."""
        return 1.0 - self.momentum


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


def _gaps(idx):
    """Sorted indices as their gaps (the first: the first index), in the smallest
    unsigned integer type that holds the largest gap (lossless)."""
    gaps = np.diff(idx, prepend=0)
    top = int(gaps.max(initial=0))
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return gaps.astype(dtype)
    return gaps.astype(np.uint64)


@dataclasses.dataclass(frozen=True)
class TopK(Compressor):
    """The ``ceil(ratio * n)`` largest-magnitude entries: float32 values, and their
    indices as gaps in the smallest unsigned type that holds the largest gap (lossless;
    one or two bytes an entry unless two kept entries are more than 65,535 apart).

    Error bound: ``||decompress(compress(g)) - g||**2 <= (1 - k/n) ||g||**2`` (plus the
    float32 rounding of the kept values); biased.  Default feedback: ``"ef21"`` (the
    change of each block's gradient is compressed; the automatic step is not shortened).
    ``error_feedback=True`` (a residual, EF-SGD) shortens it to ``min(1, 2.5 k / n)``.

    ``warmup=True`` (default): the first payloads keep more entries, as Deep Gradient
    Compression's warm-up (Lin et al., 2018): a quarter of them, then a sixteenth, ...
    (a quarter of the previous share each time) until ``ratio`` is reached.  Each
    sender counts its own payloads, so the schedule restarts when a sender's memory does.
    """

    ratio: float = 0.01
    warmup: bool = True

    ef_default: ClassVar[object] = "ef21"
    sparse: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "ratio", _check_ratio("topk", self.ratio))
        if not isinstance(self.warmup, bool):
            raise ParameterError(f"topk warmup must be True or False; got {self.warmup!r}")

    def ratio_at(self, count):
        """The share kept by the payload after ``count`` others."""
        if not self.warmup:
            return self.ratio
        return max(self.ratio, 0.25 ** (count + 1))

    def _encode(self, x, state, rng, k=None):
        n = x.size
        if k is None:
            k = max(1, math.ceil(self.ratio_at(state.get("count", 0)) * n))
        idx = np.argpartition(np.abs(x), n - k)[n - k:] if k < n else np.arange(n)
        idx = np.sort(idx)
        return {"n": n, "gaps": _gaps(idx), "values": x[idx].astype(np.float32)}, state

    def _encode_within(self, x, state, rng, bound):
        """At least the usual share, and as many more of the largest entries as it takes
        for the rest to have a norm within ``bound``."""
        n = x.size
        k = max(1, math.ceil(self.ratio_at(state.get("count", 0)) * n))
        if np.isfinite(bound) and k < n:
            sq = x * x
            rest = sq[np.argpartition(sq, n - k)[:n - k]]
            if np.sqrt(np.sum(rest)) > 0.999 * bound:  # the usual share is not enough: sort (else no need)
                tail = np.sqrt(np.cumsum(np.sort(sq)))  # norms of the smallest j entries
                k = max(k, n - int(np.searchsorted(tail, 0.999 * bound, side="right")))
        return self._encode(x, state, rng, k=min(k, n))

    def decompress(self, payload):
        out = np.zeros(payload["n"])
        out[np.cumsum(payload["gaps"], dtype=np.int64)] = payload["values"]
        return out

    @staticmethod
    def entries(payload):
        """The payload as ``(indices, float64 values)`` (sums of payloads stay sparse
        in the block tree)."""
        return np.cumsum(payload["gaps"], dtype=np.int64), payload["values"].astype(np.float64)

    def step_scale(self, n):
        """1 with EF21 feedback (the default); ``min(1, 2.5 k / n)`` with a residual:
        the residual delays the dropped entries, and the step must shrink with the share
        sent (measured on logistic regression: 1/L oscillated for k/n < 0.1; on 2
        groups, 5 k/n / L still stalled 1e-3 above the optimum, 2.5 k/n / L converged)."""
        if self.feedback != "residual" or self.momentum:
            return 1.0 - self.momentum
        return min(1.0, 2.5 * max(1, math.ceil(self.ratio * n)) / n)


@dataclasses.dataclass(frozen=True)
class RandomK(Compressor):
    """``ceil(ratio * n)`` entries drawn uniformly, scaled by ``n / k`` (unbiased).

    The indices are re-drawn by the receiver from a 64-bit seed, so only the values
    (float64) and the seed travel.  Variance: ``E||C(g) - g||**2 = (n/k - 1) ||g||**2``.
    With EF21 feedback the entries travel unscaled (``k/n`` times the unbiased
    compressor: a contraction, which EF21 needs; scaled, its estimates diverged).
    """

    ratio: float = 0.1

    unbiased: ClassVar[bool] = True
    ef_default: ClassVar[bool] = False
    sparse: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "ratio", _check_ratio("randomk", self.ratio))

    @staticmethod
    def _indices(n, k, seed):
        return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))

    def _encode(self, x, state, rng):
        n = x.size
        k = max(1, math.ceil(self.ratio * n))
        seed = int(rng.integers(2**63))
        idx = self._indices(n, k, seed)
        # EF21 needs a contraction: the entries unscaled (the unbiased C times k / n)
        scale = 1.0 if self.feedback == "ef21" else n / k
        return {"n": n, "k": k, "seed": seed, "values": x[idx] * scale}, state

    def decompress(self, payload):
        out = np.zeros(payload["n"])
        out[self._indices(payload["n"], payload["k"], payload["seed"])] = payload["values"]
        return out

    def step_scale(self, n):
        """``1 / (1 + omega)`` with the variance factor ``omega = n / k - 1`` (1 with
        EF21 feedback)."""
        if self.feedback == "ef21":
            return 1.0
        return max(1, math.ceil(self.ratio * n)) / n


@dataclasses.dataclass(frozen=True)
class QSGD(Compressor):
    """Stochastic quantisation to ``levels`` levels of ``|g_i| / ||g||`` (unbiased).

    Each entry travels as one signed byte (``levels`` <= 127) plus the norm.  Variance:
    ``E||C(g) - g||**2 <= min(n / levels**2, sqrt(n) / levels) ||g||**2 = omega ||g||**2``.
    With EF21 feedback the payload is scaled by ``1 / (1 + omega)`` (a contraction).
    """

    levels: int = 16

    unbiased: ClassVar[bool] = True
    ef_default: ClassVar[bool] = False

    def __post_init__(self):
        super().__post_init__()
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
        if self.feedback == "ef21":  # a contraction for EF21: the unbiased C / (1 + omega)
            norm = norm / (1.0 + self._omega(x.size))
        return {"norm": norm, "q": (np.sign(x) * q).astype(np.int8)}, state

    def _omega(self, n):
        return min(n / self.levels**2, math.sqrt(n) / self.levels)

    def decompress(self, payload):
        return payload["q"].astype(np.float64) * (payload["norm"] / self.levels)

    def step_scale(self, n):
        """``1 / (1 + omega)`` with the variance bound ``omega`` (1 with EF21 feedback)."""
        if self.feedback == "ef21":
            return 1.0
        return 1.0 / (1.0 + self._omega(n))


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
        super().__post_init__()
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


#: Options after the name: ``"topk:0.01+down+residual"``.
_OPTIONS = {
    "down": ("downlink", True),
    "ef21": ("error_feedback", "ef21"),
    "residual": ("error_feedback", True),
    "noef": ("error_feedback", False),
    "dgc": ("momentum", 0.9),
}


def get_compressor(spec):
    """A compressor from the ``compression`` parameter (None stays None): a name with
    its argument and options, ``"name[:arg][+option...]"``, options ``down`` (downlink),
    ``ef21``, ``residual`` (error feedback by residual), ``noef`` (none) and ``dgc``
    (DGC's momentum correction, momentum 0.9)."""
    if spec is None or isinstance(spec, Compressor):
        return spec
    if not isinstance(spec, str):
        raise ParameterError(
            f"compression must be None, a name like 'topk:0.01' or a compressor object; got "
            f"{type(spec).__name__}"
        )
    head, *options = spec.split("+")
    name, _, arg = head.partition(":")
    if name not in _BY_NAME:
        raise ParameterError(
            f"unknown compression {name!r}; choose among {sorted(_BY_NAME)} (e.g. 'topk:0.01')"
        )
    kw = {}
    for opt in options:
        if opt not in _OPTIONS:
            raise ParameterError(
                f"compression {spec!r}: unknown option {opt!r}; choose among {sorted(_OPTIONS)} "
                "(e.g. 'topk:0.01+down')"
            )
        key, value = _OPTIONS[opt]
        if key in kw:
            raise ParameterError(f"compression {spec!r}: two options set {key}")
        kw[key] = value
    cls, kind = _BY_NAME[name]
    if not arg:
        return cls(**kw)
    if kind is None:
        raise ParameterError(f"compression {name!r} takes no argument; got {spec!r}")
    try:
        value = kind(arg)
    except ValueError:
        raise ParameterError(f"compression {spec!r}: {arg!r} is not a valid {kind.__name__}") from None
    return cls(value, **kw)

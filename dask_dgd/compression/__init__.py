"""Gradient compressors (pure NumPy; no Dask): what each group sends up the reduction.

Every compressor is a frozen dataclass with

- ``init(template) -> state``: the state of one sender for gradients shaped like
  ``template`` (the error-feedback residual, PowerSGD's matrix shape and warm start);
- ``compress(g, state, rng) -> (payload, state)``: what travels, and the new state;
- ``decompress(payload) -> g``: the gradient the receiver uses;
- ``nbytes(payload) -> int``: the bytes of the payload's arrays and scalars.

With error feedback (``error_feedback=True``, the default of the biased compressors:
fp16 and bf16 casts excepted) a group compresses ``g + e`` and keeps
``e <- g + e - decompress(payload)``: what compression dropped is sent later, so the
compressed steps add up to the true ones.  Unbiased compressors (``randomk``,
``qsgd``) satisfy ``E[decompress(compress(g))] = g`` and need no memory.

:func:`get_compressor` parses the estimators' ``compression`` parameter: ``None``,
``"fp16"``, ``"bf16"``, ``"topk:0.01"``, ``"randomk:0.1"``, ``"qsgd:16"``, ``"sign"``,
``"powersgd:2"`` or a compressor object.
"""

from ._compressors import (
    BF16,
    FP16,
    QSGD,
    Compressor,
    PowerSGD,
    RandomK,
    Sign,
    TopK,
    get_compressor,
)

__all__ = [
    "BF16",
    "FP16",
    "QSGD",
    "Compressor",
    "PowerSGD",
    "RandomK",
    "Sign",
    "TopK",
    "get_compressor",
]

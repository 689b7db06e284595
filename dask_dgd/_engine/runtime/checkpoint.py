"""Checkpoints of a running fit, and resuming from them.

A checkpoint is one dask_dgd archive (``<directory>/checkpoint.npz``, see
:mod:`dask_dgd._files.archive`: NumPy arrays + JSON, checksummed, never pickle) holding
everything the synchronous first-order loop needs to continue bit for bit: the
parameters, the optimizer (with its learning rate after the automatic choice and any
halvings) and its state, the iteration and step counters (the mini-batch draws are
functions of the seed and the step), the stopping rule's memory, the seed, the history
so far, and each group's compression state (error-feedback residuals).  It is written
atomically every ``checkpoint_every`` steps and when the fit ends.

The checkpoint also records a *fingerprint* of the fit (the estimator class, the
parameters that shape the trajectory, the data's rows, features, blocks and total
weight, and a CRC-32 of each block's X, y and weights taken in the setup's summary
pass); resuming with anything different is refused with a message naming the
difference (which array, which blocks).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from ..._files.archive import Encoder, decode, read_archive, stale_temporaries, write_archive
from ...exceptions import CheckpointError, ParameterError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..data.shards import ShardSet

__all__ = ["Checkpointer", "data_fingerprint", "digests_of", "stable_repr"]

logger = logging.getLogger("dask_dgd")

FILENAME = "checkpoint.npz"


def data_fingerprint(shards: ShardSet) -> dict[str, Any]:
    """What a resumed fit's data must match: rows, features, and the totals of the
    setup's summaries (``shards.totals``: total weight, weighted target sum or label
    counts), floats to 10 significant digits (other chunkings round differently), and
    each block's digest where the setup took them (``shards.totals["data"]``, see
    :func:`digests_of`)."""
    totals = {k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in getattr(shards, "totals", {}).items()}
    return {"n_rows": int(shards.n_rows), "n_features": int(shards.n_features), **totals}


def digests_of(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The blocks' digests from the setup's summaries (``shard_summary(..., digest=True)``),
    in block order: the fingerprint's ``"data"`` entry."""
    return sorted((d for s in summaries for d in s.get("digests", ())), key=lambda d: d["block"])


def _data_difference(saved: Any, now: Any) -> str:
    """What differs between two ``"data"`` entries, block by block, in words."""
    if not (isinstance(saved, list) and isinstance(now, list)) or len(saved) != len(now):
        return f"the data are cut into {len(now)} blocks, the checkpoint's into " \
               f"{len(saved) if isinstance(saved, list) else '?'}"
    parts = []
    for name in ("X", "y", "sample_weight"):
        blocks = [str(b.get("block", i)) for i, (a, b) in enumerate(zip(saved, now))
                  if not isinstance(a, dict) or a.get(name) != b.get(name)]
        if blocks:
            parts.append(f"{name} differs in block{'s' if len(blocks) > 1 else ''} {', '.join(blocks[:8])}"
                         f"{', ...' if len(blocks) > 8 else ''}")
    return "; ".join(parts) + f" (of {len(now)} blocks)"


def stable_repr(value: Any) -> str:
    """A description of a parameter that is the same in every process (no addresses)."""
    import types

    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ", ".join(stable_repr(v) for v in value) + ")"
    text = repr(value)
    return text if " at 0x" not in text else type(value).__module__ + "." + type(value).__qualname__


class Checkpointer:
    """Writes and reads the checkpoints of one fit.

    Parameters
    ----------
    directory : str or path
        Folder of the checkpoint file (created if needed).
    every : int
        Write after every ``every`` accepted steps (and when the fit ends).
    fingerprint : dict
        JSON-able description of the fit that a resumed fit must match.
    resume : bool
        Whether :meth:`load` returns the saved state (False: start afresh and
        overwrite it).
    """

    def __init__(self, directory: str | os.PathLike[str], every: int, fingerprint: dict[str, Any],
                 resume: bool) -> None:
        self.directory = os.fspath(directory)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise ParameterError(
                f"checkpoint must name a folder (created if missing); {self.directory!r} is an existing file"
            )
        self.path = os.path.join(self.directory, FILENAME)
        self.every = int(every)
        self.fingerprint = fingerprint
        self.resume = bool(resume)

    def due(self, iteration: int) -> bool:
        return iteration > 0 and iteration % self.every == 0

    def load(self) -> dict[str, Any] | None:
        """The saved loop state (a dict), or None when not resuming or there is none yet."""
        if not self.resume:
            return None
        if not os.path.exists(self.path):
            logger.info("resume=True but there is no checkpoint at %s yet: starting afresh", self.path)
            return None
        content, arrays = read_archive(self.path, "checkpoint")
        saved = content.get("fingerprint")
        if saved != self.fingerprint:
            diff = sorted(
                k for k in set(saved or {}) | set(self.fingerprint)
                if (saved or {}).get(k) != self.fingerprint.get(k)
            )
            details = "; ".join(
                f"data: {_data_difference((saved or {}).get(k), self.fingerprint.get(k))}" if k == "data" else
                f"{k}: checkpoint {(saved or {}).get(k)!r}, now {self.fingerprint.get(k)!r}" for k in diff
            )
            raise CheckpointError(
                f"the checkpoint at {self.path!r} was written by another fit ({details}); "
                "resume with the same estimator settings and data, or fit with resume=False to start over"
            )
        try:
            state = decode(content["state"], arrays)
            logger.info("resuming from %s (step %d)", self.path, state["n_steps"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RecursionError) as err:
            raise CheckpointError(
                f"the checkpoint at {self.path!r} holds a malformed state ({type(err).__name__}: {err})"
            ) from err
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (a dict of encodable values) atomically."""
        enc = Encoder()
        content = {"fingerprint": self.fingerprint, "state": enc(state)}
        write_archive(self.path, "checkpoint", content, enc.arrays)
        for path in stale_temporaries(self.directory):  # an interrupted fit's half-written checkpoint
            try:
                os.remove(path)
                logger.info("removed %s, left by a fit that stopped while writing its checkpoint", path)
            except OSError:
                pass  # (removed meanwhile)

"""How the groups of a sharded fit reach each other's parameter shards (see :mod:`.params`).

:class:`ActorExchange` calls ``GroupRunner.exchange`` on the owner's runner, worker to
worker, from the calling group's worker; :class:`LocalExchange` writes straight into
the owners' memory in process.  Both answer the results and the bytes as they travel.
This module imports no Dask at import time.
"""

from __future__ import annotations

import asyncio
import pickle
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..runtime.reduce import Partial, SparseVector, grad_nbytes, partial_nbytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from distributed import Worker

    from ..runtime.group_steps import GroupMemory

    #: One owner call of an exchange: ``(owner, fn, args)``, run as ``fn(shard, scratch, *args)``.
    OwnerCall = tuple[int, Callable[..., Any], tuple[Any, ...]]

__all__ = ["ActorExchange", "LocalExchange"]


class LocalExchange:
    """Pulls and pushes in process: straight into the owners' memory (the groups'
    scratch dicts).  Bytes are counted as they would travel (the arrays' bytes)."""

    def __init__(self, scratches: Sequence[GroupMemory]) -> None:
        self.scratches = scratches

    def call(self, calls: Sequence[OwnerCall]) -> tuple[list[Any], int, int]:
        """``[(owner, fn, args)]`` -> ``(results, bytes sent, bytes received)``."""
        results = [fn(None, self.scratches[o], *args) for o, fn, args in calls]
        sent = sum(_payload_nbytes(args) for _, _, args in calls)
        return results, sent, sum(_payload_nbytes(r) for r in results)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a LocalExchange works only in process")


def _payload_nbytes(value: Any) -> int:
    """Bytes of a pull's or push's arguments or answer as they would travel."""
    if isinstance(value, Partial):
        return partial_nbytes(value)
    if isinstance(value, (np.ndarray, SparseVector)):
        return grad_nbytes(value)
    if isinstance(value, dict):
        return sum(_payload_nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_payload_nbytes(v) for v in value)
    return 8


class ActorExchange:
    """Pulls and pushes worker to worker: ``GroupRunner.exchange`` on the owner's
    runner (``targets[g]``: its worker's address and actor key), all of one call at
    once, from the calling group's worker.  Bytes are the pickled messages'."""

    def __init__(self, targets: Iterable[Sequence[str]]) -> None:
        self.targets = [tuple(t) for t in targets]

    def call(self, calls: Sequence[OwnerCall]) -> tuple[list[Any], int, int]:
        from distributed import get_worker
        from distributed.utils import sync

        worker = get_worker()
        payloads = [pickle.dumps((fn, args)) for _, fn, args in calls]
        answers = sync(worker.loop, _exchange_all, worker, [(*self.targets[o], p) for (o, _, _), p in
                                                             zip(calls, payloads)])
        return [pickle.loads(a) for a in answers], sum(map(len, payloads)), sum(map(len, answers))


async def _exchange_all(worker: Worker, calls: Sequence[tuple[str, str, bytes]]) -> list[bytes]:
    from distributed.protocol import to_serialize

    async def one(address: str, key: str, payload: bytes) -> bytes:
        try:
            response = await worker.rpc(address).actor_execute(actor=key, function="exchange",
                                                               args=[to_serialize(payload)], kwargs={})
        except OSError as err:
            raise OSError(f"Actor was lost: the owner of a parameter shard on {address} did not answer "
                          f"({err})") from err
        if response["status"] != "OK":
            raise response["exception"]
        return response["result"]

    return await asyncio.gather(*(one(*c) for c in calls))

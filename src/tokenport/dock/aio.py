"""``aput`` and ``aget``, a dock's ``put`` and ``get`` for asyncio code, written once for ``Dock`` and
``RayDock``: the blocking call runs in a worker thread, so a wait never holds up the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .batch import Batch

__all__ = ["AsyncMethods"]


class AsyncMethods:
    """``aput`` and ``aget`` over the ``put`` and ``get`` of the class that mixes this in."""

    put: Callable[..., None]
    get: Callable[..., Batch | None]

    async def aput(
        self, partition: str, columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray, **options: Any
    ) -> None:
        """``put`` from asyncio code (runs in a worker thread)."""
        await asyncio.to_thread(self.put, partition, columns, rows, **options)

    async def aget(
        self, consumer: str, columns: Sequence[str], count: int, partition: str | None = None, **options: Any
    ) -> Batch | None:
        """``get`` from asyncio code (the wait happens in a worker thread, not on the event loop)."""
        return await asyncio.to_thread(self.get, consumer, columns, count, partition, **options)

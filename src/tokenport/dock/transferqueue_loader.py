"""TransferQueue's ``StreamingDataset`` and ``StreamingDataLoader`` reading from the dock adapter.

They are TransferQueue's own classes (same iteration, buffering, micro-batching, ``reset``/``step``)
with the client swapped for ``transferqueue.TransferQueueClient``. The adapter's bookkeeping lives
in this process, so the loader reads in it: ``num_workers`` must be 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transfer_queue.dataloader import StreamingDataLoader as _PeerLoader
from transfer_queue.dataloader import StreamingDataset as _PeerDataset

from ..errors import ConfigError
from .transferqueue import TransferQueueClient, get_client

__all__ = ["StreamingDataLoader", "StreamingDataset"]


class StreamingDataset(_PeerDataset):
    """TransferQueue's streaming dataset over the adapter: yields ``(TensorDict, BatchMeta)`` micro-batches
    of ``task_name``'s fetches from ``partition_id`` (``client``: the one ``init`` made by default)."""

    def __init__(
        self,
        config: Any,
        batch_size: int,
        micro_batch_size: int,
        data_fields: list[str],
        partition_id: str,
        task_name: str,
        dp_rank: int,
        should_check_consumption_status: bool = False,
        fetch_batch_fn: Callable[..., Any] | None = None,
        process_batch_fn: Callable[..., Any] | None = None,
        *,
        client: TransferQueueClient | None = None,
    ) -> None:
        super().__init__(
            config, batch_size, micro_batch_size, data_fields, partition_id, task_name, dp_rank,
            should_check_consumption_status, fetch_batch_fn, process_batch_fn,
        )  # fmt: skip
        self._client = client

    def _create_client(self) -> None:
        self._tq_client = self._client or get_client()


class StreamingDataLoader(_PeerLoader):
    """TransferQueue's streaming loader (batches are the dataset's micro-batches), in this process."""

    def __init__(self, dataset: StreamingDataset, num_workers: int = 0, **options: Any) -> None:
        if num_workers != 0:
            raise ConfigError(
                f"num_workers={num_workers!r}: the adapter's bookkeeping is in this process, so the loader "
                "reads here; pass num_workers=0"
            )
        if not isinstance(dataset, StreamingDataset):
            raise ConfigError(f"dataset is a {type(dataset).__name__}: pass a tokenport StreamingDataset")
        super().__init__(dataset, num_workers=0, **options)

"""Read-ahead for remote stores: a loader worker tells each store the reads of its coming batches.

torch deals a batch sampler's batches to its workers in turn (batch k to worker k mod W), so a worker
that knows the sampler's order knows its own next batches. ``ReadAhead`` is made at each ``for`` over
a StatefulLoader over remote stores (none for local ones) from a copy of the sampler, and reaches the
workers with the dataset. A worker finds the first batch it is handed among the sampler's batches,
takes every W-th one after it, and hands the reads of the next ``HORIZON`` of them to the remote
stores (``IndexedDataset.prefetch``), which fetch them ahead, in order, in few GETs, shared through
the node cache. Handed a batch it did not expect (persistent workers starting an epoch where their
copy did not), a worker looks for it again; when it cannot find it, it stops planning: reads still
work, each fetching its own blocks.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from ..samples.base import SampleDataset
from ..storage import is_remote, set_loader_workers

HORIZON = 128  # batches of one worker's share planned at once; planned again when half are read
_SEARCH = 64  # batches per worker searched for a batch a worker was handed and did not expect


class ReadAhead:
    """Plans one loader worker's coming reads of ``dataset``'s remote stores from ``sampler``'s order."""

    def __init__(self, sampler: Any, dataset: Any) -> None:
        self.sampler = copy.copy(sampler)  # the position at the start of this ``for``
        self.dataset = dataset
        self._reset()

    def _reset(self) -> None:
        self._batches: Iterator[list[int]] | None = None  # the sampler's batches not looked at yet
        self._mine: deque[list[int]] = deque()  # this worker's next batches, planned
        self._workers = 1
        self._exhausted = False
        self._off = False

    def __getstate__(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "dataset": self.dataset}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.sampler, self.dataset = state["sampler"], state["dataset"]
        self._reset()

    def before(self, ids: Sequence[int]) -> None:
        """Called with each batch this worker is handed, before it is read."""
        if self._off:
            return
        batch = list(ids)
        if self._mine and self._mine[0] == batch:
            self._mine.popleft()
            if not self._exhausted and len(self._mine) < HORIZON // 2:
                self._plan(batch)
            return
        self._locate(batch)

    def _locate(self, batch: list[int]) -> None:
        """Find ``batch`` among the sampler's next batches and plan this worker's share from it."""
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        self._workers = info.num_workers if info is not None else 1
        set_loader_workers(self._workers)  # this worker's share of a node cache's budget to plan ahead
        if self._batches is None:
            self._batches = iter(self.sampler)
        self._mine.clear()
        self._exhausted = False
        for _ in range(_SEARCH * self._workers):
            candidate = next(self._batches, None)
            if candidate is None:
                break
            if list(candidate) == batch:
                self._plan(batch)
                return
        self._off = True  # not in this order (or far off it): reads go on unplanned

    def _plan(self, batch: list[int]) -> None:
        """Take this worker's next batches up to HORIZON and announce their reads (``batch``'s first)."""
        assert self._batches is not None
        while not self._exhausted and len(self._mine) < HORIZON:
            for _ in range(self._workers - 1):  # the other workers' batches
                if next(self._batches, None) is None:
                    self._exhausted = True
                    break
            else:
                mine = next(self._batches, None)
                if mine is None:
                    self._exhausted = True
                else:
                    self._mine.append(list(mine))
        ids = [i for b in (batch, *self._mine) for i in b]
        for store, documents, offsets, lengths in self.dataset.read_plan(ids) or ():
            if is_remote(store.prefix):
                store.prefetch(list(zip(documents.tolist(), offsets.tolist(), lengths.tolist())))


def read_ahead(sampler: Any, dataset: Any) -> ReadAhead | None:
    """A ReadAhead for a ``for`` over ``dataset`` in ``sampler``'s order, or None when no store under it
    is remote (or it cannot say its reads): local stores need no planning, nor its start-up work."""
    plans = isinstance(dataset, SampleDataset) and type(dataset).read_plan is not SampleDataset.read_plan
    return ReadAhead(sampler, dataset) if plans and _reads_remote(dataset) else None


def _reads_remote(dataset: Any) -> bool:
    """True when a store of ``dataset`` (a sample dataset, or a blend of them at any depth) is remote."""
    if not isinstance(dataset, SampleDataset):
        return False
    if any(_reads_remote(child) for child in dataset.datasets):
        return True
    return any(is_remote(store.prefix) for store in dataset.stores())

"""How StatefulLoader reads an AdaptiveBlend: sample ids resolved in the main process, pairs read in workers.

DataLoader worker processes hold their own copy of the dataset, which never sees a weight update
made in the main process. So the batch sampler is wrapped (``ResolvingSampler``): in the main
process it realizes the blend through the end of each global batch (the same point on every rank)
and yields ``(dataset, sample)`` pairs; the DataLoader reads the pairs from a thin dataset over the
blend's children (``LocatedReader``), one ``get_batch`` per child on the batch path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..blend.adaptive import AdaptiveBlend
from ..blend.dataset import gather
from ._fetch import as_tensors, batch_signature, collate_samples, refuse_unknown, sample_names


def global_batch_size(sampler: Any) -> int:
    """Samples per step over all data-parallel ranks."""
    size = getattr(sampler, "global_batch_size", None)
    return int(size) if size is not None else int(sampler.micro_batch_size) * int(sampler.data_parallel_size)


class ResolvingSampler:
    """``sampler``'s micro-batches as ``(dataset, sample)`` pairs of ``blend``, resolved here: before each
    micro-batch the blend is realized through the last id of its whole global batch (all ranks' ids, from
    the sampler's ``global_stream``), so every rank realizes the same samples whatever ids it holds, and an
    update lands at the same global sample on every rank (also when a batch runs into the next epoch)."""

    def __init__(self, sampler: Any, blend: AdaptiveBlend) -> None:
        self.sampler = sampler
        self.blend = blend
        self.global_batch_size = global_batch_size(sampler)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        gbs = self.global_batch_size
        position = int(self.sampler.consumed_samples)  # the stream position of the first batch yielded
        stream = getattr(self.sampler, "global_stream", None)
        for ids in self.sampler:
            ids = np.asarray(ids, dtype=np.int64)
            if stream is not None:
                batch = np.asarray(stream(position, position + gbs), dtype=np.int64)
                if len(batch):
                    self.blend.realize(min(len(self.blend), int(batch.max()) + 1))
            else:  # a sampler without a global stream: its ids are taken as stream positions
                self.blend.realize(min(len(self.blend), position + gbs))
            position += gbs
            datasets, samples = self.blend.locate_many(ids)
            yield list(zip(datasets.tolist(), samples.tolist()))


class LocatedReader:
    """The blend's children read by ``(dataset, sample)`` pairs, each sample with its ``dataset_id``;
    ``names`` keeps those fields only (None: all); ``batched``: ``__getitems__`` is one ``get_batch`` per child."""

    def __init__(self, blend: AdaptiveBlend, names: tuple[str, ...] | None, batched: bool) -> None:
        self.datasets = blend.datasets
        self.length = len(blend)
        self.names = names
        self.batched = batched

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, pair: tuple[int, int]) -> dict[str, Any]:
        """Sample ``pair[1]`` of child ``pair[0]`` with its ``dataset_id``."""
        dataset, sample = pair
        item = {**self.datasets[dataset][sample], "dataset_id": dataset}
        return item if self.names is None else {name: item[name] for name in self.names}

    def __getitems__(self, pairs: list[tuple[int, int]]) -> Any:
        """The pairs' samples stacked (batched) or listed one by one."""
        if not self.batched:
            return [self[pair] for pair in pairs]
        located = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        batch = gather(self.datasets, located[:, 0], located[:, 1], "AdaptiveBlend")
        return batch if self.names is None else {name: batch[name] for name in self.names}


def located_plan(blend: AdaptiveBlend, fields: tuple[str, ...] | None, default_collate_wanted: bool) -> tuple[Any, Any]:
    """(what the DataLoader reads, its collate or None for the caller's) for an adaptive blend: the batch
    path when the caller wants the default collate and every child with samples has the same batch fields."""
    children = [batch_signature(child) for child in blend.datasets if len(child)]
    first = children[0] if children and default_collate_wanted else None
    if first is not None and all(child == first for child in children):
        names: tuple[str, ...] = tuple(name for name, _, _ in first) + ("dataset_id",)
        if fields is not None:
            refuse_unknown(fields, names, blend)
        return LocatedReader(blend, fields or names, True), as_tensors
    if fields is not None:  # names from a child: reading blend[0] would realize the stream
        child = next(child for child in blend.datasets if len(child))
        refuse_unknown(fields, (*(sample_names(child) or ()), "dataset_id"), blend)
    return LocatedReader(blend, fields, False), collate_samples if default_collate_wanted else None

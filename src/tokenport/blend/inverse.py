"""Inverse lineage of blends: a child's occurrences as the blend's samples, by counting.

Blended sample ``t`` reads sample ``k`` of child ``d = dataset_index[t]``, where ``k`` is (for every
blend tokenport builds: Tijdeman, greedy, Megatron's, schedules, adaptive) the count of ``d`` before
``t``, read modulo the child's length when the blend takes more than it holds. ``BlendInverse`` sorts
``dataset_index`` by child once (a stable argsort: O(samples) memory, int32 below 2**31 samples),
so the ``j``-th sample of child ``d`` in the blend is ``positions(d)[j]``; child sample ``s`` is then
read at ``j = s, s + L, s + 2L, ...``.
Where a child's recorded sample index is not that count (indices from elsewhere), its samples are
matched by value instead, still without a scan of the other children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..samples.base import SampleDataset
from ..samples.lineage import Occurrences

SamplesOf = Callable[[np.ndarray], np.ndarray]
"""The child sample (before the modulo) each of some blend positions reads."""


class BlendInverse:
    """``dataset_index`` sorted by child, and whether each child's samples are its running count."""

    def __init__(
        self, dataset_index: np.ndarray, num_children: int, samples_of: SamplesOf, *, counting: bool = False
    ) -> None:
        index = np.asarray(dataset_index)
        order = np.argsort(index, kind="stable")
        self.order = order.astype(np.int32) if len(order) < np.iinfo(np.int32).max else order  # half the memory
        counts = np.bincount(index, minlength=num_children)[:num_children].astype(np.int64)
        self.bounds = np.concatenate(([0], np.cumsum(counts)))
        self.samples_of = samples_of
        self.counting = [  # ``counting``: the caller knows they are (no need to read them all)
            counting or bool(np.array_equal(samples_of(self.positions(d)), np.arange(int(counts[d]))))
            for d in range(num_children)
        ]

    def positions(self, child: int) -> np.ndarray:
        """The blend positions that read child ``child``, in order."""
        return self.order[int(self.bounds[child]) : int(self.bounds[child + 1])]

    def places(self, child: int, samples: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """For child samples ``samples`` (of a child of ``length`` samples): (index into ``samples``, blend position)
        of every blend sample that reads one of them."""
        positions = self.positions(child)
        taken = len(positions)
        if self.counting[child]:
            reps = np.where(samples < taken, (taken - 1 - samples) // max(length, 1) + 1, 0).astype(np.int64)
            which = np.repeat(np.arange(len(samples), dtype=np.int64), reps)
            lap = np.arange(int(reps.sum()), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
            return which, positions[samples[which] + lap * length]
        read = self.samples_of(positions).astype(np.int64)
        if taken > length:
            read = read % length
        order = np.argsort(read, kind="stable")
        keys = read[order]
        lo = np.searchsorted(keys, samples, side="left")
        hi = np.searchsorted(keys, samples, side="right")
        reps = (hi - lo).astype(np.int64)
        which = np.repeat(np.arange(len(samples), dtype=np.int64), reps)
        first = np.repeat(lo - (np.cumsum(reps) - reps), reps) + np.arange(int(reps.sum()), dtype=np.int64)
        return which, positions[order[first]]


def blend_occurrences(
    children: Sequence[Any], inverse: BlendInverse, lengths: Sequence[int], store: str, document: int, owner: str
) -> Occurrences:
    """Each child's occurrences of ``document`` seen from the blend (nested blends recurse through their own)."""
    parts = []
    for d, child in enumerate(children):
        if not len(inverse.positions(d)):
            continue  # the blend takes nothing from it
        if not isinstance(child, SampleDataset):
            raise ConfigError(
                f"dataset {d} of the {owner} is a {type(child).__name__}, which cannot say which samples hold a "
                "document (no occurrences()); blend GPT, packed, SFT datasets or blends of them"
            )
        found = child._occurrences(store, document)
        if not len(found):
            continue
        which, places = inverse.places(d, found.sample, int(lengths[d]))
        parts.append(Occurrences(places, found.piece[which], found.offset[which], found.start[which], found.end[which]))
    return Occurrences.concat(parts)

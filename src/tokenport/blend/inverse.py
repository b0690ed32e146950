"""Inverse lineage of blends: a child's occurrences as the blend's samples, by counting.

Blended sample ``t`` reads sample ``k`` of child ``d = dataset_index[t]``, where ``k`` is (for every
blend tokenport builds: Tijdeman, greedy, Megatron's, schedules, adaptive) the count of ``d`` before
``t``, read modulo the child's length when the blend takes more than it holds. The lookups
(``blend_inverse_arrays``, built once) are the blend positions sorted by child (a numba counting sort:
``order``, and ``bounds`` where each child's run starts; 4 bytes a sample, 8 past 2**31, no memory
beyond them to build) and whether each child's samples are that running count (``counting``), so the
``j``-th sample of child ``d`` in the blend is ``positions(d)[j]``; child sample ``s`` is then read at
``j = s, s + L, s + 2L, ...``: a query reads O(its places). A blend whose indices come from the index
cache keeps its lookups as a cache entry of their own (memory-mapped; ``BlendedDataset.lookups``).
Each place found is checked against the blend's indices (its child and its running count), so a
damaged lookup is refused, never answered.
Where a child's recorded sample index is not that count (indices from elsewhere), its samples are
matched by value instead (O(that child's samples) a query), still without a scan of the other children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._jit import announce_compilation
from ..errors import ConfigError, CorruptStoreError
from ..samples.base import SampleDataset
from ..samples.inverse import counting_sort
from ..samples.lineage import Occurrences

SamplesOf = Callable[[np.ndarray], np.ndarray]
"""The child sample (before the modulo) each of some blend positions reads."""

_CHUNK = 1 << 22  # positions compared at a time while building (bounded extra memory)


def blend_inverse_arrays(
    dataset_index: np.ndarray, num_children: int, samples_of: SamplesOf, *, counting: bool = False
) -> dict[str, np.ndarray]:
    """The lookups ``BlendInverse`` reads: ``order`` (blend positions by child), ``bounds`` (each child's run in
    it) and ``counting`` (1 where a child's samples are its running count; ``counting``: the caller knows they are)."""
    announce_compilation([counting_sort.__module__])
    index = np.asarray(dataset_index)
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= num_children):
        raise CorruptStoreError(
            f"dataset_index names a dataset outside the blend's {num_children}: the blend's indices are damaged; "
            "delete their cache entry and rebuild them"
        )
    dtype = np.int32 if len(index) < np.iinfo(np.int32).max else np.int64
    bounds = np.zeros(num_children + 1, dtype=dtype)
    order = np.empty(len(index), dtype=dtype)
    counting_sort(index, bounds, order)
    flags = np.ones(num_children, dtype=np.int8)
    if not counting:
        for d in range(num_children):
            for lo in range(int(bounds[d]), int(bounds[d + 1]), _CHUNK):
                hi = min(lo + _CHUNK, int(bounds[d + 1]))
                expected = np.arange(lo - int(bounds[d]), hi - int(bounds[d]), dtype=np.int64)
                if not np.array_equal(np.asarray(samples_of(order[lo:hi]), dtype=np.int64), expected):
                    flags[d] = 0
                    break
    return {"order": order, "bounds": bounds, "counting": flags}


class BlendInverse:
    """A blend's lookups (``blend_inverse_arrays``; see the module doc) and its indices, to check what they find."""

    def __init__(
        self,
        dataset_index: np.ndarray,
        num_children: int,
        samples_of: SamplesOf,
        *,
        counting: bool = False,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        built = arrays if arrays is not None else blend_inverse_arrays(
            dataset_index, num_children, samples_of, counting=counting
        )  # fmt: skip
        self.dataset_index, self.samples_of = dataset_index, samples_of
        self.order, self.bounds = built["order"], built["bounds"]
        self.counting = [bool(flag) for flag in np.asarray(built["counting"]).tolist()]
        if (
            any(np.asarray(array).dtype.kind != "i" for array in built.values())
            or len(self.order) != len(dataset_index)
            or len(self.bounds) != num_children + 1
            or len(self.counting) != num_children
            or (np.diff(np.asarray(self.bounds, dtype=np.int64)) < 0).any()
            or int(self.bounds[0]) != 0
            or int(self.bounds[-1]) != len(dataset_index)
        ):
            _damaged()

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
            count = samples[which] + lap * length
            found = np.asarray(positions[count], dtype=np.int64)
            self._check(child, found, count)
            return which, found
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
        found = np.asarray(positions[order[first]], dtype=np.int64)
        self._check(child, found, None)
        return which, found

    def _check(self, child: int, found: np.ndarray, count: np.ndarray | None) -> None:
        """Refuse lookups whose positions do not read ``child`` (or, counting, not its ``count``-th sample)."""
        if not len(found):
            return
        if int(found.min()) < 0 or int(found.max()) >= len(self.dataset_index):
            _damaged()
        if (np.asarray(self.dataset_index[found]) != child).any():
            _damaged()
        if count is not None and (np.asarray(self.samples_of(found), dtype=np.int64) != count).any():
            _damaged()


def _damaged() -> None:
    raise CorruptStoreError(
        "the blend's occurrences lookup does not match its indices (damaged, or of other indices); delete its "
        "cache entry and it is rebuilt"
    )


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

"""PackedBins: the base of datasets whose samples are bins of document pieces (PackedDataset, SFTDataset).

Such a dataset holds its pieces (``piece_document``, ``piece_offset``, ``piece_length``), the bins'
first pieces (``bin_starts``) and the sample order (``order``: a bin per sample). The base gives
what follows from that alone: the length, a sample as a row of ``get_batch``, lineage, and the
parts of a receipt node every such kind records (its order digest and ids); the helpers pack
documents into bins the same way for both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._checks import check_sample_id
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..packing import pack_best_fit_arrays
from .base import SampleDataset, digest, id_runs
from .inverse import BinsInverse
from .lineage import Occurrences, SampleLineage, bin_lineage

__all__ = ["PackedBins", "check_ids", "pack_windows", "ranges"]


class PackedBins(SampleDataset):
    """Samples that are bins of document pieces of one store (see the module doc)."""

    fresh_items = True
    _caches = ("_inverse",)
    store: IndexedDataset
    ids: np.ndarray | None  # the selected sequence ids, kept for the receipt (None: all)
    piece_document: np.ndarray
    piece_offset: np.ndarray
    piece_length: np.ndarray
    bin_starts: np.ndarray
    order: np.ndarray
    _inverse: BinsInverse | None = None  # built on the first occurrences() call, for this order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
        """Sample ``idx`` as a dict of arrays, each equal to a row of ``get_batch([idx])``."""
        index = check_sample_id(idx, len(self))
        return {name: array[0] for name, array in self.get_batch([index]).items()}

    def lineage(self, idx: int) -> SampleLineage:
        """Where sample ``idx`` comes from: the documents and token ranges of its pieces, in sample order."""
        return bin_lineage(self, idx, type(self).__name__)

    def _occurrences(self, store: str, document: int) -> Occurrences:
        """Every piece of ``document`` (pieces sorted by document) in every sample reading its bin (the order
        inverted); the inverse is built once per order and kept."""
        if store != str(self.store.prefix):
            return Occurrences.empty()
        if self._inverse is None or self._inverse.order is not self.order:
            self._inverse = BinsInverse(
                self.piece_document, self.piece_length, self.bin_starts, self.order, str(self.store.prefix)
            )
        return self._inverse.occurrences(document, self.piece_offset)

    def stores(self) -> tuple[IndexedDataset, ...]:
        return (self.store,)

    def order_digest(self) -> str:
        """The digest of the pieces and the order: a receipt's ``order``."""
        return digest(self.piece_document, self.piece_offset, self.piece_length, self.bin_starts, self.order)

    def id_runs(self) -> str | list[list[int]] | None:
        """The selected ids as a receipt's ``build`` records them: "all", runs, or None (too many runs)."""
        return "all" if self.ids is None else id_runs(self.ids)

    def _pieces_of(self, bins: np.ndarray) -> np.ndarray:
        """The pieces of ``bins``, bin after bin."""
        return ranges(self.bin_starts[bins], self.bin_starts[bins + 1] - self.bin_starts[bins])


def check_ids(ids: Sequence[int] | np.ndarray | None, count: int) -> np.ndarray:
    """The selected sequence ids as a 1-D int64 array (all of them when None), or a ConfigError."""
    if ids is None:
        return np.arange(count, dtype=np.int64)
    array = np.asarray(ids)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ConfigError(f"ids: expected a 1-D array of sequence ids, got shape {array.shape} dtype {array.dtype}")
    if int(array.min()) < 0 or int(array.max()) >= count:
        raise ConfigError(f"ids: hold sequence ids outside [0, {count}); pass ids of this token store")
    return array.astype(np.int64, copy=False)


def pack_windows(
    lengths: np.ndarray, capacity: int, split_long: bool, window: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(bin, item, offset, length) of all pieces, packing each window of items on its own.

    Windows count every item; items of length 0 are left out of their window (no piece).
    """
    step = max(len(lengths), 1) if window is None else window
    parts = []
    bins_so_far = 0
    for start in range(0, len(lengths), step):
        kept = start + np.flatnonzero(lengths[start : start + step] > 0)
        bin_of, item, offset, length = pack_best_fit_arrays(lengths[kept], capacity, split_long=split_long)
        parts.append((bin_of + bins_so_far, kept[item], offset, length))
        bins_so_far += int(bin_of[-1]) + 1 if bin_of.size else 0
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    bin_of, item, offset, length = (np.concatenate(column) for column in zip(*parts))
    return bin_of, item, offset, length


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges [start, start + count) as one int64 array."""
    firsts = np.cumsum(counts) - counts
    return np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def bin_starts_of(bin_of: np.ndarray) -> np.ndarray:
    """Each bin's first piece, and the piece count at the end (pieces sorted by bin)."""
    num_bins = int(bin_of[-1]) + 1 if bin_of.size else 0
    return np.searchsorted(bin_of, np.arange(num_bins + 1)).astype(np.int64)

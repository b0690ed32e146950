"""Inverse lineage of GPT and packed-bin datasets: which samples hold a document, by lookup, not by scan.

``GPTInverse`` is built once per dataset from its indices: the document index sorted by document
(argsort, O(document_index) memory), each position's token start in the concatenated stream and its
count of empty documents before it (O(document_index)), the sample rows' first positions and the
shuffle's inverse permutation (O(samples)). A document's occurrences are then its positions, the
rows overlapping each (binary search over the sample index) and those rows' dataset samples.

``BinsInverse`` does the same for bins of pieces (PackedDataset, SFTDataset): pieces sorted by
document, each piece's token offset in its bin, and the samples of each bin (the order's inverse;
a bin may be read by several samples, one per epoch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from .lineage import Occurrences


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges [start, start + count) as one int64 array."""
    firsts = np.cumsum(counts) - counts
    return np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def _sorted_by(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions of ``values`` sorted by value, stable; the values in that order)."""
    order = np.argsort(values, kind="stable")
    return order, values[order]


def _holders(order: np.ndarray, keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted`` (int64), the positions whose key equals it: (index into ``wanted``, position)."""
    lo = np.searchsorted(keys, wanted, side="left")
    hi = np.searchsorted(keys, wanted, side="right")
    counts = (hi - lo).astype(np.int64)
    return np.repeat(np.arange(len(wanted), dtype=np.int64), counts), order[_ranges(lo.astype(np.int64), counts)]


class GPTInverse:
    """A GPT dataset's indices inverted (see the module doc); refuses indices that do not fit together."""

    def __init__(
        self,
        document_index: np.ndarray,
        sample_index: np.ndarray,
        shuffle_index: np.ndarray,
        lengths: np.ndarray,
        extra: int,
        prefix: str,
    ) -> None:
        documents = np.asarray(document_index)
        if len(documents) and (int(documents.min()) < 0 or int(documents.max()) >= len(lengths)):
            _corrupt(prefix, "document_index")
        # positions, rows, samples and offsets as int32 while they fit (half the memory), else int64
        sizes_of = (len(documents) + 1, len(sample_index), len(shuffle_index), len(lengths))
        dtype = _index_dtype(sizes_of, np.asarray(sample_index))
        documents = documents.astype(dtype, copy=False)
        sizes = np.asarray(lengths)[documents].astype(np.int64)
        self.extra = extra
        order, self.documents = _sorted_by(documents)
        self.by_document = order.astype(dtype)
        self.cum = np.concatenate(([0], np.cumsum(sizes)))
        self.zeros = np.concatenate(([0], np.cumsum(sizes == 0))).astype(dtype)
        self.first = np.ascontiguousarray(sample_index[:, 0], dtype=dtype)
        self.skip = np.ascontiguousarray(sample_index[:, 1], dtype=dtype)
        if len(self.first) and (
            int(self.first[0]) < 0 or int(self.first[-1]) >= max(len(documents), 1) or (np.diff(self.first) < 0).any()
        ):
            _corrupt(prefix, "sample_index")
        ends = self.skip[1:] + extra  # where each row's window ends in its last document, as the reader checks it
        if (self.skip < 0).any() or (ends > self.cum[self.first[1:] + 1] - self.cum[self.first[1:]]).any():
            _corrupt(prefix, "sample_index")
        self.sample_of_row = _inverse_permutation(np.asarray(shuffle_index), len(self.first) - 1, prefix, dtype)

    def occurrences(self, document: int) -> Occurrences:
        """Every (sample, piece, offset, start, end) of ``document``, as ``gpt_pieces`` reports them."""
        _, positions = _holders(self.by_document, self.documents, np.array([document], dtype=self.documents.dtype))
        rows_total = len(self.first) - 1
        # rows r with first[r] <= p <= first[r + 1]: from the first row ending at or after p (first[0] is 0)
        # to past the last row starting at or before it; one search each over the row starts
        lo = np.maximum(np.searchsorted(self.first, positions, side="left") - 1, 0)
        hi = np.minimum(np.searchsorted(self.first, positions, side="right"), rows_total)
        counts = np.maximum(hi - lo, 0).astype(np.int64)
        rows = _ranges(lo.astype(np.int64), counts)
        position = np.repeat(positions, counts)
        begin_pos, end_pos = self.first[rows], self.first[rows + 1]
        size = self.cum[position + 1] - self.cum[position]
        begin = np.where(position == begin_pos, self.skip[rows], 0)
        end = np.where(position == end_pos, self.skip[rows + 1] + self.extra, size)
        first_size = self.cum[begin_pos + 1] - self.cum[begin_pos]
        # a later piece's index: its place after the row's first position, less the empty pieces before it (the
        # first one when the row starts at its document's end; empty documents between)
        empties = (first_size <= self.skip[rows]).astype(np.int64) + self.zeros[position] - self.zeros[begin_pos + 1]
        piece = np.where(position > begin_pos, position - begin_pos - empties, 0)
        offset = self.cum[position] + begin - self.cum[begin_pos] - self.skip[rows]
        sample = self.sample_of_row[rows]
        keep = (end > begin) & (sample >= 0)
        return Occurrences(sample[keep], piece[keep], offset[keep], begin[keep], end[keep])


class BinsInverse:
    """A packed-bin dataset's pieces and order inverted (see the module doc)."""

    def __init__(
        self,
        piece_document: np.ndarray,
        piece_length: np.ndarray,
        bin_starts: np.ndarray,
        order: np.ndarray,
        prefix: str,
    ) -> None:
        self.order = order  # the order this inverse is of (a dataset that changes it builds another)
        self.by_document, self.documents = _sorted_by(np.asarray(piece_document).astype(np.int64, copy=False))
        self.cum = np.concatenate(([0], np.cumsum(np.asarray(piece_length, dtype=np.int64))))
        self.bin_starts = np.asarray(bin_starts, dtype=np.int64)
        bins = np.asarray(order).astype(np.int64, copy=False)
        if len(bins) and (int(bins.min()) < 0 or int(bins.max()) >= len(self.bin_starts) - 1):
            _corrupt(prefix, "order")
        self.by_bin, self.bins = _sorted_by(bins)

    def occurrences(self, document: int, offsets: np.ndarray) -> Occurrences:
        """Every (sample, piece, offset, start, end) of ``document``; ``offsets`` are the pieces' token offsets."""
        _, pieces = _holders(self.by_document, self.documents, np.array([document], dtype=np.int64))
        bins = np.searchsorted(self.bin_starts, pieces, side="right") - 1
        first = self.bin_starts[bins]
        which, samples = _holders(self.by_bin, self.bins, bins)
        piece = pieces[which]
        start = np.asarray(offsets, dtype=np.int64)[piece]
        return Occurrences(
            samples,
            piece - first[which],
            self.cum[piece] - self.cum[first[which]],
            start,
            start + self.cum[piece + 1] - self.cum[piece],
        )


def _index_dtype(counts: Sequence[int], sample_index: np.ndarray) -> type[np.signedinteger[Any]]:
    """int32 when every count and every value of the sample index is below 2**31 - 1, else int64."""
    largest = int(sample_index.max()) if sample_index.size else 0
    return np.int32 if max(largest, *counts) < np.iinfo(np.int32).max else np.int64


def _inverse_permutation(
    shuffle_index: np.ndarray, rows: int, prefix: str, dtype: type[np.signedinteger[Any]]
) -> np.ndarray:
    """The dataset sample of each sample row (-1: none), or CorruptStoreError when a row is read twice or
    a value names no row."""
    shuffle = shuffle_index if shuffle_index.dtype.kind in "iu" else shuffle_index.astype(np.int64)
    if len(shuffle) and (int(shuffle.min()) < 0 or int(shuffle.max()) >= rows):
        _corrupt(prefix, "shuffle_index")
    inverse = np.full(max(rows, 0), -1, dtype=dtype)
    inverse[shuffle] = np.arange(len(shuffle), dtype=dtype)
    if int(np.count_nonzero(inverse >= 0)) != len(shuffle):
        raise CorruptStoreError(
            f"{prefix}: shuffle_index names a sample row twice; it is not the permutation Megatron's indices hold: "
            "delete its cache entry and rebuild the indices"
        )
    return inverse


def _corrupt(prefix: str, field: str) -> None:
    """Refuse indices that do not fit the store or each other."""
    raise CorruptStoreError(
        f"{prefix}: {field} points outside the documents or samples it indexes; the indices do not belong to "
        "this store or are damaged: delete their cache entry and rebuild them"
    )

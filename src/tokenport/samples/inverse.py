"""Inverse lineage of GPT and packed-bin datasets: which samples hold a document, by lookup, not by scan.

``GPTInverse`` answers from two lookups built once per dataset (``gpt_inverse_arrays``, numba, two
passes and no memory beyond what they return): the document index's positions sorted by document
(a counting sort: ``by_document``, and ``bounds``, where each store document's run starts) and the
shuffle's inverse permutation (``sample_of_row``). Megatron's shuffles (numpy's
legacy Fisher-Yates over the whole document index, then over the sample rows) have no closed-form
inverse, so these are O(positions + samples) and built like the indices themselves: a dataset whose
indices come from the index cache keeps them as a cache entry of their own beside its indices
(``builder.cache.IndexCache``: one file, written to a staging directory and renamed into place,
memory-mapped afterwards), so they are built once per indices and a query reads only the pages it
needs. Everything else is computed per query from the dataset's own (memory-mapped) arrays: the rows
over a position by binary search over ``sample_index[:, 0]`` (no copy of the column), a piece's token
offset and index from the lengths of the few positions its row spans. A query's memory is
O(the document's places); each place found is checked against the indices it came from, so a
damaged lookup is refused, never answered. Cost: 4 bytes (8 past 2**31) per store document, per
document-index position and per sample, built in one O(positions + samples) pass: measured at 10^8
samples of 1,024 tokens (7.9 * 10^7 documents, ~1.3 epochs) 1.56 GB and 31 s on a 2-core machine,
linear in the run (so ~16 GB and ~5 min at 10^9); queries 50-300 us a document
(benchmarks/bench_where.py).

``BinsInverse`` does the same for bins of pieces (PackedDataset, SFTDataset), in memory beside the
dataset's own piece arrays (which are in memory too): its pieces grouped by document and its samples
grouped by bin (the order's inverse; a bin may be read by several samples, one per epoch), both by the
counting sort, 4 bytes a piece and a sample; a piece's offset in its bin is summed from the lengths of
the pieces before it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from .._jit import announce_compilation
from ..errors import CorruptStoreError
from .lineage import Occurrences


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges [start, start + count) as one int64 array."""
    firsts = np.cumsum(counts) - counts
    return np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)


_CHUNK = 1 << 22  # rows or positions checked at a time while building (bounded extra memory)


def gpt_inverse_arrays(
    document_index: np.ndarray,
    sample_index: np.ndarray,
    shuffle_index: np.ndarray,
    lengths: np.ndarray,
    extra: int,
    prefix: str,
) -> dict[str, np.ndarray]:
    """The lookups ``GPTInverse`` reads (``bounds``, ``by_document``, ``sample_of_row``), built from indices
    checked to fit the store and each other (CorruptStoreError naming ``prefix`` otherwise)."""
    announce_compilation([__name__])
    positions = len(document_index)
    rows = len(sample_index) - 1
    dtype = _index_dtype((positions + 1, rows + 1, len(shuffle_index), len(lengths)))
    for lo in range(0, positions, _CHUNK):
        part = np.asarray(document_index[lo : lo + _CHUNK])
        if len(part) and (int(part.min()) < 0 or int(part.max()) >= len(lengths)):
            _corrupt(prefix, "document_index")
    first_prev = 0  # row starts never go back, within a chunk or across
    for lo in range(0, rows + 1, _CHUNK):
        part = np.asarray(sample_index[lo : lo + _CHUNK], dtype=np.int64)
        first, skip = part[:, 0], part[:, 1]
        if first[0] < first_prev or (np.diff(first) < 0).any():
            _corrupt(prefix, "sample_index")
        if int(first[-1]) >= max(positions, 1) or (skip < 0).any():
            _corrupt(prefix, "sample_index")
        ends = skip + extra  # where the row before ends in this document, as the reader checks it
        later = slice(1, None) if lo == 0 else slice(None)
        sizes = np.asarray(lengths)[np.asarray(document_index)[first[later]]] if positions else ends[later]
        if (ends[later] > sizes).any():
            _corrupt(prefix, "sample_index")
        first_prev = int(first[-1])
    bounds = np.zeros(len(lengths) + 1, dtype=dtype)
    order = np.empty(positions, dtype=dtype)
    counting_sort(np.asarray(document_index), bounds, order)
    sample_of_row = np.full(max(rows, 0), -1, dtype=dtype)
    shuffle = np.asarray(shuffle_index)
    if len(shuffle) and (int(shuffle.min()) < 0 or int(shuffle.max()) >= rows):
        _corrupt(prefix, "shuffle_index")
    if not _invert(shuffle, sample_of_row):
        raise CorruptStoreError(
            f"{prefix}: shuffle_index names a sample row twice; it is not the permutation Megatron's indices hold: "
            "delete its cache entry and rebuild the indices"
        )
    return {"bounds": bounds, "by_document": order, "sample_of_row": sample_of_row}


@numba.njit(cache=True)
def counting_sort(keys: np.ndarray, bounds: np.ndarray, order: np.ndarray) -> None:  # pragma: no cover - numba
    """``order``: the positions of ``keys`` sorted by key (stable); ``bounds[k]:bounds[k + 1]`` those of key ``k``.
    Two passes, no memory beyond the outputs (``bounds`` serves as the fill cursor, then is shifted back)."""
    for key in keys:
        bounds[key + 1] += 1
    for k in range(1, len(bounds)):
        bounds[k] += bounds[k - 1]
    for p in range(len(keys)):
        key = keys[p]
        order[bounds[key]] = p
        bounds[key] += 1
    for k in range(len(bounds) - 1, 0, -1):
        bounds[k] = bounds[k - 1]
    bounds[0] = 0


@numba.njit(cache=True)
def _invert(shuffle: np.ndarray, inverse: np.ndarray) -> bool:  # pragma: no cover - numba
    """``inverse[shuffle[s]] = s`` for every s (``inverse`` filled with -1 before); False when a value repeats."""
    for s in range(len(shuffle)):
        row = shuffle[s]
        if inverse[row] >= 0:
            return False
        inverse[row] = s
    return True


@numba.njit(cache=True)
def _row_ranges(sample_index: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """For each position p, the sample rows [lo, hi) whose window spans it (first[r] <= p <= first[r + 1], the row
    starts ``first = sample_index[:, 0]`` ascending): binary searches that read O(log rows) elements of the
    (memory-mapped) column each, never the whole column."""
    rows = len(sample_index) - 1
    lo = np.empty(len(positions), dtype=np.int64)
    hi = np.empty(len(positions), dtype=np.int64)
    for k in range(len(positions)):
        p = positions[k]
        a, b = 0, rows + 1  # the first row start >= p
        while a < b:
            m = (a + b) // 2
            if sample_index[m, 0] < p:
                a = m + 1
            else:
                b = m
        lo[k] = max(a - 1, 0)
        b = rows + 1  # the first row start > p, from there
        while a < b:
            m = (a + b) // 2
            if sample_index[m, 0] <= p:
                a = m + 1
            else:
                b = m
        hi[k] = min(a, rows)
    return lo, hi


@numba.njit(cache=True)
def _row_pieces(
    sample_index: np.ndarray,
    document_index: np.ndarray,
    lengths: np.ndarray,
    positions: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    extra: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - numba
    """(row, piece, offset, start, end) of each non-empty piece that position ``positions[k]`` is in rows
    ``[lo[k], hi[k])``, as ``gpt_pieces`` reads them: the piece's index and token offset counted over the
    positions its row spans before it (empty ones hold no piece)."""
    total = 0
    for k in range(len(positions)):
        total += max(hi[k] - lo[k], 0)
    rows = np.empty(total, dtype=np.int64)
    piece = np.empty(total, dtype=np.int64)
    offset = np.empty(total, dtype=np.int64)
    begin = np.empty(total, dtype=np.int64)
    end = np.empty(total, dtype=np.int64)
    n = 0
    for k in range(len(positions)):
        p = positions[k]
        size = np.int64(lengths[document_index[p]])
        for r in range(lo[k], hi[k]):
            first, skip = np.int64(sample_index[r, 0]), np.int64(sample_index[r, 1])
            a = skip if p == first else 0
            b = np.int64(sample_index[r + 1, 1]) + extra if p == sample_index[r + 1, 0] else size
            if b <= a:
                continue
            before, pieces = np.int64(0), np.int64(0)
            for q in range(first, p):  # the positions the row holds before this one
                held = np.int64(lengths[document_index[q]])
                before += held
                if held > (skip if q == first else 0):
                    pieces += 1
            rows[n], piece[n], offset[n], begin[n], end[n] = r, pieces, before - skip + a, a, b
            n += 1
    return rows[:n], piece[:n], offset[:n], begin[:n], end[:n]


class GPTInverse:
    """A GPT dataset's indices and their lookups (``gpt_inverse_arrays``; see the module doc)."""

    def __init__(
        self,
        document_index: np.ndarray,
        sample_index: np.ndarray,
        shuffle_index: np.ndarray,
        lengths: np.ndarray,
        extra: int,
        prefix: str,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        announce_compilation([__name__])  # the query kernels, when a cached entry is all that is read
        self.document_index, self.sample_index, self.shuffle_index = document_index, sample_index, shuffle_index
        self.lengths, self.extra, self.prefix = lengths, extra, prefix
        built = (
            arrays
            if arrays is not None
            else gpt_inverse_arrays(document_index, sample_index, shuffle_index, lengths, extra, prefix)
        )
        self.bounds, self.by_document = built["bounds"], built["by_document"]
        self.sample_of_row = built["sample_of_row"]
        if (
            any(np.asarray(array).dtype.kind != "i" for array in built.values())
            or len(self.bounds) != len(lengths) + 1
            or len(self.by_document) != len(document_index)
            or len(self.sample_of_row) != max(len(sample_index) - 1, 0)
        ):
            raise CorruptStoreError(
                f"{prefix}: the occurrences lookup of these indices has the wrong type or length; delete its "
                "cache entry and it is rebuilt"
            )

    def occurrences(self, document: int) -> Occurrences:
        """Every (sample, piece, offset, start, end) of ``document``, as ``gpt_pieces`` reports them."""
        lo, hi = int(self.bounds[document]), int(self.bounds[document + 1])
        positions = np.asarray(self.by_document[max(lo, 0) : hi], dtype=np.int64)
        # the run must be the document's positions, all of them: ascending, each holding it, and the positions
        # just outside it holding another document (a damaged value or run bound is refused, never answered)
        outside = np.asarray(self.by_document[[k for k in (lo - 1, hi) if 0 <= k < len(self.by_document)]])
        if lo < 0 or lo > hi or len(positions) != hi - lo or not self._hold(positions, outside, document):
            self._damaged()
        # rows r with first[r] <= p <= first[r + 1]: from the first row ending at or after p (first[0] is 0)
        # to past the last row starting at or before it
        lo_rows, hi_rows = _row_ranges(self.sample_index, positions)
        index, lengths = self.document_index, np.asarray(self.lengths)
        rows, piece, offset, begin, end = _row_pieces(
            self.sample_index, index, lengths, positions, lo_rows, hi_rows, self.extra
        )
        sample = np.asarray(self.sample_of_row[rows], dtype=np.int64) if len(rows) else np.zeros(0, np.int64)
        keep = sample >= 0  # a row no sample reads (Megatron's shuffle leaves none; indices from elsewhere may)
        sample = sample[keep]
        if len(sample) and (
            int(sample.max()) >= len(self.shuffle_index)
            or (np.asarray(self.shuffle_index[sample], dtype=np.int64) != rows[keep]).any()
        ):
            self._damaged()
        return Occurrences(sample, piece[keep], offset[keep], begin[keep], end[keep])

    def _hold(self, positions: np.ndarray, outside: np.ndarray, document: int) -> bool:
        """True when ``positions`` ascend and hold ``document`` and the ``outside`` ones hold another."""
        every = np.concatenate((positions, np.asarray(outside, dtype=np.int64)))
        if len(every) and (int(every.min()) < 0 or int(every.max()) >= len(self.document_index)):
            return False
        held = np.asarray(self.document_index[every])
        return bool((np.diff(positions) > 0).all() and (held[: len(positions)] == document).all()) and not bool(
            (held[len(positions) :] == document).any()
        )

    def _size(self, positions: np.ndarray) -> np.ndarray:
        """Token counts of the documents at document-index ``positions`` (int64)."""
        if not len(positions):
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.lengths)[np.asarray(self.document_index[positions])].astype(np.int64)

    def _damaged(self) -> None:
        raise CorruptStoreError(
            f"{self.prefix}: the occurrences lookup does not match the dataset's indices (damaged, or of other "
            "indices); delete its cache entry and it is rebuilt"
        )


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
        announce_compilation([__name__])
        documents, bins = np.asarray(piece_document), np.asarray(order)
        self.bin_starts, self.piece_length = np.asarray(bin_starts, dtype=np.int64), np.asarray(piece_length)
        if len(documents) and int(documents.min()) < 0:
            _corrupt(prefix, "piece_document")
        if len(bins) and (int(bins.min()) < 0 or int(bins.max()) >= len(self.bin_starts) - 1):
            _corrupt(prefix, "order")
        self.document_bounds, self.by_document = _grouped(documents, int(documents.max()) + 1 if len(documents) else 0)
        self.bin_bounds, self.by_bin = _grouped(bins, len(self.bin_starts) - 1)

    def occurrences(self, document: int, offsets: np.ndarray) -> Occurrences:
        """Every (sample, piece, offset, start, end) of ``document``; ``offsets`` are the pieces' token offsets."""
        if document >= len(self.document_bounds) - 1:
            return Occurrences.empty()
        pieces = self.by_document[int(self.document_bounds[document]) : int(self.document_bounds[document + 1])]
        pieces = pieces.astype(np.int64)
        bins = np.searchsorted(self.bin_starts, pieces, side="right") - 1
        first = self.bin_starts[bins]
        reads = (self.bin_bounds[bins + 1] - self.bin_bounds[bins]).astype(np.int64)  # samples reading each bin
        which = np.repeat(np.arange(len(pieces), dtype=np.int64), reads)
        samples = self.by_bin[_ranges(self.bin_bounds[bins].astype(np.int64), reads)].astype(np.int64)
        piece = pieces[which]
        spans = piece - first[which]  # the bin's pieces before this one: their tokens give its offset
        before = np.bincount(
            np.repeat(np.arange(len(piece)), spans),
            weights=self.piece_length[_ranges(first[which], spans)],
            minlength=len(piece),
        ).astype(np.int64)
        start = np.asarray(offsets, dtype=np.int64)[piece]
        return Occurrences(samples, spans, before, start, start + self.piece_length[piece].astype(np.int64))


def _grouped(keys: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, order): the positions of ``keys`` (each in [0, count)) grouped by key in a counting sort, key
    ``k``'s at ``order[bounds[k]:bounds[k + 1]]``, ascending."""
    dtype = _index_dtype((len(keys) + 1, count))
    bounds = np.zeros(count + 1, dtype=dtype)
    order = np.empty(len(keys), dtype=dtype)
    counting_sort(keys, bounds, order)
    return bounds, order


def _index_dtype(counts: Sequence[int]) -> type[np.signedinteger[Any]]:
    """int32 when every count is below 2**31 - 1, else int64."""
    return np.int32 if max(counts) < np.iinfo(np.int32).max else np.int64


def _corrupt(prefix: str, field: str) -> None:
    """Refuse indices that do not fit the store or each other."""
    raise CorruptStoreError(
        f"{prefix}: {field} points outside the documents or samples it indexes; the indices do not belong to "
        "this store or are damaged: delete their cache entry and rebuild them"
    )

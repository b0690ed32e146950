"""Lineage: where a sample's tokens come from (store, documents, token ranges), so a step can be traced.

``SampleLineage.pieces`` are ``(document, start, end)``: tokens ``[start, end)`` of the store's
sequence ``document``, in the order the sample holds them. A GPT sample's pieces are its window of
``seq_length`` tokens plus the extra token (the ``tokens`` and the last label); a packed or SFT
sample's pieces are its non-padding tokens. ``path`` holds, for a sample read through blends, each
blend's (child, sample of the child) from the outermost in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._checks import check_sample_id
from ..errors import ConfigError, CorruptStoreError

ReadPlan = list[tuple[Any, np.ndarray, np.ndarray, np.ndarray]]
"""The store reads some samples make, per store in read order: [(IndexedDataset, documents, token
offsets, token lengths)]; what datasets' ``read_plan`` returns, for remote stores to fetch ahead."""


@dataclass(frozen=True)
class SampleLineage:
    """Where sample ``sample`` of a dataset came from: blend ``path``, ``store`` prefix, ``kind`` of the
    dataset that assembled it, and its ``pieces`` (document id, token start, token end) in sample order."""

    sample: int
    store: str
    kind: str
    pieces: tuple[tuple[int, int, int], ...]
    path: tuple[tuple[int, int], ...] = ()

    @property
    def num_tokens(self) -> int:
        """Tokens the pieces hold together."""
        return sum(end - start for _, start, end in self.pieces)

    def through(self, sample: int, child: int) -> SampleLineage:
        """This lineage (of a blend's child's sample) seen from the blend: its ``sample`` is ``child``'s."""
        return replace(self, sample=sample, path=((child, self.sample), *self.path))

    def to_dict(self) -> dict[str, object]:
        """Plain JSON types: sample, path, store, kind and pieces (lists)."""
        return {
            "sample": self.sample,
            "path": [list(step) for step in self.path],
            "store": self.store,
            "kind": self.kind,
            "pieces": [list(piece) for piece in self.pieces],
        }


def gpt_pieces(
    document_index: np.ndarray,
    sample_index: np.ndarray,
    lengths: np.ndarray,
    row: int,
    extra: int,
    prefix: str,
) -> tuple[tuple[int, int, int], ...]:
    """The pieces of GPT sample ``row`` (a sample_index row): from document position ``sample_index[row]``
    to ``sample_index[row + 1]`` plus ``extra`` tokens, as Megatron reads it; empty pieces left out."""
    if not 0 <= row < len(sample_index) - 1:
        raise CorruptStoreError(f"{prefix}: shuffle_index names sample row {row} outside the sample index")
    first_pos, first_off = (int(v) for v in sample_index[row])
    last_pos, last_off = (int(v) for v in sample_index[row + 1])
    if not 0 <= first_pos <= last_pos < len(document_index):
        raise CorruptStoreError(f"{prefix}: sample_index row {row} points outside the document index")
    pieces = []
    for position in range(first_pos, last_pos + 1):
        document = int(document_index[position])
        begin = first_off if position == first_pos else 0
        end = last_off + extra if position == last_pos else int(lengths[document])
        if end > begin:
            pieces.append((document, begin, end))
    return tuple(pieces)


def bin_lineage(dataset: Any, idx: int, kind: str) -> SampleLineage:
    """Lineage of sample ``idx`` of a dataset of packed bins (PackedDataset, SFTDataset): each piece's
    document and token range, in sample order."""
    index = check_sample_id(idx, len(dataset))
    bin_ = int(dataset.order[index])
    documents, offsets, lengths = dataset.piece_document, dataset.piece_offset, dataset.piece_length
    pieces = tuple(
        (int(documents[p]), int(offsets[p]), int(offsets[p] + lengths[p]))
        for p in range(int(dataset.bin_starts[bin_]), int(dataset.bin_starts[bin_ + 1]))
    )
    return SampleLineage(index, str(dataset.store.prefix), kind, pieces)


_FIELDS = ("sample", "piece", "offset", "start", "end")


@dataclass(frozen=True, eq=False)
class Occurrences:
    """Every place a dataset holds one document: row ``k`` is piece ``piece[k]`` of sample ``sample[k]``,
    at token ``offset[k]`` of the sample, holding the document's tokens ``[start[k], end[k])``. Equal-length
    int64 arrays sorted by (sample, piece): the inverse of ``lineage``, piece for piece."""

    sample: np.ndarray
    piece: np.ndarray
    offset: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __post_init__(self) -> None:
        columns = [np.asarray(getattr(self, name), dtype=np.int64).reshape(-1) for name in _FIELDS]
        if len({len(column) for column in columns}) != 1:
            raise ConfigError(
                "Occurrences: sample, piece, offset, start and end have different lengths; pass one entry per place"
            )
        sample, piece = columns[0], columns[1]
        ordered = bool(np.all((sample[1:] > sample[:-1]) | ((sample[1:] == sample[:-1]) & (piece[1:] > piece[:-1]))))
        order = None if ordered else np.lexsort((piece, sample))
        for name, column in zip(_FIELDS, columns):
            kept = column.copy() if order is None else column[order]
            kept.setflags(write=False)
            object.__setattr__(self, name, kept)

    @classmethod
    def empty(cls) -> Occurrences:
        """No occurrence."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, none, none, none)

    @classmethod
    def concat(cls, parts: list[Occurrences]) -> Occurrences:
        """The occurrences of ``parts`` together, sorted."""
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(part, name) for part in parts]) for name in _FIELDS))

    def __len__(self) -> int:
        return len(self.sample)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Occurrences):
            return NotImplemented
        return all(np.array_equal(getattr(self, name), getattr(other, name)) for name in _FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def rows(self) -> list[tuple[int, int, int, int, int]]:
        """The occurrences as (sample, piece, offset, start, end) tuples, in order."""
        return list(zip(*(getattr(self, name).tolist() for name in _FIELDS)))

    def to_dict(self) -> dict[str, list[int]]:
        """Plain JSON types: one list per field."""
        return {name: getattr(self, name).tolist() for name in _FIELDS}

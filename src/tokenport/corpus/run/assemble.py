"""Assembling the final stores: unit stores streamed, in unit order, into ``part-NNNNN`` stores.

Parts are cut by input file or by token count (between documents), from the unit stores'
indices alone. Each part is written atomically, and its manifest records a fingerprint of
what it holds; a rerun skips a part whose fingerprint matches, so an interrupted assembly
resumes where it stopped and gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CorruptStoreError, StorageError
from ...indexed import IndexedDataset, IndexedDatasetWriter
from .units import Unit
from .worker import UnitRecord

_COPY_TOKENS = 16 << 20


@dataclass(frozen=True)
class Segment:
    """Documents [first, first + count) of a unit store, all from input file `file`, whose
    documents [file_first, file_first + count) they are."""

    prefix: str
    file: int
    first: int
    count: int
    file_first: int


@dataclass(frozen=True)
class Part:
    """One final store: its prefix and the segments it holds, in order."""

    prefix: str
    segments: tuple[Segment, ...]
    fingerprint: str


def plan_parts(
    units: Sequence[Unit], records: Sequence[UnitRecord], shard_by: str, shard_tokens: int
) -> list[list[Segment]]:
    """The segments of each part, in order: per ~`shard_tokens` tokens, or one part per input file,
    except that consecutive text files (one document each) share parts of up to `shard_tokens`
    tokens, so a directory of many small files does not become as many parts."""
    runs = _file_runs(units, records)
    if shard_by == "tokens":
        return _cut_by_tokens(runs, shard_tokens)
    whole = {piece.file for unit in units for piece in unit.slices if piece.format == "text"}
    groups: list[list[Segment]] = []
    for run in runs:
        last = groups[-1][-1] if groups else None
        if last is not None and (last.file == run.file or (last.file in whole and run.file in whole)):
            groups[-1].append(run)
        else:
            groups.append([run])
    return [
        part
        for group in groups
        for part in (_cut_by_tokens(group, shard_tokens) if group[0].file in whole else [group])
    ]


def name_parts(output: str, plans: list[list[Segment]], run_fingerprint: str) -> list[Part]:
    """Parts named ``part-00000``... with a fingerprint of their segments and the run's settings."""
    parts = []
    for k, segments in enumerate(plans):
        described = [[os.path.basename(s.prefix), s.first, s.count] for s in segments]
        digest = hashlib.sha256(json.dumps([run_fingerprint, described]).encode()).hexdigest()
        parts.append(Part(os.path.join(output, f"part-{k:05d}"), tuple(segments), digest))
    return parts


def _file_runs(units: Sequence[Unit], records: Sequence[UnitRecord]) -> list[Segment]:
    """Every non-empty slice of every unit as a segment, in input order."""
    runs = []
    seen: dict[int, int] = {}
    for unit, record in zip(units, records):
        first = 0
        for piece, count in zip(unit.slices, record.documents_per_slice):
            if count:
                runs.append(Segment(record.prefix, piece.file, first, count, seen.get(piece.file, 0)))
                seen[piece.file] = seen.get(piece.file, 0) + count
            first += count
    return runs


def _cut_by_tokens(runs: list[Segment], shard_tokens: int) -> list[list[Segment]]:
    """Greedy cuts between documents: a part takes documents while it stays within `shard_tokens`
    (a single longer document makes a part of its own)."""
    parts: list[list[Segment]] = [[]]
    in_part = 0
    prefix, lengths = "", np.zeros(0, dtype=np.int64)
    for run in runs:
        if run.prefix != prefix:
            with IndexedDataset(run.prefix) as ds:
                prefix, lengths = run.prefix, np.array(ds.sequence_lengths, dtype=np.int64)
        ends = np.cumsum(lengths[run.first : run.first + run.count])
        taken = 0
        while taken < run.count:
            base = int(ends[taken - 1]) if taken else 0
            fits = int(np.searchsorted(ends, base + shard_tokens - in_part, side="right")) - taken
            if fits <= 0:
                if in_part:
                    parts.append([])
                    in_part = 0
                    continue
                fits = 1
            parts[-1].append(Segment(run.prefix, run.file, run.first + taken, fits, run.file_first + taken))
            in_part += int(ends[taken + fits - 1]) - base
            taken += fits
    return [p for p in parts if p]


def finished_part(part: Part) -> bool:
    """True when `part` is already stored with the same fingerprint (an earlier run wrote it)."""
    try:
        with IndexedDataset(part.prefix) as ds:
            manifest = ds.manifest
    except (StorageError, CorruptStoreError):
        return False
    return manifest is not None and manifest.provenance.get("prepare", {}).get("fingerprint") == part.fingerprint


def write_part(
    part: Part,
    tokenizer: Any,
    inputs: Sequence[str],
    recipe: str,
    chat: dict[str, Any] | None = None,
    *,
    append_eod: bool = True,
) -> tuple[int, int]:
    """Stream `part`'s segments into its store, atomically; returns (documents, tokens).

    `recipe` digests how text became tokens (steps, tokenizer, text settings) without the input
    paths, so a store prepared the same way from a corpus that moved keeps its recipe. With `chat`
    (the stores' chat description) the part is a chat store: the loss masks are copied too. Without
    `append_eod` (--no-eod) the provenance says that no document ends with an EOD id.
    """
    provenance: dict[str, dict[str, Any]] = {
        "prepare": {
            "fingerprint": part.fingerprint,
            "recipe": recipe,
            "sources": [
                {"input": inputs[s.file], "documents": [s.file_first, s.file_first + s.count]} for s in part.segments
            ],
        }
    }
    if not append_eod:  # stores of other runs keep the manifests they always had
        provenance["prepare"]["append_eod"] = False
    with IndexedDatasetWriter(
        part.prefix, tokenizer=tokenizer, provenance=provenance, masks=chat is not None, chat=chat
    ) as out:
        for segment in part.segments:
            with IndexedDataset(segment.prefix) as ds:
                _copy(ds, segment.first, segment.first + segment.count, out)
        return out.num_documents, out.num_tokens


def _copy(ds: IndexedDataset, start: int, stop: int, out: IndexedDatasetWriter) -> None:
    """Append documents [start, stop) of `ds` (one sequence each) to `out`, ~16M tokens at a time,
    with their loss masks when `ds` is a chat store."""
    ends = np.cumsum(ds.sequence_lengths[start:stop], dtype=np.int64)
    first = start
    while first < stop:
        done = int(ends[first - start - 1]) if first > start else 0
        last = max(first + 1, start + int(np.searchsorted(ends, done + _COPY_TOKENS, side="right")))
        tokens, lengths = _whole(ds, first, last)
        masks = None if ds.masks is None else _whole(ds.masks, first, last)[0]
        out.add_documents(tokens, lengths, masks=masks)
        first = last


def _whole(ds: IndexedDataset, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences [first, last) of `ds`, whole, as (tokens, lengths): slices of its mapping joined,
    no numba kernel (whose first call in a process costs more than a small run's whole copy)."""
    ids = np.arange(first, last)
    lengths = np.asarray(ds.sequence_lengths[first:last], dtype=np.int64)
    return ds.get_pieces(ids, np.zeros(len(ids), dtype=np.int64), lengths), lengths

"""Planning work units: input files cut into slices of about `unit_bytes`, packed into units.

A big uncompressed jsonl file is cut at line ends into byte ranges (one scan counts the lines
before each cut, so document ids keep their line numbers); a parquet file is cut between row
groups; compressed jsonl is decompressed once into line-aligned chunks (``inflate``), unless it
is small; text files are read whole. Small slices are packed together until a
unit holds about `unit_bytes`. A unit's name carries a digest of what it reads, including
each file's version, so a store left by an earlier run is reused only for the same input.

Inputs of less than ``SPLIT_UNITS`` units are cut finer (``unit_size``), down to
``MIN_UNIT_BYTES``, so that a few MB keep every worker busy. The plan depends on the inputs and
`unit_bytes` alone, never on the worker count: a run gives the same units, stores and report
with one worker or many, and resumes with another count.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..inputs.inflate import inflate
from ..inputs.sources import InputFile, open_raw, parquet_module

logger = logging.getLogger(__name__)

_SCAN_CHUNK = 16 << 20
SPLIT_UNITS = 8
"""Inputs smaller than this many units of `unit_bytes` are cut into about this many units."""
MIN_UNIT_BYTES = 1 << 20
"""No finer than this: a unit much smaller costs more to hand out and assemble than it saves."""
_MAX_RATIO = 16
"""jsonl rarely inflates more than this: a compressed file smaller than a unit / this is read whole
(a corpus of many small files keeps its workers busy file by file); a larger one is decompressed
once into chunks, however much it inflates (a guess of 4x left well-compressed files as one unit)."""


@dataclass(frozen=True)
class Slice:
    """Part of one input file: bytes [start, stop) of a jsonl file, row groups [start, stop) of a
    parquet file, or the whole file (or its decompressed chunk `inflated`) when `stop` is None;
    `first` lines or rows come before it."""

    file: int
    path: str
    format: str
    compression: str | None
    start: int
    stop: int | None
    first: int
    size: int
    inflated: str | None = None  # a decompressed chunk of a compressed jsonl file, read instead (see inflate)


@dataclass(frozen=True)
class Unit:
    """Slices processed together by one worker into one store under OUTPUT/.work/."""

    index: int
    name: str
    slices: tuple[Slice, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slices)

    def describe(self) -> dict[str, Any]:
        """JSON-able description, kept in the unit store's manifest."""
        return {"name": self.name, "slices": [asdict(s) for s in self.slices]}


def plan_units(
    files: Sequence[InputFile], unit_bytes: int, inflate_dir: str | None = None, progress: bool = False
) -> list[Unit]:
    """Cut `files` into slices and pack them, in input order, into units of about `unit_bytes`;
    compressed jsonl files are decompressed once into chunks under `inflate_dir`, if given (with a
    progress bar if asked for); small inputs are cut finer (`unit_size`)."""
    size = unit_size(files, unit_bytes)
    slices = [piece for i, f in enumerate(files) for piece in _slices(i, f, size, unit_bytes, inflate_dir, progress)]
    groups: list[list[Slice]] = []
    held = 0
    for piece in slices:
        if not groups or held + piece.size > size:
            groups.append([])
            held = 0
        groups[-1].append(piece)
        held += piece.size
    return [Unit(k, _name(k, group, files), tuple(group)) for k, group in enumerate(groups)]


def unit_size(files: Sequence[InputFile], unit_bytes: int) -> int:
    """The bytes per unit to plan for `files`: `unit_bytes`, or less for inputs of fewer than
    SPLIT_UNITS units (about SPLIT_UNITS units then, but none under MIN_UNIT_BYTES)."""
    total = sum(f.size for f in files)
    return min(unit_bytes, max(MIN_UNIT_BYTES, -(-total // SPLIT_UNITS)))


def _name(index: int, group: list[Slice], files: Sequence[InputFile]) -> str:
    """The unit's name: its index and a digest of its slices and their files' versions; a decompressed
    chunk counts by its name under the inflate directory, so the name (and the fingerprints of the
    parts made of the unit) is the same wherever the output or the staging directory is."""
    identity = [[_placeless(asdict(s)), files[s.file].version] for s in group]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"unit-{index:06d}-{digest}"


def _placeless(piece: dict[str, Any]) -> dict[str, Any]:
    """A slice's fields with its decompressed chunk's path cut to ``DIGEST/NNNNNN.jsonl``."""
    if piece.get("inflated"):
        piece["inflated"] = "/".join(piece["inflated"].split(os.sep)[-2:])
    return piece


def _slices(
    index: int, f: InputFile, size: int, unit_bytes: int, inflate_dir: str | None, progress: bool
) -> list[Slice]:
    """`f` cut into slices of about `size` bytes (compressed jsonl: decompressed chunks of `unit_bytes`)."""
    whole = Slice(index, f.path, f.format, f.compression, 0, None, 0, f.size)
    if f.format == "jsonl" and f.compression is not None and inflate_dir and f.size * _MAX_RATIO > unit_bytes:
        chunks = inflate(f, unit_bytes, inflate_dir, progress)
        if chunks is not None:
            return [
                Slice(index, f.path, f.format, f.compression, 0, None, first, size, path)
                for path, first, size in chunks
            ]
    if f.format == "jsonl" and f.compression is None and f.size > size:
        if size < unit_bytes:  # cut finer: even pieces of at least `size`, not a last one of a few lines
            size = -(-f.size // (f.size // size))
        return [
            Slice(index, f.path, f.format, None, start, stop, lines, stop - start)
            for start, stop, lines in line_ranges(f.path, size)
        ]
    if f.format == "parquet":
        groups = _row_groups(f.path)
        if groups is not None:
            return _parquet_slices(index, f, groups, size)
    return [whole]


def line_ranges(path: str, unit_bytes: int) -> list[tuple[int, int, int]]:
    """(start, stop, lines before start) of line-aligned byte ranges of about `unit_bytes`."""
    ranges: list[tuple[int, int, int]] = []
    start = lines_at_start = 0
    offset = lines = 0  # bytes and newlines before the current chunk
    target = unit_bytes
    logger.info("scanning %s for line-aligned cuts", path)
    with open_raw(path) as f:
        while True:
            chunk = f.read(_SCAN_CHUNK)
            if not chunk:
                break
            while target <= offset + len(chunk):
                newline = chunk.find(b"\n", max(target - 1 - offset, 0))
                if newline < 0:
                    break
                cut = offset + newline + 1
                cut_lines = lines + chunk.count(b"\n", 0, newline + 1)
                ranges.append((start, cut, lines_at_start))
                start, lines_at_start = cut, cut_lines
                target = cut + unit_bytes
            offset += len(chunk)
            lines += chunk.count(b"\n")
    if offset > start:
        ranges.append((start, offset, lines_at_start))
    return ranges


def _row_groups(path: str) -> list[tuple[int, int]] | None:
    """(rows, uncompressed bytes) of each row group, or None if the footer is unreadable (the
    worker that reads the file then reports it as corrupt input)."""
    pq = parquet_module(path)
    with open_raw(path) as f:
        try:
            meta = pq.ParquetFile(f).metadata
        except Exception:  # pyarrow raises ArrowInvalid, OSError and others for a bad footer
            return None
        return [(meta.row_group(i).num_rows, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups)]


def _parquet_slices(index: int, f: InputFile, groups: list[tuple[int, int]], unit_bytes: int) -> list[Slice]:
    """Consecutive row groups of about `unit_bytes` (uncompressed) per slice."""
    out: list[Slice] = []
    start = size = rows_before = rows = 0
    for g, (nrows, nbytes) in enumerate(groups):
        if g > start and size + nbytes > unit_bytes:
            out.append(Slice(index, f.path, f.format, None, start, g, rows_before, size))
            start, size, rows_before = g, 0, rows
        size += nbytes
        rows += nrows
    out.append(Slice(index, f.path, f.format, None, start, len(groups), rows_before, size))
    return out

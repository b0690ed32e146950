"""Compressed jsonl, decompressed once into line-aligned chunks that many workers then read.

A gzip, bz2, xz or zstd stream cannot be entered in the middle, so read as one unit it keeps one
core busy however many workers there are. Planning decompresses it once into
``OUTPUT/.work/inflated/<file digest>/NNNNNN.jsonl``: chunks of about `unit_bytes`, cut after
the first line end at or past that size (so the cuts depend only on the content), each written
atomically, then a ``plan.json`` listing them; a rerun reuses them. A unit deletes its chunk
once it is finished.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil

from ..._schema import Count, Document, read_document
from ...errors import CorruptStoreError
from ..run.state import replace_atomically, temporary_path, write_json
from .sources import InputFile, decode_errors, open_decoded

logger = logging.getLogger(__name__)

Chunk = tuple[str, int, int]
"""(path of the chunk, lines of the file before it, its size in bytes)."""


class InflatePlan(Document, frozen=True):
    """``plan.json``: the chunks one compressed input was decompressed into."""

    input: str
    version: str
    chunks: list[tuple[str, Count, Count]]


def inflate(f: InputFile, unit_bytes: int, root: str, progress: bool = False) -> list[Chunk] | None:
    """The chunks of compressed jsonl `f` under `root` (made now, or by an earlier run, with a
    progress bar if asked for); None when the stream cannot be decompressed to its end (the file
    is then read whole, as one unit, so the reader reports where it breaks)."""
    directory = os.path.join(root, hashlib.sha256(f"{f.path}\0{f.version}".encode()).hexdigest()[:24])
    plan_path = os.path.join(directory, "plan.json")
    plan = _read_plan(plan_path, f)
    if plan is not None:
        return plan or None
    os.makedirs(directory, exist_ok=True)
    logger.info("decompressing %s once into chunks of about %d bytes for the workers", f.path, unit_bytes)
    from tqdm.auto import tqdm

    chunks: list[Chunk] = []
    bar = tqdm(unit="B", unit_scale=True, desc=f"decompress {os.path.basename(f.path)}", disable=not progress)
    try:
        with bar, open_decoded(f.path, f.compression) as stream:
            lines, pending, searched = 0, bytearray(), unit_bytes - 1
            while True:
                block = stream.read(max(unit_bytes - len(pending), 1 << 16))
                pending += block
                bar.update(len(block))
                if not pending:
                    break
                cut = pending.find(b"\n", searched) + 1 if len(pending) >= unit_bytes else 0
                if not block and not cut:
                    cut = len(pending)  # the end: whatever follows the last cut
                if not cut:
                    searched = max(len(pending), unit_bytes - 1)  # a long line: search only the new bytes next
                    continue
                chunk = bytes(pending[:cut])
                del pending[:cut]
                searched = unit_bytes - 1
                chunks.append((_write_chunk(directory, len(chunks), chunk), lines, len(chunk)))
                lines += chunk.count(b"\n")
    except decode_errors():
        shutil.rmtree(directory, ignore_errors=True)
        return None
    write_json(plan_path, {"input": f.path, "version": f.version, "chunks": chunks})
    return chunks or None


def _read_plan(path: str, f: InputFile) -> list[Chunk] | None:
    """The chunks an earlier run planned for `f` at `path` (None if it has not); CorruptStoreError
    naming the field when the plan is damaged, or names another input or a chunk elsewhere."""
    remedy = f"delete {os.path.dirname(path)} to decompress {f.path} again"
    try:
        plan = read_document(path, InflatePlan, remedy=remedy, error=CorruptStoreError)
    except FileNotFoundError:
        return None
    if (plan.input, plan.version) != (f.path, f.version):
        raise CorruptStoreError(f"{path}: input: the plan of another input or version; {remedy}")
    directory = os.path.dirname(path)
    lines_before = 0
    for k, (chunk, lines, size) in enumerate(plan.chunks):
        if chunk != os.path.join(directory, f"{k:06d}.jsonl"):
            raise CorruptStoreError(f"{path}: chunks[{k}]: {chunk!r} is not this plan's chunk {k}; {remedy}")
        if (lines < lines_before or (k == 0 and lines != 0)) or size == 0:
            raise CorruptStoreError(f"{path}: chunks[{k}]: {lines} lines before it, {size} bytes; {remedy}")
        if os.path.exists(chunk) and os.path.getsize(chunk) != size:  # chunks of finished units are deleted
            raise CorruptStoreError(f"{path}: chunks[{k}]: {size} bytes, but the chunk holds another size; {remedy}")
        if k and os.path.exists(plan.chunks[k - 1][0]) and lines != lines_before + _newlines(plan.chunks[k - 1][0]):
            raise CorruptStoreError(f"{path}: chunks[{k}]: {lines} lines before it, but not so many are; {remedy}")
        lines_before = lines
    return [tuple(chunk) for chunk in plan.chunks]  # type: ignore[misc]


def _newlines(path: str) -> int:
    """The line ends in the chunk file ``path`` (read in blocks: a chunk may be large)."""
    count = 0
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            count += block.count(b"\n")
    return count


def _write_chunk(directory: str, k: int, data: bytes) -> str:
    path = os.path.join(directory, f"{k:06d}.jsonl")
    temporary = temporary_path(path)
    with open(temporary, "wb") as out:
        out.write(data)
    replace_atomically(temporary, path)
    return path


def discard_chunk(path: str) -> None:
    """Delete the chunk of a finished unit (nothing reads it again)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

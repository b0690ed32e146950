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

from ..run.state import read_json, replace_atomically, temporary_path, write_json
from .sources import InputFile, decode_errors, open_decoded

logger = logging.getLogger(__name__)

Chunk = tuple[str, int, int]
"""(path of the chunk, lines of the file before it, its size in bytes)."""


def inflate(f: InputFile, unit_bytes: int, root: str, progress: bool = False) -> list[Chunk] | None:
    """The chunks of compressed jsonl `f` under `root` (made now, or by an earlier run, with a
    progress bar if asked for); None when the stream cannot be decompressed to its end (the file
    is then read whole, as one unit, so the reader reports where it breaks)."""
    directory = os.path.join(root, hashlib.sha256(f"{f.path}\0{f.version}".encode()).hexdigest()[:24])
    plan_path = os.path.join(directory, "plan.json")
    plan = read_json(plan_path)
    if plan is not None:
        return [tuple(chunk) for chunk in plan["chunks"]] or None
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

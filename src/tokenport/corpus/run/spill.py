"""The documents that reached a run-wide step, kept per unit so that the next pass starts there.

A run-wide (dedup) step's keys pass runs the steps before it once and writes each document reaching
it to ``.work/dedup-N/UNIT.docs``; the next pass (the next run-wide step's keys, or the write pass)
reads them back instead of reading the input and running those steps again. So each step runs once
per document. The file is length-prefixed msgpack frames, each of one slice's documents (text, id,
metadata, ordinal among the unit's input documents) with how much of that slice's input was read
when the frame closed (for progress); written to a temporary name and renamed into place. Metadata
msgpack cannot hold (an integer beyond 64 bits, a naive datetime) is kept pickled in that frame:
the file is this output's own work, written under its lock. Disk: about the surviving documents'
size per run-wide step; memory: one frame.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Iterator
from typing import IO, Any

import msgspec

from ...errors import CorruptStoreError
from ..inputs.documents import Document
from .state import replace_atomically, temporary_path

__all__ = ["SpillReader", "SpillWriter", "spill_path"]

_FRAME_DOCUMENTS = 256
_FRAME_INPUT = 1 << 19  # a frame closes once this much more input is read, so progress read back moves as often
_LENGTH = struct.Struct("<I")


class _Frame(msgspec.Struct, array_like=True, frozen=True):
    """One slice's documents: ``(text, id, metadata, ordinal)`` each; ``pickled``: metadata as pickles."""

    slice: int
    read: int
    documents: list[tuple[str, str, Any, int]]
    pickled: bool = False


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Frame)


def spill_path(work_dir: str, position: int, unit_name: str) -> str:
    """Where the documents reaching the run-wide step at ``position`` in ``unit_name`` are kept."""
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.docs")


class SpillWriter:
    """Writes a unit's spill under a temporary name; ``publish`` renames it into place."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path, self.temporary = path, temporary_path(path)
        self.file: IO[bytes] = open(self.temporary, "wb")
        self.batch: list[tuple[str, str, Any, int]] = []
        self.slice = self.read = self.count = self.opened = 0  # opened: `read` when the frame began

    def add(self, slice_index: int, read: int, document: Document, ordinal: int) -> None:
        """Keep ``document`` (the ``ordinal``-th of the unit's input, in slice ``slice_index``)."""
        if slice_index != self.slice:
            self.flush()
            self.slice, self.opened = slice_index, 0
        self.batch.append((document.text, document.id, document.metadata, ordinal))
        self.read, self.count = read, self.count + 1
        if len(self.batch) >= _FRAME_DOCUMENTS or read - self.opened >= _FRAME_INPUT:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        try:
            data = _ENCODER.encode(_Frame(self.slice, self.read, self.batch))
        except (TypeError, OverflowError, ValueError, msgspec.EncodeError):
            pickled = [(text, id_, pickle.dumps(meta), ordinal) for text, id_, meta, ordinal in self.batch]
            data = _ENCODER.encode(_Frame(self.slice, self.read, pickled, pickled=True))
        self.file.write(_LENGTH.pack(len(data)) + data)
        self.batch, self.opened = [], self.read

    def publish(self) -> None:
        """Write what is left, then rename the file into place."""
        self.flush()
        self.file.close()
        replace_atomically(self.temporary, self.path)

    def discard(self) -> None:
        """Close and delete the temporary (a pass that failed or was cancelled)."""
        self.file.close()
        if os.path.exists(self.temporary):
            os.unlink(self.temporary)


class SpillReader:
    """Reads a unit's spill back slice by slice: ``documents(i)`` yields slice i's in order."""

    def __init__(self, path: str, expected: int) -> None:
        self.path, self.expected = path, expected
        self.remedy = f"delete {os.path.dirname(path)} to make it again"
        try:
            self.file: IO[bytes] = open(path, "rb")
        except OSError as exc:
            raise CorruptStoreError(f"{path}: cannot be read ({exc.strerror}); {self.remedy}") from None
        self.frame: _Frame | None = None
        self.read = self.count = self.ordinal = 0

    def _next(self) -> _Frame | None:
        head = self.file.read(_LENGTH.size)
        if not head:
            return None
        data = self.file.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
        try:
            return _DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise CorruptStoreError(f"{self.path}: a damaged frame ({exc}); {self.remedy}") from None

    def documents(self, slice_index: int) -> Iterator[Document]:
        """The kept documents of slice ``slice_index`` (slices are asked for in order); ``read`` goes
        from 0 to the slice's input read by its last frame, in steps of a document."""
        self.read = 0
        while True:
            if self.frame is None:
                self.frame = self._next()
                if self.frame is None:
                    self._check_end()
                    return
            frame = self.frame
            if frame.slice != slice_index:
                if frame.slice < slice_index:
                    raise CorruptStoreError(f"{self.path}: frames out of slice order; {self.remedy}")
                return
            self.frame = None
            start, count = self.read, len(frame.documents)
            for k, (text, id_, metadata, ordinal) in enumerate(frame.documents):
                self.count += 1
                self.ordinal = ordinal
                self.read = start + (frame.read - start) * k // count  # the input before this document, about
                yield Document(text, id_, pickle.loads(metadata) if frame.pickled else metadata)
            self.read = frame.read

    def finish(self) -> None:
        """Check that every document was read (none left, none missing), then close."""
        if self.frame is not None or self._next() is not None:
            raise CorruptStoreError(f"{self.path}: holds documents of slices this unit lacks; {self.remedy}")
        self._check_end()
        self.close()

    def _check_end(self) -> None:
        if self.count != self.expected:
            raise CorruptStoreError(
                f"{self.path}: holds {self.count} documents, its pass recorded {self.expected}; {self.remedy}"
            )

    def close(self) -> None:
        self.file.close()

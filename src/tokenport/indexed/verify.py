"""Checking a store end to end: structure of the index, size of the .bin, and manifest checksums."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..storage import ByteSource
from .checksums import BlockHasher, new_hasher
from .manifest import Checksums
from .reader import IndexedDataset

_READ_BYTES = 16 << 20


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` checked on a store that passed."""

    prefix: str
    sequences: int
    documents: int
    tokens: int
    dtype: str
    checksums: str  # "verified (ALGORITHM)", or why they were not checked
    masks: str = ""  # a chat store's loss masks: "verified (ALGORITHM)" or "checked (...)"; "" for a plain store

    def render(self) -> str:
        """One line: the store's counts and what happened to its checksums (and masks)."""
        masks = f"; masks {self.masks}" if self.masks else ""
        return (
            f"ok   {self.prefix}: {self.sequences:,} sequences, {self.documents:,} documents, "
            f"{self.tokens:,} tokens ({self.dtype}); checksums {self.checksums}{masks}"
        )

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data, with ``ok: true``."""
        return {"ok": True, **asdict(self)}


@dataclass(frozen=True)
class VerifyFailure:
    """A store that failed `verify`: its prefix and the first fault found."""

    prefix: str
    error: str

    def render(self) -> str:
        """One line naming the store and its fault."""
        return f"FAIL {self.prefix}: {self.error}"

    def to_json(self) -> dict[str, Any]:
        """The failure as JSON-able data, with ``ok: false``."""
        return {"ok": False, **asdict(self)}


def check_store(prefix: str | os.PathLike, *, checksums: bool = True) -> VerifyReport | VerifyFailure:
    """`verify` that returns a corrupt store's fault as a VerifyFailure instead of raising it."""
    try:
        return verify(prefix, checksums=checksums)
    except CorruptStoreError as exc:
        return VerifyFailure(os.fspath(prefix), str(exc))


def verify(prefix: str | os.PathLike, *, checksums: bool = True) -> VerifyReport:
    """Check every structural invariant and, when a manifest exists, its checksums.

    A chat store's loss masks are checked too: the same lengths and documents as the tokens,
    their checksums, and every value 0 or 1. Raises CorruptStoreError naming the first fault;
    returns a report when all is well.
    """
    ds = IndexedDataset(prefix)
    try:
        tokens = _check_structure(ds)
        checked = _check_manifest(ds, tokens, checksums)
        masks = _check_masks(ds, checksums)
    finally:
        ds.close()
    return VerifyReport(ds.prefix, len(ds), ds.num_documents, tokens, ds.dtype.name, checked, masks)


def _check_structure(ds: IndexedDataset) -> int:
    """The store's token count, once its index passed bounds.check_index (done on first use)."""
    ds.document_indices  # noqa: B018 -- loading the index checks every pointer, length and document
    return ds.bin_size // ds.dtype.itemsize


def _check_manifest(ds: IndexedDataset, tokens: int, checksums: bool) -> str:
    manifest = ds.manifest
    if manifest is None:
        return "not checked (no manifest)"
    where = f"{ds.prefix}.json"
    facts = {
        "dtype": (manifest.dtype, ds.dtype.name),
        "sequences": (manifest.sequences, len(ds)),
        "documents": (manifest.documents, ds.num_documents),
        "tokens": (manifest.tokens, tokens),
    }
    for name, (claimed, actual) in facts.items():
        if claimed != actual:
            raise CorruptStoreError(f"{where}: manifest says {name}={claimed} but the store has {actual}")
    if not checksums:
        return "not checked (skipped)"
    _check_sums(ds, manifest.checksums, where)
    return f"verified ({manifest.checksums.algorithm})"


def _check_masks(ds: IndexedDataset, checksums: bool) -> str:
    """A chat store's masks: their structure matches the tokens' (ds.masks checks it), then their sums and values."""
    masks = ds.masks
    if masks is None:
        return ""
    sums = ds.manifest.masks  # type: ignore[union-attr]  # masks exist only when the manifest lists them
    assert sums is not None
    if masks.bin_size != ds.num_tokens:
        raise CorruptStoreError(f"{masks.prefix}.bin: holds {masks.bin_size} masks for {ds.num_tokens} tokens")
    if not checksums:
        return "checked (same lengths; checksums skipped)"
    _check_sums(masks, sums, f"{ds.prefix}.json", values=1)
    return f"verified ({sums.algorithm})"


def _check_sums(ds: IndexedDataset, sums: Checksums, where: str, values: int | None = None) -> None:
    """The .idx digest and every .bin block digest of `ds` against `sums`; with `values`, every byte is <= it."""
    _check_idx(ds, sums, where)
    blocks = -(-ds.bin_size // sums.bin_block_size) if ds.bin_size else 0
    if blocks != len(sums.bin_blocks):
        raise CorruptStoreError(
            f"{where}: lists {len(sums.bin_blocks)} .bin block checksums but the .bin has {blocks} blocks"
        )
    for block, expected in enumerate(sums.bin_blocks):
        start = block * sums.bin_block_size
        length = min(sums.bin_block_size, ds.bin_size - start)
        digest = _digest(ds._bin, start, length, sums.algorithm, where, values)
        if digest != expected:
            raise CorruptStoreError(
                f"{ds.prefix}.bin: block {block} (bytes {start}..{start + sums.bin_block_size}) fails its checksum"
            )


def _check_idx(ds: IndexedDataset, sums: Checksums, where: str) -> None:
    """The .idx digest of ``ds`` against ``sums``."""
    digest = _digest(ds._idx, 0, ds._idx.size, sums.algorithm, where)
    if digest != sums.idx:
        raise CorruptStoreError(f"{ds.prefix}.idx: checksum {digest} does not match the manifest's {sums.idx}")


def _digest(source: ByteSource, start: int, length: int, algorithm: str, where: str, values: int | None = None) -> str:
    hasher = new_hasher(algorithm, where)
    for offset in range(start, start + length, _READ_BYTES):
        data = source.read(offset, min(_READ_BYTES, start + length - offset))
        if values is not None and len(data) and int(np.frombuffer(data, dtype=np.uint8).max()) > values:
            raise CorruptStoreError(
                f"{source.url}: holds a byte above {values} near offset {offset}; "
                "a loss mask is 0 or 1: rebuild the store"
            )
        hasher.update(data)
    return hasher.hexdigest()


class StreamCheck:
    """A store's .bin checked against its manifest's block checksums as a caller streams it (merge does).

    ``feed(start, data)`` takes the bytes from ``start`` on, in order; bytes a caller skips are
    read here, so every byte is hashed exactly once. Each chunk is hashed on a worker thread while
    the caller writes it (hashlib releases the GIL), and the next ``feed`` waits for it; ``finish()``
    hashes what is left and compares the last digests, so a caller that publishes only after
    ``finish`` never publishes a failed byte. A block that fails is a CorruptStoreError naming the
    file and block (raised by the next ``feed`` or ``finish``); ``values`` also refuses any byte
    above it (loss masks: 1). ``close()`` waits for the worker without raising (on a caller's error).
    """

    def __init__(self, ds: IndexedDataset, sums: Checksums, where: str, values: int | None = None) -> None:
        self._ds = ds
        self._sums = sums
        self._where = where
        self._values = values
        self._hasher = BlockHasher(sums.algorithm, sums.bin_block_size)
        new_hasher(sums.algorithm, where)  # an unknown or missing algorithm is refused before any work
        self._offset = 0
        self._checked = 0  # blocks compared so far
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None  # the chunk being hashed
        blocks = -(-ds.bin_size // sums.bin_block_size) if ds.bin_size else 0
        if blocks != len(sums.bin_blocks):
            raise CorruptStoreError(
                f"{where}: lists {len(sums.bin_blocks)} .bin block checksums but the .bin has {blocks} blocks"
            )

    def feed(self, start: int, data: np.ndarray) -> None:
        """Hash ``data``, the .bin's bytes from ``start`` on (after any bytes before it not fed yet), on the
        worker; raises what the chunk before it found."""
        self._wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tokenport-verify")
        self._pending = self._pool.submit(self._feed_now, start, data)

    def finish(self) -> None:
        """Hash the bytes not fed yet and compare every remaining block; CorruptStoreError on a mismatch."""
        try:
            self._wait()
            self._skip_to(self._ds.bin_size)
            self._hasher.finish()
            self._compare()
        finally:
            self.close()

    def close(self) -> None:
        """Wait for the chunk being hashed (its error dropped: the caller is failing already) and stop the worker."""
        pending, self._pending = self._pending, None
        if pending is not None:
            wait([pending])
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _feed_now(self, start: int, data: np.ndarray) -> None:
        if start > self._offset:
            self._skip_to(start)
        view = np.ascontiguousarray(data).view(np.uint8).data.cast("B")
        if start < self._offset:  # already hashed (a caller never re-reads, but stay exact)
            view = view[min(len(view), self._offset - start) :]
        if self._values is not None and len(view) and int(np.frombuffer(view, dtype=np.uint8).max()) > self._values:
            raise CorruptStoreError(
                f"{self._ds.prefix}.bin: holds a byte above {self._values} near offset {self._offset}; "
                "a loss mask is 0 or 1: rebuild the store"
            )
        self._hasher.update(view)
        self._offset += len(view)
        self._compare()

    def _skip_to(self, stop: int) -> None:
        while self._offset < stop:
            length = min(_READ_BYTES, stop - self._offset)
            self._feed_now(self._offset, np.frombuffer(self._ds._bin.read(self._offset, length), dtype=np.uint8))

    def _compare(self) -> None:
        digests = self._hasher.digests
        while self._checked < len(digests):
            block = self._checked
            if block >= len(self._sums.bin_blocks) or digests[block] != self._sums.bin_blocks[block]:
                start = block * self._sums.bin_block_size
                raise CorruptStoreError(
                    f"{self._ds.prefix}.bin: block {block} (bytes {start}..{start + self._sums.bin_block_size}) "
                    "fails its checksum"
                )
            self._checked += 1


def stream_checks(ds: IndexedDataset) -> tuple[StreamCheck | None, StreamCheck | None]:
    """(tokens, masks) stream checks of ``ds`` after checking its .idx digests and manifest counts now;
    (None, None) for a store without a manifest (nothing to check it against)."""
    manifest = ds.manifest
    if manifest is None:
        return None, None
    where = f"{ds.prefix}.json"
    _check_manifest(ds, _check_structure(ds), checksums=False)
    _check_idx(ds, manifest.checksums, where)
    tokens = StreamCheck(ds, manifest.checksums, where)
    masks = ds.masks
    if masks is None or manifest.masks is None:
        return tokens, None
    if masks.bin_size != ds.num_tokens:
        raise CorruptStoreError(f"{masks.prefix}.bin: holds {masks.bin_size} masks for {ds.num_tokens} tokens")
    _check_idx(masks, manifest.masks, where)
    return tokens, StreamCheck(masks, manifest.masks, where, values=1)

"""Checking a store end to end: structure of the index, size of the .bin, and manifest checksums."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..storage import ByteSource
from .checksums import new_hasher
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
    digest = _digest(ds._idx, 0, ds._idx.size, sums.algorithm, where)
    if digest != sums.idx:
        raise CorruptStoreError(f"{ds.prefix}.idx: checksum {digest} does not match the manifest's {sums.idx}")
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

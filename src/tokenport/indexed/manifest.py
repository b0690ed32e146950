"""The PREFIX.json sidecar: what a store holds, how it was made, and checksums to verify it.

Megatron ignores this file; tokenport writes it beside every store it creates and reads it
when present. A store without one is still fully readable.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from .._schema import INT64_MAX, Count, Document, Positive, Text, decode
from ..errors import ConfigError, CorruptStoreError

MANIFEST_FORMAT = "tokenport.store/1"


@dataclass(frozen=True)
class Checksums:
    """A digest of the .idx file and per-block digests of the .bin file."""

    algorithm: str
    idx: str
    bin_block_size: int
    bin_blocks: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    """Everything a store says about itself beside its tokens."""

    dtype: str
    sequences: int
    documents: int
    tokens: int
    checksums: Checksums
    tokenizer: dict[str, Any] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    format: str = MANIFEST_FORMAT
    masks: Checksums | None = None  # a chat store's loss-mask store (PREFIX.mask.bin/.idx)
    chat: dict[str, Any] | None = None  # how a chat store was made: template fingerprint, policy, format

    def to_json(self) -> str:
        """The manifest as the JSON text of ``PREFIX.json`` (sorted keys, one trailing newline).

        `masks` and `chat` appear only in chat stores, so a plain store's manifest is unchanged.
        """
        data = asdict(self)
        data["checksums"]["bin_blocks"] = list(self.checksums.bin_blocks)
        for name in ("masks", "chat"):
            if data[name] is None:
                del data[name]
        if self.masks is not None:
            data["masks"]["bin_blocks"] = list(self.masks.bin_blocks)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, path: str) -> Manifest:
        """The manifest in `text` (read from `path`); CorruptStoreError naming `path` and the field if not one."""
        where = f"{path}: not a valid tokenport manifest"
        doc = decode(text, _ManifestDocument, where=where, remedy=_REMEDY, error=CorruptStoreError)
        if doc.format != MANIFEST_FORMAT:
            raise CorruptStoreError(
                f"{path}: manifest format {doc.format!r} is not {MANIFEST_FORMAT!r}; upgrade tokenport to read it"
            )
        return cls(
            dtype=doc.dtype,
            sequences=doc.sequences,
            documents=doc.documents,
            tokens=doc.tokens,
            checksums=_checksums(doc.checksums),
            tokenizer=doc.tokenizer,
            provenance=doc.provenance,
            created=doc.created,
            format=doc.format,
            masks=None if doc.masks is None else _checksums(doc.masks),
            chat=doc.chat,
        )


_REMEDY = "delete it or rebuild the store"


class _ChecksumsDocument(Document, frozen=True):
    """`Checksums` as PREFIX.json holds them."""

    algorithm: Text
    idx: Text
    bin_block_size: Positive
    bin_blocks: tuple[Text, ...]


_TOKENIZER_TEXT = ("kind", "name", "spec", "fingerprint")


class _ManifestDocument(Document, frozen=True):
    """PREFIX.json as the writer writes it (`Manifest.to_json`): every manifest it ever wrote reads back."""

    dtype: Text
    sequences: Count
    documents: Count
    tokens: Count
    checksums: _ChecksumsDocument
    tokenizer: dict[str, Any] | None = None
    provenance: dict[str, Any] = msgspec.field(default_factory=dict)
    created: str = ""
    format: str = MANIFEST_FORMAT
    masks: _ChecksumsDocument | None = None
    chat: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.chat is not None and self.masks is None:
            raise ValueError("a chat store's manifest needs `masks` (the loss-mask store's checksums) - at `$.chat`")
        check_tokenizer_record(self.tokenizer or {})


def check_tokenizer_record(tokenizer: dict[str, Any]) -> None:
    """ValueError naming the field of a tokenizer record (a manifest's ``tokenizer``) whose known key is mistyped."""
    for name in _TOKENIZER_TEXT:
        if name in tokenizer and not isinstance(tokenizer[name], str):
            raise ValueError(f"expected a string - at `$.tokenizer.{name}`")
    for name, low in (("eod_id", 0), ("vocab_size", 1)):
        value = tokenizer.get(name)
        if name in tokenizer and (type(value) is not int or not low <= value <= INT64_MAX):
            raise ValueError(f"expected an integer in {low}..{INT64_MAX} - at `$.tokenizer.{name}`")


def _checksums(doc: _ChecksumsDocument) -> Checksums:
    return Checksums(doc.algorithm, doc.idx, doc.bin_block_size, tuple(doc.bin_blocks))


@dataclass(frozen=True)
class StoreFacts:
    """What a reader needs from a manifest before it opens the files: the sequence count and the EOD id.

    Kept by a caller that checked the manifest earlier (an index cache's stat record), so a store
    can be made without reading its manifest again; the header is still checked against it on open.
    """

    sequences: int
    eod_id: int | None
    tokenizer: str | None = None  # the manifest's tokenizer identity (`tokenizer_key`); None: it records none

    def __post_init__(self) -> None:
        if type(self.sequences) is not int or self.sequences < 0:
            raise ConfigError(f"StoreFacts.sequences={self.sequences!r}: expected a non-negative integer")
        if self.eod_id is not None and type(self.eod_id) is not int:
            raise ConfigError(f"StoreFacts.eod_id={self.eod_id!r}: expected an integer or None")
        if self.tokenizer is not None and not isinstance(self.tokenizer, str):
            raise ConfigError(f"StoreFacts.tokenizer={self.tokenizer!r}: expected a string or None")

    @classmethod
    def of(cls, manifest: Manifest) -> StoreFacts:
        """The facts ``manifest`` records (no EOD id when its tokenizer names none)."""
        tokenizer = manifest.tokenizer
        eod = tokenizer.get("eod_id") if isinstance(tokenizer, dict) else None
        return cls(manifest.sequences, eod if type(eod) is int else None, tokenizer_key(tokenizer))


_IDENTITY = ("fingerprint", "vocab_size", "eod_id")  # tokenizer_from_identity's keys; not the kind: the same
# tokenizer.json read by HF tokenizers or gigatoken gives the same ids


def tokenizer_key(tokenizer: dict[str, Any] | None) -> str | None:
    """The identity of a manifest's tokenizer record as one comparable string; None when it has none.

    A record with a fingerprint (what `Tokenizer.identity` writes) is its fingerprint, vocab size
    and EOD id: the same tokenizer files at another path, or run by another engine, are the same
    tokenizer. A record
    without one (a dict the writer was given) is all of it, as canonical JSON.
    """
    if not tokenizer:
        return None
    if "fingerprint" in tokenizer:
        return " ".join(f"{name}={tokenizer.get(name)}" for name in _IDENTITY)
    return json.dumps(tokenizer, sort_keys=True, separators=(",", ":"))


def manifest_path(prefix: str) -> str:
    return prefix + ".json"


MASK_SUFFIX = ".mask"


def mask_prefix(prefix: str) -> str:
    """The prefix of a chat store's loss-mask store: PREFIX.mask (PREFIX.mask.bin + PREFIX.mask.idx)."""
    return prefix + MASK_SUFFIX


def read_manifest(prefix: str) -> Manifest | None:
    """The manifest of a local store, or None when it has none."""
    path = manifest_path(prefix)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptStoreError(f"{path}: cannot read manifest ({exc.strerror})") from None
    return Manifest.from_json(text, path)

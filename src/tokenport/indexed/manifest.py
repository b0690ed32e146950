"""The PREFIX.json sidecar: what a store holds, how it was made, and checksums to verify it.

Megatron ignores this file; tokenport writes it beside every store it creates and reads it
when present. A store without one is still fully readable.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptStoreError

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
        """The manifest in `text` (read from `path`); CorruptStoreError naming `path` when it is not one."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("checksums"), dict):
                raise ValueError("expected a JSON object with a 'checksums' object")
            checks = dict(data.pop("checksums"))
            if not isinstance(checks.get("bin_blocks"), list):
                raise ValueError("checksums.bin_blocks must be a list")
            checks["bin_blocks"] = tuple(checks["bin_blocks"])
            masks = data.pop("masks", None)
            if masks is not None:
                if not isinstance(masks, dict) or not isinstance(masks.get("bin_blocks"), list):
                    raise ValueError("masks must be an object with a bin_blocks list")
                masks = Checksums(**{**masks, "bin_blocks": tuple(masks["bin_blocks"])})
            manifest = cls(checksums=Checksums(**checks), masks=masks, **data)
            _check_types(manifest)
        except (ValueError, KeyError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            raise CorruptStoreError(
                f"{path}: not a valid tokenport manifest ({exc}); delete it or rebuild the store"
            ) from None
        if manifest.format != MANIFEST_FORMAT:
            raise CorruptStoreError(
                f"{path}: manifest format {manifest.format!r} is not {MANIFEST_FORMAT!r}; upgrade tokenport to read it"
            )
        return manifest


@dataclass(frozen=True)
class StoreFacts:
    """What a reader needs from a manifest before it opens the files: the sequence count and the EOD id.

    Kept by a caller that checked the manifest earlier (an index cache's stat record), so a store
    can be made without reading its manifest again; the header is still checked against it on open.
    """

    sequences: int
    eod_id: int | None

    def __post_init__(self) -> None:
        if type(self.sequences) is not int or self.sequences < 0:
            raise ValueError(f"StoreFacts.sequences={self.sequences!r}: expected a non-negative integer")
        if self.eod_id is not None and type(self.eod_id) is not int:
            raise ValueError(f"StoreFacts.eod_id={self.eod_id!r}: expected an integer or None")

    @classmethod
    def of(cls, manifest: Manifest) -> StoreFacts:
        """The facts ``manifest`` records (no EOD id when its tokenizer names none)."""
        tokenizer = manifest.tokenizer
        eod = tokenizer.get("eod_id") if isinstance(tokenizer, dict) else None
        return cls(manifest.sequences, eod if type(eod) is int else None)


_COUNTS = ("sequences", "documents", "tokens")


def _check_types(manifest: Manifest) -> None:
    """Every field has the type (and sign) the readers and verify rely on; ValueError names the first that does not."""
    for name in ("dtype", "created", "format"):
        if not isinstance(getattr(manifest, name), str):
            raise ValueError(f"{name} must be a string")
    for name in _COUNTS:
        value = getattr(manifest, name)
        if type(value) is not int or value < 0:
            raise ValueError(f"{name}={value!r} must be a non-negative integer")
    if manifest.tokenizer is not None and not isinstance(manifest.tokenizer, dict):
        raise ValueError("tokenizer must be an object or null")
    if not isinstance(manifest.provenance, dict):
        raise ValueError("provenance must be an object")
    if manifest.chat is not None and not isinstance(manifest.chat, dict):
        raise ValueError("chat must be an object or absent")
    if manifest.chat is not None and manifest.masks is None:
        raise ValueError("a chat store's manifest needs `masks` (the loss-mask store's checksums)")
    _check_checksums("checksums", manifest.checksums)
    if manifest.masks is not None:
        _check_checksums("masks", manifest.masks)


def _check_checksums(name: str, sums: Checksums) -> None:
    if not isinstance(sums.algorithm, str) or not isinstance(sums.idx, str):
        raise ValueError(f"{name}.algorithm and {name}.idx must be strings")
    if type(sums.bin_block_size) is not int or sums.bin_block_size <= 0:
        raise ValueError(f"{name}.bin_block_size={sums.bin_block_size!r} must be a positive integer")
    if not all(isinstance(block, str) for block in sums.bin_blocks):
        raise ValueError(f"{name}.bin_blocks must be strings")


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

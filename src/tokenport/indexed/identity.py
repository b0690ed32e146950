"""A store's content identity: what says two stores hold the same tokens, wherever they live.

With a manifest it is the manifest's checksums (the .idx digest, one digest over the .bin's block
checksums, the token count, and the loss masks' for a chat store); a local store without one
(written by Megatron) is identified by its files' sizes and mtimes, so copying it counts as a
change. The index cache keys its entries on it and data receipts record it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ..errors import ConfigError
from ..storage import is_remote, local_path
from .reader import IndexedDataset

__all__ = ["store_identity"]


def store_identity(store: IndexedDataset) -> dict[str, Any]:
    """What identifies a store's content: manifest checksums when it has a manifest, else file sizes and mtimes."""
    manifest = store.manifest
    if manifest is not None:
        sums = manifest.checksums
        identity: dict[str, Any] = {
            "checksum": sums.algorithm,
            "idx": sums.idx,
            "bin_block_size": sums.bin_block_size,
            "bin_blocks_sha256": _blocks_digest(sums.bin_blocks),
            "tokens": manifest.tokens,
        }
        if manifest.masks is not None:  # a chat store: its loss masks are content too
            identity["masks"] = {
                "idx": manifest.masks.idx,
                "bin_blocks_sha256": _blocks_digest(manifest.masks.bin_blocks),
            }
        return identity
    if is_remote(store.prefix):
        raise ConfigError(
            f"{store.prefix}: a remote store without a PREFIX.json manifest has no content identity "
            "for the index cache; write the store with tokenport (or add a manifest), or cache nothing"
        )
    files: dict[str, Any] = {}
    for suffix in (".idx", ".bin"):
        stat = os.stat(local_path(store.prefix) + suffix)
        files[suffix[1:]] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return files


def _blocks_digest(blocks: tuple[str, ...]) -> str:
    """One sha256 over a file's per-block checksums."""
    return hashlib.sha256("\n".join(blocks).encode("ascii")).hexdigest()

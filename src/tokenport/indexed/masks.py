"""A chat store's loss masks: one uint8 (0 or 1) per token, in a store of their own beside the tokens.

PREFIX.mask.bin/.idx has Megatron's layout with dtype uint8 and the token store's sequence lengths
and document boundaries, so any reader of stores reads it; the token store stays a plain store.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ConfigError
from . import commit
from .checksums import BlockHasher

MASK_DTYPE = np.dtype(np.uint8)
_STAGE_BYTES = 1 << 20


def as_mask(mask: Any, tokens: int, where: str) -> np.ndarray:
    """`mask` as a uint8 array of 0/1 of length `tokens`; ConfigError naming `where` otherwise."""
    array = mask if type(mask) is np.ndarray else np.asarray(mask)
    if array.ndim != 1:
        array = array.reshape(-1)
    if len(array) != tokens:
        raise ConfigError(f"{where}: the mask has {len(array)} values but the document has {tokens} tokens")
    if array.dtype == np.bool_:
        return array.view(np.uint8)
    if len(array) == 0:
        return np.zeros(0, MASK_DTYPE)
    if array.dtype.kind not in "iu":
        raise ConfigError(f"{where}: mask values must be 0/1 integers or booleans, got dtype {array.dtype}")
    if int(array.max()) > 1 or int(array.min()) < 0:
        bad = np.flatnonzero((array != 0) & (array != 1))
        raise ConfigError(
            f"{where}: mask value {array[bad[0]].item()!r} at token {int(bad[0])} is not 0 or 1; "
            "a loss mask marks each token trained (1) or not (0)"
        )
    return array.astype(MASK_DTYPE, copy=False)


class MaskColumn:
    """The temporary PREFIX.mask.bin of a writer: masks staged, written and hashed in blocks."""

    def __init__(self, prefix: str, algorithm: str, block_size: int) -> None:
        self.path = commit.temp_path(prefix + ".mask.bin")
        self._file = open(self.path, "wb", buffering=_STAGE_BYTES)
        self.hasher = BlockHasher(algorithm, block_size)
        self._stage = bytearray()

    def write(self, mask: np.ndarray) -> None:
        """Append one checked uint8 mask."""
        self._stage.extend(mask.data if mask.flags.c_contiguous else np.ascontiguousarray(mask).data)
        if len(self._stage) >= _STAGE_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write and hash the staged masks."""
        if self._stage:
            self._file.write(self._stage)
            self.hasher.update(self._stage)
            self._stage = bytearray()

    def close(self) -> None:
        """Flush and close the temporary file (it is published or discarded next)."""
        self.flush()
        self._file.close()

    def discard(self) -> None:
        """Drop the temporary file."""
        self._stage = bytearray()
        if not self._file.closed:
            self._file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

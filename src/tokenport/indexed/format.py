"""Megatron-LM's MMIDIDX version 1 index format: header, dtype codes, and the three arrays.

Layout of PREFIX.idx (little-endian): magic b"MMIDIDX\\x00\\x00", version <Q (1), dtype code <B,
sequence count <Q, document count <Q, then int32 sequence lengths, int64 byte pointers into
PREFIX.bin, int64 document indices (sequence index where each document starts, leading 0 and
trailing sequence count included). PREFIX.bin is the tokens, headerless.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, CorruptStoreError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = len(MAGIC) + 8 + 1 + 8 + 8  # 34 bytes

DTYPE_BY_CODE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_BY_DTYPE: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPE_BY_CODE.items()}

_HEADER = struct.Struct("<9sQBQQ")


def dtype_code(dtype: np.dtype | type) -> int:
    """The MMIDIDX code of a token dtype."""
    native = np.dtype(dtype).newbyteorder("=")
    try:
        return CODE_BY_DTYPE[native]
    except KeyError:
        names = ", ".join(str(d) for d in CODE_BY_DTYPE)
        raise ConfigError(f"dtype={native} cannot be stored in .bin/.idx; use one of {names}") from None


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in 65,536 values, int32 otherwise (Megatron's rule)."""
    if vocab_size <= 0:
        raise ConfigError(f"vocab_size={vocab_size} must be positive")
    if vocab_size <= 2**16:
        return np.dtype(np.uint16)
    if vocab_size <= 2**31:
        return np.dtype(np.int32)
    raise ConfigError(f"vocab_size={vocab_size} does not fit int32 token ids")


@dataclass(frozen=True)
class IndexHeader:
    """The fixed-size head of an .idx file and the array offsets it implies."""

    dtype: np.dtype
    sequence_count: int
    document_count: int

    @property
    def lengths_offset(self) -> int:
        return HEADER_SIZE

    @property
    def pointers_offset(self) -> int:
        return HEADER_SIZE + 4 * self.sequence_count

    @property
    def documents_offset(self) -> int:
        return self.pointers_offset + 8 * self.sequence_count

    @property
    def file_size(self) -> int:
        return self.documents_offset + 8 * self.document_count

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, VERSION, dtype_code(self.dtype), self.sequence_count, self.document_count)


def parse_header(data: bytes | memoryview, path: str, file_size: int) -> IndexHeader:
    """Parse and check an .idx header against the file's size; CorruptStoreError names the fault."""
    if file_size < HEADER_SIZE or len(data) < HEADER_SIZE:
        raise CorruptStoreError(
            f"{path}: {file_size} bytes is shorter than the {HEADER_SIZE}-byte .idx header; "
            "the file is truncated: rebuild or re-download it"
        )
    magic, version, code, sequences, documents = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptStoreError(f"{path}: bad magic {magic!r} (expected {MAGIC!r}); not a Megatron MMIDIDX index")
    if version != VERSION:
        raise CorruptStoreError(f"{path}: index version {version} is not supported (only {VERSION})")
    if code not in DTYPE_BY_CODE:
        raise CorruptStoreError(
            f"{path}: unknown dtype code {code} (valid: {sorted(DTYPE_BY_CODE)}); the header is corrupt"
        )
    header = IndexHeader(DTYPE_BY_CODE[code], sequences, documents)
    if header.file_size != file_size:
        raise CorruptStoreError(
            f"{path}: header promises {sequences} sequences and {documents} document indices "
            f"({header.file_size} bytes) but the file has {file_size} bytes; "
            "it is truncated or corrupt: rebuild or re-download it"
        )
    return header

"""The built-in byte-level tokenizer: UTF-8 bytes are the ids, no files, no extras."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import Tokenizer, digest, register_tokenizer, split_ids

__all__ = ["ByteTokenizer"]


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as ids 0..255 and eod 256: needs no files and no extras."""

    kind = "byte"

    def __init__(self) -> None:
        super().__init__("byte")

    def _load(self) -> tuple[Any, int, int, str]:
        return None, 257, 256, digest(b"tokenport byte tokenizer: utf-8 bytes are ids 0-255, eod 256")

    def spec(self) -> str:
        return "byte"

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        joined = "".join(texts)
        if joined.isascii():  # one character per byte: lengths come free
            lengths = [len(t) for t in texts]
            data = joined.encode("ascii")
        else:
            encoded = [t.encode("utf-8") for t in texts]
            lengths = [len(b) for b in encoded]
            data = b"".join(encoded)
        return split_ids(np.frombuffer(data, np.uint8).astype(np.int64), lengths)

    def _decode(self, ids: np.ndarray) -> str:
        return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def encode_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Every byte's offsets are those of the character it belongs to (all bytes of a character share them)."""
        ids, _, offsets = self.encode_offsets_batch([text])
        return ids, offsets

    def encode_offsets_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, lengths, chars = _utf8_chars(texts)
        return ids.astype(np.int64), lengths, np.stack([chars, chars + 1], axis=1)


def _utf8_chars(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The UTF-8 bytes of `texts` end to end (uint8), each text's byte count, and for each byte the index of
    the character it belongs to within its own text."""
    joined = "".join(texts)
    data = np.frombuffer(joined.encode("utf-8"), np.uint8)
    chars = np.fromiter((len(t) for t in texts), np.int64, count=len(texts))
    char_starts = np.cumsum(chars) - chars
    if len(data) == len(joined):  # ASCII: a byte per character
        return data, chars, np.arange(len(data), dtype=np.int64) - np.repeat(char_starts, chars)
    first_bytes = np.flatnonzero((data & 0xC0) != 0x80)  # where each character starts
    byte_starts = np.append(first_bytes, len(data))[char_starts]
    text_bytes = np.diff(np.append(byte_starts, len(data)))
    char = np.cumsum((data & 0xC0) != 0x80) - 1
    return data, text_bytes, char - np.repeat(char_starts, text_bytes)


def _from_spec(spec: str) -> ByteTokenizer:
    if spec != "byte":
        raise ConfigError(f"tokenizer spec {spec!r}: the byte tokenizer takes no options; write 'byte'")
    return ByteTokenizer()


register_tokenizer("byte", _from_spec)

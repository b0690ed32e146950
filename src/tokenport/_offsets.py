"""Character offsets of a HF byte-level BPE's tokens, computed from the ids alone, as HF tokenizers gives them.

gigatoken encodes a byte-level BPE tokenizer.json to the same ids as HF tokenizers, many times faster, but
gives no offsets; chat loss masks need them. In a byte-level BPE the tokens' bytes are the text's bytes in
order, so each token's characters follow from its byte length: its offsets are the characters holding its
first and last bytes (a character split over tokens belongs to each), then trimmed of spaces as a ByteLevel
post-processor with trim_offsets does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from .errors import TokenizerError

__all__ = ["ByteLevelOffsets"]


class ByteLevelOffsets:
    """The offsets HF tokenizers would report for a byte-level BPE tokenizer.json's ids.

    A tokenizer.json whose ids may not spell the text byte for byte (a normalizer, a prefix space, added
    tokens that strip, subword affixes) is refused with the reason."""

    def __init__(self, config: dict[str, Any], tokenizer: Any) -> None:
        self.name = tokenizer.name
        model = config.get("model") or {}
        problem = _not_byte_level(config, model)
        if problem:
            raise TokenizerError(
                f"cannot derive character offsets for the {tokenizer.kind} tokenizer {self.name!r}: its "
                f"tokenizer.json {problem}; chat loss masks need offsets, so use 'hf:{getattr(tokenizer, 'path', '')}'"
            )
        alphabet = {chr(c) for c in _byte_alphabet().values()}
        size = tokenizer.vocab_size
        self.nbytes = np.zeros(size, np.int64)
        self.lead = np.zeros(size, np.int64)  # leading and trailing spaces, trimmed from offsets
        self.trail = np.zeros(size, np.int64)
        for token, i in model["vocab"].items():
            if not 0 <= i < size or not alphabet.issuperset(token):
                raise TokenizerError(
                    f"cannot derive character offsets for {self.name!r}: vocabulary entry {token!r} (id {i}) is not "
                    "written in the byte-level alphabet"
                )
            self.nbytes[i] = len(token)
            self.lead[i] = len(token) - len(token.lstrip("\u0120"))  # 'Ġ', a space in the byte-level alphabet
            self.trail[i] = len(token) - len(token.rstrip("\u0120"))
        for added in config.get("added_tokens") or []:
            content, i = added["content"], added["id"]
            self.nbytes[i] = len(content.encode("utf-8"))
            self.lead[i] = len(content) - len(content.lstrip())
            self.trail[i] = len(content) - len(content.rstrip())
        trimming = [p for p in _post_processors(config.get("post_processor")) if p.get("type") == "ByteLevel"]
        self.trim = any(p.get("trim_offsets", True) for p in trimming)
        self.keep_first_space = any(p.get("add_prefix_space", True) for p in trimming)

    def __call__(self, texts: Sequence[str], ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The (n, 2) int64 character offsets of `ids` (flat, `lengths` tokens per text), each counted from
        its own text's start; a TokenizerError if a text's ids do not spell it byte for byte."""
        joined = "".join(texts)
        data = np.frombuffer(joined.encode("utf-8"), np.uint8)
        chars = np.fromiter((len(t) for t in texts), np.int64, count=len(texts))
        ascii = len(data) == len(joined)  # a byte per character
        if ascii:
            text_bytes = chars
        else:
            first_bytes = np.append(np.flatnonzero((data & 0xC0) != 0x80), len(data))  # where characters start
            text_bytes = np.diff(first_bytes[np.concatenate([[0], np.cumsum(chars)])])
        ids = np.ascontiguousarray(ids, np.int64)
        outside = np.flatnonzero((ids < 0) | (ids >= len(self.nbytes)))
        empty = outside if outside.size else np.flatnonzero(self.nbytes[ids] == 0)
        if empty.size:
            raise TokenizerError(
                f"{self.name!r} gave id {int(ids[empty[0]])}, which has no entry in its tokenizer.json's vocabulary "
                "or added tokens; offsets cannot be derived; use the 'hf:' tokenizer of the same file"
            )
        offsets = np.empty((len(ids), 2), np.int64)
        wrong = _offsets(
            data, text_bytes, ids, np.asarray(lengths, np.int64), self.nbytes, self.lead, self.trail,
            self.trim, self.keep_first_space, ascii, offsets,
        )  # fmt: skip
        if wrong >= 0:
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            spelled = int(self.nbytes[ids[bounds[wrong] : bounds[wrong + 1]]].sum())
            raise TokenizerError(
                f"the ids {self.name!r} gave for text {wrong} spell {spelled} bytes of its {int(text_bytes[wrong])}; "
                "its tokens are not the text's bytes, so offsets cannot be derived; use the 'hf:' tokenizer of the "
                "same file"
            )
        return offsets


@numba.njit(cache=True)
def _offsets(data, text_bytes, ids, lengths, nbytes, lead, trail, trim, keep_first_space, ascii, out):  # noqa: ANN001
    """Fill `out` with each token's (start, stop) characters, one pass over the bytes (none if `ascii`);
    returns the index of the first text whose ids do not spell its bytes, or -1."""
    byte = 0
    token = 0
    for k in range(len(lengths)):
        text_end = byte + text_bytes[k]
        chars = 0  # characters started before `byte`, within this text
        for j in range(lengths[k]):
            size = nbytes[ids[token]]
            if byte + size > text_end:
                return k
            if ascii:
                start = chars
                chars += size
            else:
                start = chars if (data[byte] & 0xC0) != 0x80 else chars - 1  # a token starting inside a character
                for b in range(byte, byte + size):
                    if (data[b] & 0xC0) != 0x80:
                        chars += 1
            stop = chars
            if trim:
                spaces = lead[ids[token]]
                if keep_first_space and spaces == 1 and (j == 0 or start == 0):
                    spaces = 0  # HF keeps the one space a prefix-space post-processor would have added
                trimmed = min(start + spaces, stop)
                tail = trail[ids[token]]
                if tail > 0 and stop >= tail:
                    stop = max(stop - tail, trimmed)
                start = trimmed
            out[token, 0] = start
            out[token, 1] = stop
            byte += size
            token += 1
        if byte != text_end:
            return k
    return -1


def _byte_alphabet() -> dict[int, int]:
    """GPT-2's byte -> code point table of byte-level BPE vocabularies (printable bytes keep theirs)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    rest = [b for b in range(256) if b not in printable]
    return {**{b: b for b in printable}, **{b: 256 + n for n, b in enumerate(rest)}}


def _post_processors(processor: Any) -> list[dict[str, Any]]:
    """A tokenizer.json post_processor as a flat list (a Sequence is unrolled)."""
    if not isinstance(processor, dict):
        return []
    if processor.get("type") == "Sequence":
        return [p for inner in processor.get("processors") or [] for p in _post_processors(inner)]
    return [processor]


def _not_byte_level(config: dict[str, Any], model: dict[str, Any]) -> str | None:
    """Why the ids of a tokenizer.json may not spell its text byte for byte, or None if they do."""
    pre = config.get("pre_tokenizer") or {}
    levels = [pre] if pre.get("type") != "Sequence" else pre.get("pretokenizers") or []
    byte_levels = [p for p in levels if isinstance(p, dict) and p.get("type") == "ByteLevel"]
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        return f"has a {model.get('type')} model, not a byte-level BPE"
    if not byte_levels:
        return "has no ByteLevel pre-tokenizer"
    if any(p.get("add_prefix_space") for p in byte_levels):
        return "adds a prefix space (ByteLevel add_prefix_space), a byte the text does not have"
    if config.get("normalizer"):
        return f"has a {config['normalizer'].get('type')} normalizer, which may change the text's bytes"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "adds subword affixes to its tokens"
    if model.get("byte_fallback"):
        return "uses byte fallback tokens"
    if any(t.get("lstrip") or t.get("rstrip") for t in config.get("added_tokens") or []):
        return "has added tokens that absorb spaces (lstrip/rstrip)"
    return None

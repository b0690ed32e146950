"""The tokenize step: documents to flat token batches, many documents per tokenizer call.

Long documents are cut into pieces of at most `max_chars_per_piece` characters, at the start
of a whitespace run (a newline if one is near the limit), tokenized separately and
concatenated: tokenizers can be superlinear on very long inputs, and this keeps the cost
linear. For GPT-2-style pre-tokenizers such a cut changes no tokens; others may differ in
the one or two tokens at a cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import TokenportError
from ..inputs.documents import Document
from .stats import Problems

MAX_BATCH_CHARS = 64 << 20
"""A batch is encoded early once it holds this many characters, to bound memory."""


@dataclass(frozen=True)
class TokenBatch:
    """Documents as one flat token array: document k is tokens[sum(lengths[:k]):][:lengths[k]];
    conversations carry their loss masks, flat like the tokens."""

    tokens: np.ndarray
    lengths: np.ndarray
    masks: np.ndarray | None = None


def split_text(text: str, limit: int) -> list[str]:
    """`text` cut into pieces of at most `limit` characters, at whitespace in the last half of each."""
    if len(text) <= limit:
        return [text]
    pieces = []
    start = 0
    while len(text) - start > limit:
        end = start + limit
        low = start + limit // 2
        cut = text.rfind("\n", low, end)
        if cut < 0:
            cut = text.rfind(" ", low, end)
        if cut < 0:
            cut = end
        else:
            while cut > low and text[cut - 1].isspace():
                cut -= 1  # keep the whole whitespace run together at the start of the next piece
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


class Tokenize:
    """Documents in, TokenBatch out: `batch_size` documents per `encode_batch` call."""

    def __init__(
        self, tokenizer: Any, problems: Problems, *, append_eod: bool, max_chars_per_piece: int, batch_size: int
    ) -> None:
        self.tokenizer = tokenizer
        self.problems = problems
        self.max_chars = max_chars_per_piece
        self.batch_size = batch_size
        self.eod = np.array([tokenizer.eod_id] if append_eod else [], dtype=np.int64)
        self.received = 0  # documents taken in so far
        self.failed: list[int] = []  # of those, the positions the tokenizer failed on (reported, not stored)

    def __call__(self, documents: Iterable[Document]) -> Iterator[TokenBatch]:
        batch: list[Document] = []
        chars = 0
        for document in documents:
            batch.append(document)
            self.received += 1
            chars += len(document.text)
            if len(batch) >= self.batch_size or chars >= MAX_BATCH_CHARS:
                yield self._encode(batch)
                batch, chars = [], 0
        if batch:
            yield self._encode(batch)

    def _encode(self, batch: list[Document]) -> TokenBatch:
        pieces: list[str] = []
        counts: list[int] = []
        for document in batch:
            parts = split_text(document.text, self.max_chars)
            pieces.extend(parts)
            counts.append(len(parts))
        try:
            encoded = self.tokenizer.encode_batch(pieces)
        except TokenportError:
            raise
        except Exception:  # one bad document (e.g. lone surrogates) fails the whole call: find it
            return self._encode_one_by_one(batch)
        arrays: list[np.ndarray] = []
        lengths = np.empty(len(batch), dtype=np.int64)
        k = 0
        for i, count in enumerate(counts):
            parts = encoded[k : k + count]
            k += count
            arrays.extend(parts)
            if len(self.eod):
                arrays.append(self.eod)
            lengths[i] = sum(len(p) for p in parts) + len(self.eod)
        return self._batch(arrays, lengths)

    def _encode_one_by_one(self, batch: list[Document]) -> TokenBatch:
        arrays: list[np.ndarray] = []
        lengths: list[int] = []
        for k, document in enumerate(batch, self.received - len(batch)):
            try:
                parts = self.tokenizer.encode_batch(split_text(document.text, self.max_chars))
            except TokenportError:
                raise
            except Exception as exc:
                self.problems.report("encode_failed", document.id, f"the tokenizer failed on this document ({exc})")
                self.failed.append(k)
                continue
            arrays.extend(parts)
            if len(self.eod):
                arrays.append(self.eod)
            lengths.append(sum(len(p) for p in parts) + len(self.eod))
        return self._batch(arrays, np.asarray(lengths, dtype=np.int64))

    def _batch(self, arrays: list[np.ndarray], lengths: np.ndarray) -> TokenBatch:
        tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        stats = self.problems.stats
        stats.documents += len(lengths)
        stats.tokens += len(tokens)
        return TokenBatch(tokens, lengths)

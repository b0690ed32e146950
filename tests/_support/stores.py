"""One store builder for the tests: documents in, a token store written by tokenport's writer out.

`build_store(prefix, documents, ...)` writes PREFIX.bin/.idx/.json (and PREFIX.mask.* for a chat
store) with `IndexedDatasetWriter` and returns the prefix. A document is a token sequence, or a
`Doc` carrying its loss mask (chat stores) or its sequence lengths (multi-sequence documents).
`random_documents(rng, ...)` draws the usual random documents: a length, then that many tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

import tokenport as tp


class Doc(NamedTuple):
    """A document with its loss `mask` (a chat store) and/or its sequence `lengths`."""

    tokens: Sequence[int] | np.ndarray
    mask: Sequence[int] | np.ndarray | None = None
    lengths: Sequence[int] | np.ndarray | None = None


def build_store(
    prefix: str | os.PathLike,
    documents: Iterable[Sequence[int] | np.ndarray | Doc] | np.ndarray,
    *,
    lengths: Sequence[int] | np.ndarray | None = None,
    dtype: Any = None,
    tokenizer: Any = None,
    **options: Any,
) -> str:
    """Write `documents` as a store at `prefix`; return the prefix as a str.

    With `lengths`, `documents` is one flat token array cut into one document per length (the
    writer's `add_documents`). `options` go to `IndexedDatasetWriter` as they are (masks, chat,
    provenance, checksum_block_size, vocab_size).
    """
    with tp.IndexedDatasetWriter(prefix, dtype=dtype, tokenizer=tokenizer, **options) as writer:
        if lengths is not None:
            writer.add_documents(documents, lengths)  # type: ignore[arg-type]
        else:
            for document in documents:
                if isinstance(document, Doc):
                    writer.add_document(document.tokens, document.lengths, mask=document.mask)
                else:
                    writer.add_document(document)
    return os.fspath(prefix)


def random_documents(
    rng: np.random.Generator,
    count: int,
    *,
    tokens: tuple[int, int],
    length: tuple[int, int],
    eod: int | None = None,
    append: int | None = None,
) -> Iterator[np.ndarray]:
    """`count` documents: each a length drawn from `length`, then that many tokens from `tokens`.

    `eod` overwrites each document's last token; `append` adds one token after the drawn ones.
    Draws are made as the documents are taken, in this order, so a test's stream of draws is kept.
    """
    for _ in range(count):
        document = rng.integers(tokens[0], tokens[1], int(rng.integers(length[0], length[1])))
        if eod is not None:
            document[-1] = eod
        if append is not None:
            document = np.append(document, append)
        yield document

"""The unit of work between pipeline steps: one document's text, a stable id, and metadata.

A pipeline step maps an iterator of documents to an iterator of documents, so filters,
deduplication and scrubbers can sit between reading and tokenizing without either side
knowing about them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Document", "DocumentStep"]


@dataclass(frozen=True, slots=True)
class Document:
    """One document: `id` is its source and position (``path:line`` or ``path:row``), stable across runs;
    `identifier` the value of its record's identifier field as read (prepare's ``id_field``; None: none),
    which prepare's provenance keeps so the document can be named by it."""

    text: str
    id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    identifier: Any = None


DocumentStep = Callable[[Iterable[Document]], Iterator[Document]]
"""A pipeline step: documents in, documents out (fewer, changed, or the same); every cleaning step is
one (``tokenport.corpus.steps.base.Step``)."""

"""The one contract of a cleaning step: subclass ``Step``, override one hook, register a name.

A filter overrides ``reject(text)`` (the reason to drop the document, or None); a scrubber
overrides ``transform(text)`` and counts what it replaced in ``self.replaced``; a step that needs
the whole document (its metadata, its position, several decisions at once) overrides
``process(document)``. The base runs documents through the hook, counts every drop by reason
(``removed:<reason>``) and every replacement by kind (``replaced:<kind>``), and hands each dropped
document to the run's rejected-documents sink when there is one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from ..inputs.documents import Document

__all__ = ["Step", "prefixed"]


class Step:
    """A cleaning step: documents in, documents out (fewer, changed, or the same), with counters."""

    sink: Callable[[Document, str], None] | None = None
    on_change: Callable[[Document, Document], None] | None = None
    """Told (before, after) of each document this step passes on as another object (provenance)."""

    def __init__(self) -> None:
        self.removed: Counter = Counter()
        self.replaced: Counter = Counter()

    def reject(self, text: str) -> str | None:
        """Why a document with this text goes (a short snake_case reason), or None to keep it."""
        return None

    def transform(self, text: str) -> str:
        """The text to keep in place of ``text`` (a scrubber counts its changes in ``self.replaced``)."""
        return text

    def process(self, document: Document) -> Document | None:
        """The document to pass on, or None once it is dropped (through ``drop``)."""
        reason = self.reject(document.text)
        if reason is not None:
            self.drop(document, reason)
            return None
        text = self.transform(document.text)
        return document if text == document.text else replace(document, text=text)

    def __call__(self, documents: Iterable[Document]) -> Iterator[Document]:
        for document in documents:
            kept = self.process(document)
            if kept is not None:
                if kept is not document and self.on_change is not None:
                    self.on_change(document, kept)
                yield kept

    def drop(self, document: Document, reason: str) -> None:
        """Count ``document`` as removed for ``reason`` and pass it to the sink, if any."""
        self.removed[reason] += 1
        if self.sink is not None:
            self.sink(document, reason)

    def counts(self) -> dict[str, int]:
        """``removed:<reason>`` and ``replaced:<kind>`` counters; steps with more to say add theirs."""
        return {**prefixed("removed", self.removed), **prefixed("replaced", self.replaced)}


def prefixed(prefix: str, counter: Counter) -> dict[str, int]:
    """``{"prefix:key": n}`` for a counter, keys sorted."""
    return {f"{prefix}:{key}": n for key, n in sorted(counter.items())}

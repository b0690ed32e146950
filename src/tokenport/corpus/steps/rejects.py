"""Rejected documents: every dropping step reports what it drops, and a run can keep them for audit.

A step that drops documents inherits ``Rejecting`` and calls ``self.drop(document, reason)``:
that counts the reason and, when the run keeps rejected documents, hands the document to the
sink the worker set (one jsonl line: id, step, reason, text, metadata).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import IO

from ..inputs.documents import Document

__all__ = ["Rejecting", "RejectedWriter", "prefixed"]


class Rejecting:
    """Mixin of dropping steps: ``removed`` counts by reason, ``sink`` (if set) receives each drop."""

    sink: Callable[[Document, str], None] | None = None
    removed: Counter

    def drop(self, document: Document, reason: str) -> None:
        self.removed[reason] += 1
        if self.sink is not None:
            self.sink(document, reason)

    def counts(self) -> dict[str, int]:
        """``removed:<reason>`` counters; steps with more to say add theirs."""
        return prefixed("removed", self.removed)


def prefixed(prefix: str, counter: Counter) -> dict[str, int]:
    """``{"prefix:key": n}`` for a counter, keys sorted."""
    return {f"{prefix}:{key}": n for key, n in sorted(counter.items())}


class RejectedWriter:
    """Writes rejected documents of one unit as jsonl lines to an open text file."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file

    def sink_for(self, label: str) -> Callable[[Document, str], None]:
        """The sink of the step labelled ``label``."""

        def write(document: Document, reason: str) -> None:
            record = {"id": document.id, "step": label, "reason": reason, "text": document.text,
                      "metadata": document.metadata}
            self.file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

        return write

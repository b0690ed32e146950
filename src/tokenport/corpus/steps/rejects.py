"""Rejected documents kept for audit: every step's ``drop`` (see ``base.Step``) hands the document
to the sink the worker set, which writes one jsonl line: id, step, reason, text, metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from ..inputs.documents import Document

__all__ = ["RejectedWriter"]


class Writable(Protocol):
    """What the writer needs of a text file: ``write``, called once per line."""

    def write(self, text: str, /) -> object: ...


class RejectedWriter:
    """Writes rejected documents of one unit as jsonl lines (one ``write`` each) to an open text file."""

    def __init__(self, file: Writable) -> None:
        self.file = file

    def sink_for(self, label: str) -> Callable[[Document, str], None]:
        """The sink of the step labelled ``label``."""

        def write(document: Document, reason: str) -> None:
            record = {
                "id": document.id,
                "step": label,
                "reason": reason,
                "text": document.text,
                "metadata": document.metadata,
            }
            self.file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

        return write

"""Cleaning steps that leave evidence: ``CallLog`` appends a line per document it is called on (from
any worker process) to a file, so a test can count the calls; ``KeepEvery`` keeps one document in N.
Workers import them by this module's name."""

from __future__ import annotations

from tokenport.corpus.inputs.documents import Document
from tokenport.corpus.steps.base import Step


class CallLog(Step):
    """Append ``TAG<TAB>ID`` to the file `log` for every document seen; drop those whose text holds `drop`."""

    def __init__(self, log: str, tag: str, drop: str = "") -> None:
        super().__init__()
        self.log, self.tag, self.marker = log, tag, drop

    def process(self, document: Document) -> Document | None:
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{self.tag}\t{document.id}\n")
        if self.marker and self.marker in document.text:
            self.drop(document, "marked")
            return None
        return document


class KeepEvery(Step):
    """Keep the first document of every `every` this step sees in a unit; drop the rest."""

    def __init__(self, every: int = 500) -> None:
        super().__init__()
        self.every, self.seen = every, 0

    def reject(self, text: str) -> str | None:
        self.seen += 1
        return None if (self.seen - 1) % self.every == 0 else "thinned"

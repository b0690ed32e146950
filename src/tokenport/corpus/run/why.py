"""``tokenport why``: what prepare did with one input document, read from ``OUTPUT/provenance.npz``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...storage import is_remote
from . import provenance

__all__ = ["WhyReport", "why"]


@dataclass(frozen=True)
class WhyReport:
    """The stories of the input documents asked about (one for ``--input``, each match for ``--text``)."""

    output: str
    asked: str
    documents: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "asked": self.asked, "documents": list(self.documents)}

    def render(self) -> str:
        return "\n".join(_line(story) for story in self.documents)


def why(output: str, *, input: str | None = None, text: str | None = None) -> WhyReport:
    """What prepare did with the input document at ``input`` ("FILE:LINE": a jsonl line from 1, a
    parquet row from 0) or with exactly ``text``: kept (part, document) or dropped (step, reason, the
    kept document it duplicates), and its changes. ConfigError for a line that holds no document."""
    if (input is None) == (text is None):
        raise ConfigError("why: give one of --input FILE:LINE or --text TEXT")
    if is_remote(output):
        raise ConfigError(f"{output}: why reads a local output directory; download it (its provenance.npz) first")
    path = os.path.join(output, provenance.PROVENANCE_FILE)
    if not os.path.exists(path):
        raise ConfigError(
            f"{path}: missing: {output} is no finished prepare output, or was prepared before provenance was "
            "recorded or as chat; prepare it again (--force) to record it"
        )
    record = provenance.read(path)
    if text is not None:
        return WhyReport(output, "text", tuple(provenance.lookup_text(record, output, text)))
    assert input is not None
    file, _, line = input.rpartition(":")
    if not file or not line.isdigit():
        raise ConfigError(f"--input {input}: expected FILE:LINE (a jsonl line from 1, a parquet row from 0)")
    return WhyReport(output, input, (provenance.lookup_input(record, output, file, int(line)),))


def _line(story: dict[str, Any]) -> str:
    """One document's story as one line of text."""
    where = f"{story['input']}:{story['line']}"
    if story["outcome"] == "kept":
        said = f"{where}: kept as {story['part']} document {story['document']}"
    else:
        said = f"{where}: dropped by {story['step']} ({story['reason']})"
        original = story.get("duplicate_of")
        if original is not None:
            said += ", a duplicate of " + (
                "a document of the index" if original.get("index") else _line({**original, "changes": []})
            )
    for change in story["changes"]:
        said += f"; changed by {change['step']} (replaced {change['replaced']})"
    return said

"""``tokenport why``: what prepare did with one input document, read from ``OUTPUT/provenance.npz``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...storage import is_remote
from . import provenance

__all__ = ["WhyReport", "documents_named", "read_provenance", "why"]


@dataclass(frozen=True)
class WhyReport:
    """The stories of the input documents asked about (one for ``--input``, each match for ``--text`` or ``--id``)."""

    output: str
    asked: str
    documents: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "asked": self.asked, "documents": list(self.documents)}

    def render(self) -> str:
        return "\n".join(_line(story) for story in self.documents)


def why(
    output: str, *, input: str | None = None, text: str | None = None, identifier: str | Sequence[str] | None = None
) -> WhyReport:
    """What prepare did with the input document at ``input`` ("FILE:LINE": a jsonl line from 1, a
    parquet row from 0), with exactly ``text``, or with each input document recorded with ``identifier``
    (one or several; see PrepareConfig.id_field): kept (part, document) or dropped (step, reason, the kept
    document it duplicates), and its changes. ConfigError for a line that holds no document, or an
    identifier no input document had."""
    if sum(asked is not None for asked in (input, text, identifier)) != 1:
        raise ConfigError("why: give one of --input FILE:LINE, --text TEXT or --id IDENTIFIER")
    record = read_provenance(output)
    if identifier is not None:
        found = documents_named(record, output, identifier)
        stories = tuple(provenance.describe(record, int(row)) for _, rows in found for row in rows)
        return WhyReport(output, "id " + ", ".join(name for name, _ in found), stories)
    if text is not None:
        return WhyReport(output, "text", tuple(provenance.lookup_text(record, output, text)))
    assert input is not None
    file, _, line = input.rpartition(":")
    if not file or not line.isdigit():
        raise ConfigError(f"--input {input}: expected FILE:LINE (a jsonl line from 1, a parquet row from 0)")
    return WhyReport(output, input, (provenance.lookup_input(record, output, file, int(line)),))


def read_provenance(output: str) -> provenance.Provenance:
    """The checked ``provenance.npz`` of a local prepare output; ConfigError if it has none."""
    if is_remote(output):
        raise ConfigError(f"{output}: why reads a local output directory; download it (its provenance.npz) first")
    path = os.path.join(output, provenance.PROVENANCE_FILE)
    if not os.path.exists(path):
        raise ConfigError(
            f"{path}: missing: {output} is no finished prepare output, or was prepared before provenance was "
            "recorded or as chat; prepare it again (--force) to record it"
        )
    return provenance.read(path)


def documents_named(
    record: provenance.Provenance, output: str, identifier: str | Sequence[str]
) -> list[tuple[str, np.ndarray]]:
    """Each distinct identifier asked, in order, with the rows of every input document recorded with it;
    ConfigError for an output that kept no identifiers, or an identifier no input document had."""
    asked = [identifier] if isinstance(identifier, str) else list(identifier) if _sequence(identifier) else None
    if not asked or not all(isinstance(name, str) and name for name in asked):
        raise ConfigError(f"identifier={identifier!r:.80}: pass a non-empty string, or a list of them")
    header = record.header
    if header.id_field is None:
        raise ConfigError(
            f"{output}: keeps no identifiers (prepared before they were kept, or with --id-field none); prepare it "
            "again with --id-field FIELD (--force) to find its documents by identifier, or use --input or --text"
        )
    names = list(dict.fromkeys(asked))
    found = record.identifiers.find(names)
    for name, rows in zip(names, found):
        if len(rows) == 0:
            refused = f", {header.ids_refused} held another type" if header.ids_refused else ""
            raise ConfigError(
                f"identifier {name!r}: no input document of {output} has it in field {header.id_field!r} "
                f"({header.identified} of its {header.documents} input documents have an identifier{refused}); "
                "check it, or look the document up by --input FILE:LINE or --text"
            )
    return list(zip(names, found))


def _sequence(value: object) -> bool:
    return isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes)))


def _line(story: dict[str, Any]) -> str:
    """One document's story as one line of text."""
    where = f"{story['input']}:{story['line']}" + (f" (id {story['identifier']})" if "identifier" in story else "")
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

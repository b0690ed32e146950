"""Where the documents with an identifier were trained: the identifier (a URL, a source id prepare kept
from a field of the input) resolves through the prepare output's ``provenance.npz`` to the part store
and document of each input document recorded with it; then ``where`` answers as for ``document=``. An
input document prepare dropped is reported as dropped (step, reason) with no places. ``where`` calls
``identifier_report`` with its own answer for one store (this module imports nothing of ``where``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..corpus.run import provenance
from ..corpus.run.why import documents_named, read_provenance
from ..samples.base import Rebuilder
from .tracing import resolve_state

__all__ = ["IdentifiedReport", "identifier_report"]


@dataclass(frozen=True)
class IdentifiedReport:
    """The input documents recorded with the identifiers asked (each kept, as which store and document,
    or dropped by prepare, by which step and why), and per store holding kept ones, where they were trained."""

    source: str
    output: str
    identifiers: tuple[str, ...]
    documents: tuple[dict[str, Any], ...]
    reports: tuple[Any, ...]  # where.WhereReport, one per store

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types: one object (``stores``: one ``where`` report per store)."""
        return {
            "source": self.source,
            "output": self.output,
            "identifiers": list(self.identifiers),
            "documents": [dict(story) for story in self.documents],
            "stores": [report.to_json() for report in self.reports],
        }

    def render(self) -> str:
        """A line per input document recorded with an identifier asked, then each store's places."""
        lines = []
        for story in self.documents:
            said = f"id {story['identifier']} ({story['input']}:{story['line']}): "
            if story["outcome"] == "kept":
                said += f"kept as {story['store']} document {story['document']}"
            else:
                said += f"dropped by prepare's {story['step']} ({story['reason']}): never trained"
            lines.append(said)
        return "\n".join([*lines, *(report.render() for report in self.reports)])


def identifier_report(
    state_or_checkpoint: Any,
    output: str | os.PathLike[str],
    identifier: str | Sequence[str],
    up_to_step: int | None,
    dataset: Any,
    rebuilder: Rebuilder,
    answer: Callable[..., Any],
) -> IdentifiedReport:
    """The report for the input documents of prepare output ``output`` recorded with ``identifier``:
    ``answer(state, store, documents, None, up_to_step, dataset, rebuilder)`` (where's own) per part store
    holding kept ones. ConfigError for an output without identifiers or an identifier no document had."""
    output = os.fspath(output)
    record = read_provenance(output)
    found = documents_named(record, output, identifier)
    stories, kept = _stories(record, output, found)
    source, state, dataset = resolve_state(state_or_checkpoint, dataset, rebuilder)  # once, for every store
    reports = tuple(
        dataclasses.replace(answer(state, prefix, documents, None, up_to_step, dataset, rebuilder), source=source)
        for prefix, documents in kept.items()
    )
    return IdentifiedReport(source, output, tuple(name for name, _ in found), stories, reports)


def _stories(
    record: provenance.Provenance, output: str, found: list[tuple[str, Any]]
) -> tuple[tuple[dict[str, Any], ...], dict[str, list[int]]]:
    """Each input document's story (its identifier and, if kept, its store's prefix under ``output``)
    and the kept documents by store, stores in part order."""
    stories: list[dict[str, Any]] = []
    kept: dict[str, list[int]] = {}
    for name, rows in found:
        for row in rows:
            story = {"identifier": name, **provenance.describe(record, int(row))}
            if story["outcome"] == "kept":
                story["store"] = os.path.join(output, story["part"])
                kept.setdefault(story["part"], []).append(int(story["document"]))
            stories.append(story)
    ordered = {os.path.join(output, part): sorted(set(kept[part])) for part in sorted(kept)}
    return tuple(stories), ordered

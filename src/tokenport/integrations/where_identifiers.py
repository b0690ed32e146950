"""Where the documents with an identifier were trained: the identifier (a URL, a source id prepare kept
from a field of the input) resolves through the prepare output's ``provenance.npz`` to the part store
and document of each input document recorded with it; then ``where`` answers as for ``document=``. An
input document prepare dropped is reported as dropped (step, reason) with no places.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..corpus.run import provenance
from ..corpus.run.why import identified, read_provenance
from ..samples.base import Rebuilder
from .tracing import resolve_state
from .where import WhereReport, _occurrences

__all__ = ["IdentifiedReport", "identifier_occurrences", "where_identifiers_file"]


@dataclass(frozen=True)
class IdentifiedReport:
    """The input documents recorded with the identifiers asked (each kept, as which store and document,
    or dropped by prepare, by which step and why), and per store holding kept ones, where they were trained."""

    source: str
    output: str
    identifiers: tuple[str, ...]
    documents: tuple[dict[str, Any], ...]
    reports: tuple[WhereReport, ...]

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


def identifier_occurrences(
    state_or_checkpoint: Any,
    *,
    output: str | os.PathLike[str],
    identifier: str | Sequence[str],
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
    dataset: Any = None,
) -> IdentifiedReport:
    """Every place each input document of prepare output ``output`` recorded with ``identifier`` (one or
    several) was trained in the run of a loader state: its part store must be one the run reads (a moved
    output: ``stores`` maps recorded prefixes to where they are now). ConfigError for an output without
    identifiers, an identifier no input document had, or a part the run did not read."""
    return _by_identifier(state_or_checkpoint, output, identifier, up_to_step, dataset, Rebuilder(stores or {}))


def where_identifiers_file(
    path: str | os.PathLike[str],
    *,
    output: str,
    identifier: Sequence[str],
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
) -> IdentifiedReport:
    """``identifier_occurrences`` of the state in ``path`` for ``tokenport where --id``: a moved store's
    message names the command's own ``--store-path OLD=NEW`` flag."""
    given = " ".join(f"--store-path {old}={new}" for old, new in (stores or {}).items())
    asked = " ".join(f"--id {name}" for name in identifier)
    command = f"tokenport where {os.fspath(path)} --store {output} {asked} {given}".rstrip()

    def store_flag(prefix: str) -> str:
        return f"say where it is now: {command} --store-path {prefix}=NEW_PREFIX (once per moved store)"

    rebuilder = Rebuilder(stores or {}, how_to_move=store_flag)
    return _by_identifier(path, output, identifier, up_to_step, None, rebuilder)


def _by_identifier(
    state_or_checkpoint: Any,
    output: str | os.PathLike[str],
    identifier: str | Sequence[str],
    up_to_step: int | None,
    dataset: Any,
    rebuilder: Rebuilder,
) -> IdentifiedReport:
    output = os.fspath(output)
    record = read_provenance(output)
    found = identified(record, output, identifier)
    stories, kept = _stories(record, output, found)
    source, state, dataset = resolve_state(state_or_checkpoint, dataset, rebuilder)  # once, for every store
    reports = tuple(
        dataclasses.replace(_occurrences(state, prefix, documents, None, up_to_step, dataset, rebuilder), source=source)
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

"""Counters of one work unit (documents, tokens, input bytes, skipped input) and the error policy.

Each unit's counts travel in its store's manifest, so a resumed run totals finished units
without reading them again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import InputDataError

logger = logging.getLogger(__name__)

SKIP_KINDS = (
    "bad_json",
    "missing_text",
    "not_text",
    "bad_encoding",
    "corrupt_input",
    "encode_failed",
    "bad_conversation",
)
"""Kinds of malformed input that on_error="skip" drops and counts."""


@dataclass
class UnitStats:
    """What one unit read and wrote."""

    documents: int = 0
    tokens: int = 0
    bytes_in: int = 0
    skipped: Counter = field(default_factory=Counter)
    steps: dict[str, Counter] = field(default_factory=dict)  # per cleaning step ("N:kind"): its counters
    step_costs: dict[str, Counter] = field(default_factory=dict)  # per step: chars in/out, time_ms
    stages: Counter = field(default_factory=Counter)  # milliseconds of work by stage: read, keys, tokenize, write

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "tokens": self.tokens,
            "bytes_in": self.bytes_in,
            "skipped": dict(sorted(self.skipped.items())),
            "steps": {label: dict(sorted(counts.items())) for label, counts in self.steps.items()},
            "step_costs": {label: dict(sorted(counts.items())) for label, counts in self.step_costs.items()},
            "stages": dict(sorted(self.stages.items())),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnitStats:
        steps = {label: Counter(counts) for label, counts in data.get("steps", {}).items()}
        costs = {label: Counter(counts) for label, counts in data.get("step_costs", {}).items()}
        stages = Counter(data.get("stages", {}))
        return cls(data["documents"], data["tokens"], data["bytes_in"], Counter(data["skipped"]), steps, costs, stages)

    @classmethod
    def total(cls, parts: Iterable[UnitStats]) -> UnitStats:
        out = cls()
        for part in parts:
            out.documents += part.documents
            out.tokens += part.tokens
            out.bytes_in += part.bytes_in
            out.skipped.update(part.skipped)
            for label, counts in part.steps.items():
                out.steps.setdefault(label, Counter()).update(counts)
            for label, counts in part.step_costs.items():
                out.step_costs.setdefault(label, Counter()).update(counts)
            out.stages.update(part.stages)
        return out


class Problems:
    """Malformed input: raise InputDataError (on_error="stop") or count it by kind ("skip")."""

    def __init__(self, on_error: str, stats: UnitStats) -> None:
        self.skip = on_error == "skip"
        self.stats = stats

    def report(self, kind: str, where: str, problem: str, count: int = 1) -> None:
        """`where` (file and line or row) has `problem`; stop, or skip `count` documents of `kind`."""
        if not self.skip:
            raise InputDataError(
                f"{where}: {problem}; fix the input, or skip such documents with on_error='skip' (--on-error skip)"
            )
        self.stats.skipped[kind] += count
        logger.debug("skipped %s (%s): %s", where, kind, problem)

"""The contract of a run-wide step: a step whose decision about a document depends on every other
document of the run (deduplication is one), run by ``prepare`` in three passes.

(1) ``sign(text)``: every unit runs the steps before it and keeps one key row per document reaching
it (a 1-D uint64 array, the same width for every document), saved per unit. Neighbouring run-wide
steps are signed in the same pass, each on every document reaching the first of them; a later one's
keys are those of the documents the ones before it kept. (2) ``decide(signatures)``:
once, over every unit's keys in unit order, a bool mask per unit of the documents to drop. (3) The
normal run: the step, given its unit's mask (``use_decisions``), drops the marked documents by their
ordinal among the documents reaching it (the steps before it are deterministic, so ordinals agree),
counted as ``removed:<reason>``. A run-wide step is a ``Step`` subclass like any other: its
constructor's keyword arguments are its options, and ``register_step`` adds one from outside.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step

__all__ = ["BandPairs", "RunWideStep", "Signatures", "adjacent"]

BandPairs = Callable[[list[str], list[int], "str | None"], list[tuple[np.ndarray, np.ndarray]]]
"""The executor's ``map_bands(key_files, bands, index_file)``: per band, the pairs of documents sharing a key."""


@dataclass(frozen=True)
class Signatures:
    """What pass 2 sees: each unit's pass-1 key file (a 2-D uint64 .npy, a row per document), in unit
    order, and the executor's way to find equal keys band by band (on Ray, one task per band)."""

    key_files: list[str]
    map_bands: BandPairs


def adjacent(positions: list[int]) -> list[list[int]]:
    """Run-wide step positions in runs of neighbours (``[2, 3, 5]`` -> ``[[2, 3], [5]]``): a run's
    steps are signed in one pass, as nothing between them changes or drops a document."""
    groups: list[list[int]] = []
    for position in positions:
        if groups and groups[-1][-1] == position - 1:
            groups[-1].append(position)
        else:
            groups.append([position])
    return groups


class RunWideStep(Step):
    """A step decided over the whole run (see the module docstring): override ``sign`` and ``decide``."""

    reason: ClassVar[str] = "duplicate"
    """The reason its drops are counted under (``removed:<reason>``)."""

    code_modules: ClassVar[tuple[str, ...]] = ()
    """Modules besides its own whose numba kernels ``sign`` runs (to say when they compile)."""

    originals: list[np.ndarray] | None = None
    """Set by ``decide`` if it knows: per unit, per key row, the row (over every unit's keys in unit
    order) of the kept document that row duplicates (negative: none in this run); for provenance."""

    def __init__(self) -> None:
        super().__init__()
        self.marked = np.zeros(0, dtype=bool)
        self.seen = 0

    def sign(self, text: str) -> np.ndarray:
        """Pass 1: the key row of one document's text (1-D uint64, the same width for every text)."""
        raise NotImplementedError(f"{type(self).__qualname__} must define sign(text)")

    def decide(self, signatures: Signatures) -> list[np.ndarray]:
        """Pass 2: per unit, a bool mask over its key rows, True for the documents to drop."""
        raise NotImplementedError(f"{type(self).__qualname__} must define decide(signatures)")

    def use_decisions(self, marked: np.ndarray) -> RunWideStep:
        """Pass 3: drop the documents ``marked`` for this unit (by ordinal); returns the step."""
        self.marked, self.seen = marked, 0
        return self

    def process(self, document: Document) -> Document | None:
        """Drop the document if its ordinal is marked (counted across the unit's slices)."""
        ordinal = self.seen
        self.seen += 1
        if ordinal >= len(self.marked):
            raise ConfigError(
                "a dedup step saw more documents than when its keys were made: the steps before it "
                "or the input changed; delete OUTPUT/.work/dedup-* and rerun"
            )
        if self.marked[ordinal]:
            self.drop(document, self.reason)
            return None
        return document

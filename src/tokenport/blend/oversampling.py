"""A warning when a blend reads a store many times over: its documents then repeat that often in training.

Repeating data helps less with each epoch (Muennighoff et al., "Scaling Data-Constrained Language
Models", 2023: about 4 epochs are nearly as good as new data, and beyond about 16 a repeat adds
almost nothing), and a store read hundreds of times is usually a weight or a size mistake.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OversamplingWarning
from ..samples.gpt import GPTDataset

OVERSAMPLING_EPOCHS = 16.0
"""Reading a store more epochs than this warns (the blend table can flag its epochs column with it too)."""


@dataclass(frozen=True)
class Oversampled:
    """One store read more than OVERSAMPLING_EPOCHS times: by whom, how many samples, how many an epoch holds."""

    prefix: str
    samples: int
    samples_per_epoch: int
    reader: str

    @property
    def epochs(self) -> float:
        """How many passes over the store's split the samples make."""
        return self.samples / self.samples_per_epoch


def oversampled(datasets: Sequence[Any], taken: Iterable[int], reader: str) -> list[Oversampled]:
    """The GPT datasets among ``datasets`` that ``taken`` samples read more than OVERSAMPLING_EPOCHS times.

    A dataset whose indices hold few whole epochs is passed over without reading its store's lengths,
    so a blend of thousands of lazily opened stores opens none of them here.
    """
    found = []
    for dataset, samples in zip(datasets, taken):
        if not isinstance(dataset, GPTDataset) or not samples or not len(dataset.indices):
            continue
        whole = len(dataset.document_index) / len(dataset.indices)  # the epochs its indices hold
        if 2 * whole <= OVERSAMPLING_EPOCHS:  # an epoch's samples are at least half its tokens / seq_length
            continue
        per_epoch = dataset.samples_per_epoch
        if int(samples) > OVERSAMPLING_EPOCHS * per_epoch:
            found.append(Oversampled(dataset.dataset.prefix, int(samples), per_epoch, reader))
    return found


def warn_oversampled(found: Iterable[Oversampled], stacklevel: int = 3) -> None:
    """One OversamplingWarning per store of ``found`` (its largest reading), naming it and what to do."""
    worst: dict[str, Oversampled] = {}
    for item in found:
        if item.prefix not in worst or item.epochs > worst[item.prefix].epochs:
            worst[item.prefix] = item
    for item in worst.values():
        warnings.warn(
            f"{item.prefix}: {item.reader} reads it {item.epochs:,.1f} times over ({item.samples:,} samples; one "
            f"epoch of its split holds {item.samples_per_epoch:,}), more than {OVERSAMPLING_EPOCHS:g} epochs, so "
            "its documents repeat that often. Lower its weight, add data to it, or, if this is meant, silence "
            "it: warnings.filterwarnings('ignore', category=tokenport.OversamplingWarning)",
            OversamplingWarning,
            stacklevel=stacklevel,
        )

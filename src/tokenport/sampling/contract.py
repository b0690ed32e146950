"""The sampler contract: what a batch sampler with state is to ``StatefulLoader`` and to ``trace``.

A `Sampler` yields one data-parallel rank's micro-batches (lists of int sample ids) from its
position, counts the samples all ranks consumed, and saves and restores that position as a dict
of JSON values. tokenport's ``PretrainingSampler``, ``RandomSampler`` and ``StreamSampler`` are
samplers; any class with these members is one too (nothing to inherit). The loader switches
``auto_advance`` off and calls ``advance()`` once per batch it hands to training.

Optional abilities, used where present: ``epoch`` (the epoch the next batch belongs to), ``seed``
(recorded in the data receipt), ``global_batch_size`` and ``global_stream(start, stop)`` (all
ranks' ids at stream positions, for adaptive blends and read-ahead).

A sampler that ``trace`` (or any loader state reader) should rebuild from its state alone is
registered with ``tokenport.integrations.register_sampler(name, factory)``; its ``state_dict()``
then holds ``"sampler": name`` and the fields of ``sampling.state.RegisteredState``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["SAMPLER_MEMBERS", "Sampler", "missing_members"]


@runtime_checkable
class Sampler(Protocol):
    """A batch sampler with state (see the module docstring)."""

    auto_advance: bool
    """Whether iterating counts each yielded batch as consumed (the loader sets it False and counts itself)."""
    consumed_samples: int
    """Samples all data-parallel ranks consumed so far: the position the next ``__iter__`` starts from."""

    def advance(self, num_samples: int | None = None) -> None:
        """Count ``num_samples`` more samples as consumed (None: one global batch, one training step)."""

    def state_dict(self) -> dict[str, Any]:
        """The resume state: JSON values (ints, strings, lists, dicts)."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``'s output; a ConfigError, changing nothing, for a state that does not fit."""

    def consumed_stream(self) -> Iterator[np.ndarray]:
        """The global sample ids consumed so far (all ranks), in consumption order, in chunks."""

    def __len__(self) -> int:
        """The micro-batches the next ``__iter__`` yields."""

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's micro-batches from ``consumed_samples`` on."""


SAMPLER_MEMBERS = (
    "advance",
    "consumed_samples",
    "state_dict",
    "load_state_dict",
    "consumed_stream",
    "__len__",
    "__iter__",
    "auto_advance",
)
"""The members every `Sampler` has (what ``StatefulLoader`` checks a sampler for)."""


def missing_members(sampler: object) -> list[str]:
    """The `Sampler` members ``sampler`` lacks (none for a sampler)."""
    return [name for name in SAMPLER_MEMBERS if not hasattr(sampler, name)]

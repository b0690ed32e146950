"""Which ready rows a ``get`` returns: sequential, per-rank slices, seeded random, prompt groups, balanced.

A sampler is called under the dock's lock with a ``SampleRequest`` and returns ``None`` (not
enough rows yet: the get waits for more puts), or ``(give, consume)``: the rows to return and
the rows to mark consumed (usually the same). Empty ``give`` means this requester has nothing
left in the partition: the get returns None. Any callable with that contract works as a sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._checks import check_int
from ..errors import ConfigError
from ..packing import karmarkar_karp_assignment

__all__ = ["Balanced", "PromptGroups", "RandomRows", "RankSlices", "SampleRequest", "Sequential"]

Selection = tuple[np.ndarray, np.ndarray] | None


@dataclass(frozen=True)
class SampleRequest:
    """What a sampler sees: the ask and the partition's state for this consumer."""

    consumer: str
    partition: str
    count: int
    rows: int  # rows in the partition
    group_size: int  # rows per prompt
    eligible: np.ndarray  # ascending ids of rows ready, not consumed, not leased by this consumer
    unconsumed: int  # rows not consumed by this consumer, leased ones included
    leased: int  # rows leased to this consumer and not yet acknowledged
    consumed: np.ndarray  # bool per row, read-only
    lengths: Callable[[str, np.ndarray], np.ndarray]  # items per row of a ragged column
    versions: np.ndarray | None = None  # oldest policy version per row (-1: unwritten), read-only
    latest_versions: np.ndarray | None = None  # newest policy version per row (a partial rollout's resume)
    current_version: int = 0  # the trainer's version: a row's staleness is current_version - versions[row]


def _tail_or_wait(request: SampleRequest) -> Selection:
    """When fewer than ``count`` rows are eligible: the short last batch, the end, or wait."""
    free = request.unconsumed - request.leased
    if len(request.eligible) == free and request.leased == 0:
        return request.eligible, request.eligible  # all that is left, ready: a short final batch (or the end)
    return None


class Sequential:
    """The lowest eligible row ids (deterministic; the default)."""

    trusted = True  # returns eligible rows only: the dock skips its check

    def __call__(self, request: SampleRequest) -> Selection:
        if len(request.eligible) >= request.count:
            chosen = request.eligible[: request.count]
            return chosen, chosen
        return _tail_or_wait(request)


class RandomRows:
    """``count`` eligible rows drawn at random from a seeded generator (the sequence of draws is reproducible)."""

    trusted = True  # returns eligible rows only: the dock skips its check

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(check_int("seed", seed, 0))

    def __call__(self, request: SampleRequest) -> Selection:
        if len(request.eligible) >= request.count:
            chosen = np.sort(self._rng.choice(request.eligible, size=request.count, replace=False))
            return chosen, chosen
        return _tail_or_wait(request)


class RankSlices:
    """Data-parallel rank ``data_parallel_rank`` of ``data_parallel_size`` gets its own contiguous slice
    of each global batch, in order.

    Global batch ``k`` is rows ``[k * count * size, (k + 1) * count * size)`` (``size`` the
    data-parallel size); the rank's slice is its ``data_parallel_rank``-th ``count`` rows. The rank
    waits until its whole next slice is ready, so every rank sees the rows in their original order
    whatever order they were written in.
    """

    trusted = True  # returns eligible rows only: the dock skips its check

    def __init__(self, data_parallel_rank: int, data_parallel_size: int) -> None:
        size = check_int("data_parallel_size", data_parallel_size, 1, what="the number of data-parallel ranks")
        self.data_parallel_size = size
        self.data_parallel_rank = check_int("data_parallel_rank", data_parallel_rank, 0, size - 1)

    def __call__(self, request: SampleRequest) -> Selection:
        count = request.count
        for start in range(self.data_parallel_rank * count, request.rows, count * self.data_parallel_size):
            rows = np.arange(start, min(start + count, request.rows))
            if not request.consumed[rows].all():
                ready = np.isin(rows, request.eligible)
                return (rows, rows) if ready.all() else None
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty


class PromptGroups:
    """Whole prompt groups only (GRPO): ``count`` must be a multiple of the rows per prompt.

    Takes the lowest-numbered groups whose rows are all eligible (or, with ``seed``, groups drawn
    at random among them).
    """

    trusted = True  # returns eligible rows only: the dock skips its check

    def __init__(self, seed: int | None = None) -> None:
        self._rng = None if seed is None else np.random.default_rng(check_int("seed", seed, 0))

    def __call__(self, request: SampleRequest) -> Selection:
        size = request.group_size
        if request.count % size:
            raise ConfigError(
                f"count={request.count} is not a multiple of n_samples_per_prompt={size}: "
                "PromptGroups returns whole prompt groups"
            )
        groups, per_group = np.unique(request.eligible // size, return_counts=True)
        complete = groups[per_group == size]
        wanted = request.count // size
        if len(complete) < wanted:
            return _tail_or_wait(request)
        if self._rng is None:
            chosen = complete[:wanted]
        else:
            chosen = np.sort(self._rng.choice(complete, size=wanted, replace=False))
        rows = (chosen[:, None] * size + np.arange(size)).reshape(-1)
        return rows, rows


class Balanced:
    """``count`` rows split into ``data_parallel_size`` equal-count parts of near-equal work (Karmarkar-Karp).

    Rows are picked by ``pick`` (Sequential by default; PromptGroups keeps groups whole), then
    partitioned by the workload ``linear * L + quadratic * L**2`` of the ragged column
    ``length_column``. The batch holds the parts rank after rank (``Batch.split(data_parallel_size)``).
    """

    def __init__(
        self,
        data_parallel_size: int,
        length_column: str,
        *,
        pick: Callable[[SampleRequest], Selection] | None = None,
        linear: float = 1.0,
        quadratic: float = 0.0,
    ) -> None:
        self.data_parallel_size = check_int(
            "data_parallel_size", data_parallel_size, 1, what="the number of data-parallel ranks"
        )
        self.length_column = length_column
        self.pick = pick or Sequential()
        self.linear, self.quadratic = float(linear), float(quadratic)

    @property
    def trusted(self) -> bool:
        """Balanced reorders its ``pick``'s rows, so it is as trustworthy as the pick."""
        return getattr(self.pick, "trusted", False)

    def __call__(self, request: SampleRequest) -> Selection:
        if request.count % self.data_parallel_size:
            raise ConfigError(
                f"count={request.count} is not a multiple of data_parallel_size={self.data_parallel_size}: "
                "each rank gets count // data_parallel_size"
            )
        selection = self.pick(request)
        if selection is None or len(selection[0]) == 0:
            return selection
        give, consume = selection
        if len(give) % self.data_parallel_size:
            return give, consume  # the partition's short last batch: no equal split exists
        lengths = request.lengths(self.length_column, give).astype(np.float64)
        group = karmarkar_karp_assignment(
            self.linear * lengths + self.quadratic * lengths**2, self.data_parallel_size, True
        )
        return give[np.argsort(group, kind="stable")], consume

"""Token-budget micro-batching and data-parallel balancing of a global batch.

``token_budget_batches`` walks the items in a given order (the input order by default, or e.g.
a ``length_grouped_order``) and cuts it into consecutive micro-batches whose cost stays within
``max_tokens``: with ``pad_to_longest`` the cost of a micro-batch is its longest length times
its count (the padded tensor), else the sum of its lengths (a packed, cu_seqlens batch). The
walk is sequential, so it runs in numba; each micro-batch is a slice of the order.

``balanced_micro_batches`` splits one global batch across data-parallel ranks with
``tokenport.packing.karmarkar_karp`` so that the ranks' workloads are near equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from .._checks import check_int
from ..errors import ConfigError
from ..packing import karmarkar_karp_assignment
from ..packing import workload as workload_of
from ..packing.bins import check_lengths

__all__ = ["balanced_micro_batches", "token_budget_batches"]


def token_budget_batches(
    lengths: Sequence[int] | np.ndarray,
    max_tokens: int,
    *,
    order: Sequence[int] | np.ndarray | None = None,
    pad_to_longest: bool = True,
    allow_oversize: bool = False,
) -> list[np.ndarray]:
    """Consecutive items of ``order`` grouped into micro-batches that each cost at most ``max_tokens``.

    Cost: max length x count with ``pad_to_longest``, else the sum of lengths. ``order`` (item
    ids into ``lengths``, default ``0..n-1``) is kept: concatenating the result gives it back.
    An item longer than ``max_tokens`` raises ConfigError naming it, unless ``allow_oversize``,
    which puts it in a micro-batch of its own. Returns int64 arrays of item ids.
    """
    values = check_lengths(lengths)
    budget = check_int("max_tokens", max_tokens)
    ids = _check_order(order, values.size)
    if ids.size == 0:
        return []
    walked = values[ids]
    if not allow_oversize:
        over = np.flatnonzero(walked > budget)
        if over.size:
            item = int(ids[over[0]])
            raise ConfigError(
                f"lengths[{item}] = {int(values[item])} is over max_tokens={budget} on its own: raise max_tokens, "
                "drop or cut the item, or pass allow_oversize=True to give it a micro-batch of its own"
            )
    cuts = _budget_cuts(walked, budget, bool(pad_to_longest))
    return np.split(ids, cuts)


def balanced_micro_batches(
    lengths: Sequence[int] | np.ndarray,
    data_parallel_size: int,
    *,
    workload: tuple[float, float] = (1.0, 0.0),
    equal_size: bool = False,
) -> list[np.ndarray]:
    """Split a global batch (item i has ``lengths[i]``) into ``data_parallel_size`` groups of near-equal workload.

    ``workload`` is (linear, quadratic): item cost linear * L + quadratic * L**2, as in
    ``tokenport.packing.workload``. Karmarkar-Karp partitioning; with ``equal_size`` every rank
    gets len(lengths) // data_parallel_size items. Returns data_parallel_size int64 arrays of ascending item ids,
    the heaviest rank first.
    """
    values = check_lengths(lengths)
    ranks = check_int("data_parallel_size", data_parallel_size, 1, what="the number of data-parallel ranks")
    linear, quadratic = _check_workload(workload)
    group = karmarkar_karp_assignment(workload_of(values, linear, quadratic), ranks, equal_size)
    by_group = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[by_group], np.arange(ranks + 1))
    return [by_group[bounds[g] : bounds[g + 1]] for g in range(ranks)]


# -- kernel -----------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _budget_cuts(walked: np.ndarray, budget: int, pad_to_longest: bool) -> np.ndarray:
    """Positions in ``walked`` (lengths in walk order) where a new micro-batch starts, the first excluded."""
    n = walked.shape[0]
    cuts = np.empty(n, dtype=np.int64)
    found = 0
    count = 0
    longest = 0
    total = 0
    for i in range(n):
        length = walked[i]
        if count > 0:
            grown = max(longest, length) * (count + 1) if pad_to_longest else total + length
            if grown > budget:
                cuts[found] = i
                found += 1
                count = 0
                longest = 0
                total = 0
        count += 1
        longest = max(longest, length)
        total += length
        if count == 1 and length > budget and i + 1 < n:  # an oversize item stands alone
            cuts[found] = i + 1
            found += 1
            count = 0
            longest = 0
            total = 0
    return cuts[:found]


# -- checks -----------------------------------------------------------------------------------------


def _check_order(order: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    """The walk order as a 1-D int64 array of ids in [0, n), or a ConfigError naming the bad position."""
    if order is None:
        return np.arange(n, dtype=np.int64)
    array = np.asarray(order)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ConfigError(f"order: expected a 1-D sequence of item ids, got shape {array.shape} dtype {array.dtype}")
    array = array.astype(np.int64, copy=False)
    bad = np.flatnonzero((array < 0) | (array >= n))
    if bad.size:
        position = int(bad[0])
        raise ConfigError(f"order[{position}] = {int(array[position])} is not an item id: ids lie in [0, {n})")
    return array


def _check_workload(workload: tuple[float, float]) -> tuple[float, float]:
    """The (linear, quadratic) workload coefficients as floats >= 0, or a ConfigError."""
    try:
        linear, quadratic = (float(c) for c in workload)
    except (TypeError, ValueError):
        raise ConfigError(f"workload={workload!r}: expected (linear, quadratic) coefficients") from None
    if not (np.isfinite(linear) and np.isfinite(quadratic)) or linear < 0 or quadratic < 0:
        raise ConfigError(f"workload={workload!r}: coefficients must be finite and >= 0")
    return linear, quadratic

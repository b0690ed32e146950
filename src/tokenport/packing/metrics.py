"""How good a packing or a balancing is: padding and efficiency of bins, spread of group workloads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from .bins import Bins, PackArrays, _check_capacity


def _bin_tokens(bins_or_arrays: Bins | PackArrays) -> np.ndarray:
    """The tokens in each bin, from the list form or the arrays form of a packing."""
    if (
        isinstance(bins_or_arrays, tuple)
        and len(bins_or_arrays) == 4
        and all(isinstance(a, np.ndarray) for a in bins_or_arrays)
    ):
        bin_of, _, _, length = bins_or_arrays
        if bin_of.size == 0:
            return np.zeros(0, dtype=np.int64)
        return np.bincount(bin_of, weights=length, minlength=int(bin_of.max()) + 1).astype(np.int64)
    return np.array([sum(piece[2] for piece in b) for b in bins_or_arrays], dtype=np.int64)


def packing_metrics(bins_or_arrays: Bins | PackArrays, capacity: int) -> dict[str, float]:
    """num_bins, tokens, padding_tokens, efficiency (tokens / (bins * capacity)), padding_ratio
    (1 - efficiency), max_bin_tokens."""
    capacity = _check_capacity(capacity)
    tokens = _bin_tokens(bins_or_arrays)
    slots = tokens.size * capacity
    total = int(tokens.sum())
    efficiency = total / slots if slots else 1.0
    return {
        "num_bins": int(tokens.size),
        "tokens": total,
        "padding_tokens": int(slots - total),
        "efficiency": efficiency,
        "padding_ratio": 1.0 - efficiency,
        "max_bin_tokens": int(tokens.max()) if tokens.size else 0,
    }


def balance_metrics(groups: Sequence[Sequence[int]], workloads: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Per-group workload totals: min, max, mean, max - min, and max relative deviation from the mean."""
    values = np.asarray(workloads, dtype=np.float64)
    if not len(groups):
        raise ConfigError("groups: expected at least one group")
    totals = np.array([float(values[np.asarray(g, dtype=np.int64)].sum()) if len(g) else 0.0 for g in groups])
    mean = float(totals.mean())
    deviation = float(np.abs(totals - mean).max() / mean) if mean > 0 else 0.0
    return {
        "num_groups": int(totals.size),
        "min": float(totals.min()),
        "max": float(totals.max()),
        "mean": mean,
        "spread": float(totals.max() - totals.min()),
        "max_relative_deviation": deviation,
        "group_workloads": totals.tolist(),
    }

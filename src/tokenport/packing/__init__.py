"""Packing and balancing: sequences into fixed-capacity bins, workloads across k groups.

Imports nothing of tokenport above it but numpy (and numba); the RL dock reuses the balancing.

Packing (``bins``): best-fit, first-fit and next-fit decreasing, each as a list of bins of
(item, offset, length) pieces or as four int64 arrays for big inputs; ``split_long=True`` cuts items
longer than a bin into capacity-sized pieces first (bfd_split). Balancing (``balance``):
Karmarkar-Karp k-way partitioning, optionally with equal group sizes, and a workload model.
Metrics (``metrics``): padding and efficiency of a packing, spread of a balancing.
"""

from .balance import karmarkar_karp, karmarkar_karp_assignment, workload
from .bins import (
    arrays_to_bins,
    pack_best_fit,
    pack_best_fit_arrays,
    pack_first_fit,
    pack_first_fit_arrays,
    pack_next_fit,
    pack_next_fit_arrays,
)
from .metrics import balance_metrics, packing_metrics

__all__ = [
    "arrays_to_bins",
    "balance_metrics",
    "karmarkar_karp",
    "karmarkar_karp_assignment",
    "pack_best_fit",
    "pack_best_fit_arrays",
    "pack_first_fit",
    "pack_first_fit_arrays",
    "pack_next_fit",
    "pack_next_fit_arrays",
    "packing_metrics",
    "workload",
]

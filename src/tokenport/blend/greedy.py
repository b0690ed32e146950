"""The largest-error-first greedy blends: megatron-core's, bit for bit, and the corrected one."""

from __future__ import annotations

import numba
import numpy as np


def fill(
    weights: np.ndarray, limits: np.ndarray, ids: np.ndarray, corrected: bool, out: np.ndarray, samples: np.ndarray
) -> None:
    """Fill ``out`` (and ``samples`` unless empty) with the greedy blend of the active datasets ``ids``.

    ``limits[i]`` is the sample count of dataset ``i`` in an exhaustive blend, -1 otherwise.
    """
    _greedy_kernel(weights.astype(np.float64), limits.astype(np.int64), ids.astype(np.int64), corrected, out, samples)


@numba.njit(cache=True)
def _greedy_kernel(weights, limits, ids, corrected, out, samples):
    """Take, at each step ``j``, the dataset with the largest ``x * w_i - C_i``, ties to the lowest.

    ``x`` is ``j + 1`` when ``corrected``, else Megatron's ``max(j, 1)``; the float64 arithmetic
    is Megatron's, operation for operation, so the choices are too. A dataset whose count
    reaches its limit gets weight 0 and count +inf, hence error -inf, and is never taken again:
    the first dataset with the largest finite error wins, as in Megatron's walk over its set
    of unspent datasets.
    """
    n = weights.shape[0]
    w = weights.copy()
    taken = np.zeros(n, np.float64)
    counts = np.zeros(n, np.int64)
    write_samples = samples.shape[0] > 0
    for j in range(out.shape[0]):
        x = np.float64(j + 1) if corrected else max(np.float64(j), 1.0)
        best = 0
        best_error = w[0] * x - taken[0]
        for i in range(1, n):
            error = w[i] * x - taken[i]
            if error > best_error:
                best_error = error
                best = i
        out[j] = ids[best]
        if write_samples:
            samples[j] = counts[best]
        taken[best] += 1.0
        counts[best] += 1
        if counts[best] == limits[best]:
            w[best] = 0.0
            taken[best] = np.inf

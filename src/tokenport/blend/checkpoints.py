"""``dataset_sample_index`` recovered from ``dataset_index`` and a small table of counts."""

from __future__ import annotations

import numba
import numpy as np

from .._checks import check_int


class SampleIndexCheckpoints:
    """``dataset_sample_index`` without its 8 bytes per sample: every dataset's count each ``block`` samples.

    ``dataset_sample_index[t]`` is the count of ``d = dataset_index[t]`` at the nearest checkpoint
    plus (or minus) the occurrences of ``d`` between it and ``t``: a scan of at most ``block / 2``
    entries.
    The default ``block = max(4096, 16 * num_datasets)`` keeps the table to at most ``size / 16``
    entries (uint32 while counts fit, else int64): 250 MB for 10^9 samples of 10^4 datasets.
    """

    def __init__(self, dataset_index: np.ndarray, num_datasets: int, block: int | None = None) -> None:
        block = max(4096, 16 * num_datasets) if block is None else block
        check_int("block", block, 1, what="the checkpoint spacing")
        self.dataset_index = dataset_index
        self.block = int(block)
        size = len(dataset_index)
        dtype = np.uint32 if size <= np.iinfo(np.uint32).max else np.int64
        self.counts = np.empty((-(-size // self.block), num_datasets), dtype=dtype)
        _checkpoint_kernel(dataset_index, np.zeros(num_datasets, np.int64), self.block, self.counts)

    def __len__(self) -> int:
        return len(self.dataset_index)

    def __getitem__(self, position: int) -> int:
        """Return ``dataset_sample_index[position]``."""
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Return ``dataset_sample_index[positions]`` as int64 (negative positions count from the end)."""
        positions = np.asarray(positions, dtype=np.int64)
        size = len(self.dataset_index)
        if positions.size and (int(positions.min()) < -size or int(positions.max()) >= size):
            raise IndexError(f"positions outside [-{size}, {size}) in a blend of {size} samples")
        flat = np.where(positions < 0, positions + size, positions).ravel()
        out = np.empty(len(flat), dtype=np.int64)
        _recover_kernel(self.dataset_index, self.counts, self.block, flat, out)
        return out.reshape(positions.shape)


@numba.njit(cache=True)
def _checkpoint_kernel(dataset_index, counts, block, table):
    """Write into ``table[b]`` every dataset's count in ``dataset_index[:b * block]``."""
    for b in range(table.shape[0]):
        table[b, :] = counts
        for t in range(b * block, min((b + 1) * block, dataset_index.shape[0])):
            counts[dataset_index[t]] += 1


@numba.njit(cache=True)
def _recover_kernel(dataset_index, table, block, positions, out):
    """Write ``dataset_sample_index[positions]`` into ``out`` from the nearest checkpoint.

    From the one below: its count plus the ``d`` in ``[start, t)``; from the one above: its
    count minus the ``d`` in ``[t, end)``.
    """
    for j in range(positions.shape[0]):
        t = positions[j]
        d = dataset_index[t]
        row = t // block
        start = row * block
        end = start + block
        if t - start <= block // 2 or row + 1 >= table.shape[0]:
            count = np.int64(table[row, d])
            for s in range(start, t):
                count += dataset_index[s] == d
        else:
            count = np.int64(table[row + 1, d])
            for s in range(t, end):
                count -= dataset_index[s] == d
        out[j] = count

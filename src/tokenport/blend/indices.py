"""The blending indices: argument checks, the choice of algorithm, exhaustive blends, the deviation."""

from __future__ import annotations

import numba
import numpy as np

from .._checks import is_int, summable
from ..errors import ConfigError
from . import greedy, tijdeman

ALGORITHMS = ("tijdeman", "greedy", "megatron")
_MEGATRON_MAX_INDEX = int(np.iinfo(np.int16).max)  # megatron writes dataset_index as int16
_MAX_COUNT = 2**53  # float64 counts (Megatron's greedy, float weights) are exact below this


def build_blending_indices(
    weights: np.ndarray, size: int | None, *, algorithm: str = "tijdeman"
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(dataset_index, dataset_sample_index)`` of a blend of ``size`` samples.

    ``dataset_index`` has the smallest unsigned dtype that holds ``len(weights) - 1`` (uint8,
    uint16, uint32, ...); ``dataset_sample_index`` is int64, as in Megatron. With
    ``algorithm="megatron"`` both dtypes are Megatron's (int16 and int64; int32 past 32,768
    datasets, where Megatron's int16 would wrap). ``size=None`` takes every sample of every
    dataset once, ``weights`` being their integer sample counts. Bad input raises ConfigError.
    """
    return _build(weights, size, algorithm, samples=True)


def build_dataset_index(weights: np.ndarray, size: int | None, *, algorithm: str = "tijdeman") -> np.ndarray:
    """Return only the ``dataset_index`` of ``build_blending_indices``, for blends too big for the other array."""
    return _build(weights, size, algorithm, samples=False)[0]


def max_prefix_deviation(dataset_index: np.ndarray, weights: np.ndarray) -> float:
    """Return the largest ``|C_i(t) - t * w_i|`` over datasets ``i`` and prefixes ``t`` (``w`` normalized).

    One pass over ``dataset_index`` with O(n) memory: a dataset's deviation peaks just after
    it is taken (above its share), or just before it is taken or at the end (below it).
    """
    return float(prefix_deviations(dataset_index, weights).max())


def prefix_deviations(dataset_index: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Return each dataset's largest ``|C_i(t) - t * w_i|`` over the prefixes ``t`` (float64, one per dataset)."""
    raw = _check_weights(weights)
    index = np.asarray(dataset_index)
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise ConfigError(
            f"dataset_index must be a 1-D integer array, got shape {index.shape} dtype {index.dtype}: "
            "pass the first array build_blending_indices returns"
        )
    if index.size and (int(index.min()) < 0 or int(index.max()) >= len(raw)):
        raise ConfigError(f"dataset_index holds values outside [0, {len(raw)}): pass the weights it was built with")
    return _deviation_kernel(index, _ratios(raw))


def _build(weights: object, size: object, algorithm: object, samples: bool) -> tuple[np.ndarray, np.ndarray]:
    """Check the arguments and return ``dataset_index`` and, if ``samples``, ``dataset_sample_index``."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm={algorithm!r} is unknown: pass one of {', '.join(map(repr, ALGORITHMS))}")
    if size is None:
        counts = _check_counts(weights)
        total = int(counts.sum())
        ids = np.flatnonzero(counts)
        out, sample_out = _outputs(len(counts), total, algorithm, samples)
        if len(ids) == 1:
            _single(ids[0], out, sample_out)
        elif algorithm == "tijdeman":
            # its bound, below 1 at t = total, forces C_i = counts[i] there: exhaustive by itself
            tijdeman.fill(*tijdeman.exact_weights(counts[ids]), ids, out, sample_out)
        else:
            shares = counts[ids] / np.float64(total)  # Megatron: sizes[i] / double(total_size)
            greedy.fill(shares, counts[ids], ids, algorithm == "greedy", out, sample_out)
        return out, sample_out
    raw = _check_weights(weights)
    count = _check_size(size)
    normalized = _ratios(raw)  # Megatron's normalize(): the float64 weights its C++ receives
    ids = np.flatnonzero(normalized > 0)
    out, sample_out = _outputs(len(raw), count, algorithm, samples)
    if len(ids) == 1:
        _single(ids[0], out, sample_out)
    elif algorithm == "tijdeman":
        tijdeman.fill(*tijdeman.integer_weights(normalized[ids]), ids, out, sample_out)
    else:
        greedy.fill(normalized[ids], np.full(len(ids), -1, np.int64), ids, algorithm == "greedy", out, sample_out)
    return out, sample_out


def _ratios(raw: np.ndarray) -> np.ndarray:
    """``raw / raw.sum()`` (Megatron's normalize, bit for bit), by ratio when the sum would overflow."""
    scaled = summable(raw)
    return scaled / scaled.sum()


def _outputs(num_datasets: int, size: int, algorithm: str, samples: bool) -> tuple[np.ndarray, np.ndarray]:
    """Return the empty ``dataset_index`` and ``dataset_sample_index`` (length 0 when not wanted)."""
    if algorithm == "megatron":
        dtype = np.dtype(np.int16 if num_datasets - 1 <= _MEGATRON_MAX_INDEX else np.int32)
    else:
        dtype = np.min_scalar_type(num_datasets - 1)
    try:
        return np.empty(size, dtype=dtype), np.empty(size if samples else 0, dtype=np.int64)
    except (MemoryError, ValueError):  # numpy: cannot allocate, or larger than any array can be
        need = size * (dtype.itemsize + (8 if samples else 0))
        raise ConfigError(
            f"size={size}: the blend's indices need {need:,} bytes, more than this machine can allocate; "
            "pass a smaller size"
        ) from None


def _single(dataset: int, out: np.ndarray, sample_out: np.ndarray) -> None:
    """Fill the indices of a blend with one active dataset: all its samples in order."""
    out.fill(dataset)
    if len(sample_out):
        sample_out[:] = np.arange(len(sample_out), dtype=np.int64)


def _check_weights(weights: object) -> np.ndarray:
    """Return the weights as a 1-D float64 array, or raise ConfigError naming the bad entry."""
    try:
        raw = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"weights={weights!r} are not numbers ({error}): pass one number per dataset") from None
    if raw.ndim != 1 or raw.size == 0:
        raise ConfigError(
            f"weights must be a non-empty 1-D sequence, got shape {raw.shape}: pass one weight per dataset"
        )
    for problem, bad in (("NaN", np.isnan(raw)), ("infinite", np.isinf(raw)), ("negative", raw < 0)):
        if bad.any():
            entry = int(np.argmax(bad))
            raise ConfigError(
                f"weights[{entry}]={raw[entry].item()!r} is {problem}: weights must be finite and >= 0 "
                "(0 drops a dataset)"
            )
    if not raw.any():
        raise ConfigError("weights are all zero: give at least one dataset a positive weight")
    return raw


def _check_counts(weights: object) -> np.ndarray:
    """Return exhaustive per-dataset sample counts as int64, or raise ConfigError naming the bad entry."""
    raw = _check_weights(weights)
    given = np.asarray(weights)
    problems = (("not an integer", raw != np.floor(raw)), ("above 2**53", raw > _MAX_COUNT))
    for problem, bad in problems:
        if bad.any():
            entry = int(np.argmax(bad))
            raise ConfigError(
                f"weights[{entry}]={given[entry].item()!r} is {problem}: with size=None the weights are the "
                "datasets' sample counts; pass integers, or pass a size to blend by weights"
            )
    counts = given.astype(np.int64)
    if sum(int(count) for count in counts) > _MAX_COUNT:
        raise ConfigError("weights (sample counts, size=None) sum past 2**53: split the blend into smaller ones")
    return counts


def _check_size(size: object) -> int:
    """``size`` as an int; ConfigError unless it is an integer above zero."""
    if not is_int(size) or size <= 0:
        raise ConfigError(
            f"size={size!r} is invalid: pass the number of samples to blend, an integer of at least 1 "
            "(or size=None to take every sample of every dataset once)"
        )
    return int(size)


@numba.njit(cache=True)
def _deviation_kernel(dataset_index, weights):
    """Return each dataset's max over t of ``|C_i(t) - t * w_i|``, in one pass with per-dataset counts."""
    counts = np.zeros(weights.shape[0], np.int64)
    worst = np.zeros(weights.shape[0], np.float64)
    for t in range(dataset_index.shape[0]):
        d = dataset_index[t]
        below = t * weights[d] - counts[d]  # just before it is taken: t * w_d - C_d(t)
        counts[d] += 1
        above = counts[d] - (t + 1) * weights[d]  # just after: C_d(t + 1) - (t + 1) * w_d
        worst[d] = max(worst[d], below, above)
    size = dataset_index.shape[0]
    for i in range(weights.shape[0]):
        worst[i] = max(worst[i], size * weights[i] - counts[i])  # below its share at the end
    return worst

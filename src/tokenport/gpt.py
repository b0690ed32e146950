"""Documents to fixed-length GPT samples: the document, sample and shuffle indices.

The indices equal, element for element and dtype for dtype, those that Megatron-LM's
``GPTDataset`` builds for the same split, sample count, sequence length and seed.
Megatron walks the token stream one sample at a time in C++; here the walk is a
search of every sample boundary in the cumulative document lengths at once.
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError

_INT32_MAX = int(np.iinfo(np.int32).max)
_UINT32_MAX = int(np.iinfo(np.uint32).max)


def build_indices(
    sequence_lengths: np.ndarray,
    num_samples: int,
    seq_length: int,
    seed: int,
    *,
    add_extra_token: bool = True,
    separate_final_epoch_threshold: float = 0.8,
    drop_last_partial: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return Megatron's (document_index, sample_index, shuffle_index) for one split.

    ``sequence_lengths`` are the split's document lengths in split order; ``document_index``
    holds positions in that array, repeated once per epoch and shuffled with
    ``RandomState(seed)``, the final epoch apart when it supplies fewer than
    ``separate_final_epoch_threshold`` of an epoch's samples. Row ``j`` of ``sample_index``
    is the (document_index position, token offset) where sample ``j`` starts; row ``j + 1``
    is where it ends. Each sample spans ``seq_length`` tokens plus one when
    ``add_extra_token``. ``shuffle_index`` maps a dataset index to a sample.
    ``drop_last_partial=False`` (Megatron does this for the validation split only when
    configured) keeps a final sample shorter than the rest. Bad arguments raise ConfigError.
    """
    lengths = _check_lengths(sequence_lengths)
    _check_positive("num_samples", num_samples)
    _check_positive("seq_length", seq_length)
    _check_seed(seed)
    if not 0.0 <= separate_final_epoch_threshold <= 1.0:
        raise ConfigError(
            f"separate_final_epoch_threshold={separate_final_epoch_threshold!r} is outside [0, 1]: "
            "pass a fraction of an epoch such as Megatron's 0.8"
        )
    extra = int(bool(add_extra_token))
    tokens_per_epoch = int(lengths.sum(dtype=np.int64))
    if tokens_per_epoch == 0:
        raise ConfigError("sequence_lengths sum to zero tokens: the split has nothing to sample from")
    num_epochs = _num_epochs(tokens_per_epoch, int(num_samples), int(seq_length), extra)
    sans_final = _samples_before_final_epoch(
        tokens_per_epoch, int(num_samples), int(seq_length), extra, num_epochs, separate_final_epoch_threshold
    )
    random_state = np.random.RandomState(int(seed))
    document_index = _document_index(len(lengths), num_epochs, random_state, sans_final is not None)
    sample_index = _sample_index(
        lengths, document_index, int(seq_length), num_epochs * tokens_per_epoch, extra, drop_last_partial
    )
    total = sample_index.shape[0] - 1
    shuffle_index = _shuffle_index(total if sans_final is None else sans_final, total, random_state)
    return document_index, sample_index, shuffle_index


def _check_lengths(sequence_lengths: np.ndarray) -> np.ndarray:
    """Return the lengths as a 1-D integer array, or raise ConfigError naming the fault."""
    lengths = np.asarray(sequence_lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ConfigError(
            f"sequence_lengths must be a 1-D integer array, got shape {lengths.shape} dtype {lengths.dtype}: "
            "pass the split's document lengths, e.g. IndexedDataset.sequence_lengths[start:stop]"
        )
    if len(lengths) == 0:
        raise ConfigError("sequence_lengths is empty: the split holds no documents; give it a nonzero share")
    if lengths.dtype.kind == "i" and int(lengths.min()) < 0:
        raise ConfigError("sequence_lengths holds negative lengths: the token store's index is corrupt")
    return lengths


def _check_positive(name: str, value: object) -> None:
    """Raise ConfigError unless ``value`` is an integer above zero."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid: pass an integer of at least 1")


def _check_seed(seed: object) -> None:
    """Raise ConfigError unless ``seed`` is an integer that numpy's RandomState accepts."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= _UINT32_MAX:
        raise ConfigError(f"seed={seed!r} is invalid: pass an integer in [0, 2**32 - 1]")


def _num_epochs(tokens_per_epoch: int, num_samples: int, seq_length: int, extra: int) -> int:
    """Return the fewest whole epochs that hold ``num_samples`` samples (at least one)."""
    tokens_needed = num_samples * seq_length + extra
    return max(1, -(-tokens_needed // tokens_per_epoch))


def _samples_before_final_epoch(
    tokens_per_epoch: int, num_samples: int, seq_length: int, extra: int, num_epochs: int, threshold: float
) -> int | None:
    """Return the sample count of all epochs but the last when the last is shuffled apart, else None."""
    if num_epochs == 1:
        return None
    sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
    per_epoch = (tokens_per_epoch - extra) // seq_length
    return sans_final if num_samples - sans_final < int(threshold * per_epoch) else None


def _document_index(
    num_documents: int, num_epochs: int, random_state: np.random.RandomState, separate_final_epoch: bool
) -> np.ndarray:
    """Return the split positions repeated per epoch and shuffled, the final epoch apart if asked."""
    if not separate_final_epoch or num_epochs == 1:
        index = np.tile(np.arange(num_documents, dtype=np.int32), num_epochs)
        random_state.shuffle(index)
        return index
    first = _document_index(num_documents, num_epochs - 1, random_state, False)
    return np.concatenate((first, _document_index(num_documents, 1, random_state, False)))


def _sample_count(total_tokens: int, seq_length: int, extra: int, drop_last_partial: bool) -> int:
    """Return the number of samples, with the single-precision ceiling Megatron's C++ uses."""
    usable = total_tokens - extra
    if drop_last_partial:
        return usable // seq_length
    return int(np.ceil(np.float32(usable) / np.float32(seq_length)))


def _sample_index(
    lengths: np.ndarray,
    document_index: np.ndarray,
    seq_length: int,
    total_tokens: int,
    extra: int,
    drop_last_partial: bool,
) -> np.ndarray:
    """Return the (N + 1) x 2 start positions of the samples in the shuffled token stream.

    Sample ``j`` starts at stream token ``j * seq_length`` and is read through token
    ``(j + 1) * seq_length + extra``; a boundary belongs to the document holding that last
    token, and past the end of the stream it stays at the last document's final start.
    """
    num_samples = _sample_count(total_tokens, seq_length, extra, drop_last_partial)
    ends = np.zeros(len(document_index) + 1, dtype=np.int64)
    np.cumsum(lengths[document_index], dtype=np.int64, out=ends[1:])
    starts = np.arange(1, num_samples + 1, dtype=np.int64) * seq_length
    position = np.searchsorted(ends[1:], starts + extra, side="left")
    np.minimum(position, len(document_index) - 1, out=position)
    offset = np.minimum(starts, total_tokens - extra) - ends[position]
    largest = max(len(document_index), int(lengths.max()))
    sample_index = np.zeros((num_samples + 1, 2), dtype=np.int32 if largest <= _INT32_MAX else np.int64)
    sample_index[1:, 0] = position
    sample_index[1:, 1] = offset
    return sample_index


def _shuffle_index(num_samples: int, total: int, random_state: np.random.RandomState) -> np.ndarray:
    """Return a permutation of [0, total) that shuffles [0, num_samples) and the rest apart."""
    dtype = np.int64 if total >= _UINT32_MAX - 1 else np.uint32
    first = np.arange(num_samples, dtype=dtype)
    random_state.shuffle(first)
    if num_samples == total:
        return first
    rest = np.arange(num_samples, total, dtype=dtype)
    random_state.shuffle(rest)
    return np.concatenate((first, rest))

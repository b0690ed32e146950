"""Collators: a list of variable-length samples into one batch, padded or flattened.

Both take samples as dicts holding ``input_ids`` (or ``tokens``), 1-D integer arrays or lists,
and optionally ``labels`` of the same length. Labels follow Hugging Face's convention: they are
*not* shifted, ``labels[t] == input_ids[t]`` where no label is given, and the model shifts them
(predicting ``labels[t + 1]`` from position ``t``). Arrays are numpy; ``return_tensors="pt"``
turns them into torch tensors (torch is imported only then).

``PaddingCollator`` pads on the right to the longest sample (rounded up to a multiple when
asked). ``PaddingFreeCollator`` concatenates the batch into one ``[1, total]`` row with
``position_ids`` restarting per sample and flash-attention ``cu_seqlens``; like
``transformers.DataCollatorWithFlattening`` it sets the label of each sample's *first* token to
``label_pad``, so after the model's shift no position predicts across a sample boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import check_int, is_int
from .._schema import INT64_MAX
from ..errors import ConfigError

RETURN_TENSORS = ("np", "pt")


def _check_return_tensors(return_tensors: str) -> str:
    """The return_tensors value, or a ConfigError when it is not "np" or "pt"."""
    if not isinstance(return_tensors, str) or return_tensors not in RETURN_TENSORS:
        raise ConfigError(f"return_tensors={return_tensors!r}: expected one of {', '.join(RETURN_TENSORS)}")
    return return_tensors


def _as_ids(value: Any, name: str, index: int) -> np.ndarray:
    """A sample's field as a 1-D int64 array, or a ConfigError naming the sample and field."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.size == 0:
        array = array.reshape(-1).astype(np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ConfigError(
            f"samples[{index}][{name!r}]: expected a 1-D sequence of integer ids, "
            f"got shape {array.shape} dtype {array.dtype}"
        )
    if array.dtype == np.uint64 and array.size and int(array.max()) > INT64_MAX:  # would wrap to negative ids
        raise ConfigError(f"samples[{index}][{name!r}]: id {int(array.max())} is past 2**63 - 1, not a token id")
    return array.astype(np.int64, copy=False)


def _input_ids(sample: Mapping[str, Any], index: int) -> np.ndarray:
    """The ``input_ids`` (or ``tokens``) of one sample."""
    if not isinstance(sample, Mapping):
        raise ConfigError(f"samples[{index}]: expected a dict with 'input_ids', got {type(sample).__name__}")
    for name in ("input_ids", "tokens"):
        if name in sample:
            return _as_ids(sample[name], name, index)
    raise ConfigError(f"samples[{index}]: has neither 'input_ids' nor 'tokens' (keys: {sorted(sample)})")


def _read_samples(samples: Sequence[Mapping[str, Any]]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Input ids and labels (None when no sample has labels) of a non-empty batch, validated."""
    if len(samples) == 0:
        raise ConfigError("samples: the batch is empty; pass at least one sample")
    ids = [_input_ids(sample, k) for k, sample in enumerate(samples)]
    has_labels = ["labels" in sample for sample in samples]
    if not any(has_labels):
        return ids, None
    if not all(has_labels):
        missing = has_labels.index(False)
        raise ConfigError(f"samples[{missing}]: has no 'labels' but other samples do; give labels to all or none")
    labels = [_as_ids(sample["labels"], "labels", k) for k, sample in enumerate(samples)]
    for k, (a, b) in enumerate(zip(ids, labels)):
        if len(a) != len(b):
            raise ConfigError(f"samples[{k}]: {len(a)} input ids but {len(b)} labels; they must match")
    return ids, labels


def _to_tensors(batch: dict[str, Any], return_tensors: str) -> dict[str, Any]:
    """The batch as numpy arrays, or as torch tensors when ``return_tensors == "pt"``."""
    if return_tensors == "np":
        return batch
    import torch

    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


class PaddingCollator:
    """Right-pads samples to the batch's longest (optionally a multiple of N) with an attention mask.

    Returns ``input_ids`` (B, L) int64 padded with ``pad_id``, ``attention_mask`` (B, L) int64
    (1 = real token), ``labels`` (B, L) int64 (the samples' labels, else a copy of their input
    ids; ``label_pad`` at padding; unshifted, as in Hugging Face) and ``lengths`` (B,) int64.
    """

    def __init__(
        self,
        pad_id: int,
        *,
        pad_to_multiple_of: int | None = None,
        label_pad: int = -100,
        return_tensors: str = "np",
    ) -> None:
        if not is_int(pad_id) or not -INT64_MAX - 1 <= pad_id <= INT64_MAX:
            raise ConfigError(f"pad_id={pad_id!r}: expected an integer token id")
        if pad_to_multiple_of is not None and (not is_int(pad_to_multiple_of) or pad_to_multiple_of < 1):
            raise ConfigError(f"pad_to_multiple_of={pad_to_multiple_of!r}: expected None or an integer >= 1")
        self.pad_id = int(pad_id)
        self.pad_to_multiple_of = None if pad_to_multiple_of is None else int(pad_to_multiple_of)
        self.label_pad = check_int("label_pad", label_pad, -INT64_MAX - 1, INT64_MAX, "the label of padding")
        self.return_tensors = _check_return_tensors(return_tensors)

    def _width(self, longest: int) -> int:
        """The padded length: the longest sample rounded up to ``pad_to_multiple_of``."""
        multiple = self.pad_to_multiple_of
        return longest if multiple is None else -(-longest // multiple) * multiple

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The padded batch of ``samples``."""
        ids, labels = _read_samples(samples)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        width = self._width(int(lengths.max()))
        real = np.arange(width) < lengths[:, None]  # row-major order of `real` is concatenation order
        input_ids = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        input_ids[real] = np.concatenate(ids)
        out_labels = np.full((len(ids), width), self.label_pad, dtype=np.int64)
        out_labels[real] = input_ids[real] if labels is None else np.concatenate(labels)
        batch = {
            "input_ids": input_ids,
            "attention_mask": real.astype(np.int64),
            "labels": out_labels,
            "lengths": lengths,
        }
        return _to_tensors(batch, self.return_tensors)


class PaddingFreeCollator:
    """Concatenates samples into one [1, total] row: no padding, boundaries in cu_seqlens.

    Returns ``input_ids``, ``labels`` and ``position_ids`` (1, total) int64, ``cu_seqlens``
    (B + 1,) int32 (0, then cumulative lengths) and ``max_seqlen`` (a Python int). Labels are
    the samples' labels (else their input ids), unshifted, with the label of each sample's first
    token set to ``label_pad`` (exactly as transformers' DataCollatorWithFlattening): after the
    model's shift, the last token of one sample never predicts the first of the next.
    Position ids restart at 0 for each sample. Empty samples are a ConfigError.
    """

    def __init__(self, *, label_pad: int = -100, return_tensors: str = "np") -> None:
        self.label_pad = check_int("label_pad", label_pad, -INT64_MAX - 1, INT64_MAX, "the label of padding")
        self.return_tensors = _check_return_tensors(return_tensors)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The flattened batch of ``samples``."""
        ids, labels = _read_samples(samples)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            raise ConfigError(f"samples[{int(empty[0])}]: is empty; a padding-free batch needs >= 1 token a sample")
        cu_seqlens = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=cu_seqlens[1:])
        starts = cu_seqlens[:-1]
        input_ids = np.concatenate(ids)
        out_labels = input_ids.copy() if labels is None else np.concatenate(labels)
        out_labels[starts] = self.label_pad
        position_ids = np.arange(len(input_ids), dtype=np.int64) - np.repeat(starts, lengths)
        batch = {
            "input_ids": input_ids[None, :],
            "labels": out_labels[None, :],
            "position_ids": position_ids[None, :],
            "cu_seqlens": cu_seqlens.astype(np.int32),
            "max_seqlen": int(lengths.max()),
        }
        return _to_tensors(batch, self.return_tensors)

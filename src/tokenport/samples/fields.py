"""Megatron's sample fields and flash-attn style cu_seqlens from token windows, one pass per sample.

A window holds ``seq_length + extra`` tokens. One numba pass per sample writes every field at
once: tokens and labels (pad ids replaced by 0), the loss mask (no loss on pad labels, nor on
EOD tokens when asked), position ids (restarting after each EOD when asked), ``cu_seqlens``
(0, one past each EOD before the last token, then ``seq_length`` repeated to a fixed width),
``max_seqlen``, and, only when asked, the dense (1, S, S) bool attention mask (True = masked:
the future, and with ``reset_attention_mask`` everything before the query's document).
The values equal those megatron-core's ``GPTDataset.__getitem__`` computes with torch.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from ..errors import CorruptStoreError, InputDataError

_BAD_ROW = -2  # the store kernel returns _BAD_ROW - b when sample b's indices point outside the store

FIELDS = ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens", "max_seqlen", "attention_mask")


class FieldOptions(NamedTuple):
    """The per-dataset constants of the kernels (a GPTSampleConfig flattened to plain values)."""

    seq_length: int
    extra: int
    eod: int
    pad: int
    eod_mask_loss: bool
    reset_position_ids: bool
    reset_attention_mask: bool
    create_attention_mask: bool
    cu_seqlens_length: int


def fields_from_store(
    tokens: np.ndarray,
    pointers: np.ndarray,
    lengths: np.ndarray,
    document_index: np.ndarray,
    sample_index: np.ndarray,
    rows: np.ndarray,
    options: FieldOptions,
    store: str = "the token store",
) -> dict[str, np.ndarray]:
    """Fields of samples ``rows`` (sample_index rows) read straight from a memory-mapped store.

    The kernel trusts the store's pointers and lengths (checked when its index was first used)
    but not the sample indices: a row that would read outside its documents is a CorruptStoreError.
    """
    result = _store_kernel(tokens, pointers, lengths, document_index, sample_index, rows, *options)
    if result[-1] <= _BAD_ROW:
        row = int(rows[_BAD_ROW - result[-1]])
        raise CorruptStoreError(
            f"{store}: sample_index row {row} reads outside the documents of the store (document_index "
            "or sample_index out of range); the sample indices do not belong to this store or are damaged: "
            "delete their cache entry and rebuild them"
        )
    return _as_dict(result, options)


def fields_from_windows(windows: np.ndarray, options: FieldOptions) -> dict[str, np.ndarray]:
    """Fields of (B, seq_length + extra) int64 token windows gathered by the caller."""
    return _as_dict(_window_kernel(windows, *options), options)


def _as_dict(result: tuple, options: FieldOptions) -> dict[str, np.ndarray]:
    """The kernel's tuple as named fields, or InputDataError when cu_seqlens overflowed."""
    *arrays, overflow = result
    if overflow >= 0:
        width = options.cu_seqlens_length
        raise InputDataError(
            f"a sample holds {overflow} documents but cu_seqlens_length={width} fits {width - 1}: "
            "raise cu_seqlens_length (seq_length + 1 always fits)"
        )
    fields = dict(zip(FIELDS, arrays))
    if not options.create_attention_mask:
        del fields["attention_mask"]
    return fields


@numba.njit(cache=True)
def _store_kernel(
    tokens,
    pointers,
    lengths,
    document_index,
    sample_index,
    rows,
    seq_length,
    extra,
    eod,
    pad,
    eod_mask_loss,
    reset_position_ids,
    reset_attention_mask,
    create_attention_mask,
    cu_seqlens_length,
):
    """Gather each row's window from the store's token array, then fill its fields.

    Every index read from ``rows``, ``sample_index`` and ``document_index`` is range-checked once
    per document piece (a few compares, not per token); a bad one returns _BAD_ROW - b.
    """
    itemsize = tokens.itemsize
    width = seq_length + extra
    window = np.empty((1, width), dtype=np.int64)
    out = _allocate(len(rows), seq_length, cu_seqlens_length, create_attention_mask)
    for b in range(len(rows)):
        row = rows[b]
        if row < 0 or row + 1 >= sample_index.shape[0]:
            return out + (_BAD_ROW - b,)
        first, first_offset = sample_index[row, 0], sample_index[row, 1]
        last, last_offset = sample_index[row + 1, 0], sample_index[row + 1, 1]
        if first < 0 or last < first or last >= len(document_index):
            return out + (_BAD_ROW - b,)
        filled = 0
        for position in range(first, last + 1):
            document = document_index[position]
            if document < 0 or document >= len(lengths):
                return out + (_BAD_ROW - b,)
            begin = first_offset if position == first else 0
            end = last_offset + extra if position == last else lengths[document]
            if begin < 0 or end > lengths[document] or filled + max(end - begin, 0) > width:
                return out + (_BAD_ROW - b,)
            base = pointers[document] // itemsize
            for k in range(begin, end):
                window[0, filled] = tokens[base + k]
                filled += 1
        window[0, filled:] = pad
        overflow = _fill(
            window[0],
            b,
            out,
            seq_length,
            extra,
            eod,
            pad,
            eod_mask_loss,
            reset_position_ids,
            reset_attention_mask,
            create_attention_mask,
        )
        if overflow >= 0:
            return out + (overflow,)
    return out + (-1,)


@numba.njit(cache=True)
def _window_kernel(
    windows,
    seq_length,
    extra,
    eod,
    pad,
    eod_mask_loss,
    reset_position_ids,
    reset_attention_mask,
    create_attention_mask,
    cu_seqlens_length,
):
    """Fill the fields of windows gathered by the caller."""
    out = _allocate(windows.shape[0], seq_length, cu_seqlens_length, create_attention_mask)
    for b in range(windows.shape[0]):
        overflow = _fill(
            windows[b],
            b,
            out,
            seq_length,
            extra,
            eod,
            pad,
            eod_mask_loss,
            reset_position_ids,
            reset_attention_mask,
            create_attention_mask,
        )
        if overflow >= 0:
            return out + (overflow,)
    return out + (-1,)


@numba.njit(cache=True, inline="always")
def _allocate(batch, seq_length, cu_seqlens_length, create_attention_mask):
    """The output arrays of ``batch`` samples (a 0-size mask when none is asked for)."""
    side = seq_length if create_attention_mask else 0
    return (
        np.empty((batch, seq_length), dtype=np.int64),
        np.empty((batch, seq_length), dtype=np.int64),
        np.empty((batch, seq_length), dtype=np.float32),
        np.empty((batch, seq_length), dtype=np.int64),
        np.empty((batch, cu_seqlens_length), dtype=np.int32),
        np.empty(batch, dtype=np.int32),
        np.empty((batch if create_attention_mask else 0, 1, side, side), dtype=np.bool_),
    )


@numba.njit(cache=True, inline="always")
def _fill(
    window,
    b,
    out,
    seq_length,
    extra,
    eod,
    pad,
    eod_mask_loss,
    reset_position_ids,
    reset_attention_mask,
    create_attention_mask,
):
    """Write sample ``b``'s fields from its window; returns -1, or the document count that overflowed.

    Branch-free element loops (selects only) first, so LLVM vectorizes them; then one pass per
    document of the window for what depends on document boundaries.
    """
    tokens, labels, loss_mask, position_ids, cu_seqlens, max_seqlen, mask = out
    tokens, labels, loss_mask, position_ids, cu = tokens[b], labels[b], loss_mask[b], position_ids[b], cu_seqlens[b]
    last = seq_length - 1
    for p in range(last):
        token = window[p]
        label = window[p + 1]
        tokens[p] = 0 if token == pad else token
        labels[p] = 0 if label == pad else label
        loss_mask[p] = np.float32(0.0) if label == pad else np.float32(1.0)
    token = window[last]
    label = window[seq_length] if extra else pad
    tokens[last] = 0 if token == pad else token
    labels[last] = 0 if label == pad else label
    loss_mask[last] = np.float32(0.0) if label == pad else np.float32(1.0)
    if eod_mask_loss:
        for p in range(seq_length):
            if window[p] == eod:
                loss_mask[p] = np.float32(0.0)
    width = cu.shape[0]
    cu[0] = 0
    count = 1
    for p in range(last):  # documents end after each EOD before the last token
        if window[p] == eod:
            if count + 1 >= width:
                return _count_documents(window, seq_length, eod)
            cu[count] = p + 1
            count += 1
    cu[count:] = seq_length
    longest = 0
    for d in range(count):
        start, end = cu[d], cu[d + 1]
        longest = max(longest, end - start)
        for p in range(start, end):
            position_ids[p] = p - start if reset_position_ids else p
        if create_attention_mask:
            visible = start if reset_attention_mask else 0
            for p in range(start, end):
                row = mask[b, 0, p]
                row[:visible] = True
                row[visible : p + 1] = False
                row[p + 1 :] = True
    max_seqlen[b] = longest
    return -1


@numba.njit(cache=True)
def _count_documents(window, seq_length, eod):
    """How many documents a window holds: one plus the EODs before its last token."""
    count = 1
    for p in range(seq_length - 1):
        if window[p] == eod:
            count += 1
    return count

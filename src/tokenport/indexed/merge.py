"""Merging token stores into one, streaming: bytes are copied in chunks, never all in memory."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..errors import ConfigError, CorruptStoreError, TokenportError
from ..storage import is_remote
from .commit import recover
from .prefixes import resolve_stores
from .reader import IndexedDataset, store_prefix
from .same_tokenizer import check_same_tokenizer, store_tokenizer
from .verify import StreamCheck, stream_checks, verify
from .writer import IndexedDatasetWriter

_WINDOW_DOCUMENTS = 1 << 20
_COPY_BYTES = 64 << 20


def merge(
    output_prefix: str | os.PathLike,
    input_prefixes: Sequence[str | os.PathLike],
    *,
    provenance: dict[str, Any] | None = None,
    overwrite: bool = False,
    checksums: bool = True,
) -> str:
    """Concatenate stores (same dtype) into `output_prefix`, keeping sequence and document order.

    Inputs may be prefixes, their file names or prepare output directories (see `resolve_stores`);
    an existing output store is replaced only with ``overwrite=True``. Chat stores merge with
    their loss masks when all inputs are chat stores made the same way (manifest `chat`).
    Inputs made with different tokenizers are refused (see `same_tokenizer`). Every input with a
    manifest is checked against its checksums as it streams (tokens and masks): a corrupt input is
    a CorruptStoreError naming it and nothing is published. ``checksums=False`` skips that (for
    inputs verified just before); the structure of every index is checked regardless.
    """
    if not isinstance(checksums, bool):
        raise ConfigError(f"checksums={checksums!r} is invalid: pass True (check inputs as they stream) or False")
    if provenance is not None and not isinstance(provenance, dict):
        raise ConfigError(f"provenance={provenance!r} is invalid: pass a dict (or None)")
    prefixes = resolve_stores(input_prefixes, what="merge input")
    output = store_prefix(output_prefix, "output_prefix")
    _check_output(output, prefixes, overwrite)
    inputs = [IndexedDataset(prefix) for prefix in prefixes]
    dtypes = {ds.dtype for ds in inputs}
    if len(dtypes) != 1:
        names = ", ".join(f"{ds.prefix} ({ds.dtype})" for ds in inputs)
        raise ConfigError(f"merge: inputs have different dtypes: {names}; re-tokenize to one dtype")
    check_same_tokenizer(((ds.prefix, store_tokenizer(ds)) for ds in inputs), what="merge")
    tokenizer = next((ds.manifest.tokenizer for ds in inputs if ds.manifest and ds.manifest.tokenizer), None)
    masks, chat = _chat_settings(inputs)
    checks = [_checked(ds, stream_checks) if checksums else (None, None) for ds in inputs]  # every .idx first
    record = {"merged_from": [ds.prefix for ds in inputs], **(provenance or {})}
    with IndexedDatasetWriter(
        output, dtype=inputs[0].dtype, tokenizer=tokenizer, provenance=record, masks=masks, chat=chat
    ) as out:
        for ds, (tokens, mask_check) in zip(inputs, checks):
            _checked(ds, functools.partial(_append, out, check=tokens, mask_check=mask_check), full=tokens is not None)
            ds.close()
    return out.prefix


R = TypeVar("R")


def _checked(ds: IndexedDataset, work: Callable[[IndexedDataset], R], full: bool = False) -> R:
    """``work(ds)``, a corrupt input named as merge's input. With ``full``, another TokenportError (the
    writer refusing a token a damaged block holds, before the block's checksum is complete) checks the
    input's checksums whole and names the input when they fail."""
    try:
        return work(ds)
    except CorruptStoreError as exc:
        raise _corrupt(ds, exc) from None
    except TokenportError:
        if full:
            try:
                verify(ds.prefix)
            except CorruptStoreError as exc:
                raise _corrupt(ds, exc) from None
        raise


def _corrupt(ds: IndexedDataset, exc: CorruptStoreError) -> CorruptStoreError:
    return CorruptStoreError(
        f"merge: the input {ds.prefix} is corrupt ({exc}); nothing was written. Rebuild that store or leave it "
        f"out (tokenport verify {ds.prefix} shows its faults)"
    )


def _chat_settings(inputs: list[IndexedDataset]) -> tuple[bool, dict[str, Any] | None]:
    """(masks, chat) for the merged store: all inputs chat stores made alike, or none of them."""
    chat_stores = [ds.prefix for ds in inputs if ds.masks is not None]
    if not chat_stores:
        return False, None
    if len(chat_stores) != len(inputs):
        plain = ", ".join(ds.prefix for ds in inputs if ds.masks is None)
        raise ConfigError(
            f"merge: {', '.join(chat_stores)} are chat stores (with loss masks) but {plain} are not; "
            "merge chat stores only with chat stores"
        )
    settings = {repr(ds.manifest.chat) for ds in inputs if ds.manifest is not None}
    if len(settings) > 1:
        raise ConfigError(
            "merge: the chat stores were made with different chat settings (template, policy or format): "
            f"{sorted(settings)}; their masks do not mean the same thing, so prepare them alike first"
        )
    manifest = inputs[0].manifest
    return True, None if manifest is None else manifest.chat


def _check_output(output: str, inputs: list[str], overwrite: bool) -> None:
    """Refuse an output that is one of the inputs, or an existing store unless ``overwrite``."""
    if is_remote(output):
        return
    recover(output)  # finish an interrupted publication at the output before judging what exists
    key = os.path.abspath(output)
    if any(not is_remote(p) and os.path.abspath(p) == key for p in inputs):
        raise ConfigError(f"merge: the output {output} is also an input; write the merged store to a new prefix")
    existing = [output + suffix for suffix in (".bin", ".idx") if os.path.exists(output + suffix)]
    if existing and not overwrite:
        raise ConfigError(
            f"merge: the output store {output} already exists ({', '.join(existing)}); "
            "pass --force (overwrite=True) to replace it, or choose another output prefix"
        )


def _append(
    out: IndexedDatasetWriter, ds: IndexedDataset, check: StreamCheck | None, mask_check: StreamCheck | None
) -> None:
    """Stream one store into `out`, whole documents at a time, about 64 MiB of tokens per step, each
    step's bytes checked (``check``, ``mask_check``) while they are written: every byte has passed
    before this returns, so before anything is published."""
    try:
        _copy(out, ds, check, mask_check)
    finally:
        for each in (check, mask_check):
            if each is not None:
                each.close()  # a hash still running on a chunk, when the copy failed


def _copy(
    out: IndexedDatasetWriter, ds: IndexedDataset, check: StreamCheck | None, mask_check: StreamCheck | None
) -> None:
    lengths = ds.sequence_lengths
    pointers = ds.sequence_pointers
    documents = ds.document_indices
    itemsize = ds.dtype.itemsize
    if not len(lengths):
        for each in (check, mask_check):
            if each is not None:
                each.finish()
        return
    end_byte = int(pointers[-1]) + int(lengths[-1]) * itemsize
    first = 0
    while first < len(documents) - 1:
        window = documents[first : first + _WINDOW_DOCUMENTS + 1]
        inside = window < len(lengths)
        byte_at = np.where(inside, pointers[np.minimum(window, len(lengths) - 1)], end_byte)
        steps = int(np.searchsorted(byte_at, byte_at[0] + _COPY_BYTES, side="right")) - 1
        steps = max(1, min(steps, len(window) - 1))
        first_seq, stop_seq = int(window[0]), int(window[steps])
        start, stop = int(byte_at[0]), int(byte_at[steps])
        count = (stop - start) // itemsize
        tokens = ds._bin.read_array(start, count, ds.dtype)
        masks = None if ds.masks is None else ds.masks._bin.read_array(start // itemsize, count, np.uint8)
        if check is not None:
            check.feed(start, tokens)
        if mask_check is not None and masks is not None:
            mask_check.feed(start // itemsize, masks)
        out.add_documents(tokens, lengths[first_seq:stop_seq], np.diff(window[: steps + 1]), masks=masks)
        first += steps
    for each in (check, mask_check):
        if each is not None:
            each.finish()


@dataclass(frozen=True)
class MergeReport:
    """What `tokenport merge` made: the output store, how many stores went in, and its totals."""

    prefix: str
    inputs: int
    sequences: int
    tokens: int

    def render(self) -> str:
        """One line: stores in, store out, its sequences and tokens."""
        return f"merged {self.inputs} stores into {self.prefix}: {self.sequences:,} sequences, {self.tokens:,} tokens"

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        return {"prefix": self.prefix, "inputs": self.inputs, "sequences": self.sequences, "tokens": self.tokens}


def merge_report(prefix: str | os.PathLike, inputs: int) -> MergeReport:
    """The report of the merged store at ``prefix``, made from ``inputs`` stores."""
    with IndexedDataset(prefix) as store:
        return MergeReport(store.prefix, inputs, len(store), int(store.num_tokens))

"""SFTDataset: conversations of a chat store as packed (or padded), loss-masked samples.

A chat store is a token store ``PREFIX`` and a loss-mask store ``PREFIX.mask`` beside it (same
layout, one uint8 per token, 1 where the token is trained: an assistant token), one sequence per
conversation. Every conversation is a *piece* or, with ``too_long="split"``, several; pieces never
share a label or a position: ``position_ids`` restart at 0 at every piece.

Packing (``packing=``):

- ``"bfd"``: pieces packed best-fit decreasing into rows of ``seq_length`` (``packing/``, shared
  with ``PackedDataset``). With ``seed=None`` and ``window=1000`` the rows are those of TRL's
  ``pack_dataset(dataset, seq_length, strategy="bfd")`` (``"bfd_split"`` with ``too_long="split"``)
  in its order: TRL packs each ``datasets.map`` batch (1000 rows by default) on its own;
  ``window=None`` packs all conversations at once.
- ``"none"``: one piece per sample, ``get_batch`` pads to the longest sample of the batch;
  ``lengths`` gives each sample's token count for length-grouped samplers.

Too long (a conversation longer than ``seq_length``), counted in ``counts``:
``"truncate"`` keeps its first ``seq_length`` tokens (the prompt, the answer cut from the end), as
TRL does, but drops it when even its first trained token is cut off; ``"drop"`` drops it;
``"split"`` cuts it into ``seq_length`` pieces and a remainder (each piece its own sequence).

Order: ``seed=None`` keeps the conversations' order and the rows in the order packing opened
them; ``seed=int`` permutes conversations before packing and rows after
(``np.random.default_rng(seed)``), as ``PackedDataset`` does.

Labels, two shapes of the same targets (``shape=``):

- ``"megatron"``: ``tokens``, pre-shifted ``labels`` (``labels[t]`` is the token after ``tokens[t]``
  in the same piece when that token is trained, else ``label_pad``; the last token of a piece always
  ``label_pad``), ``loss_mask`` (float32, 1 where ``labels`` holds a target), ``position_ids``,
  ``cu_seqlens`` (int32, padded with the row's total), ``max_seqlen``, ``num_documents``.
- ``"hf"``: ``input_ids``, unshifted ``labels`` (the token itself where trained, ``label_pad`` at the
  first token of every piece and where untrained: the model shifts them, and no target crosses
  two conversations), ``position_ids`` for padding-free attention; TRL's padding-free collator
  gives the same labels. ``hf["labels"][:, 1:] == megatron["labels"][:, :-1]`` row by row.

Padding: ``pad_id`` tokens, ``label_pad`` labels, loss 0, position 0.

Epochs (``num_samples=``): None serves every row once. A larger count serves the rows again,
epoch after epoch, without re-packing: epoch 0 in the order above, epoch ``e >= 1`` in the order
``np.random.default_rng((seed, e)).permutation(rows)`` (a seed is required); the last epoch may be
partial. A smaller count serves the first ``num_samples`` rows of epoch 0. ``build_datasets`` sizes
the children of an SFT blend this way, so a small set is repeated, not read modulo its length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numba
import numpy as np

from .._checks import check_choice, check_int, check_sample_ids, is_int
from .._schema import Count, Document
from ..errors import ConfigError
from ..indexed import IndexedDataset
from .base import Describer, Rebuilder, plain, register_dataset_kind
from .bins import PackedBins, bin_starts_of, check_ids, pack_windows, ranges
from .lineage import ReadPlan

PACKINGS = ("bfd", "none")
TOO_LONG = ("truncate", "drop", "split")
SHAPES = {
    "megatron": ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens", "max_seqlen", "num_documents"),
    "hf": ("input_ids", "labels", "position_ids"),
}


def open_mask_store(store: IndexedDataset) -> IndexedDataset:
    """The loss-mask store of a chat store (``PREFIX.mask``, checked against the tokens when opened)."""
    masks = store.masks
    if masks is None:
        raise ConfigError(
            f"{store.prefix}: not a chat store (its manifest lists no loss masks); write it with "
            "prepare --format chat or IndexedDatasetWriter(..., masks=True)"
        )
    return masks


@dataclass(frozen=True)
class SFTConfig:
    """How ``build_datasets`` makes SFT samples of each chat store: `SFTDataset`'s options by name.

    The seed, the conversations (a split's ids) and the number of samples come from the build.
    """

    seq_length: int
    packing: str = "bfd"
    too_long: str = "truncate"
    shape: str = "megatron"
    window: int | None = None
    pad_id: int = 0
    label_pad: int = -100
    cu_seqlens_length: int | None = None

    def __post_init__(self) -> None:
        """Validate every field, naming the one at fault."""
        check_int("seq_length", self.seq_length, 1)
        check_choice("packing", self.packing, PACKINGS)
        check_choice("too_long", self.too_long, TOO_LONG)
        check_choice("shape", self.shape, tuple(SHAPES))
        if self.window is not None:
            check_int("window", self.window, 1)
        check_int("pad_id", self.pad_id, 0)
        _check_label_pad(self.label_pad)
        if self.cu_seqlens_length is not None:
            check_int("cu_seqlens_length", self.cu_seqlens_length, 1)


def _check_label_pad(label_pad: Any) -> int:
    """``label_pad`` as an int, or a ConfigError unless it is negative (never a token id)."""
    if not is_int(label_pad) or int(label_pad) >= 0:
        raise ConfigError(f"label_pad={label_pad}: must be negative so it never equals a token id (-100)")
    return int(label_pad)


@dataclass(frozen=True)
class SFTCounts:
    """What became of the conversations: kept whole, truncated, split, dropped, empty; tokens lost."""

    conversations: int
    kept: int
    truncated: int
    split: int
    dropped: int
    empty: int
    tokens: int
    tokens_lost: int


def _first_trained(masks: IndexedDataset, ids: np.ndarray) -> np.ndarray:
    """The index of the first trained token of each conversation ``ids`` (its length when none is)."""
    mask, offsets = masks.get_many(ids)
    firsts = offsets[1:].copy()
    trained = np.flatnonzero(mask)
    if trained.size:
        owner = np.searchsorted(offsets, trained, side="right") - 1
        unique, where = np.unique(owner, return_index=True)
        firsts[unique] = trained[where]
    return firsts - offsets[:-1]


@numba.njit(cache=True)
def _fill(bins, bin_starts, piece_length, tokens_from, token_start, masks_from, mask_start, megatron, out):  # noqa: ANN001
    """Write the rows of ``bins`` into ``out`` (tokens, labels, loss_mask, position_ids, cu_seqlens,
    max_seqlen, num_documents; pre-filled with padding): piece p's tokens are
    ``tokens_from[token_start[p]:][:piece_length[p]]``, its mask likewise."""
    tokens, labels, loss_mask, positions, cu_seqlens, max_seqlen, num_documents = out
    for r in range(bins.shape[0]):
        b = bins[r]
        column = 0
        k = 0
        for p in range(bin_starts[b], bin_starts[b + 1]):
            n = piece_length[p]
            t0 = token_start[p]
            m0 = mask_start[p]
            for j in range(n):
                token = tokens_from[t0 + j]
                tokens[r, column + j] = token
                positions[r, column + j] = j
                if j > 0 and masks_from[m0 + j] != 0:  # a piece's first token is never a target
                    if megatron:
                        labels[r, column + j - 1] = token
                        loss_mask[r, column + j - 1] = 1.0
                    else:
                        labels[r, column + j] = token
            column += n
            k += 1
            cu_seqlens[r, k] = column
            max_seqlen[r] = max(max_seqlen[r], n)
        cu_seqlens[r, k + 1 :] = column
        num_documents[r] = k


class SFTDataset(PackedBins):
    """Conversations of a chat store as packed or padded, loss-masked samples (see the module doc)."""

    batch_path = True

    def __init__(
        self,
        store: IndexedDataset,
        seq_length: int,
        *,
        packing: str = "bfd",
        too_long: str = "truncate",
        seed: int | None = None,
        window: int | None = None,
        ids: Sequence[int] | np.ndarray | None = None,
        shape: str = "megatron",
        pad_id: int = 0,
        label_pad: int = -100,
        cu_seqlens_length: int | None = None,
        num_samples: int | None = None,
    ) -> None:
        self.store = store
        self.masks = open_mask_store(store)
        self.seq_length = check_int("seq_length", seq_length, 1)
        self.packing = str(check_choice("packing", packing, PACKINGS))
        self.too_long = str(check_choice("too_long", too_long, TOO_LONG))
        self.shape = str(check_choice("shape", shape, tuple(SHAPES)))
        self.seed = None if seed is None else check_int("seed", seed, 0)
        self.window = None if window is None else check_int("window", window, 1)
        self.pad_id = check_int("pad_id", pad_id, 0)
        self.label_pad = _check_label_pad(label_pad)
        self.ids = None if ids is None else check_ids(ids, len(store))  # kept for the receipt (None: all)
        self.num_samples = None if num_samples is None else check_int("num_samples", num_samples, 0)
        self._build(check_ids(ids, len(store)))
        if self.num_samples is not None:
            self.order = self._epochs(self.num_samples)
        counts = np.diff(self.bin_starts)
        needed = int(counts.max()) + 1 if counts.size else 2
        width = needed if cu_seqlens_length is None else check_int("cu_seqlens_length", cu_seqlens_length, 1)
        if width < needed:
            raise ConfigError(
                f"cu_seqlens_length={width}: a sample holds {needed - 1} conversations, so at least {needed} is needed"
            )
        self.cu_seqlens_length = width

    @classmethod
    def from_config(
        cls,
        store: IndexedDataset,
        config: SFTConfig,
        *,
        seed: int | None,
        ids: Sequence[int] | np.ndarray | None = None,
        num_samples: int | None = None,
    ) -> SFTDataset:
        """``store``'s conversations ``ids`` as an SFTDataset made as ``config`` says (as ``build_datasets`` does)."""
        if not isinstance(config, SFTConfig):
            raise ConfigError(f"config: expected an SFTConfig, got {type(config).__name__}")
        return cls(
            store,
            config.seq_length,
            packing=config.packing,
            too_long=config.too_long,
            seed=seed,
            window=config.window,
            ids=ids,
            shape=config.shape,
            pad_id=config.pad_id,
            label_pad=config.label_pad,
            cu_seqlens_length=config.cu_seqlens_length,
            num_samples=num_samples,
        )

    def widen_cu_seqlens(self, width: int) -> None:
        """Make ``cu_seqlens`` rows ``width`` long (at least the current width), so datasets blended together
        give batches of one shape."""
        check_int("width", width, self.cu_seqlens_length)
        self.cu_seqlens_length = int(width)

    # -- build ------------------------------------------------------------------------------

    def _build(self, ids: np.ndarray) -> None:
        """Decide each conversation's fate, cut and pack the pieces, fix the order of the samples."""
        rng = None if self.seed is None else np.random.default_rng(self.seed)
        if rng is not None:
            ids = ids[rng.permutation(len(ids))]
        lengths = self.store.sequence_lengths[ids].astype(np.int64)
        kept = self._kept_lengths(ids, lengths)
        split = self.too_long == "split"
        if self.packing == "bfd":
            bin_of, item, offset, length = pack_windows(kept, self.seq_length, split, self.window)
        else:
            bin_of, item, offset, length = self._one_piece_per_sample(kept)
        self.piece_document = ids[item]
        self.piece_offset = offset
        self.piece_length = length
        self.bin_starts = bin_starts_of(bin_of)
        num_bins = len(self.bin_starts) - 1
        self.order = np.arange(num_bins, dtype=np.int64) if rng is None else rng.permutation(num_bins)
        self.counts = self._count(lengths, kept)
        self._bin_tokens = np.add.reduceat(length, self.bin_starts[:-1]) if num_bins else np.zeros(0, np.int64)
        # each piece's place in the .bin files, for stores that are memory-mapped (arrays not kept: pickles stay small)
        self._starts = None
        if self.store.token_array() is not None and self.masks.token_array() is not None:
            self._starts = tuple(
                source.sequence_pointers[self.piece_document] // source.dtype.itemsize + self.piece_offset
                for source in (self.store, self.masks)
            )

    def _epochs(self, num_samples: int) -> np.ndarray:
        """The bins of ``num_samples`` samples: epoch 0 in ``order``, epoch ``e`` permuted by (seed, e)."""
        rows = len(self.order)
        if num_samples <= rows:
            return self.order[:num_samples]
        if rows == 0:
            raise ConfigError(
                f"num_samples={num_samples}: {self.store.prefix} gives no sample from these conversations "
                f"({self.counts.conversations} of them, {self.counts.dropped} dropped as too long); "
                "pass other ids, a larger seq_length or too_long='split'"
            )
        if self.seed is None:
            raise ConfigError(
                f"num_samples={num_samples} is more than the {rows} rows of one epoch and seed=None: every epoch "
                "after the first is reordered from (seed, epoch); pass a seed"
            )
        epochs = -(-num_samples // rows)
        orders = [self.order] + [np.random.default_rng((self.seed, e)).permutation(rows) for e in range(1, epochs)]
        return np.concatenate(orders)[:num_samples].astype(np.int64, copy=False)

    @property
    def rows(self) -> int:
        """Packed rows of one epoch (``len(self)`` counts the samples served, ``num_samples`` when given)."""
        return len(self.bin_starts) - 1

    def _kept_lengths(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Tokens kept of each conversation: all, ``seq_length`` (truncated) or 0 (dropped or empty)."""
        kept = lengths.copy()
        over = np.flatnonzero(lengths > self.seq_length)
        if self.too_long == "drop":
            kept[over] = 0
        elif self.too_long == "truncate" and over.size:
            trainable = _first_trained(self.masks, ids[over]) < self.seq_length
            kept[over] = np.where(trainable, self.seq_length, 0)
        return kept

    def _one_piece_per_sample(self, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(bin, item, offset, length) with each piece its own bin, in conversation order."""
        pieces = np.where(kept > 0, -(-kept // self.seq_length), 0)
        item = np.repeat(np.arange(len(kept), dtype=np.int64), pieces)
        offset = (
            np.arange(item.size, dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        ) * self.seq_length
        length = np.minimum(self.seq_length, kept[item] - offset)
        return np.arange(item.size, dtype=np.int64), item, offset, length

    def _count(self, lengths: np.ndarray, kept: np.ndarray) -> SFTCounts:
        """The counts of what became of the conversations."""
        over = lengths > self.seq_length
        dropped = int(np.count_nonzero((kept == 0) & (lengths > 0)))
        return SFTCounts(
            conversations=len(lengths),
            kept=int(np.count_nonzero((kept > 0) & ~over)),
            truncated=int(np.count_nonzero(over & (kept > 0))) if self.too_long == "truncate" else 0,
            split=int(np.count_nonzero(over)) if self.too_long == "split" else 0,
            dropped=dropped,
            empty=int(np.count_nonzero(lengths == 0)),
            tokens=int(self.piece_length.sum()),
            tokens_lost=int(lengths.sum() - self.piece_length.sum()),
        )

    # -- sizes ----------------------------------------------------------------------------------

    @property
    def lengths(self) -> np.ndarray:
        """Real tokens of every sample, in sample order (for length-grouped samplers)."""
        return self._bin_tokens[self.order].astype(np.int64)

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of a sample's fields in this ``shape``."""
        return SHAPES[self.shape]

    # -- samples --------------------------------------------------------------------------------

    def batch_width(self, ids: Sequence[int] | np.ndarray) -> int:
        """The row width ``get_batch(ids)`` pads to: ``seq_length`` (bfd) or the longest of the samples (none)."""
        if self.packing == "bfd":
            return self.seq_length
        return int(self._bin_tokens[self.order[check_sample_ids(ids, len(self))]].max(initial=0))

    def get_batch(self, ids: Sequence[int] | np.ndarray, width: int | None = None) -> dict[str, np.ndarray]:
        """Samples ``ids`` stacked on a leading batch axis: rows of ``seq_length`` (bfd) or of the
        batch's longest sample (none), or of ``width`` when given (a blend pads its children alike)."""
        ids = check_sample_ids(ids, len(self))
        bins = self.order[ids]
        batch = len(ids)
        needed = self.seq_length if self.packing == "bfd" else int(self._bin_tokens[bins].max(initial=0))
        if width is None:
            width = needed
        elif not is_int(width) or width < needed:
            raise ConfigError(f"get_batch: width={width!r} is narrower than these samples' {needed} tokens")
        out = (
            np.full((batch, width), self.pad_id, dtype=np.int64),
            np.full((batch, width), self.label_pad, dtype=np.int64),
            np.zeros((batch, width), dtype=np.float32),
            np.zeros((batch, width), dtype=np.int64),
            np.zeros((batch, self.cu_seqlens_length), dtype=np.int32),
            np.zeros(batch, dtype=np.int64),
            np.zeros(batch, dtype=np.int64),
        )
        _fill(*self._sources(bins), self.shape == "megatron", out)  # type: ignore[call-arg]  # numba dispatcher
        if self.shape == "hf":
            return {"input_ids": out[0], "labels": out[1], "position_ids": out[3]}
        return dict(zip(SHAPES["megatron"], out))

    def read_plan(self, ids: Sequence[int] | np.ndarray) -> ReadPlan:
        """The store reads samples ``ids`` make, in order: [(store, documents, offsets, lengths)] for the
        tokens and the loss masks."""
        pieces = self._pieces_of(self.order[check_sample_ids(ids, len(self))])
        documents, offsets, lengths = self.piece_document[pieces], self.piece_offset[pieces], self.piece_length[pieces]
        return [(self.store, documents, offsets, lengths), (self.masks, documents, offsets, lengths)]

    def stores(self) -> tuple[IndexedDataset, ...]:
        return (self.store, self.masks)

    def _sources(self, bins: np.ndarray) -> tuple[np.ndarray, ...]:
        """(bins, bin_starts, piece_length, tokens, token starts, masks, mask starts) for ``_fill``:
        the memory-mapped stores themselves, else the pieces of ``bins`` read into local arrays."""
        tokens, masks = self.store.token_array(), self.masks.token_array()
        if self._starts is not None and tokens is not None and masks is not None:
            token_start, mask_start = self._starts
            return bins, self.bin_starts, self.piece_length, tokens, token_start, masks, mask_start
        counts = self.bin_starts[bins + 1] - self.bin_starts[bins]
        pieces = ranges(self.bin_starts[bins], counts)
        documents, offsets = self.piece_document[pieces], self.piece_offset[pieces]
        length = self.piece_length[pieces]
        starts = np.cumsum(length) - length
        local_bins = np.arange(len(bins), dtype=np.int64)
        local_starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        tokens = self.store.get_pieces(documents, offsets, length)
        masks = self.masks.get_pieces(documents, offsets, length)
        return local_bins, local_starts, length, tokens, starts, masks, starts

    def __repr__(self) -> str:
        return (
            f"SFTDataset({self.store.prefix!r}, seq_length={self.seq_length}, packing={self.packing!r}, "
            f"too_long={self.too_long!r}, samples={len(self)}, shape={self.shape!r})"
        )

    # -- receipts -------------------------------------------------------------------------------

    def describe(self, describer: Describer) -> dict[str, Any]:
        """Its store, sample options, seed, a digest of its pieces and order, and its ids and sample count."""
        config = {
            "seq_length": self.seq_length,
            "packing": self.packing,
            "too_long": self.too_long,
            "window": self.window,
            "shape": self.shape,
            "pad_id": self.pad_id,
            "label_pad": self.label_pad,
            "cu_seqlens_length": self.cu_seqlens_length,
        }
        return {
            "store": describer.store(self.store),
            "sample_config": plain(config),
            "seed": self.seed,
            "order": self.order_digest(),
            "build": {"ids": self.id_runs(), "num_samples": self.num_samples},
        }

    @classmethod
    def from_description(cls, node: Mapping[str, Any], rebuilder: Rebuilder) -> SFTDataset:
        """The SFT dataset a receipt node describes, cut and packed again from its chat store."""
        config = node["sample_config"]
        recipe = rebuilder.recipe(node, _SFTBuild)
        return cls(
            rebuilder.open(node),
            config["seq_length"],
            packing=config["packing"],
            too_long=config["too_long"],
            seed=node["seed"],
            window=config["window"],
            ids=rebuilder.ids(recipe.ids, "ids"),
            shape=config["shape"],
            pad_id=config["pad_id"],
            label_pad=config["label_pad"],
            cu_seqlens_length=config["cu_seqlens_length"],
            num_samples=recipe.num_samples,
        )


class _SFTBuild(Document, frozen=True):
    """An SFTDataset's recipe: its sequence ids and sample count (None: each once)."""

    ids: Literal["all"] | list[tuple[Count, Count]] | None
    num_samples: Count | None


register_dataset_kind("SFTDataset", SFTDataset)

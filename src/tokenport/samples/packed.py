"""PackedDataset: the sequences of a token store packed into fixed-length samples, best fit.

Every sequence of the store (or of a subset ``ids``) is a *document* here (as in GPTDataset).
Documents are packed into bins of ``seq_length`` tokens with best-fit decreasing
(``packing.pack_best_fit_arrays``); with ``too_long="split"`` documents longer than ``seq_length``
are cut into pieces of that length first; with ``too_long="error"`` (the default) they are a
ConfigError naming the document. Empty documents are left out (they hold no tokens). The older
spellings ``capacity``, ``split_long=True`` and ``shuffle=False`` still work for one release, with
a DeprecationWarning.

Order, deterministic for ``seed``: with an int ``seed`` (0 by default) the document ids are permuted
with ``np.random.default_rng(seed)`` before packing, and the packed bins are permuted afterwards with
the same generator; with ``seed=None`` ids keep their order and bins stay in the order
best fit opened them. With ``window=k`` the (shuffled) ids are cut into consecutive windows of
``k`` and each window is packed on its own (bins never mix windows), else all at once.

Each sample holds, for one bin, pieces laid end to end then padding:

- ``tokens`` (seq_length,) int64, padding ``pad_id``;
- ``labels`` (seq_length,) int64, *pre-shifted* like GPTDataset's: ``labels[t]`` is the token
  after ``tokens[t]`` in the same document (read from the store when the piece was cut off, so
  split pieces keep their last target), ``label_pad`` on the last token of each document and on
  padding: no label crosses a document boundary;
- ``position_ids`` (seq_length,) int64, restarting at 0 at every piece, 0 on padding;
- ``cu_seqlens`` (cu_seqlens_length,) int32: 0, the end of each piece, then the sample's real
  token count repeated, so samples stack; ``cu_seqlens_length`` is the most pieces any bin holds
  plus one, or the caller's value (a ConfigError when too small);
- ``max_seqlen`` (int64, the longest piece) and ``num_documents`` (int64, pieces in the bin).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._checks import (
    NOT_GIVEN,
    check_bool,
    check_choice,
    check_int,
    check_sample_ids,
    deprecated_keyword,
    renamed_keywords,
)
from .._schema import INT64_MAX, Count, Document
from ..errors import ConfigError
from ..indexed import IndexedDataset
from .base import plain, register_dataset_kind
from .bins import PackedBins, bin_starts_of, check_ids, pack_windows, ranges
from .lineage import ReadPlan

if TYPE_CHECKING:
    from .base import Describer, Rebuilder

TOO_LONG = ("error", "split")  # a document longer than seq_length: a ConfigError naming it, or cut into pieces
FIELDS = ("tokens", "labels", "position_ids", "cu_seqlens", "max_seqlen", "num_documents")


def _too_long(too_long: object, split_long: object) -> str:
    """``too_long`` ("error" or "split"), or the deprecated ``split_long`` flag it replaces; ConfigError for both."""
    mode = str(check_choice("too_long", too_long, TOO_LONG))
    if split_long is NOT_GIVEN:
        return mode
    flag = check_bool("split_long", split_long)
    if mode != "error":
        raise ConfigError(f'split_long={split_long} is the old spelling of too_long="split"; pass too_long= only')
    deprecated_keyword("PackedDataset", "split_long", 'too_long="split"', depth=3)
    return "split" if flag else "error"


def _shuffle(shuffle: object) -> bool:
    """The deprecated ``shuffle`` flag (``seed=None`` keeps the order now), checked."""
    flag = check_bool("shuffle", shuffle)
    deprecated_keyword("PackedDataset", "shuffle", "seed=None to keep the order (an int seed shuffles)", depth=3)
    return flag


def _check_fits(ids: np.ndarray, lengths: np.ndarray, capacity: int, prefix: str) -> None:
    """A ConfigError naming the first document longer than ``capacity`` (unless too_long="split")."""
    too_long = np.flatnonzero(lengths > capacity)
    if too_long.size:
        k = int(too_long[0])
        raise ConfigError(
            f"{prefix}: document (sequence) {int(ids[k])} has {int(lengths[k])} tokens, more than "
            f"seq_length={capacity} ({too_long.size} document(s) do): pass too_long='split' "
            "(formerly split_long=True) or raise seq_length"
        )


class PackedDataset(PackedBins):
    """Documents of a token store packed into fixed ``seq_length``-token samples (see the module doc)."""

    batch_path = True

    @renamed_keywords(capacity="seq_length")
    def __init__(
        self,
        store: IndexedDataset,
        seq_length: int,
        *,
        ids: Sequence[int] | np.ndarray | None = None,
        too_long: str = "error",
        window: int | None = None,
        seed: int | None = 0,
        pad_id: int = 0,
        label_pad: int = -100,
        cu_seqlens_length: int | None = None,
        split_long: Any = NOT_GIVEN,
        shuffle: Any = NOT_GIVEN,
    ) -> None:
        if not isinstance(store, IndexedDataset):
            raise ConfigError(f"store={store!r:.80} is invalid: pass a token store (tokenport.IndexedDataset)")
        self.store = store
        self.seq_length = check_int("seq_length", seq_length, 1, what="the tokens of a sample (formerly capacity)")
        self.window = None if window is None else check_int("window", window, 1)
        self.too_long = _too_long(too_long, split_long)
        self.split_long = self.too_long == "split"  # what receipts record
        self.shuffle = seed is not None if shuffle is NOT_GIVEN else _shuffle(shuffle)
        self.seed = 0 if seed is None else check_int("seed", seed, 0)  # recorded (unused) when not shuffled
        self.pad_id = check_int("pad_id", pad_id, 0, INT64_MAX, "a token id")
        self.label_pad = check_int("label_pad", label_pad, -INT64_MAX - 1, INT64_MAX, "the label of padding")
        self._sequence_lengths = np.asarray(store.sequence_lengths, dtype=np.int64)
        self.ids = None if ids is None else check_ids(ids, len(store))  # kept for the receipt (None: all)
        self._build(check_ids(ids, len(store)), self.shuffle)
        self.cu_seqlens_length = self._check_cu_seqlens_length(cu_seqlens_length)

    @property
    def capacity(self) -> int:
        """Tokens per sample: ``seq_length``, by its older name."""
        return self.seq_length

    # -- build ------------------------------------------------------------------------------

    def _build(self, ids: np.ndarray, shuffle: bool) -> None:
        """Pack the documents ``ids`` into bins and fix the order of the samples."""
        rng = np.random.default_rng(self.seed)
        ids = ids[self._sequence_lengths[ids] > 0]
        if shuffle:
            ids = ids[rng.permutation(len(ids))]
        lengths = self._sequence_lengths[ids]
        if not self.split_long:
            _check_fits(ids, lengths, self.seq_length, self.store.prefix)
        bin_of, item, offset, length = pack_windows(lengths, self.seq_length, self.split_long, self.window)
        self.piece_document = ids[item]
        self.piece_offset = offset
        self.piece_length = length
        self.bin_starts = bin_starts_of(bin_of)
        num_bins = len(self.bin_starts) - 1
        self.order = rng.permutation(num_bins).astype(np.int64) if shuffle else np.arange(num_bins, dtype=np.int64)

    def _check_cu_seqlens_length(self, requested: int | None) -> int:
        """The cu_seqlens width: the most pieces in a bin + 1, or the caller's value if it fits."""
        counts = np.diff(self.bin_starts)
        needed = int(counts.max()) + 1 if counts.size else 1
        if requested is None:
            return needed
        what = "the length of cu_seqlens (a sample of capacity tokens holds at most capacity documents)"
        width = check_int("cu_seqlens_length", requested, 1, self.seq_length + 1, what)
        if width < needed:
            raise ConfigError(
                f"cu_seqlens_length={width}: a sample holds {needed - 1} documents, so at least {needed} is needed"
            )
        return width

    # -- sizes and metrics ----------------------------------------------------------------------

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens over all samples."""
        return int(self.piece_length.sum())

    @property
    def efficiency(self) -> float:
        """Real tokens / (samples × capacity): 1.0 is no padding at all (1.0 when empty)."""
        return self.num_tokens / (len(self) * self.seq_length) if len(self) else 1.0

    # -- samples --------------------------------------------------------------------------------

    def get_batch(self, ids: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Samples ``ids`` as a dict of arrays stacked on a leading batch axis."""
        ids = check_sample_ids(ids, len(self))
        bins = self.order[ids]
        counts = self.bin_starts[bins + 1] - self.bin_starts[bins]
        pieces = ranges(self.bin_starts[bins], counts)
        row = np.repeat(np.arange(len(ids), dtype=np.int64), counts)
        length = self.piece_length[pieces]
        firsts = np.cumsum(counts) - counts  # every bin holds at least one piece
        end = np.cumsum(length)  # end column of each piece inside its sample
        end -= np.repeat((end - length)[firsts], counts)
        batch = self._tokens_and_labels(row, pieces, end - length, len(ids))
        batch["position_ids"] = self._position_ids(row, end - length, length, len(ids))
        batch.update(self._boundaries(row, end, length, counts))
        return batch

    def read_plan(self, ids: Sequence[int] | np.ndarray) -> ReadPlan:
        """The store reads samples ``ids`` make, in order: [(store, documents, offsets, lengths)]."""
        ids = check_sample_ids(ids, len(self))
        pieces = self._pieces_of(self.order[ids])
        documents, offsets = self.piece_document[pieces], self.piece_offset[pieces]
        reads = np.minimum(self.piece_length[pieces] + 1, self._sequence_lengths[documents] - offsets)
        return [(self.store, documents, offsets, reads)]

    def _tokens_and_labels(
        self, row: np.ndarray, pieces: np.ndarray, column: np.ndarray, batch: int
    ) -> dict[str, np.ndarray]:
        """Tokens and pre-shifted labels of the pieces, read one piece (plus its next token) a time."""
        tokens = np.full((batch, self.seq_length), self.pad_id, dtype=np.int64)
        labels = np.full((batch, self.seq_length), self.label_pad, dtype=np.int64)
        documents = self.piece_document[pieces]
        offsets = self.piece_offset[pieces]
        lengths = self.piece_length[pieces]
        reads = np.minimum(lengths + 1, self._sequence_lengths[documents] - offsets)  # +1: the next token
        get = self.store.get
        for r, document, offset, length, read, col in zip(
            row.tolist(), documents.tolist(), offsets.tolist(), lengths.tolist(), reads.tolist(), column.tolist()
        ):
            chunk = get(document, offset, read)
            tokens[r, col : col + length] = chunk[:length]
            labels[r, col : col + read - 1] = chunk[1:]
        return {"tokens": tokens, "labels": labels}

    def _position_ids(self, row: np.ndarray, column: np.ndarray, length: np.ndarray, batch: int) -> np.ndarray:
        """Position ids restarting at 0 at every piece, 0 on padding."""
        positions = np.zeros((batch, self.seq_length), dtype=np.int64)
        flat = ranges(row * self.seq_length + column, length)
        positions.reshape(-1)[flat] = flat - np.repeat(row * self.seq_length + column, length)
        return positions

    def _boundaries(
        self, row: np.ndarray, end: np.ndarray, length: np.ndarray, counts: np.ndarray
    ) -> dict[str, np.ndarray]:
        """cu_seqlens (padded with each sample's total), max_seqlen and num_documents."""
        batch = len(counts)
        totals = np.zeros(batch, dtype=np.int64)
        np.add.at(totals, row, length)
        cu_seqlens = np.repeat(totals[:, None], self.cu_seqlens_length, axis=1).astype(np.int32)
        cu_seqlens[:, 0] = 0
        slot = np.arange(len(row), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        cu_seqlens[row, slot + 1] = end
        max_seqlen = np.zeros(batch, dtype=np.int64)
        np.maximum.at(max_seqlen, row, length)
        return {"cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen, "num_documents": counts.astype(np.int64)}

    def __repr__(self) -> str:
        return (
            f"PackedDataset({self.store.prefix!r}, seq_length={self.seq_length}, samples={len(self)}, "
            f"too_long={self.too_long!r}, window={self.window}, efficiency={self.efficiency:.4f})"
        )

    # -- receipts -------------------------------------------------------------------------------

    def describe(self, describer: Describer) -> dict[str, Any]:
        """Its store, packing parameters, seed, a digest of its bins and order, and its ids and shuffle."""
        config = {
            "capacity": self.seq_length,
            "window": self.window,
            "split_long": self.split_long,
            "pad_id": self.pad_id,
            "label_pad": self.label_pad,
            "cu_seqlens_length": self.cu_seqlens_length,
        }
        return {
            "store": describer.store(self.store),
            "sample_config": plain(config),
            "seed": int(self.seed),
            "order": self.order_digest(),
            "build": {"ids": self.id_runs(), "shuffle": self.shuffle},
        }

    @classmethod
    def from_description(cls, node: Mapping[str, Any], rebuilder: Rebuilder) -> PackedDataset:
        """The packed dataset a receipt node describes, packed again from its store."""
        config = node["sample_config"]
        recipe = rebuilder.recipe(node, _PackedBuild)
        packed = cls(
            rebuilder.open(node),
            config["capacity"],
            ids=rebuilder.ids(recipe.ids, "ids"),
            too_long="split" if check_bool("sample_config.split_long", config["split_long"]) else "error",
            window=config["window"],
            seed=node["seed"] if recipe.shuffle else None,
            pad_id=config["pad_id"],
            label_pad=config["label_pad"],
            cu_seqlens_length=config["cu_seqlens_length"],
        )
        packed.seed = check_int("seed", node["seed"], 0)  # recorded even when it shuffled nothing
        return packed


class _PackedBuild(Document, frozen=True):
    """A PackedDataset's recipe: its sequence ids ("all", runs, or None: too many runs) and shuffle."""

    ids: Literal["all"] | list[tuple[Count, Count]] | None
    shuffle: bool


register_dataset_kind("PackedDataset", PackedDataset)

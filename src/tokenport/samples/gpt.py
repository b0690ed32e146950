"""Documents to fixed-length GPT samples: the document, sample and shuffle indices, and the samples.

The indices equal, element for element and dtype for dtype, those that Megatron-LM's
``GPTDataset`` builds for the same split, sample count, sequence length and seed.
The shuffles are numpy's own draws (run by ``legacy_shuffle`` in numba) and the sample walk is
Megatron's C++ loop in numba, so exactness costs nothing in speed.
``GPTDataset`` turns them into Megatron's sample fields plus flash-attn style cu_seqlens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numba
import numpy as np

from .._checks import (
    check_bool,
    check_fits_memory,
    check_int,
    check_sample_id,
    check_sample_ids,
    check_seed,
    renamed_keywords,
)
from .._schema import Count, Document, Int64
from ..errors import ConfigError, CorruptStoreError, InputDataError
from ..indexed import IndexedDataset
from ..rng.legacy_shuffle import LegacyShuffler
from .base import Describer, Rebuilder, SampleDataset, digest, id_runs, kept_while_frozen, plain, register_dataset_kind
from .fields import FieldOptions, fields_from_store, fields_from_windows
from .inverse import GPTInverse, gpt_inverse_arrays
from .lineage import Occurrences, ReadPlan, SampleLineage, gpt_pieces

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
    check_int("num_samples", num_samples)
    check_int("seq_length", seq_length)
    check_seed("seed", seed)
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
    samples = num_epochs * tokens_per_epoch // int(seq_length) + 1  # at most: every epoch's samples
    nbytes = num_epochs * len(lengths) * 4 + samples * (2 * 8 + 8)  # document, sample and shuffle index
    check_fits_memory("num_samples", num_samples, nbytes, "the sample indices")
    sans_final = _samples_before_final_epoch(
        tokens_per_epoch, int(num_samples), int(seq_length), extra, num_epochs, separate_final_epoch_threshold
    )
    random_state = LegacyShuffler(int(seed))
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
    num_documents: int, num_epochs: int, random_state: LegacyShuffler, separate_final_epoch: bool
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
    """Return the (N + 1) x 2 (document_index position, token offset) where each sample starts.

    Sample ``j`` is read from row ``j`` through row ``j + 1`` plus ``extra`` tokens, so
    consecutive samples share ``extra`` tokens; a kept partial last sample ends at the last
    document's final token.
    """
    num_samples = _sample_count(total_tokens, seq_length, extra, drop_last_partial)
    largest = max(len(document_index), int(lengths.max()))
    sample_index = np.empty((num_samples + 1, 2), dtype=np.int32 if largest <= _INT32_MAX else np.int64)
    if _walk_samples(lengths, document_index, seq_length, extra, sample_index) < 0:
        raise InputDataError(
            "drop_last_partial=False: the last document of the shuffled order is empty, so the kept "
            "partial last sample has no final token (Megatron writes offset -1 here); remove empty "
            "documents from the split or keep drop_last_partial=True"
        )
    return sample_index


@numba.njit(cache=True)
def _walk_samples(lengths: np.ndarray, document_index: np.ndarray, seq_length: int, extra: int, out: np.ndarray) -> int:
    """Fill ``out`` walking the shuffled documents one sample at a time, as Megatron's C++ does.

    Returns 0, or -1 when a partial last sample would end before its last (empty) document.
    """
    last = document_index.shape[0] - 1
    position = 0
    offset = 0
    out[0, 0] = 0
    out[0, 1] = 0
    for sample in range(1, out.shape[0]):
        remaining = seq_length + extra
        while remaining != 0:
            length = np.int64(lengths[document_index[position]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            elif position == last:  # only the kept partial last sample runs out of documents
                offset = np.int64(lengths[document_index[position]]) - extra
                if offset < 0:
                    return -1
                break
            else:
                position += 1
                offset = 0
        out[sample, 0] = position
        out[sample, 1] = offset
    return 0


def _shuffle_index(num_samples: int, total: int, random_state: LegacyShuffler) -> np.ndarray:
    """Return a permutation of [0, total) that shuffles [0, num_samples) and the rest apart."""
    dtype = np.int64 if total >= _UINT32_MAX - 1 else np.uint32
    first = np.arange(num_samples, dtype=dtype)
    random_state.shuffle(first)
    if num_samples == total:
        return first
    rest = np.arange(num_samples, total, dtype=dtype)
    random_state.shuffle(rest)
    return np.concatenate((first, rest))


_NO_PAD = -1  # Megatron's pad id when the tokenizer has none: no stored token equals it


@dataclass(frozen=True)
class GPTSampleConfig:
    """How a window of tokens becomes a training sample, Megatron's GPTDatasetConfig fields by name.

    ``pad_id`` fills a short final sample and the last label when ``add_extra_token`` is off;
    as in Megatron, any token equal to it is masked from the loss and replaced by 0. ``None``
    means no pad id: those positions still hold 0 with no loss. ``cu_seqlens_length`` is the
    fixed length of ``cu_seqlens`` (default ``seq_length + 1``, which always fits: every
    token an EOD); a smaller value saves memory and raises InputDataError on a sample holding
    more documents than it fits. ``eod_id`` None (the default) takes the EOD id the store's
    manifest names; a given one must agree with it (ConfigError otherwise, see `resolve_eod`).
    """

    seq_length: int
    eod_id: int | None = None
    pad_id: int | None = None
    add_extra_token: bool = True
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    create_attention_mask: bool = False
    cu_seqlens_length: int | None = None

    def __post_init__(self) -> None:
        """Validate every field, naming the one at fault; fill the cu_seqlens_length default."""
        check_int("seq_length", self.seq_length)
        if self.eod_id is not None:
            check_int("eod_id", self.eod_id, 0, what="a token id")
        if self.pad_id is not None:
            check_int("pad_id", self.pad_id, 0, what="a token id")
            if self.pad_id == self.eod_id:
                raise ConfigError(f"pad_id={self.pad_id} equals eod_id: pass a pad id no document ends with, or None")
        for name in (
            "add_extra_token",
            "reset_position_ids",
            "reset_attention_mask",
            "eod_mask_loss",
            "create_attention_mask",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: pass True or False")
        upper = int(self.seq_length) + 1
        if self.cu_seqlens_length is None:
            object.__setattr__(self, "cu_seqlens_length", upper)
        else:
            what = "the length of cu_seqlens (None: seq_length + 1, the upper bound)"
            object.__setattr__(
                self, "cu_seqlens_length", check_int("cu_seqlens_length", self.cu_seqlens_length, 2, upper, what)
            )


def store_eod_id(store: IndexedDataset) -> int | None:
    """The EOD id the store's manifest records for its tokenizer, or None when it names none."""
    facts = store.facts
    return None if facts is None else facts.eod_id


def resolve_eod(config: GPTSampleConfig, store: IndexedDataset) -> GPTSampleConfig:
    """``config`` with the store's EOD id filled in; ConfigError when it is unknown or disagrees.

    A wrong EOD id is silent otherwise: samples get no document boundaries (no position reset,
    no loss masking), so a given ``eod_id`` must match the one the manifest names.
    """
    recorded = store_eod_id(store)
    if config.eod_id is None:
        if recorded is None:
            raise ConfigError(
                f"{store.prefix}: GPTSampleConfig(eod_id=None) takes the EOD id from the store's manifest, "
                "but it names none (a store written without a tokenizer, or by Megatron); pass eod_id="
            )
        return replace(config, eod_id=recorded)
    if recorded is not None and int(config.eod_id) != recorded:
        raise ConfigError(
            f"{store.prefix}: eod_id={config.eod_id} but the store's manifest says its tokenizer's EOD id is "
            f"{recorded}; documents would get no boundaries. Pass eod_id={recorded}, or None to use the manifest's"
        )
    return config


class GPTDataset(SampleDataset):
    """Fixed-length samples of one split of a token store, sample for sample Megatron's GPTDataset.

    Every sequence of the store is a document, as in Megatron. ``indices`` are the split's
    sequence ids; ``self.document_index`` holds sequence ids (Megatron's layout), the sample
    and shuffle indices are those of ``build_indices``. ``ds[i]`` and ``get_batch`` return
    numpy arrays: Megatron's tokens, labels, loss_mask, position_ids (and attention_mask,
    bool, True = masked, when asked), plus ``cu_seqlens`` (int32 document boundaries in the
    window, flash-attn varlen style, padded to ``cu_seqlens_length`` by repeating
    ``seq_length``: empty trailing documents) and ``max_seqlen``.
    """

    batch_path = True
    fresh_items = True
    _caches = ("_inverse",)
    _inverse: GPTInverse | None = None  # built on the first occurrences() call
    lookups: Callable[[Callable[[], dict[str, np.ndarray]]], dict[str, np.ndarray]] | None = None
    """Keeps occurrences' lookups: called with their builder (the cache entry beside cached indices); None: memory."""

    @renamed_keywords(dataset="store")
    def __init__(
        self,
        store: IndexedDataset,
        indices: np.ndarray,
        num_samples: int,
        config: GPTSampleConfig,
        seed: int,
        *,
        drop_last_partial: bool = True,
    ) -> None:
        _check_inputs(store, config)
        check_bool("drop_last_partial", drop_last_partial)
        checked = _check_indices(indices, len(store))
        positions, sample_index, shuffle_index = build_indices(
            store.sequence_lengths[checked],
            num_samples,
            config.seq_length,
            seed,
            add_extra_token=config.add_extra_token,
            drop_last_partial=drop_last_partial,
        )
        self._adopt(store, checked, checked[positions], sample_index, shuffle_index, config)
        self._recipe(seed, num_samples, drop_last_partial)

    @classmethod
    @renamed_keywords(dataset="store")
    def from_indices(
        cls,
        store: IndexedDataset,
        indices: np.ndarray,
        document_index: np.ndarray,
        sample_index: np.ndarray,
        shuffle_index: np.ndarray,
        config: GPTSampleConfig,
        *,
        seed: int | None = None,
        num_samples: int | None = None,
        drop_last_partial: bool = True,
    ) -> GPTDataset:
        """A dataset over indices built earlier (e.g. loaded from the index cache); ``document_index``
        holds store sequence ids, as ``self.document_index`` does. ``seed`` and ``num_samples``: what
        the indices were built with, when known (a receipt records them, so the dataset can be rebuilt)."""
        _check_inputs(store, config)
        self = cls.__new__(cls)
        self._adopt(store, _check_indices(indices, len(store)), document_index, sample_index, shuffle_index, config)
        self._recipe(seed, num_samples, drop_last_partial)
        return self

    def _recipe(self, seed: int | None, num_samples: int | None, drop_last_partial: bool) -> None:
        """Keep what the indices were built from (None: unknown), so a receipt can name it."""
        self.seed = None if seed is None else check_seed("seed", seed)
        self.num_samples = None if num_samples is None else check_int("num_samples", num_samples)
        self.drop_last_partial = check_bool("drop_last_partial", drop_last_partial)

    def _adopt(
        self,
        dataset: IndexedDataset,
        indices: np.ndarray,
        document_index: np.ndarray,
        sample_index: np.ndarray,
        shuffle_index: np.ndarray,
        config: GPTSampleConfig,
    ) -> None:
        config = resolve_eod(config, dataset)
        # resolve_eod fills eod_id and GPTSampleConfig.__post_init__ cu_seqlens_length
        assert config.eod_id is not None and config.cu_seqlens_length is not None
        self.dataset = dataset
        self.config = config
        self.indices = indices
        self.document_index = document_index
        self.sample_index = sample_index
        self.shuffle_index = shuffle_index
        self._inverse = None
        self._options = FieldOptions(
            seq_length=config.seq_length,
            extra=int(config.add_extra_token),
            eod=config.eod_id,
            pad=_NO_PAD if config.pad_id is None else config.pad_id,
            eod_mask_loss=config.eod_mask_loss,
            reset_position_ids=config.reset_position_ids,
            reset_attention_mask=config.reset_attention_mask,
            create_attention_mask=config.create_attention_mask,
            cu_seqlens_length=config.cu_seqlens_length,
        )

    def __len__(self) -> int:
        return len(self.shuffle_index)

    @property
    def _lengths(self) -> np.ndarray:
        """The store's sequence lengths, asked of the store at each use rather than held: a held view
        would pin its index mapping (and a descriptor), and a blend of thousands of stores would run out."""
        return self.dataset.sequence_lengths

    @property
    def samples_per_epoch(self) -> int:
        """Samples one pass over the split's tokens makes (what an epoch of this dataset means)."""
        tokens_per_epoch = int(self._lengths[self.indices].sum(dtype=np.int64))
        return max(1, (tokens_per_epoch - self._options.extra) // self.config.seq_length)

    def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
        """Sample ``idx`` as a dict of arrays, each equal to a row of ``get_batch([idx])``."""
        index = check_sample_id(idx, len(self))
        rows = np.array([self.shuffle_index.item(index)], dtype=np.int64)
        return {name: array[0] for name, array in self._fields(rows).items()}

    def lineage(self, idx: int) -> SampleLineage:
        """Where sample ``idx`` comes from: the documents and token ranges of its window (tokens and last label)."""
        index = check_sample_id(idx, len(self))
        row = int(self.shuffle_index[index])
        extra = int(self.config.add_extra_token)
        pieces = gpt_pieces(self.document_index, self.sample_index, self._lengths, row, extra, self.dataset.prefix)
        return SampleLineage(index, str(self.dataset.prefix), "GPTDataset", pieces)

    def _occurrences(self, store: str, document: int) -> Occurrences:
        """Every place ``document`` is in a sample: its document-index positions, the sample rows over each
        (binary search), their dataset samples (the shuffle inverted). The lookups are built once: kept as an
        index-cache entry beside the indices when they came from one (``lookups``), else in memory."""
        if store != str(self.dataset.prefix):
            return Occurrences.empty()
        if self._inverse is None:
            prefix, extra = str(self.dataset.prefix), int(self.config.add_extra_token)
            indices = (self.document_index, self.sample_index, self.shuffle_index)

            def build() -> dict[str, np.ndarray]:
                return gpt_inverse_arrays(*indices, self._lengths, extra, prefix)

            arrays = build() if self.lookups is None else self.lookups(build)
            self._inverse = GPTInverse(*indices, self._lengths, extra, prefix, arrays)
        return self._inverse.occurrences(document)

    def get_batch(self, ids: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Samples ``ids`` as a dict of arrays stacked on a leading batch axis, built in one pass."""
        ids = check_sample_ids(ids, len(self))
        return self._fields(self.shuffle_index[ids].astype(np.int64))

    def _fields(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Fields of samples ``rows`` (sample_index rows): straight from a memory map, else from read windows."""
        tokens = self.dataset.token_array()
        if tokens is None:
            return fields_from_windows(self._windows(rows), self._options)
        return fields_from_store(
            tokens,
            self.dataset.sequence_pointers,
            self._lengths,
            self.document_index,
            self.sample_index,
            rows,
            self._options,
            self.dataset.prefix,
        )

    def read_plan(self, ids: Sequence[int] | np.ndarray) -> ReadPlan:
        """The store reads samples ``ids`` make, in order: [(store, documents, offsets, lengths)]."""
        ids = check_sample_ids(ids, len(self))
        _, docs, begin, size = self._pieces(self.shuffle_index[ids].astype(np.int64))
        return [(self.dataset, docs, begin, size)]

    def _windows(self, rows: np.ndarray) -> np.ndarray:
        """The (B, seq_length + extra) int64 token windows of samples ``rows``, pad-filled at the end."""
        width = self.config.seq_length + int(self.config.add_extra_token)
        out = np.full((len(rows), width), self._options.pad, dtype=np.int64)
        sample, docs, begin, size = self._pieces(rows)
        if len(size) and int(np.bincount(sample, size).max()) > width:
            self._bad_indices("sample_index")
        ends = np.cumsum(size)  # each token's column: its place among its sample's pieces
        counts = np.bincount(sample, minlength=len(rows))
        sample_start = np.repeat((ends - size)[np.cumsum(counts) - counts], counts)
        columns = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(sample_start, size)
        out[np.repeat(sample, size), columns] = self.dataset.get_pieces(docs, begin, size)
        return out

    def _pieces(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sample, document, token offset, length) of each document piece of samples ``rows``
        (sample_index rows), in sample order; refuses indices that would read outside the store."""
        extra = int(self.config.add_extra_token)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) + 1 >= len(self.sample_index)):
            self._bad_indices("shuffle_index")
        first_pos, first_off = self.sample_index[rows].astype(np.int64).T
        last_pos, last_off = self.sample_index[rows + 1].astype(np.int64).T
        if len(rows) and (
            int(first_pos.min()) < 0
            or bool((last_pos < first_pos).any())
            or int(last_pos.max()) >= len(self.document_index)
        ):
            self._bad_indices("sample_index")
        counts = last_pos - first_pos + 1
        sample = np.repeat(np.arange(len(rows)), counts)
        starts_at = np.repeat(np.cumsum(counts) - counts, counts)
        position = np.repeat(first_pos, counts) + np.arange(len(sample)) - starts_at
        docs = self.document_index[position].astype(np.int64)
        if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= len(self._lengths)):
            self._bad_indices("document_index")
        begin = np.where(position == first_pos[sample], first_off[sample], 0)
        end = np.where(position == last_pos[sample], last_off[sample] + extra, self._lengths[docs])
        size = end - begin
        if len(size) and (bool((begin < 0).any()) or bool((end > self._lengths[docs]).any()) or bool((size < 0).any())):
            self._bad_indices("sample_index")
        return sample, docs, begin, size

    @property
    def store(self) -> IndexedDataset:
        """The token store the samples are cut from (``dataset``: its older name, kept)."""
        return self.dataset

    def stores(self) -> tuple[IndexedDataset, ...]:
        return (self.dataset,)

    def describe(self, describer: Describer) -> dict[str, Any]:
        """Its store, sample config, split documents, a digest of its indices, and its recipe when known."""
        indices = (self.document_index, self.sample_index, self.shuffle_index)
        return {
            "store": describer.store(self.dataset),
            "sample_config": plain(dataclasses.asdict(self.config)),
            "documents": {"count": len(self.indices), "digest": digest(self.indices)},
            "order": kept_while_frozen(self, "order", indices, lambda: digest(*indices)),
            "build": None
            if self.seed is None or self.num_samples is None
            else {
                "seed": self.seed,
                "num_samples": self.num_samples,
                "drop_last_partial": self.drop_last_partial,
                "documents": id_runs(self.indices),
            },
        }

    @classmethod
    def from_description(cls, node: Mapping[str, Any], rebuilder: Rebuilder) -> GPTDataset:
        """The GPT dataset a receipt node describes, its indices built again from its store."""
        recipe = rebuilder.recipe(node, _GPTBuild)
        config = GPTSampleConfig(**node["sample_config"])
        indices = rebuilder.ids(recipe.documents, "documents")
        store = rebuilder.open(node)
        return cls(
            store,
            np.arange(len(store), dtype=np.int64) if indices is None else indices,
            recipe.num_samples,
            config,
            recipe.seed,
            drop_last_partial=recipe.drop_last_partial,
        )

    def _bad_indices(self, field: str) -> NoReturn:
        """Refuse sample indices that would read outside the store (the memory-map kernel's check)."""
        raise CorruptStoreError(
            f"{self.dataset.prefix}: {field} points outside the documents of the store; the sample "
            "indices do not belong to this store or are damaged: delete their cache entry and rebuild them"
        )


def _check_inputs(store: object, config: object) -> None:
    """Raise ConfigError unless ``store`` is a token store and ``config`` a GPTSampleConfig."""
    if not isinstance(store, IndexedDataset):
        raise ConfigError(
            f"store={store!r:.80} is invalid: pass a token store (tokenport.IndexedDataset) as store= "
            "(formerly dataset=)"
        )
    if not isinstance(config, GPTSampleConfig):
        raise ConfigError(f"config={config!r:.80} is invalid: pass a GPTSampleConfig")


def _check_indices(indices: np.ndarray, count: int) -> np.ndarray:
    """Return the split's sequence ids as a 1-D int64 array, or raise ConfigError."""
    array = np.asarray(indices)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ConfigError(
            f"indices must be a 1-D integer array of sequence ids, got shape {array.shape} dtype {array.dtype}"
        )
    if len(array) and (int(array.min()) < 0 or int(array.max()) >= count):
        raise ConfigError(f"indices hold sequence ids outside [0, {count}): pass ids of this token store")
    return array.astype(np.int64, copy=False)


class _GPTBuild(Document, frozen=True):
    """A GPTDataset's recipe: its seed, sample count, last-partial rule and split documents (None: too many runs)."""

    seed: Int64
    num_samples: Count
    drop_last_partial: bool
    documents: list[tuple[Count, Count]] | None


register_dataset_kind("GPTDataset", GPTDataset)

"""``build_datasets``: a blend spec, a split and sizes to the train/valid/test datasets of a run.

Megatron's ``BlendedMegatronDatasetBuilder`` in structure: each split of each store becomes a
GPTDataset, then one BlendedDataset per split (a single store without weights needs no blend).
What differs is how big each child is. By default the blending indices are built first and each
child gets exactly the samples the blend takes from it, so no index can run past a child's end.
With ``algorithm="megatron"`` the children are sized as Megatron sizes them
(``ceil(ceil(size * w) * (1 + surplus))``; the blend takes ``sum(ceil(size * w))`` samples), since
a child's size changes its own indices and exactness needs the same ones; a blend that would
then read past a child's end is refused, naming the dataset and the surplus that would do.
Every index goes through the index cache when one is given; a weighted blend of GPT children is
one entry (its blending indices and every child's, see ``blend_entry.pack_children``), and its stores are
opened lazily, on the first read of one of their samples; a reopen whose stores' files have not
changed since takes the entry's key from a stat record and reads no manifest (see ``stat_record``).
A blend with a mixture schedule follows it over the training stream; its valid and test blends
hold the mixture training ends with.

With an `SFTConfig` each child is an `SFTDataset` over the conversations of its split (the same
document ranges) and the store must be a chat store. A child asked for more samples than its split
packs into serves epochs, each in a new order (see `SFTDataset`), rather than being read modulo its
length; ``sizes=None`` without weights takes one epoch of every store. SFT rows are packed when
the dataset is made (the blending indices still go through the cache); children of one blend get
``cu_seqlens`` of one width, so their batches stack.

A prepare output directory in any store list stands for its parts, in order, a weight shared by
their token counts (`Blend.with_parts`). A store the train split reads more than
``OVERSAMPLING_EPOCHS`` (16) times warns once (`OversamplingWarning`, naming it and what to do).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._checks import check_int, is_int
from ..blend import BlendedDataset, MixtureSchedule, build_blending_indices, build_scheduled_indices
from ..blend.oversampling import Oversampled, oversampled, warn_oversampled
from ..errors import ConfigError
from ..indexed import IndexedDataset, StoreFacts
from ..indexed.same_tokenizer import check_same_tokenizer, store_tokenizer
from ..samples.gpt import GPTDataset, GPTSampleConfig
from ..samples.sft import SFTConfig, SFTDataset
from .blend_entry import ChildJob, build_children_in_processes, pack_children, unpacker
from .cache import IndexCache, _key, canonical_json, store_identity
from .gpt_datasets import IndexRequest, blend_lookups, build_gpt_dataset, gpt_index_request
from .specs import Blend, BlendSpec, blend_from_list, load_blend_spec, megatron_normalize
from .splits import SPLIT_NAMES, split_document_ranges
from .stat_record import StatRecord

Dataset = GPTDataset | SFTDataset | BlendedDataset


def build_datasets(
    spec: BlendSpec | Blend | Sequence[str],
    *,
    sizes: Sequence[int | None],
    config: GPTSampleConfig | SFTConfig,
    seed: int,
    split: str = "969,30,1",
    cache: IndexCache | str | os.PathLike | None = None,
    algorithm: str = "tijdeman",
    surplus: float = 0.005,
    drop_last_partial_validation: bool = True,
    workers: int = 1,
    allow_mixed_tokenizers: bool = False,
) -> tuple[Dataset | None, Dataset | None, Dataset | None]:
    """The (train, valid, test) datasets of ``spec``; None where a split has no data or no samples.

    ``spec`` is a spec file (see `load_blend_spec`), a BlendSpec, a Blend, or Megatron's ``--data-path``
    list (``["0.3", "a", "0.7", "b"]`` or bare prefixes, weighted by size; a directory: see the module doc).
    ``sizes``: samples per split: 0 for none; None, without weights, for one epoch of every store, each once.
    ``split`` divides every store of a shared blend, Megatron's way; per-split blends use their
    stores whole. ``config``: a GPTSampleConfig for GPT samples, an SFTConfig for SFT samples of
    chat stores (see the module doc). ``workers`` > 1: processes that build the children's indices
    of a weighted GPT blend when its cache entry is missing (a blend of thousands of stores).
    Every store of the run must be made with one tokenizer (its manifest's identity; a store that
    records none is not compared): ConfigError naming two that differ, unless
    ``allow_mixed_tokenizers`` (for tokenizers known to share ids; see `indexed.same_tokenizer`).
    """
    if not isinstance(config, (GPTSampleConfig, SFTConfig)):
        raise ConfigError(f"config: expected a GPTSampleConfig or an SFTConfig, got {type(config).__name__}")
    spec = _as_spec(spec).with_parts()  # a prepare output directory stands for its parts
    sizes = _check_sizes(sizes)
    if isinstance(surplus, bool) or not isinstance(surplus, (int, float)) or not -1e6 < surplus < 1e6:
        raise ConfigError(
            f"surplus={surplus!r} is invalid: pass a finite fraction such as Megatron's 0.005 (megatron-core "
            "takes any: below 0 a store is sized below its share of the blend but still holds whole epochs)"
        )
    if isinstance(cache, (str, os.PathLike)):
        cache = IndexCache(cache)
    workers = check_int("workers", workers, 1, what="worker processes")
    check_same_tokenizer((), allow_mixed_tokenizers=allow_mixed_tokenizers)  # refuse a non-bool before any work
    builder = _Builder(config, seed, cache, algorithm, surplus, drop_last_partial_validation, workers)
    builder.allow_mixed_tokenizers = allow_mixed_tokenizers
    if spec.per_split is not None:  # every split's stores before any split is built (and cached)
        for i, blend in enumerate(spec.per_split):
            if blend is not None and sizes[i] != 0:
                builder.check_blend(blend, SPLIT_NAMES[i])
    out: list[Dataset | None] = []
    for i, which in enumerate(SPLIT_NAMES):
        if spec.blend is None:
            assert spec.per_split is not None  # BlendSpec holds exactly one of blend and per_split
            blend = spec.per_split[i]
        else:
            blend = spec.blend
        split_string = split if spec.blend is not None else ",".join("1" if k == i else "0" for k in range(3))
        if blend is None or split_document_ranges(split_string, 1)[i] is None:
            out.append(None)
        else:
            out.append(builder.split(blend, split_string, which, sizes[i]))
    warn_oversampled(_oversampled_in_training(out[0]))
    return out[0], out[1], out[2]


def _oversampled_in_training(train: Dataset | None) -> list[Oversampled]:
    """The stores the train dataset reads more than OVERSAMPLING_EPOCHS times (evaluation repeats are not flagged)."""
    if isinstance(train, BlendedDataset):
        return oversampled(train.datasets, train.samples_per_dataset().tolist(), "the train split's blend")
    if train is None:
        return []
    asked = train.num_samples if isinstance(train, GPTDataset) and train.num_samples is not None else len(train)
    return oversampled([train], [asked], "the train split")  # its samples asked, not its whole epochs


def _as_spec(spec: Any) -> BlendSpec:
    """A BlendSpec from any of the accepted forms."""
    if isinstance(spec, BlendSpec):
        return spec
    if isinstance(spec, Blend):
        return BlendSpec(blend=spec)
    if isinstance(spec, (str, os.PathLike)):
        return load_blend_spec(spec)
    if isinstance(spec, (list, tuple)) and all(isinstance(item, str) for item in spec):
        return BlendSpec(blend=blend_from_list(spec))
    raise ConfigError(
        f"spec: expected a spec file path, a BlendSpec, a Blend or a Megatron --data-path list of strings, "
        f"got {type(spec).__name__}"
    )


def _check_sizes(sizes: Any) -> tuple[int | None, ...]:
    """Three sample counts (None or integers >= 0)."""
    values = tuple(sizes) if isinstance(sizes, (list, tuple)) else ()
    if len(values) != len(SPLIT_NAMES) or not all(v is None or (is_int(v) and v >= 0) for v in values):
        raise ConfigError(f"sizes={sizes!r}: expected (train, valid, test) sample counts, integers >= 0 or None")
    return tuple(None if v is None else int(v) for v in values)


class _Builder:
    """The per-run constants of one ``build_datasets`` call and the stores it opened."""

    def __init__(
        self,
        config: GPTSampleConfig | SFTConfig,
        seed: int,
        cache: IndexCache | None,
        algorithm: str,
        surplus: float,
        drop_last_partial_validation: bool,
        workers: int = 1,
    ) -> None:
        self.config = config
        self.workers = workers
        self.seed = seed
        self.cache = cache
        self.algorithm = algorithm
        self.surplus = surplus
        self.drop_last_partial_validation = drop_last_partial_validation
        self._stores: dict[str, IndexedDataset] = {}
        self._eod: tuple[str, int] | None = None  # the first child's store and EOD id
        self.allow_mixed_tokenizers = False
        self._tokenizer: tuple[str, str] | None = None  # the first store with a known tokenizer, and its identity

    def check_blend(self, blend: Blend, which: str) -> None:
        """The tokenizers of ``blend``'s stores, before anything of it is built or cached; a weighted blend
        of GPT children that is one cache entry checks them itself (from its stat record's facts, when known)."""
        weighted = blend.weights is not None if blend.schedule is None else which != "train"
        if weighted and self._one_entry():
            return
        prefixes = blend.prefixes if blend.schedule is not None else blend.without_zero_weights().prefixes
        self._check_tokenizers([self.store(p) for p in prefixes])

    def _check_tokenizers(self, stores: Sequence[IndexedDataset]) -> None:
        """Every store of the run made with one tokenizer (the shared check; identities from the stores' facts,
        so a reopen through a stat record reads no manifest for it)."""
        pairs = ((store.prefix, store_tokenizer(store)) for store in stores)
        first = [self._tokenizer] if self._tokenizer is not None else []
        self._tokenizer = check_same_tokenizer(
            itertools.chain(first, pairs), allow_mixed_tokenizers=self.allow_mixed_tokenizers, what="build_datasets"
        )

    def store(self, prefix: str, facts: StoreFacts | None = None) -> IndexedDataset:
        """Each store made once per build, lazily: its files are opened by the first read that needs them
        (``facts``: its manifest's, known from a stat record, so the manifest is not read)."""
        if prefix not in self._stores:
            self._stores[prefix] = IndexedDataset(prefix, lazy=True, facts=facts)
        return self._stores[prefix]

    def split(self, blend: Blend, split: str, which: str, size: int | None) -> Dataset | None:
        """One split's dataset: a single GPTDataset, or a blend of one per store."""
        if size == 0:
            return None
        self.check_blend(blend, which)
        if blend.schedule is not None:
            if which == "train":
                return self._blend_scheduled(blend, blend.schedule, split, which, size)
            # evaluation blends hold the mixture training ends with
            blend = Blend(blend.prefixes, blend.schedule.phases[-1].end_weights)
        blend = blend.without_zero_weights()
        if len(blend.prefixes) == 1 and blend.weights is None:
            return self.child(blend.prefixes[0], split, which, size)
        if blend.weights is None:
            return self._blend_by_size(blend, split, which, size)
        if size is None:
            raise ConfigError(
                f"sizes: the {which} blend has weights but no size; give its sample count "
                "(only blends weighted by size can take every sample once)"
            )
        weights = megatron_normalize(blend.weights)
        if self.algorithm == "megatron":
            return self._blend_like_megatron(blend, weights, split, which, size)
        recipe = {"weights": list(weights), "size": size, "algorithm": self.algorithm}

        def counts_of(dataset_index: np.ndarray) -> list[int]:
            return np.bincount(dataset_index, minlength=len(weights)).tolist()

        if self._one_entry():
            blend_build = functools.partial(build_blending_indices, np.asarray(weights), size, algorithm=self.algorithm)
            return self._gpt_blend(blend, split, which, recipe, blend_build, counts_of)
        dataset_index, sample_index = self.blending_indices(weights, size, self.algorithm)
        counts = counts_of(dataset_index)
        children = [self.child(p, split, which, n) if n else _Unused() for p, n in zip(blend.prefixes, counts)]
        return BlendedDataset.from_indices(
            _aligned(children),
            dataset_index,
            sample_index,
            recipe=recipe,
            allow_mixed_tokenizers=self.allow_mixed_tokenizers,
        )

    def _one_entry(self) -> bool:
        """Whether a weighted blend's indices go to the cache as one entry (GPT children, a cache given)."""
        return self.cache is not None and isinstance(self.config, GPTSampleConfig)

    def _gpt_blend(
        self,
        blend: Blend,
        split: str,
        which: str,
        recipe: dict[str, Any],
        blend_build: Callable[[], tuple[np.ndarray, np.ndarray]],
        counts_of: Callable[[np.ndarray], list[int]],
        surplus: float | None = None,
    ) -> BlendedDataset:
        """A blend of GPT children whose indices (the blend's and every child's) are one cache entry:
        one file mapped once and one fsync however many stores, each store read only for its identity.
        ``counts_of`` gives each child's sample count from the blend's dataset index (``surplus``, which
        Megatron's sizing depends on, is part of the key)."""
        assert self.cache is not None and isinstance(self.config, GPTSampleConfig)
        config = self.config
        stores: list[IndexedDataset] = []  # made by _gpt_blend_entry, from the stat record's facts or the manifests
        drop_last = which != "valid" or self.drop_last_partial_validation
        request = functools.partial(self._gpt_request, blend, stores, split, which, drop_last)

        def build() -> dict[str, np.ndarray]:
            dataset_index, sample_index = blend_build()
            arrays = {"dataset_index": dataset_index, "dataset_sample_index": sample_index}
            wanted = [(d, n) for d, n in enumerate(counts_of(dataset_index)) if n]
            if self.workers > 1 and len(wanted) > 1:
                job = ChildJob(config.seq_length, self.seed, split, which, config.add_extra_token, drop_last)
                built = build_children_in_processes(job, blend.prefixes, wanted, self.workers)
            else:
                built = {d: request(d, n).build() for d, n in wanted}
            arrays.update(pack_children(built, len(stores)))
            return arrays

        params = {
            "kind": "gpt-blend",
            "blend": recipe,
            "split": split,
            "which": which,
            "seq_length": config.seq_length,
            "seed": self.seed,
            "add_extra_token": config.add_extra_token,
            "drop_last_partial": drop_last,
            "surplus": surplus,
        }
        arrays, key = self._gpt_blend_entry(blend.prefixes, params, stores, build)
        unpack = unpacker(arrays)
        children: list[Any] = [
            self._gpt_child(blend.prefixes[d], stores[d], request(d, n).indices, unpack(d), n, drop_last)
            if n
            else _Unused()
            for d, n in enumerate(counts_of(arrays["dataset_index"]))
        ]
        blended = BlendedDataset.from_indices(
            children,
            arrays["dataset_index"],
            arrays["dataset_sample_index"],
            recipe=recipe,
            allow_mixed_tokenizers=self.allow_mixed_tokenizers,
        )
        return blend_lookups(self.cache, blended, key)

    def _gpt_request(
        self, blend: Blend, stores: list[IndexedDataset], split: str, which: str, drop_last: bool, d: int, n: int
    ) -> IndexRequest:
        """The index request of child ``d`` of a GPT blend, for ``n`` samples; ConfigError names its store."""
        assert isinstance(self.config, GPTSampleConfig)
        try:
            made = gpt_index_request(
                stores[d],
                n,
                self.config.seq_length,
                self.seed,
                split=split,
                which=which,
                add_extra_token=self.config.add_extra_token,
                drop_last_partial=drop_last,
            )
        except ConfigError as exc:
            raise ConfigError(f"{blend.prefixes[d]}, {which} split of {split!r}: {exc}") from None
        assert made is not None  # a nonzero-weight split
        return made

    def _gpt_blend_entry(
        self,
        prefixes: Sequence[str],
        params: dict[str, Any],
        stores: list[IndexedDataset],
        build: Callable[[], dict[str, np.ndarray]],
    ) -> tuple[dict[str, np.ndarray], str]:
        """A GPT blend's cache entry and its key, its ``stores`` opened on the way: the key from the stat record
        when no store changed since, else from the stores' manifests (then the record is written)."""
        assert self.cache is not None
        canonical_json(params)  # refuse what cannot be a key before building
        record = StatRecord(self.cache.directory, prefixes, params)
        known = record.lookup()
        arrays = None
        if known is not None:  # no store changed since its manifest was read: the key is known
            key, facts = known
            stores[:] = [self.store(p, f) for p, f in zip(prefixes, facts)]
            self._check_tokenizers(stores)
            arrays = self.cache.load(key)  # None when the entry is gone: then the long way below
        if arrays is None:
            stats = record.stats()  # before the manifests are read, so a change meanwhile is seen next time
            stores[:] = [self.store(p) for p in prefixes]
            self._check_tokenizers(stores)
            identity = {"stores": [store_identity(store) for store in stores]}
            key = _key(identity, params)
            arrays = self.cache.get_or_build_for(identity, params, build, source=f"a blend of {len(stores)} stores")
            record.write(stats, stores, key)
        return arrays, key

    def _gpt_child(
        self,
        prefix: str,
        store: IndexedDataset,
        indices: np.ndarray,
        unpacked: tuple[np.ndarray, np.ndarray, np.ndarray],
        n: int,
        drop_last: bool,
    ) -> GPTDataset:
        """Child ``prefix`` of a GPT blend over its indices from the entry; its EOD checked against the store's."""
        assert isinstance(self.config, GPTSampleConfig)
        dataset = GPTDataset.from_indices(
            store, indices, *unpacked, self.config, seed=self.seed, num_samples=n, drop_last_partial=drop_last
        )
        assert dataset.config.eod_id is not None  # resolved from the store or checked against it
        self._check_eod(prefix, dataset.config.eod_id)
        return dataset

    def _blend_scheduled(
        self, blend: Blend, schedule: MixtureSchedule, split: str, which: str, size: int | None
    ) -> BlendedDataset:
        """A blend whose weights follow its ``schedule`` over the training stream; children sized exactly."""
        if size is None:
            raise ConfigError(f"sizes: the {which} blend has a schedule but no size; give its sample count")

        def build() -> dict[str, np.ndarray]:
            dataset_index, sample_index = build_scheduled_indices(schedule, size, algorithm=self.algorithm)
            return {"dataset_index": dataset_index, "dataset_sample_index": sample_index}

        params = {"kind": "scheduled-blend", "schedule": schedule.to_data(), "size": size, "algorithm": self.algorithm}
        arrays = self._cached(params, build)
        counts = np.bincount(arrays["dataset_index"], minlength=len(blend.prefixes)).tolist()
        children = [self.child(p, split, which, n) if n else _Unused() for p, n in zip(blend.prefixes, counts)]
        return BlendedDataset.from_indices(
            _aligned(children),
            arrays["dataset_index"],
            arrays["dataset_sample_index"],
            schedule=schedule,
            recipe={"schedule": schedule.to_data(), "size": size, "algorithm": self.algorithm},
            allow_mixed_tokenizers=self.allow_mixed_tokenizers,
        )

    def _blend_by_size(self, blend: Blend, split: str, which: str, size: int | None) -> BlendedDataset:
        """Megatron's blend without weights: each child one epoch, weighted by its sample count."""
        children = [self.child(p, split, which, None) for p in blend.prefixes]
        lengths = [len(child) for child in children]
        total = None if size is None else min(size, sum(lengths))
        # the lengths as weights: build_blending_indices normalizes them once, as Megatron's BlendedDataset does
        dataset_index, sample_index = self.blending_indices(lengths, total, self.algorithm)
        recipe = {"weights": list(lengths), "size": total, "algorithm": self.algorithm}
        return BlendedDataset.from_indices(
            _aligned(children),
            dataset_index,
            sample_index,
            recipe=recipe,
            allow_mixed_tokenizers=self.allow_mixed_tokenizers,
        )

    def _blend_like_megatron(
        self, blend: Blend, weights: list[float], split: str, which: str, size: int
    ) -> BlendedDataset:
        """Children and blend sized exactly as megatron-core sizes them, so every index matches."""
        targets = [int(math.ceil(size * w)) for w in weights]
        # a size <= 0 (a surplus <= -1) gets one epoch from megatron-core, as 1 does (an epoch holds a sample)
        built = [max(1, int(math.ceil(t * (1 + self.surplus)))) for t in targets]
        # Megatron's BlendedDataset normalizes the (already normalized) weights once more, as
        # build_blending_indices does: given them, its greedy compares the very floats Megatron's does
        recipe = {"weights": list(weights), "size": sum(targets), "algorithm": "megatron"}

        def sizes_of(dataset_index: np.ndarray) -> list[int]:
            return built

        if self._one_entry():
            blend_build = functools.partial(
                build_blending_indices, np.asarray(weights), sum(targets), algorithm="megatron"
            )
            blended = self._gpt_blend(blend, split, which, recipe, blend_build, sizes_of, surplus=self.surplus)
        else:
            dataset_index, sample_index = self.blending_indices(weights, sum(targets), "megatron")
            children = [self.child(p, split, which, n) for p, n in zip(blend.prefixes, built)]
            blended = BlendedDataset.from_indices(
                _aligned(children),
                dataset_index,
                sample_index,
                recipe=recipe,
                allow_mixed_tokenizers=self.allow_mixed_tokenizers,
            )
        self._check_megatron_reach(blend, blended, targets)
        return blended

    def _check_megatron_reach(self, blend: Blend, blended: BlendedDataset, targets: list[int]) -> None:
        """Refuse, as megatron-core's BlendedDataset does (its IndexError), a blend that takes more samples from
        a child than the child holds; a child holds whole epochs, so it may serve more than it was sized for."""
        taken = blended.samples_per_dataset().tolist()
        for d, (need, child) in enumerate(zip(taken, blended.datasets)):
            if need > len(child):
                raise ConfigError(
                    f"{blend.prefixes[d]}: the Megatron blend takes {need} samples from it but, sized as Megatron "
                    f"sizes it (surplus {self.surplus}), it holds {len(child)}; megatron-core refuses this blend "
                    f"too: raise surplus to at least {need / max(targets[d], 1) - 1:.4f}, or use the default "
                    "algorithm, which sizes every dataset exactly"
                )

    def child(self, prefix: str, split: str, which: str, num_samples: int | None) -> GPTDataset | SFTDataset:
        """The ``which`` split (of nonzero weight) of one store with ``num_samples`` samples (None: one epoch)."""
        store = self.store(prefix)
        self._check_tokenizers([store])
        config = self.config
        if isinstance(config, SFTConfig):
            return self._sft_child(store, config, split, which, num_samples)
        if num_samples is None:
            num_samples = self._one_epoch(store, config, split, which)
        drop_last = which != "valid" or self.drop_last_partial_validation
        try:
            dataset = build_gpt_dataset(
                store,
                num_samples,
                config,
                self.seed,
                split=split,
                which=which,
                cache=self.cache,
                drop_last_partial=drop_last,
            )
        except ConfigError as exc:
            raise ConfigError(f"{prefix}, {which} split of {split!r}: {exc}") from None
        assert dataset is not None and dataset.config.eod_id is not None  # a nonzero-weight split, its EOD resolved
        self._check_eod(prefix, dataset.config.eod_id)
        return dataset

    def _sft_child(
        self, store: IndexedDataset, config: SFTConfig, split: str, which: str, num_samples: int | None
    ) -> SFTDataset:
        """The conversations of one store's ``which`` split as an SFTDataset of ``num_samples`` (None: one epoch)."""
        bounds = split_document_ranges(split, len(store))[SPLIT_NAMES.index(which)]
        assert bounds is not None  # build_datasets builds no zero-weight split
        ids = np.arange(bounds[0], bounds[1], dtype=np.int64)
        try:
            dataset = SFTDataset.from_config(store, config, seed=self.seed, ids=ids, num_samples=num_samples)
        except ConfigError as exc:
            raise ConfigError(f"{store.prefix}, {which} split of {split!r}: {exc}") from None
        if len(dataset) == 0:
            raise ConfigError(
                f"{store.prefix}: its {which} split ({len(ids)} conversations) gives no SFT sample of "
                f"{config.seq_length} tokens; give it a larger share of the split, or drop it"
            )
        return dataset

    def _check_eod(self, prefix: str, eod_id: int) -> None:
        """Every store of a run ends documents with one EOD id; ConfigError naming two that differ."""
        if self._eod is None:
            self._eod = (prefix, eod_id)
        elif self._eod[1] != eod_id:
            first, first_eod = self._eod
            raise ConfigError(
                f"{prefix} ends documents with EOD id {eod_id} but {first} with {first_eod}: their tokenizers "
                "differ; blend stores made with one tokenizer"
            )

    def _one_epoch(self, store: IndexedDataset, config: GPTSampleConfig, split: str, which: str) -> int:
        """The samples in one epoch of a store's split: what Megatron builds when given no count."""
        bounds = split_document_ranges(split, len(store))[SPLIT_NAMES.index(which)]
        assert bounds is not None  # build_datasets builds no zero-weight split
        tokens = int(store.sequence_lengths[bounds[0] : bounds[1]].sum(dtype=np.int64))
        count = (tokens - int(config.add_extra_token)) // config.seq_length
        if count < 1:
            raise ConfigError(
                f"{store.prefix}: its {which} split holds {tokens} tokens, less than one sample of "
                f"{config.seq_length}; give it a weight, a larger share of the split, or drop it"
            )
        return count

    def blending_indices(
        self, weights: Sequence[float], size: int | None, algorithm: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """The blending indices, from the cache when there is one (they depend on nothing else)."""

        def build() -> dict[str, np.ndarray]:
            dataset_index, sample_index = build_blending_indices(np.asarray(weights), size, algorithm=algorithm)
            return {"dataset_index": dataset_index, "dataset_sample_index": sample_index}

        params = {"kind": "blend", "weights": [float(w) for w in weights], "size": size, "algorithm": algorithm}
        arrays = self._cached(params, build)
        return arrays["dataset_index"], arrays["dataset_sample_index"]

    def _cached(self, params: dict[str, Any], build: Any) -> dict[str, np.ndarray]:
        """Arrays that depend on ``params`` alone: from the cache when there is one, else built."""
        if self.cache is None:
            return build()
        canonical_json(params)  # refuse what cannot be a key before building
        return self.cache.get_or_build_for({}, params, build, source=params["kind"])


def _aligned(children: list[Any]) -> list[Any]:
    """``children``, its SFTDatasets widened to one ``cu_seqlens`` length so a blend's batches stack."""
    sft = [child for child in children if isinstance(child, SFTDataset)]
    width = max((child.cu_seqlens_length for child in sft), default=0)
    for child in sft:
        child.widen_cu_seqlens(width)
    return children


class _Unused:
    """A blend's place for a dataset it takes no sample from (a weight too small for the size)."""

    def __len__(self) -> int:
        return 0

    def __getitem__(self, idx: int) -> Any:
        raise IndexError("this dataset supplies no samples to the blend")

"""A split of one token store as a GPTDataset, its indices built once and then taken from the cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..blend import BlendedDataset
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..samples.gpt import GPTDataset, GPTSampleConfig, build_indices
from .cache import IndexCache, cache_key
from .splits import SPLIT_NAMES, split_document_ranges


def build_gpt_dataset(
    store: IndexedDataset,
    num_samples: int,
    config: GPTSampleConfig,
    seed: int,
    *,
    split: str = "1",
    which: str = "train",
    cache: IndexCache | None = None,
    drop_last_partial: bool = True,
) -> GPTDataset | None:
    """The `which` split of `store` as a GPTDataset, its indices taken from `cache` when given.

    Returns None when the split has zero weight (Megatron builds no dataset for it). The cache
    key holds every parameter that changes the indices, so a hit is always the right entry.
    """
    request = gpt_index_request(
        store,
        num_samples,
        config.seq_length,
        seed,
        split=split,
        which=which,
        add_extra_token=config.add_extra_token,
        drop_last_partial=drop_last_partial,
    )
    if request is None:
        return None
    arrays = cache.get_or_build(store, request.params, request.build) if cache is not None else request.build()
    dataset = GPTDataset.from_indices(
        store,
        request.indices,
        arrays["document_index"],
        arrays["sample_index"],
        arrays["shuffle_index"],
        config,
        seed=seed,
        num_samples=num_samples,
        drop_last_partial=drop_last_partial,
    )
    if cache is not None:  # occurrences' lookups: an entry of their own, keyed by these indices' entry
        dataset.lookups = occurrence_lookups(cache, {"gpt_indices": cache_key(store, request.params)}, store.prefix)
    return dataset


OCCURRENCES = {"kind": "occurrences", "format": 1}
"""The cache parameters of a dataset's occurrences lookups (samples/inverse.py, blend/inverse.py)."""


def occurrence_lookups(cache: IndexCache, identity: dict[str, Any], source: str) -> Any:
    """A dataset's ``lookups``: its occurrences lookups as the cache entry of ``identity`` (the entry of the
    indices they invert), built on the first query, memory-mapped after; no barrier (one rank asks)."""
    return partial(cache.get_or_build_for, identity, OCCURRENCES, source=source, distributed=False)


def blend_lookups(cache: IndexCache, blend: BlendedDataset, key: str) -> BlendedDataset:
    """``blend`` (of GPT children, its indices the cache entry ``key``) with its and its GPT children's
    occurrences lookups kept as cache entries keyed by that entry."""
    for d, child in enumerate(blend.datasets):
        if isinstance(child, GPTDataset):
            child.lookups = occurrence_lookups(cache, {"gpt_blend": key, "child": d}, str(child.dataset.prefix))
    blend.lookups = occurrence_lookups(cache, {"gpt_blend": key}, f"a blend of {len(blend.datasets)} stores")
    return blend


@dataclass(frozen=True)
class IndexRequest:
    """One split's GPT indices to build or load: its sequence ids, its cache parameters and its builder."""

    indices: np.ndarray
    params: dict[str, Any]
    build: Callable[[], dict[str, np.ndarray]]


def gpt_index_request(
    store: IndexedDataset,
    num_samples: int,
    seq_length: int,
    seed: int,
    *,
    split: str = "1",
    which: str = "train",
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> IndexRequest | None:
    """What building the `which` split's indices takes (None for a zero-weight split)."""
    if which not in SPLIT_NAMES:
        raise ConfigError(f"which={which!r}: expected one of {', '.join(SPLIT_NAMES)}")
    bounds = split_document_ranges(split, len(store))[SPLIT_NAMES.index(which)]
    if bounds is None:
        return None
    if bounds[0] == bounds[1]:
        raise ConfigError(
            f"{store.prefix}: the {which} split of {split!r} holds none of its {len(store)} documents "
            f"(Megatron's rounding gives it [{bounds[0]}, {bounds[1]})); give {which} a larger share of the "
            f"split, ask 0 {which} samples, or use a store with more documents"
        )
    indices = np.arange(*bounds, dtype=np.int64)
    params = {
        "kind": "gpt",
        "documents": list(bounds),
        "num_samples": num_samples,
        "seq_length": seq_length,
        "seed": seed,
        "add_extra_token": add_extra_token,
        "drop_last_partial": drop_last_partial,
    }

    def build() -> dict[str, np.ndarray]:
        positions, sample_index, shuffle_index = build_indices(
            store.read_sequence_lengths()[indices],
            num_samples,
            seq_length,
            seed,
            add_extra_token=add_extra_token,
            drop_last_partial=drop_last_partial,
        )
        return {"document_index": indices[positions], "sample_index": sample_index, "shuffle_index": shuffle_index}

    return IndexRequest(indices, params, build)

"""From stores to the datasets a run trains on: Megatron's splits, blend specs, the index cache, builders."""

from .cache import CACHE_FORMAT, IndexCache, cache_key, canonical_json, store_identity
from .datasets import build_datasets
from .gpt_datasets import IndexRequest, build_gpt_dataset, gpt_index_request
from .specs import (
    Blend,
    BlendSpec,
    blend_from_args_file,
    blend_from_list,
    blend_per_split_from_json,
    load_blend_spec,
    megatron_normalize,
)
from .splits import SPLIT_NAMES, parse_split, split_document_ranges

__all__ = [
    "Blend",
    "BlendSpec",
    "CACHE_FORMAT",
    "IndexCache",
    "IndexRequest",
    "SPLIT_NAMES",
    "blend_from_args_file",
    "blend_from_list",
    "blend_per_split_from_json",
    "build_datasets",
    "build_gpt_dataset",
    "cache_key",
    "canonical_json",
    "gpt_index_request",
    "load_blend_spec",
    "megatron_normalize",
    "parse_split",
    "split_document_ranges",
    "store_identity",
]

"""From stores to the datasets a run trains on: Megatron's splits, the index cache, dataset builders."""

from .cache import CACHE_FORMAT, IndexCache, cache_key, canonical_json, store_identity
from .gpt_datasets import IndexRequest, build_gpt_dataset, gpt_index_request
from .splits import SPLIT_NAMES, parse_split, split_document_ranges

__all__ = [
    "CACHE_FORMAT",
    "IndexCache",
    "IndexRequest",
    "SPLIT_NAMES",
    "build_gpt_dataset",
    "cache_key",
    "canonical_json",
    "gpt_index_request",
    "parse_split",
    "split_document_ranges",
    "store_identity",
]

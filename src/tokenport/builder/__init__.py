"""From stores to the datasets a run trains on: Megatron's splits, blend specs, the index cache, builders."""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
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

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "Blend": ".specs",
    "BlendSpec": ".specs",
    "CACHE_FORMAT": ".cache",
    "IndexCache": ".cache",
    "IndexRequest": ".gpt_datasets",
    "SPLIT_NAMES": ".splits",
    "blend_from_args_file": ".specs",
    "blend_from_list": ".specs",
    "blend_per_split_from_json": ".specs",
    "build_datasets": ".datasets",
    "build_gpt_dataset": ".gpt_datasets",
    "cache_key": ".cache",
    "canonical_json": ".cache",
    "gpt_index_request": ".gpt_datasets",
    "load_blend_spec": ".specs",
    "megatron_normalize": ".specs",
    "parse_split": ".splits",
    "split_document_ranges": ".splits",
    "store_identity": ".cache",  # defined in indexed.identity
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

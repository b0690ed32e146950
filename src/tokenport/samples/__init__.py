"""Samples: documents of a token store cut into what a model trains on.

``base``: the contract every sample-dataset kind follows (``SampleDataset``) and their registry
(``register_dataset_kind``), with what receipts and rebuild hand a kind (``Describer``,
``Rebuilder``, and ``digest``, an index's fingerprint); ``bins``: the base of
datasets of packed bins;
``gpt``: Megatron's fixed-length GPT samples and their indices; ``fields``: the kernel that
assembles a sample's tokens (and optional fields) from a store; ``packed``: best-fit packed samples;
``sft``: packed or padded, loss-masked samples of a chat store; ``lineage``: where a sample's tokens
come from (``SampleLineage``) and, inverted, which samples hold a document (``Occurrences``;
``inverse`` builds the lookups).
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .base import Describer, Rebuilder, SampleDataset, digest, register_dataset_kind
    from .gpt import GPTDataset, GPTSampleConfig
    from .lineage import Occurrences, SampleLineage
    from .packed import PackedDataset
    from .sft import SFTConfig, SFTCounts, SFTDataset

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "Describer": ".base",
    "GPTDataset": ".gpt",
    "GPTSampleConfig": ".gpt",
    "Occurrences": ".lineage",
    "PackedDataset": ".packed",
    "Rebuilder": ".base",
    "SFTConfig": ".sft",
    "SFTCounts": ".sft",
    "SFTDataset": ".sft",
    "SampleDataset": ".base",
    "SampleLineage": ".lineage",
    "digest": ".base",
    "register_dataset_kind": ".base",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

"""Samples: documents of a token store cut into what a model trains on.

``gpt``: Megatron's fixed-length GPT samples and their indices; ``fields``: the kernel that
assembles a sample's tokens (and optional fields) from a store; ``packed``: best-fit packed samples.
"""

from .gpt import GPTDataset, GPTSampleConfig
from .packed import PackedDataset

__all__ = ["GPTDataset", "GPTSampleConfig", "PackedDataset"]

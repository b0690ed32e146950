"""Sampling: the global sample order turned into what a trainer iterates over.

This package holds the order-level tools that sit between the datasets (``gpt``, ``blend``)
and a ``torch.utils.data.DataLoader``; it imports nothing of tokenport above it, only numpy
(torch lazily, where a torch generator is asked for).

Pretraining samplers (``pretraining``): Megatron's sequential and cyclic batch samplers, exact
with ``megatron_compat=True``, seeded and elastic by default, with state that resumes exactly.

Which sampler when the topology will change: ``StreamSampler`` (``stream``) cuts one global
stream (random, Feistel-keyed, sequential or length-grouped epochs, nothing dropped) into global batches, so
its state resumes on any number of ranks with any micro batch and any global batch, and the
samples from there on are the same. ``PretrainingSampler`` resumes on any layout too (its order
is the id order). ``RandomSampler`` resumes on another number of ranks with the same global
batch; another global batch only where that is exact (no data sharding, the same samples per
epoch), else a ConfigError says so; in Megatron-compatible mode only on the saved layout.

The sampler contract (``contract``): ``Sampler``, the members a batch sampler with state has for
``StatefulLoader`` (a sampler is chosen by name through ``tokenport.integrations.register_sampler``).

``progress``: how many epochs of each dataset of a blend the consumed samples cover (the torch
loader over these samplers, ``StatefulLoader``, is in ``tokenport.integrations``).

Micro-batches (``budget``): cut an order under a token budget; balance a global batch across
ranks (Karmarkar-Karp). Collators (``collate``): padding, and padding-free with cu_seqlens.
``report``: padding, packing and balance of one set of lengths (``tokenport pack-report``).

Length grouping (``length_grouping``): transformers-compatible ``get_length_grouped_indices``
and its samplers, index for index equal to transformers' given a torch generator, numpy-only
given a seed (``rng.torch_randperm``: torch's permutation drawn in numba, same generator state).
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .budget import balanced_micro_batches, token_budget_batches
    from .collate import PaddingCollator, PaddingFreeCollator
    from .contract import Sampler
    from .length_grouping import (
        DistributedLengthGroupedSampler,
        LengthGroupedSampler,
        get_length_grouped_indices,
        length_grouped_order,
    )
    from .pretraining import PretrainingSampler, RandomSampler
    from .progress import DatasetEpochs, dataset_epochs
    from .stream import StreamSampler

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "DatasetEpochs": ".progress",
    "DistributedLengthGroupedSampler": ".length_grouping",
    "LengthGroupedSampler": ".length_grouping",
    "PaddingCollator": ".collate",
    "PaddingFreeCollator": ".collate",
    "PretrainingSampler": ".pretraining",
    "RandomSampler": ".pretraining",
    "Sampler": ".contract",
    "StreamSampler": ".stream",
    "balanced_micro_batches": ".budget",
    "dataset_epochs": ".progress",
    "get_length_grouped_indices": ".length_grouping",
    "length_grouped_order": ".length_grouping",
    "token_budget_batches": ".budget",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

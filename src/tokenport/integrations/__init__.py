"""Integrations: adapters from tokenport's datasets and samplers to trainers, and checkpoint receipts.

Each adapter imports its trainer lazily (an optional extra). ``torch``: ``StatefulLoader``, a
``torch.utils.data.DataLoader`` over a tokenport batch sampler that counts only the batches
handed to training, so a checkpoint resumes exactly despite workers and prefetch, and that
takes the data-parallel rank and size from ``torch.distributed``. ``receipt``: the data receipt
every loader state carries (stores' content, tokenizer, preparation, blend, sample config,
seed, length, position); resuming on data that differs is refused unless the change is
accepted by name (``ALLOWED_CHANGES``). ``hf``: ``TokenportTrainer``, a ``transformers.Trainer``
that trains through tokenport's sampler and resumes without its skip loop, and its collator.
``megatron``: ``datasets_provider``, Megatron-LM's ``train_valid_test_datasets_provider`` read
from Megatron's own data flags. ``tracing``: ``trace``, which documents made a training step, from a
loader state alone (``rebuild``: the dataset a receipt describes, built again and verified;
``samplers``: ``register_sampler``, so a state's sampler, tokenport's or one added, is built again).
``grain``: ``GrainSource`` and ``grain_dataset`` (tokenport datasets as Grain sources) and
``GrainLoader`` (torchtitan's data loader contract over tokenport's global stream: elastic resume).
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .grain import GrainLoader, GrainSource, grain_dataset
    from .hf import TokenportCollator, TokenportTrainer
    from .megatron import MegatronSamples, datasets_provider
    from .rebuild import rebuild_dataset
    from .receipt import ALLOWED_CHANGES, DataReceipt, check_receipt, data_receipt
    from .samplers import register_sampler
    from .torch import StatefulLoader, data_parallel_position
    from .tracing import SampleTrace, trace

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "ALLOWED_CHANGES": ".receipt",
    "DataReceipt": ".receipt",
    "GrainLoader": ".grain",
    "GrainSource": ".grain",
    "MegatronSamples": ".megatron",
    "SampleTrace": ".tracing",
    "StatefulLoader": ".torch",
    "TokenportCollator": ".hf",
    "TokenportTrainer": ".hf",
    "check_receipt": ".receipt",
    "data_parallel_position": ".torch",
    "datasets_provider": ".megatron",
    "grain_dataset": ".grain",
    "data_receipt": ".receipt",
    "rebuild_dataset": ".rebuild",
    "register_sampler": ".samplers",
    "trace": ".tracing",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

"""tokenport: the data layer for LLM training.

The root resolves its public names lazily (PEP 562): ``import tokenport`` loads no room and no
numba kernel; ``tokenport.prepare`` imports ``corpus`` the first time it is used.
"""

import typing

from . import _jit, _lazy
from ._version import __version__

_jit.defer_numba_start()  # numba's extension scan and BLAS probe wait until a kernel of another needs them

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .blend import (
        AdaptiveBlend,
        ADOController,
        BlendedDataset,
        DoReMiController,
        MixtureController,
        MixtureSignals,
        ScheduleController,
        ValidationController,
    )
    from .builder import Blend, BlendSpec, IndexCache, build_datasets, build_gpt_dataset, load_blend_spec
    from .chat import ChatTemplate, encode_chat
    from .corpus import (
        PrepareConfig,
        PrepareOption,
        PrepareResult,
        RunWideStep,
        Step,
        prepare,
        register_prepare_option,
        register_step,
    )
    from .dock import Dock, DockAPI, DockBase, open_dock, register_dock_backend
    from .errors import (
        ConfigError,
        CorruptStoreError,
        DockTimeout,
        InputDataError,
        OversamplingWarning,
        StorageError,
        TokenizerError,
        TokenportError,
    )
    from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
    from .integrations import StatefulLoader, register_sampler
    from .integrations.audit import audit
    from .integrations.takedown import takedown
    from .integrations.tracing import trace
    from .integrations.where import occurrences
    from .packing import karmarkar_karp, pack_best_fit
    from .samples.base import SampleDataset, register_dataset_kind
    from .samples.gpt import GPTDataset, GPTSampleConfig
    from .samples.lineage import SampleLineage
    from .samples.packed import PackedDataset
    from .samples.sft import SFTConfig, SFTDataset
    from .sampling import (
        DatasetEpochs,
        DistributedLengthGroupedSampler,
        LengthGroupedSampler,
        PaddingCollator,
        PaddingFreeCollator,
        PretrainingSampler,
        RandomSampler,
        Sampler,
        StreamSampler,
    )
    from .storage import Scheme, register_scheme
    from .tokenizers import Tokenizer, load_tokenizer, register_tokenizer

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "ADOController": ".blend",
    "AdaptiveBlend": ".blend",
    "Blend": ".builder",
    "BlendSpec": ".builder",
    "BlendedDataset": ".blend",
    "ChatTemplate": ".chat",
    "ConfigError": ".errors",
    "CorruptStoreError": ".errors",
    "DatasetEpochs": ".sampling",
    "DistributedLengthGroupedSampler": ".sampling",
    "DoReMiController": ".blend",
    "Dock": ".dock",
    "DockAPI": ".dock",
    "DockBase": ".dock",
    "DockTimeout": ".errors",
    "GPTDataset": ".samples.gpt",
    "GPTSampleConfig": ".samples.gpt",
    "IndexCache": ".builder",
    "IndexedDataset": ".indexed",
    "IndexedDatasetWriter": ".indexed",
    "InputDataError": ".errors",
    "LengthGroupedSampler": ".sampling",
    "Manifest": ".indexed",
    "MixtureController": ".blend",
    "MixtureSignals": ".blend",
    "OversamplingWarning": ".errors",
    "PackedDataset": ".samples.packed",
    "PaddingCollator": ".sampling",
    "PaddingFreeCollator": ".sampling",
    "PrepareConfig": ".corpus",
    "PrepareOption": ".corpus",
    "PrepareResult": ".corpus",
    "PretrainingSampler": ".sampling",
    "RandomSampler": ".sampling",
    "RunWideStep": ".corpus",
    "SFTConfig": ".samples.sft",
    "SFTDataset": ".samples.sft",
    "SampleDataset": ".samples.base",
    "SampleLineage": ".samples.lineage",
    "Sampler": ".sampling",
    "ScheduleController": ".blend",
    "Scheme": ".storage",
    "StatefulLoader": ".integrations",
    "Step": ".corpus",
    "StorageError": ".errors",
    "StreamSampler": ".sampling",
    "Tokenizer": ".tokenizers",
    "TokenizerError": ".errors",
    "TokenportError": ".errors",
    "ValidationController": ".blend",
    "build_datasets": ".builder",
    "build_gpt_dataset": ".builder",
    "encode_chat": ".chat",
    "karmarkar_karp": ".packing",
    "load_blend_spec": ".builder",
    "load_tokenizer": ".tokenizers",
    "merge": ".indexed",
    "open_dock": ".dock",
    "pack_best_fit": ".packing",
    "prepare": ".corpus",
    "register_dataset_kind": ".samples.base",
    "register_dock_backend": ".dock",
    "register_prepare_option": ".corpus",
    "register_sampler": ".integrations",
    "register_scheme": ".storage",
    "register_step": ".corpus",
    "register_tokenizer": ".tokenizers",
    "trace": ".integrations.tracing",
    "occurrences": ".integrations.where",
    "verify": ".indexed",
    "audit": ".integrations.audit",
    "takedown": ".integrations.takedown",
}

__all__ = sorted([*_EXPORTS, "__version__"])
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

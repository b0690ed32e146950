"""tokenport: the data layer for LLM training."""

from ._version import __version__
from .errors import (
    ConfigError,
    CorruptStoreError,
    DockTimeout,
    InputDataError,
    StorageError,
    TokenizerError,
    TokenportError,
)
from .dock import Dock
from .blend import BlendedDataset
from .builder import Blend, BlendSpec, IndexCache, build_datasets, build_gpt_dataset, load_blend_spec
from .samples.gpt import GPTDataset, GPTSampleConfig
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
from .packing import karmarkar_karp, pack_best_fit
from .corpus import PrepareConfig, PrepareResult, prepare
from .samples.packed import PackedDataset
from .sampling import (
    DatasetEpochs,
    DistributedLengthGroupedSampler,
    LengthGroupedSampler,
    PaddingCollator,
    PaddingFreeCollator,
    PretrainingSampler,
    RandomSampler,
    StatefulLoader,
)
from .tokenizers import Tokenizer, load_tokenizer

__all__ = [
    "Blend",
    "BlendSpec",
    "BlendedDataset",
    "ConfigError",
    "CorruptStoreError",
    "DatasetEpochs",
    "DistributedLengthGroupedSampler",
    "Dock",
    "DockTimeout",
    "GPTDataset",
    "GPTSampleConfig",
    "IndexCache",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "InputDataError",
    "LengthGroupedSampler",
    "Manifest",
    "PackedDataset",
    "PaddingCollator",
    "PaddingFreeCollator",
    "PrepareConfig",
    "PrepareResult",
    "PretrainingSampler",
    "RandomSampler",
    "StatefulLoader",
    "StorageError",
    "Tokenizer",
    "TokenizerError",
    "TokenportError",
    "__version__",
    "build_datasets",
    "build_gpt_dataset",
    "karmarkar_karp",
    "load_blend_spec",
    "load_tokenizer",
    "merge",
    "pack_best_fit",
    "prepare",
    "verify",
]

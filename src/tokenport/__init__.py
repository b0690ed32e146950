"""tokenport: the data layer for LLM training."""

__version__ = "0.1.0"

from .errors import ConfigError, CorruptStoreError, InputDataError, StorageError, TokenizerError, TokenportError
from .blend import BlendedDataset
from .build import Blend, BlendSpec, IndexCache, build_datasets, build_gpt_dataset, load_blend_spec
from .gpt import GPTDataset, GPTSampleConfig
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
from .prepare import PrepareConfig, PrepareResult, prepare
from .tokenizers import Tokenizer, load_tokenizer

__all__ = [
    "Blend",
    "BlendSpec",
    "BlendedDataset",
    "ConfigError",
    "CorruptStoreError",
    "GPTDataset",
    "GPTSampleConfig",
    "IndexCache",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "InputDataError",
    "Manifest",
    "PrepareConfig",
    "PrepareResult",
    "StorageError",
    "Tokenizer",
    "TokenizerError",
    "TokenportError",
    "__version__",
    "build_datasets",
    "build_gpt_dataset",
    "load_blend_spec",
    "load_tokenizer",
    "merge",
    "prepare",
    "verify",
]

"""tokenport: the data layer for LLM training."""

__version__ = "0.1.0"

from .errors import ConfigError, CorruptStoreError, InputDataError, StorageError, TokenizerError, TokenportError
from .build import IndexCache, build_gpt_dataset
from .gpt import GPTDataset, GPTSampleConfig
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
from .prepare import PrepareConfig, PrepareResult, prepare
from .tokenizers import Tokenizer, load_tokenizer

__all__ = [
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
    "build_gpt_dataset",
    "load_tokenizer",
    "merge",
    "prepare",
    "verify",
]

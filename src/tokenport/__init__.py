"""tokenport: the data layer for LLM training."""

__version__ = "0.1.0"

from .errors import ConfigError, CorruptStoreError, InputDataError, StorageError, TokenizerError, TokenportError
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
from .prepare import PrepareConfig, PrepareResult, prepare
from .tokenizers import Tokenizer, load_tokenizer

__all__ = [
    "ConfigError",
    "CorruptStoreError",
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
    "load_tokenizer",
    "merge",
    "prepare",
    "verify",
]

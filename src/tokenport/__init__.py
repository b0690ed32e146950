"""tokenport: the data layer for LLM training."""

__version__ = "0.1.0"

from .errors import ConfigError, CorruptStoreError, InputDataError, StorageError, TokenizerError, TokenportError
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify
from .tokenizers import Tokenizer, load_tokenizer

__all__ = [
    "ConfigError",
    "CorruptStoreError",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "InputDataError",
    "Manifest",
    "StorageError",
    "Tokenizer",
    "TokenizerError",
    "TokenportError",
    "__version__",
    "load_tokenizer",
    "merge",
    "verify",
]

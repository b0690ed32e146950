"""tokenport: the data layer for LLM training."""

__version__ = "0.1.0"

from .errors import ConfigError, CorruptStoreError, InputDataError, StorageError, TokenizerError, TokenportError
from .indexed import IndexedDataset, IndexedDatasetWriter, Manifest, merge, verify

__all__ = [
    "ConfigError",
    "CorruptStoreError",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "InputDataError",
    "Manifest",
    "StorageError",
    "TokenizerError",
    "TokenportError",
    "__version__",
    "merge",
    "verify",
]

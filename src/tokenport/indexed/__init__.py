"""Token stores in Megatron-LM's .bin/.idx format: reader, writer, manifest, merge, verify."""

from .format import DTYPE_BY_CODE, IndexHeader, dtype_for_vocab
from .manifest import Manifest, StoreFacts, read_manifest
from .merge import merge
from .prefixes import resolve_stores
from .reader import IndexedDataset, strip_suffix
from .verify import VerifyReport, verify
from .writer import IndexedDatasetWriter

__all__ = [
    "DTYPE_BY_CODE",
    "IndexHeader",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "Manifest",
    "StoreFacts",
    "VerifyReport",
    "dtype_for_vocab",
    "merge",
    "read_manifest",
    "resolve_stores",
    "strip_suffix",
    "verify",
]

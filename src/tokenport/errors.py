"""The one exception tree: every error tokenport raises on purpose is a TokenportError.

Messages name the file or field at fault, say what is wrong and what to do about it.
"""

from __future__ import annotations


class TokenportError(Exception):
    """Base class of every error tokenport raises deliberately."""


class ConfigError(TokenportError, ValueError):
    """An argument, option or config field is invalid."""


class SampleIdError(ConfigError, IndexError):
    """A sample id is not an integer id of the dataset; an IndexError too, which the sequence protocol needs."""


class InputDataError(TokenportError):
    """Raw input (a corpus file) is malformed: bad JSON, missing field, undecodable bytes."""


class CorruptStoreError(TokenportError):
    """A token store (.bin/.idx/.json) is corrupt, truncated or inconsistent."""


class StorageError(TokenportError):
    """A storage backend failed permanently (missing object, access denied, retries exhausted)."""


class TokenizerError(TokenportError):
    """A tokenizer cannot be loaded, or produced ids that do not fit the store."""


class DockTimeout(TokenportError, TimeoutError):
    """A dock ``get`` waited its whole ``timeout`` without enough ready rows."""


class OversamplingWarning(UserWarning):
    """A build reads a store more epochs than ``blend.oversampling.OVERSAMPLING_EPOCHS``: its documents repeat."""

"""The contract of a tokenizer backend: the `Tokenizer` base, and helpers its backends share.

A backend subclasses `Tokenizer` (``kind``, ``_load``, ``spec``, ``encode``, ``encode_batch``,
``_decode``; ``encode_offsets`` where it can give character offsets) and registers a factory
for its spec prefix with `tokenport.tokenizers.register_tokenizer`.
"""

from __future__ import annotations

import abc
import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _optional
from .._registry import Registry
from ..errors import ConfigError, TokenizerError

__all__ = [
    "EOD_CANDIDATES",
    "after_prefix",
    "TOKENIZERS",
    "Tokenizer",
    "TokenizerFactory",
    "register_tokenizer",
    "digest",
    "pick_eod",
    "read_file",
    "require",
    "split_ids",
    "split_option",
]

EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
"""Tokens tried, in order, as the end-of-document token of a tokenizer.json."""

# Attributes set by Tokenizer._load; they are never pickled and are rebuilt on first use.
_LOADED = ("_backend", "_vocab_size", "_eod_id", "_fingerprint")
_DERIVED = ("_byte_offsets",)  # built on first use from the files, like _LOADED


class Tokenizer(abc.ABC):
    """A text <-> int64 ids mapping with an end-of-document id, named by a spec string."""

    kind: str

    def __init__(self, name: str) -> None:
        self.name = name
        self._ensure_loaded()  # now, so a bad spec fails where it was given, not in a worker

    @abc.abstractmethod
    def _load(self) -> tuple[Any, int, int | None, str]:
        """Read the defining files; return (backend, vocab_size, eod_id or None when it has none, fingerprint)."""

    @abc.abstractmethod
    def spec(self) -> str:
        """The string `load_tokenizer` accepts to rebuild this tokenizer (kept in manifests)."""

    @abc.abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """The 1-D int64 ids of `text`, without the end-of-document id."""

    @abc.abstractmethod
    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """`[self.encode(t) for t in texts]`, computed in one call to the backend for speed."""

    @abc.abstractmethod
    def _decode(self, ids: np.ndarray) -> str:
        """Decode int64 ids already checked to lie in the vocabulary."""

    def encode_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The ids of `text` and each token's (start, end) character offsets, an (n, 2) int64 array.

        Chat loss masks map character spans to tokens through these offsets, as transformers does."""
        raise TokenizerError(
            f"the {self.kind} tokenizer {self.name!r} gives no character offsets, which chat loss masks need; "
            "use the byte-level tokenizer or an 'hf:' tokenizer.json"
        )

    def encode_offsets_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`encode_offsets` of many texts at once: flat ids, each text's token count, flat (n, 2) offsets.

        Offsets count characters from the start of each token's own text."""
        pairs = [self.encode_offsets(text) for text in texts]
        lengths = np.fromiter((len(ids) for ids, _ in pairs), np.int64, count=len(pairs))
        if not pairs:
            return np.zeros(0, np.int64), lengths, np.zeros((0, 2), np.int64)
        return np.concatenate([ids for ids, _ in pairs]), lengths, np.concatenate([o for _, o in pairs])

    def _ensure_loaded(self) -> None:
        """Set the attributes in _LOADED from the defining files."""
        self._backend, self._vocab_size, self._eod_id, self._fingerprint = self._load()

    def __getattr__(self, attr: str) -> Any:
        """Load the backend on first use (after unpickling, attributes in _LOADED are absent)."""
        if attr not in _LOADED:
            raise AttributeError(attr)
        self._ensure_loaded()
        return self.__dict__[attr]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle only the spec's parts; the backend is reloaded from its files."""
        return {k: v for k, v in self.__dict__.items() if k not in _LOADED and k not in _DERIVED}

    @property
    def vocab_size(self) -> int:
        """Number of ids: every id encode can return, and the eod id, is below it."""
        return self._vocab_size

    @property
    def eod_id(self) -> int:
        """The id appended after each document; a TokenizerError when the tokenizer has none."""
        if self._eod_id is None:
            raise TokenizerError(
                f"{self.name} has none of the end-of-document tokens {list(EOD_CANDIDATES)}; name one of its "
                "tokens with '#eod=TOKEN' after the path in the tokenizer spec, or prepare with --no-eod "
                "(append_eod=False) to end documents with no token"
            )
        return self._eod_id

    @property
    def eod_id_or_none(self) -> int | None:
        """The end-of-document id, or None for a tokenizer whose vocabulary names none."""
        return self._eod_id

    def decode(self, ids: np.ndarray | Sequence[int]) -> str:
        """Text of `ids`, skipping end-of-document ids."""
        array = np.asarray(ids, dtype=np.int64).reshape(-1)
        if self._eod_id is not None:
            array = array[array != self._eod_id]
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            raise TokenizerError(
                f"cannot decode ids outside [0, {self.vocab_size}) with {self.kind} tokenizer {self.name!r} "
                f"(found {array.min()}..{array.max()}); the ids were made by another tokenizer"
            )
        return self._decode(array)

    def identity(self) -> dict[str, Any]:
        """JSON-able description for a manifest; equal fingerprints mean the same defining content.
        A tokenizer without an end-of-document token has no ``eod_id`` (as a store written without one)."""
        identity = {
            "kind": self.kind,
            "name": self.name,
            "spec": self.spec(),
            "vocab_size": int(self.vocab_size),
            "eod_id": None if self._eod_id is None else int(self._eod_id),
            "fingerprint": self._fingerprint,
        }
        if identity["eod_id"] is None:
            del identity["eod_id"]
        return identity

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec()!r})"


TokenizerFactory = Callable[[str], Tokenizer]
"""Builds the tokenizer of a whole spec string (``"NAME:..."``, or a bare path its backend claims)."""

TOKENIZERS: Registry[TokenizerFactory] = Registry(
    "tokenizer backend", callable, "a callable taking a spec string and returning a Tokenizer"
)
"""Tokenizer backends by the spec prefix that names them (``"hf"`` in ``"hf:PATH"``)."""


def register_tokenizer(name: str, factory: TokenizerFactory) -> None:
    """Make specs ``"NAME:..."`` load ``factory(spec)``, a `Tokenizer` whose ``spec()`` loads it back
    (so manifests can name it; worker processes get the registration too). ConfigError for a name
    taken by another factory, a bad name, or a factory that is not callable."""
    TOKENIZERS.register(name, factory)


def split_ids(flat: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Cut `flat` into consecutive views of the given lengths (plain slicing: np.split is slower)."""
    ends = list(itertools.accumulate(lengths))
    return [flat[end - n : end] for end, n in zip(ends, lengths)]


def digest(*parts: bytes) -> str:
    """sha256 hex digest of length-prefixed parts."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def read_file(path: str, kind: str) -> bytes:
    """Bytes of a tokenizer's defining file, or a TokenizerError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TokenizerError(
            f"cannot read the {kind} tokenizer file {path}: {e.strerror}; check the path in the tokenizer spec"
        ) from e


def require(module: str, extra: str) -> Any:
    """Import an optional package, or raise a TokenizerError naming the extra to install."""
    try:
        return _optional.require(module, extra=extra, feature=f"the {extra} tokenizer")
    except _optional.MissingExtraError as e:
        raise TokenizerError(str(e)) from e.__cause__


def pick_eod(token_id: Callable[[str], int | None], override: str | None, path: str) -> int | None:
    """Id of the end-of-document token: the override if given (a TokenizerError when absent), else the
    first of EOD_CANDIDATES present, else None (`Tokenizer.eod_id` refuses it where an EOD is needed)."""
    for token in [override] if override else EOD_CANDIDATES:
        eod = token_id(token)
        if eod is not None:
            return int(eod)
    if override:
        raise TokenizerError(
            f"{path} has no token {override!r} (from '#eod={override}'); name a token of its vocabulary"
        )
    return None


def split_option(spec: str, body: str, key: str | None) -> tuple[str, str | None]:
    """Split 'PATH#key=value' into PATH and value; `key` is the one option the backend takes."""
    path, hash_sign, option = body.rpartition("#")
    if not hash_sign:
        return body, None
    name, eq, value = option.partition("=")
    if name != key or not eq or not value or not path:
        allowed = f"the only option is '#{key}=...'" if key else "this kind takes no '#' options"
        raise ConfigError(f"tokenizer spec {spec!r}: bad option {option!r}; {allowed}")
    return path, value


def after_prefix(spec: str, name: str) -> str:
    """The part of `spec` after ``NAME:``, or `spec` itself for a bare path."""
    return spec[len(name) + 1 :] if spec.startswith(name + ":") else spec

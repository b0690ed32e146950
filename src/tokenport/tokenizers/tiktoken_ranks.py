"""Tokenizers of a tiktoken BPE ranks file, or of a built-in tiktoken encoding already cached here."""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from typing import Any

import numpy as np

from ..errors import ConfigError, TokenizerError
from .base import Tokenizer, after_prefix, digest, read_file, register_tokenizer, require, split_option

__all__ = ["TIKTOKEN_PATTERNS", "TiktokenTokenizer"]

# exposes only the gpt2 one as a module constant.
TIKTOKEN_PATTERNS = {
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501 (a regex reads best whole)
    "o200k": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}

_OPENAI_ENCODINGS_URL = "https://openaipublic.blob.core.windows.net/encodings/"
# Built-in tiktoken encodings: name -> (ranks file, its sha256, pattern), as in tiktoken_ext.openai_public.
_TIKTOKEN_BUILTINS = {
    "r50k_base": ("r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", "gpt2"),
    "p50k_base": ("p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069", "gpt2"),
    "p50k_edit": ("p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069", "gpt2"),
    "cl100k_base": (
        "cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "cl100k",
    ),
    "o200k_base": ("o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", "o200k"),
    "o200k_harmony": (
        "o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "o200k",
    ),
}


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE ranks file (or a locally cached built-in encoding), encoded as ordinary text."""

    kind = "tiktoken"

    def __init__(self, source: str, pat: str | None = None, name: str | None = None) -> None:
        self.builtin = source in _TIKTOKEN_BUILTINS and not os.path.exists(source)
        if self.builtin and pat is not None:
            raise ConfigError(
                f"tokenizer spec 'tiktoken:{source}#pat={pat}': a built-in encoding has its own pattern; drop '#pat='"
            )
        self.source = source if self.builtin else os.path.abspath(source)
        self.pat = _TIKTOKEN_BUILTINS[source][2] if self.builtin else pat or _default_pattern(source)
        if self.pat not in TIKTOKEN_PATTERNS:
            raise ConfigError(
                f"tokenizer spec 'tiktoken:{source}#pat={pat}': unknown pattern {pat!r}; "
                f"use one of {sorted(TIKTOKEN_PATTERNS)}"
            )
        super().__init__(name or source)

    def spec(self) -> str:
        return f"tiktoken:{self.source}" if self.builtin else f"tiktoken:{self.source}#pat={self.pat}"

    def _load(self) -> tuple[Any, int, int, str]:
        tiktoken = require("tiktoken", "tiktoken")
        pattern = TIKTOKEN_PATTERNS[self.pat]
        if self.builtin:
            data = _cached_builtin(self.source)  # first: get_encoding would download a missing file
            enc = tiktoken.get_encoding(self.source)
            return enc, enc.n_vocab, enc.encode_single_token("<|endoftext|>"), digest(data, pattern.encode())
        if not os.path.exists(self.source):
            raise TokenizerError(
                f"no tiktoken ranks file {self.source}, and {self.name!r} is not a built-in encoding "
                f"({', '.join(_TIKTOKEN_BUILTINS)}); check the path in the tokenizer spec"
            )
        data = read_file(self.source, self.kind)
        try:
            lines = (line.split() for line in data.splitlines() if line)
            pairs = [(base64.b64decode(token, validate=True), int(rank)) for token, rank in lines]
        except ValueError as e:  # binascii.Error is one
            raise TokenizerError(
                f"{self.source} is not a tiktoken BPE ranks file (one 'base64-token rank' pair per line): {e}"
            ) from e
        ranks = dict(pairs)
        if len(ranks) != len(pairs) or len(set(ranks.values())) != len(pairs):
            raise TokenizerError(f"{self.source} repeats a token or a rank; in a tiktoken ranks file each appears once")
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:  # tiktoken would panic on the first text that needs one
            raise TokenizerError(
                f"{self.source} lacks {len(missing)} of the 256 single-byte tokens (first: byte {missing[0]}); "
                "a tiktoken ranks file must hold them all"
            )
        eod = ranks.get(b"<|endoftext|>")
        specials = {} if eod is not None else {"<|endoftext|>": max(ranks.values()) + 1}
        name = os.path.basename(self.source)
        enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
        return enc, enc.n_vocab, enc.encode_single_token("<|endoftext|>"), digest(data, pattern.encode())

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode_ordinary(text), dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self._backend.encode_ordinary_batch(texts)]

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids.tolist(), errors="replace")


def _default_pattern(path: str) -> str:
    """The pattern a ranks file's name suggests (o200k..., r50k/p50k/gpt2...), else cl100k."""
    base = os.path.basename(path)
    if base.startswith("o200k"):
        return "o200k"
    return "gpt2" if base.startswith(("r50k", "p50k", "gpt2")) else "cl100k"


def _cached_builtin(name: str) -> bytes:
    """The ranks file of a built-in tiktoken encoding from tiktoken's cache; never downloads."""
    filename, sha256, _ = _TIKTOKEN_BUILTINS[name]
    url = _OPENAI_ENCODINGS_URL + filename
    # tiktoken's own cache rule (tiktoken/load.py read_file_cached): dir from env, key sha1(url).
    default_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR", default_dir))
    cached = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest()) if cache_dir else ""
    if cached and os.path.isfile(cached):
        with open(cached, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() == sha256:
            return data
    raise TokenizerError(
        f"tiktoken encoding {name!r} is not in tiktoken's local cache ({cached or 'caching disabled'}) and tokenport "
        f"does not download; download {url} and use 'tiktoken:PATH', or run tiktoken.get_encoding({name!r}) "
        "once where the network is reachable"
    )


def _from_spec(spec: str) -> TiktokenTokenizer:
    source, pat = split_option(spec, after_prefix(spec, "tiktoken"), "pat")
    return TiktokenTokenizer(source, pat, name=spec)


register_tokenizer("tiktoken", _from_spec)

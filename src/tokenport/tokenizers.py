"""One interface over the tokenizers tokenport stores tokens for.

Backends: the built-in byte-level tokenizer (no files, no extras), HF `tokenizers`
tokenizer.json files, tiktoken BPE ranks files, sentencepiece models, and gigatoken
(a fast engine for HF byte-level BPE tokenizer.json files that gives the same ids).
A tokenizer is named by a spec string (see `load_tokenizer`); it pickles as its spec
and reloads its files on first use, so it can be sent to worker processes.
"""

from __future__ import annotations

import abc
import base64
import hashlib
import importlib
import itertools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tokenport.errors import ConfigError, TokenizerError, TokenportError

__all__ = [
    "ByteTokenizer",
    "GigatokenTokenizer",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "choose_engine",
    "load_tokenizer",
    "tokenizer_from_identity",
    "train_byte_level_bpe",
]

logger = logging.getLogger(__name__)

EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
"""Tokens tried, in order, as the end-of-document token of a tokenizer.json."""

SPEC_FORMS = (
    "None or 'byte' (the built-in byte-level tokenizer)",
    "'hf:PATH[#eod=TOKEN]' (PATH a tokenizer.json or a directory holding one)",
    "a tokenizer.json file or a directory holding one",
    "'tiktoken:PATH[#pat=cl100k|o200k|gpt2]' (a .tiktoken BPE ranks file)",
    "'tiktoken:NAME' (a built-in tiktoken encoding already in tiktoken's local cache)",
    "'sentencepiece:PATH' or a path ending in .model",
    "'gigatoken:PATH[#eod=TOKEN]' (a byte-level BPE tokenizer.json)",
)

# Pre-tokenization regexes, copied from tiktoken_ext/openai_public.py (tiktoken 0.14), which
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
    def _load(self) -> tuple[Any, int, int, str]:
        """Read the defining files; return (backend, vocab_size, eod_id, fingerprint)."""

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
        """The id appended after each document."""
        return self._eod_id

    def decode(self, ids: np.ndarray | Sequence[int]) -> str:
        """Text of `ids`, skipping end-of-document ids."""
        array = np.asarray(ids, dtype=np.int64).reshape(-1)
        array = array[array != self.eod_id]
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            raise TokenizerError(
                f"cannot decode ids outside [0, {self.vocab_size}) with {self.kind} tokenizer {self.name!r} "
                f"(found {array.min()}..{array.max()}); the ids were made by another tokenizer"
            )
        return self._decode(array)

    def identity(self) -> dict[str, Any]:
        """JSON-able description for a manifest; equal fingerprints mean the same defining content."""
        return {
            "kind": self.kind,
            "name": self.name,
            "spec": self.spec(),
            "vocab_size": int(self.vocab_size),
            "eod_id": int(self.eod_id),
            "fingerprint": self._fingerprint,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec()!r})"


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as ids 0..255 and eod 256: needs no files and no extras."""

    kind = "byte"

    def __init__(self) -> None:
        super().__init__("byte")

    def _load(self) -> tuple[Any, int, int, str]:
        return None, 257, 256, _digest(b"tokenport byte tokenizer: utf-8 bytes are ids 0-255, eod 256")

    def spec(self) -> str:
        return "byte"

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        joined = "".join(texts)
        if joined.isascii():  # one character per byte: lengths come free
            lengths = [len(t) for t in texts]
            data = joined.encode("ascii")
        else:
            encoded = [t.encode("utf-8") for t in texts]
            lengths = [len(b) for b in encoded]
            data = b"".join(encoded)
        return _split(np.frombuffer(data, np.uint8).astype(np.int64), lengths)

    def _decode(self, ids: np.ndarray) -> str:
        return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def encode_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Every byte's offsets are those of the character it belongs to (all bytes of a character share them)."""
        ids, _, offsets = self.encode_offsets_batch([text])
        return ids, offsets

    def encode_offsets_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, lengths, chars = _utf8_chars(texts)
        return ids.astype(np.int64), lengths, np.stack([chars, chars + 1], axis=1)


class HFTokenizer(Tokenizer):
    """A HF `tokenizers` tokenizer.json, encoded without added special tokens."""

    kind = "hf"

    def __init__(self, path: str, eod: str | None = None, name: str | None = None) -> None:
        self.path = _tokenizer_json_path(path, self.kind)
        self.eod_token = eod
        super().__init__(name or path)

    def spec(self) -> str:
        return f"{self.kind}:{self.path}" + (f"#eod={self.eod_token}" if self.eod_token else "")

    def _load(self) -> tuple[Any, int, int, str]:
        hf = _require("tokenizers", "hf")
        data = _read(self.path, self.kind)
        try:
            tok = hf.Tokenizer.from_str(data.decode("utf-8"))
        except Exception as e:  # the Rust parser raises a bare Exception
            raise TokenizerError(f"{self.path} is not a valid HF tokenizer.json: {e}") from e
        eod = _pick_eod(tok.token_to_id, self.eod_token, self.path)
        return tok, tok.get_vocab_size(with_added_tokens=True), eod, _digest(data)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self._backend.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids.tolist())

    def encode_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """HF tokenizers' own ids and character offsets (those transformers' assistant masks use)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        return np.asarray(encoding.ids, dtype=np.int64), offsets

    def encode_offsets_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        encodings = self._backend.encode_batch(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, count=len(encodings))
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int64, count=int(lengths.sum()))
        offsets = np.fromiter(
            itertools.chain.from_iterable(itertools.chain.from_iterable(e.offsets) for e in encodings),
            np.int64,
            count=2 * len(ids),
        )
        return ids, lengths, offsets.reshape(-1, 2)


class GigatokenTokenizer(HFTokenizer):
    """A HF byte-level BPE tokenizer.json run by gigatoken, which gives the same ids as `hf:`, faster."""

    kind = "gigatoken"

    def _load(self) -> tuple[Any, int, int, str]:
        gt = _require("gigatoken", "gigatoken")
        data = _read(self.path, self.kind)
        try:
            config = json.loads(data)
            pre = config.get("pre_tokenizer") or {}
        except (ValueError, AttributeError) as e:
            raise TokenizerError(f"{self.path} is not a valid HF tokenizer.json: {e}") from e
        if pre.get("type") == "ByteLevel" and not pre.get("use_regex", True):
            # gigatoken 0.10 applies the GPT-2 split regex anyway and silently gives other ids.
            raise TokenizerError(
                f"{self.path}: gigatoken does not honour ByteLevel use_regex=false and would give ids "
                f"that differ from HF tokenizers; use 'hf:{self.path}' instead"
            )
        try:
            tok = gt.Tokenizer.from_json(data)
        except Exception as e:  # gigatoken raises RuntimeError/ValueError for configs it cannot run
            reason = str(e).partition("\n")[0].strip()  # its Rust source location follows on later lines
            raise TokenizerError(f"gigatoken cannot load {self.path}: {reason}; use 'hf:{self.path}' instead") from e
        model_vocab = (config.get("model") or {}).get("vocab")
        vocab = dict(model_vocab) if isinstance(model_vocab, dict) else {}  # BPE: token -> id
        vocab.update((t["content"], t["id"]) for t in config.get("added_tokens") or [])
        return tok, tok.vocab_size, _pick_eod(vocab.get, self.eod_token, self.path), _digest(data)

    def encode(self, text: str) -> np.ndarray:
        return self._backend.encode(text).astype(np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if not texts:
            return []
        import awkward as ak  # a dependency of gigatoken: its batches come back as awkward arrays

        out = self._backend.encode_batch(texts)
        return _split(ak.flatten(out).to_numpy().astype(np.int64), ak.num(out).to_numpy().tolist())

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids).decode("utf-8", errors="replace")

    def encode_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The ids and the character offsets HF tokenizers reports for them, derived from each token's bytes.

        gigatoken gives no offsets, but in a byte-level BPE the tokens' bytes are the text's bytes in
        order, so each token's characters follow from its byte length (see `tokenport._offsets`)."""
        ids, _, offsets = self.encode_offsets_batch([text])
        return ids, offsets

    def encode_offsets_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        derive = self.__dict__.get("_byte_offsets")
        if derive is None:
            from ._offsets import ByteLevelOffsets  # numba: loaded only where offsets are needed

            derive = self.__dict__["_byte_offsets"] = ByteLevelOffsets(json.loads(_read(self.path, self.kind)), self)
        texts = list(texts)
        if not texts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
        import awkward as ak

        out = self._backend.encode_batch(texts)
        ids = ak.flatten(out).to_numpy().astype(np.int64)
        lengths = ak.num(out).to_numpy().astype(np.int64)
        return ids, lengths, derive(texts, ids, lengths)


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
        tiktoken = _require("tiktoken", "tiktoken")
        pattern = TIKTOKEN_PATTERNS[self.pat]
        if self.builtin:
            data = _cached_builtin(self.source)  # first: get_encoding would download a missing file
            enc = tiktoken.get_encoding(self.source)
            return enc, enc.n_vocab, enc.encode_single_token("<|endoftext|>"), _digest(data, pattern.encode())
        if not os.path.exists(self.source):
            raise TokenizerError(
                f"no tiktoken ranks file {self.source}, and {self.name!r} is not a built-in encoding "
                f"({', '.join(_TIKTOKEN_BUILTINS)}); check the path in the tokenizer spec"
            )
        data = _read(self.source, self.kind)
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
        return enc, enc.n_vocab, enc.encode_single_token("<|endoftext|>"), _digest(data, pattern.encode())

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode_ordinary(text), dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self._backend.encode_ordinary_batch(texts)]

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids.tolist(), errors="replace")


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece .model file; its eos piece is the end-of-document token."""

    kind = "sentencepiece"

    def __init__(self, path: str, name: str | None = None) -> None:
        self.path = os.path.abspath(path)
        super().__init__(name or path)

    def spec(self) -> str:
        return f"sentencepiece:{self.path}"

    def _load(self) -> tuple[Any, int, int, str]:
        spm = _require("sentencepiece", "sentencepiece")
        data = _read(self.path, self.kind)
        try:
            sp = spm.SentencePieceProcessor(model_proto=data)
        except (RuntimeError, TypeError) as e:
            raise TokenizerError(f"{self.path} is not a valid sentencepiece model: {e}") from e
        if sp.eos_id() < 0:
            raise TokenizerError(
                f"sentencepiece model {self.path} has no eos piece (eos_id is -1), so it has no end-of-document "
                "id; retrain it with eos_id set (sentencepiece's default is 2)"
            )
        return sp, sp.get_piece_size(), sp.eos_id(), _digest(data)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode(text), dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self._backend.encode(texts)]

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids.tolist())


def load_tokenizer(spec: str | Tokenizer | None = None) -> Tokenizer:
    """Build the tokenizer a spec string names (see SPEC_FORMS); None means the byte tokenizer."""
    if spec is None or spec == "byte":
        return ByteTokenizer()
    if isinstance(spec, Tokenizer):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"tokenizer spec must be a string, got {type(spec).__name__}; {_accepted()}")
    scheme, colon, body = spec.partition(":")
    if colon and scheme in ("hf", "gigatoken"):
        path, eod = _split_option(spec, body, "eod")
        return (HFTokenizer if scheme == "hf" else GigatokenTokenizer)(path, eod, name=spec)
    if colon and scheme == "tiktoken":
        source, pat = _split_option(spec, body, "pat")
        return TiktokenTokenizer(source, pat, name=spec)
    if colon and scheme == "sentencepiece":
        return SentencePieceTokenizer(_split_option(spec, body, None)[0], name=spec)
    base = spec.rpartition("#")[0] or spec
    if base.endswith(".model"):
        return SentencePieceTokenizer(_split_option(spec, spec, None)[0], name=spec)
    if base.endswith(".tiktoken"):
        source, pat = _split_option(spec, spec, "pat")
        return TiktokenTokenizer(source, pat, name=spec)
    if base.endswith(".json") or os.path.isdir(base):
        path, eod = _split_option(spec, spec, "eod")
        return HFTokenizer(path, eod, name=spec)
    raise ConfigError(f"cannot tell which tokenizer {spec!r} names; {_accepted()}")


ENGINES = ("auto", "hf", "gigatoken")
"""How an `hf:` tokenizer.json is run: gigatoken where it gives HF's ids ("auto"), or one engine, forced."""

ENGINE_PROBES = (
    "Hello, world!  It's 2026-11-24; x=3.14159 and   tabs\tand\r\nlines\n\n",
    "naïve café, Größe, 東京, Москва, 🙂👍🏽 and ʼapostrophesʼ don't we'll I'M",
    "    def f(x):\n        return x ** 2  # code, indented\n",
)
"""Texts every engine check encodes besides the input's sample: accents, scripts, emoji, whitespace runs."""


def choose_engine(tokenizer: Tokenizer, engine: str, sample: Sequence[str]) -> Tokenizer:
    """The tokenizer that encodes for `tokenizer` under `engine` (see ENGINES): for an `hf:`
    tokenizer.json and "auto", gigatoken if it loads and gives the same ids as HF on `sample` (and
    ENGINE_PROBES), else `tokenizer` itself, logging one line saying why; "gigatoken" forces it
    (a TokenizerError if it cannot load or gives other ids), "hf" forces HF tokenizers."""
    if engine not in ENGINES:
        raise ConfigError(f"tokenizer engine {engine!r} is not one of {', '.join(ENGINES)}")
    if not isinstance(tokenizer, HFTokenizer):
        if engine != "auto":
            raise ConfigError(
                f"tokenizer engine {engine!r} applies to tokenizer.json tokenizers; {tokenizer.spec()!r} is a "
                f"{tokenizer.kind} tokenizer: drop the engine or give an 'hf:' tokenizer"
            )
        return tokenizer
    if engine == "hf":
        return tokenizer if type(tokenizer) is HFTokenizer else HFTokenizer(tokenizer.path, tokenizer.eod_token)
    if isinstance(tokenizer, GigatokenTokenizer):
        return tokenizer
    try:
        fast = GigatokenTokenizer(tokenizer.path, tokenizer.eod_token)
        why = _engine_difference(tokenizer, fast, [*ENGINE_PROBES, *sample])
    except TokenportError as e:
        why = str(e)
    if why is None:
        logger.info("tokenizing %s with gigatoken (same ids as HF tokenizers on the input's sample)", tokenizer.path)
        return fast
    if engine == "gigatoken":
        raise TokenizerError(f"tokenizer engine 'gigatoken' cannot run {tokenizer.path}: {why}; use engine 'hf'")
    logger.info("tokenizing %s with HF tokenizers, not gigatoken: %s", tokenizer.path, why)
    return tokenizer


def _engine_difference(reference: Tokenizer, other: Tokenizer, texts: list[str]) -> str | None:
    """Why `other` does not give `reference`'s ids, vocabulary and eod on `texts`, or None if it does."""
    if (other.vocab_size, other.eod_id) != (reference.vocab_size, reference.eod_id):
        return (
            f"its vocab_size/eod_id {other.vocab_size}/{other.eod_id} differ from HF's "
            f"{reference.vocab_size}/{reference.eod_id}"
        )
    pairs: list[tuple[np.ndarray | None, np.ndarray | None]]
    try:
        pairs = list(zip(reference.encode_batch(texts), other.encode_batch(texts)))
    except Exception:  # a text one of them cannot encode (a lone surrogate): compare text by text
        pairs = [(_ids_or_failure(reference, text), _ids_or_failure(other, text)) for text in texts]
    for k, (want, got) in enumerate(pairs):
        if want is None or got is None:
            if want is not got:
                return (
                    f"{'HF' if want is None else 'it'} fails on sample text {k} ({texts[k][:40]!r}...), the other not"
                )
        elif not np.array_equal(want, got):
            return f"it gives other ids than HF for sample text {k} ({texts[k][:40]!r}...)"
    return None


def _ids_or_failure(tokenizer: Tokenizer, text: str) -> np.ndarray | None:
    """The ids of `text`, or None if the tokenizer raises on it (as prepare then skips the document)."""
    try:
        return tokenizer.encode_batch([text])[0]
    except TokenportError:
        raise
    except Exception:
        return None


def tokenizer_from_identity(identity: dict[str, Any]) -> Tokenizer | None:
    """Rebuild a manifest's tokenizer if its files are here and unchanged, else None."""
    spec = identity.get("spec")
    if not isinstance(spec, str):
        return None
    try:
        tok = load_tokenizer(spec)
        found = tok.identity()
    except TokenportError as e:
        logger.info("tokenizer %s of the manifest is not available here: %s", spec, e)
        return None
    keys = ("fingerprint", "vocab_size", "eod_id")
    if any(found[k] != identity.get(k) for k in keys):
        logger.warning("tokenizer %s differs from the manifest's in %s; not using it", spec, "/".join(keys))
        return None
    return tok


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int, path: str) -> str:
    """Train a HF byte-level BPE (GPT-2 style, eod `<|endoftext|>`) on `texts`; save tokenizer.json to `path`.

    For tests and benchmarks, which cannot download tokenizers. `path` may be a directory,
    in which case the file is `path/tokenizer.json`. Returns the file's path.
    """
    hf = _require("tokenizers", "hf")
    tok = hf.Tokenizer(hf.models.BPE())
    tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = hf.decoders.ByteLevel()
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),  # every byte, seen or not
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    tok.save(path)
    return path


def _utf8_chars(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The UTF-8 bytes of `texts` end to end (uint8), each text's byte count, and for each byte the index of
    the character it belongs to within its own text."""
    joined = "".join(texts)
    data = np.frombuffer(joined.encode("utf-8"), np.uint8)
    chars = np.fromiter((len(t) for t in texts), np.int64, count=len(texts))
    char_starts = np.cumsum(chars) - chars
    if len(data) == len(joined):  # ASCII: a byte per character
        return data, chars, np.arange(len(data), dtype=np.int64) - np.repeat(char_starts, chars)
    first_bytes = np.flatnonzero((data & 0xC0) != 0x80)  # where each character starts
    byte_starts = np.append(first_bytes, len(data))[char_starts]
    text_bytes = np.diff(np.append(byte_starts, len(data)))
    char = np.cumsum((data & 0xC0) != 0x80) - 1
    return data, text_bytes, char - np.repeat(char_starts, text_bytes)


def _split(flat: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Cut `flat` into consecutive views of the given lengths (plain slicing: np.split is slower)."""
    ends = list(itertools.accumulate(lengths))
    return [flat[end - n : end] for end, n in zip(ends, lengths)]


def _digest(*parts: bytes) -> str:
    """sha256 hex digest of length-prefixed parts."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _read(path: str, kind: str) -> bytes:
    """Bytes of a tokenizer's defining file, or a TokenizerError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TokenizerError(
            f"cannot read the {kind} tokenizer file {path}: {e.strerror}; check the path in the tokenizer spec"
        ) from e


def _require(module: str, extra: str) -> Any:
    """Import an optional package, or raise a TokenizerError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TokenizerError(
            f"the {extra} tokenizer needs the {module!r} package: pip install 'tokenport[{extra}]'"
        ) from e


def _tokenizer_json_path(path: str, kind: str) -> str:
    """Absolute path of the tokenizer.json that `path` (the file or its directory) names."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(path):
            raise TokenizerError(
                f"directory {os.path.dirname(path)} holds no tokenizer.json for the {kind} tokenizer; "
                "name the tokenizer file itself"
            )
    return os.path.abspath(path)


def _pick_eod(token_id: Callable[[str], int | None], override: str | None, path: str) -> int:
    """Id of the end-of-document token: the override if given, else the first of EOD_CANDIDATES present."""
    for token in [override] if override else EOD_CANDIDATES:
        eod = token_id(token)
        if eod is not None:
            return int(eod)
    if override:
        raise TokenizerError(
            f"{path} has no token {override!r} (from '#eod={override}'); name a token of its vocabulary"
        )
    raise TokenizerError(
        f"{path} has none of the end-of-document tokens {list(EOD_CANDIDATES)}; "
        "name one of its tokens with '#eod=TOKEN' after the path in the tokenizer spec"
    )


def _split_option(spec: str, body: str, key: str | None) -> tuple[str, str | None]:
    """Split 'PATH#key=value' into PATH and value; `key` is the one option the backend takes."""
    path, hash_sign, option = body.rpartition("#")
    if not hash_sign:
        return body, None
    name, eq, value = option.partition("=")
    if name != key or not eq or not value or not path:
        allowed = f"the only option is '#{key}=...'" if key else "this kind takes no '#' options"
        raise ConfigError(f"tokenizer spec {spec!r}: bad option {option!r}; {allowed}")
    return path, value


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


def _accepted() -> str:
    """The accepted spec forms, for error messages."""
    return "accepted forms: " + "; ".join(SPEC_FORMS)

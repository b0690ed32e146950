"""Tokenizers of a HF tokenizer.json: run by HF `tokenizers`, or by gigatoken (the same ids, faster)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import TokenizerError
from .base import (
    Tokenizer,
    after_prefix,
    digest,
    pick_eod,
    read_file,
    register_tokenizer,
    require,
    split_ids,
    split_option,
)
from .hub import looks_like_hub_name, resolve_hub_name

__all__ = ["GigatokenTokenizer", "HFTokenizer"]


class HFTokenizer(Tokenizer):
    """A HF `tokenizers` tokenizer.json, encoded without added special tokens."""

    kind = "hf"

    def __init__(self, path: str, eod: str | None = None, name: str | None = None) -> None:
        given = path
        if not os.path.exists(path) and looks_like_hub_name(path):
            path = resolve_hub_name(path)  # a model name: its copy in the HF cache, or how to get one
        self.path = _tokenizer_json_path(path, self.kind)
        self.eod_token = eod if eod or not os.path.isdir(path) else config_eos(path)
        super().__init__(name or given)

    def spec(self) -> str:
        return f"{self.kind}:{self.path}" + (f"#eod={self.eod_token}" if self.eod_token else "")

    def _load(self) -> tuple[Any, int, int | None, str]:
        hf = require("tokenizers", "hf")
        data = read_file(self.path, self.kind)
        try:
            tok = hf.Tokenizer.from_str(data.decode("utf-8"))
        except Exception as e:  # the Rust parser raises a bare Exception
            raise TokenizerError(f"{self.path} is not a valid HF tokenizer.json: {e}") from e
        eod = pick_eod(tok.token_to_id, self.eod_token, self.path)
        return tok, tok.get_vocab_size(with_added_tokens=True), eod, digest(data)

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

    def _load(self) -> tuple[Any, int, int | None, str]:
        gt = require("gigatoken", "gigatoken")
        data = read_file(self.path, self.kind)
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
        return tok, tok.vocab_size, pick_eod(vocab.get, self.eod_token, self.path), digest(data)

    def encode(self, text: str) -> np.ndarray:
        return self._backend.encode(text).astype(np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if not texts:
            return []
        import awkward as ak  # a dependency of gigatoken: its batches come back as awkward arrays

        out = self._backend.encode_batch(texts)
        return split_ids(ak.flatten(out).to_numpy().astype(np.int64), ak.num(out).to_numpy().tolist())

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
            from .._offsets import ByteLevelOffsets  # numba: loaded only where offsets are needed

            config = json.loads(read_file(self.path, self.kind))
            derive = self.__dict__["_byte_offsets"] = ByteLevelOffsets(config, self)
        texts = list(texts)
        if not texts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
        import awkward as ak

        out = self._backend.encode_batch(texts)
        ids = ak.flatten(out).to_numpy().astype(np.int64)
        lengths = ak.num(out).to_numpy().astype(np.int64)
        return ids, lengths, derive(texts, ids, lengths)


def config_eos(directory: str) -> str | None:
    """The eos_token of a folder's tokenizer_config.json (as transformers saves it: a string or an
    AddedToken dict), which transformers' tokenizer ends text with; None when the folder sets none."""
    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise TokenizerError(f"cannot read {path}: {e}; fix it, or name the tokenizer.json file itself") from None
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    if eos is not None and (not isinstance(eos, str) or not eos):
        raise TokenizerError(f"{path}: 'eos_token' is {eos!r}, not a token; fix it, or pass the EOD with '#eod=TOKEN'")
    return eos


def _tokenizer_json_path(path: str, kind: str) -> str:
    """Absolute path of the tokenizer.json that `path` (the file or its directory) names."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(path):
            raise TokenizerError(
                f"directory {os.path.dirname(path)} holds no tokenizer.json for the {kind} tokenizer; name the "
                "tokenizer file itself, or save the tokenizer there with transformers' save_pretrained (a fast "
                "tokenizer writes tokenizer.json and tokenizer_config.json)"
            )
    return os.path.abspath(path)


def _hf(spec: str) -> HFTokenizer:
    path, eod = split_option(spec, after_prefix(spec, "hf"), "eod")
    return HFTokenizer(path, eod, name=spec)


def _gigatoken(spec: str) -> GigatokenTokenizer:
    path, eod = split_option(spec, after_prefix(spec, "gigatoken"), "eod")
    return GigatokenTokenizer(path, eod, name=spec)


register_tokenizer("hf", _hf)
register_tokenizer("gigatoken", _gigatoken)

"""Tokenizers of a sentencepiece .model file."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import TokenizerError
from .base import Tokenizer, after_prefix, digest, read_file, register_tokenizer, require, split_option

__all__ = ["SentencePieceTokenizer"]


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece .model file; its eos piece is the end-of-document token."""

    kind = "sentencepiece"

    def __init__(self, path: str, name: str | None = None) -> None:
        self.path = os.path.abspath(path)
        super().__init__(name or path)

    def spec(self) -> str:
        return f"sentencepiece:{self.path}"

    def _load(self) -> tuple[Any, int, int, str]:
        spm = require("sentencepiece", "sentencepiece")
        data = read_file(self.path, self.kind)
        try:
            sp = spm.SentencePieceProcessor(model_proto=data)
        except (RuntimeError, TypeError) as e:
            raise TokenizerError(f"{self.path} is not a valid sentencepiece model: {e}") from e
        if sp.eos_id() < 0:
            raise TokenizerError(
                f"sentencepiece model {self.path} has no eos piece (eos_id is -1), so it has no end-of-document "
                "id; retrain it with eos_id set (sentencepiece's default is 2)"
            )
        return sp, sp.get_piece_size(), sp.eos_id(), digest(data)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode(text), dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self._backend.encode(texts)]

    def _decode(self, ids: np.ndarray) -> str:
        return self._backend.decode(ids.tolist())


def _from_spec(spec: str) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(split_option(spec, after_prefix(spec, "sentencepiece"), None)[0], name=spec)


register_tokenizer("sentencepiece", _from_spec)

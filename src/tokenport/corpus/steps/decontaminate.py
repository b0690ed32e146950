"""Decontamination: drop training documents that share a long n-gram with an evaluation set.

The evaluation texts (jsonl with a text field, or plain text files, one document per file) are
cut into lower-cased word n-grams (13 words by default, as in GPT-3 and LLaMA); a training
document sharing any of them is removed. Each worker process builds the n-gram set once per
set of files and reuses it for every unit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator, Sequence

from ..._checks import check_int
from ...errors import ConfigError, InputDataError
from .base import Step
from .quality import words_of

__all__ = ["Decontaminate"]


def _ngrams(text: str, n: int) -> set[bytes]:
    """8-byte digests of the text's lower-cased word n-grams (punctuation aside)."""
    words = [word.lower() for word in words_of(text)]
    return {
        hashlib.blake2b(" ".join(words[i : i + n]).encode(), digest_size=8).digest() for i in range(len(words) - n + 1)
    }


def _texts(path: str, text_key: str) -> Iterator[str]:
    """The evaluation documents of one file: jsonl records' ``text_key``, or the whole text file."""
    try:
        with open(path, encoding="utf-8") as f:
            if path.endswith((".jsonl", ".ndjson")):
                for number, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            record = json.loads(line)
                            yield record[text_key]
                        except (json.JSONDecodeError, KeyError, TypeError):
                            raise InputDataError(
                                f"{path}:{number}: not a JSON object with a {text_key!r} field (evaluation set)"
                            ) from None
            else:
                yield f.read()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the evaluation set ({error.strerror})") from None


@functools.lru_cache(maxsize=4)
def _evaluation_ngrams(files: tuple[tuple[str, float], ...], n: int, text_key: str) -> frozenset[bytes]:
    grams: set[bytes] = set()
    for path, _ in files:
        for text in _texts(path, text_key):
            grams |= _ngrams(text, n)
    return frozenset(grams)


class Decontaminate(Step):
    """``{"step": "decontaminate", "eval_files": [...], "n": 13, "text_key": "text"}``: drop
    documents sharing a word n-gram with any evaluation document."""

    def __init__(self, eval_files: Sequence[str], n: int = 13, text_key: str = "text") -> None:
        if isinstance(eval_files, str) or not eval_files:
            raise ConfigError("eval_files: give a list of evaluation set files (jsonl or text)")
        n = check_int("n", n, 1, what="the n-gram length in words")
        for path in eval_files:
            if not os.path.isfile(path):
                raise ConfigError(f"{path}: evaluation set file not found")
        super().__init__()
        stamped = tuple((os.path.abspath(path), os.path.getmtime(path)) for path in eval_files)
        self.n = n
        self.grams = _evaluation_ngrams(stamped, n, text_key)
        if not self.grams:
            raise ConfigError(f"eval_files hold no {n}-word passage: nothing to decontaminate against")

    def reject(self, text: str) -> str | None:
        return None if _ngrams(text, self.n).isdisjoint(self.grams) else "contaminated"

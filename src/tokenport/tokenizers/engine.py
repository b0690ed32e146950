"""Which engine runs an `hf:` tokenizer.json: gigatoken where it gives HF's ids, else HF tokenizers."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError, TokenizerError, TokenportError
from .base import Tokenizer
from .hf import GigatokenTokenizer, HFTokenizer

__all__ = ["ENGINES", "ENGINE_PROBES", "choose_engine"]

logger = logging.getLogger("tokenport.tokenizers")  # the package's logger, as before the split

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
    if (other.vocab_size, other.eod_id_or_none) != (reference.vocab_size, reference.eod_id_or_none):
        return (
            f"its vocab_size/eod_id {other.vocab_size}/{other.eod_id_or_none} differ from HF's "
            f"{reference.vocab_size}/{reference.eod_id_or_none}"
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

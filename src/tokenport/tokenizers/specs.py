"""Tokenizer spec strings: `load_tokenizer` reads the backend's name and dispatches to its registered
factory; `tokenizer_from_identity` rebuilds a manifest's tokenizer from the spec it recorded."""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import ConfigError, TokenizerError, TokenportError
from .base import TOKENIZERS, Tokenizer, TokenizerFactory
from .hub import looks_like_hub_name

__all__ = ["SPEC_FORMS", "load_tokenizer", "tokenizer_from_identity"]

logger = logging.getLogger("tokenport.tokenizers")

SPEC_FORMS = (
    "None or 'byte' (the built-in byte-level tokenizer)",
    "'hf:PATH[#eod=TOKEN]' (PATH a tokenizer.json or a directory holding one)",
    "a tokenizer.json file, or a folder saved by transformers (tokenizer.json, tokenizer_config.json)",
    "a Hugging Face model name already in the local HF cache (e.g. 'gpt2'; nothing is downloaded)",
    "'tiktoken:PATH[#pat=cl100k|o200k|gpt2]' (a .tiktoken BPE ranks file)",
    "'tiktoken:NAME' (a built-in tiktoken encoding already in tiktoken's local cache)",
    "'sentencepiece:PATH' or a path ending in .model",
    "'gigatoken:PATH[#eod=TOKEN]' (a byte-level BPE tokenizer.json)",
    "'NAME:...' (a backend added with tokenport.tokenizers.register_tokenizer, or by a plugin)",
)


def load_tokenizer(spec: str | Tokenizer | None = None) -> Tokenizer:
    """Build the tokenizer a spec string names (see SPEC_FORMS); None means the byte tokenizer."""
    if spec is None:
        spec = "byte"
    if isinstance(spec, Tokenizer):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"tokenizer spec must be a string, got {type(spec).__name__}; {_accepted()}")
    factory = _factory(spec)
    try:
        tokenizer = factory(spec)
    except TokenportError:
        raise
    except Exception as exc:  # a plugin's factory failing: named, not a bare error
        raise TokenizerError(f"tokenizer spec {spec!r}: its backend failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(tokenizer, Tokenizer):
        raise ConfigError(
            f"tokenizer spec {spec!r}: its backend's factory returned {tokenizer!r:.60}, not a "
            "tokenport.tokenizers.Tokenizer; fix the factory given to register_tokenizer"
        )
    return tokenizer


def _factory(spec: str) -> TokenizerFactory:
    """The factory of the backend `spec` names: by its ``NAME:`` prefix (loading plugins for a name not
    registered here), else by the file a bare path names (.model, .tiktoken, .json or a directory)."""
    if spec == "byte":
        return TOKENIZERS.get("byte")
    scheme, colon, _ = spec.partition(":")
    named = bool(colon) and scheme.replace("-", "_").replace(".", "_").isidentifier()  # as register allows
    factory = TOKENIZERS.find(scheme) if named else None
    if factory is not None:
        return factory
    base = spec.rpartition("#")[0] or spec
    for suffix, name in ((".model", "sentencepiece"), (".tiktoken", "tiktoken"), (".json", "hf")):
        if base.endswith(suffix):
            return TOKENIZERS.get(name)
    if os.path.isdir(base) or (not colon and looks_like_hub_name(base)):  # a folder, or a model name (gpt2)
        return TOKENIZERS.get("hf")
    known = ", ".join(TOKENIZERS)
    unknown = f" (no tokenizer backend is called {scheme!r}; known: {known})" if named else ""
    raise ConfigError(f"cannot tell which tokenizer {spec!r} names{unknown}; {_accepted()}")


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
    if any(found.get(k) != identity.get(k) for k in keys):
        logger.warning("tokenizer %s differs from the manifest's in %s; not using it", spec, "/".join(keys))
        return None
    return tok


def _accepted() -> str:
    """The accepted spec forms, for error messages."""
    return "accepted forms: " + "; ".join(SPEC_FORMS) + _added()


def _added() -> str:
    names = [name for name, _ in TOKENIZERS.added()]
    return f" (added backends: {', '.join(names)})" if names else ""

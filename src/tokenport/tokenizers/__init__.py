"""One interface over the tokenizers tokenport stores tokens for.

Backends: the built-in byte-level tokenizer (no files, no extras), HF `tokenizers`
tokenizer.json files, tiktoken BPE ranks files, sentencepiece models, and gigatoken
(a fast engine for HF byte-level BPE tokenizer.json files that gives the same ids).
A tokenizer is named by a spec string (see `load_tokenizer`); it pickles as its spec
and reloads its files on first use, so it can be sent to worker processes.

A new backend is a `Tokenizer` subclass and one `register_tokenizer(NAME, factory)` call,
after which specs ``"NAME:..."`` load it (in manifests and on the command line too; a
plugin's backend is found through the ``tokenport.plugins`` entry points).
"""

from __future__ import annotations

from .base import EOD_CANDIDATES, TOKENIZERS, Tokenizer, TokenizerFactory, register_tokenizer
from .byte import ByteTokenizer
from .engine import ENGINE_PROBES, ENGINES, choose_engine
from .hf import GigatokenTokenizer, HFTokenizer
from .sentencepiece_model import SentencePieceTokenizer
from .specs import SPEC_FORMS, load_tokenizer, tokenizer_from_identity
from .tiktoken_ranks import TIKTOKEN_PATTERNS, TiktokenTokenizer

__all__ = [
    "ENGINES",
    "ENGINE_PROBES",
    "EOD_CANDIDATES",
    "SPEC_FORMS",
    "TIKTOKEN_PATTERNS",
    "ByteTokenizer",
    "GigatokenTokenizer",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerFactory",
    "choose_engine",
    "load_tokenizer",
    "register_tokenizer",
    "tokenizer_from_identity",
]

TOKENIZERS.seal_built_ins()

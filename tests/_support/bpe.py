"""A real HF byte-level BPE trained here, for tests and benchmarks, which cannot download tokenizers."""

from __future__ import annotations

import os
from collections.abc import Iterable


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int, path: str) -> str:
    """Train a HF byte-level BPE (GPT-2 style, eod `<|endoftext|>`) on `texts`; save tokenizer.json to `path`.

    `path` may be a directory, in which case the file is `path/tokenizer.json`. Returns the file's path.
    """
    import tokenizers as hf

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

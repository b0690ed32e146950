"""A small sample of the input's texts, read from its first files at the start of a run (to check
that a faster tokenizer engine gives the same ids on this corpus before it is used)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator, Sequence
from typing import cast

from ..run.stats import Problems, UnitStats
from ..run.units import Slice
from .documents import Document
from .readers import read_slice
from .sources import InputFile


def sample_texts(
    files: Sequence[InputFile], text_key: str | None, documents: int = 256, chars: int = 1 << 18
) -> list[str]:
    """Up to `documents` texts (about `chars` characters in all) from the start of `files`, in order;
    whole records as JSON when `text_key` is None (conversations). Malformed input is skipped here:
    the run itself reports it."""
    texts: list[str] = []
    total = 0
    for index, f in enumerate(files):
        piece = Slice(index, f.path, f.format, f.compression, 0, None, 0, f.size)
        reader = cast(Generator[Document, None, None], read_slice(piece, text_key, Problems("skip", UnitStats())))
        with contextlib.closing(reader) as documents_of_file:  # the readers are generators: close the file early
            for document in documents_of_file:
                text = document.text if text_key is not None else json.dumps(document.metadata, ensure_ascii=False)
                texts.append(text[: chars - total])
                total += len(texts[-1])
                if len(texts) >= documents or total >= chars:
                    return texts
    return texts

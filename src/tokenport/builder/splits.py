"""Megatron-LM's split strings and the document range of each split, with its exact arithmetic.

``parse_and_normalize_split``, ``convert_split_vector_to_split_matrix`` and the rounding of each
book-end to a document, as megatron-core does them, so train/valid/test hold the same documents.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from .._checks import check_int
from ..errors import ConfigError

SPLIT_NAMES = ("train", "valid", "test")

_SPLIT_FIELD = re.compile(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


def parse_split(split: str) -> tuple[float, ...]:
    """Normalized (train, valid, test) weights of a split string such as "969,30,1", as Megatron does."""
    return _parse_split(str(split))


@functools.lru_cache(maxsize=256)
def _parse_split(split: str) -> tuple[float, ...]:
    """``parse_split``, remembered: a blend of thousands of stores asks it once per store."""
    fields = [text.strip() for text in str(split).split(",")]
    if len(fields) > len(SPLIT_NAMES) or not all(_SPLIT_FIELD.match(text) for text in fields):
        raise ConfigError(
            f"split={split!r}: expected up to {len(SPLIT_NAMES)} comma-separated non-negative numbers "
            "(train,valid,test), such as '969,30,1' or '98,2,0'"
        )
    weights = [float(text) for text in fields] + [0.0] * (len(SPLIT_NAMES) - len(fields))
    total = np.sum(np.array(weights, dtype=np.float64))
    if not np.isfinite(total) or total <= 0.0:
        raise ConfigError(f"split={split!r}: the weights must be finite and sum to more than zero")
    return tuple((np.array(weights, dtype=np.float64) / total).tolist())


def split_document_ranges(split: str, num_documents: int) -> list[tuple[int, int] | None]:
    """[begin, end) document range of train, valid and test (None for a zero-weight split), as Megatron rounds them."""
    check_int("num_documents", num_documents, 0)
    bounds = [0.0]
    for weight in parse_split(split):
        bounds.append(bounds[-1] + weight)
    ranges: list[tuple[int, int] | None] = []
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if end <= begin:
            ranges.append(None)
        else:
            ranges.append((int(round(begin * float(num_documents))), int(round(end * float(num_documents)))))
    return ranges

"""Prepare output directories in a blend: each stands for its parts, in order, sharing its weight by size.

A store list may name a prepare output directory where it names a store (``--data-path 0.3
stores/web 0.7 stores/code``, a spec's ``path:``, a ``Blend``). Without weights each part weighs
its own size, as any store does; with a weight W the parts share W by their token counts,
exactly as a spec's ``{weight: W, parts: [...]}`` entry shares it, so a blend naming the directory
and one naming its parts are the same blend (same weights, same cache keys).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._checks import summable
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..indexed.directories import directory_parts


def megatron_normalize(weights: Sequence[float]) -> list[float]:
    """Weights divided by their float64 sum, as megatron.core.datasets.utils.normalize does (weights
    whose sum overflows, near the float maximum, by their ratio: megatron-core divides them to zeros)."""
    w = summable(weights)
    return (w / np.sum(w)).tolist()


def store_tokens(prefix: str) -> int:
    """The token count of a store, read from its .idx."""
    with IndexedDataset(prefix) as store:
        return store.num_tokens


def part_shares(prefix: str, parts: Sequence[str], weight: float, size_of: Callable[[str], int]) -> list[float]:
    """``weight`` shared by ``parts`` (of the directory ``prefix``) by their token counts."""
    tokens = [size_of(part) for part in parts]
    if not any(tokens):
        raise ConfigError(
            f"{prefix}: its parts ({', '.join(parts)}) hold no tokens, so its weight cannot be shared by size: "
            "give it weight 0, or drop it"
        )
    return [weight * share for share in megatron_normalize(tokens)]


def expand_parts(
    prefixes: Sequence[str], weights: Sequence[float] | None, size_of: Callable[[str], int] = store_tokens
) -> tuple[tuple[str, ...], tuple[float, ...] | None] | None:
    """``prefixes`` (and ``weights``) with each local prepare output directory replaced by its parts and
    its weight shared by their token counts; None when no prefix is such a directory."""
    found = [directory_parts(prefix) for prefix in prefixes]
    if all(parts is None for parts in found):
        return None
    out: list[str] = []
    shares: list[float] = []
    for i, (prefix, parts) in enumerate(zip(prefixes, found)):
        out.extend([prefix] if parts is None else parts)
        if weights is None:
            continue
        if parts is None:
            shares.append(weights[i])
        else:  # a zero weight drops the directory: its parts are not read
            shares.extend(part_shares(prefix, parts, weights[i], size_of) if weights[i] else [0.0] * len(parts))
    return tuple(out), None if weights is None else tuple(shares)

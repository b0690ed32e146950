"""Deduplication steps: exact (normalized text) and fuzzy (MinHash-LSH), decided over the whole run.

A dedup step cannot decide document by document: whether a document is a duplicate depends on
every other. So ``prepare`` runs it in three passes. (1) Every unit runs the steps before it and
writes one key row per document that reaches it (``keys``) to ``.work/dedup-N/UNIT.keys.npy``.
(2) The keys of all units, in unit order, are compared once: exact keys by equality, MinHash band
keys by clustering; each group keeps its first document and the rest are marked, per unit, in
``UNIT.drop.npy``. (3) The normal run drops the marked documents at that step, by their ordinal
among the documents reaching it (the steps before it are deterministic, so ordinals agree). Each
file is written atomically, so an interrupted run resumes. Keys are 16 bytes (exact) or
``bands * 8`` bytes (MinHash) per document, held in memory for pass 2.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import ConfigError
from .documents import Document
from .minhash import MinHasher, cluster_representatives, exact_key
from .rejects import Rejecting

__all__ = ["DEDUP_KINDS", "DropDuplicates", "decide", "keys_path", "drops_path", "make_signer"]

DEDUP_KINDS = ("exact_dedup", "minhash_dedup")


def make_signer(kind: str, bands: int = 14, rows: int = 8, ngram: int = 5, seed: int = 1,
                **unknown: object):
    """The key row of one document's text for a dedup step (ConfigError for unknown options)."""
    if unknown:
        raise ConfigError(f"unexpected option {sorted(unknown)[0]!r}")
    if kind == "exact_dedup":
        if (bands, rows, ngram, seed) != (14, 8, 5, 1):
            raise ConfigError("exact_dedup takes no options")
        return lambda text: np.frombuffer(exact_key(text), dtype=np.uint64)
    hasher = MinHasher(bands=bands, rows=rows, ngram=ngram, seed=seed)
    return lambda text: hasher.band_keys(hasher.signature(text))


def keys_path(work_dir: str, position: int, unit_name: str) -> str:
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.keys.npy")


def drops_path(work_dir: str, position: int, unit_name: str) -> str:
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.drop.npy")


def save_atomically(path: str, array: np.ndarray) -> None:
    """``np.save`` to a temporary file beside ``path``, then rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp.npy"
    np.save(temporary, array)
    os.replace(temporary, path)


def decide(kind: str, keys: list[np.ndarray]) -> list[np.ndarray]:
    """Per unit, a bool mask of its documents (at this step) that duplicate an earlier one."""
    counts = [len(k) for k in keys]
    width = next((k.shape[1] for k in keys if k.ndim == 2 and len(k)), 1)
    everything = np.concatenate([k.reshape(len(k), width) for k in keys]) if sum(counts) else np.zeros((0, width))
    everything = everything.astype(np.uint64, copy=False)
    if kind == "exact_dedup":
        _, first = np.unique(everything, axis=0, return_index=True)
        keep = np.zeros(len(everything), dtype=bool)
        keep[first] = True
    else:
        keep = cluster_representatives(everything) == np.arange(len(everything))
    bounds = np.cumsum([0, *counts])
    return [~keep[bounds[i] : bounds[i + 1]] for i in range(len(keys))]


class DropDuplicates(Rejecting):
    """Pass 3 of a dedup step: drop the documents marked for this unit, by ordinal."""

    def __init__(self, marked: np.ndarray) -> None:
        self.marked = marked
        self.removed: Counter = Counter()

    def __call__(self, documents: Iterable[Document]) -> Iterator[Document]:
        for ordinal, document in enumerate(documents):
            if ordinal >= len(self.marked):
                raise ConfigError(
                    "a dedup step saw more documents than when its keys were made: the steps before it "
                    "or the input changed; delete OUTPUT/.work/dedup-* and rerun"
                )
            if self.marked[ordinal]:
                self.drop(document, "duplicate")
            else:
                yield document

    def counts(self) -> dict[str, int]:
        return {f"removed:{reason}": n for reason, n in self.removed.items()}

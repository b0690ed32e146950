"""Deduplication steps: exact (normalized text) and fuzzy (MinHash-LSH), decided over the whole run.

A dedup step cannot decide document by document: whether a document is a duplicate depends on
every other. So ``prepare`` runs it in three passes. (1) Every unit runs the steps before it and
writes one key row per document that reaches it (``keys``) to ``.work/dedup-N/UNIT.keys.npy``.
(2) The keys of all units, in unit order, are compared once: exact keys by equality, MinHash band
keys by clustering, read one band at a time from the memory-mapped key files; each group keeps
its first document and the rest are marked, per unit, in ``UNIT.drop.npy``. (3) The normal run
drops the marked documents at that step, by their ordinal among the documents reaching it (the
steps before it are deterministic, so ordinals agree). Each file is written atomically, so an
interrupted run resumes. Keys are 16 bytes (exact) or
``bands * 8`` bytes (MinHash) per document on disk; pass 2 holds about 40 bytes per document.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import ConfigError
from .documents import Document
from .minhash import MinHasher, exact_key, join_band, representatives
from .rejects import Rejecting

__all__ = ["DEDUP_KINDS", "DropDuplicates", "decide", "keys_path", "drops_path", "make_signer"]

DEDUP_KINDS = ("exact_dedup", "minhash_dedup")


def make_signer(kind: str, bands: int = 14, rows: int = 8, ngram: int = 5, seed: int = 1,
                index: str | None = None, save_index: str | None = None, **unknown: object):
    """The key row of one document's text for a dedup step (ConfigError for unknown options).

    ``index`` names a signature index saved by an earlier run (``save_index``): documents that
    duplicate one of its documents are dropped too (cross-dataset deduplication).
    """
    if unknown:
        raise ConfigError(f"unexpected option {sorted(unknown)[0]!r}")
    if index is not None:
        load_index(index, _identity(kind, bands, rows, ngram, seed))
    if kind == "exact_dedup":
        if (bands, rows, ngram, seed) != (14, 8, 5, 1):
            raise ConfigError("exact_dedup takes no options but index and save_index")
        return lambda text: np.frombuffer(exact_key(text), dtype=np.uint64)
    hasher = MinHasher(bands=bands, rows=rows, ngram=ngram, seed=seed)
    return lambda text: hasher.band_keys(hasher.signature(text))


def _identity(kind: str, bands: int, rows: int, ngram: int, seed: int) -> dict[str, object]:
    """What makes keys comparable: an index must have been made with the same settings."""
    return {"kind": kind} if kind == "exact_dedup" else {"kind": kind, "bands": bands, "rows": rows,
                                                         "ngram": ngram, "seed": seed}


def spec_identity(spec: dict) -> dict[str, object]:
    """The key identity of a dedup step spec."""
    options = {k: v for k, v in spec.items() if k in ("bands", "rows", "ngram", "seed")}
    return _identity(spec["step"], **{"bands": 14, "rows": 8, "ngram": 5, "seed": 1, **options})


def load_index(path: str, identity: dict[str, object]) -> np.ndarray:
    """The keys of a signature index (``PATH.npy`` with ``PATH.json``), checked against ``identity``."""
    try:
        with open(path + ".json", encoding="utf-8") as f:
            saved = json.load(f)
        keys = np.load(path + ".npy", mmap_mode="r")
    except (OSError, ValueError) as error:
        raise ConfigError(f"index {path}: cannot be read ({error}); pass the save_index path of an earlier run")
    if saved != identity:
        raise ConfigError(f"index {path} was made with {saved}, this step uses {identity}: keys would not compare")
    return keys


def save_index(path: str, identity: dict[str, object], keys: np.ndarray) -> None:
    """Write a signature index (keys, then its identity, each atomically)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    save_atomically(path + ".npy", keys)
    temporary = f"{path}.json.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(identity, f)
    os.replace(temporary, path + ".json")


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


def decide(kind: str, key_files: list[str], index: np.ndarray | None = None) -> list[np.ndarray]:
    """Per unit (its keys file), a bool mask of its documents at this step that duplicate an earlier
    one, or one of ``index`` (keys of earlier runs, which count as coming first).

    Memory stays at a few arrays of one column per document: MinHash keys are read one band at a
    time from the memory-mapped key files (a union-find forest joins each band's equal keys);
    exact keys (two 64-bit words per document) are sorted once.
    """
    keys = [np.load(path, mmap_mode="r") for path in key_files]
    if index is not None:
        keys = [index, *keys]
    counts = [len(k) for k in keys]
    total = sum(counts)
    width = next((k.shape[1] for k in keys if k.ndim == 2 and len(k)), 1)

    def column(position: int) -> np.ndarray:
        parts = [np.asarray(k[:, position], dtype=np.uint64) for k in keys if len(k)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    if kind == "exact_dedup":
        words = [column(position) for position in range(width)]
        order = np.lexsort((np.arange(total), *reversed(words)))  # by key, then by position
        ordered = np.stack([w[order] for w in words], axis=1) if total else np.zeros((0, width), dtype=np.uint64)
        first = np.ones(total, dtype=bool)
        first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
        keep = np.zeros(total, dtype=bool)
        keep[order[first]] = True
    else:
        parent = np.arange(total, dtype=np.int64)
        for band in range(width):
            join_band(parent, column(band))
        keep = representatives(parent) == np.arange(total)
    if index is not None:  # a document in a cluster with an index document is a duplicate
        keep &= (representatives(parent) if kind != "exact_dedup" else np.arange(total)) >= len(index)
        counts, keep = counts[1:], keep[len(index):]
    bounds = np.cumsum([0, *counts])
    return [~keep[bounds[i] : bounds[i + 1]] for i in range(len(counts))]


class DropDuplicates(Rejecting):
    """Pass 3 of a dedup step: drop the documents marked for this unit, by ordinal (counted across
    the unit's slices, which call the step one after another)."""

    def __init__(self, marked: np.ndarray) -> None:
        self.marked = marked
        self.seen = 0
        self.removed: Counter = Counter()

    def __call__(self, documents: Iterable[Document]) -> Iterator[Document]:
        for document in documents:
            ordinal = self.seen
            self.seen += 1
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

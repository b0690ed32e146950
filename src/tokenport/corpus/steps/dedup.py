"""Deduplication steps: exact (normalized text) and fuzzy (MinHash-LSH), decided over the whole run.

A dedup step cannot decide document by document: whether a document is a duplicate depends on
every other. So ``prepare`` runs it in three passes. (1) Every unit runs the steps before it (from
the previous keys pass's spill, ``run/spill.py``: each step runs once per document) and writes one
key row per document that reaches it (``keys``) to ``.work/dedup-N/UNIT.keys.npy``, and the
documents themselves, for the next pass to start from.
(2) The keys of all units, in unit order, are compared once: exact keys by equality; MinHash keys
band by band, each band giving the pairs of documents that share a key (one Ray task per band
under the Ray executor: a shuffle by band), joined into clusters by a union-find forest. Each
cluster keeps its first document and the rest are marked, per unit, in ``UNIT.drop.npy``. (3) The next pass
drops the marked documents at that step, by their ordinal among the documents reaching it (it reads
the documents the keys pass spilled, so ordinals agree). Each file is written atomically, so an
interrupted run resumes. Keys are 16 bytes (exact) or
``bands * 8`` bytes (MinHash) per document on disk; pass 2 holds one band's column (or, with
Ray, only the pairs) and the forest, about 40 bytes per document.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..._schema import Count, Positive, read_document, to_builtins
from ..._schema import Document as SchemaDocument
from ...errors import ConfigError
from ..run.state import replace_atomically, temporary_path
from .minhash import MinHasher, equal_key_pairs, exact_key, join_pairs, representatives
from .runwide import RunWideStep, Signatures

__all__ = [
    "INDEXED",
    "ExactDedup",
    "MinHashDedup",
    "decide",
    "decide_originals",
    "drops_path",
    "keys_path",
    "originals_path",
    "prekeys_path",
]

INDEXED = -2
"""The original of a document that duplicates one of the index's (an earlier run's)."""


def _identity(kind: str, bands: int, rows: int, ngram: int, seed: int) -> dict[str, object]:
    """What makes keys comparable: an index must have been made with the same settings."""
    return (
        {"kind": kind}
        if kind == "exact_dedup"
        else {"kind": kind, "bands": bands, "rows": rows, "ngram": ngram, "seed": seed}
    )


class IndexIdentity(SchemaDocument, frozen=True):
    """``PATH.json`` of a signature index: the settings its keys were made with."""

    kind: str
    bands: Positive | None = None
    rows: Positive | None = None
    ngram: Positive | None = None
    seed: Count | None = None


def load_index(path: str, identity: dict[str, object]) -> np.ndarray:
    """The keys of a signature index (``PATH.npy`` with ``PATH.json``), checked against ``identity``.

    The keys must be a 2-d uint64 array with a column per band (two for exact keys): anything else
    was not written by ``save_index`` and is refused before a key is compared.
    """
    remedy = "pass the save_index path of an earlier run, or save the index again"
    try:
        saved = to_builtins(read_document(path + ".json", IndexIdentity, remedy=remedy, error=ConfigError))
        keys = np.load(path + ".npy", mmap_mode="r", allow_pickle=False)
    except OSError as error:
        raise ConfigError(f"index {path}: cannot be read ({error}); {remedy}") from None
    except ValueError as error:
        raise ConfigError(f"index {path}.npy: not a key array ({error}); {remedy}") from None
    saved = {key: value for key, value in saved.items() if value is not None}
    if saved != identity:
        raise ConfigError(f"index {path} was made with {saved}, this step uses {identity}: keys would not compare")
    columns = 2 if identity["kind"] == "exact_dedup" else identity["bands"]
    if keys.dtype != np.uint64 or keys.ndim != 2 or keys.shape[1] != columns:
        raise ConfigError(
            f"index {path}.npy: keys of dtype {keys.dtype} and shape {keys.shape}, expected uint64 with "
            f"{columns} columns; {remedy}"
        )
    return keys


def save_index(path: str, identity: dict[str, object], keys: np.ndarray) -> None:
    """Write a signature index (keys, then its identity, each atomically)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    save_atomically(path + ".npy", keys)
    temporary = temporary_path(path + ".json")
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(identity, f)
    replace_atomically(temporary, path + ".json")


def keys_path(work_dir: str, position: int, unit_name: str) -> str:
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.keys.npy")


def prekeys_path(work_dir: str, position: int, unit_name: str) -> str:
    """The keys of a run-wide step signed with the one before it: a row per document reaching that one."""
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.prekeys.npy")


def drops_path(work_dir: str, position: int, unit_name: str) -> str:
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.drop.npy")


def originals_path(work_dir: str, position: int, unit_name: str) -> str:
    """Per key row of the unit, the row (over every unit's) of the kept document it duplicates."""
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.original.npy")


def save_atomically(path: str, array: np.ndarray) -> None:
    """``np.save`` to a temporary file beside ``path``, then rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = temporary_path(path)
    with open(temporary, "wb") as f:
        np.save(f, array)
    replace_atomically(temporary, path)


def _open_keys(key_files: list[str], index_file: str | None) -> list[np.ndarray]:
    """The key arrays, memory-mapped, the index's (if any) first."""
    return [np.load(path, mmap_mode="r") for path in ([index_file] if index_file else []) + list(key_files)]


def _column(keys: list[np.ndarray], position: int) -> np.ndarray:
    parts = [np.asarray(k[:, position], dtype=np.uint64) for k in keys if len(k)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def band_edges(key_files: list[str], band: int, index_file: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of documents (positions over the index, then the units) with equal keys in ``band``:
    each one joined to the previous of its key in sorted order. One band's work, runnable anywhere
    the key files are (a Ray task per band is the shuffle by band)."""
    return equal_key_pairs(_column(_open_keys(key_files, index_file), band))


def decide(
    kind: str,
    key_files: list[str],
    index_file: str | None = None,
    map_bands: Callable[[list[int]], list[tuple[np.ndarray, np.ndarray]]] | None = None,
) -> list[np.ndarray]:
    """Per unit (its keys file), the mask of ``decide_originals``."""
    return decide_originals(kind, key_files, index_file, map_bands)[0]


def decide_originals(
    kind: str,
    key_files: list[str],
    index_file: str | None = None,
    map_bands: Callable[[list[int]], list[tuple[np.ndarray, np.ndarray]]] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per unit (its keys file), a bool mask of its documents at this step that duplicate an earlier
    one, and per unit the kept document each duplicates (its row over every unit's keys in unit
    order; ``INDEXED`` for an index document; meaningless where the mask is False).

    Per unit (its keys file), a bool mask of its documents at this step that duplicate an earlier
    one, or one of the index's (``index_file``: keys of earlier runs, which count as coming first).

    MinHash: each band yields the pairs of documents sharing a key (``band_edges``; ``map_bands``
    may compute them elsewhere, e.g. one Ray task per band), and a union-find forest here joins
    them; memory here is the forest and the pairs, not the signatures. Exact keys (two 64-bit words
    per document) are sorted once.
    """
    keys = _open_keys(key_files, index_file)
    counts = [len(k) for k in keys]
    total = sum(counts)
    width = next((k.shape[1] for k in keys if k.ndim == 2 and len(k)), 1)
    if kind == "exact_dedup":
        words = [_column(keys, position) for position in range(width)]
        order = np.lexsort((np.arange(total), *reversed(words)))  # by key, then by position
        ordered = np.stack([w[order] for w in words], axis=1) if total else np.zeros((0, width), dtype=np.uint64)
        first = np.ones(total, dtype=bool)
        first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
        keep = np.zeros(total, dtype=bool)
        keep[order[first]] = True
        cluster = np.empty(total, dtype=np.int64)
        cluster[order] = order[first][np.cumsum(first) - 1]  # each key's first position
    else:
        bands = list(range(width))
        pairs = map_bands(bands) if map_bands else [band_edges(key_files, band, index_file) for band in bands]
        parent = np.arange(total, dtype=np.int64)
        for left, right in pairs:
            join_pairs(parent, left, right)
        cluster = representatives(parent)
        keep = cluster == np.arange(total)
    indexed = counts[0] if index_file else 0
    if index_file:  # a document in a cluster with an index document is a duplicate
        keep &= cluster >= indexed
        counts, keep = counts[1:], keep[indexed:]
    original = np.where(cluster >= indexed, cluster - indexed, INDEXED)[indexed:]
    bounds = np.cumsum([0, *counts])
    spans = [slice(bounds[i], bounds[i + 1]) for i in range(len(counts))]
    return [~keep[s] for s in spans], [original[s] for s in spans]


class _Dedup(RunWideStep):
    """A dedup step: its keys compared against each other's and an index's (``index``), the kept
    ones optionally saved as an index for later runs (``save_index``)."""

    kind: ClassVar[str]
    code_modules = ("tokenport.corpus.steps.minhash",)

    def __init__(self, identity: dict[str, object], index: str | None, save_index: str | None) -> None:
        super().__init__()
        self.identity, self.index, self.save_index = identity, index, save_index
        if index is not None:
            load_index(index, identity)  # checked now, where the step is built

    def decide(self, signatures: Signatures) -> list[np.ndarray]:
        """The marks of ``decide``; then, if asked, this run's kept keys (after the index's) saved as an index."""
        index = load_index(self.index, self.identity) if self.index else None
        index_file = self.index + ".npy" if self.index else None
        files = signatures.key_files
        drops, self.originals = decide_originals(
            self.kind, files, index_file, lambda bands: signatures.map_bands(files, bands, index_file)
        )
        if self.save_index:
            kept = [np.load(path)[~drop] for path, drop in zip(files, drops)]
            save_index(self.save_index, self.identity, np.concatenate([*([] if index is None else [index]), *kept]))
        return drops


class ExactDedup(_Dedup):
    """Drops documents whose text, with case, punctuation and whitespace differences removed, came before."""

    kind = "exact_dedup"

    def __init__(
        self,
        bands: int = 14,
        rows: int = 8,
        ngram: int = 5,
        seed: int = 1,
        index: str | None = None,
        save_index: str | None = None,
    ) -> None:
        """MinHash's settings are accepted at their defaults only, as specs always could give them."""
        if (bands, rows, ngram, seed) != (14, 8, 5, 1):
            raise ConfigError("exact_dedup takes no options but index and save_index")
        super().__init__(_identity(self.kind, bands, rows, ngram, seed), index, save_index)

    def sign(self, text: str) -> np.ndarray:
        return np.frombuffer(exact_key(text), dtype=np.uint64)


class MinHashDedup(_Dedup):
    """Drops documents near-duplicate (MinHash-LSH over word n-grams) of one that came before."""

    kind = "minhash_dedup"

    def __init__(
        self,
        bands: int = 14,
        rows: int = 8,
        ngram: int = 5,
        seed: int = 1,
        index: str | None = None,
        save_index: str | None = None,
    ) -> None:
        self.hasher = MinHasher(bands=bands, rows=rows, ngram=ngram, seed=seed)
        super().__init__(_identity(self.kind, bands, rows, ngram, seed), index, save_index)

    def sign(self, text: str) -> np.ndarray:
        return self.hasher.band_keys(self.hasher.signature(text))

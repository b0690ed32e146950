"""MinHash-LSH for fuzzy deduplication: word-shingle signatures, band keys, and clusters.

A document becomes the set of its lower-cased word 5-grams, each hashed to 64 bits (FNV-1a over
the words' UTF-8 bytes, combined per n-gram, in numba: stable across processes and runs).
Its signature is, for each of ``bands * rows`` permutations ``h(x) = (a*x + b) mod (2^61 - 1)``,
the minimum over its shingles. Two documents with Jaccard similarity ``s`` agree on one
permutation with probability ``s``; the signature is cut into ``bands`` bands of ``rows`` values,
each band hashed to a key, and documents sharing any band key become candidates, which happens
with probability ``1 - (1 - s**rows) ** bands`` (the S-curve; 14 bands x 8 rows puts its
midpoint at s = 0.685; above s = 0.85 candidates are near certain). Candidates are joined into
clusters (connected components, union-find) and each cluster keeps its first document.
"""

from __future__ import annotations

import hashlib

import numba
import numpy as np

from ..._checks import check_int
from ...errors import ConfigError
from .quality import words_of

__all__ = [
    "MinHasher",
    "candidate_probability",
    "cluster_representatives",
    "equal_key_pairs",
    "exact_key",
    "join_band",
    "join_pairs",
    "representatives",
]

_MERSENNE_61 = np.uint64((1 << 61) - 1)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_SEPARATOR = 0


def candidate_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Probability that two documents of Jaccard ``similarity`` share a band key: the S-curve."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=np.float64) ** rows) ** bands


def exact_key(text: str) -> bytes:
    """A 16-byte digest of the text with case, punctuation and whitespace differences removed."""
    return hashlib.blake2b(_lower_joined(_words(text), " ").encode("utf-8"), digest_size=16).digest()


_last: tuple[str | None, list[str]] = (None, [])


def _words(text: str) -> list[str]:
    """``words_of(text)``, kept for the last text: neighbouring dedup steps sign the same document
    (the same string object) one after the other, and split its words once."""
    global _last
    last = _last  # one read: another thread may replace it
    if last[0] is text:
        return last[1]
    words = words_of(text)
    _last = (text, words)
    return words


def _lower_joined(words: list[str], separator: str) -> str:
    """``separator.join(word.lower() for word in words)``, lower-cased in one call: the same string, as
    ``str.lower`` maps each character alone but for a final sigma, whose context (cased letters before
    it, none after it) stops at a separator that is neither cased nor case-ignorable (space, NUL)."""
    return separator.join(words).lower()


class MinHasher:
    """Signatures and band keys of documents (see the module docstring)."""

    def __init__(self, bands: int = 14, rows: int = 8, ngram: int = 5, seed: int = 1) -> None:
        self.bands, self.rows, self.ngram = (
            check_int(n, v) for n, v in (("bands", bands), ("rows", rows), ("ngram", ngram))
        )
        rng = np.random.default_rng(check_int("seed", seed, 0))
        count = bands * rows
        self.a = rng.integers(1, (1 << 61) - 1, count, dtype=np.uint64)
        self.b = rng.integers(0, (1 << 61) - 1, count, dtype=np.uint64)

    def shingles(self, text: str) -> np.ndarray:
        """64-bit hashes of the text's distinct lower-cased word n-grams (one shingle if shorter)."""
        words = _words(text)
        if not words:
            return np.zeros(0, dtype=np.uint64)
        encoded = np.frombuffer(_lower_joined(words, "\x00").encode("utf-8"), dtype=np.uint8)
        return np.unique(_shingle_hashes(encoded, len(words), self.ngram))

    def signature(self, text: str) -> np.ndarray:
        """``bands * rows`` minimum permuted shingle hashes (all 2^61 - 1 for a text without words)."""
        return _signature(self.shingles(text), self.a, self.b)

    def band_keys(self, signature: np.ndarray) -> np.ndarray:
        """One 64-bit key per band (rows of the signature hashed together); works on (n, perm) arrays."""
        signatures = np.atleast_2d(signature)
        keys = _band_keys(np.ascontiguousarray(signatures, dtype=np.uint64), self.bands, self.rows)
        return keys[0] if np.ndim(signature) == 1 else keys


@numba.njit(cache=True)
def _shingle_hashes(encoded: np.ndarray, words: int, n: int) -> np.ndarray:
    """FNV-1a of each word (bytes between separators), then one mixed hash per word n-gram."""
    word_hash = np.empty(words, dtype=np.uint64)
    k = 0
    h = _FNV_OFFSET
    for byte in encoded:
        if byte == _SEPARATOR:
            word_hash[k] = h
            k += 1
            h = _FNV_OFFSET
        else:
            h = (h ^ np.uint64(byte)) * _FNV_PRIME
    word_hash[k] = h
    count = max(1, words - n + 1)
    out = np.empty(count, dtype=np.uint64)
    width = min(n, words)
    for start in range(count):
        g = np.uint64(width)
        for j in range(start, start + width):
            g = (g ^ word_hash[j]) * _FNV_PRIME
            g ^= g >> np.uint64(29)
        out[start] = g
    return out


@numba.njit(cache=True, inline="always")
def _mulmod61(x: np.uint64, y: np.uint64) -> np.uint64:
    """x * y mod 2^61 - 1 for x, y < 2^61, with 32-bit limbs (numba has no 128-bit integers)."""
    mask32 = np.uint64(0xFFFFFFFF)
    x_lo, x_hi = x & mask32, x >> np.uint64(32)
    y_lo, y_hi = y & mask32, y >> np.uint64(32)
    lo = x_lo * y_lo  # < 2^64
    mid = x_lo * y_hi + x_hi * y_lo  # < 2^62: x_hi, y_hi < 2^29
    hi = x_hi * y_hi  # < 2^58
    # product = hi * 2^64 + mid * 2^32 + lo; 2^61 = 1 (mod p), so 2^64 = 8 and 2^32 * m folds as below
    p = _MERSENNE_61
    total = (lo & p) + (lo >> np.uint64(61))
    total += ((mid << np.uint64(32)) & p) + (mid >> np.uint64(29))
    total += hi << np.uint64(3)
    total = (total & p) + (total >> np.uint64(61))
    total = (total & p) + (total >> np.uint64(61))
    return total - p if total >= p else total


@numba.njit(cache=True)
def _signature(shingles: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = _MERSENNE_61
    out = np.full(a.shape[0], p, dtype=np.uint64)
    for s in shingles:
        x = s & p
        for i in range(a.shape[0]):
            value = _mulmod61(a[i], x) + b[i]
            value = value - p if value >= p else value
            if value < out[i]:
                out[i] = value
    return out


@numba.njit(cache=True)
def _band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    keys = np.empty((signatures.shape[0], bands), dtype=np.uint64)
    for d in range(signatures.shape[0]):
        for band in range(bands):
            h = _FNV_OFFSET ^ np.uint64(band)
            for r in range(band * rows, (band + 1) * rows):
                h = (h ^ signatures[d, r]) * _FNV_PRIME
                h ^= h >> np.uint64(31)
            keys[d, band] = h
    return keys


def cluster_representatives(band_keys: np.ndarray) -> np.ndarray:
    """For ``(documents, bands)`` keys, each document's cluster representative (its lowest index):
    documents sharing a key in the same band are joined, transitively."""
    keys = np.ascontiguousarray(band_keys, dtype=np.uint64)
    if keys.ndim != 2:
        raise ConfigError(f"band_keys: expected a (documents, bands) array, got shape {keys.shape}")
    parent = np.arange(keys.shape[0], dtype=np.int64)
    for band in range(keys.shape[1]):
        join_band(parent, keys[:, band])
    return representatives(parent)


def equal_key_pairs(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of documents with equal keys in one band: each joined to the previous of its key in
    sorted order (enough to connect every group)."""
    order = np.argsort(column, kind="stable")
    ordered = column[order]
    same = ordered[1:] == ordered[:-1]
    return order[:-1][same], order[1:][same]


def join_band(parent: np.ndarray, column: np.ndarray) -> None:
    """Join (in the union-find forest ``parent``) the documents whose keys in one band are equal."""
    join_pairs(parent, *equal_key_pairs(column))


def join_pairs(parent: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    """Join (in the union-find forest ``parent``) each document of ``left`` with the one of ``right``."""
    _join_pairs(parent, np.ascontiguousarray(left, dtype=np.int64), np.ascontiguousarray(right, dtype=np.int64))


def representatives(parent: np.ndarray) -> np.ndarray:
    """Each document's cluster representative (its cluster's lowest index) in the forest ``parent``."""
    return _roots(parent)


@numba.njit(cache=True)
def _find(parent: np.ndarray, x: int) -> int:
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # path compression
        parent[x], x = root, parent[x]
    return root


@numba.njit(cache=True)
def _join_pairs(parent: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    for i in range(left.shape[0]):
        a, b = _find(parent, left[i]), _find(parent, right[i])
        if a != b:
            if a < b:
                parent[b] = a
            else:
                parent[a] = b


@numba.njit(cache=True)
def _roots(parent: np.ndarray) -> np.ndarray:
    out = np.empty_like(parent)
    for i in range(parent.shape[0]):
        out[i] = _find(parent, i)
    return out

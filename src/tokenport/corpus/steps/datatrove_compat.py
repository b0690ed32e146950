"""What datatrove 0.10's quality filters read from a page, for ``compat: datatrove``.

datatrove (Apache-2.0) defines FineWeb's datasets. Its filters count spaCy's English tokens as
words, punctuation tokens included; its Gopher quality filter sets aside the tokens made only
of characters of its ``PUNCTUATION_SET`` (copied here); FineWeb's line-end rule uses its
``TERMINAL_PUNCTUATION``; its repetition filter compares n-grams joined by spaces (top n-gram)
or run together (duplicate n-grams, a greedy left-to-right scan), over the text's characters.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "PUNCTUATION_SET",
    "TERMINAL_PUNCTUATION",
    "clear_cache",
    "duplicate_gram_chars",
    "ends_a_sentence",
    "top_gram_chars",
    "word_stats",
]

_PUNCTUATION = (
    "!/\u2014\u201d:\uff05\uff11\u3008&(\u3001\u2501\\\u3010#%\u300c\u300d\uff0c\u3011\uff1b+^]~\u201c\u300a"
    "\u201e';\u2019{|\u2236\xb4[=-`*\uff0e\uff08\u2013\uff1f\uff01\uff1a$\uff5e\xab\u3009,><\u300b)?\uff09"
    '\u3002\u2026@_."}\u25ba\xbb'
    + "".join(map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))))
)
TERMINAL_PUNCTUATION = frozenset(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a"
    "\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8"
    "\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048"
    "\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8"
    "\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56"
    "\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89"
    "\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5"
    "\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b"
    "\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf"
    "\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642"
    "\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41"
    "\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38"
    "\U00016b44\U00016e98\U0001bc9f\U0001da88"
)
PUNCTUATION_SET = frozenset(_PUNCTUATION) | TERMINAL_PUNCTUATION
_TERMINAL = tuple(TERMINAL_PUNCTUATION)

# A token's counts packed in one int (kept | has a letter << 32 | characters if kept << 64), so a
# page's totals are one C-level sum; each field holds up to 2^32 - 1 tokens or characters.
_token_stats: dict[str, int] = {}
_FIELD = (1 << 32) - 1


def clear_cache() -> None:
    """Forget the words seen so far (for timing a cold start)."""
    _token_stats.clear()


def ends_a_sentence(line: str) -> bool:
    """FineWeb's line-end test: the line ends in one of datatrove's terminal punctuation marks."""
    return line.endswith(_TERMINAL)


def _packed(word: str) -> int:
    alpha = int(any(char.isalpha() for char in word)) << 32
    return alpha if all(char in PUNCTUATION_SET for char in word) else 1 | alpha | len(word) << 64


def word_stats(words: list[str]) -> tuple[int, int, int]:
    """``(words not made only of punctuation, their characters, words with a letter)``."""
    stats = _token_stats
    try:
        total = sum(map(stats.__getitem__, words))
    except KeyError:
        if len(stats) > 1 << 18:
            stats.clear()
        for word in words:
            if word not in stats:
                stats[word] = _packed(word)
        total = sum(map(stats.__getitem__, words))
    return total & _FIELD, total >> 64, (total >> 32) & _FIELD


@numba.njit(cache=True)
def _slot(table: np.ndarray, filled: np.ndarray, key: np.uint64) -> int:
    """The slot of ``key`` in an open-addressing table (a power of two long), or the empty slot
    where it would go: ``filled`` tells which."""
    mask = table.shape[0] - 1
    slot = int((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    while filled[slot] and table[slot] != key:
        slot = (slot + 1) & mask
    return slot


def _table_size(count: int) -> int:
    return 1 << max(4, (2 * count).bit_length())


@numba.njit(cache=True)
def _top_gram_chars(ids: np.ndarray, lengths: np.ndarray, n: int, size: int) -> int:
    count = ids.shape[0] - n + 1
    if count <= 0:
        return -1
    table = np.zeros(size, dtype=np.uint64)
    filled = np.zeros(size, dtype=np.bool_)
    times = np.zeros(size, dtype=np.int64)
    first = np.zeros(size, dtype=np.int64)
    best_times, best_first = 0, 0
    for start in range(count):
        h = np.uint64(0)
        for k in range(start, start + n):
            h = h * np.uint64(0x9E3779B97F4A7C15) + np.uint64(ids[k] + 1)
        slot = _slot(table, filled, h)
        if not filled[slot]:
            filled[slot], table[slot], first[slot] = True, h, start
        times[slot] += 1
        if times[slot] > best_times or (times[slot] == best_times and first[slot] < best_first):
            best_times, best_first = times[slot], first[slot]
    chars = n - 1
    for k in range(best_first, best_first + n):
        chars += lengths[k]
    return chars * best_times


@numba.njit(cache=True)
def _top_grams(ids: np.ndarray, lengths: np.ndarray, ns: np.ndarray, size: int) -> np.ndarray:
    out = np.empty(ns.shape[0], dtype=np.int64)
    for t in range(ns.shape[0]):
        out[t] = _top_gram_chars(ids, lengths, ns[t], size)
    return out


def top_gram_chars(ids: np.ndarray, lengths: np.ndarray, ns: np.ndarray) -> np.ndarray:
    """For each n of ``ns``: characters of the most frequent word n-gram joined by spaces, times its
    count (ties go to the first occurring, as ``Counter.most_common`` does); -1 when there are
    fewer than n words. n-grams are told apart by a 64-bit hash of their words' ``ids``."""
    return _top_grams(ids, lengths, ns, _table_size(ids.shape[0]))


@numba.njit(cache=True)
def _duplicate_grams(codes: np.ndarray, lengths: np.ndarray, ns: np.ndarray, size: int) -> np.ndarray:
    m = lengths.shape[0]
    offsets = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        offsets[i + 1] = offsets[i] + lengths[i]
    base = np.uint64(0x100000001B3)
    prefix = np.zeros(codes.shape[0] + 1, dtype=np.uint64)
    powers = np.ones(codes.shape[0] + 1, dtype=np.uint64)
    for i in range(codes.shape[0]):
        prefix[i + 1] = prefix[i] * base + np.uint64(codes[i] + 1)
        powers[i + 1] = powers[i] * base
    out = np.zeros(ns.shape[0], dtype=np.int64)
    table = np.zeros(size, dtype=np.uint64)
    filled = np.zeros(size, dtype=np.bool_)
    for t in range(ns.shape[0]):
        n = ns[t]
        filled[:] = False
        total, idx = 0, 0
        while idx < m - n + 1:
            a, b = offsets[idx], offsets[idx + n]
            h = (prefix[b] - prefix[a] * powers[b - a]) ^ (np.uint64(b - a) * np.uint64(0x9E3779B97F4A7C15))
            slot = _slot(table, filled, h)
            if filled[slot]:
                total += b - a
                idx += n
            else:
                filled[slot], table[slot] = True, h
                idx += 1
        out[t] = total
    return out


def duplicate_gram_chars(codes: np.ndarray, lengths: np.ndarray, ns: np.ndarray) -> np.ndarray:
    """For each n of ``ns``, datatrove's ``find_all_duplicate``: scan the words left to right; an
    n-gram (its words run together, compared as text through a 64-bit rolling hash of ``codes``,
    the characters' code points) seen before adds its characters and skips its n words, else it
    is remembered. The rolling hash's prefixes are computed once for every n."""
    return _duplicate_grams(codes, lengths, ns, _table_size(lengths.shape[0]))

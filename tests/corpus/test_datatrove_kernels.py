"""The n-gram kernels of ``compat: datatrove`` against datatrove's own functions, on random word
sequences from a small vocabulary (so that n-grams repeat, overlap and tie)."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.corpus.steps import datatrove_compat as dt

repetition = pytest.importorskip("datatrove.pipeline.filters.gopher_repetition_filter")


def _arrays(words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    codes = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32)
    return ids, lengths, codes


@pytest.mark.parametrize("seed", range(40))
def test_top_and_duplicate_grams_are_datatroves(seed):
    rng = np.random.default_rng(seed)
    # no spaces: a word never holds one
    vocabulary = ["a", "bb", "ab", "b", "ccc", "the", "é", "中", "x"][: int(rng.integers(2, 10))]
    words = [vocabulary[i] for i in rng.integers(0, len(vocabulary), int(rng.integers(0, 300)))]
    ids, lengths, codes = _arrays(words)
    top_ns, dup_ns = np.array([1, 2, 3, 4, 7], dtype=np.int64), np.arange(2, 11, dtype=np.int64)
    expected_top = [
        repetition.find_top_duplicate(repetition.get_n_grams(words, n)) if len(words) >= n else -1 for n in top_ns
    ]
    expected_dup = [repetition.find_all_duplicate(words, n) for n in dup_ns]
    assert dt.top_gram_chars(ids, lengths, top_ns).tolist() == expected_top
    assert dt.duplicate_gram_chars(codes, lengths, dup_ns).tolist() == expected_dup

"""MinHash-LSH: exact arithmetic, agreement equal to Jaccard similarity, the S-curve, clusters,
and precision/recall on near-duplicates made from real text with controlled edits."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenport as tp
from tokenport.corpus.steps.minhash import (
    MinHasher,
    _mulmod61,
    _signature,
    candidate_probability,
    cluster_representatives,
    exact_key,
)

P = (1 << 61) - 1


def test_mulmod61_equals_big_integer_arithmetic():
    rng = np.random.default_rng(0)
    values = [0, 1, P - 1, (1 << 32) - 1, 1 << 32, (1 << 60) + 12345] + rng.integers(0, P, 200).tolist()
    for x, y in zip(values, values[::-1] + values[:0]):
        assert int(_mulmod61(np.uint64(x), np.uint64(y))) == x * y % P


def test_signatures_are_stable_and_seeded():
    text = "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
    first, second = MinHasher(), MinHasher()
    assert np.array_equal(first.signature(text), second.signature(text))
    assert np.array_equal(first.signature(text), first.signature(text.upper().replace(" ", "  ")))
    assert not np.array_equal(first.signature(text), MinHasher(seed=2).signature(text))
    assert first.signature(text).shape == (112,) and first.band_keys(first.signature(text)).shape == (14,)


def _pair(rng, similarity: float, size: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Two shingle sets of Jaccard similarity close to ``similarity``."""
    shared = int(round(2 * size * similarity / (1 + similarity)))
    common = rng.integers(0, 2**63, shared, dtype=np.uint64)
    a = np.concatenate([common, rng.integers(0, 2**63, size - shared, dtype=np.uint64)])
    b = np.concatenate([common, rng.integers(0, 2**63, size - shared, dtype=np.uint64)])
    return a, b


def _jaccard(a, b) -> float:
    return len(np.intersect1d(a, b)) / len(np.union1d(a, b))


@pytest.mark.parametrize("similarity", [0.2, 0.5, 0.8])
def test_agreement_rate_is_the_jaccard_similarity(similarity):
    rng = np.random.default_rng(int(similarity * 10))
    hasher = MinHasher()
    rates, truths = [], []
    for _ in range(60):
        a, b = _pair(rng, similarity)
        truths.append(_jaccard(a, b))
        rates.append(np.mean(_signature(a, hasher.a, hasher.b) == _signature(b, hasher.a, hasher.b)))
    assert abs(np.mean(rates) - np.mean(truths)) < 0.02


def test_the_s_curve_of_14_bands_of_8_rows_holds_empirically():
    hasher = MinHasher(bands=14, rows=8)
    rng = np.random.default_rng(7)
    assert candidate_probability(0.685, 14, 8) == pytest.approx(0.5, abs=0.01)  # the midpoint
    assert candidate_probability(0.85, 14, 8) > 0.97 and candidate_probability(0.4, 14, 8) < 0.01
    for similarity in (0.5, 0.7, 0.8, 0.9):
        hits, truths = 0, []
        for _ in range(300):
            a, b = _pair(rng, similarity, size=200)
            truths.append(_jaccard(a, b))
            keys = hasher.band_keys(np.stack([_signature(a, hasher.a, hasher.b), _signature(b, hasher.a, hasher.b)]))
            hits += bool((keys[0] == keys[1]).any())
        expected = float(np.mean(candidate_probability(np.array(truths), 14, 8)))
        assert abs(hits / 300 - expected) < 0.07, (similarity, hits / 300, expected)


def test_clusters_are_transitive_and_keep_the_lowest_index():
    keys = np.array([[1, 10], [2, 20], [3, 10], [2, 30], [4, 40], [5, 30]], dtype=np.uint64)
    # 0~2 (band 1), 1~3 (band 0), 3~5 (band 1) -> {0, 2}, {1, 3, 5}, {4}
    assert cluster_representatives(keys).tolist() == [0, 1, 0, 1, 4, 1]
    with pytest.raises(tp.ConfigError, match="documents, bands"):
        cluster_representatives(np.zeros(3, dtype=np.uint64))


def test_exact_key_ignores_case_punctuation_and_spacing():
    assert exact_key("Hello,   World!") == exact_key("hello world")
    assert exact_key("hello world") != exact_key("hello worlds")


_TRICKY = "ΣΑΣ σας ΌΣΟΣ İstanbul ǅemal ß ﬁ Ω ᾼ ͅ a\u0345Σ Σ\u0301 O'NEIL ΑΣ'Β x\u00adΣ ǈ ŉ Ǆ ϴ ẞ K Å"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TRICKY.split(" ") + [" ", "-", ".", "'", "\u0301", "Σ", "_", "9"]), max_size=12))
def test_words_lowered_in_one_call_equal_words_lowered_one_by_one(pieces):
    """exact_key and shingles lower-case the words joined (one call, not one per word): the same string."""
    from tokenport.corpus.steps.minhash import _lower_joined
    from tokenport.corpus.steps.quality import words_of

    text = "".join(pieces)
    words = words_of(text)
    for separator in (" ", "\x00"):
        assert _lower_joined(words, separator) == separator.join(word.lower() for word in words), (text, separator)


def _real_paragraphs(count: int) -> list[str]:
    """Long runs of prose from the standard library's own modules (docstrings and comments)."""
    texts = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        words = path.read_text(encoding="utf-8", errors="replace").split()
        for start in range(0, len(words) - 300, 2000):
            texts.append(" ".join(words[start : start + 300]))
        if len(texts) >= count:
            break
    return texts[:count]


def _edit(text: str, rng: np.random.Generator, fraction: float) -> str:
    """Replace, delete or insert about ``fraction`` of the words (a controlled near-duplicate)."""
    words = text.split()
    for _ in range(int(len(words) * fraction)):
        position = int(rng.integers(0, len(words)))
        action = rng.integers(0, 3)
        if action == 0:
            words[position] = f"edited{int(rng.integers(1_000_000))}"
        elif action == 1 and len(words) > 10:
            del words[position]
        else:
            words.insert(position, f"inserted{int(rng.integers(1_000_000))}")
    return " ".join(words)


def test_precision_and_recall_on_near_duplicates_of_real_text():
    rng = np.random.default_rng(11)
    originals = _real_paragraphs(120)
    assert len(originals) == 120
    documents, source = [], []
    for index, text in enumerate(originals):
        documents.append(text)
        source.append(index)
        if index % 2 == 0:  # half of them get a light near-duplicate (2% of words edited)
            documents.append(_edit(text, rng, 0.02))
            source.append(index)
    hasher = MinHasher()
    keys = hasher.band_keys(np.stack([hasher.signature(d) for d in documents]))
    representative = cluster_representatives(keys)
    source = np.array(source)
    same_cluster = representative[:, None] == representative[None, :]
    same_source = source[:, None] == source[None, :]
    upper = np.triu(np.ones_like(same_source), 1)
    true_pairs = (same_source & upper).sum()
    found = (same_cluster & upper).sum()
    correct = (same_cluster & same_source & upper).sum()
    assert correct / true_pairs >= 0.95  # recall
    assert correct / max(found, 1) >= 0.95  # precision


def test_decide_from_key_files_equals_the_in_memory_answer(tmp_path):
    from tokenport.corpus.steps.dedup import decide

    rng = np.random.default_rng(3)
    keys = rng.integers(0, 50, (300, 4)).astype(np.uint64)  # small alphabet: many shared band keys
    exact = rng.integers(0, 40, (300, 2)).astype(np.uint64)
    cuts = [0, 90, 90, 210, 300]  # one unit holds no document
    files = {}
    for name, array in (("band", keys), ("exact", exact)):
        files[name] = []
        for i in range(4):
            path = tmp_path / f"{name}{i}.npy"
            np.save(path, array[cuts[i] : cuts[i + 1]])
            files[name].append(str(path))
    band_drop = np.concatenate(decide("minhash_dedup", files["band"]))
    assert band_drop.tolist() == (cluster_representatives(keys) != np.arange(300)).tolist()
    seen, expected = set(), []
    for row in map(tuple, exact.tolist()):
        expected.append(row in seen)
        seen.add(row)
    assert np.concatenate(decide("exact_dedup", files["exact"])).tolist() == expected

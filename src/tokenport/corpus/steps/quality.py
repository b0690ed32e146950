"""Quality filters with the published thresholds: Gopher quality and repetition, C4, FineWeb.

Each filter is a pipeline step that drops documents failing a rule and counts removals by
reason (``removed:<rule>``); C4 also drops lines (``lines_removed:<rule>``). Thresholds default
to the published ones — Table A1 of the Gopher paper (Rae et al., 2021), the C4 paper (Raffel
et al., 2020) and FineWeb (Penedo et al., 2024) — and each can be overridden by name; ``None``
turns a rule off.

Words come from one regular expression, not a tokenizer library: runs of letters, digits and
apostrophes; each other non-space character (punctuation, symbols) is a token of its own; and
each CJK ideograph or kana is a word by itself, since Chinese and Japanese are written without
spaces. Punctuation tokens are not words: every rule counts words only (``words_of``), so the
alphabetic-word share is words with a letter over all words. Implementations that count
punctuation tokens (datatrove, through spaCy) reject more on that rule and on the top n-gram one;
see BENCHMARKS.md for how often the two disagree.

``compat="datatrove"`` makes a filter take datatrove 0.10's decisions instead: the filter chooses
its reading once, when built, and datatrove's readings live in ``datatrove_readings`` (its word
splitting is spaCy's English tokenizer, reproduced in ``spacy_words``; what it reads from a page is
in ``datatrove_compat``); the thresholds keep their names and defaults.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numba
import numpy as np

from ...errors import ConfigError
from ..inputs.documents import Document
from . import datatrove_readings
from .base import Step, prefixed
from .spacy_words import english_words
from .text_stats import PARAGRAPH_BREAK, repeated

__all__ = [
    "COMPAT_MODES",
    "C4Quality",
    "FineWebQuality",
    "GopherQuality",
    "GopherRepetition",
    "split_words",
    "words_of",
]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = rf"[{_CJK}]|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*"
_TOKEN = re.compile(rf"{_WORD}|[^\w\s]|_")
_WORDS = re.compile(_WORD)
_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
_BULLETS = ("•", "●", "○", "◦", "▪", "▫", "‣", "⁃")
COMPAT_MODES = ("tokenport", "datatrove")


def split_words(text: str) -> list[str]:
    """Tokens of ``text``: words (letter/digit runs, CJK characters one by one) and single symbols."""
    return _TOKEN.findall(text)


def words_of(text: str) -> list[str]:
    """The words of ``text`` alone: ``split_words`` without its punctuation and symbol tokens."""
    return _WORDS.findall(text)


def _reading(compat: str, ours: Callable[..., Any], datatroves: Callable[..., Any]) -> Callable[..., Any]:
    """The reading of a filter's rules that ``compat`` (one of ``COMPAT_MODES``) chooses, once."""
    if compat not in COMPAT_MODES:
        raise ConfigError(f"compat={compat!r} is not a mode: pass one of {', '.join(map(repr, COMPAT_MODES))}")
    if compat == "datatrove":
        english_words()  # loads spaCy's rules now: a missing spaCy is a config error, not a mid-run one
        return datatroves
    return ours


def _ratio(name: str, value: float | None) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise ConfigError(f"{name}={value!r} is invalid: pass a number >= 0, or None to turn the rule off")
    return value


def _number(name: str, value: float) -> float:
    """A setting that cannot be turned off: a number >= 0 (ConfigError for None too)."""
    checked = _ratio(name, value)
    if checked is None:
        raise ConfigError(f"{name}=None is invalid: pass a number >= 0")
    return checked


class GopherQuality(Step):
    """Gopher's quality rules: word count, mean word length, '#' and ellipsis per word, bullet and
    ellipsis lines, share of words with a letter, and at least ``min_stop_words`` of the stop words
    (distinct ones: "at least two of the following English words"; case-insensitive)."""

    def __init__(
        self,
        min_words: int | None = 50,
        max_words: int | None = 100_000,
        min_mean_word_length: float | None = 3,
        max_mean_word_length: float | None = 10,
        max_symbol_word_ratio: float | None = 0.1,
        max_bullet_lines_ratio: float | None = 0.9,
        max_ellipsis_lines_ratio: float | None = 0.3,
        min_alpha_words_ratio: float | None = 0.8,
        min_stop_words: int | None = 2,
        stop_words: Sequence[str] = _STOP_WORDS,
        compat: str = "tokenport",
    ) -> None:
        super().__init__()
        self._rule: Callable[[str], str | None] = _reading(
            compat, self._tokenport, functools.partial(datatrove_readings.gopher_quality, self)
        )
        self.min_words, self.max_words = _ratio("min_words", min_words), _ratio("max_words", max_words)
        self.min_mean = _ratio("min_mean_word_length", min_mean_word_length)
        self.max_mean = _ratio("max_mean_word_length", max_mean_word_length)
        self.max_symbols = _ratio("max_symbol_word_ratio", max_symbol_word_ratio)
        self.max_bullets = _ratio("max_bullet_lines_ratio", max_bullet_lines_ratio)
        self.max_ellipsis_lines = _ratio("max_ellipsis_lines_ratio", max_ellipsis_lines_ratio)
        self.min_alpha = _ratio("min_alpha_words_ratio", min_alpha_words_ratio)
        self.min_stop_words = _ratio("min_stop_words", min_stop_words)
        if isinstance(stop_words, str) or not all(isinstance(w, str) for w in stop_words):
            raise ConfigError("stop_words: pass a list of words")
        case_sensitive = compat == "datatrove"  # datatrove compares stop words as written
        self.stop_words = frozenset(word if case_sensitive else word.lower() for word in stop_words)

    def reject(self, text: str) -> str | None:
        return self._rule(text)

    def _tokenport(self, text: str) -> str | None:
        words = words_of(text)
        count = len(words)
        if self.min_words is not None and count < self.min_words:
            return "too_few_words"
        if self.max_words is not None and count > self.max_words:
            return "too_many_words"
        if count == 0:
            return "too_few_words"
        mean = sum(len(word) for word in words) / count
        if self.min_mean is not None and mean < self.min_mean:
            return "short_words"
        if self.max_mean is not None and mean > self.max_mean:
            return "long_words"
        if self.max_symbols is not None:
            if text.count("#") / count > self.max_symbols:
                return "too_many_hashes"
            if (text.count("...") + text.count("…")) / count > self.max_symbols:
                return "too_many_ellipses"
        lines = text.splitlines() or [""]
        if self.max_bullets is not None:
            if sum(line.lstrip().startswith(_BULLETS) for line in lines) / len(lines) > self.max_bullets:
                return "bullet_lines"
        if self.max_ellipsis_lines is not None:
            ending = sum(line.rstrip().endswith(("...", "…")) for line in lines)
            if ending / len(lines) > self.max_ellipsis_lines:
                return "ellipsis_lines"
        if self.min_alpha is not None:
            if sum(any(char.isalpha() for char in word) for word in words) / count < self.min_alpha:
                return "few_alphabetic_words"
        if self.min_stop_words is not None:
            if len(self.stop_words.intersection(word.lower() for word in words)) < self.min_stop_words:
                return "few_stop_words"
        return None


class GopherRepetition(Step):
    """Gopher's repetition rules: duplicate lines (blank ones aside) and paragraphs (by count, and by
    characters over the text's), then over the words' characters: the most frequent 2-4-gram's share (when it
    repeats) and the share of words covered by any 5-10-gram occurring more than once (counting
    every occurrence, the first too, as RedPajama's implementation of the rule does)."""

    def __init__(
        self,
        max_duplicate_line_fraction: float | None = 0.30,
        max_duplicate_paragraph_fraction: float | None = 0.30,
        max_duplicate_line_char_fraction: float | None = 0.20,
        max_duplicate_paragraph_char_fraction: float | None = 0.20,
        max_top_ngram_char_fraction: Sequence[Sequence[float]] = ((2, 0.20), (3, 0.18), (4, 0.16)),
        max_duplicate_ngram_char_fraction: Sequence[Sequence[float]] = (
            (5, 0.15),
            (6, 0.14),
            (7, 0.13),
            (8, 0.12),
            (9, 0.11),
            (10, 0.10),
        ),
        compat: str = "tokenport",
    ) -> None:
        super().__init__()
        self._rule: Callable[[str], str | None] = _reading(
            compat, self._tokenport, functools.partial(datatrove_readings.gopher_repetition, self)
        )
        self.line_fraction = _ratio("max_duplicate_line_fraction", max_duplicate_line_fraction)
        self.paragraph_fraction = _ratio("max_duplicate_paragraph_fraction", max_duplicate_paragraph_fraction)
        self.line_chars = _ratio("max_duplicate_line_char_fraction", max_duplicate_line_char_fraction)
        self.paragraph_chars = _ratio("max_duplicate_paragraph_char_fraction", max_duplicate_paragraph_char_fraction)
        self.top = _ngram_limits("max_top_ngram_char_fraction", max_top_ngram_char_fraction)
        self.duplicated = _ngram_limits("max_duplicate_ngram_char_fraction", max_duplicate_ngram_char_fraction)
        self._top_n = np.array([n for n, _ in self.top], dtype=np.int64)
        self._duplicated_n = np.array([n for n, _ in self.duplicated], dtype=np.int64)

    def reject(self, text: str) -> str | None:
        return self._rule(text)

    def _tokenport(self, text: str) -> str | None:
        length = len(text)
        if length == 0:
            return None
        paragraphs = PARAGRAPH_BREAK.split(text.strip())
        repeats, chars = repeated(paragraphs)
        if self.paragraph_fraction is not None and repeats / len(paragraphs) > self.paragraph_fraction:
            return "duplicate_paragraphs"
        if self.paragraph_chars is not None and chars / length > self.paragraph_chars:
            return "duplicate_paragraph_chars"
        lines = [line for line in text.splitlines() if line.strip()] or [""]  # blank lines are layout
        repeats, chars = repeated(lines)
        if self.line_fraction is not None and repeats / len(lines) > self.line_fraction:
            return "duplicate_lines"
        if self.line_chars is not None and chars / length > self.line_chars:
            return "duplicate_line_chars"
        words = words_of(text)
        vocabulary: dict[str, int] = {}
        ids = np.array([vocabulary.setdefault(w, len(vocabulary)) for w in words], dtype=np.int64)
        lengths = np.array(list(map(len, words)), dtype=np.int64)
        word_chars = int(lengths.sum())
        if word_chars == 0:
            return None
        top, duplicated = _gram_stats(ids, lengths, self._top_n, self._duplicated_n)
        for (n, limit), chars in zip(self.top, top):
            if chars / word_chars > limit:
                return f"top_{n}_gram"
        for (n, limit), chars in zip(self.duplicated, duplicated):
            if chars / word_chars > limit:
                return f"duplicate_{n}_grams"
        return None


@numba.njit(cache=True)
def _gram_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit polynomial hash of each word n-gram (word ids + 1, so no id hashes to zero)."""
    count = ids.shape[0] - n + 1
    out = np.zeros(max(count, 0), dtype=np.uint64)
    for start in range(count):
        h = np.uint64(0)
        for k in range(start, start + n):
            h = h * np.uint64(0x9E3779B97F4A7C15) + np.uint64(ids[k] + 1)
        out[start] = h
    return out


@numba.njit(cache=True)
def _gram_stats(
    ids: np.ndarray, lengths: np.ndarray, top_ns: np.ndarray, dup_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each n of ``top_ns``: characters of the most frequent n-gram times its count (0 unless it
    repeats; ties to the first occurring). For each n of ``dup_ns``: characters of the words covered
    by an n-gram occurring more than once (a longer n-gram repeats only where a shorter one does)."""
    m = ids.shape[0]
    offsets = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        offsets[i + 1] = offsets[i] + lengths[i]
    top = np.zeros(top_ns.shape[0], dtype=np.int64)
    for t in range(top_ns.shape[0]):
        n = top_ns[t]
        h = _gram_hashes(ids, n)
        if h.shape[0] < 2:
            continue
        order = np.argsort(h, kind="mergesort")  # stable: runs list their positions ascending
        best_times, best_first = 1, -1
        run = 0
        while run < order.shape[0]:
            end = run + 1
            while end < order.shape[0] and h[order[end]] == h[order[run]]:
                end += 1
            times, first = end - run, order[run]
            if times > best_times or (times == best_times and times > 1 and first < best_first):
                best_times, best_first = times, first
            run = end
        if best_times > 1:
            top[t] = (offsets[best_first + n] - offsets[best_first]) * best_times
    duplicated = np.zeros(dup_ns.shape[0], dtype=np.int64)
    clear = 1 << 62  # the shortest n with no repeated n-gram
    for d in range(dup_ns.shape[0]):
        n = dup_ns[d]
        if n > clear:
            continue
        h = _gram_hashes(ids, n)
        if h.shape[0] < 2:
            clear = min(clear, n)
            continue
        order = np.argsort(h, kind="mergesort")
        edges = np.zeros(m + 1, dtype=np.int64)
        found = False
        run = 0
        while run < order.shape[0]:
            end = run + 1
            while end < order.shape[0] and h[order[end]] == h[order[run]]:
                end += 1
            if end - run > 1:
                found = True
                for j in range(run, end):
                    edges[order[j]] += 1
                    edges[order[j] + n] -= 1
            run = end
        if not found:
            clear = min(clear, n)
            continue
        depth, total = 0, 0
        for i in range(m):
            depth += edges[i]
            if depth > 0:
                total += lengths[i]
        duplicated[d] = total
    return top, duplicated


def _ngram_limits(name: str, limits: Sequence[Sequence[float]]) -> tuple[tuple[int, float], ...]:
    try:
        checked = tuple((int(n), float(limit)) for n, limit in limits)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: pass a list of [n, fraction] pairs") from None
    if any(n < 1 or limit < 0 for n, limit in checked):
        raise ConfigError(f"{name}: n must be >= 1 and fractions >= 0")
    return checked


_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
_SENTENCE_END = re.compile(r"[.!?。！？]+[\"'”’)\]]*(?=\s|$)")
_C4_TERMINAL = (".", "?", "!", '"', "'")
_C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


def _sentences_in(line: str) -> int:
    """A kept C4 line's sentences: terminal punctuation followed by a space or the line's end (at least one)."""
    return max(1, len(_SENTENCE_END.findall(line)))


class C4Quality(Step):
    """C4's rules: keep only lines that end in terminal punctuation (not an ellipsis), have at least
    3 words, no word over 1000 characters, and do not mention javascript or cookie/terms-of-use
    policies (Wikipedia citation marks are removed first); drop the page if any line says
    "lorem ipsum" or holds a curly bracket, or fewer than 5 sentences remain. Sentences are counted
    by terminal punctuation followed by a space or the line's end (with ``compat="datatrove"``, by
    spaCy's sentencizer over spaCy's tokens, as datatrove counts them)."""

    def __init__(
        self,
        remove_citations: bool = True,
        require_terminal_punctuation: bool = True,
        min_words_per_line: int | None = 3,
        max_word_length: int | None = 1000,
        min_sentences: int | None = 5,
        drop_lorem_ipsum: bool = True,
        drop_javascript_lines: bool = True,
        drop_curly_brackets: bool = True,
        drop_policy_lines: bool = True,
        compat: str = "tokenport",
    ) -> None:
        super().__init__()
        self._sentences = _reading(compat, _sentences_in, datatrove_readings.c4_sentences)
        self.remove_citations = bool(remove_citations)
        self.terminal = bool(require_terminal_punctuation)
        self.min_words = _ratio("min_words_per_line", min_words_per_line)
        self.max_word = _ratio("max_word_length", max_word_length)
        self.min_sentences = _ratio("min_sentences", min_sentences)
        self.lorem, self.javascript = bool(drop_lorem_ipsum), bool(drop_javascript_lines)
        self.curly, self.policy = bool(drop_curly_brackets), bool(drop_policy_lines)
        self.lines_removed: Counter = Counter()

    def clean(self, text: str) -> tuple[str | None, str | None]:
        """``(kept text, None)``, or ``(None, reason)`` when the whole page goes."""
        kept, sentences = [], 0
        for raw in text.splitlines():
            line = raw.strip()
            words = line.split()
            if self.max_word is not None and any(len(word) > self.max_word for word in words):
                self.lines_removed["long_word"] += 1
                continue
            if self.remove_citations:
                line = _CITATION.sub("", line)
            if self.terminal and (not line.endswith(_C4_TERMINAL) or line.endswith("...")):
                self.lines_removed["no_terminal_punctuation"] += 1
                continue
            if self.min_words is not None and len(words) < self.min_words:
                self.lines_removed["few_words"] += 1
                continue
            lowered = line.lower()
            if self.lorem and "lorem ipsum" in lowered:
                return None, "lorem_ipsum"
            if self.javascript and "javascript" in lowered:
                self.lines_removed["javascript"] += 1
                continue
            if self.curly and "{" in line:
                return None, "curly_bracket"
            if self.policy and any(phrase in lowered for phrase in _C4_POLICY):
                self.lines_removed["policy"] += 1
                continue
            sentences += self._sentences(line)
            kept.append(line)
        if self.min_sentences is not None and sentences < self.min_sentences:
            return None, "few_sentences"
        return "\n".join(kept), None

    def process(self, document: Document) -> Document | None:
        text, reason = self.clean(document.text)
        if text is None:  # the whole page goes, for `reason`
            self.drop(document, str(reason))
            return None
        return document if text == document.text else replace(document, text=text)

    def counts(self) -> dict[str, int]:
        return {**super().counts(), **prefixed("lines_removed", self.lines_removed)}


_FINEWEB_STOPS = (".", "'", '"', "!", "?")


class FineWebQuality(Step):
    """FineWeb's rules over the non-blank lines (blank ones are layout, as FineWeb's reference
    drops them first; a page without any is dropped as ``empty``): enough lines ending in
    punctuation (share > 0.12), not too many short lines (share of lines of at most 30 characters
    < 0.67), few characters in duplicated lines (< 1% of the non-newline characters), and not
    list-like (newlines per token <= 0.3). ``compat="datatrove"`` takes datatrove 0.10's reading:
    its terminal punctuation (no quote marks), strict comparisons (a share of exactly 0.12 or
    0.67 passes), spaCy's tokens for the newline ratio."""

    def __init__(
        self,
        min_punctuated_lines_ratio: float | None = 0.12,
        max_short_lines_ratio: float | None = 0.67,
        short_line_length: int = 30,
        max_duplicate_line_chars_ratio: float | None = 0.01,
        max_newlines_per_word: float | None = 0.3,
        compat: str = "tokenport",
    ) -> None:
        super().__init__()
        self._rule: Callable[[str, list[str]], str | None] = _reading(
            compat, self._tokenport, functools.partial(datatrove_readings.fineweb, self)
        )
        self.min_punctuated = _ratio("min_punctuated_lines_ratio", min_punctuated_lines_ratio)
        self.max_short = _ratio("max_short_lines_ratio", max_short_lines_ratio)
        self.short_length = _number("short_line_length", short_line_length)
        self.max_duplicate_chars = _ratio("max_duplicate_line_chars_ratio", max_duplicate_line_chars_ratio)
        self.max_newlines = _ratio("max_newlines_per_word", max_newlines_per_word)

    def reject(self, text: str) -> str | None:
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return "empty"
        return self._rule(text, lines)

    def _tokenport(self, text: str, lines: list[str]) -> str | None:
        if self.min_punctuated is not None:
            if sum(line.endswith(_FINEWEB_STOPS) for line in lines) / len(lines) <= self.min_punctuated:
                return "few_punctuated_lines"
        if self.max_short is not None:
            if sum(len(line) <= self.short_length for line in lines) / len(lines) >= self.max_short:
                return "short_lines"
        if self.max_duplicate_chars is not None:
            characters = len(text) - text.count("\n")
            if repeated(lines)[1] / characters >= self.max_duplicate_chars:
                return "duplicate_line_chars"
        if self.max_newlines is not None:
            tokens = len(split_words(text))
            if tokens and text.count("\n") / tokens > self.max_newlines:
                return "list_like"
        return None

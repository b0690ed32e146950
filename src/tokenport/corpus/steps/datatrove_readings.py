"""datatrove 0.10's reading of the quality rules, which ``compat="datatrove"`` makes a quality filter
(`quality.GopherQuality`, `GopherRepetition`, `C4Quality`, `FineWebQuality`) take instead of
tokenport's: its word splitting (spaCy's English tokenizer, reproduced in ``spacy_words``), and its
reading of each rule (what it reads from a page is in ``datatrove_compat``). Each function takes the
filter, for its thresholds (the same names and defaults in both readings), and the page.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import datatrove_compat as dt
from .spacy_words import english_words
from .text_stats import NEWLINES, PARAGRAPH_BREAK, repeated

__all__ = ["c4_sentences", "fineweb", "gopher_quality", "gopher_repetition"]


def gopher_quality(step: Any, text: str) -> str | None:
    """datatrove's reading: all tokens count as words for the symbol and letter ratios, those not
    made only of punctuation for the word count and mean length; stop words are case-sensitive;
    a threshold of 0 turns its rule off."""
    words = english_words()(text)
    count = len(words)
    kept, chars, alpha = dt.word_stats(words)
    if step.min_words and kept < step.min_words:
        return "too_few_words"
    if step.max_words and kept > step.max_words:
        return "too_many_words"
    if count == 0:  # datatrove divides by zero here (only with min_words off)
        return "too_few_words"
    if kept:
        mean = chars / kept
        if step.min_mean and mean < step.min_mean:
            return "short_words"
        if step.max_mean and mean > step.max_mean:
            return "long_words"
    if step.max_symbols and text.count("#") / count > step.max_symbols:
        return "too_many_hashes"
    if step.max_symbols and (text.count("...") + text.count("…")) / count > step.max_symbols:
        return "too_many_ellipses"
    lines = text.splitlines()
    if step.max_bullets:
        bullets = sum(line.lstrip().startswith(("•", "-")) for line in lines)
        if bullets / len(lines) > step.max_bullets:
            return "bullet_lines"
    if step.max_ellipsis_lines:
        ending = sum(line.rstrip().endswith(("...", "…")) for line in lines)
        if ending / len(lines) > step.max_ellipsis_lines:
            return "ellipsis_lines"
    if step.min_alpha and alpha / count < step.min_alpha:
        return "few_alphabetic_words"
    if step.min_stop_words and len(step.stop_words.intersection(words)) < step.min_stop_words:
        return "few_stop_words"
    return None


def gopher_repetition(step: Any, text: str) -> str | None:
    """datatrove's reading: an empty page is dropped; lines are split on runs of newlines (blank
    ones collapse, none is set aside); every fraction is over the text's characters; the top
    n-gram counts even when it occurs once; duplicate n-grams by a greedy scan; a line or
    paragraph limit of 0 turns its rule off."""
    length = len(text)
    if length == 0:
        return "empty"
    paragraphs = PARAGRAPH_BREAK.split(text.strip())
    repeats, chars = repeated(paragraphs)
    if step.paragraph_fraction and repeats / len(paragraphs) > step.paragraph_fraction:
        return "duplicate_paragraphs"
    if step.paragraph_chars and chars / length > step.paragraph_chars:
        return "duplicate_paragraph_chars"
    lines = NEWLINES.split(text)
    repeats, chars = repeated(lines)
    if step.line_fraction and repeats / len(lines) > step.line_fraction:
        return "duplicate_lines"
    if step.line_chars and chars / length > step.line_chars:
        return "duplicate_line_chars"
    words = english_words()(text)
    # a word's id is its str hash: equal words share it, and n-grams are compared by 64-bit hashes anyway
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    if step.top:
        for (n, limit), chars in zip(step.top, dt.top_gram_chars(ids, lengths, step._top_n)):
            if chars >= 0 and chars / length > limit:
                return f"top_{n}_gram"
    if step.duplicated:
        codes = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32)
        for (n, limit), chars in zip(step.duplicated, dt.duplicate_gram_chars(codes, lengths, step._duplicated_n)):
            if chars / length > limit:
                return f"duplicate_{n}_grams"
    return None


def c4_sentences(line: str) -> int:
    """The sentences of a kept C4 line as datatrove counts them: spaCy's sentencizer over spaCy's tokens."""
    return english_words().sentences(line)


def fineweb(step: Any, text: str, lines: list[str]) -> str | None:
    """datatrove's reading of FineWeb's rules over the non-blank `lines`: its terminal punctuation, strict
    comparisons, spaCy's tokens for the newline ratio."""
    if step.min_punctuated is not None:
        if sum(map(dt.ends_a_sentence, lines)) / len(lines) < step.min_punctuated:
            return "few_punctuated_lines"
    if step.max_short is not None:
        if sum(len(line) <= step.short_length for line in lines) / len(lines) > step.max_short:
            return "short_lines"
    if step.max_duplicate_chars is not None:
        if repeated(lines)[1] / (len(text) - text.count("\n")) > step.max_duplicate_chars:
            return "duplicate_line_chars"
    if step.max_newlines is not None:
        if text.count("\n") / english_words().count(text) > step.max_newlines:
            return "list_like"
    return None

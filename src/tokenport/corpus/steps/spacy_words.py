"""spaCy's blank English tokenizer, reproduced without running spaCy on the text, for datatrove parity.

datatrove 0.10 splits English words with ``spacy.blank("en")`` (then drops whitespace tokens)
and counts C4's sentences with spaCy's rule-based sentencizer. Calling spaCy per document costs
~1 ms, so this module takes only spaCy's rule tables (prefix, suffix and infix patterns, URL
pattern, special cases) and applies spaCy's own algorithm (``Tokenizer._split_affixes``,
``_attach_tokens`` and the special-case matcher) to each whitespace-separated chunk, with a
cache of chunks already split: words repeat, so most chunks cost one dict lookup.

Importing spaCy costs ~3 s of CPU in every process (it imports thinc, and thinc torch), so the
tables are read from ``spacy_en_rules.json``, a snapshot taken from the spaCy version it names,
when that is the installed version; otherwise from spaCy itself.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..._schema import Count, Text, read_document
from ..._schema import Document as SchemaDocument
from ...errors import ConfigError

__all__ = ["EnglishWords", "SpacyRules", "english_words", "spacy_rules", "spacy_rules_of_spacy"]

_CACHE_LIMIT = 1 << 18  # distinct chunks kept; the cache starts over beyond this


class EnglishWords:
    """Splits text into the words datatrove's English ``split_into_words`` returns."""

    def __init__(self, rules: SpacyRules | None = None) -> None:
        rules = spacy_rules() if rules is None else rules
        self._prefix: Callable[[str], Any] = re.compile(rules.prefix, rules.flags).search
        self._suffixes = _SuffixSearch(rules.suffixes)
        self._infixes: Callable[[str], Any] = re.compile(rules.infix, rules.flags).finditer
        self._token_match = None  # English has no token_match
        self._url_match: Callable[[str], Any] = re.compile(rules.url, rules.flags).match
        self._specials: dict[str, tuple[str, ...]] = {chunk: tuple(pieces) for chunk, pieces in rules.specials.items()}
        # spaCy re-joins token runs that spell a special case its affix rules would split (the
        # special-case matcher); only cases without whitespace can match inside one chunk.
        self._matched: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for chunk in self._specials:
            if any(c.isspace() for c in chunk):
                continue
            if self._prefix(chunk) or self._suffixes.length(chunk) or list(self._infixes(chunk)):
                pattern = self._split(chunk, False)
                self._matched.setdefault(pattern[0], []).append((pattern, chunk))
        self._sentence_ends = frozenset(rules.sentence_ends)
        self._cache: dict[str, tuple[str, ...]] = {}
        self._last: tuple[str, list[str]] = ("", [])

    def __call__(self, text: str) -> list[str]:
        """The words of ``text``, as spaCy's English tokenizer splits it (whitespace tokens dropped).
        The last text's list is kept and handed out again for the same text (the filters of one
        document share it, as datatrove's cache of recent texts does): callers must not change it."""
        if text is self._last[0]:
            return self._last[1]
        words = self._words(text)
        self._last = (text, words)
        return words

    def count(self, text: str) -> int:
        """How many words ``self(text)`` returns, without making the list when its chunks are known."""
        if text is self._last[0]:
            return len(self._last[1])
        try:
            return sum(map(len, map(self._cache.__getitem__, text.split())))
        except KeyError:
            return len(self(text))

    def _words(self, text: str) -> list[str]:
        cache = self._cache
        chunks = text.split()
        try:
            return [token for chunk in chunks for token in cache[chunk]]
        except KeyError:
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            for chunk in chunks:
                if chunk not in cache:
                    cache[chunk] = self._chunk(chunk)
            return [token for chunk in chunks for token in cache[chunk]]

    def clear_cache(self) -> None:
        """Forget the chunks split so far (for timing a cold start)."""
        self._cache.clear()
        self._last = ("", [])

    def sentences(self, line: str) -> int:
        """How many sentences spaCy's sentencizer finds in ``line`` (a stripped, non-empty line)."""
        count, seen_end = 1, False
        cache, ends = self._cache, self._sentence_ends
        position = 0
        for chunk in line.split():
            start = line.index(chunk, position)
            if seen_end and start > position and line[position:start] != " ":  # a whitespace token
                count, seen_end = count + 1, False
            position = start + len(chunk)
            tokens = cache.get(chunk)
            if tokens is None:
                tokens = cache[chunk] = self._chunk(chunk)
            for token in tokens:
                if token in ends:
                    seen_end = True
                elif seen_end and not _is_punct(token):
                    count, seen_end = count + 1, False
        return count

    def _chunk(self, chunk: str) -> tuple[str, ...]:
        if chunk.isascii() and chunk.isalpha():  # no affix or infix rule matches ASCII letters alone
            return self._specials.get(chunk, (chunk,))
        tokens = self._split(chunk, True)
        if len(tokens) > 1 and any(token in self._matched for token in tokens):
            tokens = self._rejoin(tokens)
        return tokens

    def _split(self, string: str, specials: bool) -> tuple[str, ...]:
        """spaCy's ``_split_affixes`` then ``_attach_tokens`` on one chunk."""
        table = self._specials if specials else {}
        if string in table:
            return table[string]
        prefixes: list[str] = []
        suffixes: list[str] = []
        last = -1
        while string and len(string) != last:
            if self._token_match and self._token_match(string):
                break
            if string in table:
                break
            last = len(string)
            match = self._prefix(string)
            pre = match.end() - match.start() if match else 0
            if pre:
                prefix, minus_pre = string[:pre], string[pre:]
                if minus_pre and minus_pre in table:
                    string = minus_pre
                    prefixes.append(prefix)
                    break
            suf = self._suffixes.length(string[pre:])
            if suf:
                suffix, minus_suf = string[-suf:], string[:-suf]
                if minus_suf and minus_suf in table:
                    string = minus_suf
                    suffixes.append(suffix)
                    break
            if pre and suf and pre + suf <= len(string):
                string = string[pre:-suf]
                prefixes.append(prefix)
                suffixes.append(suffix)
            elif pre:
                string = minus_pre
                prefixes.append(prefix)
            elif suf:
                string = minus_suf
                suffixes.append(suffix)
        tokens = prefixes
        if string:
            if string in table:
                tokens.extend(table[string])
            elif (self._token_match and self._token_match(string)) or self._url_match(string):
                tokens.append(string)
            else:
                start = 0
                for match in self._infixes(string):
                    begin, end = match.start(), match.end()
                    if begin == 0:
                        continue
                    if begin != start:
                        tokens.append(string[start:begin])
                    if begin != end:
                        tokens.append(string[begin:end])
                    start = end
                if string[start:]:
                    tokens.append(string[start:])
        tokens.extend(reversed(suffixes))
        return tuple(tokens)

    def _rejoin(self, tokens: tuple[str, ...]) -> tuple[str, ...]:
        """spaCy's special-case matcher: runs of tokens spelling a special case become its tokens
        (longest run first, then leftmost; a run overlapping one already taken is skipped)."""
        found = []
        for i, token in enumerate(tokens):
            for pattern, chunk in self._matched.get(token, ()):
                if tokens[i : i + len(pattern)] == pattern:
                    found.append((i, i + len(pattern), chunk))
        if not found:
            return tokens
        found.sort(key=lambda span: (span[0] - span[1], span[0]))
        taken: set[int] = set()
        chosen = []
        for start, end, chunk in found:
            if start not in taken and end - 1 not in taken:
                chosen.append((start, end, chunk))
            taken.update(range(start, end))
        out: list[str] = []
        position = 0
        for start, end, chunk in sorted(chosen):
            out.extend(tokens[position:start])
            out.extend(self._specials[chunk])
            position = end
        out.extend(tokens[position:])
        return tuple(out)


class _SuffixSearch:
    """spaCy's suffix search (the leftmost of its ``$``-anchored patterns that matches), started
    near the end: patterns of bounded width cannot match further left, and the unbounded ones
    (``\\.\\.+``) get a search of their own."""

    def __init__(self, patterns: list[str]) -> None:
        try:
            from re import _parser as parser  # type: ignore[attr-defined]
        except ImportError:  # Python < 3.11
            import sre_parse as parser
        patterns = [p for p in patterns if p.strip()]  # as spacy.util.compile_suffix_regex
        widths = [parser.parse(p).getwidth()[1] for p in patterns]
        self._width = max([w for w in widths if w < 64] or [0])
        self._bounded = re.compile("|".join(p + "$" for p, w in zip(patterns, widths) if w < 64) or "(?!)")
        self._unbounded = re.compile("|".join(p + "$" for p, w in zip(patterns, widths) if w >= 64) or "(?!)")

    def length(self, string: str) -> int:
        """The length of the suffix spaCy would split off ``string`` (0 if none)."""
        end = len(string)
        match = self._bounded.search(string, max(0, end - self._width))
        start = match.start() if match else end
        match = self._unbounded.search(string)
        if match:
            start = min(start, match.start())
        return end - start


@lru_cache(maxsize=1 << 16)
def _is_punct(token: str) -> bool:
    """spaCy's ``is_punct``: every character is in a Unicode punctuation category (remembered per
    token: a sentence's first token is tested, and first tokens repeat)."""
    return all(unicodedata.category(char).startswith("P") for char in token)


class SpacyRules(SchemaDocument, frozen=True):
    """spaCy's English tokenizer tables (``spacy_en_rules.json``): what ``EnglishWords`` needs."""

    spacy: Text  # the version they were taken from
    prefix: str
    infix: str
    url: str
    flags: Count
    suffixes: list[str]
    specials: dict[str, list[str]]
    sentence_ends: list[str]

    def __post_init__(self) -> None:
        for pattern in (self.prefix, self.infix, self.url, *self.suffixes):
            try:
                re.compile(pattern, self.flags)
            except (re.error, ValueError, OverflowError) as error:
                raise ValueError(f"pattern {pattern[:40]!r}... does not compile: {error}") from None


_SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spacy_en_rules.json")


def spacy_rules() -> SpacyRules:
    """spaCy's English tables: the snapshot when it was taken from the installed spaCy, else spaCy's own."""
    try:
        installed = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:  # not installed (ConfigError), or without its metadata
        return spacy_rules_of_spacy()
    if os.path.exists(_SNAPSHOT):
        remedy = "reinstall tokenport (its copy of spaCy's tables is damaged)"
        snapshot = read_document(_SNAPSHOT, SpacyRules, remedy=remedy, error=ConfigError)
        if snapshot.spacy == installed:
            return snapshot
    return spacy_rules_of_spacy()


def spacy_rules_of_spacy() -> SpacyRules:
    """The tables read from the installed spaCy (``spacy.blank("en")`` and its sentencizer)."""
    nlp = _blank_english()
    tokenizer = nlp.tokenizer
    from spacy.attrs import ORTH
    from spacy.pipeline.sentencizer import Sentencizer

    names = ("prefix_search", "infix_finditer", "url_match")
    prefix, infix, url = (getattr(tokenizer, name).__self__ for name in names)
    if tokenizer.token_match is not None or len({prefix.flags, infix.flags, url.flags}) != 1:
        raise ConfigError("this spaCy's English tokenizer has rules tokenport does not reproduce: use spaCy 3.8")
    return SpacyRules(
        spacy=importlib.metadata.version("spacy"),
        prefix=prefix.pattern,
        infix=infix.pattern,
        url=url.pattern,
        flags=prefix.flags,
        suffixes=list(nlp.Defaults.suffixes),
        specials={chunk: [piece[ORTH] for piece in pieces] for chunk, pieces in tokenizer.rules.items()},
        sentence_ends=list(Sentencizer.default_punct_chars),
    )


def _blank_english() -> Any:
    try:
        import spacy
    except ImportError:
        raise ConfigError(
            "compat='datatrove' splits words as datatrove does, with spaCy's English rules: pip install spacy"
        ) from None
    return spacy.blank("en")


@lru_cache(maxsize=1)
def english_words() -> EnglishWords:
    """The process's one ``EnglishWords``."""
    return EnglishWords()

"""Line-wise corrections (RefinedWeb style): drop boilerplate lines, and the page if too much went.

Web pages keep remnants of their layout after text extraction: counters ("12 likes"), navigation
("Home", "Log in | Sign up"), cookie notices. A line is dropped when it is a counter, when every
word of a short line (at most ``max_navigation_words`` words) is a navigation word, or when it
contains a cookie-notice phrase; user patterns (regular expressions) add more. If the dropped
lines held more than ``max_removed_fraction`` of the page's words (RefinedWeb: 5%), the page is
dropped: what remains is likely a broken extraction.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step, prefixed

__all__ = ["LineCorrections"]

_COUNTER = re.compile(
    r"^\W*\d[\d,.]*\s*[km]?\s*(?:likes?|comments?|shares?|views?|retweets?|followers?|reviews?|replies|"
    r"reactions?|votes?|points?)\W*$",
    re.IGNORECASE,
)
_NAVIGATION = frozenset(
    "home menu login log in logout out sign signin signup up register search share print email next previous prev "
    "back to top skip content main navigation read more click here subscribe contact us about help faq "
    "privacy terms cart account my comments reply tweet facebook twitter linkedin whatsapp pinterest".split()
)
_COOKIES = (
    "accept cookies",
    "we use cookies",
    "cookie settings",
    "cookie preferences",
    "this website uses cookies",
    "accept all cookies",
)
_WORD = re.compile(r"\S+")
_SHORT_LINE = 80  # longer lines are never counters or navigation


class LineCorrections(Step):
    """``{"step": "line_corrections", "max_removed_fraction": 0.05, "max_navigation_words": 4, "patterns": [...]}``."""

    def __init__(
        self, max_removed_fraction: float | None = 0.05, max_navigation_words: int = 4, patterns: Sequence[str] = ()
    ) -> None:
        super().__init__()
        if max_removed_fraction is not None and (
            isinstance(max_removed_fraction, bool) or not 0 <= max_removed_fraction <= 1
        ):
            raise ConfigError(f"max_removed_fraction={max_removed_fraction!r}: pass a fraction in [0, 1] or None")
        if (
            isinstance(max_navigation_words, bool)
            or not isinstance(max_navigation_words, int)
            or max_navigation_words < 0
        ):
            raise ConfigError(f"max_navigation_words={max_navigation_words!r}: pass an integer >= 0")
        if isinstance(patterns, str):
            raise ConfigError("patterns: pass a list of regular expressions")
        try:
            self.patterns = [re.compile(pattern, re.IGNORECASE) for pattern in patterns]
        except re.error as error:
            raise ConfigError(f"patterns: {error.pattern!r} is not a valid regular expression ({error})") from None
        self.max_removed = max_removed_fraction
        self.max_navigation = max_navigation_words
        self.lines_removed: Counter = Counter()

    def kind(self, line: str) -> str | None:
        """Why ``line`` is boilerplate, or None to keep it."""
        stripped = line.strip()
        if not stripped:
            return None
        lowered = stripped.lower()
        short = len(stripped) <= _SHORT_LINE
        if short and _COUNTER.match(stripped):  # counters and navigation are short: skip the rest fast
            return "counter"
        tokens = lowered.split() if short else ()
        if 0 < len(tokens) <= 2 * self.max_navigation:
            words = [token.strip(":,.!|»«›‹<>·•") for token in tokens if any(c.isalnum() for c in token)]
            if 0 < len(words) <= self.max_navigation and all(word in _NAVIGATION for word in words):
                return "navigation"  # separators such as "|" or "»" are not words
        if "cookie" in lowered and any(phrase in lowered for phrase in _COOKIES):
            return "cookie_notice"
        if any(pattern.search(stripped) for pattern in self.patterns):
            return "pattern"
        return None

    def process(self, document: Document) -> Document | None:
        kept, removed_words, total_words = [], 0, 0
        found: Counter[str] = Counter()
        for line in document.text.split("\n"):
            words = len(_WORD.findall(line))
            total_words += words
            kind = self.kind(line)
            if kind is None:
                kept.append(line)
            else:
                found[kind] += 1
                removed_words += words
        if not found:
            return document
        if self.max_removed is not None and total_words and removed_words / total_words > self.max_removed:
            self.drop(document, "too_many_lines_removed")
            return None
        self.lines_removed.update(found)
        return replace(document, text="\n".join(kept))

    def counts(self) -> dict[str, int]:
        return {**super().counts(), **prefixed("lines_removed", self.lines_removed)}

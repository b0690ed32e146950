"""URL filtering: drop documents whose source URL is on a block list.

Documents carry their URL in metadata (a jsonl record's other fields land there; ``url_key``
names the field). A URL is blocked when its host is a blocked domain or a subdomain of one,
when it contains a blocked substring, or when one of its words (runs of letters and digits,
lower-cased) is a banned word. Lists come from files the user provides (one entry per line,
``#`` comments) and/or inline; with neither, a small built-in list serves for trying things out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step

__all__ = ["URLFilter"]

DEFAULT_BLOCKED_DOMAINS = ("example-spam.com", "malware.test", "adult.test")
DEFAULT_BANNED_WORDS = ("porn", "xxx", "casino")
_URL_WORD = re.compile(r"[a-z0-9]+")


def _read_list(path: str, what: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split("#", 1)[0].strip().lower() for line in f if line.split("#", 1)[0].strip()]
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the {what} list ({error.strerror})") from None


def _entries(inline: Sequence[str] | None, path: str | None, what: str) -> list[str]:
    if inline is not None and (isinstance(inline, str) or not all(isinstance(x, str) for x in inline)):
        raise ConfigError(f"{what}: pass a list of strings")
    return [x.strip().lower() for x in (inline or [])] + (_read_list(path, what) if path else [])


class URLFilter(Step):
    """``{"step": "url_filter", "blocked_domains": [...], "blocked_domains_file": ..., "blocked_substrings": [...],
    "blocked_substrings_file": ..., "banned_words": [...], "banned_words_file": ..., "url_key": "url"}``."""

    def __init__(
        self,
        blocked_domains: Sequence[str] | None = None,
        blocked_domains_file: str | None = None,
        blocked_substrings: Sequence[str] | None = None,
        blocked_substrings_file: str | None = None,
        banned_words: Sequence[str] | None = None,
        banned_words_file: str | None = None,
        url_key: str = "url",
    ) -> None:
        super().__init__()
        domains = _entries(blocked_domains, blocked_domains_file, "blocked_domains")
        substrings = _entries(blocked_substrings, blocked_substrings_file, "blocked_substrings")
        words = _entries(banned_words, banned_words_file, "banned_words")
        if not (domains or substrings or words):
            domains, words = list(DEFAULT_BLOCKED_DOMAINS), list(DEFAULT_BANNED_WORDS)
        self.domains = frozenset(domain.lstrip(".") for domain in domains)
        self.substrings = tuple(substrings)
        self.words = frozenset(words)
        self.url_key = url_key
        self.without_url = 0

    def blocked(self, url: str) -> str | None:
        """The rule ``url`` breaks, or None."""
        lowered = url.lower()
        host = (urlsplit(lowered if "//" in lowered else "//" + lowered).hostname or "").rstrip(".")
        labels = host.split(".")
        if any(".".join(labels[i:]) in self.domains for i in range(len(labels))):
            return "blocked_domain"
        if any(substring in lowered for substring in self.substrings):
            return "blocked_substring"
        if not self.words.isdisjoint(_URL_WORD.findall(lowered)):
            return "banned_url_word"
        return None

    def process(self, document: Document) -> Document | None:
        url = document.metadata.get(self.url_key)
        if not isinstance(url, str) or not url:
            self.without_url += 1
            return document
        reason = self.blocked(url)
        if reason is not None:
            self.drop(document, reason)
            return None
        return document

    def counts(self) -> dict[str, int]:
        counts = super().counts()
        if self.without_url:
            counts["kept_without_url"] = self.without_url
        return counts

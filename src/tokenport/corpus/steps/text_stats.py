"""What the quality filters count in a page, in both readings: repeated lines and paragraphs."""

from __future__ import annotations

import re

__all__ = ["NEWLINES", "PARAGRAPH_BREAK", "repeated"]

PARAGRAPH_BREAK = re.compile(r"\n{2,}")
NEWLINES = re.compile("\n+")


def repeated(items: list[str]) -> tuple[int, int]:
    """Items equal to an earlier one, and their characters."""
    seen: set[str] = set()
    repeats = chars = 0
    for item in items:
        if item in seen:
            repeats += 1
            chars += len(item)
        else:
            seen.add(item)
    return repeats, chars

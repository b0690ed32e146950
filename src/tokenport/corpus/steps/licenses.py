"""License filtering for code corpora: keep files under licenses on an allow-list.

A document's licenses come from its metadata (``license_key``: a string or a list, as in The
Stack's per-repository license lists) or, when absent, from its text: an ``SPDX-License-Identifier``
line, or the opening words of a well-known license in the first ``scan_chars`` characters.
A document is kept when any of its licenses is allowed (dual licensing: the user may pick the
permissive one); documents with no license found are kept unless ``keep_unknown`` is off.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ..._checks import check_int
from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step, prefixed

__all__ = ["LicenseFilter", "detect_licenses"]

PERMISSIVE = (
    "mit",
    "apache-2.0",
    "bsd-2-clause",
    "bsd-3-clause",
    "isc",
    "unlicense",
    "cc0-1.0",
    "zlib",
    "0bsd",
    "bsl-1.0",
    "python-2.0",
    "psf-2.0",
    "postgresql",
    "x11",
    "mit-0",
)

_SPDX = re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\-() ]+)")
_SPDX_SPLIT = re.compile(r"\s+(?:OR|AND|WITH)\s+|[()]")
_SIGNATURES = (  # (license, phrase) in the order tried; phrases are matched case-insensitively
    ("lgpl", "gnu lesser general public license"),
    ("lgpl", "gnu library general public license"),
    ("agpl", "gnu affero general public license"),
    ("gpl", "gnu general public license"),
    ("apache-2.0", "apache license, version 2.0"),
    ("apache-2.0", "licensed under the apache license"),
    ("mpl-2.0", "mozilla public license"),
    ("mit", "permission is hereby granted, free of charge"),
    ("mit", "mit license"),
    ("isc", "permission to use, copy, modify, and/or distribute this software for any purpose"),
    ("bsd-3-clause", "neither the name of"),
    ("bsd-2-clause", "redistribution and use in source and binary forms"),
    ("unlicense", "this is free and unencumbered software released into the public domain"),
)


def detect_licenses(text: str, scan_chars: int = 3000) -> list[str]:
    """Licenses named in the head of ``text``: SPDX identifiers, else the first known license phrase."""
    head = text[:scan_chars]
    spdx = _SPDX.search(head)
    if spdx:
        return [part.strip().lower() for part in _SPDX_SPLIT.split(spdx.group(1)) if part.strip()]
    lowered = " ".join(head.lower().split())  # comment markers and line breaks do not split a phrase
    lowered = re.sub(r"\s*(?:#|//|\*|--|;)+\s*", " ", lowered)
    for license_id, phrase in _SIGNATURES:
        if phrase in lowered:
            return [license_id]
    return []


class LicenseFilter(Step):
    """``{"step": "license_filter", "allowed": [...], "license_key": "license", "keep_unknown": true}``."""

    def __init__(
        self,
        allowed: Sequence[str] = PERMISSIVE,
        license_key: str = "license",
        keep_unknown: bool = True,
        scan_chars: int = 3000,
    ) -> None:
        super().__init__()
        if isinstance(allowed, str) or not allowed or not all(isinstance(a, str) for a in allowed):
            raise ConfigError("allowed: pass a non-empty list of license ids such as ['mit', 'apache-2.0']")
        scan_chars = check_int("scan_chars", scan_chars)
        self.allowed = frozenset(a.lower() for a in allowed)
        self.license_key, self.keep_unknown, self.scan_chars = license_key, bool(keep_unknown), scan_chars
        self.kept: Counter = Counter()

    def licenses_of(self, document: Document) -> list[str]:
        given = document.metadata.get(self.license_key)
        if isinstance(given, str) and given:
            return [given.lower()]
        if isinstance(given, (list, tuple)) and given:
            return [str(g).lower() for g in given]
        return detect_licenses(document.text, self.scan_chars)

    def process(self, document: Document) -> Document | None:
        licenses = self.licenses_of(document)
        if not licenses:
            if not self.keep_unknown:
                self.drop(document, "unknown_license")
                return None
            self.kept["unknown"] += 1
            return document
        allowed = [name for name in licenses if name in self.allowed]
        if not allowed:
            self.drop(document, "disallowed_license")
            return None
        self.kept[allowed[0]] += 1
        return replace(document, metadata={**document.metadata, "license": allowed[0]})

    def counts(self) -> dict[str, int]:
        return {**super().counts(), **prefixed("kept", self.kept)}

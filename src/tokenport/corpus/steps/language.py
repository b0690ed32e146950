"""Language identification with CLD2 (``pycld2``, Apache-2.0, offline, no model download).

Each document gets ``metadata["language"]`` (an ISO 639-1 code such as ``en`` or ``zh``; ``un``
when CLD2 cannot tell) and ``metadata["language_score"]``, the share of its text CLD2 assigns to
that language (0-1). The step keeps documents whose language is one of ``languages`` (all, if
none are given) with a score of at least ``min_score``. A listed code matches its regional
variants too: ``zh`` keeps ``zh-Hant``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step, prefixed

__all__ = ["LanguageFilter", "detect_language"]

# CLD2 rejects some code points as invalid UTF-8 (C0/C1 controls, surrogates, noncharacters).
_UNSUPPORTED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")


def _cld2() -> Any:
    try:
        import pycld2
    except ImportError:
        raise ConfigError("the language step needs pycld2: pip install 'tokenport[lang]' (or pycld2)") from None
    return pycld2


def detect_language(text: str) -> tuple[str, float]:
    """``(code, score)`` of the text's main language by CLD2 (the known language with the largest
    share among its three results); ``("un", 0.0)`` when it finds none."""
    cld2 = _cld2()
    try:
        _, _, details = cld2.detect(_UNSUPPORTED.sub(" ", text))
    except cld2.error:
        return "un", 0.0
    # CLD2 may rank "Unknown" first (on a sliver of unreliable text) above the language it found
    known = [(percent, -rank, code) for rank, (_, code, percent, _) in enumerate(details) if code != "un" and percent]
    if not known:
        return "un", 0.0
    percent, _, code = max(known)
    return code, percent / 100.0


def _check_codes(languages: Sequence[str]) -> None:
    """ConfigError for a code CLD2 never reports (it would silently drop every document)."""
    names = {name.lower(): code for name, code in _cld2().LANGUAGES}
    known = {part for code in names.values() for part in (code.lower(), code.split("-")[0].lower())}
    for code in languages:
        if code.lower() not in known:
            hint = (
                f"; {code!r} is a language name, its code is {names[code.lower()]!r}" if code.lower() in names else ""
            )
            raise ConfigError(
                f"languages: {code!r} is not a language code CLD2 knows{hint}; valid codes: {', '.join(sorted(known))}"
            )


class LanguageFilter(Step):
    """``{"step": "language", "languages": ["en", "zh"], "min_score": 0.65}``."""

    def __init__(self, languages: Sequence[str] = (), min_score: float = 0.65) -> None:
        super().__init__()
        _cld2()
        if isinstance(languages, str) or not all(isinstance(code, str) and code for code in languages):
            raise ConfigError("languages: pass a list of language codes such as ['en', 'zh']")
        _check_codes(languages)
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not 0 <= min_score <= 1:
            raise ConfigError(f"min_score={min_score!r}: pass a share of the text in [0, 1]")
        self.languages = frozenset(code.lower() for code in languages)
        self.min_score = float(min_score)
        self.kept: Counter = Counter()

    def _wanted(self, code: str) -> bool:
        return not self.languages or code.lower() in self.languages or code.split("-")[0].lower() in self.languages

    def process(self, document: Document) -> Document | None:
        code, score = detect_language(document.text)
        if not self._wanted(code):
            self.drop(document, "other_language")
            return None
        if score < self.min_score:
            self.drop(document, "low_language_score")
            return None
        self.kept[code] += 1
        return replace(document, metadata={**document.metadata, "language": code, "language_score": score})

    def counts(self) -> dict[str, int]:
        return {**super().counts(), **prefixed("kept", self.kept)}

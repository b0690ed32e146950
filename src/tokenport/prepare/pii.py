"""PII scrubbing: find personal data in text and replace it, counting each kind.

Kinds: e-mail addresses, IPv4 and IPv6 addresses, phone numbers, payment card numbers, IBANs
and Chinese resident identity numbers. Every kind whose numbers carry a check is validated, so
that look-alikes stay: a 16-digit number failing the Luhn check is not a card, an IBAN must pass
ISO 13616's mod-97 check, a resident ID its ISO 7064 check digit and a real birth date, an IP
address must parse. Kinds are scanned in a fixed order (the most specific first) and each
replacement is a bracketed tag without digits, so one kind's replacement never feeds another.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from .documents import Document

__all__ = ["PII_KINDS", "PIIScrubber", "luhn_valid"]

PII_KINDS = ("email", "iban", "cn_id", "credit_card", "ipv6", "ipv4", "phone")
"""Every kind, in scanning order."""

_DEFAULT_REPLACEMENTS = {
    "email": "<EMAIL>",
    "iban": "<IBAN>",
    "cn_id": "<ID_NUMBER>",
    "credit_card": "<CARD_NUMBER>",
    "ipv6": "<IP_ADDRESS>",
    "ipv4": "<IP_ADDRESS>",
    "phone": "<PHONE_NUMBER>",
}

# Boundaries are ASCII (not \b or \w): in Chinese text a number sits right next to word characters.
_EMAIL = re.compile(
    r"(?<![0-9A-Za-z_.+-])[A-Za-z0-9._%+-]+@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![0-9A-Za-z_])"
)
_IBAN = re.compile(r"(?<![0-9A-Za-z_])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![0-9A-Za-z_])")
_CN_ID = re.compile(r"(?<![0-9A-Za-z_])\d{17}[\dXx](?![0-9A-Za-z_])")
_CARD = re.compile(r"(?<![\d.+-])\d(?:[ -]?\d){12,18}(?![\d.-])")
_IPV6 = re.compile(
    r"(?<![0-9A-Za-z_:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![0-9A-Za-z_:.])"
)
_IPV4 = re.compile(r"(?<![0-9A-Za-z_.])(?:\d{1,3}\.){3}\d{1,3}(?![0-9A-Za-z_.]|\.\d)")
_PHONE = re.compile(
    r"(?<![0-9A-Za-z_+])(?:"
    r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}"  # international: +CC ...
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]?\d{4}"  # North American: (555) 123-4567
    r"|\d{3}[ .-]\d{3}[ .-]\d{4}"  # North American: 555-123-4567
    r"|1[3-9]\d{9}"  # Chinese mobile: 11 digits starting 13-19
    r")(?![0-9A-Za-z_])"
)

_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK = "10X98765432"


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of payment card numbers: ``digits`` holds digits only."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(char for char in text if char.isdigit())


def _is_card(match: str) -> bool:
    digits = _digits(match)
    return 13 <= len(digits) <= 19 and luhn_valid(digits) and len(set(digits)) > 1


def _is_iban(match: str) -> bool:
    compact = match.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def _is_cn_id(match: str) -> bool:
    body, check = match[:17], match[17].upper()
    if _CN_ID_CHECK[sum(int(d) * w for d, w in zip(body, _CN_ID_WEIGHTS)) % 11] != check:
        return False
    try:
        born = datetime.date(int(body[6:10]), int(body[10:12]), int(body[12:14]))
    except ValueError:
        return False
    return 1900 <= born.year <= datetime.date.today().year


def _is_ipv4(match: str) -> bool:
    try:
        ipaddress.IPv4Address(match)
    except ValueError:
        return False
    return True


def _is_ipv6(match: str) -> bool:
    """A parseable IPv6 address holding a digit (``a::b`` in code is not one) and naming a host
    (loopback ``::1`` and ``::`` identify nobody)."""
    if not any(char.isdigit() for char in match):
        return False
    try:
        address = ipaddress.IPv6Address(match)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


def _is_phone(match: str) -> bool:
    return 8 <= len(_digits(match)) <= 15


_RULES: dict[str, tuple[re.Pattern[str], Callable[[str], bool] | None]] = {
    "email": (_EMAIL, None),
    "iban": (_IBAN, _is_iban),
    "cn_id": (_CN_ID, _is_cn_id),
    "credit_card": (_CARD, _is_card),
    "ipv6": (_IPV6, _is_ipv6),
    "ipv4": (_IPV4, _is_ipv4),
    "phone": (_PHONE, _is_phone),
}


@dataclass
class PIIScrubber:
    """A pipeline step replacing personal data in each document's text (see the module docstring).

    ``kinds`` picks what to scrub (default: all of ``PII_KINDS``); ``replacements`` overrides the
    tag per kind. Each document's counts go to ``metadata["pii"]`` (kinds found only) and add up in
    ``self.counts``. Documents are never dropped.
    """

    kinds: tuple[str, ...] = PII_KINDS
    replacements: Mapping[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        unknown = [kind for kind in (*self.kinds, *self.replacements) if kind not in PII_KINDS]
        if unknown:
            raise ConfigError(f"PII kind {unknown[0]!r} is unknown: choose from {', '.join(PII_KINDS)}")
        self.kinds = tuple(kind for kind in PII_KINDS if kind in self.kinds)  # scanning order, whatever was given
        self._tags = {kind: self.replacements.get(kind, _DEFAULT_REPLACEMENTS[kind]) for kind in self.kinds}
        self.counts = {kind: 0 for kind in self.kinds}

    def scrub(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` with every PII match replaced, and the number replaced per kind (kinds found only)."""
        found: dict[str, int] = {}
        for kind in self.kinds:
            pattern, valid = _RULES[kind]
            tag = self._tags[kind]
            hits = 0

            def substitute(match: re.Match[str]) -> str:
                nonlocal hits
                if valid is not None and not valid(match.group(0)):
                    return match.group(0)
                hits += 1
                return tag

            text = pattern.sub(substitute, text)
            if hits:
                found[kind] = hits
        return text, found

    def __call__(self, documents: Iterable[Document]) -> Iterator[Document]:
        for document in documents:
            text, found = self.scrub(document.text)
            if not found:
                yield document
                continue
            for kind, hits in found.items():
                self.counts[kind] += hits
            yield replace(document, text=text, metadata={**document.metadata, "pii": found})

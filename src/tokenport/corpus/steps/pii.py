"""PII scrubbing: find personal data in text and replace it, counting each kind.

Kinds: e-mail addresses, IPv4 and IPv6 addresses, phone numbers, payment card numbers, IBANs
and Chinese resident identity numbers. Every kind whose numbers carry a check is validated, so
that look-alikes stay: a card number must pass the Luhn check and fit a card network's issuer
range and length, an IBAN must pass ISO 13616's mod-97 check, a resident ID its ISO 7064 check
digit and a real birth date, an IP address must parse. A candidate the check rejects is retried
at the shorter ends its pattern allows (an IBAN's last group, a card number followed by its
expiry), then from the next position. Kinds are scanned in a fixed order (the most specific
first) and each replacement is a bracketed tag without digits, so one kind's replacement never
feeds another.

Technical text (man pages, RFCs, changelogs, build logs, code comments) is full of look-alikes, so
a candidate is also judged by its surroundings: a version or section number is not an IPv4
address (``zlib >= 1.2.2.3``, ``section 8.2.4.44``, ``dpkg (1.14.16.2)``), a US ZIP+4 code is not
a phone (``Boston, MA 02110-1301``), a stretch of a hex or byte dump, or an id in a URL's path, is
not a card number or a phone, and a MAC address is not an IPv6 address. An address in technical
text (a documentation address, a CIDR block, a netmask) is still an address.

``compat="datatrove"`` finds what datatrove 0.10's ``PIIFormatter`` finds instead: its e-mail
pattern, then its IPv4 pattern for public (globally routable) addresses only; other kinds are
refused. The replacements stay tokenport's tags (give datatrove the same single strings, or give
these the ones you want, for equal texts).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step

__all__ = ["DATATROVE_PII_KINDS", "PII_KINDS", "PIIScrubber", "ScrubPII", "luhn_valid"]

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
# A full stop, colon or hyphen after a match ends it unless a word character follows ("listens on
# 10.0.0.1." is an address; "1.2.3.4.5" and a decimal's integer part are not). The look-behind on
# the character before a match comes after the match's first character (looking back two), so that
# re's search skips to the characters a match can start with instead of trying every position.
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-](?<![0-9A-Za-z_.+-].)[A-Za-z0-9._%+-]*@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![0-9A-Za-z_])"
)
_IBAN = re.compile(r"[A-Z](?<![0-9A-Za-z_][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![0-9A-Za-z_])")
_CN_ID = re.compile(r"\d(?<![0-9A-Za-z_]\d)\d{16}[\dXx](?![0-9A-Za-z_])")
# A digit run glued to letters (inside a hash or a UUID) or in a URL's path (``/testcase/5754863779053568``)
# is not a card number.
_CARD = re.compile(r"\d(?<![0-9A-Za-z_.+/#~-]\d)(?:[ -]?\d){11,18}(?![0-9A-Za-z_]|[.-]\d)")
_IPV6 = re.compile(  # 2-7 groups of up to 4 hex digits and a colon, then the last group or an IPv4 address
    r"[0-9A-Fa-f:](?<![0-9A-Za-z_:.].)(?:(?<=:)|(?<=[0-9A-Fa-f])[0-9A-Fa-f]{0,3}:)(?:[0-9A-Fa-f]{0,4}:){1,6}"
    r"(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![0-9A-Za-z_]|[:.][0-9A-Za-z_])"
)
_IPV4 = re.compile(r"\d(?<![0-9A-Za-z_.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?![0-9A-Za-z_]|\.[0-9A-Za-z_])")
_PHONE = re.compile(
    r"[+(\d](?<![0-9A-Za-z_+/~@].)(?<!\d[.,].)(?:"  # not after a word character, + / ~ @ or a decimal point
    r"(?<=\+)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}"  # international: +CC ...
    r"|(?<=\()\d{3}\)[ .-]?\d{3}[ .-]?\d{4}"  # North American: (555) 123-4567
    r"|(?<=\d)\d{2}[ .-]\d{3}[ .-]\d{4}"  # North American: 555-123-4567
    r"|(?<=\()0[1-9]\d{0,3}\)[ -]?\d{2,8}(?:[ -]\d{2,4}){0,3}"  # national, trunk prefix 0: (030) 1234567
    r"|(?<=0)[1-9]\d{0,3}[ -]\d{2,8}(?:[ -]\d{2,4}){0,3}"  # national: 030 1234567, 04 20 00 57 56, 0580-730215
    r"|(?<=1)[3-9]\d{9}"  # Chinese mobile: 11 digits starting 13-19
    r")(?: ?(?:x|ext\.? ?)\d{1,5})?"  # an extension
    r"(?![0-9A-Za-z_]|[.,-]\d)"  # not the digits of a decimal or of a longer code
)
_PHONE_EXTENSION = re.compile(r" ?(?:x|ext\.? ?)\d+$")

# Technical text is full of dotted numbers that parse as IPv4 addresses. A version or a section
# number is not an address: a 4-part number right after a word naming one (``zlib >= 1.2.2.3``,
# ``sections "8.2.4.44``, ``§ 3.1.2.4``, ``update zlib to 1.2.3.4``, ``added in 1.2.3.4``,
# ``<version>1.2.3.4``, ``zlib-1.2.2.3``, ``nginx/1.2.3.4``, a Debian epoch ``1:2.3.4.5``, a
# Markdown heading ``## [1.2.3.4]``), followed by a version's suffix (``-rc1``, ``~beta``, ``+dfsg``,
# ``-5ubuntu1``, a changelog's ``(1.2.3.4-1)``, `` and later``) or by a heading's title
# (``8.2.4.44 Bogus comment state`` at a line's start or after a quote). Nor, unless a prefix length
# or a port follows, is one whose first part is a single digit and whose next parts are small
# (below 32, then below 100: ``1.7.12.1``, ``7.0.99.2``; not all alike, as ``8.8.8.8`` is, and not
# a well-known public address), one starting with 0 (``0.10.2.3``; not a host mask), or one whose first part is
# a single digit on a line holding a version of 3 or 5+ parts (``gradle 4.18.2.11; Kotlin
# 3.11.7``). A real address in technical text (a documentation address, a CIDR block in a man
# page, a netmask) is still an address.
_NOT_IPV4_BEFORE = re.compile(
    r"(?:(?<![0-9A-Za-z])(?i:versions?|ver|v|releases?|rel|rev|revision|sections?|sect|secs?|chapters?|chap"
    r"|clauses?|paragraphs?|para|appendix|annex|rfc ?\d+|oid|arcs?|figure|fig|table|step|build|patch|since"
    r"|(?:added|changed|deprecated|removed|fixed|introduced|new) in|(?:updat|upgrad|bump)\w*(?: [\w.+-]+)? to)\.?"
    r"|(?:^|\n)#{2,6}|§+|[<>=!~]=|~>|\^|[A-Za-z][-_/]|\d:)[ \t\"'(\[:=>]*$"
)
_NOT_IPV4_AFTER = re.compile(
    r"[-~+][A-Za-z]|-\d+(?:[A-Za-z~+)]|\.[A-Za-z])|[ \t]+(?:and|or) (?:later|newer|above|higher)"
)
# Public addresses that read like versions and are written in technical text as addresses.
_WELL_KNOWN_IPV4 = frozenset(("1.0.0.1", "1.2.3.4", "4.2.2.1", "4.2.2.2", "8.8.4.4", "9.9.9.10"))
_ADDRESS_AFTER = re.compile(r"[/:]\d")
_DOTTED = re.compile(r"(?<![\d.])\d+(?:\.\d+)+(?!\d|\.\d)")
_HEADING_START = re.compile(r"(?:^|\n)[ \t#*\"'(\[-]*$|[\"'\u201c]$")
_HEADING_TITLE = re.compile(r"[ \t]+[A-Z][a-z]")
# ZIP+4 codes after a US state's code (``Boston, MA 02110-1301``) or before ``USA`` are not phones;
# nor is a digit run of one digit repeated (``00000000`` in a dump), nor groups of two digits next
# to another group of two hex digits (``53 00 00 01 00 00`` in a byte dump).
_ZIP4 = re.compile(r"\d{5}-\d{4}")
_STATE_BEFORE = re.compile(r"(?<![0-9A-Za-z_])[A-Z]{2}\.?,?[\s\\.\"]*$")
_USA_AFTER = re.compile(r",?\s*U\.?S\.?A?\b")
_REPEATED_DIGIT = re.compile(r"(\d)\1{5}")
_BYTE_GROUPS = re.compile(r"\d\d(?: \d\d)+")
_BYTE_BEFORE = re.compile(r"(?<![0-9A-Za-z_])[0-9A-Fa-f]{2} $")
_BYTE_AFTER = re.compile(r" [0-9A-Fa-f]{2}(?![0-9A-Za-z_])")
# A card number written in groups has groups of 4 (the last may be shorter), or 4-6-5 / 4-6-4
# (American Express, Diners Club); a group of 4 hex digits next to it makes it part of a dump.
_HEX_GROUP_BEFORE = re.compile(r"(?<![0-9A-Za-z_])[0-9A-Fa-f]{4}[ -]$")
_HEX_GROUP_AFTER = re.compile(r"[ -][0-9A-Fa-f]{4}(?![0-9A-Za-z_])")
_SEPARATORS = re.compile(r"[ -]")

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


# Card networks' issuer ranges (leading digits, ISO/IEC 7812) and the lengths each issues: a
# Luhn-valid run outside them is not a card (an ISBN-13 starts 978 or 979, which no network uses).
# Each row: lowest and highest prefix (same number of digits), lengths.
_CARD_ISSUERS: tuple[tuple[str, str, range | tuple[int, ...]], ...] = (
    ("4", "4", (13, 16, 19)),  # Visa
    ("51", "55", (16,)),  # Mastercard
    ("2221", "2720", (16,)),  # Mastercard
    ("2200", "2204", range(16, 20)),  # Mir
    ("34", "34", (15,)),  # American Express
    ("37", "37", (15,)),  # American Express
    ("6011", "6011", range(16, 20)),  # Discover
    ("644", "649", range(16, 20)),  # Discover
    ("65", "65", range(16, 20)),  # Discover, RuPay
    ("60", "60", (16,)),  # RuPay
    ("62", "62", range(16, 20)),  # UnionPay
    ("81", "82", range(16, 20)),  # UnionPay, RuPay
    ("35", "35", range(16, 20)),  # JCB (assigned 3528-3589; card-type detectors take all of 35)
    ("2131", "2131", (15,)),  # JCB (older numbers)
    ("1800", "1800", (15,)),  # JCB (older numbers)
    ("300", "305", range(14, 20)),  # Diners Club
    ("3095", "3095", range(14, 20)),  # Diners Club
    ("36", "36", range(14, 20)),  # Diners Club
    ("38", "39", range(14, 20)),  # Diners Club
    ("50", "50", range(12, 20)),  # Maestro
    ("56", "59", range(12, 20)),  # Maestro
    ("63", "63", range(12, 20)),  # Maestro
    ("67", "67", range(12, 20)),  # Maestro
)


def _card_issued(digits: str) -> bool:
    """Whether ``digits`` starts with a card network's issuer range and has one of its lengths."""
    return any(low <= digits[: len(low)] <= high and len(digits) in lengths for low, high, lengths in _CARD_ISSUERS)


def _card_grouped(match: str) -> bool:
    """Whether a card number's groups, if it is written in groups, are a card's (see _SEPARATORS)."""
    sizes = [len(group) for group in _SEPARATORS.split(match)]
    if len(sizes) == 1:
        return True
    if sizes[:2] == [4, 6]:
        return sizes[2:] in ([5], [4])
    return len(sizes) >= 3 and all(size == 4 for size in sizes[:-1]) and 1 <= sizes[-1] <= 4


def _is_card(match: str) -> bool:
    digits = _digits(match)
    return _card_issued(digits) and luhn_valid(digits) and len(set(digits)) > 1 and _card_grouped(match)


def _card_in_dump(text: str, start: int, end: int) -> bool:
    """Whether a grouped card candidate is one stretch of a longer run of 4-digit hex groups."""
    if not _SEPARATORS.search(text, start, end):
        return False
    return bool(_HEX_GROUP_BEFORE.search(text, max(0, start - 6), start) or _HEX_GROUP_AFTER.match(text, end))


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


def _ipv4_in_context(text: str, start: int, end: int) -> bool:
    """Whether the dotted quad at ``text[start:end]`` is a version or a section number (see
    _NOT_IPV4_BEFORE)."""
    if _NOT_IPV4_BEFORE.search(text, max(0, start - 32), start) or _NOT_IPV4_AFTER.match(text, end):
        return True
    if _HEADING_TITLE.match(text, end) and _HEADING_START.search(text, max(0, start - 12), start):
        return True
    if text[start + 1] != "." or _ADDRESS_AFTER.match(text, end):
        return False
    parts = [int(part) for part in text[start:end].split(".")]
    if parts[0] == 0:
        return parts[1] not in (0, 255)  # a version, not a host mask (0.0.0.255, 0.255.255.255)
    if parts[1] < 32 and parts[2] < 100 and len(set(parts)) > 1 and text[start:end] not in _WELL_KNOWN_IPV4:
        return True
    line_end = text.find("\n", end)
    line = text[text.rfind("\n", 0, start) + 1 : line_end if line_end >= 0 else len(text)]
    return any(number.count(".") not in (1, 3) for number in _DOTTED.findall(line))


def _ipv6_in_context(text: str, start: int, end: int) -> bool:
    """Whether an IPv6 candidate of one group and ``::`` (``2000::``, a year before two colons) is
    not followed by a prefix length, so names neither a host nor a network."""
    return text.count(":", start, end) == 2 and text.endswith("::", start, end) and not text.startswith("/", end)


def _is_ipv6(match: str) -> bool:
    """A parseable IPv6 address holding a digit (``a::b`` in code is not one), not a MAC or EUI-64
    written with colons (six or eight groups of two), and naming a host (loopback ``::1`` and ``::``
    identify nobody)."""
    if not any(char.isdigit() for char in match):
        return False
    groups = match.split(":")
    if len(groups) in (6, 8) and all(len(group) == 2 for group in groups):
        return False
    try:
        address = ipaddress.IPv6Address(match)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


def _is_phone(match: str) -> bool:
    """8-15 digits with a country code, 9-15 without (a national number with its trunk 0 or a North
    American one), an extension aside."""
    digits = _digits(_PHONE_EXTENSION.sub("", match))
    return (8 if match[0] == "+" else 9) <= len(digits) <= 15 and not _REPEATED_DIGIT.search(digits)


def _phone_in_context(text: str, start: int, end: int) -> bool:
    """Whether a phone candidate is a US ZIP+4 code (after a state's code or before ``USA``) or a
    stretch of a byte dump."""
    if _BYTE_GROUPS.fullmatch(text, start, end):
        return bool(_BYTE_BEFORE.search(text, max(0, start - 3), start) or _BYTE_AFTER.match(text, end))
    if not _ZIP4.fullmatch(text, start, end):
        return False
    return bool(_STATE_BEFORE.search(text, max(0, start - 12), start) or _USA_AFTER.match(text, end))


@dataclass(frozen=True)
class _Rule:
    """How one kind is found: its pattern, the check a match must pass (None: the pattern is
    enough), the characters before which a rejected match may end instead, a character every
    match holds (a text without it is not searched), and whether a match's surroundings make it
    something else (called with the text, the match's start and end)."""

    pattern: re.Pattern[str]
    valid: Callable[[str], bool] | None = None
    cuts: str = ""
    needs: str = ""
    refused: Callable[[str, int, int], bool] | None = None

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """(start, end) of each match in ``text`` that passes the check. A rejected match is cut
        short before each of its cut characters, longest first (an IBAN followed by a currency,
        a card number by its expiry); failing all, the search resumes one character later."""
        if self.needs not in text:
            return
        position = 0
        while (match := self.pattern.search(text, position)) is not None:
            start, end = match.span()
            if self.valid is not None and not self.valid(text[start:end]):
                ends = (cut for cut in range(end - 1, start, -1) if text[cut] in self.cuts)
                end = next((cut for cut in ends if self.valid(text[start:cut])), start)
                if end == start:
                    position = start + 1
                    continue
            if self.refused is not None and self.refused(text, start, end):
                position = start + 1
                continue
            yield start, end
            position = end


_RULES = {
    "email": _Rule(_EMAIL, needs="@"),
    "iban": _Rule(_IBAN, _is_iban, cuts=" "),
    "cn_id": _Rule(_CN_ID, _is_cn_id),
    "credit_card": _Rule(_CARD, _is_card, cuts=" -", refused=_card_in_dump),
    "ipv6": _Rule(_IPV6, _is_ipv6, cuts=":", needs=":", refused=_ipv6_in_context),
    "ipv4": _Rule(_IPV4, _is_ipv4, needs=".", refused=_ipv4_in_context),
    "phone": _Rule(_PHONE, _is_phone, refused=_phone_in_context),
}


# datatrove 0.10's PIIFormatter patterns (Apache-2.0), for compat="datatrove".
_DATATROVE_EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
_DATATROVE_IPV4 = re.compile(
    r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
)


def _is_public_ip(match: str) -> bool:
    """datatrove's IP check: an address that parses and is globally routable."""
    try:
        return ipaddress.ip_address(match).is_global
    except ValueError:
        return False


# Each kind: its pattern, the check a match must pass, and a pattern every text with a match
# matches (searched first: it is much cheaper than the pattern on a text without any).
_DATATROVE_RULES: dict[str, tuple[re.Pattern[str], Callable[[str], bool] | None, re.Pattern[str]]] = {
    "email": (_DATATROVE_EMAIL, None, re.compile("@")),
    "ipv4": (_DATATROVE_IPV4, _is_public_ip, re.compile(r"[0-9]\.[0-9]")),
}
DATATROVE_PII_KINDS = tuple(_DATATROVE_RULES)
"""The kinds ``compat="datatrove"`` scrubs, in datatrove's order."""
_COMPAT_MODES = ("tokenport", "datatrove")


def _datatrove_scrub(text: str, kind: str, tag: str) -> tuple[str, int]:
    """``text`` with datatrove's matches of ``kind`` replaced by ``tag`` (a match its check
    rejects stays), and how many were replaced."""
    pattern, valid, needs = _DATATROVE_RULES[kind]
    if needs.search(text) is None:
        return text, 0
    replaced = 0

    def substitute(match: re.Match[str]) -> str:
        nonlocal replaced
        if valid is not None and not valid(match.group(0)):
            return match.group(0)
        replaced += 1
        return tag

    return pattern.sub(substitute, text), replaced


@dataclass
class PIIScrubber:
    """A pipeline step replacing personal data in each document's text (see the module docstring).

    ``kinds`` picks what to scrub (default: all of ``PII_KINDS``); ``replacements`` overrides the
    tag per kind. Each document's counts go to ``metadata["pii"]`` (kinds found only) and add up in
    ``self.counts``. Documents are never dropped. ``compat="datatrove"``: see the module docstring
    (its kinds default to ``DATATROVE_PII_KINDS``).
    """

    kinds: tuple[str, ...] | None = None
    replacements: Mapping[str, str] = field(default_factory=dict)
    compat: str = "tokenport"
    counts: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.compat not in _COMPAT_MODES:
            modes = ", ".join(map(repr, _COMPAT_MODES))
            raise ConfigError(f"compat={self.compat!r} is not a mode: pass one of {modes}")
        known = DATATROVE_PII_KINDS if self.compat == "datatrove" else PII_KINDS
        kinds = known if self.kinds is None else self.kinds
        unknown = [kind for kind in (*kinds, *self.replacements) if kind not in known]
        if unknown:
            mode = " with compat='datatrove'" if self.compat == "datatrove" else ""
            raise ConfigError(f"PII kind {unknown[0]!r} is unknown{mode}: choose from {', '.join(known)}")
        self.kinds = tuple(kind for kind in known if kind in kinds)  # scanning order, whatever was given
        self._tags = {kind: self.replacements.get(kind, _DEFAULT_REPLACEMENTS[kind]) for kind in self.kinds}
        self.counts = {kind: 0 for kind in self.kinds}

    def scrub(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` with every PII match replaced, and the number replaced per kind (kinds found only)."""
        found: dict[str, int] = {}
        assert self.kinds is not None  # set by __post_init__
        if self.compat == "datatrove":
            for kind in self.kinds:
                text, hits = _datatrove_scrub(text, kind, self._tags[kind])
                if hits:
                    found[kind] = hits
            return text, found
        for kind in self.kinds:
            pieces: list[str] = []
            last = 0
            for start, end in _RULES[kind].spans(text):
                pieces += (text[last:start], self._tags[kind])
                last = end
            if pieces:
                found[kind] = len(pieces) // 2
                text = "".join(pieces) + text[last:]
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


class ScrubPII(Step):
    """``{"step": "pii", "kinds": [...], "replacements": {...}}``: replace personal data (a
    ``PIIScrubber``), counting ``replaced:<kind>`` and noting each document's finds in ``metadata["pii"]``."""

    def __init__(
        self,
        kinds: Sequence[str] | None = None,
        replacements: Mapping[str, str] | None = None,
        compat: str = "tokenport",
    ) -> None:
        super().__init__()
        self.scrubber = PIIScrubber(
            None if kinds is None else tuple(kinds), replacements=dict(replacements or {}), compat=compat
        )

    def process(self, document: Document) -> Document | None:
        text, found = self.scrubber.scrub(document.text)
        if not found:
            return document
        self.replaced.update(found)
        return replace(document, text=text, metadata={**document.metadata, "pii": found})

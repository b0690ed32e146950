"""Deterministic sentences for measuring the PII scrubber: faker values of each kind (several
locales) set in ordinary prose, and hard negatives (ISBNs, hashes, UUIDs, versions, dates...).

Shared by tests/corpus/test_pii.py (the recall and false-positive goals) and benchmarks/bench_pii.py.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass

from faker import Faker

LOCALES = ("en_US", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "zh_CN", "en_GB")
MEASURED_KINDS = ("email", "ipv4", "ipv6", "credit_card", "iban", "cn_id", "phone")

# Where a value sits in prose: end of sentence, before a comma, in parentheses, quoted, after a
# colon, at the start, before a semicolon or a question mark. "{v}" is the value.
_PLACES = (
    "{s} {v}.",
    "{s} {v}, as agreed.",
    "Please note the details ({v}) before Friday.",
    'She wrote "{v}" on the form.',
    "He said it twice: {v}",
    "{v} was listed first in the report.",
    "{s} {v}; the rest follows.",
    "Was it really {v}?",
    "Entry {v}\nNext entry pending.",
    "«{v}» figurait sur la fiche.",
)
_LEADS = {
    "email": ("For questions, write to", "Her address is", "Send the signed copy to", "Contact"),
    "ipv4": ("The server listens on", "Requests came from", "The gateway is at", "Ping"),
    "ipv6": ("The host listens on", "Traffic was routed via", "The interface got", "Block"),
    "credit_card": ("The customer paid with card", "Charge it to", "The card number is", "Card no."),
    "iban": ("Please transfer the amount to", "Our account is", "The refund goes to IBAN", "IBAN"),
    "cn_id": ("The applicant's ID number is", "Registered under", "ID", "Identity card"),
    "phone": ("Call us at", "Her mobile is", "Reach the front desk on", "Tel."),
}
_CHINESE = ("联系方式：{v}。", "请核对{v}，然后签字。", "（{v}）已登记。", "号码是“{v}”")


@dataclass(frozen=True)
class Case:
    """One sentence: the text, the kind embedded (None for a hard negative) and the value."""

    text: str
    kind: str | None
    value: str

    def expected(self, tag: str) -> str:
        """The text with the value replaced by ``tag``."""
        return self.text.replace(self.value, tag)


def _spaced(compact: str, groups: tuple[int, ...]) -> str:
    out, at = [], 0
    for size in groups:
        out.append(compact[at : at + size])
        at += size
    if at < len(compact):
        out.append(compact[at:])
    return " ".join(part for part in out if part)


def _value(fake: Faker, kind: str, rng: random.Random) -> str:
    if kind == "email":
        return rng.choice((fake.email, fake.free_email, fake.company_email))()
    if kind == "ipv4":
        return rng.choice((fake.ipv4, fake.ipv4_public, fake.ipv4_private))()
    if kind == "ipv6":
        address = fake.ipv6()
        return ipaddress.IPv6Address(address).compressed if rng.random() < 0.5 else address
    if kind == "credit_card":
        number = fake.credit_card_number()
        shape = rng.random()
        if shape < 0.4:
            return number
        groups = (4, 6, 5) if len(number) == 15 else (4, 4, 4, 4)
        spaced = _spaced(number, groups)
        return spaced.replace(" ", "-") if shape < 0.55 else spaced
    if kind == "iban":
        iban = fake.iban()
        return _spaced(iban, (4,) * 8) if rng.random() < 0.5 else iban
    if kind == "cn_id":
        return fake.ssn()
    return fake.phone_number()


def positives(kind: str, per_locale: int, seed: int = 0) -> list[Case]:
    """``per_locale`` sentences per locale embedding a faker value of ``kind`` (Chinese IDs: zh_CN
    only, ``per_locale * len(LOCALES)`` of them)."""
    locales = ("zh_CN",) * len(LOCALES) if kind == "cn_id" else LOCALES
    cases = []
    for index, locale in enumerate(locales):
        fake = Faker(locale)
        fake.seed_instance(seed * 1000 + index)
        rng = random.Random(f"{kind}/{seed}/{index}")
        for _ in range(per_locale):
            value = _value(fake, kind, rng)
            if locale == "zh_CN" and rng.random() < 0.3:
                template = rng.choice(_CHINESE)
            else:
                template = rng.choice(_PLACES).replace("{s}", rng.choice(_LEADS[kind]))
            cases.append(Case(template.replace("{v}", value), kind, value))
    return cases


def _luhn_complete(digits: str) -> str:
    """``digits`` plus the check digit that makes the whole pass the Luhn check."""
    for check in "0123456789":
        total = 0
        for position, char in enumerate(reversed(digits + check)):
            value = int(char) * (2 if position % 2 else 1)
            total += value - 9 if value > 9 else value
        if total % 10 == 0:
            return digits + check
    raise AssertionError("unreachable")


def _isbn13(rng: random.Random, luhn: bool) -> str:
    """A valid ISBN-13 (its own mod-10 check), hyphenated or not; ``luhn`` keeps drawing until the
    digits also pass the Luhn check, the case a card detector without issuer ranges scrubs."""
    while True:
        body = rng.choice(("978", "979")) + "".join(rng.choice("0123456789") for _ in range(9))
        check = (10 - sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(body)) % 10) % 10
        digits = body + str(check)
        if not luhn or _luhn_complete(digits[:-1]) == digits:
            break
    if rng.random() < 0.5:
        return digits
    cut = rng.randint(4, 7)
    return f"{digits[:3]}-{digits[3]}-{digits[4 : 4 + cut]}-{digits[4 + cut : 12]}-{digits[12]}"


def negatives(count: int, seed: int = 0) -> list[Case]:
    """``count`` sentences holding look-alikes that are not personal data."""
    rng = random.Random(f"negatives/{seed}")
    fake = Faker("en_US")
    fake.seed_instance(seed)

    def luhn_run(length: int) -> str:
        return _luhn_complete("".join(rng.choice("0123456789") for _ in range(length - 1)))

    makers = (
        lambda: f"ISBN {_isbn13(rng, luhn=True)}",
        lambda: _isbn13(rng, luhn=rng.random() < 0.5),
        lambda: fake.isbn10(separator=rng.choice(("-", ""))),
        lambda: fake.sha1(),
        lambda: fake.sha1()[: rng.choice((7, 8, 12))],
        lambda: rng.choice("abcdef") + luhn_run(16) + fake.sha1()[:23],  # a hash with a Luhn-valid run inside
        lambda: fake.sha256(),
        lambda: fake.uuid4(),
        lambda: (
            f"{rng.choice('abcdef')}{luhn_run(7)}-{rng.randint(1000, 9999)}-4{rng.randint(100, 999)}-"
            f"a{rng.randint(100, 999)}-{rng.randint(10**11, 10**12 - 1)}"
        ),  # a UUID heavy in digits
        lambda: f"{rng.randint(0, 20)}.{rng.randint(0, 40)}.{rng.randint(0, 200)}",
        lambda: f"v{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}",
        lambda: f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}-rc.{rng.randint(1, 5)}",
        lambda: fake.date(),
        lambda: fake.date(pattern=rng.choice(("%d.%m.%Y", "%d/%m/%Y", "%m/%d/%Y", "%Y/%m/%d"))),
        lambda: fake.iso8601(),
        lambda: fake.date_time().strftime("%Y-%m-%d %H:%M:%S"),
        lambda: fake.time(),
        lambda: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
        lambda: f"SKU-{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGH')}",
        lambda: f"PN {rng.randint(10, 99)}-{rng.randint(1000, 9999)}-{rng.randint(100, 999)}",
        lambda: f"{rng.choice('ABCDEFGH')}{rng.randint(100, 999)}-{rng.randint(1000, 9999)}-{rng.randint(10, 99)}",
        lambda: f"{rng.uniform(0, 1000):.{rng.randint(6, 15)}f}",
        lambda: f"{rng.randint(10**14, 10**16)}.{rng.randint(0, 99):02d}",
        lambda: f"{rng.randint(1, 9)},{rng.randint(100, 999)},{rng.randint(100, 999)},{rng.randint(100, 999)}",
        lambda: f"{rng.randint(1, 999)} {rng.randint(100, 999)} {rng.randint(100, 999)}",
        lambda: f"std::{rng.choice(('vector', 'map', 'string'))}",
        lambda: f"order #{rng.randint(10**5, 10**9)}",
        lambda: f"{rng.randint(10, 999)}/{rng.randint(1000, 9999)}",
    )
    cases = []
    for _ in range(count):
        value = rng.choice(makers)()
        template = rng.choice(_PLACES).replace("{s}", rng.choice(("The reference is", "See", "Version", "Noted:")))
        cases.append(Case(template.replace("{v}", value), None, value))
    return cases

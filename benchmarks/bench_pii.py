"""tokenport.prepare's PII scrubber: recall per kind, false positives and docs/s, against the
scrubber before issue 12 and datatrove's PIIFormatter, on the same text.

    python benchmarks/bench_pii.py            # 100 values per kind and locale, 5,000 negatives, 1,000 pages
    python benchmarks/bench_pii.py --quick    # 25, 1,000 and 200

Sentences: tests/_support/pii_sentences.py (the same generator tests/corpus/test_pii.py asserts the goals on, other
seeds here): faker values of each kind in 8 locales (en_US, de_DE, fr_FR, es_ES, it_IT, nl_NL,
zh_CN, en_GB; Chinese resident IDs from zh_CN) set in prose at sentence ends, before commas, in
parentheses and quotes; negatives hold ISBN-10/13 (many Luhn-valid), SHA-1/SHA-256 hashes and
UUIDs (some with Luhn-valid digit runs), versions, dates, times, product codes and decimals.

Rows:
  recall       share of a kind's sentences whose value is replaced whole, as that kind, and nothing
               else is touched. Goal >= 0.98 for email, ipv4, ipv6, credit_card, iban, cn_id (phones:
               figure only). datatrove's PIIFormatter replaces e-mails and IPv4 only; it runs with
               ``only_remove_public_ips=False`` (tokenport scrubs private addresses too) and a hit
               is its own replacement in the value's place.
  false pos.   share of negative sentences changed at all. Goal <= 0.5%.
  barcodes     the same share over sentences holding faker EAN-13 and UPC-A codes (not in the goal's
               negatives: a code that passes the Luhn check in a card issuer's range and length is
               indistinguishable from a card number; the figure says how often that happens).
  speed        docs/s of ``scrub`` over web-like pages (standard-library prose pages from
               bench_clean.py, one in eight a slice of code), each with one PII sentence inserted
               between two paragraphs; best of N in turns (A B C A B C ...), one core. "before" is
               src/tokenport/prepare/pii.py at the commit before issue 12 (read with git show),
               datatrove is ``PIIFormatter().format``, which looks for two kinds, not seven.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile

from faker import Faker

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests._support.pii_sentences import LOCALES, MEASURED_KINDS, negatives, positives  # noqa: E402

from _harness import Row, best_of_each, print_table, scratch_directory  # noqa: E402
from bench_clean import module_paragraphs, stdlib_modules, web_pages  # noqa: E402
from tokenport.corpus.steps.pii import _DEFAULT_REPLACEMENTS, PIIScrubber  # noqa: E402

BEFORE_REV = "b25df947ecfe"  # main before issue 12's PII changes
GOAL_RECALL = 0.98
GOAL_FALSE_POSITIVES = 0.005
DATATROVE_KINDS = ("email", "ipv4")


def scrubber_at(rev: str):
    """PIIScrubber as src/tokenport/prepare/pii.py was at git revision ``rev`` (imported as a
    module of tokenport.corpus so that its relative imports resolve), or None when git cannot show it."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:src/tokenport/prepare/pii.py"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    source = source.replace("from .documents import", "from .inputs.documents import")  # moved since
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location("tokenport.corpus._pii_before", file.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    os.unlink(file.name)
    return module.PIIScrubber()


def datatrove_formatter():
    from datatrove.pipeline.formatters import PIIFormatter

    return PIIFormatter(only_remove_public_ips=False)


def recall(scrub, cases, tag: str, kind: str) -> float:
    """Share of ``cases`` that ``scrub`` (a tokenport scrubber's ``scrub``) replaces exactly."""
    return sum(scrub(case.text) == (case.expected(tag), {kind: 1}) for case in cases) / len(cases)


def datatrove_recall(formatter, cases, kind: str) -> float:
    replacer = formatter.emails_replacer if kind == "email" else formatter.ip_replacer
    hits = 0
    for case in cases:
        out = formatter.format(case.text)
        hits += any(out == case.expected(tag) for tag in replacer.replacements)
    return hits / len(cases)


def barcodes(count: int, seed: int) -> list[str]:
    """``count`` sentences holding a faker EAN-13 or UPC-A product code (a Luhn-valid one in an
    issuer range of 12 or 13 digits cannot be told from a card number)."""
    fake = Faker("en_US")
    fake.seed_instance(seed)
    return [f"Item {fake.ean13() if k % 2 else fake.upc_a()} is in stock." for k in range(count)]


def pages_with_pii(count: int, cases, seed: int) -> list[str]:
    """``count`` web-like pages, each with one of ``cases``' sentences between two paragraphs."""
    modules = stdlib_modules()
    pages = web_pages(modules, [module_paragraphs(source) for source in modules], count, seed)
    rng = random.Random(seed)
    out = []
    for page in pages:
        paragraphs = page.split("\n\n")
        paragraphs.insert(rng.randint(0, len(paragraphs)), rng.choice(cases).text)
        out.append("\n\n".join(paragraphs))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", default=BEFORE_REV, help="git revision of the 'before' scrubber")
    args = parser.parse_args(argv)
    per_locale, negative_count, page_count = (25, 1000, 200) if args.quick else (100, 5000, 1000)

    with scratch_directory(None, "bench_pii_", args.quick):
        after, before, theirs = PIIScrubber(), scrubber_at(args.before), datatrove_formatter()
        print(
            f"{per_locale} values per kind and locale ({len(LOCALES)} locales), {negative_count} negatives; "
            f"before = {args.before if before else 'unavailable (git show failed)'}"
        )
        cases = {kind: positives(kind, per_locale, seed=1) for kind in MEASURED_KINDS}
        print(f"\n{'kind':<12} {'sentences':>9} {'after':>7} {'before':>7} {'datatrove':>9}  goal")
        for kind in MEASURED_KINDS:
            tag = _DEFAULT_REPLACEMENTS[kind]
            ours = recall(after.scrub, cases[kind], tag, kind)
            old = recall(before.scrub, cases[kind], tag, kind) if before else float("nan")
            dt = f"{datatrove_recall(theirs, cases[kind], kind):9.4f}" if kind in DATATROVE_KINDS else f"{'-':>9}"
            goal = "" if kind == "phone" else f">= {GOAL_RECALL} {'met' if ours >= GOAL_RECALL else 'NOT met'}"
            print(f"{kind:<12} {len(cases[kind]):>9} {ours:7.4f} {old:7.4f} {dt}  {goal}")
        hard = negatives(negative_count, seed=1)
        rates = [sum(bool(s.scrub(c.text)[1]) for c in hard) / len(hard) for s in (after, before) if s]
        dt_rate = sum(theirs.format(c.text) != c.text for c in hard) / len(hard)
        met = "met" if rates[0] <= GOAL_FALSE_POSITIVES else "NOT met"
        print(
            f"{'false pos.':<12} {len(hard):>9} {rates[0]:7.2%} {rates[-1] if before else float('nan'):7.2%} "
            f"{dt_rate:9.2%}  <= {GOAL_FALSE_POSITIVES:.1%} {met}"
        )
        codes = barcodes(negative_count, seed=1)
        rates = [sum(bool(s.scrub(text)[1]) for text in codes) / len(codes) for s in (after, before) if s]
        print(
            f"{'barcodes':<12} {len(codes):>9} {rates[0]:7.2%} {rates[-1] if before else float('nan'):7.2%} "
            f"{'-':>9}  (EAN-13 and UPC-A: no goal)\n"
        )

        pages = pages_with_pii(page_count, [c for kind in MEASURED_KINDS for c in cases[kind]], seed=2)
        megabytes = sum(len(page.encode()) for page in pages) / 1e6
        print(f"speed: {len(pages)} pages, {megabytes:.1f} MB, each with one PII sentence")
        fns = [lambda: [after.scrub(p) for p in pages], lambda: [theirs.format(p) for p in pages]]
        if before:
            fns.append(lambda: [before.scrub(p) for p in pages])
        times = best_of_each(fns, args.repeat)
        rows = [
            Row(
                "speed",
                "scrub, 7 kinds",
                "docs/s",
                len(pages) / times[0],
                len(pages) / times[1],
                "datatrove PIIFormatter (2 kinds)",
            )
        ]
        if before:
            rows.append(
                Row(
                    "speed",
                    "scrub, 7 kinds",
                    "docs/s",
                    len(pages) / times[0],
                    len(pages) / times[2],
                    f"tokenport before ({args.before})",
                )
            )
        print_table(rows)


if __name__ == "__main__":
    main()

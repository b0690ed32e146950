"""tokenport.prepare's PII scrubber: recall per kind, false positives and docs/s, against the
scrubber before issue 12 and datatrove's PIIFormatter, on the same text.

    python benchmarks/bench_pii.py            # 100 values per kind and locale, 5,000 negatives, 1,000 pages
    python benchmarks/bench_pii.py --quick    # 25, 1,000 and 200; technical: 1,000 man pages, 2,000 changelog entries

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
               datatrove is ``PIIFormatter().format``, which looks for two kinds, not seven; "since"
               (``--since``, default 3e3fac6b73a0) is src/tokenport/corpus/steps/pii.py before
               issue 29's changes.
  technical    (issue 29) documents touched wrongly / all documents: on the labelled fixture of
               tests/_support/pii_technical.py (RFC-style text, changelogs, man pages, build logs,
               configs, code comments, dense with versions, section numbers, OIDs, ZIP+4 codes,
               dumps, MACs, with real addresses, e-mails and phones labelled; goal <= 0.001) and
               on /usr/share/common-licenses (no personal data: every touch is wrong; goal <=
               0.001), with recall per kind on the fixture (goal >= 0.98). Unlabelled sources,
               documents touched at all and touched by a kind other than e-mail (upper bounds on
               the wrong ones, since they hold real e-mails and documentation addresses) and what
               was replaced: the standard library's
               comments and docstrings, man pages (/usr/share/man, roff stripped crudely; 5,000,
               1,000 with --quick) and Debian changelog entries (/usr/share/doc/*/changelog*.gz;
               10,000, 2,000 with --quick), each where present. Each for now and for --since.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import importlib.util
import io
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import tokenize

from faker import Faker

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests._support.pii_sentences import LOCALES, MEASURED_KINDS, negatives, positives  # noqa: E402
from tests._support.pii_technical import (  # noqa: E402
    KINDS_LABELLED,
    false_positive,
    found_values,
    technical_documents,
)

from _harness import Row, best_of_each, print_table, scratch_directory  # noqa: E402
from bench_clean import module_paragraphs, stdlib_modules, web_pages  # noqa: E402
from tokenport.corpus.steps.pii import _DEFAULT_REPLACEMENTS, PIIScrubber  # noqa: E402
from tokenport.demo.corpus import docstrings, read_source, stdlib_sources  # noqa: E402

BEFORE_REV = "b25df947ecfe"  # main before issue 12's PII changes
GOAL_RECALL = 0.98
GOAL_FALSE_POSITIVES = 0.005
GOAL_TECHNICAL_WRONG = 0.001
SINCE_REV = "3e3fac6b73a0"  # main before issue 29's technical-text changes to the scrubber
SINCE_PATH = "src/tokenport/corpus/steps/pii.py"
DATATROVE_KINDS = ("email", "ipv4")


def scrubber_at(rev: str, path: str = "src/tokenport/prepare/pii.py", package: str = "tokenport.corpus"):
    """PIIScrubber as ``path`` was at git revision ``rev`` (imported as a module of ``package`` so
    that its relative imports resolve), or None when git cannot show it."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    source = source.replace("from .documents import", "from .inputs.documents import")  # moved since
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    name = re.sub(r"\W", "_", rev)
    spec = importlib.util.spec_from_file_location(f"{package}._pii_{name}", file.name)
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


def stdlib_documents() -> list[str]:
    """The standard library's docstrings (one document each) and code comments (one document per
    module), the prose of tokenport.demo.corpus's stdlib corpus."""
    out = []
    for path in stdlib_sources():
        source = read_source(path)
        if source is None:
            continue
        out.extend(docstrings(source))
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (tokenize.TokenError, SyntaxError):
            continue
        comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
        if comments:
            out.append("\n".join(comments))
    return out


_ROFF_FONT = re.compile(r"\\f[BIRP1-4]|\\f\(..|\\f\[[^]]*\]|\\s[-+]?\d|\\&|\\e")
_ROFF_MACRO = re.compile(r"^\.(?!\\\")[A-Za-z]{1,3}[ \t]?", re.MULTILINE)


def man_pages(limit: int | None) -> list[str]:
    """Each page under /usr/share/man/man*/ (none where there is none), rendered crudely: roff's
    font and size escapes and macro names stripped, ``\\-`` read as ``-`` (every k-th page when ``limit``)."""
    paths = sorted(glob.glob("/usr/share/man/man*/*.gz"))
    if limit and len(paths) > limit:
        paths = paths[:: len(paths) // limit][:limit]
    out = []
    for path in paths:
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as file:
                text = file.read()
        except (OSError, EOFError):
            continue
        out.append(_ROFF_MACRO.sub("", _ROFF_FONT.sub("", text.replace("\\-", "-"))))
    return out


def changelog_entries(limit: int | None) -> list[str]:
    """The entries (each ending with its `` -- name <e-mail>  date`` line) of the Debian changelogs
    in /usr/share/doc/*/changelog*.gz (none where there are none; the first ``limit`` when given)."""
    out: list[str] = []
    for path in sorted(glob.glob("/usr/share/doc/*/changelog*.gz")):
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as file:
                text = file.read()
        except (OSError, EOFError):
            continue
        out.extend(entry.strip() for entry in re.split(r"(?m)(?<=^ -- ).*\n", text) if entry.strip())
        if limit and len(out) >= limit:
            return out[:limit]
    return out


def license_texts() -> list[str]:
    """/usr/share/common-licenses' texts (none where there are none): no personal data in them."""
    out = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as file:
                out.append(file.read())
    return out


def fraction_row(case: str, value: float, goal: str | None) -> Row:
    """A technical row: a fraction of documents or values, with its goal ("<=0.001", ">=0.98") if any."""
    if goal is None:
        return Row("technical", case, "fraction", value, math.nan, "-", absolute=True)
    bound = float(goal[2:])
    lower = goal.startswith("<=")
    return Row("technical", case, "fraction", value, math.nan, "-", bound, goal, lower_is_better=lower, absolute=True)


def technical(scrubbers: dict[str, object], quick: bool) -> list[Row]:
    """The technical section: share of documents touched wrongly on the labelled fixture and on the
    license texts (which hold none), share touched at all on unlabelled sources (stdlib comments and
    docstrings, man pages, changelogs: an upper bound), and recall per kind on the fixture. Goals
    are set on the first scrubber's rows only (the others are for comparison)."""
    fixture = technical_documents()
    licenses = license_texts()
    sources = {
        "stdlib comments+docstrings": stdlib_documents(),
        "man pages": man_pages(1000 if quick else 5000),
        "changelog entries": changelog_entries(2000 if quick else 10000),
    }
    print(f"technical: {len(fixture)} labelled fixture documents (tests/_support/pii_technical.py)")
    rows = []
    for position, (name, scrubber) in enumerate(scrubbers.items()):
        wrong_goal = f"<={GOAL_TECHNICAL_WRONG:g}" if position == 0 else None
        recall_goal = f">={GOAL_RECALL:g}" if position == 0 else None
        wrong = sum(false_positive(scrubber.scrub, document) for document in fixture) / len(fixture)
        rows.append(fraction_row(f"fixture, wrongly touched ({name})", wrong, wrong_goal))
        found = [pair for document in fixture for pair in zip(document.pii, found_values(scrubber.scrub, document))]
        for kind in KINDS_LABELLED:
            hits = [ok for (labelled, _), ok in found if labelled == kind]
            rows.append(fraction_row(f"fixture recall {kind} ({name})", sum(hits) / len(hits), recall_goal))
        if licenses:
            wrong = sum(bool(scrubber.scrub(text)[1]) for text in licenses) / len(licenses)
            rows.append(fraction_row(f"licenses, wrongly touched ({name})", wrong, wrong_goal))
        for source, texts in sources.items():
            if not texts:
                continue
            kinds: dict[str, int] = {}
            touched = not_email = 0
            for text in texts:
                replaced = scrubber.scrub(text)[1]
                touched += bool(replaced)
                not_email += bool(replaced.keys() - {"email"})
                for kind, hits in replaced.items():
                    kinds[kind] = kinds.get(kind, 0) + hits
            rows.append(fraction_row(f"{source}, touched ({name})", touched / len(texts), None))
            rows.append(fraction_row(f"{source}, touched but e-mails ({name})", not_email / len(texts), None))
            print(f"  {source} ({name}): {len(texts)} documents, {touched} touched; replaced {kinds}")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", default=BEFORE_REV, help="git revision of the 'before' scrubber")
    parser.add_argument("--since", default=SINCE_REV, help="git revision of the scrubber before issue 29")
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
        since = scrubber_at(args.since, SINCE_PATH, "tokenport.corpus.steps")
        fns = [lambda: [after.scrub(p) for p in pages], lambda: [theirs.format(p) for p in pages]]
        if before:
            fns.append(lambda: [before.scrub(p) for p in pages])
        if since:
            fns.append(lambda: [since.scrub(p) for p in pages])
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
        if since:
            rows.append(
                Row(
                    "speed",
                    "scrub, 7 kinds",
                    "docs/s",
                    len(pages) / times[0],
                    len(pages) / times[-1],
                    f"tokenport {args.since} (before issue 29)",
                )
            )
        print()
        rows += technical({"now": after, **({args.since: since} if since else {})}, args.quick)
        print()
        print_table(rows)


if __name__ == "__main__":
    main()

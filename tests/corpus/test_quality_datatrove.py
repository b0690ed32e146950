"""``compat="datatrove"``: the quality filters take the real datatrove 0.10's keep/drop decisions.

Pages: real text on this machine (man page sources, license texts, Python standard library
docstrings and source files) and generated spam (keyword stuffing, repeated phrases, bullet
lists, short lines, ellipses, hashtags, contractions, emoticons, URLs). Each filter runs on every
page in both implementations, and the decisions must agree on >= 99.5% of pages (they agree on
all of them today, so the test asks for that too; see the message for any disagreement).
"""

from __future__ import annotations

import glob
import gzip
import os
import sysconfig

import numpy as np
import pytest

import tokenport as tp
from tokenport.corpus import Document
from tokenport.corpus.steps.quality import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from tokenport.demo.corpus import docstrings, read_source, stdlib_sources

pytest.importorskip("spacy")
filters = pytest.importorskip("datatrove.pipeline.filters")
from datatrove.data import Document as DTDocument  # noqa: E402
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION, split_into_words  # noqa: E402

from tokenport.corpus.steps import datatrove_compat as dt  # noqa: E402
from tokenport.corpus.steps.registry import build_steps  # noqa: E402
from tokenport.corpus.steps.spacy_words import english_words  # noqa: E402

MAX_CHARS = 20_000  # datatrove splits words at ~1 ms per 5 kB; keep the test quick


def man_pages(count: int) -> list[str]:
    paths = sorted(glob.glob("/usr/share/man/man[1-8]/*.gz"))
    pages = []
    for path in paths[:: max(1, len(paths) // count)][:count]:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            pages.append(f.read(MAX_CHARS))
    return pages


def license_texts(count: int) -> list[str]:
    site = sysconfig.get_paths()["purelib"]
    paths = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob(os.path.join(site, "*", "LICENSE*")))
    texts = []
    for path in paths[:count]:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read(MAX_CHARS))
    return texts


def stdlib_pages(count: int, rng: np.random.Generator) -> list[str]:
    """Half pages of consecutive docstrings of one module, half slices of source code."""
    paths = stdlib_sources()
    pages = []
    for path in rng.choice(paths, size=count, replace=False):
        source = read_source(str(path))
        if not source:
            continue
        if len(pages) % 2:
            lines = source.splitlines()
            start = int(rng.integers(0, max(1, len(lines) - 60)))
            pages.append("\n".join(lines[start : start + int(rng.integers(5, 80))]))
        else:
            pages.append("\n\n".join(list(docstrings(source))[: int(rng.integers(1, 8))])[:MAX_CHARS])
    return [p for p in pages if p]


SPAM_WORDS = ("cheap", "best", "buy", "free", "casino", "loans", "viagra", "deal", "online", "now", "click", "win")
SPAM_BITS = (
    "don't",
    "can't",
    "it's",
    "e.g.",
    "U.S.",
    "10km",
    "$5.99",
    "50%",
    ":)",
    ":-(",
    "<3",
    "http://spam.example.com/x?a=1",
    "www.example.org",
    "#deal",
    "@user",
    "...",
    "…",
    "—",
    "(see below)",
    '"quoted"',
    "'single'",
    "A-B-C",
    "3-4",
    "1,000",
    "co-op",
    "--",
    "•",
    "-",
    "→",
    "e-mail",
    "o.O",
    "¯\\_(ツ)_/¯",
    "10a.m.",
    "U.K.",
    "Mr.",
)


def spam_pages(count: int, rng: np.random.Generator) -> list[str]:
    """Generated junk of the kinds the filters exist to drop, and some that passes."""
    prose = [d for path in stdlib_sources()[:40] for d in docstrings(read_source(path) or "")]
    pages = []
    for i in range(count):
        kind = i % 6
        words = [str(rng.choice(SPAM_WORDS + SPAM_BITS)) for _ in range(int(rng.integers(5, 300)))]
        if kind == 0:  # keyword stuffing in sentences
            text = " ".join(words)
            text = ". ".join(text[j : j + 80] for j in range(0, len(text), 80)) + "."
        elif kind == 1:  # a repeated phrase or line
            line = " ".join(words[:8])
            text = "\n".join([line] * int(rng.integers(2, 30)) + [str(rng.choice(prose))])
        elif kind == 2:  # bullet lists
            bullet = str(rng.choice(["•", "-", "*", "◦", "1."]))
            text = "\n".join(f"{bullet} {' '.join(words[j : j + 6])}" for j in range(0, len(words), 6))
        elif kind == 3:  # short lines, blank lines between
            text = "\n\n".join(" ".join(words[j : j + 3]) for j in range(0, len(words), 3))
        elif kind == 4:  # real prose with junk mixed in
            text = str(rng.choice(prose)) + "\n" + " ".join(words) + "\n\n" + str(rng.choice(prose))
        else:  # ellipses, hashtags and lorem ipsum around prose
            tail = str(rng.choice(["...", "…", " #win", " lorem ipsum", " {x}", " Javascript is required."]))
            text = "\n".join(f"{' '.join(words[j : j + 9])}{tail}" for j in range(0, len(words), 9))
            text += "\n" + str(rng.choice(prose))
        pages.append(text)
    return pages + ["", "\n\n", "   ", "word", "#", "..."]


def other_scripts_and_odd_whitespace(rng: np.random.Generator) -> list[str]:
    """The standard library's CJK test texts, and prose whose words are joined by unusual
    whitespace (tabs, CR LF, no-break and ideographic spaces, form feeds, line separators)."""
    folder = os.path.join(sysconfig.get_paths()["stdlib"], "test", "cjkencodings")
    texts = [open(path, encoding="utf-8").read() for path in sorted(glob.glob(os.path.join(folder, "*-utf8.txt")))]
    prose = [d for path in stdlib_sources()[40:80] for d in docstrings(read_source(path) or "")]
    gaps = [" ", "  ", "\t", "\r\n", "\xa0", "\u3000", "\x0c", "\u2028", " \t ", "\n\n", "\u200b"]
    for _ in range(60):
        words = " ".join(str(rng.choice(prose)) for _ in range(3)).split()
        texts.append("".join(w + str(rng.choice(gaps)) for w in words))
    return texts


@pytest.fixture(scope="module")
def pages() -> list[str]:
    rng = np.random.default_rng(12)
    return (
        man_pages(250)
        + license_texts(120)
        + stdlib_pages(300, rng)
        + spam_pages(300, rng)
        + other_scripts_and_odd_whitespace(rng)
    )


def datatrove_decisions(step, texts: list[str]) -> list[bool]:
    out = []
    for i, text in enumerate(texts):
        result = step.filter(DTDocument(text=text, id=str(i)))
        out.append(result if isinstance(result, bool) else bool(result[0]))
    return out


CASES = {
    "gopher_quality": (GopherQuality, filters.GopherQualityFilter),
    "gopher_repetition": (GopherRepetition, filters.GopherRepetitionFilter),
    "c4": (C4Quality, filters.C4QualityFilter),
    "fineweb": (FineWebQuality, filters.FineWebQualityFilter),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compat_datatrove_takes_datatrove_decisions(name, pages):
    ours_class, theirs_class = CASES[name]
    ours = ours_class(compat="datatrove")
    mine = [(ours.clean(t)[1] if name == "c4" else ours.reject(t)) is None for t in pages]
    theirs = datatrove_decisions(theirs_class(), pages)
    differ = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert len(pages) >= 900 and len(set(mine)) == 2  # both outcomes occur on this corpus
    assert len(differ) / len(pages) <= 0.005
    assert not differ, f"{name}: {len(differ)} of {len(pages)} differ, e.g. {pages[differ[0]][:300]!r}"


def test_c4_compat_keeps_the_same_lines_as_datatrove(pages):
    ours = C4Quality(compat="datatrove")
    for i, text in enumerate(pages):
        document = DTDocument(text=text, id=str(i))
        if filters.C4QualityFilter().filter(document) is True:
            assert ours.clean(text)[0] == document.text


def test_words_are_spacys(pages):
    words = english_words()
    for text in pages:
        assert words(text) == split_into_words(text)


def test_sentences_are_those_of_spacys_sentencizer(pages):
    from datatrove.utils.text import split_into_sentences

    lines = [line.strip() for text in pages for line in text.splitlines() if len(line.split()) >= 3]
    assert len(lines) > 5000
    for line in lines[::3]:
        assert english_words().sentences(line) == len(split_into_sentences(line)), line


def test_the_step_runs_from_a_spec_and_refuses_unknown_modes(tmp_path):
    [(_, step)] = build_steps([{"step": "gopher_repetition", "compat": "datatrove"}], str(tmp_path), "unit")
    assert list(step([Document("", "empty")])) == []  # datatrove drops an empty page; the default keeps it
    assert list(GopherRepetition()([Document("", "empty")]))
    with pytest.raises(tp.ConfigError, match="compat='spacy' is not a mode: pass one of 'tokenport', 'datatrove'"):
        FineWebQuality(compat="spacy")


def test_the_copied_punctuation_tables_are_datatroves():
    assert dt.PUNCTUATION_SET == PUNCTUATION_SET and dt.TERMINAL_PUNCTUATION == TERMINAL_PUNCTUATION


def test_the_suffix_search_started_near_the_end_finds_what_spacys_finds():
    import spacy

    search = spacy.blank("en").tokenizer.suffix_search
    ours = english_words()._suffixes
    rng = np.random.default_rng(3)
    pool = list("aZ9.…,'\"’)-:km%$€°F#!?") + ["km²", "US$", "...", "'s"]
    strings = ["word......", "10km", "U.S.A.", "abc….", "5°F.", "x" * 30 + "."]
    strings += ["".join(rng.choice(pool, size=int(rng.integers(1, 12)))) for _ in range(3000)]
    for s in strings:
        match = search(s)
        assert ours.length(s) == (match.end() - match.start() if match else 0), s

"""Gopher quality and repetition filters: hand-made documents that fail exactly one rule each."""

from __future__ import annotations

import pytest

import tokenport as tp
from tokenport.corpus import Document
from tokenport.corpus.steps.quality import C4Quality, FineWebQuality, GopherQuality, GopherRepetition, split_words

# A plain English paragraph: 60+ words, ordinary lengths, stop words, no repetition to speak of.
GOOD = (
    "The committee met on Tuesday to review the budget for the coming year. Members agreed that the "
    "library should receive more funding, and they asked the treasurer to prepare a detailed proposal "
    "with estimates for new books, longer opening hours and repairs to the roof of the old building. "
    "A vote on the proposal is expected next month, after the public has had a chance to comment."
)


def test_the_good_document_passes_both():
    assert len([w for w in split_words(GOOD) if len(w) > 1 or w.isalnum()]) >= 50
    assert GopherQuality().reject(GOOD) is None
    assert GopherRepetition().reject(GOOD) is None


@pytest.mark.parametrize(
    "text, reason",
    [
        ("The cat sat on the mat with the dog.", "too_few_words"),
        (" ".join(["word"] * 100_001), "too_many_words"),
        ("a an to of be it " * 12 + "the and", "short_words"),
        ("internationalization characteristically telecommunications " * 20 + "the and", "long_words"),
        (GOOD + " #tag" * 8, "too_many_hashes"),
        (GOOD + " wait..." * 8, "too_many_ellipses"),
        ("\n".join(f"• item number {i} of the list with the details" for i in range(10)) + "\n" + GOOD, "bullet_lines"),
        (
            "\n".join(f"and then the story went on with {i} more…" for i in range(6)) + "\n" + GOOD.replace(".", ""),
            "ellipsis_lines",
        ),
        (GOOD + " " + " ".join(str(n) for n in range(40)), "few_alphabetic_words"),
        (
            GOOD.replace(" the ", " a ")
            .replace("The ", "A ")
            .replace(" to ", " for ")
            .replace(" and ", " plus ")
            .replace(" with ", " plus ")
            .replace(" that ", " so "),
            "few_stop_words",
        ),
    ],
)
def test_each_quality_rule(text, reason):
    assert GopherQuality().reject(text) == reason


def test_rules_can_be_tuned_or_turned_off():
    short = "The cat sat on the mat with the dog."
    assert GopherQuality(min_words=5).reject(short) is None
    assert GopherQuality(min_words=None).reject(short) is None
    assert GopherQuality(stop_words=["committee"], min_stop_words=1).reject(GOOD) is None
    with pytest.raises(tp.ConfigError, match="min_words=-1"):
        GopherQuality(min_words=-1)


def test_cjk_text_is_split_into_characters():
    assert split_words("我们今天去北京。") == ["我", "们", "今", "天", "去", "北", "京", "。"]
    chinese = "这是一个关于图书馆预算的讨论，委员会同意增加经费用于购买新书和修缮屋顶。" * 3
    assert GopherQuality(min_stop_words=None).reject(chinese) == "short_words"  # one character per word


REPEATED_LINE = "Click here to subscribe to our newsletter today"


@pytest.mark.parametrize(
    "text, reason",
    [
        (
            "\n\n".join(
                [GOOD, "Same paragraph again here.", "Same paragraph again here.", "Same paragraph again here."]
            ),
            "duplicate_paragraphs",
        ),
        ("\n\n".join([GOOD, GOOD, "One more.", "And another.", "A third."]), "duplicate_paragraph_chars"),
        ("\n".join([GOOD] + [REPEATED_LINE] * 8 + [f"line {i} is unique" for i in range(8)]), "duplicate_lines"),
        ("\n".join([GOOD, GOOD[:200], GOOD[:200], "One more.", "And another."]), "duplicate_line_chars"),
        (GOOD + " " + "new york " * 40, "top_2_gram"),
    ],
)
def test_each_repetition_rule(text, reason):
    assert GopherRepetition().reject(text) == reason


def test_top_4_gram_fires_alone_when_its_3_grams_stay_under_their_limit():
    # "abcdefghij b c klmnopqrst" five times among unique fillers: the 4-gram holds 22 characters per
    # occurrence, each of its 3-grams 12, so 110 / W > 0.16 while 60 / W <= 0.18 for W in [334, 687).
    block = "abcdefghij b c klmnopqrst"
    parts = []
    for k in range(5):
        parts += [block] + [f"filler{k}{j:02d}x" for j in range(8)]
    text = " ".join(parts)
    words = [w for w in split_words(text)]
    total = sum(len(w) for w in words)
    assert 334 <= total < 687
    assert GopherRepetition().reject(text) == "top_4_gram"


def test_duplicated_ngram_rule_counts_words_covered_by_repeated_ngrams():
    phrase = "the same seven words appear right here"
    text = " ".join([*(f"first{i}" for i in range(60)), phrase, *(f"second{i}" for i in range(60)), phrase])
    words = split_words(text)
    fraction = 2 * sum(len(w) for w in phrase.split()) / sum(len(w) for w in words)  # both occurrences count
    rule = dict(max_top_ngram_char_fraction=(), max_duplicate_line_char_fraction=None)
    assert GopherRepetition(**rule, max_duplicate_ngram_char_fraction=((7, fraction * 0.99),)).reject(text) == (
        "duplicate_7_grams"
    )
    assert GopherRepetition(**rule, max_duplicate_ngram_char_fraction=((7, fraction * 1.01),)).reject(text) is None
    assert (
        GopherRepetition(**rule, max_duplicate_ngram_char_fraction=((8, 0.0),)).reject(text) is None
    )  # no 8-gram repeats


def test_the_steps_count_removals_by_reason():
    quality = GopherQuality()
    kept = list(quality([Document(GOOD, "a"), Document("too short", "b"), Document(GOOD + " #x" * 9, "c")]))
    assert [d.id for d in kept] == ["a"]
    assert quality.counts() == {"removed:too_few_words": 1, "removed:too_many_hashes": 1}


# -- C4 ---------------------------------------------------------------------------------------------

PAGE = """Home
Welcome to our site. We write about gardens. Our blog has many posts. Roses need sun. Water them daily.
This site uses cookies to improve your experience.
Enable JavaScript to view the comments below, please.
Read more...
ok.
Tomatoes grow fast in summer [1]. They like warm soil."""


def test_c4_keeps_good_lines_and_counts_each_dropped_line():
    c4 = C4Quality()
    (kept,) = list(c4([Document(PAGE, "p")]))
    assert kept.text == (
        "Welcome to our site. We write about gardens. Our blog has many posts. Roses need sun. "
        "Water them daily.\nTomatoes grow fast in summer . They like warm soil."
    )
    assert c4.counts() == {
        "lines_removed:few_words": 1,  # "ok."
        "lines_removed:javascript": 1,
        "lines_removed:no_terminal_punctuation": 2,  # "Home", "Read more..."
        "lines_removed:policy": 1,
    }


@pytest.mark.parametrize(
    "text, reason",
    [
        ("One sentence here. Two sentences here.\nThree short ones. Four now.", "few_sentences"),
        (PAGE.replace("Roses need sun.", "Lorem ipsum dolor sit amet."), "lorem_ipsum"),
        (PAGE.replace("Roses need sun.", "Use {braces} here."), "curly_bracket"),
    ],
)
def test_c4_page_rules(text, reason):
    c4 = C4Quality()
    assert list(c4([Document(text, "p")])) == [] and c4.removed == {reason: 1}


def test_c4_rules_turn_off():
    assert C4Quality(min_sentences=None).clean("Just one line here.") == ("Just one line here.", None)
    assert C4Quality(require_terminal_punctuation=False, min_words_per_line=None, min_sentences=1).clean("Home") == (
        "Home",
        None,
    )


# -- FineWeb ----------------------------------------------------------------------------------------

PROSE = "\n".join(f"This is line number {i} of a long article about the history of the town." for i in range(10))


@pytest.mark.parametrize(
    "text, reason",
    [
        ("\n".join(f"Menu entry {i} without a full stop at the end of it" for i in range(10)), "few_punctuated_lines"),
        ("\n".join([f"Tiny {i}." for i in range(25)] + [PROSE]), "short_lines"),  # 25 of 35 lines short
        (PROSE + "\nThis is line number 3 of a long article about the history of the town.", "duplicate_line_chars"),
        (PROSE.replace("\n", "\n" * 6), "list_like"),  # 54 newlines for 160 tokens
    ],
)
def test_fineweb_rules(text, reason):
    assert FineWebQuality(**({"max_short_lines_ratio": None} if reason == "list_like" else {})).reject(text) == reason


def test_fineweb_passes_prose():
    assert FineWebQuality().reject(PROSE) is None


def test_fineweb_sets_blank_lines_aside():
    # Paragraphs apart by blank lines: counted as lines, the 12 blank ones made the page "short_lines".
    paragraphs = "\n\n\n\n".join(
        f"Paragraph {i} tells how the town built its library with the money." for i in range(5)
    )
    assert FineWebQuality().reject(paragraphs) is None
    assert FineWebQuality().reject(paragraphs.replace("money.", "money")) == "few_punctuated_lines"
    assert FineWebQuality().reject(" \n\n\t\n") == "empty"


def test_stop_words_are_counted_once_each():
    # "at least two of the following English words": one of them many times is not enough.
    only_the = (
        GOOD.replace(" to ", " for ")
        .replace(" and ", " plus ")
        .replace(" with ", " plus ")
        .replace(" that ", " so ")
        .replace(" of ", " in ")
    )
    assert only_the.lower().count("the ") > 5
    assert GopherQuality().reject(only_the) == "few_stop_words"
    assert GopherQuality().reject(only_the + " And so on.") is None

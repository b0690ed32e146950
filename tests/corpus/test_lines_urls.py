"""Line-wise corrections and URL filtering: hand-checked lines and URLs."""

from __future__ import annotations

import pytest

import tokenport as tp
from tokenport.corpus import Document
from tokenport.corpus.steps.lines import LineCorrections
from tokenport.corpus.steps.urls import URLFilter

ARTICLE = "\n".join(
    f"Paragraph {i} of the article explains how the town council planned the new bridge over the river."
    for i in range(12)
)


@pytest.mark.parametrize(
    "line, kind",
    [
        ("12 likes", "counter"),
        ("  3,402 Comments ", "counter"),
        ("1.2k views", "counter"),
        ("(7 replies)", "counter"),
        ("Home", "navigation"),
        ("Log in | Sign up", "navigation"),
        ("Read more »", "navigation"),
        ("Back to top", "navigation"),
        ("We use cookies to improve your experience.", "cookie_notice"),
        ("Accept all cookies", "cookie_notice"),
        ("The council met at home on Tuesday.", None),
        ("12 people liked the proposal.", None),
        ("Share your thoughts about the new bridge with the council.", None),
        ("", None),
    ],
)
def test_line_kinds(line, kind):
    assert LineCorrections().kind(line) == kind


def test_boilerplate_lines_go_and_heavy_losses_drop_the_page():
    step = LineCorrections()
    page = "Home\n" + ARTICLE + "\n12 likes\nWe use cookies to improve your experience."
    broken = "Home\nMenu\nLog in\n" + "A short note here.\n" + "\n".join(["Share"] * 5)
    kept = list(step([Document(page, "a"), Document(broken, "b"), Document(ARTICLE, "c")]))
    assert [d.id for d in kept] == ["a", "c"]
    assert kept[0].text == ARTICLE and kept[1].text == ARTICLE
    assert step.counts() == {
        "removed:too_many_lines_removed": 1,
        "lines_removed:cookie_notice": 1,
        "lines_removed:counter": 1,
        "lines_removed:navigation": 1,
    }
    custom = LineCorrections(patterns=[r"^Posted by \w+$"], max_removed_fraction=None)
    assert custom.kind("Posted by admin") == "pattern"
    with pytest.raises(tp.ConfigError, match="not a valid regular expression"):
        LineCorrections(patterns=["(unclosed"])


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://example-spam.com/page", "blocked_domain"),
        ("http://www.example-spam.com/a?b=c", "blocked_domain"),
        ("https://not-example-spam.com/", None),
        ("https://news.example.org/casino-royale-review", "banned_url_word"),
        ("https://news.example.org/occasional-notes", None),  # "casino" inside a word is not the word
        ("example-spam.com/no-scheme", "blocked_domain"),
    ],
)
def test_default_url_rules(url, reason):
    assert URLFilter().blocked(url) == reason


def test_user_lists_from_files_and_documents_without_urls(tmp_path):
    domains = tmp_path / "domains.txt"
    domains.write_text("# blocked\nbad.example  # trailing comment\n\n")
    step = URLFilter(blocked_domains_file=str(domains), blocked_substrings=["/ads/"])
    docs = [
        Document("a", "1", {"url": "https://sub.bad.example/x"}),
        Document("b", "2", {"url": "https://ok.example/ads/1"}),
        Document("c", "3", {"url": "https://ok.example/story"}),
        Document("d", "4", {}),
    ]
    assert [d.id for d in step(docs)] == ["3", "4"]
    assert step.counts() == {"removed:blocked_domain": 1, "removed:blocked_substring": 1, "kept_without_url": 1}
    assert URLFilter(blocked_domains=["x.example"]).blocked("https://casino.example/") is None  # defaults replaced
    with pytest.raises(tp.ConfigError, match="cannot read the blocked_domains list"):
        URLFilter(blocked_domains_file=str(tmp_path / "missing.txt"))

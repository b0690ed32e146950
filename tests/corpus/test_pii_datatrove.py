"""``pii`` with ``compat="datatrove"``: the same text as datatrove 0.10's ``PIIFormatter`` given the same tags."""

from __future__ import annotations

import pytest

from tests._support.pii_sentences import MEASURED_KINDS, negatives, positives
from tokenport.corpus import Document
from tokenport.corpus.steps.pii import DATATROVE_PII_KINDS, PIIScrubber, ScrubPII
from tokenport.errors import ConfigError

formatters = pytest.importorskip("datatrove.pipeline.formatters")

TAGS = {"email": "<EMAIL>", "ipv4": "<IP_ADDRESS>"}


def datatrove_formatter():
    return formatters.PIIFormatter(email_replacement=TAGS["email"], ip_replacement=TAGS["ipv4"])


def sentences() -> list[str]:
    texts = [case.text for kind in MEASURED_KINDS for case in positives(kind, 3, seed=7)]
    texts += [case.text for case in negatives(200, seed=7)]
    texts += [  # private, loopback and reserved addresses stay; public ones go; an address in brackets is an e-mail's
        "Hosts 10.0.0.1, 127.0.0.1, 192.168.1.20, 8.8.8.8 and 300.1.2.3 answered; so did 1.2.3.4.5.",
        "Write to first.last+tag@mail.example.co.uk or admin@[192.168.0.1] or a@b, not to x@y.z.",
        "Both 9.9.9.9 and jane.doe@example.org appear twice: 9.9.9.9, jane.doe@example.org.",
    ]
    return texts


def test_compat_datatrove_gives_datatrove_text_on_every_sentence():
    ours, theirs = PIIScrubber(compat="datatrove"), datatrove_formatter()
    texts = sentences()
    pairs = [(text, ours.scrub(text)[0], theirs.format(text)) for text in texts]
    differ = [pair for pair in pairs if pair[1] != pair[2]]
    assert not differ, differ[:3]
    assert sum(ours.scrub(text)[0] != text for text in texts) > 20  # the sentences hold things it scrubs


def test_compat_datatrove_counts_what_it_replaced():
    text, found = PIIScrubber(compat="datatrove").scrub("a@example.com 8.8.8.8 10.0.0.1 b@example.com")
    assert text == "<EMAIL> <IP_ADDRESS> 10.0.0.1 <EMAIL>" and found == {"email": 2, "ipv4": 1}


def test_compat_datatrove_step_marks_metadata_and_keeps_every_document():
    step = ScrubPII(compat="datatrove")
    documents = [Document("mail me: a@example.com", "0"), Document("nothing here", "1")]
    out = list(step(documents))
    assert [d.text for d in out] == ["mail me: <EMAIL>", "nothing here"]
    assert out[0].metadata["pii"] == {"email": 1} and out[1] is documents[1]
    assert step.counts() == {"replaced:email": 1}


def test_compat_datatrove_kinds_and_refusals():
    assert PIIScrubber(compat="datatrove").kinds == DATATROVE_PII_KINDS
    assert PIIScrubber(kinds=("ipv4",), compat="datatrove").kinds == ("ipv4",)
    with pytest.raises(ConfigError, match="'phone' is unknown with compat='datatrove'"):
        PIIScrubber(kinds=("phone",), compat="datatrove")
    with pytest.raises(ConfigError, match="compat='spacy' is not a mode"):
        ScrubPII(compat="spacy")

"""PII scrubbing: positive and negative cases per kind, checks that reject look-alikes, the step."""

from __future__ import annotations

import pytest

import tokenport as tp
from tokenport.prepare import Document
from tokenport.prepare.pii import PII_KINDS, PIIScrubber, luhn_valid

SCRUB = PIIScrubber()

FOUND = {
    "email": ["john.doe+spam@example.co.uk", "a_b@sub.example.org", "Zhang.Wei@company.cn"],
    "iban": ["GB82 WEST 1234 5698 7654 32", "DE89370400440532013000", "FR14 2004 1010 0505 0001 3M02 606"],
    "cn_id": ["11010519491231002X", "110101199003071233"],
    "credit_card": ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005", "6011111111111117"],
    "ipv6": ["2001:db8::8a2e:370:7334", "fe80::1ff:fe23:4567:890a", "2001:0db8:0000:0000:0000:ff00:0042:8329"],
    "ipv4": ["192.168.1.20", "8.8.8.8", "10.0.0.1"],
    "phone": ["+1 (555) 123-4567", "555-123-4567", "+44 20 7946 0958", "13812345678", "(212) 555-0100",
              "+86 138 1234 5678"],
}

KEPT = {
    "iban": ["GB82 WEST 1234 5698 7654 33", "XX00 0000 0000 0000"],  # fails mod-97
    "cn_id": ["110105194912310021", "110105194913310028"],  # wrong check digit; month 13
    "credit_card": ["4111 1111 1111 1112", "1234567890123456", "0000 0000 0000 0000"],  # Luhn fails; all zeros
    "ipv6": ["12:30:45", "std::vector", "a::b", "::1"],  # a time; C++; no digit; loopback
    "ipv4": ["999.1.1.1", "1.2.3.4.5", "v1.2.3"],  # not an address; a version number
    "phone": ["2024-01-15", "3.14159265", "order 123456", "ISBN 978-3-16-148410-0"],
    "email": ["user@localhost", "@handle", "a@b"],
}


@pytest.mark.parametrize("kind, value", [(k, v) for k, values in FOUND.items() for v in values])
def test_each_kind_is_found_and_replaced(kind, value):
    text, found = SCRUB.scrub(f"before {value} after")
    assert found == {kind: 1}, (value, found, text)
    assert text == f"before {PIIScrubber().scrub(value)[0]} after" and value not in text


@pytest.mark.parametrize("kind, value", [(k, v) for k, values in KEPT.items() for v in values])
def test_look_alikes_stay(kind, value):
    text = f"before {value} after"
    assert SCRUB.scrub(text) == (text, {}), kind


def test_luhn():
    assert luhn_valid("4111111111111111") and luhn_valid("79927398713")
    assert not luhn_valid("4111111111111112") and not luhn_valid("79927398710")


def test_several_kinds_in_one_text_and_chinese_context():
    text = "联系人：张伟，电话13812345678，邮箱 zhang.wei@example.cn，身份证11010519491231002X。服务器 10.1.2.3"
    scrubbed, found = SCRUB.scrub(text)
    assert found == {"email": 1, "cn_id": 1, "ipv4": 1, "phone": 1}
    assert scrubbed == "联系人：张伟，电话<PHONE_NUMBER>，邮箱 <EMAIL>，身份证<ID_NUMBER>。服务器 <IP_ADDRESS>"


def test_the_step_counts_marks_metadata_and_keeps_every_document():
    scrubber = PIIScrubber(kinds=("email", "phone"), replacements={"email": "[mail]"})
    documents = [Document("write to a@example.com or call 555-123-4567", "f:1"), Document("nothing here", "f:2"),
                 Document("card 4111 1111 1111 1111", "f:3", {"lang": "en"})]
    out = list(scrubber(documents))
    assert [d.id for d in out] == ["f:1", "f:2", "f:3"]
    assert out[0].text == "write to [mail] or call <PHONE_NUMBER>" and out[0].metadata == {"pii": {"email": 1, "phone": 1}}
    assert out[1] is documents[1]
    assert out[2].text == "card 4111 1111 1111 1111"  # card numbers were not asked for
    assert scrubber.counts == {"email": 1, "phone": 1}


def test_unknown_kinds_are_refused():
    with pytest.raises(tp.ConfigError, match="PII kind 'ssn' is unknown"):
        PIIScrubber(kinds=("email", "ssn"))
    with pytest.raises(tp.ConfigError, match="PII kind 'passport' is unknown"):
        PIIScrubber(replacements={"passport": "x"})
    assert PIIScrubber(kinds=("phone", "email")).kinds == ("email", "phone")  # scanning order is fixed
    assert set(PII_KINDS) == set(FOUND)

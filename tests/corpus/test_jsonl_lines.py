"""A jsonl line is parsed by msgspec where it can, and always to what ``json.loads`` gives, or refused as it refuses.

Also: a chat run without cleaning steps leaves its conversations' text empty (nothing reads it), and a run
with steps keys them as before.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenport.corpus.inputs.documents import Document
from tokenport.corpus.inputs.readers import _loads
from tokenport.corpus.run.chat import canonical, conversations
from tokenport.corpus.run.stats import Problems, UnitStats

EDGES = [
    b'{"a":1,"a":2}\n',
    b'{"a":123456789012345678901234567890}',
    b'{"a":"\\ud800"}',  # a lone surrogate: json keeps it, msgspec refuses it
    b'{"a":1e400}',  # json: inf
    b'{"a":NaN, "b": -Infinity}',
    b'\xef\xbb\xbf{"a":1}',  # a UTF-8 BOM
    '{"a": "é"}'.encode("utf-16"),  # json.loads detects UTF-16
    b'{"a":-0.0, "b": 1E5, "c": 1.5e-400}',
    b'  {"a": [1, 2]}  \r\n',
    b'{"\xc3\xa9":"\xe2\x82\xac", "e": "\\/\\b\\u00e9\\ud83d\\ude00"}',
    b"[" * 5000 + b"]" * 5000,  # deeper than either parser goes
]
BAD = [b'{"a":"\xff"}', b'{"a":"\x01"}', b'{"a":1}{"b":2}', b"{not json", b'{"a":' + b"9" * 5000 + b"}"]


def _outcome(fn, raw: bytes):  # noqa: ANN001, ANN202
    try:
        return ("value", repr(fn(raw)))
    except (ValueError, RecursionError) as error:
        return ("error", type(error).__name__, str(error))


@pytest.mark.parametrize("raw", EDGES + BAD)
def test_edge_lines_parse_or_fail_as_json_loads(raw: bytes) -> None:
    assert _outcome(_loads, raw) == _outcome(json.loads, raw)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=12,
    ),
    st.booleans(),
)
def test_any_json_value_parses_as_json_loads(value: object, ascii_only: bool) -> None:
    raw = (json.dumps(value, ensure_ascii=ascii_only) + "\n").encode("utf-8", "surrogatepass")
    got, want = _loads(raw), json.loads(raw)
    assert repr(got) == repr(want) or (isinstance(want, float) and math.isnan(want))


def test_conversations_are_keyed_only_when_asked() -> None:
    record = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    problems = Problems("stop", UnitStats())
    keyed = list(conversations([Document("", "f:1", record)], None, problems))
    bare = list(conversations([Document("", "f:1", record)], None, problems, keyed=False))
    assert keyed[0].text == canonical(record["messages"], None, None) and bare[0].text == ""
    assert keyed[0].metadata == bare[0].metadata and keyed[0].id == bare[0].id == "f:1"

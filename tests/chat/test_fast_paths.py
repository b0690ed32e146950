"""The per-message fast paths of the chat path give what the checked paths give, refusals included.

`formats._messages`, `masks.check_messages` and `template.prepare_messages` take a shortcut for a plain
{"role", "content": str} message; every message (plain or not) must come out exactly as the general
code makes it, key order included, and every refusal must stay the same InputDataError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenport.chat.formats import ROLES, _message, to_conversation
from tokenport.chat.masks import check_messages
from tokenport.chat.template import REASONING_FIELDS, _plain, prepare_messages
from tokenport.errors import InputDataError

_VALUES = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.integers(-3, 3),
    st.sampled_from(["user", "assistant", "system", "tool", "robot", "thinking"]),
    st.lists(st.integers(0, 2), max_size=2),
)
_KEYS = st.sampled_from(["role", "content", "name", "tool_call_id", "reasoning_content", "thinking", "reasoning", "x"])
_MESSAGES = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from([*ROLES, "robot"]), st.text(max_size=6)),
    st.dictionaries(_KEYS, _VALUES, max_size=4),
    st.builds(lambda c, r: {"content": c, "role": r}, st.text(max_size=3), st.sampled_from(ROLES)),  # other key order
)


def _outcome(fn: Any, *args: Any) -> Any:
    """What a call gives: its value with each dict's key order, or its TokenportError's type and message."""
    try:
        value = fn(*args)
    except InputDataError as error:
        return ("refused", str(error))
    return ("value", repr(value))


def _reference_prepare(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """prepare_messages as written before its shortcut (kept here as the model)."""
    chat = []
    for i, message in enumerate(messages):
        plain = _plain({k: v for k, v in message.items() if v is not None}, f"messages[{i}]")
        reasoning = next((plain[key] for key in REASONING_FIELDS if plain.get(key) is not None), None)
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        chat.append(plain)
    return chat


@settings(max_examples=400, deadline=None)
@given(st.lists(_MESSAGES, min_size=1, max_size=4))
def test_messages_come_out_as_the_checked_path_makes_them(messages: list[dict[str, Any]]) -> None:
    want = _outcome(lambda: [_message(m, f"r: messages[{i}]") for i, m in enumerate(messages)])
    got = _outcome(lambda: to_conversation({"messages": messages}, "messages", "r")[0])
    if want[0] == "value" and got[0] == "refused":  # to_conversation also wants an assistant turn
        assert "no assistant turn" in got[1]
    else:
        assert got == want


@settings(max_examples=400, deadline=None)
@given(st.lists(_MESSAGES, min_size=1, max_size=4))
def test_prepare_messages_matches_the_general_copy(messages: list[dict[str, Any]]) -> None:
    assert _outcome(prepare_messages, messages) == _outcome(_reference_prepare, messages)


def test_check_messages_shortcut_refuses_what_it_refused() -> None:
    check_messages([{"role": "user", "content": "a"}, {"content": "b", "role": "assistant"}])
    with pytest.raises(InputDataError, match=r"messages\[0\].role='robot' is not a chat role"):
        check_messages([{"role": "robot", "content": "a"}])
    with pytest.raises(InputDataError, match=r"messages\[1\].role=None is not a chat role"):
        check_messages([{"role": "user", "content": "a"}, {"content": "b", "x": 1}])
    with pytest.raises(InputDataError, match=r"messages\[0\].content is int"):
        check_messages([{"role": "user", "content": 3}])

"""Conversation records in the four shapes -> checked OpenAI-style messages, against TRL's conversions."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.data_utils import is_conversational, maybe_convert_to_chatml

from tokenport.chat.formats import FORMATS, ROLES, detect_format, to_messages
from tokenport.errors import InputDataError

SHAREGPT = {
    "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "What does len do?"},
        {"from": "gpt", "value": "Return the number of items in a container."},
        {"from": "user", "value": "And abs? ünïcödé"},
        {"from": "assistant", "value": "Return the absolute value."},
    ]
}


def test_detect_format_names_each_shape() -> None:
    assert detect_format({"messages": []}) == "messages"
    assert detect_format(SHAREGPT) == "sharegpt"
    assert detect_format({"prompt": "a", "completion": "b"}) == "prompt_completion"
    assert detect_format({"instruction": "a", "input": "", "output": "b"}) == "alpaca"
    assert set(FORMATS) == {"messages", "sharegpt", "prompt_completion", "alpaca"}
    with pytest.raises(InputDataError, match=r"data.jsonl:3: no conversation format fits the keys \['text'\]"):
        detect_format({"text": "x"}, where="data.jsonl:3")
    with pytest.raises(InputDataError, match="several formats"):
        detect_format({"messages": [], "conversations": []})
    with pytest.raises(InputDataError, match="must be a JSON object"):
        detect_format(["messages"])  # type: ignore[arg-type]


def test_sharegpt_matches_trl_chatml_conversion() -> None:
    ours = to_messages(SHAREGPT)
    theirs = maybe_convert_to_chatml(copy.deepcopy(SHAREGPT))["messages"]
    # TRL renames the keys only and keeps ShareGPT's speakers ("human", "gpt"), which chat
    # templates do not know; tokenport also maps the speakers to roles
    roles = {"human": "user", "gpt": "assistant"}
    assert ours == [{**turn, "role": roles.get(turn["role"], turn["role"])} for turn in theirs]
    assert is_conversational({"messages": ours})
    # role/content turns under `conversations` are accepted as TRL accepts them
    chatml = {"conversations": [{**turn, "role": roles.get(turn["role"], turn["role"])} for turn in theirs]}
    assert to_messages(chatml) == ours


def test_sharegpt_variants_tools_and_top_level_system() -> None:
    call = {"name": "lookup", "arguments": {"module": "os"}}
    record = {
        "system": "You can call tools.",
        "conversations": [
            {"from": "human", "value": "What is in os?"},
            {"from": "function_call", "value": json.dumps(call)},
            {"from": "observation", "value": "path, sep"},
            {"from": "chatgpt", "value": "os has path and sep."},
        ],
    }
    assert to_messages(record) == [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What is in os?"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": call}]},
        {"role": "tool", "content": "path, sep"},
        {"role": "assistant", "content": "os has path and sep."},
    ]
    with pytest.raises(InputDataError, match=r"x:1: conversations\[0\].from: 'narrator' is not one of"):
        to_messages({"conversations": [{"from": "narrator", "value": "hi"}]}, where="x:1")
    with pytest.raises(InputDataError, match=r"conversations\[1\].value: a function_call turn must hold JSON"):
        to_messages({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{"}]})


def test_messages_keep_tools_reasoning_and_drop_null_keys() -> None:
    messages = [
        {"role": "system", "content": "sys", "tool_calls": None, "name": None},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "42", "name": "f", "tool_call_id": "c1"},
        {"role": "assistant", "content": "It is 42."},
    ]
    out = to_messages({"messages": messages})
    assert out[0] == {"role": "system", "content": "sys"}
    assert out[2]["reasoning_content"] == "think" and out[2]["tool_calls"][0]["id"] == "c1"
    assert out[3] == {"role": "tool", "content": "42", "name": "f", "tool_call_id": "c1"}
    assert is_conversational({"messages": out})


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"messages": []}, r"field `messages` is empty"),
        ({"messages": "hi"}, r"field `messages` must be a list, got str"),
        ({"messages": [{"role": "user", "content": "q"}]}, "no assistant turn"),
        ({"messages": [{"role": "robot", "content": "q"}]}, r"messages\[0\].role: 'robot' is not one of"),
        ({"messages": [{"role": "user", "content": 3}]}, r"messages\[0\].content: must be a string, got int"),
        ({"messages": [{"role": "user"}]}, r"messages\[0\].content: missing"),
        ({"messages": [{"role": "user", "content": "q", "weight": 0}]}, r"unknown message field\(s\) \['weight'\]"),
        ({"messages": [{"role": "user", "content": "q", "tool_calls": [{}]}]}, "only assistant messages"),
        ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{}]}]}, r"tool_calls\[0\]: expected"),
        ({"messages": ["hello"]}, r"messages\[0\]: a message must be an object"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f"}}]}]},
            r"tool_calls\[0\].type: 'code' is not 'function'",
        ),
        ({"conversations": [{"from": ["human"], "value": "q"}]}, r"conversations\[0\].from: \['human'\] is not one of"),
    ],
)
def test_malformed_messages_name_the_field(record: dict, message: str) -> None:
    with pytest.raises(InputDataError, match="train.jsonl:7: .*" + message):
        to_messages(record, where="train.jsonl:7")


def test_prompt_completion_strings_and_message_lists() -> None:
    assert to_messages({"prompt": "The sky is", "completion": " blue."}) == [
        {"role": "user", "content": "The sky is"},
        {"role": "assistant", "content": " blue."},
    ]
    record = {
        "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "a"}],
    }
    assert is_conversational(record)
    assert to_messages(record) == record["prompt"] + record["completion"]
    with pytest.raises(InputDataError, match="both be strings or both lists"):
        to_messages({"prompt": "q", "completion": [{"role": "assistant", "content": "a"}]})
    with pytest.raises(InputDataError, match="field `completion` has no assistant turn"):
        to_messages({"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "user", "content": "a"}]})
    with pytest.raises(InputDataError, match="field `completion` is empty"):
        to_messages({"prompt": "q", "completion": ""})


def test_alpaca_with_input_system_and_history() -> None:
    record = {
        "system": "Answer in one line.",
        "instruction": "Explain this function.",
        "input": "def f(): pass",
        "output": "It does nothing.",
        "history": [["Hi", "Hello."]],
    }
    assert to_messages(record) == [
        {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Explain this function.\ndef f(): pass"},
        {"role": "assistant", "content": "It does nothing."},
    ]
    assert to_messages({"instruction": "Say hi.", "input": "", "output": "hi"})[0] == {
        "role": "user",
        "content": "Say hi.",
    }
    with pytest.raises(InputDataError, match="field `output` is empty"):
        to_messages({"instruction": "Say hi.", "output": ""})
    with pytest.raises(InputDataError, match="field `input` must be a string, got list"):
        to_messages({"instruction": "Say hi.", "input": ["x"], "output": "hi"})


def test_named_format_is_used_and_checked() -> None:
    with pytest.raises(InputDataError, match="format='chatml' is not one of"):
        to_messages(SHAREGPT, format="chatml")
    with pytest.raises(InputDataError, match="field `messages` is missing"):
        to_messages(SHAREGPT, format="messages")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    ["messages", "conversations", "prompt", "completion", "instruction", "input", "output", "system", "history"]
)
_TURN = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from([*ROLES, "human", 3]),
        "from": st.sampled_from(["human", "gpt", "function_call", "observation", "x"]) | _JSON,
        "content": st.text(max_size=4) | _JSON,
        "value": st.text(max_size=4) | _JSON,
        "tool_calls": _JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _JSON | st.lists(_TURN, max_size=4) | st.text(max_size=4), max_size=4))
def test_any_record_gives_checked_messages_or_input_data_error(record: dict) -> None:
    """Never an unexpected exception, never an unchecked message: valid output or InputDataError."""
    try:
        messages = to_messages(record, where="fuzz:1")
    except InputDataError as exc:
        assert str(exc).startswith("fuzz:1: ")
        return
    assert messages and any(m["role"] == "assistant" for m in messages)
    for message in messages:
        assert message["role"] in ROLES
        assert message["content"] is None or isinstance(message["content"], str)
        assert message["content"] is not None or message.get("tool_calls")

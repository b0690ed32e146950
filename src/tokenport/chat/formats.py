"""Conversation records in the common dataset shapes, turned into OpenAI-style messages.

One record (a JSON object: a jsonl line, a parquet row) is OpenAI `messages`, ShareGPT
`conversations`, a prompt-completion pair or an Alpaca triple. `to_messages` gives the one shape
templates render: a list of {"role", "content", ...} dicts, checked, every problem an
InputDataError naming the field (prefixed with the caller's `where`, e.g. "data.jsonl:12").
`to_conversation` also keeps a prompt-completion pair's boundary: where its completion starts, so
that only the completion is trained, as TRL trains it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import InputDataError

FORMATS = ("messages", "sharegpt", "prompt_completion", "alpaca")
ROLES = ("system", "user", "assistant", "tool")

# the keys that identify each format (all must be present)
_SIGNATURES = {
    "messages": ("messages",),
    "sharegpt": ("conversations",),
    "prompt_completion": ("prompt", "completion"),
    "alpaca": ("instruction", "output"),
}
_SIGNATURE_SETS = {name: frozenset(keys) for name, keys in _SIGNATURES.items()}
# ShareGPT's `from` values (the original dumps, FastChat, LLaMA-Factory, axolotl) -> roles
_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "function_call": "assistant",  # LLaMA-Factory: the value is a JSON tool call (or a list of them)
}
_OPTIONAL_STRINGS = ("reasoning_content", "name", "tool_call_id")


def detect_format(record: Mapping[str, Any], where: str = "record") -> str:
    """The format of `record` (one of FORMATS) from its keys; InputDataError when none or several fit."""
    if type(record) is not dict and not isinstance(record, Mapping):
        raise InputDataError(f"{where}: a conversation record must be a JSON object, got {type(record).__name__}")
    found = [name for name, keys in _SIGNATURE_SETS.items() if record.keys() >= keys]
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputDataError(
            f"{where}: no conversation format fits the keys {sorted(record)[:10]}; expected `messages`, "
            "`conversations` (ShareGPT), `prompt` + `completion`, or `instruction` + `output` (Alpaca)"
        )
    raise InputDataError(f"{where}: the record fits several formats ({', '.join(found)}); name one with format=")


def to_messages(record: Mapping[str, Any], format: str | None = None, where: str = "record") -> list[dict[str, Any]]:
    """`record` as a checked list of OpenAI-style messages, its `format` detected when None.

    Roles are system/user/assistant/tool; `content`, `tool_calls`, `reasoning_content`, and a tool
    message's `name`/`tool_call_id` are kept. A conversation without an assistant turn, an unknown
    role or a wrong type raises InputDataError naming the field. A prompt-completion pair comes out
    flattened (prompt, then completion); `to_conversation` keeps where the completion starts.
    """
    return to_conversation(record, format, where)[0]


def to_conversation(
    record: Mapping[str, Any], format: str | None = None, where: str = "record"
) -> tuple[list[dict[str, Any]], int | None]:
    """`to_messages` of `record`, and the index of its completion's first message for a prompt-completion
    record (the prompt's message count; a string prompt is one user message), else None."""
    if format is None:
        format = detect_format(record, where)
    elif format not in FORMATS:
        raise InputDataError(f"{where}: format={format!r} is not one of {', '.join(FORMATS)}")
    if type(record) is not dict and not isinstance(record, Mapping):
        raise InputDataError(f"{where}: a conversation record must be a JSON object, got {type(record).__name__}")
    completion_start = None
    if format == "messages":
        messages = _messages(_field(record, "messages", list, where), f"{where}: messages")
    elif format == "sharegpt":
        messages = _sharegpt(record, where)
    elif format == "prompt_completion":
        messages, completion_start = _prompt_completion(record, where)
    else:
        messages = _alpaca(record, where)
    if not any(message["role"] == "assistant" for message in messages):
        raise InputDataError(f"{where}: the conversation has no assistant turn, so nothing would be trained")
    return messages, completion_start


def _field(record: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in record:
        raise InputDataError(f"{where}: field `{key}` is missing")
    value = record[key]
    if not isinstance(value, kind):
        raise InputDataError(f"{where}: field `{key}` must be a {kind.__name__}, got {type(value).__name__}")
    if not value and kind is list:
        raise InputDataError(f"{where}: field `{key}` is empty")
    return value


def _messages(items: list[Any], where: str) -> list[dict[str, Any]]:
    """Each item as a checked message; a plain {"role", "content": str} dict (most of them) is copied
    straight, as `_message` would copy it, without building its field names for errors."""
    messages = []
    for i, item in enumerate(items):
        if type(item) is dict and len(item) == 2 and type(item.get("content")) is str and item.get("role") in ROLES:
            messages.append({"role": item["role"], "content": item["content"]})
        else:
            messages.append(_message(item, f"{where}[{i}]"))
    return messages


def _message(item: Any, where: str) -> dict[str, Any]:
    """One OpenAI-style message, checked; keys null in every row (Arrow's unified schemas) are dropped."""
    if not isinstance(item, Mapping):
        raise InputDataError(f"{where}: a message must be an object, got {type(item).__name__}")
    role = item.get("role")
    if role not in ROLES:
        raise InputDataError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    message: dict[str, Any] = {"role": role}
    content = item.get("content")
    tool_calls = item.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise InputDataError(f"{where}.tool_calls: only assistant messages make tool calls, not {role!r}")
        message["tool_calls"] = _tool_calls(tool_calls, f"{where}.tool_calls")
    if content is None and tool_calls is None:
        raise InputDataError(f"{where}.content: missing; every message but an assistant's tool call has text")
    if content is not None and not isinstance(content, str):
        raise InputDataError(f"{where}.content: must be a string, got {type(content).__name__}")
    message["content"] = content
    for key in _OPTIONAL_STRINGS:
        value = item.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise InputDataError(f"{where}.{key}: must be a string, got {type(value).__name__}")
            message[key] = value
    unknown = sorted(key for key, value in item.items() if value is not None and key not in message and key != "role")
    if unknown:
        raise InputDataError(
            f"{where}: unknown message field(s) {unknown}; known: role, content, tool_calls, "
            + ", ".join(_OPTIONAL_STRINGS)
        )
    return message


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list) or not calls:
        raise InputDataError(f"{where}: must be a non-empty list of tool calls")
    checked = []
    for i, call in enumerate(calls):
        at = f"{where}[{i}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            wanted = "{'type': 'function', 'function': {'name': str, 'arguments': ...}}"
            raise InputDataError(f"{at}: expected {wanted}")
        arguments = function.get("arguments", {})
        if not isinstance(arguments, (str, Mapping)):
            raise InputDataError(f"{at}.function.arguments: must be an object or a JSON string")
        if call.get("type") not in (None, "function"):
            raise InputDataError(f"{at}.type: {call.get('type')!r} is not 'function'")
        entry: dict[str, Any] = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
        if call.get("id") is not None:
            if not isinstance(call["id"], str):
                raise InputDataError(f"{at}.id: must be a string, got {type(call['id']).__name__}")
            entry["id"] = call["id"]
        checked.append(entry)
    return checked


def _sharegpt(record: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """ShareGPT `conversations` ({"from", "value"}, or {"role", "content"}); an optional top-level `system`."""
    turns = _field(record, "conversations", list, where)
    messages: list[dict[str, Any]] = []
    system = record.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise InputDataError(f"{where}: field `system` must be a string, got {type(system).__name__}")
        if system:
            messages.append({"role": "system", "content": system})
    for i, turn in enumerate(turns):
        at = f"{where}: conversations[{i}]"
        if not isinstance(turn, Mapping):
            raise InputDataError(f"{at}: a turn must be an object, got {type(turn).__name__}")
        if "from" not in turn and "role" in turn:  # already ChatML keys (TRL's maybe_convert_to_chatml accepts both)
            messages.append(_message(turn, at))
            continue
        source, value = turn.get("from"), turn.get("value")
        if not isinstance(source, str) or source not in _SHAREGPT_ROLES:
            raise InputDataError(f"{at}.from: {source!r} is not one of {', '.join(_SHAREGPT_ROLES)}")
        if not isinstance(value, str):
            raise InputDataError(f"{at}.value: must be a string, got {type(value).__name__}")
        if source == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": _sharegpt_call(value, f"{at}.value")})
        else:
            messages.append({"role": _SHAREGPT_ROLES[source], "content": value})
    return messages


def _sharegpt_call(value: str, where: str) -> list[dict[str, Any]]:
    try:
        calls = json.loads(value)
    except ValueError as exc:
        raise InputDataError(f"{where}: a function_call turn must hold JSON ({exc})") from None
    calls = calls if isinstance(calls, list) else [calls]
    if not calls or not all(isinstance(call, Mapping) and isinstance(call.get("name"), str) for call in calls):
        raise InputDataError(f"{where}: a function_call must be {{'name': str, 'arguments': ...}} or a list of them")
    return _tool_calls(
        [{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments", {})}} for c in calls],
        where,
    )


def _prompt_completion(record: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], int]:
    """Strings become one user and one assistant turn; message lists (as TRL takes them) are joined.
    With the index of the completion's first message."""
    prompt, completion = record.get("prompt"), record.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            raise InputDataError(f"{where}: field `completion` is empty")
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}], 1
    if isinstance(prompt, list) and isinstance(completion, list):
        head = _messages(_field(record, "prompt", list, where), f"{where}: prompt")
        tail = _messages(_field(record, "completion", list, where), f"{where}: completion")
        if not any(message["role"] == "assistant" for message in tail):
            raise InputDataError(f"{where}: field `completion` has no assistant turn")
        return head + tail, len(head)
    raise InputDataError(
        f"{where}: fields `prompt` and `completion` must both be strings or both lists of messages, got "
        f"{type(prompt).__name__} and {type(completion).__name__}"
    )


def _alpaca(record: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """`instruction` and `input` joined by a newline (as LLaMA-Factory does) -> `output`.

    Optional: `system`, and `history` ([instruction, response] pairs before it, LLaMA-Factory's).
    """
    strings = {}
    for key in ("instruction", "input", "output", "system"):
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise InputDataError(f"{where}: field `{key}` must be a string, got {type(value).__name__}")
        strings[key] = value or ""
    if not strings["output"]:
        raise InputDataError(f"{where}: field `output` is empty")
    if not (strings["instruction"] or strings["input"]):
        raise InputDataError(f"{where}: fields `instruction` and `input` are both empty")
    messages: list[dict[str, Any]] = []
    if strings["system"]:
        messages.append({"role": "system", "content": strings["system"]})
    history = record.get("history")
    if history is not None:
        if not isinstance(history, list):
            raise InputDataError(f"{where}: field `history` must be a list of [instruction, response] pairs")
        for i, pair in enumerate(history):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise InputDataError(f"{where}: history[{i}] must be an [instruction, response] pair of strings")
            messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    query = "\n".join(part for part in (strings["instruction"], strings["input"]) if part)
    messages += [{"role": "user", "content": query}, {"role": "assistant", "content": strings["output"]}]
    return messages

"""A conversation to token ids and a loss mask (1 = trained), by a masking policy.

With `{% generation %}` markers the assistant mask is transformers' (`return_assistant_tokens_mask=True`),
token for token. Without them, the spans of the messages' text are located exactly (see `locate_fields`).
A prompt-completion conversation (`completion_start`) is masked as TRL's SFTTrainer masks it
(`completion_only_loss`): every token after those the prompt, rendered with its generation prompt, shares
with the whole conversation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numba
import numpy as np

from .._checks import check_choice
from ..errors import ConfigError, InputDataError
from ..tokenizers import Tokenizer
from .formats import ROLES
from .template import REASONING_FIELDS, ChatTemplate, prepare_messages

__all__ = ["POLICIES", "REASONING", "ChatPlan", "ChatTokens", "encode_chat", "encode_chats", "plan_chat"]

POLICIES = ("assistant", "last_assistant", "all")
"""assistant: every assistant turn; last_assistant: the last one; all: every token but tool outputs."""
REASONING = ("train", "mask")

Span = tuple[int, int]
# What a plan's ops do to the tokens of a character span (applied in order): mark all, map a generation
# block as transformers does, train / mask every token touching the span, train every token from the one
# where the tokenized prompt and the conversation part (its start filled in by `encode_plans`).
_ALL, _GENERATION, _TRAIN, _MASK, _COMPLETION = 0, 1, 2, 3, 4
_OPEN, _CLOSE = "\U00100000", "\U00100001"  # private-use characters around a sentinel's number
_SENTINEL_RE = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
# Ways a template may print a field's text; the located spans are verified against the real render.
_PRINTED = ((lambda v: v), str.strip, lambda v: v.strip("\n"))


class ChatPlan(NamedTuple):
    """A rendered conversation and its mask's ops: (kind, start, end) character spans, applied in order;
    for a prompt-completion conversation, also the prompt rendered with its generation prompt."""

    text: str
    ops: tuple[tuple[int, int, int], ...]
    prompt: str | None = None


@dataclass(frozen=True)
class ChatTokens:
    """Many conversations' token ids (int64) and loss masks (uint8, 1 = trained) end to end, and their lengths."""

    ids: np.ndarray
    lengths: np.ndarray
    masks: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Conversation `index`'s (ids, mask), views into the flat arrays."""
        k = range(len(self.lengths))[index]
        start = int(self.lengths[:k].sum())
        stop = start + int(self.lengths[k])
        return self.ids[start:stop], self.masks[start:stop]


def encode_chat(
    tokenizer: Tokenizer,
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    *,
    policy: str = "assistant",
    reasoning: str = "train",
    tools: Sequence[Mapping[str, Any]] | None = None,
    completion_start: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (int64) and loss mask (uint8, 1 = trained) of one conversation, with one tokenizer call.

    policy: "assistant" (every assistant turn), "last_assistant", or "all" (every token but tool outputs).
    reasoning: "train" or "mask" (the tokens of assistant reasoning text carry no loss).
    With generation markers, "assistant" is transformers' assistant mask exactly; "last_assistant" keeps the
    last block (one block per assistant message is required). Without markers, an assistant turn is the
    located text of its content (and of its reasoning when trained); the end-of-turn token is not in it,
    and an assistant message with tool calls is refused (only markers say where calls are printed).
    A generation block covers the tokens from the one holding its first character to the one holding its
    last, as transformers maps it; a located span covers every token holding one of its characters (so a
    character split over several tokens is trained whole); a token touching masked text carries no loss.
    completion_start=k: messages[:k] are a prompt and messages[k:] its completion (TRL's prompt-completion
    records); the completion is trained as TRL's SFTTrainer trains it with ``completion_only_loss``: every
    token after the longest common prefix of the prompt's tokens (rendered with the generation prompt) and
    the conversation's, end-of-turn tokens and the completion's tool outputs included; `policy` does not
    apply, reasoning="mask" still masks reasoning text."""
    chat = encode_chats(
        tokenizer,
        template,
        [messages],
        policy=policy,
        reasoning=reasoning,
        tools=[tools],
        completion_starts=[completion_start],
    )
    return chat.ids, chat.masks


def encode_chats(
    tokenizer: Tokenizer,
    template: ChatTemplate,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    policy: str = "assistant",
    reasoning: str = "train",
    tools: Sequence[Sequence[Mapping[str, Any]] | None] | None = None,
    completion_starts: Sequence[int | None] | None = None,
) -> ChatTokens:
    """`encode_chat` of many conversations (`tools`, `completion_starts`: one entry or None per
    conversation), in one tokenizer call.

    The same ids and masks as one call each, faster: the texts are tokenized as a batch and the masks
    marked by one compiled pass over all of them."""
    for name, given in (("tools", tools), ("completion_starts", completion_starts)):
        if given is not None and len(given) != len(conversations):
            raise ConfigError(
                f"{name} has {len(given)} entries for {len(conversations)} conversations; pass one per conversation"
            )
    plans = [
        plan_chat(
            template,
            messages,
            policy=policy,
            reasoning=reasoning,
            tools=None if tools is None else tools[k],
            completion_start=None if completion_starts is None else completion_starts[k],
        )
        for k, messages in enumerate(conversations)
    ]
    return encode_plans(tokenizer, plans)


def plan_chat(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    *,
    policy: str = "assistant",
    reasoning: str = "train",
    tools: Sequence[Mapping[str, Any]] | None = None,
    completion_start: int | None = None,
) -> ChatPlan:
    """The rendered text of a conversation and the character spans its mask is made from (see encode_chat).

    Everything that can refuse a conversation happens here, before tokenization."""
    check_choice("policy", policy, POLICIES)
    check_choice("reasoning", reasoning, REASONING)
    check_messages(messages)
    chat = prepare_messages(messages)
    text, generation = template.render_prepared(chat, tools)
    if completion_start is not None:
        return _plan_completion(template, chat, text, tools, completion_start, reasoning)
    fields = _located_fields(template, chat, policy, reasoning)
    located = locate_fields(template, chat, fields, text, tools) if fields else {}
    return ChatPlan(text, tuple(_mask_ops(template, chat, generation, fields, located, policy, reasoning)))


def _located_fields(
    template: ChatTemplate, chat: list[dict[str, Any]], policy: str, reasoning: str
) -> list[tuple[int, str]]:
    """The (message, field) pairs whose printed spans the mask needs located in the rendered text."""
    assistants = [i for i, m in enumerate(chat) if m["role"] == "assistant"]
    if policy == "last_assistant":
        assistants = assistants[-1:]
    markers = template.has_generation_markers
    fields: list[tuple[int, str]] = []
    if policy != "all" and not markers:
        for i in assistants:
            if chat[i].get("tool_calls"):
                raise ConfigError(
                    f"messages[{i}] has tool_calls, and the chat template from {template.origin} has no "
                    "{% generation %} markers to say where they are printed; policy "
                    f"{policy!r} with tool calls needs a template with markers"
                )
            fields += [(i, "content")] if "content" in chat[i] else []
    if reasoning == "mask" or (policy != "all" and not markers):
        fields += [(i, "reasoning_content") for i in assistants if "reasoning_content" in chat[i]]
    if policy == "all":
        fields += [(i, "content") for i, m in enumerate(chat) if m["role"] == "tool"]
    return fields


def _mask_ops(
    template: ChatTemplate,
    chat: list[dict[str, Any]],
    generation: Sequence[tuple[int, int]],
    fields: list[tuple[int, str]],
    located: dict[tuple[int, str], list[Span]],
    policy: str,
    reasoning: str,
) -> list[tuple[int, int, int]]:
    """The mask's operations over character spans: what is trained, then what never carries loss."""
    ops: list[tuple[int, int, int]] = []
    if policy == "all":
        ops.append((_ALL, 0, 0))
    elif template.has_generation_markers:
        if policy == "last_assistant":
            if len(generation) != sum(m["role"] == "assistant" for m in chat):
                raise ConfigError(
                    f"the chat template from {template.origin} printed {len(generation)} generation blocks for "
                    f"{sum(m['role'] == 'assistant' for m in chat)} assistant messages; policy 'last_assistant' "
                    "needs one block per assistant message"
                )
            generation = generation[-1:]
        ops += [(_GENERATION, start, end) for start, end in generation]
    else:
        for i, field in fields:
            spans = located[i, field]
            if field == "content" and len(spans) != 1:
                found = "not printed" if not spans else f"printed {len(spans)} times"
                raise ConfigError(
                    f"messages[{i}].content is {found} by the chat template from {template.origin}, so the "
                    f"assistant turn cannot be located; policy {policy!r} needs a template with generation markers"
                )
            if field == "content" or reasoning == "train":
                ops += [(_TRAIN, start, end) for start, end in spans]
    for i, field in fields:  # text that never carries loss
        if (field == "reasoning_content" and reasoning == "mask") or chat[i]["role"] == "tool":
            ops += [(_MASK, start, end) for start, end in located[i, field]]
    return ops


def _plan_completion(
    template: ChatTemplate,
    chat: list[dict[str, Any]],
    text: str,
    tools: Sequence[Mapping[str, Any]] | None,
    start: int,
    reasoning: str,
) -> ChatPlan:
    """The plan of a prompt (chat[:start]) and its completion: TRL's completion mask, reasoning masked if asked."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 < start < len(chat):
        raise ConfigError(
            f"completion_start={start!r}: must be the index of the completion's first message, "
            f"from 1 to {len(chat) - 1} for these {len(chat)} messages"
        )
    if not any(m["role"] == "assistant" for m in chat[start:]):
        raise InputDataError(f"messages[{start}:] (the completion) has no assistant turn, so nothing would be trained")
    prompt, _ = template.render_prepared(chat[:start], tools, add_generation_prompt=True)
    ops = [(_COMPLETION, 0, 0)]
    if reasoning == "mask":
        fields = [(i, "reasoning_content") for i in range(start, len(chat)) if "reasoning_content" in chat[i]]
        located = locate_fields(template, chat, fields, text, tools) if fields else {}
        ops += [(_MASK, first, end) for field in fields for first, end in located[field]]
    return ChatPlan(text, tuple(ops), prompt)


def encode_plans(tokenizer: Tokenizer, plans: Sequence[ChatPlan]) -> ChatTokens:
    """Tokenize the plans' texts in one batch and mark their masks in one compiled pass."""
    ids, lengths, offsets = tokenizer.encode_offsets_batch([plan.text for plan in plans])
    table = np.array([op for plan in plans for op in plan.ops], np.int64).reshape(-1, 3)
    counts = np.fromiter((len(plan.ops) for plan in plans), np.int64, count=len(plans))
    _completion_starts(tokenizer, plans, ids, lengths, counts, table)
    masks = np.zeros(len(ids), np.uint8)
    _mark(lengths, offsets[:, 0].copy(), offsets[:, 1].copy(), counts, table, masks)
    return ChatTokens(ids, lengths, masks)


def _completion_starts(
    tokenizer: Tokenizer,
    plans: Sequence[ChatPlan],
    ids: np.ndarray,
    lengths: np.ndarray,
    counts: np.ndarray,
    table: np.ndarray,
) -> None:
    """Fill in each _COMPLETION op's first token: the length of the common prefix of the prompt's tokens
    and the conversation's (TRL's ``common_prefix_length``), the prompts tokenized in one batch."""
    prompted = [k for k, plan in enumerate(plans) if plan.prompt is not None]
    if not prompted:
        return
    prompt_ids, prompt_lengths, _ = tokenizer.encode_offsets_batch([str(plans[k].prompt) for k in prompted])
    token0 = np.concatenate([[0], np.cumsum(lengths)])
    op0 = np.concatenate([[0], np.cumsum(counts)])
    prompt0 = np.concatenate([[0], np.cumsum(prompt_lengths)])
    for j, k in enumerate(prompted):
        whole = ids[token0[k] : token0[k + 1]]
        prompt = prompt_ids[prompt0[j] : prompt0[j + 1]]
        shared = min(len(whole), len(prompt))
        differ = np.flatnonzero(whole[:shared] != prompt[:shared])
        table[op0[k] : op0[k + 1], 1][table[op0[k] : op0[k + 1], 0] == _COMPLETION] = (
            differ[0] if differ.size else shared
        )


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Refuse (InputDataError naming the field) a message with an unknown role or non-text where text is needed."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise InputDataError(f"messages={messages!r:.80}: pass a non-empty list of message dicts")
    for i, message in enumerate(messages):
        if type(message) is dict and len(message) == 2 and type(message.get("content")) is str:
            if message.get("role") in ROLES:
                continue  # {"role", "content": text}, most messages: nothing else to check
        elif type(message) is not dict and not isinstance(message, Mapping):
            raise InputDataError(f"messages[{i}] is {type(message).__name__}, not a dict with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            raise InputDataError(f"messages[{i}].role={role!r} is not a chat role; use one of {', '.join(ROLES)}")
        content = message.get("content")
        calls = message.get("tool_calls")
        needs_text = role != "assistant" or not (calls or any(message.get(k) for k in REASONING_FIELDS))
        if not isinstance(content, str) and (content is not None or needs_text):
            raise InputDataError(
                f"messages[{i}].content is {type(content).__name__}; a {role} message needs text (a string)"
                + ("" if role != "assistant" else ", unless it has tool_calls or reasoning")
            )
        for key in REASONING_FIELDS:
            if message.get(key) is not None and not isinstance(message[key], str):
                raise InputDataError(f"messages[{i}].{key} is {type(message[key]).__name__}; pass a string")
        if calls is not None and (
            role != "assistant" or not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls)
        ):
            raise InputDataError(
                f"messages[{i}].tool_calls must be a list of dicts on an assistant message; got "
                f"{type(calls).__name__} on a {role} message"
            )


def locate_fields(
    template: ChatTemplate,
    chat: list[dict[str, Any]],
    fields: list[tuple[int, str]],
    text: str,
    tools: Sequence[Mapping[str, Any]] | None,
) -> dict[tuple[int, str], list[Span]]:
    """Character spans of `text` printed from each (message index, field) of `chat`.

    Exact by construction: each field is replaced by a unique sentinel, the conversation rendered again,
    and the sentinels replaced back by the field's text (as is, stripped, or stripped of newlines, each
    field its own way); the spans are kept only if exactly one such replacement rebuilds `text` character
    for character. Else a ConfigError."""
    if _OPEN in text or _CLOSE in text:
        raise InputDataError(
            "a message holds the private-use characters U+100000/U+100001 tokenport uses to locate message text; "
            "remove them"
        )
    marked = [dict(m) for m in chat]
    values = []
    for k, (i, field) in enumerate(fields):
        values.append(chat[i][field])
        keys = REASONING_FIELDS if field == "reasoning_content" else (field,)
        for key in keys:
            if key in marked[i]:
                marked[i][key] = f"{_OPEN}{k}{_CLOSE}"
    sentinel_text, _ = template.render_prepared(marked, tools)
    segments, cursor = [], 0
    for match in _SENTINEL_RE.finditer(sentinel_text):
        segments.append((sentinel_text[cursor : match.start()], int(match.group(1))))
        cursor = match.end()
    solutions = _splices(text, segments, sentinel_text[cursor:], values)
    if len(solutions) != 1:
        what = "prints the text of" if solutions else "changes the text of"
        raise ConfigError(
            f"the chat template from {template.origin} {what} "
            f"{', '.join(f'messages[{i}].{f}' for i, f in fields)} "
            + ("in more than one way that gives this text" if solutions else "as it prints it")
            + ", so its spans cannot be located exactly; use a template with {% generation %} markers"
        )
    located: dict[tuple[int, str], list[Span]] = {f: [] for f in fields}
    for (_, k), span in zip(segments, solutions[0]):
        located[fields[k]].append(span)
    return located


def _splices(text: str, segments: list[tuple[str, int]], tail: str, values: list[str]) -> list[list[Span]]:
    """The ways (at most two) to rebuild `text` as before_0 + printed(value_k0) + before_1 + ... + tail,
    each value printed in one of the `_PRINTED` ways: the spans of the printed values, per way."""
    solutions: list[list[Span]] = []
    stack: list[tuple[int, int, tuple[Span, ...]]] = [(0, 0, ())]
    while stack and len(solutions) < 2:
        j, pos, spans = stack.pop()
        if j == len(segments):
            if text[pos:] == tail:
                solutions.append(list(spans))
            continue
        before, k = segments[j]
        if not text.startswith(before, pos):
            continue
        pos += len(before)
        for value in dict.fromkeys(printed(values[k]) for printed in _PRINTED):  # distinct ways, in order
            if text.startswith(value, pos):
                stack.append((j + 1, pos + len(value), (*spans, (pos, pos + len(value)))))
    return solutions


@numba.njit(cache=True)
def _mark(lengths, starts, ends, counts, ops, masks):  # noqa: ANN001 (a numba kernel)
    """Apply each conversation's ops, in order, to its tokens' mask (a numba kernel over the whole batch).

    _GENERATION spans map as transformers' apply_chat_template does: from the first token holding the
    first character to the first token holding the last (tokenizers' char_to_token); a span whose first
    character no token holds stops the marking of generation spans; none at the end, or the first token,
    marks to the end of the text (transformers' `if end_token` test). _TRAIN/_MASK set/clear every token
    holding a character of the span. _COMPLETION sets every token from the one its start names."""
    token0 = 0
    op0 = 0
    for d in range(len(lengths)):
        n = lengths[d]
        stopped = False
        for k in range(op0, op0 + counts[d]):
            kind, first_char, end_char = ops[k, 0], ops[k, 1], ops[k, 2]
            if kind == _ALL:
                masks[token0 : token0 + n] = 1
            elif kind == _COMPLETION:  # first_char: a token count here
                masks[token0 + first_char : token0 + n] = 1
            elif kind == _GENERATION:
                if stopped:
                    continue
                first = _char_to_token(starts, ends, token0, n, first_char)
                if first < 0:
                    stopped = True
                    continue
                last = _char_to_token(starts, ends, token0, n, end_char - 1)
                stop = last + 1 if last > 0 else n
                masks[token0 + first : token0 + max(first, stop)] = 1
            else:
                value = 1 if kind == _TRAIN else 0
                for t in range(token0, token0 + n):
                    if starts[t] < end_char and ends[t] > first_char:
                        masks[t] = value
        token0 += n
        op0 += counts[d]


@numba.njit(cache=True)
def _char_to_token(starts, ends, token0, n, char):  # noqa: ANN001 (a numba kernel)
    """Index (within its conversation) of the first token whose offsets hold `char`, or -1."""
    for t in range(token0, token0 + n):
        if starts[t] <= char < ends[t]:
            return t - token0
    return -1

"""`prepare` with format="chat": records to conversations, cleaning per message, conversations to ids + masks.

A record becomes one conversation document: its text is a canonical serialization of the messages
(and tools), so dedup steps compare whole conversations; its metadata holds the messages. Other
cleaning steps see each message's text (content and reasoning): a rejected message drops the whole
conversation, a scrubber rewrites the message. Each conversation is then rendered (`plan_chat`) and a
batch of them tokenized and masked at once (`encode_plans`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ...chat.formats import to_conversation
from ...chat.masks import ChatPlan, encode_plans, plan_chat
from ...chat.template import ChatTemplate
from ...errors import InputDataError, TokenportError
from ..inputs.documents import Document
from ..steps.base import Step
from ..steps.runwide import RunWideStep
from .stats import Problems
from .tokenize import TokenBatch

TEXT_FIELDS = ("content", "reasoning_content")
"""The fields of a message that cleaning steps see and may rewrite."""


@dataclass(frozen=True)
class ChatJob:
    """How a run's conversations become tokens: the template, the record shape and the masking.

    completion_only_loss: a prompt-completion record trains only its completion, as TRL's SFTTrainer
    does (`policy` is for the other records); False: prompt and completion are one conversation that
    `policy` masks (assistant turns of the prompt trained too)."""

    template: ChatTemplate
    format: str | None
    policy: str
    reasoning: str
    completion_only_loss: bool = True

    def describe(self) -> dict[str, Any]:
        """The stores' (and the dataset manifest's) `chat` entry: what decides their tokens and masks."""
        return {
            "format": self.format or "detected",
            "template": self.template.fingerprint,
            "policy": self.policy,
            "reasoning": self.reasoning,
            "completion_only_loss": self.completion_only_loss,
        }


def canonical(messages: list[dict[str, Any]], tools: list[Any] | None, completion_start: int | None = None) -> str:
    """One string per conversation (sorted keys, no spaces): what dedup steps key on (a prompt-completion
    pair's boundary with it: it decides the mask)."""
    data: dict[str, Any] = {"messages": messages}
    if tools is not None:
        data["tools"] = tools
    if completion_start is not None:
        data["completion_start"] = completion_start
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def conversations(
    records: Iterable[Document], format: str | None, problems: Problems, keyed: bool = True
) -> Iterator[Document]:
    """Each record (a document whose metadata is the whole record) as a conversation document;
    a malformed one is refused or skipped ("bad_conversation") naming its file and line or row.

    keyed=False: the documents' text is left empty instead of `canonical`, for a run without cleaning
    steps, where nothing reads it (the conversation is in the metadata)."""
    for record in records:
        try:
            messages, start = to_conversation(record.metadata, format, where=record.id)
            tools = record.metadata.get("tools")
            if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
                raise InputDataError(f"{record.id}: field `tools` must be a list of objects (tool schemas)")
        except InputDataError as error:
            problems.report("bad_conversation", record.id, str(error).removeprefix(record.id + ": "))
            continue
        metadata = {"messages": messages, "tools": tools, "completion_start": start}
        yield Document(canonical(messages, tools, start) if keyed else "", record.id, metadata)


class PerMessage(Step):
    """A cleaning step applied to each message's text of a conversation: any rejected message drops
    the conversation (counted by the step's reason), a transformed text replaces the message's."""

    def __init__(self, inner: Step) -> None:
        super().__init__()
        self.inner = inner

    def process(self, document: Document) -> Document | None:
        messages = document.metadata["messages"]
        changed: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            new = message
            for field in TEXT_FIELDS:
                text = message.get(field)
                if not isinstance(text, str):
                    continue
                before = Counter(self.inner.removed)
                kept = self.inner.process(Document(text, f"{document.id}: messages[{i}].{field}"))
                if kept is None:
                    if self.sink is not None:
                        reasons = list(self.inner.removed - before) or ["rejected"]
                        self.sink(document, reasons[0])
                    return None
                if kept.text != text:
                    new = {**new, field: kept.text}
            changed.append(new)
        if all(a is b for a, b in zip(changed, messages)):
            return document
        tools, start = document.metadata["tools"], document.metadata["completion_start"]
        metadata = {**document.metadata, "messages": changed}
        return replace(document, text=canonical(changed, tools, start), metadata=metadata)

    def counts(self) -> dict[str, int]:
        """The inner step's counters (its removals are of whole conversations)."""
        return self.inner.counts()


def per_message(steps: list[tuple[str, Step]]) -> list[tuple[str, Step]]:
    """The run's steps for conversations: run-wide ones (dedup) on whole conversations, the others per message."""
    return [(label, step if isinstance(step, RunWideStep) else PerMessage(step)) for label, step in steps]


class EncodeChat:
    """Conversation documents in, TokenBatch (with masks) out: `batch_size` conversations per batch.

    Each conversation is rendered (and refused, counted, if it cannot be) one at a time; a batch's texts
    are then tokenized and masked together (`encode_plans`). A text the tokenizer cannot encode (a lone
    surrogate) is refused or skipped ("encode_failed") naming its conversation, as a text document is."""

    def __init__(self, tokenizer: Any, chat: ChatJob, problems: Problems, batch_size: int) -> None:
        self.tokenizer, self.chat, self.problems, self.batch_size = tokenizer, chat, problems, batch_size

    def __call__(self, documents: Iterable[Document]) -> Iterator[TokenBatch]:
        plans: list[ChatPlan] = []
        ids: list[str] = []
        for document in documents:
            try:
                plan = plan_chat(
                    self.chat.template,
                    document.metadata["messages"],
                    policy=self.chat.policy,
                    reasoning=self.chat.reasoning,
                    tools=document.metadata["tools"],
                    completion_start=document.metadata["completion_start"] if self.chat.completion_only_loss else None,
                )
            except InputDataError as error:
                self.problems.report("bad_conversation", document.id, str(error))
                continue
            plans.append(plan)
            ids.append(document.id)
            if len(plans) >= self.batch_size:
                yield self._batch(plans, ids)
                plans, ids = [], []
        if plans:
            yield self._batch(plans, ids)

    def _batch(self, plans: list[ChatPlan], ids: list[str]) -> TokenBatch:
        try:
            chats = encode_plans(self.tokenizer, plans)
        except TokenportError:
            raise
        except Exception:  # one text the tokenizer cannot encode fails the whole call: find it
            chats = encode_plans(self.tokenizer, self._encodable(plans, ids))
        stats = self.problems.stats
        stats.documents += len(chats)
        stats.tokens += len(chats.ids)
        return TokenBatch(chats.ids, chats.lengths, chats.masks)

    def _encodable(self, plans: list[ChatPlan], ids: list[str]) -> list[ChatPlan]:
        """The plans the tokenizer encodes one by one; each other one refused or skipped, named."""
        kept = []
        for plan, where in zip(plans, ids):
            try:
                encode_plans(self.tokenizer, [plan])
            except TokenportError:
                raise
            except Exception as exc:
                self.problems.report("encode_failed", where, f"the tokenizer failed on this conversation ({exc})")
                continue
            kept.append(plan)
        return kept

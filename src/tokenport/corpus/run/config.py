"""PrepareConfig: what `prepare` reads, how it tokenizes, and how it cuts the output into stores."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..._checks import check_int
from ..._files import parse_structured, read_text
from ...chat.formats import FORMATS as CHAT_FORMATS
from ...chat.masks import POLICIES as CHAT_POLICIES
from ...chat.masks import REASONING
from ...errors import ConfigError
from ...tokenizers import ENGINES
from ..steps.registry import check_steps

SHARD_BY = ("file", "tokens")
ON_ERROR = ("stop", "skip")
EXECUTORS = ("local", "ray")
INPUT_FORMATS = ("text", "chat")
MAX_WORKERS = 1024
"""The most worker processes a local run starts (all at once, before planning): more is a typo, not a machine."""
CHAT_FIELDS = ("chat_template", "chat_policy", "reasoning", "chat_format", "completion_only_loss")
"""The fields that describe conversations; they mean something only with format="chat"."""
OUTPUT_FORMAT = "tokenport.prepare/1"

OUTPUT_FIELDS = ("inputs", "text_key", "append_eod", "shard_by", "shard_tokens", "max_chars_per_piece")
"""Fields (with the tokenizer's identity, and the cleaning steps and keep_rejected if set) that
decide the output bytes; a run resumes only with the same values. workers, batch_size,
unit_bytes, on_error and the executor change how the work is done, not what a finished unit
holds, so they may differ between a run and its resumption."""


@dataclass(frozen=True)
class PrepareConfig:
    """Settings of one `prepare` run: raw corpus files in, token stores out.

    inputs: files, directories (recursive, sorted) and globs; local paths or fsspec URLs.
      jsonl is ``.jsonl``/``.json``/``.ndjson``, parquet ``.parquet``, anything else a text
      file (one document); ``.gz``/``.zst``/``.bz2``/``.xz`` are decompressed.
    output: a local directory, or an object-store URL (s3://...); parts ``part-00000.{bin,idx,json}``...
      and ``tokenport.json``. A URL output is prepared in a local staging directory (``upload.staging_dir``),
      then uploaded: every file, each checked, then ``tokenport.json`` naming them, so a reader never
      sees a half-uploaded dataset and a rerun finishes (or rolls back) an interrupted upload.
    tokenizer: a `tokenport.tokenizers.load_tokenizer` spec ("byte", "hf:PATH", ...).
    tokenizer_engine: how an ``hf:`` tokenizer.json is run: "auto" (gigatoken when it gives HF's ids
      on a sample of the input, checked at the start; else HF tokenizers, saying why), "hf" or
      "gigatoken" (forced). The output bytes are the same whichever engine runs.
    text_key: the jsonl field or parquet column holding the text.
    workers: worker processes (default: one per CPU), at most MAX_WORKERS.
    append_eod: append the tokenizer's end-of-document id to every document.
    shard_by: "file" (one store per input file; consecutive text files, one document each, share
      stores of up to `shard_tokens` tokens) or "tokens" (stores of about `shard_tokens` tokens,
      cut between documents).
    on_error: "stop" at the first malformed document, or "skip" it and count it by kind.
    max_chars_per_piece: longer documents are tokenized in pieces of at most this many
      characters (cut at whitespace), so tokenizing cost stays linear in length.
    unit_bytes: uncompressed jsonl files larger than this are cut into line-aligned ranges of
      about this size, parquet files between row groups, and small files packed together, so
      that workers get units of work of about this size. Compressed jsonl is decompressed once
      into line-aligned chunks of this size under ``OUTPUT/.work/`` (so the output's disk needs
      room for it, each chunk deleted when its unit is done) and shared out the same way.
    batch_size: documents per tokenizer call.
    steps: cleaning steps run in order between reading and tokenizing, each a mapping
      ``{"step": KIND, **options}`` (see ``tokenport.corpus.steps.registry.STEP_KINDS``), e.g.
      ``[{"step": "pii", "kinds": ["email", "phone"]}]``; a kind of your own is a subclass of
      ``tokenport.corpus.Step`` added by ``tokenport.corpus.register_step``.
    keep_rejected: write every document a step dropped, with the step and the reason, to
      ``OUTPUT/rejected/*.jsonl`` for audit.
    executor: "local" (worker processes on this machine) or "ray" (one task per unit on a Ray
      cluster at ``ray_address``, e.g. "auto"; a local output directory must be shared by all nodes,
      an object-store output needs no shared filesystem: tasks get and return their files through Ray).
      The output is the same either way.
    allow_empty: accept a run that produces no documents; otherwise it raises InputDataError
      and leaves the output directory as it found it.
    format: "text" (each record's `text_key` is a document) or "chat" (each jsonl/parquet/Arrow
      record is a conversation, rendered by a chat template into a chat store: tokens and a
      loss mask per conversation; steps see each message's text, dedup the whole conversation;
      `text_key`, `append_eod` and `max_chars_per_piece` do not apply).
    chat_template: "chatml" (built in), a Jinja file or a tokenizer directory; None: the
      tokenizer's own (ChatML for the byte-level tokenizer, the directory of an ``hf:`` one).
    chat_policy: which tokens carry loss (`tokenport.chat.encode_chat`'s policy): "assistant",
      "last_assistant" or "all".
    reasoning: "train" or "mask" the assistant's reasoning text.
    chat_format: the record shape (one of `tokenport.chat.formats.FORMATS`); None: detected
      per record.
    completion_only_loss: a prompt-completion record trains only its completion, as TRL's
      SFTTrainer does (chat_policy masks the other records); False: prompt and completion are one
      conversation masked by chat_policy, so the prompt's assistant turns are trained too.
    """

    inputs: Sequence[str]
    output: str
    tokenizer: str = "byte"
    tokenizer_engine: str = "auto"
    text_key: str = "text"
    workers: int = field(default_factory=lambda: min(os.cpu_count() or 1, MAX_WORKERS))
    append_eod: bool = True
    shard_by: str = "file"
    shard_tokens: int = 1_000_000_000
    on_error: str = "stop"
    max_chars_per_piece: int = 100_000
    unit_bytes: int = 16 << 20
    batch_size: int = 256
    steps: Sequence[Mapping[str, Any]] = ()
    keep_rejected: bool = False
    executor: str = "local"
    ray_address: str | None = None
    allow_empty: bool = False
    format: str = "text"
    chat_template: str | None = None
    chat_policy: str = "assistant"
    reasoning: str = "train"
    chat_format: str | None = None
    completion_only_loss: bool = True

    def __post_init__(self) -> None:
        inputs = [self.inputs] if isinstance(self.inputs, (str, os.PathLike)) else self.inputs
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise ConfigError("PrepareConfig.inputs: give at least one file, directory, glob or URL")
        if not all(isinstance(p, (str, os.PathLike)) and os.fspath(p) for p in inputs):
            raise ConfigError(f"PrepareConfig.inputs={inputs!r}: every input must be a non-empty path or URL")
        object.__setattr__(self, "inputs", tuple(os.fspath(p) for p in inputs))
        if not isinstance(self.output, (str, os.PathLike)) or not os.fspath(self.output):
            raise ConfigError(f"PrepareConfig.output={self.output!r}: give a directory path")
        object.__setattr__(self, "output", os.fspath(self.output))
        for name in ("tokenizer", "text_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{_named(name, value)}: must be a non-empty string")
        for name in ("workers", "shard_tokens", "max_chars_per_piece", "unit_bytes", "batch_size"):
            value = getattr(self, name)
            limit = MAX_WORKERS if name == "workers" else None  # each worker is a process started up front
            checked = check_int(f"PrepareConfig.{name}", value, 1, limit, what=FLAGS.get(name, "a positive integer"))
            object.__setattr__(self, name, checked)
        for name, choices in (
            ("tokenizer_engine", ENGINES),
            ("executor", EXECUTORS),
            ("shard_by", SHARD_BY),
            ("on_error", ON_ERROR),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{_named(name, getattr(self, name))}: must be one of {', '.join(choices)}")
        self._check_chat()
        for name in ("keep_rejected", "append_eod", "allow_empty", "completion_only_loss"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{_named(name, getattr(self, name))}: must be True or False")
        try:
            object.__setattr__(self, "steps", check_steps(self.steps))
        except ConfigError as error:
            raise ConfigError(f"PrepareConfig.{error}") from None

    def _check_chat(self) -> None:
        """The chat fields: valid choices, and set only with format="chat"."""
        if self.format not in INPUT_FORMATS:
            raise ConfigError(f"{_named('format', self.format)}: must be one of {', '.join(INPUT_FORMATS)}")
        for name, choices in (("chat_policy", CHAT_POLICIES), ("reasoning", REASONING)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{_named(name, getattr(self, name))}: must be one of {', '.join(choices)}")
        if self.chat_format is not None and self.chat_format not in CHAT_FORMATS:
            raise ConfigError(
                f"{_named('chat_format', self.chat_format)}: must be one of {', '.join(CHAT_FORMATS)}, "
                "or None to detect each record's"
            )
        if self.chat_template is not None and (not isinstance(self.chat_template, str) or not self.chat_template):
            raise ConfigError(f"{_named('chat_template', self.chat_template)}: must be a non-empty string or None")
        if self.format != "chat":
            defaults = {
                "chat_template": None,
                "chat_policy": "assistant",
                "reasoning": "train",
                "chat_format": None,
                "completion_only_loss": True,
            }
            for name, default in defaults.items():
                if getattr(self, name) != default:
                    raise ConfigError(
                        f"{_named(name, getattr(self, name))}: describes conversations, but format is "
                        f"{self.format!r}; add format='chat' (--format chat) or drop it"
                    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able copy of every field (kept in the dataset manifest)."""
        data = asdict(self)
        data["inputs"] = list(self.inputs)
        data["steps"] = [dict(spec) for spec in self.steps]
        return data

    def output_settings(self, tokenizer_identity: dict[str, Any], chat: dict[str, Any] | None = None) -> dict[str, Any]:
        """What decides the output bytes: OUTPUT_FIELDS, the tokenizer's content identity and, for
        format="chat", `chat` (the stores' chat description: format, template fingerprint, policy, reasoning)."""
        settings = {name: getattr(self, name) for name in OUTPUT_FIELDS}
        settings["inputs"] = list(self.inputs)
        if self.steps:  # runs without steps keep the fingerprints they always had
            settings["steps"] = [dict(spec) for spec in self.steps]
        if self.keep_rejected:
            settings["keep_rejected"] = True
        settings["tokenizer"] = {k: tokenizer_identity[k] for k in ("kind", "fingerprint", "vocab_size", "eod_id")}
        settings["format"] = OUTPUT_FORMAT
        if self.format == "chat":  # text runs keep the fingerprints they always had
            if chat is None:
                raise ConfigError("PrepareConfig.output_settings: format='chat' needs the chat description")
            settings["chat"] = dict(chat)
        return settings


FLAGS = {
    "tokenizer": "--tokenizer",
    "tokenizer_engine": "--tokenizer-engine",
    "text_key": "--text-key",
    "workers": "--workers",
    "append_eod": "--no-eod",
    "shard_by": "--shard-by",
    "shard_tokens": "--shard-tokens",
    "on_error": "--on-error",
    "max_chars_per_piece": "--max-chars-per-piece",
    "steps": "--steps",
    "keep_rejected": "--keep-rejected",
    "executor": "--executor",
    "ray_address": "--address",
    "allow_empty": "--allow-empty",
    "format": "--format",
    "chat_template": "--chat-template",
    "chat_policy": "--chat-policy",
    "reasoning": "--reasoning",
    "chat_format": "--chat-format",
    "completion_only_loss": "--no-completion-only-loss",
}
"""The `tokenport prepare` flag of each field, so a message names what the user typed either way."""


def config_from_options(inputs: Sequence[str], output: str, options: Mapping[str, Any]) -> PrepareConfig:
    """A PrepareConfig from the fields a user set (the rest keep their defaults), refusing a field
    that means nothing without another: shard_tokens needs shard_by "tokens", ray_address executor "ray";
    and the text settings (text_key, append_eod, max_chars_per_piece) with format "chat"."""
    if "shard_tokens" in options and options.get("shard_by") != "tokens":
        raise ConfigError(
            "--shard-tokens sizes parts only with --shard-by tokens; add --shard-by tokens, "
            "or drop --shard-tokens to get one part per input file"
        )
    if options.get("ray_address") is not None and options.get("executor") != "ray":
        raise ConfigError(
            "--address names a Ray cluster only with --executor ray; add --executor ray, "
            "or drop --address to prepare with local worker processes"
        )
    if options.get("format") == "chat":
        for name in ("text_key", "append_eod", "max_chars_per_piece"):
            if name in options:
                raise ConfigError(
                    f"{FLAGS[name]} applies to text documents, not to --format chat (conversations are whole "
                    f"records, rendered by the chat template); drop {FLAGS[name]}"
                )
    return PrepareConfig(inputs=tuple(inputs), output=output, **options)


def load_steps(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The cleaning steps of a steps file (JSON, or YAML): a list of {"step": KIND, ...}, or {"steps": [...]}.

    Each is checked (its kind, its options' names and types) here, so a ConfigError names the file
    and the step's position and option.
    """
    path = os.fspath(path)
    data = parse_structured(read_text(path, "steps file"), path)
    if isinstance(data, dict):
        if set(data) != {"steps"}:
            keys = ", ".join(repr(key) for key in data) or "none"
            raise ConfigError(
                f"{path}: a steps file is a list of steps, or a mapping with only the key 'steps' (keys here: "
                f"{keys}); put the steps in a list under 'steps'"
            )
        data = data["steps"]
    try:
        return list(check_steps(data))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _named(name: str, value: Any) -> str:
    return f"PrepareConfig.{name}={value!r} ({FLAGS[name]})" if name in FLAGS else f"PrepareConfig.{name}={value!r}"


def fingerprint(settings: dict[str, Any]) -> str:
    """A digest of output settings: equal digests mean runs that produce the same bytes."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

"""PrepareConfig: what `prepare` reads, how it tokenizes, and how it cuts the output into stores."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..._checks import check_int
from ..._files import parse_structured, read_text
from ..._registry import load_plugins
from ...chat.formats import FORMATS as CHAT_FORMATS
from ...chat.masks import POLICIES as CHAT_POLICIES
from ...chat.masks import REASONING
from ...errors import ConfigError
from ...tokenizers import ENGINES, SPEC_FORMS
from ..steps.registry import check_steps
from .options import OPTIONS, PrepareOption, check_new, flag_of, resolve_options

SHARD_BY = ("file", "tokens")
ON_ERROR = ("stop", "skip")
EXECUTORS = ("local", "ray")
INPUT_FORMATS = ("text", "chat")
_RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
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
      jsonl is ``.jsonl``/``.json``/``.ndjson``, parquet ``.parquet``, Arrow ``.arrow``; a text file
      (one document) has no suffix or one of ``tokenport.corpus.inputs.sources.TEXT_SUFFIXES`` (.txt,
      .md, .py...); ``.gz``/``.zst``/``.bz2``/``.xz`` are decompressed. Any other suffix (.csv, .pdf...),
      named or found in a directory, is refused before any work, unless `as_text`.
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
      that workers get units of work of about this size (inputs of fewer than 8 such units are cut
      finer, down to 1 MiB, so a few MB keep every worker busy). Compressed jsonl is decompressed once
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
      The output is the same either way. A task whose node dies is run again on another node (Ray
      retries it; a finished unit whose result was lost with its node is recomputed), so a run
      survives node loss with the same output.
    ray_resources: custom Ray resources each unit's task needs besides its CPU, e.g. ``{"prep": 1}``:
      units then run only on nodes that have them (worker nodes, keeping the head free for the
      driver). None: any node with a free CPU. Only with executor="ray".
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
    as_text: read inputs of a suffix prepare does not know (.csv, .html...) as text files, one
      document each, instead of refusing them. It changes what is accepted, never what an accepted
      run writes, so it is no output setting (and the manifest records it only when set).
    id_field: the jsonl field, parquet or Arrow column naming each input document (a URL, a source
      id): a string, or an integer kept as its decimal text, recorded in ``OUTPUT/provenance.npz`` so
      ``tokenport why --id`` and ``tokenport where --id`` find the document by it. A record without it
      has none; one whose value is of another type (a list, an object, a float, a bool) has none and is
      counted (``provenance.npz``'s header, and a warning). Text files have none; chat runs record no
      provenance. None: keep no identifiers. It changes no store byte (only ``provenance.npz``).
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
    ray_resources: Mapping[str, float] | None = None
    allow_empty: bool = False
    format: str = "text"
    chat_template: str | None = None
    chat_policy: str = "assistant"
    reasoning: str = "train"
    chat_format: str | None = None
    completion_only_loss: bool = True
    as_text: bool = False
    id_field: str | None = "id"

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
        if self.id_field is not None and (not isinstance(self.id_field, str) or not self.id_field):
            raise ConfigError(f"{_named('id_field', self.id_field)}: must be a field name, or None to keep none")
        if self.format == "chat" and self.id_field not in ("id", None):
            raise ConfigError(
                f"{_named('id_field', self.id_field)}: chat runs record no provenance, so keep no identifiers; drop it"
            )
        if self.id_field == self.text_key and self.format == "text":
            raise ConfigError(
                f"{_named('id_field', self.id_field)}: is the text field (text_key) too; name the field holding "
                "each document's identifier, or None (--id-field none) to keep none"
            )
        for name in ("workers", "shard_tokens", "max_chars_per_piece", "unit_bytes", "batch_size"):
            value = getattr(self, name)
            limit = MAX_WORKERS if name == "workers" else None  # each worker is a process started up front
            checked = check_int(f"PrepareConfig.{name}", value, 1, limit, what=flag_of(name) or "a positive integer")
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
        self._check_ray_resources()
        for name in ("keep_rejected", "append_eod", "allow_empty", "completion_only_loss", "as_text"):
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

    def _check_ray_resources(self) -> None:
        """ray_resources: None, or names of custom resources (not CPU/GPU/memory) to positive amounts, with Ray."""
        resources = self.ray_resources
        if resources is None:
            return
        label = _named("ray_resources", resources)
        if self.executor != "ray":
            raise ConfigError(f"{label}: places Ray tasks; add executor='ray' (--executor ray) or drop it")
        if not isinstance(resources, Mapping) or not resources:
            raise ConfigError(f"{label}: give a mapping of resource names to amounts, e.g. {{'prep': 1}}, or None")
        for name, amount in resources.items():
            if not isinstance(name, str) or not name or name in _RAY_BUILTIN_RESOURCES:
                raise ConfigError(
                    f"{label}: {name!r} is no custom resource name; name one your nodes declare "
                    f"(not {', '.join(_RAY_BUILTIN_RESOURCES)}: a unit takes one CPU)"
                )
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < math.inf:
                raise ConfigError(f"{label}: the amount of {name!r} must be a positive number, not {amount!r}")
        object.__setattr__(self, "ray_resources", {name: float(resources[name]) for name in sorted(resources)})

    @classmethod
    def from_options(cls, inputs: Sequence[str] | str | os.PathLike, output: str, **options: Any) -> PrepareConfig:
        """A config from settings by name, as ``tokenport prepare`` builds one from its flags: the
        fields, and the options plugins registered (`register_prepare_option`); see `config_from_options`."""
        listed = [os.fspath(inputs)] if isinstance(inputs, (str, os.PathLike)) else inputs
        return config_from_options(listed, output, options)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able copy of every field (kept in the dataset manifest)."""
        data = asdict(self)
        data["inputs"] = list(self.inputs)
        data["steps"] = [dict(spec) for spec in self.steps]
        if not self.as_text:  # manifests of runs without it keep the bytes they always had
            del data["as_text"]
        if self.id_field == "id":  # likewise for the default identifier field
            del data["id_field"]
        if self.ray_resources is None:  # likewise without Ray resources
            del data["ray_resources"]
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
        if self.id_field != "id" and self.format == "text":  # runs with the default keep their fingerprints
            settings["id_field"] = self.id_field
        keys = ("kind", "fingerprint", "vocab_size", "eod_id")  # no eod_id: a tokenizer without one
        settings["tokenizer"] = {k: tokenizer_identity[k] for k in keys if k in tokenizer_identity}
        settings["format"] = OUTPUT_FORMAT
        if self.format == "chat":  # text runs keep the fingerprints they always had
            if chat is None:
                raise ConfigError("PrepareConfig.output_settings: format='chat' needs the chat description")
            settings["chat"] = dict(chat)
        return settings


_OWN = (
    ("tokenizer", PrepareOption("--tokenizer", "a tokenizer spec: " + "; ".join(SPEC_FORMS) + " (default: {default})")),
    (
        "tokenizer_engine",
        PrepareOption(
            "--tokenizer-engine",
            "run an hf: tokenizer with gigatoken where it gives HF's ids ('auto'), or force one (default: {default})",
            choices=lambda: ENGINES,
        ),
    ),
    ("text_key", PrepareOption("--text-key", "the JSON/parquet field holding the text (default: {default})")),
    ("workers", PrepareOption("--workers", "worker processes (default: all cores)", parse=int)),
    ("append_eod", PrepareOption("--no-eod", "do not append the end-of-document token", switch=False)),
    (
        "shard_by",
        PrepareOption(
            "--shard-by",
            "%(choices)s: one store per input file, or by size (default: {default})",
            choices=lambda: SHARD_BY,
            metavar="KIND",
        ),
    ),
    (
        "shard_tokens",
        PrepareOption("--shard-tokens", "tokens per output store (--shard-by tokens; default: {default})", parse=int),
    ),
    (
        "max_chars_per_piece",
        PrepareOption(
            "--max-chars-per-piece", "split longer documents before tokenizing (default: {default})", parse=int
        ),
    ),
    (
        "on_error",
        PrepareOption(
            "--on-error",
            "%(choices)s: what malformed input does (default: {default})",
            choices=lambda: ON_ERROR,
            metavar="ACTION",
        ),
    ),
    (
        "steps",
        PrepareOption(
            "--steps",
            'cleaning steps file (JSON, or YAML): a list of {"step": KIND, ...}, or {"steps": [...]}',
            read=lambda path: load_steps(path),
        ),
    ),
    (
        "executor",
        PrepareOption(
            "--executor",
            "%(choices)s: local worker processes, or one Ray task per unit (the output directory "
            "must be shared) (default: {default})",
            choices=lambda: EXECUTORS,
            metavar="EXECUTOR",
        ),
    ),
    (
        "ray_address",
        PrepareOption("--address", "Ray cluster address for --executor ray (e.g. auto)", metavar="ADDRESS"),
    ),
    (
        "ray_resources",
        PrepareOption(
            "--ray-resources",
            "custom Ray resources each unit's task needs, NAME=AMOUNT[,NAME=AMOUNT...] (e.g. prep=1): units run "
            "only on nodes that declare them",
            parse=lambda text: parse_resources(text),
            metavar="RESOURCES",
        ),
    ),
    (
        "keep_rejected",
        PrepareOption(
            "--keep-rejected",
            "write documents the steps dropped, with step and reason, to OUTPUT/rejected/",
            switch=True,
        ),
    ),
    (
        "allow_empty",
        PrepareOption(
            "--allow-empty", "succeed even when no document is left (by default that is an error)", switch=True
        ),
    ),
    (
        "format",
        PrepareOption(
            "--format",
            "%(choices)s: documents of text, or conversations to chat stores with loss masks (default: {default})",
            choices=lambda: INPUT_FORMATS,
            metavar="FORMAT",
        ),
    ),
    (
        "chat_template",
        PrepareOption(
            "--chat-template",
            "--format chat: 'chatml', a Jinja file or a tokenizer directory (default: the tokenizer's own)",
        ),
    ),
    (
        "chat_policy",
        PrepareOption(
            "--chat-policy",
            "--format chat: %(choices)s: which tokens carry loss (default: {default})",
            choices=lambda: CHAT_POLICIES,
            metavar="POLICY",
        ),
    ),
    (
        "reasoning",
        PrepareOption(
            "--reasoning",
            "--format chat: %(choices)s the assistant's reasoning text (default: {default})",
            choices=lambda: REASONING,
            metavar="R",
        ),
    ),
    (
        "chat_format",
        PrepareOption(
            "--chat-format",
            "--format chat: the records' shape, %(choices)s (default: detected per record)",
            choices=lambda: CHAT_FORMATS,
            metavar="SHAPE",
        ),
    ),
    (
        "completion_only_loss",
        PrepareOption(
            "--no-completion-only-loss",
            "--format chat: train a prompt-completion record's prompt too, by --chat-policy "
            "(default: only its completion, as TRL does)",
            switch=False,
        ),
    ),
    (
        "as_text",
        PrepareOption(
            "--as-text",
            "read inputs of other suffixes (.csv, .html...) as text files, one document each (by default "
            "they are refused)",
            switch=True,
        ),
    ),
    (
        "id_field",
        PrepareOption(
            "--id-field",
            "the JSON field / parquet column naming each document (a URL, a source id), kept in provenance.npz "
            "for why --id and where --id; 'none' keeps none (default: {default})",
            metavar="FIELD",
            read=lambda value: None if value in ("", "none") else value,
        ),
    ),
    ("unit_bytes", PrepareOption(None, "bytes of input per unit of work (config only)")),
    ("batch_size", PrepareOption(None, "documents per tokenizer call (config only)")),
)
"""tokenport's own options, one per PrepareConfig field but inputs and output, in the order of their flags."""
for _name, _option in _OWN:
    OPTIONS.register(_name, _option)
OPTIONS.seal_built_ins()
_SETTINGS = tuple(name for name in PrepareConfig.__dataclass_fields__ if name not in ("inputs", "output"))


def register_prepare_option(name: str, option: PrepareOption) -> None:
    """Add a `prepare` option of your own: ``name`` is its config key (``PrepareConfig.from_options``,
    a config file), ``option.flag`` its ``tokenport prepare`` flag, and ``option.apply`` hands its value
    to the settings it configures. ConfigError, changing nothing, for a name or flag taken, or no apply."""
    check_new(name, option, ("inputs", "output", *_SETTINGS))
    OPTIONS.register(name, option)


def prepare_options() -> tuple[tuple[str, PrepareOption], ...]:
    """Every option by config key, plugins' too (loaded now), in the order of their flags."""
    load_plugins()
    return OPTIONS.items()


def options_from_flags(values: Mapping[str, Any]) -> dict[str, Any]:
    """The options a user gave on the command line (`values` by config key; None: not given), each
    read into its config value (``--steps`` names a file: its steps)."""
    given = {}
    for name, option in OPTIONS.items():
        value = values.get(name)
        if value is not None:
            given[name] = value if option.read is None else option.read(value)
    return given


def config_from_options(inputs: Sequence[str], output: str, options: Mapping[str, Any]) -> PrepareConfig:
    """A PrepareConfig from the fields a user set (the rest keep their defaults), refusing a field
    that means nothing without another: shard_tokens needs shard_by "tokens", ray_address executor "ray";
    and the text settings (text_key, append_eod, max_chars_per_piece) with format "chat". A key that is
    not a field is an option a plugin registered (see `register_prepare_option`), handed on by its apply."""
    options = resolve_options(options, _SETTINGS)
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
        for name in ("text_key", "append_eod", "max_chars_per_piece", "id_field"):
            if name in options:
                raise ConfigError(
                    f"{flag_of(name)} applies to text documents, not to --format chat (conversations are whole "
                    f"records, rendered by the chat template); drop {flag_of(name)}"
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


def parse_resources(text: str) -> dict[str, float]:
    """``NAME=AMOUNT[,NAME=AMOUNT...]`` as a mapping (ValueError, which the CLI reports naming its flag)."""
    resources: dict[str, float] = {}
    for item in text.split(","):
        name, equals, amount = item.strip().partition("=")
        if not equals or not name.strip():
            raise ValueError(f"{item!r} is not NAME=AMOUNT")
        resources[name.strip()] = float(amount)
    return resources


def _named(name: str, value: Any) -> str:
    flag = flag_of(name)
    return f"PrepareConfig.{name}={value!r} ({flag})" if flag else f"PrepareConfig.{name}={value!r}"


def fingerprint(settings: dict[str, Any]) -> str:
    """A digest of output settings: equal digests mean runs that produce the same bytes."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

"""A model's chat template, rendered with jinja2 exactly as transformers' `apply_chat_template` renders it.

Same sandbox (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols), the same
globals (`raise_exception`, `strftime_now`, `dict`, `namespace`), the same `tojson` filter and the same
`{% generation %}` marker, whose character spans in the rendered text say which parts the assistant wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np

from ..errors import ConfigError, InputDataError, TokenportError
from ..tokenizers import Tokenizer

__all__ = ["CHATML_TEMPLATE", "ChatTemplate", "load_chat_template"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' and tools %}"
    "{{ '<|im_start|>system\\n# Tools\\n' }}{% for tool in tools %}{{ '\\n' + tool | tojson }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{% if message['reasoning_content'] is string %}"
    "{{ '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% set call = call['function'] if call['function'] is defined else call %}"
    "{% set arguments = call['arguments'] if call['arguments'] is defined else {} %}"
    "{{ '\\n' if message['content'] or not loop.first else '' }}"
    "{{ '<tool_call>\\n{\"name\": ' + call['name'] | tojson + ', \"arguments\": ' }}"
    "{{ (arguments if arguments is string else arguments | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}"
    "{{ message['content'] }}"
    "{% if message['role'] == 'system' and tools %}"
    "{{ '\\n\\n# Tools\\n' }}{% for tool in tools %}{{ '\\n' + tool | tojson }}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The built-in ChatML template (the default for the byte-level tokenizer): assistant turns, their
reasoning, tool calls and end-of-turn marker inside `{% generation %}`; tools listed in the system turn."""

# transformers' SPECIAL_TOKENS_ATTRIBUTES: the named special tokens every render receives as variables
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Names a message's reasoning is passed under; templates read the first (transformers' _REASONING_FIELDS).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_REASONING_KEYS = frozenset(REASONING_FIELDS)
_GENERATION_RE = re.compile(r"\{\%-?\s*generation\s*-?\%\}")  # transformers' test for generation markers
_JINJA_MINIMUM = (3, 1, 6)  # older jinja2 has known sandbox escapes; transformers refuses it too


class ChatTemplate:
    """A chat template's Jinja source, its special tokens and where it came from; renders conversations."""

    def __init__(self, source: str, *, special_tokens: Mapping[str, str] | None = None, origin: str = "string"):
        if not isinstance(source, str) or not source.strip():
            raise ConfigError(f"chat template from {origin}: the source is {source!r}; pass the Jinja template text")
        tokens = dict(special_tokens or {})
        for key, value in tokens.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ConfigError(
                    f"chat template from {origin}: special_tokens[{key!r}]={value!r}; "
                    "pass token names mapped to strings"
                )
        self.source = source
        self.special_tokens = tokens
        self.origin = origin
        self._compiled = _compile(source, origin)  # now, so a bad template fails where it was given
        self._markers = _GENERATION_RE.search(source) is not None

    @classmethod
    def chatml(cls) -> ChatTemplate:
        """The built-in ChatML template (`CHATML_TEMPLATE`)."""
        return cls(CHATML_TEMPLATE, origin="built-in chatml")

    @classmethod
    def from_file(cls, path: str, *, special_tokens: Mapping[str, str] | None = None) -> ChatTemplate:
        """A template from a Jinja file."""
        return cls(_read_text(path), special_tokens=special_tokens, origin=path)

    @classmethod
    def from_tokenizer_dir(cls, path: str, name: str | None = None) -> ChatTemplate:
        """The template a tokenizer directory holds, found where transformers looks for it.

        `chat_template.jinja` and `additional_chat_templates/NAME.jinja` first, else `tokenizer_config.json`'s
        `chat_template` (a string or a list of {name, template}), else `chat_template.json`'s (a processor's
        file); `name` picks one, else "default" (pass
        name="tool_use" for transformers' tool template). The config's named special tokens (bos_token,
        eos_token, ...) become template variables."""
        config_path = os.path.join(path, "tokenizer_config.json")
        config: dict[str, Any] = {}
        if os.path.isfile(config_path):
            try:
                config = json.loads(_read_text(config_path))
            except ValueError as e:
                raise ConfigError(f"{config_path} is not valid JSON: {e}; fix or remove it") from e
            if not isinstance(config, dict):
                raise ConfigError(f"{config_path} holds {type(config).__name__}, not a JSON object")
        templates: dict[str, str] = {}
        jinja_file = os.path.join(path, "chat_template.jinja")
        if os.path.isfile(jinja_file):
            templates["default"] = _read_text(jinja_file)
        extra_dir = os.path.join(path, "additional_chat_templates")
        if os.path.isdir(extra_dir):
            for file in sorted(os.listdir(extra_dir)):
                if file.endswith(".jinja"):
                    templates[file.removesuffix(".jinja")] = _read_text(os.path.join(extra_dir, file))
        if not templates:
            templates = _config_templates(config.get("chat_template"), config_path)
        legacy = os.path.join(path, "chat_template.json")  # a processor's template, as older transformers saved it
        if not templates and os.path.isfile(legacy):
            try:
                templates = _config_templates(json.loads(_read_text(legacy)).get("chat_template"), legacy)
            except (ValueError, AttributeError) as e:
                raise ConfigError(f"{legacy} is not a JSON object with a 'chat_template': {e}; fix or remove it") from e
        if not templates:
            raise ConfigError(
                f"tokenizer directory {path} has no chat template (no chat_template.jinja, no 'chat_template' in "
                "tokenizer_config.json, no chat_template.json); pass a template file (--chat-template FILE) or use "
                "the built-in ChatML (--chat-template chatml)"
            )
        chosen = "default" if name is None else name
        if chosen not in templates:
            raise ConfigError(
                f"tokenizer directory {path} has no chat template named {chosen!r}; "
                f"pass name= one of {sorted(templates)}"
            )
        origin = f"{path} (template {chosen!r})" if len(templates) > 1 else path
        return cls(templates[chosen], special_tokens=_special_tokens(config, config_path), origin=origin)

    @property
    def fingerprint(self) -> str:
        """sha256 hex digest of the template source (for manifests)."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    @property
    def has_generation_markers(self) -> bool:
        """Whether the source has `{% generation %}` blocks marking what the assistant wrote."""
        return self._markers

    def identity(self) -> dict[str, Any]:
        """JSON-able description for a manifest: origin, fingerprint, special tokens, markers."""
        return {
            "origin": self.origin,
            "fingerprint": self.fingerprint,
            "special_tokens": dict(sorted(self.special_tokens.items())),
            "generation_markers": self.has_generation_markers,
        }

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and the (start, end) character spans of its `{% generation %}` blocks.

        As transformers renders: keys whose value is None dropped, reasoning aliased under each of its
        names, the special tokens and `kwargs` (which win) passed as variables."""
        return self.render_prepared(prepare_messages(messages), tools, documents, add_generation_prompt, kwargs)

    def render_prepared(
        self,
        chat: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[str, list[tuple[int, int]]]:
        """`render` of messages already passed through `prepare_messages` (which it would repeat)."""
        variables = {**self.special_tokens, **_plain(dict(kwargs or {}), "kwargs")}
        tool_schemas = None if tools is None else _plain(_check_dicts(tools, "tools"), "tools")
        docs = None if documents is None else _plain(_check_dicts(documents, "documents"), "documents")
        template = self._compiled
        blocks: list[str] = []
        spans: list[tuple[int, int]] = []
        try:
            context = template.new_context(  # a variable named like an argument is refused, as generate() refuses it
                dict(
                    messages=chat,
                    tools=tool_schemas,
                    documents=docs,
                    add_generation_prompt=add_generation_prompt,
                    **variables,
                )
            )
            append = blocks.append
            with template.environment.track_generation(blocks, spans):
                for block in template.root_render_func(context):  # Template.generate's loop, one layer less
                    append(block)
        except TokenportError:
            raise
        except Exception as e:  # the template's own refusals (raise_exception) and its failures on this data
            raise InputDataError(
                f"the chat template from {self.origin} cannot render these messages: {type(e).__name__}: {e}; "
                "fix the conversation or use a template that accepts it"
            ) from e
        return "".join(blocks), spans

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the source and its tokens; the template is compiled again where it is unpickled."""
        return (_rebuild, (self.source, self.special_tokens, self.origin))

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r}, fingerprint={self.fingerprint[:12]!r})"


def load_chat_template(source: str | None = None, tokenizer: Tokenizer | None = None) -> ChatTemplate:
    """The template `source` names: "chatml" (built in), a Jinja file or a tokenizer directory.

    None means the tokenizer's own: the template beside an 'hf:'/'gigatoken:' tokenizer.json, or the
    built-in ChatML for the byte-level tokenizer (or no tokenizer)."""
    if source == "chatml":
        return ChatTemplate.chatml()
    if source is not None:
        if os.path.isdir(source):
            return ChatTemplate.from_tokenizer_dir(source)
        if os.path.isfile(source):
            return ChatTemplate.from_file(source)
        raise ConfigError(
            f"chat template {source!r} is neither 'chatml', a template file nor a tokenizer directory; check the path"
        )
    if tokenizer is None or tokenizer.kind == "byte":
        return ChatTemplate.chatml()
    path = getattr(tokenizer, "path", None)
    if tokenizer.kind in ("hf", "gigatoken") and isinstance(path, str):
        return ChatTemplate.from_tokenizer_dir(os.path.dirname(path))
    raise ConfigError(
        f"the {tokenizer.kind} tokenizer {tokenizer.name!r} carries no chat template; "
        "name one: 'chatml', a template file or a tokenizer directory"
    )


def _rebuild(source: str, special_tokens: dict[str, str], origin: str) -> ChatTemplate:
    """Unpickle a ChatTemplate."""
    return ChatTemplate(source, special_tokens=special_tokens, origin=origin)


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the template sees them: plain data, None values dropped, reasoning under all its names."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise InputDataError(f"messages={messages!r:.80}: pass a non-empty list of message dicts")
    chat = []
    for i, message in enumerate(messages):
        if type(message) is dict and len(message) == 2 and type(message.get("content")) is str:
            if type(message.get("role")) is str:  # {"role", "content"} texts, most messages: plain already
                chat.append(dict(message))
                continue
        elif type(message) is not dict and not isinstance(message, Mapping):
            raise InputDataError(f"messages[{i}] is {type(message).__name__}, not a dict with 'role' and 'content'")
        plain = {k: v for k, v in message.items() if v is not None}
        if not all(type(k) is str and type(v) is str for k, v in plain.items()):  # else it is plain already
            plain = _plain(plain, f"messages[{i}]")
        if not _REASONING_KEYS.isdisjoint(plain):
            reasoning = next((plain[key] for key in REASONING_FIELDS if plain.get(key) is not None), None)
            if reasoning is not None:
                plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        chat.append(plain)
    return chat


def _check_dicts(items: Sequence[Any], field: str) -> Sequence[Any]:
    """`items` if it is a list of dicts (JSON schemas for tools), else an InputDataError naming `field`."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InputDataError(f"{field}={items!r:.80}: pass a list of dicts")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InputDataError(
                f"{field}[{i}] is {type(item).__name__}; pass a dict (a tool is given as its JSON schema)"
            )
    return items


def _plain(value: Any, field: str) -> Any:
    """`value` rebuilt from plain JSON types (as transformers does before a render); other objects are refused."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value)  # the common message: a copy is all it needs
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, np.generic):
        return _plain(value.item(), field)
    if isinstance(value, Mapping):
        return {_plain(k, field): _plain(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{field}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(_plain(v, f"{field}[{i}]") for i, v in enumerate(value))
    raise InputDataError(f"{field} is a {type(value).__name__}; a chat template is given JSON data only")


def _config_templates(value: Any, config_path: str) -> dict[str, str]:
    """The templates of tokenizer_config.json's `chat_template`: a string, or a list of {name, template}."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list) and all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
    ):
        return {t["name"]: t["template"] for t in value}
    raise ConfigError(
        f"{config_path}: 'chat_template' is {type(value).__name__}; expected a string or a list of "
        "{'name': ..., 'template': ...} objects"
    )


def _special_tokens(config: dict[str, Any], config_path: str) -> dict[str, str]:
    """The named special tokens of a tokenizer config (a string, or an AddedToken dict with 'content')."""
    tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{config_path}: {name!r} is {value!r}; expected a string or {{'content': ...}}")
        tokens[name] = value
    return tokens


def _read_text(path: str) -> str:
    """A UTF-8 text file's contents, or a ConfigError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read chat template file {path}: {e}; check the path") from e


_DICT_ATTRIBUTES = frozenset(dir(dict))  # names a template's `d.name` / `d['name']` finds on a dict itself


def _compile(source: str, origin: str) -> Any:
    """`source` compiled in transformers' sandboxed environment, with a generation tracker of its own."""
    jinja2 = _jinja()
    tracker = _generation_tracker(jinja2, origin)
    environment = _chat_environment(jinja2, tracker)
    env = environment(trim_blocks=True, lstrip_blocks=True, extensions=[tracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _template_namespace(jinja2)
    try:
        template = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ConfigError(f"the chat template from {origin} is not valid Jinja: {e.message} (line {e.lineno})") from e
    template.globals = dict(template.globals)  # a ChainMap over env.globals, copied by every render: flattened once
    return template


def _jinja() -> Any:
    """The jinja2 package with the modules a chat template needs, refused when missing or too old."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.nodes
        import jinja2.sandbox
        import jinja2.utils
    except ImportError as e:
        raise ConfigError("chat templates need the 'jinja2' package: pip install 'tokenport[chat]'") from e
    version = tuple(int(p) for p in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < _JINJA_MINIMUM:
        raise ConfigError(
            f"jinja2 {jinja2.__version__} has known sandbox escapes and chat templates are untrusted code; "
            "pip install 'jinja2>=3.1.6'"
        )
    return jinja2


def _raise_exception(message: str) -> None:
    """A template's `raise_exception(message)`: a TemplateError with its message."""
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
    """transformers' `tojson` filter: json.dumps, non-ASCII kept."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    """A template's `strftime_now(format)`: the local time now."""
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict(...)` without attribute access to the real type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


def _generation_tracker(jinja2: Any, origin: str) -> Any:
    """A jinja extension class for `{% generation %}` blocks of the template from `origin`."""

    class GenerationTracker(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: records the block's span in the text generated so far."""

        tags = {"generation"}

        def __init__(self, environment: Any) -> None:
            super().__init__(environment)
            environment.extend(track_generation=self.track)
            self._blocks: list[str] | None = None
            self._spans: list[tuple[int, int]] | None = None

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

        def _generation(self, caller: Any) -> Any:
            text = caller()
            if self._blocks is not None and self._spans is not None:
                start = len("".join(self._blocks))  # what the renderer has yielded so far, as transformers counts
                self._spans.append((start, start + len(text)))
            return text

        @contextmanager
        def track(self, blocks: list[str], spans: list[tuple[int, int]]) -> Iterator[None]:
            if self._blocks is not None:
                raise ConfigError(
                    f"the chat template from {origin} is already rendering (in another thread?); "
                    "a ChatTemplate renders one conversation at a time: use one per thread"
                )
            self._blocks, self._spans = blocks, spans
            try:
                yield
            finally:
                self._blocks = self._spans = None

    return GenerationTracker


def _template_namespace(jinja2: Any) -> Any:
    """The class of a template's `namespace(...)`, refusing underscore-prefixed attributes."""

    class TemplateNamespace(jinja2.utils.Namespace):
        """`namespace(...)` refusing underscore-prefixed attributes."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace.check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}."
                )

    return TemplateNamespace


def _chat_environment(jinja2: Any, tracker: Any) -> Any:
    """The sandboxed environment class of a template whose generation blocks `tracker` records."""

    class ChatEnvironment(jinja2.sandbox.ImmutableSandboxedEnvironment):
        """transformers' sandbox, answering its most frequent questions faster with the same answers.

        A key of a plain dict that is no dict attribute is looked up directly (the sandbox would first
        try the attribute and fail); the sandbox's verdict on an attribute, which depends only on the
        object's type and the name, is remembered per (type, name); the generation tracker's own method
        is called without the safety check every call gets, and without Context.call's inspection (it
        takes no context, so it is called as Context.call would call it)."""

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self._verdicts: dict[tuple[type, str], bool] = {}

        def getitem(self, obj: Any, argument: Any) -> Any:
            if type(obj) is dict and type(argument) is str and argument not in _DICT_ATTRIBUTES:
                try:
                    return obj[argument]
                except KeyError:
                    return self.undefined(obj=obj, name=argument)
            return super().getitem(obj, argument)

        def getattr(self, obj: Any, attribute: str) -> Any:
            if type(obj) is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            key = (type(obj), attr)
            verdict = self._verdicts.get(key)
            if verdict is None:
                verdict = self._verdicts[key] = super().is_safe_attribute(obj, attr, value)
            return verdict

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's names)
            if getattr(__obj, "__func__", None) is tracker._generation:  # what Context.call does for it
                kwargs.pop("_block_vars", None)
                kwargs.pop("_loop_vars", None)
                try:
                    return __obj(*args, **kwargs)
                except StopIteration:
                    return __self.undefined("value was undefined because a callable raised a StopIteration exception")
            return super().call(__context, __obj, *args, **kwargs)

    return ChatEnvironment

"""A `prepare` option declared once: its config key, its `tokenport prepare` flag, its help and how
its value is read. The CLI's flags and the messages that name a flag are generated from the
declarations; an option from outside tokenport is one more declaration, registered by name.

An option's registered name is its key everywhere a setting is named: a keyword of
``PrepareConfig.from_options`` and a key of a YAML/JSON config (``from_options(inputs, output,
**mapping)``). An option that is a `PrepareConfig` field passes its value to that field. An option of
a plugin has an ``apply`` hook instead: it hands its value to the fields it configures (typically a
cleaning step appended to ``steps``), so the run's manifest, fingerprint and resumption see an
ordinary config.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._registry import Registry
from ...errors import ConfigError

__all__ = ["OPTIONS", "RESERVED_FLAGS", "PrepareOption", "check_new", "flag_of", "resolve_options"]

Choices = Sequence[str] | Callable[[], Sequence[str]]
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*\Z")


@dataclass(frozen=True)
class PrepareOption:
    """One setting of ``prepare``, declared once.

    flag: its ``tokenport prepare`` flag (``--name``), or None for a setting only a config takes.
    help: the flag's help; ``{default}`` is filled with the PrepareConfig default of the field,
      ``%(choices)s`` with the choices (argparse's placeholders, so a literal percent is ``%%``).
    parse: the flag's text -> the value (argparse's ``type``; a ValueError refuses it naming the flag).
    choices: the values allowed: a sequence, or a function returning one (read when the parser is built).
    metavar: the value's name in the usage line.
    switch: True or False for a flag that takes no value and sets the option to that value.
    read: the flag's value -> the config's, when the flag names something else (``--steps`` a file of steps).
    apply: for an option that is not a PrepareConfig field: ``apply(value, fields)`` -> the fields it sets,
      merged over ``fields`` (the others given); a ValueError or TypeError refuses the value, naming the option.
    """

    flag: str | None
    help: str
    parse: Callable[[str], Any] | None = None
    choices: Choices | None = None
    metavar: str | None = None
    switch: bool | None = None
    read: Callable[[Any], Any] | None = None
    apply: Callable[[Any, Mapping[str, Any]], Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.flag is not None and (not isinstance(self.flag, str) or not _FLAG.match(self.flag)):
            raise ConfigError(f"PrepareOption.flag={self.flag!r}: a flag is '--' and lower-case letters, digits, '-'")
        if not isinstance(self.help, str) or not self.help:
            raise ConfigError(f"PrepareOption {self.flag}: give a help text")
        for name in ("parse", "choices", "read", "apply"):
            value = getattr(self, name)
            if value is not None and not (callable(value) or (name == "choices" and _strings(value))):
                raise ConfigError(f"PrepareOption {self.flag}: {name}={value!r:.60} must be a function or None")
        if self.switch is not None and not isinstance(self.switch, bool):
            raise ConfigError(f"PrepareOption {self.flag}: switch={self.switch!r} must be True, False or None")
        if self.switch is not None and (self.parse, self.choices, self.metavar) != (None, None, None):
            raise ConfigError(f"PrepareOption {self.flag}: a switch takes no value: drop parse, choices and metavar")

    def allowed(self) -> Sequence[str] | None:
        """The choices, read now (a function is called, so its values are current)."""
        return self.choices() if callable(self.choices) else self.choices


def _strings(value: object) -> bool:
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, str) for v in value)


RESERVED_FLAGS = ("--output", "--force", "--json", "--help", "--verbose", "--quiet", "--version")
"""The prepare verb's own flags (not settings): no option may take them."""

OPTIONS: Registry[PrepareOption] = Registry(
    "prepare option", lambda item: isinstance(item, PrepareOption), "a tokenport.corpus.PrepareOption"
)
"""Every option by its config key, in flag order: tokenport's own (registered by ``config``), then plugins'."""


def flag_of(name: str) -> str | None:
    """The ``tokenport prepare`` flag of option ``name`` (None: no flag, or no such option)."""
    return OPTIONS.get(name).flag if name in OPTIONS else None


def check_new(name: str, option: PrepareOption, taken: Sequence[str]) -> None:
    """Refuse a plugin's option that would shadow a setting (`taken`) or a flag, or that hands its
    value nowhere: a ConfigError naming it."""
    if not isinstance(option, PrepareOption):
        return  # the registry refuses it, naming what it expected
    if name in taken:
        raise ConfigError(f"register_prepare_option({name!r}): {name!r} is a setting of prepare already; pick another")
    if option.apply is None:
        raise ConfigError(
            f"register_prepare_option({name!r}): give apply=, the function that hands the value to the "
            "settings it configures (an option of tokenport's own is a PrepareConfig field)"
        )
    owner = "the prepare verb" if option.flag in RESERVED_FLAGS else None
    for other, known in OPTIONS.items():
        if option.flag is not None and option.flag == known.flag and other != name:
            owner = repr(other)
    if owner is not None:
        raise ConfigError(f"register_prepare_option({name!r}): {option.flag} is a flag of {owner}; pick another")


def resolve_options(options: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The PrepareConfig fields of `options` (config keys -> values): `fields` pass as they are, each
    other key must be a registered option (plugins are loaded for it), whose ``apply`` hands its value on."""
    resolved = {name: value for name, value in options.items() if name in fields}
    for name, value in options.items():
        if name in fields:
            continue
        option = OPTIONS.get(name, where="prepare options") if isinstance(name, str) else None
        if option is None or option.apply is None:
            raise ConfigError(f"prepare options: {name!r} is not an option name; pass the settings of PrepareConfig")
        label = f"{name}={value!r}" + (f" ({option.flag})" if option.flag else "")
        resolved.update(_applied(label, option.apply, option.allowed(), value, resolved, fields))
    return resolved


def _applied(
    label: str,
    apply: Callable[[Any, Mapping[str, Any]], Mapping[str, Any]],
    allowed: Sequence[str] | None,
    value: Any,
    given: Mapping[str, Any],
    fields: Sequence[str],
) -> Mapping[str, Any]:
    """What `apply` makes of `value` over the fields `given`, or ConfigError naming the option (`label`)."""
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{label}: must be one of {', '.join(allowed)}")
    try:
        sets = apply(value, dict(given))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{label} is invalid: {exc}") from None
    if not isinstance(sets, Mapping) or not all(isinstance(key, str) and key in fields for key in sets):
        raise ConfigError(
            f"{label}: the option's apply returned {sets!r:.80}, not a mapping of PrepareConfig fields; fix the plugin"
        )
    return sets

"""Each prepare option declared once: every PrepareConfig setting has one declaration, and the CLI's
flags, their order and the messages naming a flag come from the declarations."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from tokenport.cli import _parser
from tokenport.corpus import PrepareConfig
from tokenport.corpus.run.config import config_from_options, options_from_flags, prepare_options
from tokenport.corpus.run.options import RESERVED_FLAGS, flag_of
from tokenport.errors import ConfigError


def _prepare_flags() -> list[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["prepare"]
    return [action.option_strings[-1] for action in sub._actions if action.option_strings]


def test_every_setting_is_declared_once_and_every_flag_is_generated():
    own = [(name, option) for name, option in prepare_options() if option.apply is None]
    fields = [f.name for f in dataclasses.fields(PrepareConfig) if f.name not in ("inputs", "output")]
    assert sorted(name for name, _ in own) == sorted(fields)
    flags = [option.flag for _, option in prepare_options() if option.flag is not None]
    assert len(set(flags)) == len(flags) and not set(flags) & set(RESERVED_FLAGS)
    assert _prepare_flags() == ["--help", "--verbose", "--quiet", "--json", "--output", "--force", *flags]


def test_messages_name_the_declared_flag(tmp_path):
    assert flag_of("ray_address") == "--address" and flag_of("unit_bytes") is None and flag_of("nope") is None
    with pytest.raises(ConfigError, match=r"PrepareConfig.workers=0 is invalid: pass --workers"):
        PrepareConfig(inputs=("x",), output="o", workers=0)
    with pytest.raises(ConfigError, match="--no-eod applies to text documents"):
        config_from_options(["x"], "o", {"format": "chat", "append_eod": False})
    with pytest.raises(ConfigError, match=r"PrepareConfig.shard_by='x' \(--shard-by\): must be one of file, tokens"):
        PrepareConfig(inputs=("x",), output="o", shard_by="x")


def test_flags_read_into_settings(tmp_path):
    (tmp_path / "steps.yaml").write_text("steps:\n  - step: gopher_quality\n")
    given = {"steps": str(tmp_path / "steps.yaml"), "workers": 2, "tokenizer": None, "output": "o", "verb": "prepare"}
    assert options_from_flags(given) == {"steps": [{"step": "gopher_quality"}], "workers": 2}

"""A prepare option from outside tokenport: one declaration and one register call make a setting
`PrepareConfig.from_options` takes and a flag of `tokenport prepare` (as an entry-point plugin too),
handed to the cleaning step it configures; a bad value is refused naming the flag."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests._support.plugins import write_plugin
from tokenport.cli import main
from tokenport.corpus import PrepareConfig, PrepareOption, Step, prepare, register_prepare_option, register_step
from tokenport.corpus.run.options import OPTIONS, RESERVED_FLAGS
from tokenport.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class DropWord(Step):
    """The toy step: drop every document holding `word` (workers import it by this module's name)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def reject(self, text: str) -> str | None:
        return "toy_word" if self.word in text else None


def _drop_word(value: Any, fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """The toy option's value becomes one more step, after the steps given."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("give a non-empty word")
    return {"steps": [*fields.get("steps", ()), {"step": "toy_drop", "word": value}]}


TOY = PrepareOption("--toy-drop-word", "drop documents holding this word (a toy)", metavar="WORD", apply=_drop_word)


def register_toy() -> None:
    """What the toy plugin does on import: its step, and the option that configures it."""
    register_step("toy_drop", DropWord)
    register_prepare_option("toy_drop_word", TOY)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    texts = ["a public line", "a secret line", "another public line"]
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def test_a_registered_option_configures_prepare_from_python(corpus, tmp_path, capsys):
    register_toy()
    register_toy()  # the same objects again: a no-op
    config = PrepareConfig.from_options(corpus, str(tmp_path / "out"), toy_drop_word="secret", workers=1)
    assert config.steps == ({"step": "toy_drop", "word": "secret"},)
    result = prepare(config)
    assert result.documents == 2 and result.steps["0:toy_drop"]["removed:toy_word"] == 1
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    assert "--toy-drop-word WORD" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["", "  ", 3, None])
def test_a_bad_value_is_refused_naming_the_flag_and_nothing_is_written(corpus, tmp_path, value):
    register_toy()
    with pytest.raises(ConfigError, match=r"toy_drop_word=.* \(--toy-drop-word\) is invalid: give a non-empty word"):
        prepare(PrepareConfig.from_options(corpus, str(tmp_path / "out"), toy_drop_word=value))
    assert not (tmp_path / "out").exists()


def test_an_unknown_setting_is_a_config_error_naming_it(corpus, tmp_path):
    """A misspelt key used to escape as a bare TypeError from PrepareConfig(**options)."""
    with pytest.raises(ConfigError, match="unknown prepare option 'tokenzier'"):
        PrepareConfig.from_options(corpus, str(tmp_path / "out"), tokenzier="byte")


TOY_PLUGIN = "from tests.extending.test_prepare_option import register_toy\n\nregister_toy()\n"


def _plugin(tmp_path: Path, source: str = TOY_PLUGIN) -> str:
    """A plugin directory on a path: toy_plugin (by default, registering the toy) is a tokenport.plugins entry point."""
    plugin = write_plugin(tmp_path / "plugin", "toy_plugin", source, name="toy")
    return os.pathsep.join([plugin, str(ROOT), *sys.path[1:]])


def _tokenport(path: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "10000"}
    return subprocess.run([sys.executable, "-m", "tokenport", *argv], capture_output=True, text=True, env=env)


def test_the_plugin_option_is_a_flag_of_tokenport_prepare(corpus, tmp_path):
    path = _plugin(tmp_path)
    shown = _tokenport(path, "prepare", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--toy-drop-word WORD  drop documents holding this word (a toy)" in shown.stdout
    out = str(tmp_path / "out")
    done = _tokenport(path, "prepare", str(corpus), "-o", out, "--toy-drop-word", "secret", "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["documents"] == 2
    refused = _tokenport(path, "prepare", str(corpus), "-o", str(tmp_path / "bad"), "--toy-drop-word", " ")
    assert refused.returncode == 2 and "(--toy-drop-word) is invalid: give a non-empty word" in refused.stderr
    assert not (tmp_path / "bad").exists()


def test_a_broken_plugin_is_one_line_naming_it(tmp_path):
    """Loading the plugins to list prepare's flags used to let the plugin's error escape as a traceback."""
    refused = _tokenport(_plugin(tmp_path, "raise RuntimeError('boom')\n"), "prepare", "--help")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("tokenport: error: tokenport plugin 'toy' (toy_plugin) failed to load")


def _refusals() -> list[tuple[str, Any]]:
    return [
        ("workers", TOY),  # a setting of prepare
        ("inputs", TOY),
        ("toy_drop_word", PrepareOption("--toy-other", "another", apply=_drop_word)),  # name taken
        ("toy_two", PrepareOption("--workers", "taken flag", apply=_drop_word)),
        ("toy_two", PrepareOption("--force", "the verb's flag", apply=_drop_word)),
        ("toy_two", PrepareOption("--toy-two", "no apply")),
        ("toy_two", "--toy-two"),
        ("", TOY),
    ]


def test_refused_registrations_change_nothing():
    register_toy()
    before = OPTIONS.items()
    for name, option in _refusals():
        with pytest.raises(ConfigError):
            register_prepare_option(name, option)
        assert OPTIONS.items() == before
    for bad in (
        {"flag": "-t"},
        {"flag": "--Toy"},
        {"help": ""},
        {"parse": 3},
        {"switch": True, "metavar": "X"},
        {"switch": 1},
    ):
        with pytest.raises(ConfigError):
            PrepareOption(**{"flag": "--toy-x", "help": "x", **bad})
    assert "--output" in RESERVED_FLAGS


def test_random_registrations_match_a_model(monkeypatch):
    """Random register calls against a dict model: an accepted call adds its option, a refused one changes nothing."""
    monkeypatch.setattr(OPTIONS, "_items", dict(OPTIONS._items))
    rng = random.Random(27)
    model = dict(OPTIONS.items())
    options = [
        PrepareOption(flag, "a toy", apply=apply)
        for flag in ("--toy-a", "--toy-b", "--workers", "--json", None)
        for apply in (_drop_word, None)
    ]
    for _ in range(200):
        name, option = rng.choice(["toy_a", "toy_b", "toy_c", "workers", "output"]), rng.choice(options)
        flags = {other: known.flag for other, known in model.items() if other != name}
        ok = (
            name not in ("workers", "output")
            and model.get(name, option) is option
            and option.apply is not None
            and (option.flag is None or (option.flag not in flags.values() and option.flag not in RESERVED_FLAGS))
        )
        if ok:
            register_prepare_option(name, option)
            model[name] = option
        else:
            with pytest.raises(ConfigError):
                register_prepare_option(name, option)
        assert dict(OPTIONS.items()) == model

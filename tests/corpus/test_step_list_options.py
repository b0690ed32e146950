"""A string given where a step option takes a list is refused, never read one character at a time."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence

import pytest

from tokenport.corpus import Step, register_step
from tokenport.corpus.run.config import load_steps
from tokenport.corpus.steps.registry import STEP_KINDS, check_steps, wants_collection
from tokenport.errors import ConfigError


def list_options() -> list[tuple[str, str]]:
    """(step kind, option) for every option of every registered step annotated as a collection."""
    found = []
    for kind, step in STEP_KINDS.items():
        hints = typing.get_type_hints(step.__init__)
        found += [(kind, name) for name, hint in hints.items() if name != "return" and wants_collection(hint)]
    return found


def test_every_list_option_of_every_step_refuses_a_string_naming_the_fix():
    options = list_options()
    assert ("pii", "kinds") in options and ("language", "languages") in options and len(options) >= 10
    for kind, name in options:
        with pytest.raises(
            ConfigError, match=rf"steps\[0\] \({kind}\): option '{name}'='ab' is a string.*{name}: \[ab\]"
        ):
            check_steps([{"step": kind, name: "ab"}])


def test_a_steps_file_names_itself_the_step_and_the_fix(tmp_path):
    path = tmp_path / "steps.yaml"
    path.write_text("steps:\n  - step: pii\n    kinds: email\n")
    with pytest.raises(ConfigError, match=rf"{path}: steps\[0\] \(pii\): option 'kinds'='email'.*kinds: \[email\]"):
        load_steps(path)


class _Tagger(Step):
    """A step of a user's own whose list option msgspec cannot check (an Iterable)."""

    def __init__(self, tags: Iterable[str] = ()) -> None:
        super().__init__()
        self.tags = list(tags)


def test_a_registered_step_with_an_iterable_option_refuses_a_string_too():
    register_step("test_tagger", _Tagger)
    try:
        with pytest.raises(ConfigError, match=r"option 'tags'='spam' is a string.*tags: \[spam\]"):
            check_steps([{"step": "test_tagger", "tags": "spam"}])
        assert check_steps([{"step": "test_tagger", "tags": ["spam"]}])
    finally:
        del STEP_KINDS["test_tagger"]


@pytest.mark.parametrize(
    "hint, wanted",
    [(Sequence[str], True), (Sequence[str] | None, True), (list[int], True), (str, False), (str | None, False)],
)
def test_wants_collection(hint, wanted):
    assert wants_collection(hint) is wanted

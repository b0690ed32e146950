"""The step base's promise: a new cleaning step is one class and one registration, and runs in
`prepare` from a steps spec, in Ray's worker processes too, with its counters and rejects kept."""

from __future__ import annotations

import json
import pathlib

import pytest

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.steps.base import Step
from tokenport.corpus.steps.registry import STEP_KINDS, register_step
from tokenport.indexed import IndexedDataset


class Shout(Step):
    """A test step: drops texts holding ``banned``, upper-cases the rest, counting the changed ones."""

    def __init__(self, banned: str) -> None:
        super().__init__()
        self.banned = banned

    def reject(self, text: str) -> str | None:
        return "banned_word" if self.banned in text else None

    def transform(self, text: str) -> str:
        shouted = text.upper()
        if shouted != text:
            self.replaced["lower_case"] += 1
        return shouted


@pytest.fixture
def shout():
    register_step("shout", Shout)
    yield
    del STEP_KINDS["shout"]


LINES = [f"line {i} of the corpus" if i % 3 else f"spam line {i}" for i in range(60)]


def _inputs(tmp_path: pathlib.Path) -> list[str]:
    paths = []
    for n in range(4):  # four files, four units
        path = tmp_path / f"in{n}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in LINES[n::4]), encoding="utf-8")
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_registered_step_runs_in_prepare_with_its_counters(tmp_path: pathlib.Path, shout, executor, request) -> None:
    if executor == "ray":  # tasks run in Ray's worker processes, which learn the step from the job
        request.getfixturevalue("ray_session")
    steps = [{"step": "shout", "banned": "spam"}]
    result = prepare(
        PrepareConfig(
            _inputs(tmp_path), str(tmp_path / "out"), workers=2, steps=steps, keep_rejected=True, executor=executor
        )
    )

    byte = tp.load_tokenizer("byte")
    texts = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            texts += [byte.decode([t for t in ds[i].tolist() if t != byte.eod_id]) for i in range(len(ds))]
    kept = [t.upper() for n in range(4) for t in LINES[n::4] if "spam" not in t]
    assert texts == kept
    assert result.steps == {
        "0:shout": {"documents_in": 60, "documents_out": 40, "removed:banned_word": 20, "replaced:lower_case": 40}
    }
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    rejected = [
        json.loads(line) for name in manifest["rejected"] for line in (tmp_path / "out" / name).read_text().splitlines()
    ]
    assert sorted(r["text"] for r in rejected) == sorted(t for t in LINES if "spam" in t)
    assert {(r["step"], r["reason"]) for r in rejected} == {("0:shout", "banned_word")}


def test_a_registered_step_gets_its_options_checked(shout) -> None:
    with pytest.raises(
        tp.ConfigError, match=r"steps\[0\] \(shout\): unexpected option 'baned' \(did you mean 'banned'"
    ):
        PrepareConfig(["x.jsonl"], "out", steps=[{"step": "shout", "baned": "spam"}])
    with pytest.raises(tp.ConfigError, match=r"steps\[0\] \(shout\): option 'banned' is required"):
        PrepareConfig(["x.jsonl"], "out", steps=[{"step": "shout"}])


def test_register_step_refuses_taken_names_and_non_steps() -> None:
    with pytest.raises(tp.ConfigError, match="'pii'.*taken by tokenport.corpus.steps.pii.ScrubPII"):
        register_step("pii", Shout)
    with pytest.raises(tp.ConfigError, match="'exact_dedup'.*taken"):
        register_step("exact_dedup", Shout)
    with pytest.raises(tp.ConfigError, match="not a subclass of tokenport's step base"):
        register_step("loose", lambda documents: documents)  # type: ignore[arg-type]
    assert "loose" not in STEP_KINDS


def test_the_base_counts_drops_and_replacements_and_feeds_the_sink() -> None:
    from tokenport.corpus import Document

    step = Shout("spam")
    seen = []
    step.sink = lambda document, reason: seen.append((document.id, reason))
    out = list(step([Document("spam here", "a"), Document("fine", "b"), Document("OK", "c")]))
    assert [(d.id, d.text) for d in out] == [("b", "FINE"), ("c", "OK")]
    assert out[1] is not None and seen == [("a", "banned_word")]
    assert step.counts() == {"removed:banned_word": 1, "replaced:lower_case": 1}


def test_every_built_in_step_kind_is_built_on_the_base() -> None:
    assert all(issubclass(cls, Step) for cls in STEP_KINDS.values())

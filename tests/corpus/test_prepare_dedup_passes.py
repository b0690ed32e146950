"""Run-wide dedup steps inside `prepare`: each step runs once per document (a keys pass spills what
reaches its dedup step, and the next pass starts there), the output is what the earlier three-pass
design wrote, progress moves within a unit, and the report accounts for the run's time by stage."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import re
import types
from collections import Counter

import pytest

from tests._support.counting_step import CallLog, KeepEvery
from tests._support.mutate import mutations
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import pipeline, worker
from tokenport.corpus.run.report import load_report
from tokenport.corpus.run.stats import UnitStats
from tokenport.corpus.steps.registry import register_step
from tokenport.errors import CorruptStoreError, TokenportError

WORDS = (
    "the river rose overnight and a bridge was closed until morning while people of this town "
    "waited for news from their council about roads schools water power trains and the budget"
).split()
GERMAN = "Der Fluss stieg über Nacht und die Brücke blieb bis zum Morgen gesperrt, während die Leute warteten."
FIVE = [
    {"step": "language", "languages": ["en"], "min_score": 0.5},
    {"step": "gopher_repetition"},
    {"step": "exact_dedup"},
    {"step": "minhash_dedup"},
    {"step": "pii"},
]


def corpus(tmp_path: pathlib.Path) -> list[str]:
    """Two jsonl files of English pages: some German, some repetitive, exact and near copies, emails."""
    rng = random.Random(5)
    pages: list[str] = []
    for i in range(160):
        roll = rng.random()
        if pages and roll < 0.1:
            page = pages[rng.randrange(len(pages))].upper()  # an exact copy once normalized
        elif pages and roll < 0.2:
            words = pages[rng.randrange(len(pages))].split(" ")
            words[rng.randrange(len(words))] = "changed"
            page = " ".join(words)
        elif roll < 0.25:
            page = " ".join([GERMAN] * rng.randint(1, 3))
        elif roll < 0.3:
            page = " ".join(["the same five words here"] * 20)
        else:
            sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))) for _ in range(8)]
            page = ". ".join(sentences) + (f" Write to user{i}@example.org." if roll > 0.9 else "")
        pages.append(page)
    inputs = []
    for name, part in (("a.jsonl", pages[:90]), ("b.jsonl", pages[90:])):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"text": t, "n": k}) + "\n" for k, t in enumerate(part)), encoding="utf-8")
        inputs.append(str(path))
    return inputs


def digests(out: pathlib.Path, root: pathlib.Path) -> dict[str, str]:
    """A digest of each store and rejected-documents file under `out`, independent of where `root` is
    (the inputs' directory, which names units and documents)."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.suffix != ".json" and path.name != "provenance.npz":  # stores and rejects
            name = re.sub(r"(unit-\d+)-[0-9a-f]+", r"\1", str(path.relative_to(out)))
            found[name] = hashlib.sha256(path.read_bytes().replace(str(root).encode(), b"ROOT")).hexdigest()[:16]
    return found


GOLDEN = {  # the digests the three-pass design (before each step ran once) gave these inputs
    "part-00000.bin": "ecdc59487fda6934",
    "part-00000.idx": "5743229e4d8e064a",
    "part-00001.bin": "ad343be5e2d4e332",
    "part-00001.idx": "e144a93a6af7a006",
    "rejected/unit-000000.jsonl": "7d683d2014009f1c",
    "rejected/unit-000001.jsonl": "cbc2524815bf8999",
    "rejected/unit-000002.jsonl": "82a9c0654191a764",
    "rejected/unit-000003.jsonl": "21d6c651969044af",
    "rejected/unit-000004.jsonl": "bdd9a6f45c75b91e",
    "rejected/unit-000005.jsonl": "fbac504d9f82adfc",
    "rejected/unit-000006.jsonl": "412462fbd292081f",
    "rejected/unit-000007.jsonl": "b65e5038003c27f9",
    "rejected/unit-000008.jsonl": "d987b56828c0cd67",
    "rejected/unit-000009.jsonl": "6a50ebce5beac536",
    "rejected/unit-000010.jsonl": "c835aaf3d1e428ed",
    "rejected/unit-000011.jsonl": "4eecc551bc7b5d59",
    "rejected/unit-000012.jsonl": "ca6e1aeb3ff0f325",
    "rejected/unit-000013.jsonl": "b1cb3f863d6b9dfe",
}
GOLDEN_STEPS = {
    "0:language": {"documents_in": 160, "documents_out": 150, "kept:en": 150, "removed:other_language": 10},
    "1:gopher_repetition": {"documents_in": 150, "documents_out": 139, "removed:top_2_gram": 11},
    "2:exact_dedup": {"documents_in": 139, "documents_out": 125, "removed:duplicate": 14},
    "3:minhash_dedup": {"documents_in": 125, "documents_out": 110, "removed:duplicate": 15},
    "4:pii": {"documents_in": 110, "documents_out": 110, "replaced:email": 13},
}


@pytest.mark.parametrize("workers", [1, 2])
def test_the_output_is_what_the_three_pass_design_wrote(tmp_path, workers):
    """The same stores, rejected documents (in input order) and counts as the design that reran the
    steps before each dedup step wrote for these inputs (digests recorded from it)."""
    config = PrepareConfig(
        corpus(tmp_path), str(tmp_path / "out"), workers=workers, steps=FIVE, unit_bytes=6_000, keep_rejected=True
    )
    result = prepare(config)
    assert digests(tmp_path / "out", tmp_path) == GOLDEN
    assert result.steps == GOLDEN_STEPS


@pytest.mark.parametrize("workers", [1, 2])
def test_each_step_runs_once_per_document_with_run_wide_dedup(tmp_path, workers):
    register_step("call_log", CallLog)
    log = tmp_path / "calls.log"
    steps = [
        {"step": "call_log", "log": str(log), "tag": "a", "drop": "GERMAN"},
        {"step": "exact_dedup"},
        {"step": "call_log", "log": str(log), "tag": "b", "drop": "RIVER ROSE"},
        {"step": "minhash_dedup"},
        {"step": "call_log", "log": str(log), "tag": "c"},
    ]
    inputs = corpus(tmp_path)
    result = prepare(PrepareConfig(inputs, str(tmp_path / "out"), workers=workers, steps=steps, unit_bytes=6_000))
    calls = Counter(tuple(line.split("\t")) for line in log.read_text().splitlines())
    assert set(calls.values()) == {1}  # no document met a step twice
    documents = sum(1 for path in inputs for _ in open(path))
    for tag, label in (("a", "0:call_log"), ("b", "2:call_log"), ("c", "4:call_log")):
        assert sum(1 for t, _ in calls if t == tag) == result.steps[label]["documents_in"]
    assert result.steps["0:call_log"]["documents_in"] == documents
    assert result.steps["2:call_log"]["documents_in"] < documents  # the dedup before it dropped some


def test_progress_moves_every_mebibyte_within_a_unit_with_steps_on_or_off(tmp_path, monkeypatch):
    """A 3 MiB unit whose steps keep one document in 500 (so a tokenizer batch spans the whole unit):
    a pass reading the input moves at least every 1 MiB of it, not once at the unit's end; the write
    pass after a dedup step reads the few documents spilled and moves as they go by too."""
    register_step("keep_every", KeepEvery)
    path = tmp_path / "big.jsonl"
    line = json.dumps({"text": " ".join(WORDS) * 3}) + "\n"
    path.write_text(line * (3 * 2**20 // len(line) + 1))
    moves: list[tuple[str, int]] = []
    original = pipeline._Bar.on_progress

    def on_progress(bar, unit, more):
        moves.append((bar.tqdm.desc, more))
        original(bar, unit, more)

    monkeypatch.setattr(pipeline._Bar, "on_progress", on_progress)
    for steps in ([], [{"step": "keep_every", "every": 500}, {"step": "exact_dedup"}]):
        moves.clear()
        config = PrepareConfig([str(path)], str(tmp_path / f"out{len(steps)}"), workers=1, steps=steps)
        prepare(config, progress=True)
        bars = {desc for desc, _ in moves}
        assert bars == ({"prepare"} if not steps else {"prepare", "dedup step 1: keys"})
        for desc in bars:
            sizes = [more for d, more in moves if d == desc]
            assert sum(sizes) == path.stat().st_size
            if desc == "prepare" and steps:  # from the spill: a move per frame of it, a frame per MiB of input
                assert len(sizes) >= 2 and max(sizes) <= 2**20 + 500 * len(line), sizes
            else:
                assert len(sizes) >= 3 and max(sizes) < 2**20, (desc, sizes)  # less than 1 MiB a move


def test_the_report_accounts_for_the_run_by_stage(tmp_path):
    config = PrepareConfig(corpus(tmp_path), str(tmp_path / "out"), workers=2, steps=FIVE, unit_bytes=6_000)
    prepare(config)
    report = load_report(config.output)
    stages = report.stages
    assert {"start", "plan", "2:exact_dedup keys", "2:exact_dedup decide", "3:minhash_dedup decide", "units"} <= set(
        stages
    )
    assert list(stages)[:2] == ["start", "plan"] and all(ms >= 0 for ms in stages.values())
    accounted = sum(ms for name, ms in stages.items() if name != "wall")
    assert abs(accounted - stages["wall"]) <= len(stages)  # they partition the wall time (each rounded to a ms)
    assert report.accounted() >= 0.95
    assert {"read", "keys", "tokenize", "write"} <= set(report.unit_stages)
    text = report.render()
    assert "accounted for" in text and "3:minhash_dedup decide" in text
    assert report.to_json()["stages"] == stages


def _after_the_keys_passes(tmp_path, monkeypatch, steps):
    """A run stopped after its dedup passes, before the write pass: its config."""

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    config = PrepareConfig(corpus(tmp_path), str(tmp_path / "out"), workers=1, steps=steps, unit_bytes=6_000)
    monkeypatch.setattr(pipeline, "_run", stop)
    with pytest.raises(KeyboardInterrupt):
        prepare(config)
    monkeypatch.undo()
    return config


def test_every_mutation_of_a_pass_count_file_is_refused_or_reads_as_written(tmp_path, monkeypatch):
    config = _after_the_keys_passes(tmp_path, monkeypatch, FIVE[1:3])
    path = next((pathlib.Path(config.output) / ".work" / "dedup-1").glob("*.pass.json"))
    job = types.SimpleNamespace(work_dir=str(path.parent.parent))
    unit = types.SimpleNamespace(name=path.name.split(".")[0])
    original = path.read_bytes()
    refused = 0
    for label, data in mutations(original):
        path.write_bytes(data)
        try:
            stats, found, spilled = worker._earlier_pass(job, unit, 1)
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error), label
        else:  # a valid document: read as written
            written = json.loads(data)
            assert stats.to_dict() == UnitStats.from_dict(written["stats"]).to_dict(), label
            assert (dict(found), spilled) == (written.get("digests", {}), written["spilled"]), label
        assert path.read_bytes() == data, label
    assert refused > 30
    path.write_bytes(original)


def test_a_damaged_spill_is_refused_naming_it_and_made_again_once_deleted(tmp_path, monkeypatch):
    clean = prepare(PrepareConfig(corpus(tmp_path), str(tmp_path / "clean"), workers=1, steps=FIVE, unit_bytes=6_000))
    config = _after_the_keys_passes(tmp_path, monkeypatch, FIVE)
    spill = next((pathlib.Path(config.output) / ".work" / "dedup-2").glob("*.docs"))  # both dedups sign there
    data = spill.read_bytes()
    for damaged in (data[: len(data) // 2], data[:-1], data + data[:40]):
        spill.write_bytes(damaged)
        with pytest.raises(CorruptStoreError, match=str(spill.parent)):
            prepare(config)
    os.unlink(spill)
    for leftover in spill.parent.glob(spill.name.split(".")[0] + ".*"):
        os.unlink(leftover)
    result = prepare(config)
    assert digests(pathlib.Path(result.output), tmp_path) == digests(pathlib.Path(clean.output), tmp_path)


def test_neighbouring_run_wide_steps_are_signed_in_one_pass():
    from tokenport.corpus.steps.runwide import adjacent

    assert adjacent([2, 3, 5, 6, 7, 9]) == [[2, 3], [5, 6, 7], [9]] and adjacent([]) == []

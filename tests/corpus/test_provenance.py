"""Cleaning provenance: ``OUTPUT/provenance.npz`` says, for every input document, whether prepare kept
it (as which part and document) or dropped it (by which step, why, duplicating which kept document),
and how it was changed; ``tokenport why`` reads it. Checked against a corpus with known fates, against
the rejected documents prepare writes, and against the parts' own bytes; damaged records are refused."""

from __future__ import annotations

import json
import pathlib
import random
import zipfile

import msgspec
import numpy as np
import pytest

from tests._support.mutate import mutations
from tests.corpus.test_prepare_dedup_passes import FIVE, corpus
from tokenport.cli import main
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import provenance
from tokenport.corpus.run.why import why
from tokenport.corpus.steps.minhash import exact_key
from tokenport.errors import ConfigError, CorruptStoreError, TokenportError
from tokenport.indexed import IndexedDataset

WORDS = (
    "the river rose overnight and a bridge was closed until morning while people of this town "
    "waited for news from their council about roads schools water power trains and the budget"
).split()
STEPS = [
    {"step": "gopher_quality", "min_words": 5, "min_stop_words": 1},
    {"step": "exact_dedup"},
    {"step": "minhash_dedup"},
    {"step": "pii"},
]


def page(seed: int) -> str:
    rng = random.Random(seed)
    return ". ".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(6)) + "."


def near(text: str) -> str:
    """``text`` with one word changed: a near duplicate (MinHash), not an exact one."""
    words = text.split(" ")
    words[7] = "changed"
    return " ".join(words)


FATES = {  # (file, line): text
    ("a.jsonl", 1): page(1),  # kept
    ("a.jsonl", 2): "A short note.",  # dropped by the quality filter
    ("a.jsonl", 3): page(1).upper(),  # an exact duplicate (once normalized) of a.jsonl:1
    ("a.jsonl", 4): near(page(1)),  # a near duplicate of a.jsonl:1
    ("a.jsonl", 5): page(2) + " Write to jane@example.org.",  # kept, its email replaced
    ("b.jsonl", 1): page(3),  # kept
    ("b.jsonl", 2): page(2) + " Write to jane@example.org.",  # an exact duplicate of a.jsonl:5
}


@pytest.fixture(scope="module")
def fated(tmp_path_factory) -> pathlib.Path:
    """The output of a run over FATES with a filter, both dedup steps and pii."""
    root = tmp_path_factory.mktemp("fated")
    for name in ("a.jsonl", "b.jsonl"):
        lines = [text for (file, _), text in sorted(FATES.items()) if file == name]
        (root / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    prepare(PrepareConfig([str(root / "a.jsonl"), str(root / "b.jsonl")], str(root / "out"), workers=1, steps=STEPS))
    return root


def story(root: pathlib.Path, name: str, line: int) -> dict:
    (found,) = why(str(root / "out"), input=f"{root / name}:{line}").documents
    return found


def test_why_names_each_documents_fate(fated):
    kept = story(fated, "a.jsonl", 1)
    assert (kept["outcome"], kept["part"], kept["document"], kept["changes"]) == ("kept", "part-00000", 0, [])
    short = story(fated, "a.jsonl", 2)
    assert (short["outcome"], short["step"], short["reason"]) == ("dropped", "0:gopher_quality", "too_few_words")
    assert "duplicate_of" not in short
    exact = story(fated, "a.jsonl", 3)
    assert (exact["step"], exact["reason"]) == ("1:exact_dedup", "duplicate")
    assert exact["duplicate_of"] == {
        "input": str(fated / "a.jsonl"),
        "line": 1,
        "outcome": "kept",
        "part": "part-00000",
        "document": 0,
    }
    fuzzy = story(fated, "a.jsonl", 4)
    assert (fuzzy["step"], fuzzy["duplicate_of"]["line"]) == ("2:minhash_dedup", 1)
    changed = story(fated, "a.jsonl", 5)
    assert (changed["outcome"], changed["document"]) == ("kept", 1)
    assert changed["changes"] == [{"step": "3:pii", "replaced": "email"}]
    assert (story(fated, "b.jsonl", 1)["part"], story(fated, "b.jsonl", 1)["document"]) == ("part-00001", 0)
    across = story(fated, "b.jsonl", 2)
    assert (across["step"], across["duplicate_of"]["input"], across["duplicate_of"]["line"]) == (
        "1:exact_dedup",
        str(fated / "a.jsonl"),
        5,
    )


def test_kept_documents_are_the_parts_documents(fated):
    """The kept documents' (part, document) are each part's documents, in input order, each once."""
    stories = [story(fated, f, k) for f, k in sorted(FATES)]
    kept = [(s["part"], s["document"]) for s in stories if s["outcome"] == "kept"]
    assert kept == [("part-00000", 0), ("part-00000", 1), ("part-00001", 0)]
    for name in ("part-00000", "part-00001"):
        with IndexedDataset(str(fated / "out" / name)) as ds:
            assert ds.num_documents == sum(part == name for part, _ in kept)


def test_text_lookup_finds_every_document_with_that_text(fated):
    report = why(str(fated / "out"), text=page(2) + " Write to jane@example.org.")
    assert [(pathlib.Path(s["input"]).name, s["line"], s["outcome"]) for s in report.documents] == [
        ("a.jsonl", 5, "kept"),
        ("b.jsonl", 2, "dropped"),
    ]
    with pytest.raises(ConfigError, match="--text: no input document"):
        why(str(fated / "out"), text="a text no input has")


def test_a_line_without_a_document_is_a_config_error_naming_it(fated):
    for asked in (f"{fated / 'a.jsonl'}:6", f"{fated / 'a.jsonl'}:0", f"{fated / 'c.jsonl'}:1"):
        with pytest.raises(ConfigError, match=f"{asked}: no document of"):
            why(str(fated / "out"), input=asked)
    with pytest.raises(ConfigError, match="expected FILE:LINE"):
        why(str(fated / "out"), input=str(fated / "a.jsonl"))
    with pytest.raises(ConfigError, match="provenance.npz: missing"):
        why(str(fated / "nowhere"), input=f"{fated / 'a.jsonl'}:1")


def test_the_why_command_prints_text_or_one_json_object(fated, capsys, monkeypatch):
    monkeypatch.chdir(fated)
    assert main(["why", "out", "--input", "b.jsonl:2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == (
        f"{fated / 'b.jsonl'}:2: dropped by 1:exact_dedup (duplicate), a duplicate of "
        f"{fated / 'a.jsonl'}:5: kept as part-00000 document 1"
    )
    assert main(["why", "out", "--input", "a.jsonl:5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["documents"][0]["changes"] == [{"step": "3:pii", "replaced": "email"}]
    assert main(["why", "out", "--input", "a.jsonl:9"]) == 2
    assert "a.jsonl:9: no document of out" in capsys.readouterr().err


def test_provenance_agrees_with_the_rejected_documents_on_many_units(tmp_path):
    """On a corpus of 160 pages in 14 units with two workers: every drop is the one --keep-rejected
    wrote (id, step, reason); every exact duplicate's original has the same key and comes before it;
    every kept document is one of its part's, each once."""
    inputs = corpus(tmp_path)
    out = tmp_path / "out"
    result = prepare(PrepareConfig(inputs, str(out), workers=2, steps=FIVE, unit_bytes=6_000, keep_rejected=True))
    record = provenance.read(str(out / "provenance.npz"))
    h, c = record.header, record.columns
    rejected = set()
    for path in (out / "rejected").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            rejected.add((d["id"], d["step"], d["reason"]))
    dropped = np.flatnonzero(c["step"] >= 0)
    assert {
        (f"{h.inputs[c['input'][r]]}:{c['line'][r]}", h.steps[c["step"][r]], h.reasons[c["reason"][r]]) for r in dropped
    } == rejected
    texts = {
        (k, n + 1): json.loads(line)["text"]
        for k, path in enumerate(inputs)
        for n, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines())
    }
    for r in dropped:
        original = int(c["duplicate"][r])
        if h.steps[c["step"][r]] in ("2:exact_dedup", "3:minhash_dedup"):
            assert 0 <= original < r and c["step"][original] in (-1, *range(c["step"][r] + 1, len(h.steps)))
        if h.steps[c["step"][r]] == "2:exact_dedup":
            key = exact_key(texts[(int(c["input"][r]), int(c["line"][r]))])
            assert exact_key(texts[(int(c["input"][original]), int(c["line"][original]))]) == key
        elif h.steps[c["step"][r]] != "3:minhash_dedup":
            assert original == -1
    kept = c["step"] == -1
    assert int(kept.sum()) == result.documents
    for k, name in enumerate(h.parts):
        with IndexedDataset(str(out / name)) as ds:
            assert sorted(c["document"][kept & (c["part"] == k)].tolist()) == list(range(ds.num_documents))
    assert set(c["change_row"].tolist()) <= set(np.flatnonzero(kept).tolist())
    assert {h.steps[s] for s in c["change_step"]} == {"4:pii"} and h.changes == 13


def _rewrite(path: pathlib.Path, **replaced: object) -> None:
    """Rewrite an npz file with some arrays replaced (a value of None drops the array)."""
    with np.load(path) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    for name, value in replaced.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value  # type: ignore[assignment]
    provenance._save(str(path), arrays)


def test_every_mutation_of_the_header_is_refused_or_reads_as_written(fated, tmp_path):
    path = tmp_path / "provenance.npz"
    path.write_bytes((fated / "out" / "provenance.npz").read_bytes())
    with np.load(path) as loaded:
        original = loaded["header"].tobytes()
    refused = 0
    for label, data in mutations(original):
        _rewrite(path, header=np.frombuffer(data, dtype=np.uint8))
        before = path.read_bytes()
        try:
            record = provenance.read(str(path))
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error), label
        else:  # still a valid header: read as written
            assert record.header == msgspec.json.decode(data, type=provenance.ProvenanceHeader), label
        assert path.read_bytes() == before, label
    assert refused > 30


def test_damaged_arrays_are_refused_before_use(fated, tmp_path):
    source = (fated / "out" / "provenance.npz").read_bytes()
    path = tmp_path / "provenance.npz"
    with np.load(fated / "out" / "provenance.npz") as loaded:
        c = {name: loaded[name] for name in loaded.files}
    damages = {
        "a missing column": {"duplicate": None},
        "an unknown column": {"extra": np.zeros(7, np.int64)},
        "a short column": {"line": c["line"][:-1]},
        "another dtype": {"step": c["step"].astype(np.int64)},
        "an input out of range": {"input": np.full(7, 2, np.int32)},
        "a step out of range": {"step": np.where(c["step"] == 0, 9, c["step"]).astype(np.int32)},
        "a duplicate past the end": {"duplicate": np.where(c["duplicate"] >= 0, 7, c["duplicate"])},
        "a kept document without a part": {"part": np.full(7, -1, np.int32)},
        "a dropped document with no reason": {"reason": np.full(7, -1, np.int32)},
        "a change of no document": {"change_row": np.array([99])},
    }
    for replaced in damages.values():
        path.write_bytes(source)
        _rewrite(path, **replaced)
        with pytest.raises(CorruptStoreError, match=str(path)):
            provenance.read(str(path))
    for data in (source[: len(source) // 2], b"hello", b""):  # truncated, not a zip, empty
        path.write_bytes(data)
        with pytest.raises(CorruptStoreError, match=str(path)):
            provenance.read(str(path))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("header.npy", b"\x93NUMPY garbage")
    with pytest.raises(CorruptStoreError, match=str(path)):
        provenance.read(str(path))


def test_a_resumed_run_redoes_the_passes_whose_records_are_missing(tmp_path, monkeypatch):
    """A run stopped after its units (as one of an earlier version, whose work has no records): the
    rerun redoes each unit and keys pass lacking its record, and the provenance is the uninterrupted run's."""
    inputs = corpus(tmp_path)
    settings = {"workers": 1, "steps": FIVE, "unit_bytes": 6_000}
    reference = tmp_path / "reference"
    prepare(PrepareConfig(inputs, str(reference), **settings))
    out = tmp_path / "out"

    def stop(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr("tokenport.corpus.run.pipeline._provenance", stop)
        with pytest.raises(KeyboardInterrupt):
            prepare(PrepareConfig(inputs, str(out), **settings))
    work = out / ".work"
    records = sorted(work.glob("unit-*.prov.npz")) + sorted(work.glob("dedup-2/unit-*.prov.npz"))
    assert len(records) == 28
    for path in records[::5]:
        path.unlink()
    prepare(PrepareConfig(inputs, str(out), **settings))
    assert (out / "provenance.npz").read_bytes() == (reference / "provenance.npz").read_bytes()


def test_a_document_the_tokenizer_failed_on_is_dropped_by_tokenize(tmp_path):
    """Skipped as encode_failed (on_error="skip"): its record says so, and the next document keeps its place."""
    path = tmp_path / "s.jsonl"
    lines = [page(1), "bad \ud800 surrogate", page(2)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    prepare(PrepareConfig([str(path)], str(tmp_path / "out"), workers=1, on_error="skip"))
    stories = [why(str(tmp_path / "out"), input=f"{path}:{k}").documents[0] for k in (1, 2, 3)]
    assert [(s["outcome"], s.get("step"), s.get("reason"), s.get("document")) for s in stories] == [
        ("kept", None, None, 0),
        ("dropped", "tokenize", "encode_failed", None),
        ("kept", None, None, 1),
    ]


def test_damaged_pass_records_are_refused_naming_them(tmp_path, monkeypatch):
    """A unit's or keys pass's record (or a duplicate's originals) damaged under .work: the run that
    would join them stops with CorruptStoreError naming the file, before publishing anything."""
    inputs = corpus(tmp_path)
    out = tmp_path / "out"
    settings = {"workers": 1, "steps": FIVE, "unit_bytes": 6_000}

    def stop(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr("tokenport.corpus.run.pipeline._provenance", stop)
        with pytest.raises(KeyboardInterrupt):
            prepare(PrepareConfig(inputs, str(out), **settings))
    work = out / ".work"
    unit = next(work.glob("unit-*.prov.npz"))
    signed = next(work.glob("dedup-2/unit-*.prov.npz"))
    original = next(work.glob("dedup-3/unit-*.original.npy"))
    with np.load(signed) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    damages = [
        (unit, b"garbage"),
        (signed, b""),
        (original, b"\x93NUMPY"),
    ]
    for path, data in damages:
        kept = path.read_bytes()
        path.write_bytes(data)
        with pytest.raises(CorruptStoreError, match=str(path)):
            prepare(PrepareConfig(inputs, str(out), **settings))
        assert not (out / "provenance.npz").exists() and not (out / "tokenport.json").exists()
        path.write_bytes(kept)
    for name, value in (("events", None), ("events", np.zeros((2, 3), np.int64)), ("passed", np.array([10**6]))):
        provenance._save(
            str(signed), {**{k: v for k, v in arrays.items() if k != name}, **({} if value is None else {name: value})}
        )
        with pytest.raises(CorruptStoreError, match=str(signed)):
            prepare(PrepareConfig(inputs, str(out), **settings))
    provenance._save(str(signed), arrays)
    prepare(PrepareConfig(inputs, str(out), **settings))
    assert (out / "provenance.npz").exists()


def test_parquet_documents_are_named_by_row_from_zero(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pyarrow.table({"text": [page(1), "A short note.", page(2)]}), path)
    prepare(PrepareConfig([str(path)], str(tmp_path / "out"), workers=1, steps=STEPS[:1]))
    stories = [why(str(tmp_path / "out"), input=f"{path}:{row}").documents[0] for row in (0, 1, 2)]
    assert [(s["line"], s["outcome"], s.get("document")) for s in stories] == [
        (0, "kept", 0),
        (1, "dropped", None),
        (2, "kept", 1),
    ]
    with pytest.raises(ConfigError, match=f"{path}:3: no document"):
        why(str(tmp_path / "out"), input=f"{path}:3")

"""Tests of tokenport.prepare: real stdlib text, real tokenizers, real worker subprocesses, real kill -9."""

from __future__ import annotations

import ast
import bz2
import gzip
import json
import os
import pathlib
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time

import numpy as np
import pytest

from tests._support.bpe import train_byte_level_bpe
from tokenport.corpus import PrepareConfig, prepare, split_text
from tokenport.corpus.inputs.sources import expand_inputs
from tokenport.errors import ConfigError, InputDataError
from tokenport.indexed import IndexedDataset
from tokenport.tokenizers import load_tokenizer

STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])


# -- real text and a real tokenizer -------------------------------------------------------------


def _stdlib_files(count: int, low: int, high: int) -> list[pathlib.Path]:
    files = [f for f in sorted(STDLIB.glob("*.py")) if low < f.stat().st_size < high]
    return files[:: max(1, len(files) // count)][:count]


def _docstrings(source: str) -> list[str]:
    nodes = ast.walk(ast.parse(source))
    docs = [ast.get_docstring(n) for n in nodes if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))]
    return [d for d in docs if d]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Stdlib source files, each followed by its docstrings: about 400 KB of real text."""
    out = []
    for path in _stdlib_files(30, 2_000, 30_000):
        source = path.read_bytes().decode("utf-8")
        out.append(source)
        out.extend(_docstrings(source)[:4])
    return out


@pytest.fixture(scope="module")
def bpe(tmp_path_factory, texts) -> str:
    """The spec of a HF byte-level BPE (vocab 2000) trained here on the stdlib texts."""
    return "hf:" + train_byte_level_bpe(texts, 2000, str(tmp_path_factory.mktemp("bpe")))


@pytest.fixture(scope="module")
def encoded(bpe, texts) -> dict[str, list[int]]:
    """Expected tokens of each text under the BPE: encode(text) + [eod]."""
    tok = load_tokenizer(bpe)
    return {t: tok.encode(t).tolist() + [tok.eod_id] for t in texts}


def write_jsonl(path: pathlib.Path, texts: list[str], opener=open) -> pathlib.Path:
    with opener(path, "wt", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"text": t, "n": i}) + "\n")
    return path


def documents(result) -> list[list[int]]:
    """Every document of every part, in order (each is one sequence)."""
    out = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            assert np.array_equal(ds.document_indices, np.arange(len(ds) + 1))
            out.extend(ds[i].tolist() for i in range(len(ds)))
    return out


def store_bytes(result) -> list[bytes]:
    return [pathlib.Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


def run(inputs, output, **kwargs):
    return prepare(PrepareConfig(inputs=[str(i) for i in inputs], output=str(output), **{"workers": 1, **kwargs}))


# -- formats -------------------------------------------------------------------------------------


def _jsonl_inputs(tmp, texts, opener, suffix):
    half = len(texts) // 2
    return [
        write_jsonl(tmp / f"a{suffix}", texts[:half], opener),
        write_jsonl(tmp / f"b{suffix}", texts[half:], opener),
    ]


def _zstd_open(path, mode, encoding):
    zstandard = pytest.importorskip("zstandard")
    return zstandard.open(path, mode, encoding=encoding)


def _parquet_inputs(tmp, texts):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp / "corpus.parquet"
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path, row_group_size=7)
    return [path]


def _text_dir(tmp, texts):
    root = tmp / "tree"
    for i, t in enumerate(texts):
        sub = root / f"d{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"doc{i:03d}.py").write_bytes(t.encode("utf-8"))
    (root / ".hidden").write_text("not read")
    order = sorted(root.rglob("doc*.py"))
    return [root], [p.read_bytes().decode("utf-8") for p in order]


@pytest.mark.parametrize("kind", ["jsonl", "gz", "zst", "bz2", "parquet", "textdir", "glob"])
def test_each_format_reads_back_as_encode_plus_eod(tmp_path, texts, bpe, encoded, kind):
    expected_texts = texts
    if kind == "jsonl":
        inputs = _jsonl_inputs(tmp_path, texts, open, ".jsonl")
    elif kind == "gz":
        inputs = _jsonl_inputs(tmp_path, texts, gzip.open, ".jsonl.gz")
    elif kind == "zst":
        inputs = _jsonl_inputs(tmp_path, texts, _zstd_open, ".ndjson.zst")
    elif kind == "bz2":
        inputs = _jsonl_inputs(tmp_path, texts, bz2.open, ".json.bz2")
    elif kind == "parquet":
        inputs = _parquet_inputs(tmp_path, texts)
    elif kind == "textdir":
        inputs, expected_texts = _text_dir(tmp_path, texts)
    else:
        _jsonl_inputs(tmp_path, texts, open, ".jsonl")
        (tmp_path / "notes.txt").write_text("not matched by the glob")
        inputs = [tmp_path / "*.jsonl"]
    result = run(inputs, tmp_path / "out", tokenizer=bpe, unit_bytes=40_000)
    expected = [encoded[t] for t in expected_texts]
    assert documents(result) == expected
    assert result.documents == len(expected_texts)
    assert result.tokens == sum(len(e) for e in expected)
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["totals"]["documents"] == len(expected_texts)
    assert manifest["tokenizer"]["kind"] == "hf"
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["tokenport.json", "provenance.npz"]
        + [os.path.basename(p) + s for p in result.parts for s in (".bin", ".idx", ".json")]
    )


def test_big_jsonl_is_cut_into_line_aligned_units_with_true_line_numbers(tmp_path, texts):
    path = write_jsonl(tmp_path / "big.jsonl", texts)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[len(lines) - 3] = b'{"text": 12}\n'  # near the end: its unit starts far into the file
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputDataError, match=rf"big\.jsonl: line {len(lines) - 2}: field 'text' is a JSON int"):
        run([path], tmp_path / "out", unit_bytes=20_000)
    result = run([path], tmp_path / "out", unit_bytes=20_000, on_error="skip")
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["totals"]["units"] > 10 and result.skipped == {"not_text": 1}
    byte = load_tokenizer("byte")
    kept = [t for i, t in enumerate(texts) if i != len(lines) - 3]
    assert documents(result) == [byte.encode(t).tolist() + [256] for t in kept]


# -- determinism -----------------------------------------------------------------------------------


def test_output_bytes_do_not_depend_on_workers_and_shards_cut_between_documents(tmp_path, texts):
    inputs = _jsonl_inputs(tmp_path, texts, open, ".jsonl")
    runs = {}
    for workers in (1, 3):
        for shard_by in ("file", "tokens"):
            out = tmp_path / f"out-{workers}-{shard_by}"
            runs[workers, shard_by] = run(
                inputs, out, workers=workers, shard_by=shard_by, shard_tokens=50_000, unit_bytes=30_000
            )
    for shard_by in ("file", "tokens"):
        assert store_bytes(runs[1, shard_by]) == store_bytes(runs[3, shard_by])
    by_file, by_tokens = runs[1, "file"], runs[1, "tokens"]
    assert len(by_file.parts) == 2 and len(by_tokens.parts) > 4
    assert documents(by_file) == documents(by_tokens)
    for prefix in by_tokens.parts:
        with IndexedDataset(prefix) as ds:
            assert ds.num_tokens <= 50_000 or len(ds) == 1


# -- malformed input ---------------------------------------------------------------------------------


def _malformed(tmp, texts):
    good = [json.dumps({"text": t}).encode() for t in texts[:4]]
    lines = [
        good[0],
        b'{"text": "unterminated',  # line 2: bad json
        good[1],
        b'{"body": "no text field"}',  # line 4
        b'{"text": ["not", "a", "string"]}',  # line 5
        b'{"text": "caf\xe9"}',  # line 6: latin-1, not UTF-8
        b"",  # blank lines are not documents
        good[2],
        b"[1, 2]",  # line 9: not an object
    ]
    (tmp / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp / "b.jsonl.gz").write_bytes(gzip.compress(b"\n".join(good) + b"\n")[:-30])  # truncated
    (tmp / "c.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (tmp / "d.txt").write_bytes(b"\xff\xfe bad utf-8")
    return [tmp / "a.jsonl", tmp / "b.jsonl.gz", tmp / "c.parquet", tmp / "d.txt"]


def test_malformed_input_stops_naming_file_and_line(tmp_path, texts):
    inputs = _malformed(tmp_path, texts)
    with pytest.raises(InputDataError, match=r"a\.jsonl: line 2: is not valid JSON") as info:
        run(inputs, tmp_path / "out", unit_bytes=1)
    assert "on_error='skip'" in str(info.value)
    assert not [n for n in os.listdir(tmp_path / "out") if not n.startswith(".")]  # nothing visible


def test_error_in_a_worker_process_surfaces_as_the_same_error(tmp_path, texts):
    path = write_jsonl(tmp_path / "w.jsonl", texts[:12])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[9] = b'{"text": "caf\xe9"}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputDataError, match=r"w\.jsonl: line 10: byte 13 is not valid UTF-8") as info:
        run([path], tmp_path / "out", workers=2, unit_bytes=20_000)
    assert "Traceback" not in str(info.value)
    assert not [n for n in os.listdir(tmp_path / "out") if not n.startswith(".")]


def test_malformed_input_skipped_and_counted(tmp_path, texts):
    inputs = _malformed(tmp_path, texts)
    result = run(inputs, tmp_path / "out", on_error="skip", workers=2, unit_bytes=1)
    assert result.skipped == {
        "bad_json": 2,
        "missing_text": 1,
        "not_text": 1,
        "bad_encoding": 2,
        "corrupt_input": 2,
    }
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["skipped"] == result.skipped
    byte = load_tokenizer("byte")
    docs = documents(result)
    assert docs[:3] == [byte.encode(t).tolist() + [256] for t in texts[:3]]
    assert 3 <= len(docs) < 7  # the truncated gzip yields the documents before the damage
    assert "skipped: bad_encoding 2" in result.summary()


def test_lone_surrogate_is_skipped_as_encode_failed(tmp_path, texts, bpe):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"text": texts[0]}) + "\n" + '{"text": "bad \\ud800 surrogate"}\n')
    with pytest.raises(InputDataError, match=r"s\.jsonl:2: the tokenizer failed"):
        run([path], tmp_path / "out", tokenizer=bpe)
    assert run([path], tmp_path / "out", tokenizer=bpe, on_error="skip").skipped == {"encode_failed": 1}


# -- long documents ----------------------------------------------------------------------------------


def test_split_text_cuts_at_whitespace_near_the_limit(texts):
    text = "\n".join(texts)
    pieces = split_text(text, 5_000)
    assert "".join(pieces) == text
    assert all(len(p) <= 5_000 for p in pieces) and len(pieces) >= len(text) // 5_000
    assert all(p[0].isspace() for p in pieces[1:]) and all(not p[-1].isspace() for p in pieces[:-1])
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # no whitespace: hard cuts
    assert split_text("short", 10) == ["short"]


def test_long_documents_are_tokenized_in_pieces_with_the_same_tokens(tmp_path, texts, bpe):
    long_text = "\n\n".join(texts[:40])
    path = write_jsonl(tmp_path / "long.jsonl", [long_text, texts[0]])
    result = run([path], tmp_path / "out", tokenizer=bpe, max_chars_per_piece=3_000)
    tok = load_tokenizer(bpe)
    assert documents(result) == [tok.encode(t).tolist() + [tok.eod_id] for t in (long_text, texts[0])]


# -- configs, reruns, refusals -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("inputs", []),
        ("output", ""),
        ("tokenizer", ""),
        ("text_key", ""),
        ("workers", 0),
        ("append_eod", "yes"),
        ("shard_by", "lines"),
        ("shard_tokens", 0),
        ("on_error", "ignore"),
        ("max_chars_per_piece", -1),
        ("unit_bytes", 1.5),
        ("batch_size", True),
    ],
)
def test_config_validation_names_the_field(tmp_path, field, value):
    kwargs = {"inputs": ["x.jsonl"], "output": str(tmp_path), field: value}
    with pytest.raises(ConfigError, match=rf"PrepareConfig\.{field}"):
        PrepareConfig(**kwargs)


def test_missing_input_and_foreign_output_are_refused(tmp_path, texts):
    with pytest.raises(ConfigError, match="does not exist"):
        run([tmp_path / "nope.jsonl"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    path = write_jsonl(tmp_path / "a.jsonl", texts[:3])
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="not empty"):
        run([path], tmp_path / "busy")


def test_rerun_is_idempotent_and_other_settings_are_refused(tmp_path, texts):
    path = write_jsonl(tmp_path / "a.jsonl", texts[:5])
    first = run([path], tmp_path / "out")
    again = run([path], tmp_path / "out", workers=2, batch_size=3)  # same output settings
    assert again.parts == first.parts and again.resumed_units == again.units
    with pytest.raises(ConfigError, match="output exists"):
        run([path], tmp_path / "out", append_eod=False)
    (tmp_path / "out" / "tokenport.json").unlink()  # as if stopped before finishing
    os.makedirs(tmp_path / "out" / ".work")
    (tmp_path / "out" / ".work" / "state.json").write_text(
        json.dumps({"fingerprint": "other", "settings": {"text_key": "body"}})
    )
    with pytest.raises(ConfigError, match=r"unfinished prepare run with other settings \(different: .*text_key"):
        run([path], tmp_path / "out")


def test_inputs_inside_the_output_are_not_read(tmp_path, texts):
    write_jsonl(tmp_path / "a.jsonl", texts[:3])
    result = run([tmp_path], tmp_path / "out")
    assert result.documents == 3
    found = expand_inputs([str(tmp_path)], exclude=str(tmp_path / "out"))  # as a resumed run lists them
    assert [f.path for f in found] == [str(tmp_path / "a.jsonl")]


# -- crash safety --------------------------------------------------------------------------------------


CHILD = textwrap.dedent(
    """
    import sys
    from tokenport.corpus import PrepareConfig, prepare
    inputs, output, tokenizer, die_after_parts = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
    if die_after_parts:
        import os, signal
        import tokenport.indexed.commit as commit
        published = []
        def die_in_publication(prefix):
            published.append(prefix)
            if prefix.endswith("part-%05d" % die_after_parts):
                os.kill(os.getpid(), signal.SIGKILL)  # journal written, renames not done
            return original(prefix)
        original, commit.roll_forward = commit.roll_forward, die_in_publication
    prepare(PrepareConfig(inputs, output, tokenizer=tokenizer, workers=2, unit_bytes=60_000,
                          shard_by="tokens", shard_tokens=40_000))
    """
)


def _child(inputs, output, tokenizer, die_after_parts=0) -> subprocess.Popen:
    args = [",".join(map(str, inputs)), str(output), tokenizer, str(die_after_parts)]
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], start_new_session=True)


CRASH_SETTINGS = {"workers": 2, "unit_bytes": 60_000, "shard_by": "tokens", "shard_tokens": 40_000}


@pytest.fixture(scope="module")
def crash_case(tmp_path_factory, texts, bpe):
    """Inputs of a run that takes a few seconds, and the bytes of its uninterrupted output."""
    tmp = tmp_path_factory.mktemp("crash")
    inputs = [write_jsonl(tmp / f"part{i}.jsonl", texts[i::3] * 4) for i in range(3)]
    reference = run(inputs, tmp / "reference", tokenizer=bpe, **CRASH_SETTINGS)
    assert len(reference.parts) > 3
    return inputs, store_bytes(reference)


def test_kill_9_during_units_then_rerun_gives_identical_bytes(tmp_path, crash_case, bpe):
    inputs, reference = crash_case
    out = tmp_path / "out"
    child = _child(inputs, out, bpe)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        finished = [n for n in os.listdir(out / ".work") if n.endswith(".idx")] if (out / ".work").exists() else []
        if len(finished) >= 2:
            break
        time.sleep(0.005)
    assert child.poll() is None, "the run finished before it could be killed; give it more input"
    os.killpg(child.pid, signal.SIGKILL)  # the parent and its workers, as in a crash
    child.wait()
    assert not (out / "tokenport.json").exists()
    result = run(inputs, out, tokenizer=bpe, **CRASH_SETTINGS)
    assert 2 <= result.resumed_units < result.units
    assert store_bytes(result) == reference
    assert not (out / ".work").exists()


def test_kill_9_during_assembly_then_rerun_gives_identical_bytes(tmp_path, crash_case, bpe):
    inputs, reference = crash_case
    out = tmp_path / "out"
    child = _child(inputs, out, bpe, die_after_parts=2)
    assert child.wait(timeout=60) == -signal.SIGKILL
    names = os.listdir(out)
    assert "part-00000.idx" in names and "part-00002.tokenport-commit" in names and "tokenport.json" not in names
    result = run(inputs, out, tokenizer=bpe, **CRASH_SETTINGS)
    assert result.resumed_units == result.units
    assert store_bytes(result) == reference


# -- object storage ---------------------------------------------------------------------------------------


def test_s3_inputs_read_through_fsspec_match_local(tmp_path, texts, s3, monkeypatch):
    pytest.importorskip("s3fs")
    import fsspec

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)  # the worker subprocesses read it too
    fsspec.filesystem("s3").clear_instance_cache()
    local = _jsonl_inputs(tmp_path, texts, gzip.open, ".jsonl.gz") + [write_jsonl(tmp_path / "c.jsonl", texts[:9])]
    for path in local:
        s3.put(path.read_bytes(), key=f"corpus/{path.name}")
    remote = run([f"s3://{s3.bucket}/corpus/"], tmp_path / "remote", workers=2, unit_bytes=20_000)
    reference = run(local, tmp_path / "local", unit_bytes=20_000)
    assert store_bytes(remote) == store_bytes(reference) and remote.documents == len(texts) + 9


def test_parquet_text_column_of_another_type_is_counted_not_read(tmp_path):
    """A parquet file whose text column holds integers is one "not_text" problem per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one document", "and another"]}), tmp_path / "good.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "numbers.parquet")
    result = run([tmp_path / "good.parquet", tmp_path / "numbers.parquet"], tmp_path / "out", on_error="skip")
    assert result.skipped == {"not_text": 3}
    assert result.documents == 2


def test_store_recipe_ignores_where_the_corpus_lies_but_not_the_steps(tmp_path):
    """The parts' provenance recipe (what data receipts compare) is the same for a corpus that
    moved and differs when the cleaning steps differ; the run fingerprint still names the inputs."""
    texts = [f"document {i} with some words in it" for i in range(20)]

    def recipe_and_fingerprint(name, steps=()):
        source = tmp_path / name / "in.jsonl"
        source.parent.mkdir()
        write_jsonl(source, texts)
        result = prepare(PrepareConfig(inputs=[str(source)], output=str(tmp_path / name / "out"), steps=steps))
        provenance = IndexedDataset(result.parts[0]).manifest.provenance["prepare"]
        return provenance["recipe"], provenance["fingerprint"]

    here, there = recipe_and_fingerprint("here"), recipe_and_fingerprint("there")
    assert here[0] == there[0] and here[1] != there[1]
    filtered = recipe_and_fingerprint("filtered", steps=[{"step": "pii", "kinds": ["email"]}])
    assert filtered[0] != here[0]

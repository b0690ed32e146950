"""Identifiers: prepare keeps each input document's id_field value in provenance.npz; ``why --id`` and
``where --id`` find the document by it. Checked on every input kind, against a dict of what the inputs
hold, against where by document, with forced hash collisions, and with damaged records refused."""

from __future__ import annotations

import gzip
import hashlib
import json
import pathlib

import msgspec
import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests.corpus.test_provenance import _rewrite, page
from tokenport.cli import main
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import identifiers, provenance
from tokenport.corpus.run.config import config_from_options
from tokenport.corpus.run.why import why
from tokenport.errors import ConfigError, CorruptStoreError, TokenportError
from tokenport.integrations import StatefulLoader
from tokenport.integrations.where import occurrences
from tokenport.sampling import StreamSampler

STEPS = [{"step": "gopher_quality", "min_words": 5, "min_stop_words": 1}, {"step": "exact_dedup"}]
RECORDS = [  # (a.jsonl, b.jsonl.gz): (record, what its identifier is)
    [
        ({"text": page(1), "id": "https://example.org/1"}, "https://example.org/1"),
        ({"text": "A short note.", "id": "https://example.org/2"}, "https://example.org/2"),  # dropped: quality
        ({"text": page(2), "id": 42}, "42"),  # an integer: its decimal text
        ({"text": page(3)}, None),  # no identifier
        ({"text": page(4), "id": ["a", "b"]}, None),  # another type: none, counted
        ({"text": page(5), "id": "twice"}, "twice"),
        ({"text": page(6), "id": "ünïcode ✓ \ud800"}, "ünïcode ✓ \ud800"),  # a lone surrogate kept too
    ],
    [
        ({"text": page(1), "id": "dup-of-1"}, "dup-of-1"),  # dropped: an exact duplicate of a.jsonl:1
        ({"text": page(7), "id": "twice"}, "twice"),  # the same identifier as a.jsonl:6
        ({"text": page(8), "id": 1.5}, None),  # a float: none, counted
        ({"text": page(9), "id": None}, None),
        ({"text": page(10), "id": ""}, None),  # empty: none
    ],
]


def write_inputs(root: pathlib.Path) -> list[str]:
    paths = [root / "a.jsonl", root / "b.jsonl.gz"]
    for path, records in zip(paths, RECORDS):
        data = "".join(json.dumps(record) + "\n" for record, _ in records).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return [str(p) for p in paths]


@pytest.fixture(scope="module")
def named(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("named")
    prepare(PrepareConfig(write_inputs(root), str(root / "out"), workers=1, steps=STEPS))
    return root


def test_each_input_documents_identifier_is_kept_and_found(named):
    out = str(named / "out")
    record = provenance.read(str(pathlib.Path(out) / "provenance.npz"))
    h = record.header
    assert (h.id_field, h.identified, h.ids_refused) == ("id", 7, 2)
    for file, records in zip(("a.jsonl", "b.jsonl.gz"), RECORDS):
        for line, (_, identifier) in enumerate(records, 1):
            (at,) = why(out, input=f"{named / file}:{line}").documents
            assert at.get("identifier") == identifier, (file, line)
            if identifier is not None:
                found = why(out, identifier=identifier).documents
                assert any((s["input"], s["line"]) == (str(named / file), line) for s in found)
    (kept,) = why(out, identifier="https://example.org/1").documents
    assert (kept["outcome"], kept["part"], kept["document"]) == ("kept", "part-00000", 0)
    (short,) = why(out, identifier="https://example.org/2").documents
    assert (short["outcome"], short["step"]) == ("dropped", "0:gopher_quality")
    (duplicate,) = why(out, identifier="dup-of-1").documents
    assert duplicate["step"] == "1:exact_dedup" and duplicate["duplicate_of"]["identifier"] == "https://example.org/1"
    twice = why(out, identifier="twice").documents  # several input documents with one identifier: all of them
    assert [(pathlib.Path(s["input"]).name, s["line"]) for s in twice] == [("a.jsonl", 6), ("b.jsonl.gz", 2)]
    both = why(out, identifier=["42", "twice", "42"])
    assert [s["identifier"] for s in both.documents] == ["42", "twice", "twice"] and both.asked == "id 42, twice"


def test_unknown_identifiers_and_outputs_without_them_are_config_errors(named, tmp_path):
    out = str(named / "out")
    with pytest.raises(ConfigError, match=f"identifier 'nope': no input document of {out} has it in field 'id'"):
        why(out, identifier="nope")
    for bad in ("", [], [1], ["ok", ""], b"x"):
        with pytest.raises(ConfigError, match="identifier="):
            why(out, identifier=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="give one of"):
        why(out, identifier="42", text="x")
    inputs = write_inputs(tmp_path)
    prepare(PrepareConfig(inputs, str(tmp_path / "none"), workers=1, id_field=None))
    with np.load(tmp_path / "none" / "provenance.npz") as loaded:  # the header an earlier version wrote
        assert set(loaded.files) == {"header", *provenance._COLUMNS}
        assert b"id_field" not in loaded["header"].tobytes()
    with pytest.raises(ConfigError, match="keeps no identifiers .* --id-field FIELD"):
        why(str(tmp_path / "none"), identifier="42")


def test_identifiers_change_no_store_byte_and_not_the_default_fingerprint(tmp_path):
    inputs = write_inputs(tmp_path)
    digests = []
    for k, field in enumerate(("id", None, "missing")):
        out = tmp_path / f"out{k}"
        prepare(PrepareConfig(inputs, str(out), workers=1, steps=STEPS, id_field=field))
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("part-*.[bi]*")})
    assert digests[0] == digests[1] == digests[2] and len(digests[0]) == 4
    settings = PrepareConfig(inputs, "x").output_settings({"kind": "byte"})
    assert "id_field" not in settings and "id_field" not in PrepareConfig(inputs, "x").to_dict()
    assert PrepareConfig(inputs, "x", id_field="url").output_settings({"kind": "byte"})["id_field"] == "url"


def test_parquet_and_arrow_columns_name_their_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"text": [page(1), page(2), page(3)], "url": ["u0", None, "u2"], "n": [7, 8, 9]})
    pq.write_table(table, tmp_path / "p.parquet")
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    for name in ("p.parquet", "s.arrow"):
        for field, expected in (("url", ["u0", None, "u2"]), ("n", ["7", "8", "9"]), ("absent", [None] * 3)):
            out = str(tmp_path / f"{name}-{field}")
            prepare(PrepareConfig([str(tmp_path / name)], out, workers=1, id_field=field))
            got = [why(out, input=f"{tmp_path / name}:{row}").documents[0].get("identifier") for row in range(3)]
            assert got == expected, (name, field)


def test_a_text_file_has_no_identifier_and_chat_runs_refuse_the_flag(tmp_path):
    (tmp_path / "t.txt").write_text(page(1), encoding="utf-8")
    prepare(PrepareConfig([str(tmp_path / "t.txt")], str(tmp_path / "out"), workers=1))
    header = provenance.read(str(tmp_path / "out" / "provenance.npz")).header
    assert (header.id_field, header.identified) == ("id", 0)
    with pytest.raises(ConfigError, match="--id-field applies to text documents"):
        config_from_options(["x.jsonl"], "out", {"format": "chat", "id_field": "id"})
    with pytest.raises(ConfigError, match="chat runs record no provenance"):
        PrepareConfig(["x.jsonl"], "out", format="chat", id_field="url")


def test_the_id_field_setting_is_checked_and_spelled_none_on_the_command_line(tmp_path):
    for bad in ("", 3):
        with pytest.raises(ConfigError, match=r"PrepareConfig.id_field=.* \(--id-field\)"):
            PrepareConfig(["x.jsonl"], "out", id_field=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is the text field"):
        PrepareConfig(["x.jsonl"], "out", id_field="text")
    inputs = write_inputs(tmp_path)
    assert main(["prepare", *inputs, "-o", str(tmp_path / "off"), "--id-field", "none", "--workers", "1"]) == 0
    assert provenance.read(str(tmp_path / "off" / "provenance.npz")).header.id_field is None
    assert main(["prepare", *inputs, "-o", str(tmp_path / "t"), "--id-field", "text", "--workers", "1"]) == 2


def test_the_index_is_exact_even_when_every_hash_collides(monkeypatch):
    rng = np.random.default_rng(3)
    pool = ["", "a", "b", "ab", "ba", "é", "\ud800", "x" * 300, "https://e.org/?q=1", "42"]
    names = [pool[int(k)] for k in rng.integers(0, len(pool), 500)]
    data, offsets = identifiers.pack([n.encode("utf-8", "surrogatepass") for n in names])
    expected = {n: [k for k, m in enumerate(names) if m == n] for n in pool if n}
    hashes = identifiers._hashes(data, offsets)
    assert len(set(hashes[np.diff(offsets) > 0].tolist())) == len(expected) and not hashes[np.diff(offsets) == 0].any()
    for collide in (False, True):
        if collide:  # every identifier one hash: only the byte comparison tells them apart
            monkeypatch.setattr(identifiers, "_hashes", lambda data, offsets: np.zeros(len(offsets) - 1, np.uint64))
        index = identifiers.IdentifierIndex.build(data, offsets)
        found = index.find([*expected, "absent"])
        assert [f.tolist() for f in found] == [*expected.values(), []]


def test_every_mutation_of_an_identified_header_is_refused_or_reads_as_written(named, tmp_path):
    path = tmp_path / "provenance.npz"
    path.write_bytes((named / "out" / "provenance.npz").read_bytes())
    with np.load(path) as loaded:
        original = loaded["header"].tobytes()
    assert b'"id_field":"id"' in original
    refused = 0
    for label, data in mutations(original):
        _rewrite(path, header=np.frombuffer(data, dtype=np.uint8))
        before = path.read_bytes()
        try:
            record = provenance.read(str(path))
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error), label
        else:
            assert record.header == msgspec.json.decode(data, type=provenance.ProvenanceHeader), label
        assert path.read_bytes() == before, label
    assert refused > 30


def test_damaged_identifier_arrays_are_refused_naming_the_file(named, tmp_path):
    source = (named / "out" / "provenance.npz").read_bytes()
    path = tmp_path / "provenance.npz"
    with np.load(named / "out" / "provenance.npz") as loaded:
        data, offsets = loaded["id_bytes"], loaded["id_offsets"]
        header = msgspec.json.decode(loaded["header"].tobytes(), type=provenance.ProvenanceHeader)
    two_changes = np.frombuffer(msgspec.json.encode(msgspec.structs.replace(header, changes=2)), np.uint8)
    damages = {
        "no id_bytes": {"id_bytes": None},
        "no id_offsets": {"id_offsets": None},
        "bytes of another dtype": {"id_bytes": data.astype(np.int16)},
        "offsets of another dtype": {"id_offsets": offsets.astype(np.int32)},
        "a short offsets": {"id_offsets": offsets[:-1]},
        "offsets past the bytes": {"id_offsets": np.append(offsets[:-1], offsets[-1] + 1)},
        "offsets going back": {"id_offsets": np.where(np.arange(len(offsets)) == 2, offsets[1] - 1, offsets)},
        "offsets not from zero": {"id_offsets": offsets + 1, "id_bytes": np.append(data, np.uint8(65))},
        "bytes not UTF-8": {"id_bytes": np.where(np.arange(len(data)) == 0, np.uint8(0xFF), data).astype(np.uint8)},
        "one identifier fewer": {"id_offsets": np.where(np.arange(len(offsets)) == 2, offsets[1], offsets)},
        "changes out of row order": {  # a document's changes are found by bisection
            "header": two_changes,
            "change_row": np.array([3, 1]),
            "change_step": np.zeros(2, np.int32),
            "change_reason": np.zeros(2, np.int32),
        },
    }
    for label, replaced in damages.items():
        path.write_bytes(source)
        _rewrite(path, **replaced)
        try:
            provenance.read(str(path))
        except CorruptStoreError as error:
            assert str(path) in str(error), label
        else:
            raise AssertionError(f"{label}: read")


def _state(output: pathlib.Path, steps: int = 4) -> tuple[dict, list[str]]:
    """A loader state over a blend of the output's parts (one per input file), ``steps`` steps in."""
    parts = sorted(str(p)[:-4] for p in output.glob("part-*.bin"))
    stores = [tp.IndexedDataset(p) for p in parts]
    children = [tp.GPTDataset(s, np.arange(len(s)), 30, tp.GPTSampleConfig(16), seed=1) for s in stores]
    blend = tp.BlendedDataset(children, [1.0] * len(children), 60)
    sampler = StreamSampler(len(blend), 0, 2, 0, 2, seed=1, order="feistel")
    sampler.consumed_samples = steps * 4
    return StatefulLoader(blend, sampler).state_dict(), parts


def test_where_by_identifier_answers_as_where_by_document(named):
    out = named / "out"
    state, parts = _state(out)
    report = occurrences(state, store=out, identifier=["twice", "https://example.org/2", "42"])
    by_store = {r.store: r for r in report.reports}
    assert sorted(by_store) == parts  # "twice" is kept in both parts
    for story in report.documents:
        if story["outcome"] == "kept":
            alone = occurrences(state, store=story["store"], document=story["document"])
            mine = [p for p in by_store[story["store"]].places if p.document == story["document"]]
            assert mine == list(alone.places) and mine, story
        else:
            assert story["identifier"] == "https://example.org/2" and story["step"] == "0:gopher_quality"
    assert [s["identifier"] for s in report.documents] == ["twice", "twice", "https://example.org/2", "42"]
    with pytest.raises(ConfigError, match="identifier 'nope'"):
        occurrences(state, store=out, identifier="nope")
    with pytest.raises(ConfigError, match="exactly one"):
        occurrences(state, store=out, identifier="42", document=1)  # type: ignore[call-overload]


def test_where_and_why_commands_take_ids(named, tmp_path, capsys):
    out = named / "out"
    state, parts = _state(out)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["why", str(out), "--id", "twice", "--id", "42", "--json"]) == 0
    stories = json.loads(capsys.readouterr().out)["documents"]
    assert [s["identifier"] for s in stories] == ["twice", "twice", "42"]
    assert main(["why", str(out), "--id", "https://example.org/2"]) == 0
    assert "(id https://example.org/2): dropped by 0:gopher_quality" in capsys.readouterr().out
    assert main(["where", str(path), "--store", str(out), "--id", "42", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (story,) = report["documents"]
    assert report["identifiers"] == ["42"] and report["stores"][0]["store"] == parts[0] == story["store"]
    alone = occurrences(state, store=parts[0], document=story["document"]).to_json()
    assert report["stores"][0]["places"] == alone["places"] and alone["places"]
    assert main(["where", str(path), "--store", str(out), "--id", "https://example.org/2"]) == 0
    assert "dropped by prepare's 0:gopher_quality (" in capsys.readouterr().out
    assert main(["where", str(path), "--store", str(out), "--id", "42", "--document", "1"]) == 2
    assert "exactly one of --document, --text or --id" in capsys.readouterr().err
    assert main(["where", str(path), "--store", str(out), "--id", "nope"]) == 2
    assert "identifier 'nope'" in capsys.readouterr().err


def test_a_moved_output_is_found_with_store_path(named, tmp_path, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(named / "out", out)
    state, parts = _state(out)
    before = occurrences(state, store=out, identifier="twice")
    moved = tmp_path / "moved"
    out.rename(moved)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["where", str(path), "--store", str(moved), "--id", "twice"]) == 2
    assert f"--id twice --store-path {parts[0]}=NEW_PREFIX" in capsys.readouterr().err
    stores = {p: str(moved / pathlib.Path(p).name) for p in parts}
    after = occurrences(state, store=moved, identifier="twice", stores=stores)
    assert [r.places for r in after.reports] == [r.places for r in before.reports] and after.reports
    flags = [f"--store-path={old}={new}" for old, new in stores.items()]
    assert main(["where", str(path), "--store", str(moved), "--id", "twice", "--json", *flags]) == 0
    printed = json.loads(capsys.readouterr().out)["stores"]
    assert [r["places"] for r in printed] == [r.to_json()["places"] for r in after.reports]


def test_an_identifier_kept_in_a_part_the_run_did_not_read_is_a_config_error(named):
    out = named / "out"
    store = tp.IndexedDataset(str(out / "part-00000"))
    gpt = tp.GPTDataset(store, np.arange(len(store)), 30, tp.GPTSampleConfig(16), seed=1)
    sampler = StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel")
    state = StatefulLoader(gpt, sampler).state_dict()
    assert occurrences(state, store=out, identifier="42").reports[0].places  # in part-00000: read
    with pytest.raises(ConfigError, match="part-00001.*the run read no such store"):
        occurrences(state, store=out, identifier="twice")  # also kept in part-00001, which the run never read


@pytest.mark.parametrize("seed", range(2))
def test_random_identifiers_agree_with_the_inputs_and_the_stores(tmp_path, seed):
    """Random records (identifiers shared, missing, of other types) in jsonl, compressed jsonl and parquet,
    deduplicated on two workers: each identifier finds exactly the input documents whose field holds it,
    and each kept one is the part's document with that text."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    pool = ["a", "b", "https://x.org/1", "ü", 7, 70, None, [1], {"k": 1}, 2.5, True]
    texts = [page(int(k)) for k in rng.integers(0, 25, 90)]  # repeats: exact duplicates dropped
    names = [pool[int(k)] for k in rng.integers(0, len(pool), 90)]
    files: list[tuple[str, int]] = []  # (path, first line or row) of each record
    for k, name in enumerate(("a.jsonl", "b.jsonl.gz")):
        rows = range(30 * k, 30 * k + 30)
        data = "".join(json.dumps({"text": texts[r], "id": names[r]}) + "\n" for r in rows).encode()
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        files += [(str(tmp_path / name), line) for line in range(1, 31)]
    scalar = [n if isinstance(n, (str, int)) and not isinstance(n, bool) else None for n in names[60:]]
    column = pa.array([None if n is None else str(n) for n in scalar], pa.string())
    pq.write_table(pa.table({"text": texts[60:], "id": column}), tmp_path / "c.parquet")
    files += [(str(tmp_path / "c.parquet"), row) for row in range(30)]
    inputs = [str(tmp_path / n) for n in ("a.jsonl", "b.jsonl.gz", "c.parquet")]
    out = str(tmp_path / "out")
    prepare(PrepareConfig(inputs, out, workers=2, unit_bytes=4_000, steps=[{"step": "exact_dedup"}]))
    expected: dict[str, list[tuple[str, int]]] = {}
    for r, name in enumerate(names[:60] + scalar):
        if isinstance(name, (str, int)) and not isinstance(name, bool) and str(name):
            expected.setdefault(str(name), []).append(files[r])
    header = provenance.read(str(pathlib.Path(out) / "provenance.npz")).header
    assert header.identified == sum(map(len, expected.values()))
    assert header.ids_refused == sum(isinstance(n, (list, dict, float, bool)) for n in names[:60])
    byte = tp.load_tokenizer("byte")
    for name, places in expected.items():
        stories = why(out, identifier=name).documents
        assert sorted((s["input"], s["line"]) for s in stories) == sorted(places), name
        for story in stories:
            if story["outcome"] == "kept":
                text = texts[files.index((story["input"], story["line"]))]
                tokens = tp.IndexedDataset(f"{out}/{story['part']}").get(story["document"])
                assert byte.decode(tokens[:-1]) == text  # the end-of-document token last
    with pytest.raises(ConfigError, match="identifier 'absent'"):
        why(out, identifier="absent")

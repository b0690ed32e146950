"""Mutation fuzz of the documents the store layer reads: PREFIX.json (the store manifest), the commit
journal, and a prepare output's part listing (tokenport.json). Each mutation is refused with a
TokenportError, or read as a valid document that changes nothing it must not; never another exception."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import Doc, build_store
from tokenport.errors import TokenportError
from tokenport.indexed import commit, resolve_stores
from tokenport.indexed.manifest import Manifest

CHAT = {"format": "messages", "policy": "assistant_only", "template": "sha256:0f1e"}
TOKENIZER = {
    "kind": "hf",
    "name": "tok",
    "spec": "hf:/models/tok",
    "vocab_size": 1000,
    "eod_id": 999,
    "fingerprint": "sha256:aaaa",
}


def _write(prefix, *, chat: bool) -> list[list[int]]:
    rng = np.random.default_rng(0)
    documents = []
    for _ in range(12):
        n = int(rng.integers(1, 20))
        tokens = rng.integers(0, 999, n)
        documents.append(Doc(tokens, mask=(rng.random(n) < 0.5).astype(np.uint8) if chat else None))
    options = dict(masks=chat, chat=CHAT if chat else None, checksum_block_size=64, provenance={"note": "fuzz"})
    build_store(prefix, documents, dtype=np.uint16, tokenizer=TOKENIZER, **options)
    return [document.tokens.tolist() for document in documents]


def _read_all(prefix) -> list[list[int]]:
    with tp.IndexedDataset(prefix) as store:
        return [store[i].tolist() for i in range(len(store))]


@pytest.mark.parametrize("chat", [False, True])
def test_mutated_manifests_are_refused_or_read_as_valid_documents(tmp_path, chat):
    original = tmp_path / "original"
    documents = _write(original, chat=chat)
    text = (tmp_path / "original.json").read_bytes()
    expected = Manifest.from_json(text, "original")
    prefix = tmp_path / "store"
    for suffix in (".bin", ".idx", ".mask.bin", ".mask.idx"):
        if os.path.exists(f"{original}{suffix}"):
            shutil.copy(f"{original}{suffix}", f"{prefix}{suffix}")
    tried = refused = 0
    for label, data in mutations(text):
        tried += 1
        try:
            manifest = Manifest.from_json(data, "mutated.json")
        except TokenportError:
            refused += 1
            continue
        # read back as a valid document: it writes and reads back equal
        assert Manifest.from_json(manifest.to_json(), "again") == manifest, label
        (tmp_path / "store.json").write_bytes(data)
        try:
            tp.verify(prefix)
        except TokenportError:
            continue  # the store does not match what the manifest claims: refused, as it should be
        # what verify passes reads the very documents written, with the facts the original recorded
        assert _read_all(prefix) == documents, label
        for name in ("dtype", "sequences", "documents", "tokens", "checksums", "masks"):
            assert getattr(manifest, name) == getattr(expected, name), label
    assert refused > tried // 2  # the fuzz reached the reader's checks, not only harmless fields


def _interrupted_publication(tmp_path):
    """A store ``s`` whose republication was killed after its journal: a new .bin waits under a temporary."""
    prefix = str(tmp_path / "s")
    _write(prefix, chat=False)
    temporary = commit.temp_path(prefix + ".bin")
    shutil.copy(prefix + ".bin", temporary)
    journal = {"renames": [[temporary, prefix + ".bin"]], "removes": [prefix + ".mask.bin"]}
    (tmp_path / "victim").write_text("not the store's")
    return prefix, json.dumps(journal).encode()


def test_mutated_commit_journals_are_refused_and_never_touch_other_files(tmp_path):
    (tmp_path / "seed").mkdir()
    prefix, text = _interrupted_publication(tmp_path / "seed")
    documents = _read_all(prefix)
    listing = sorted([*os.listdir(os.path.dirname(prefix)), os.path.basename(commit.journal_path(prefix))])
    for k, (label, data) in enumerate(mutations(text)):
        case = tmp_path / f"case{k}"
        shutil.copytree(os.path.dirname(prefix), case)
        case_prefix = str(case / "s")
        with open(commit.journal_path(case_prefix), "wb") as f:
            f.write(data)
        try:
            commit.recover(case_prefix)
        except TokenportError:
            assert sorted(os.listdir(case)) == listing, label  # refused: nothing moved or deleted
            continue
        assert (case / "victim").read_text() == "not the store's", label
        assert _read_all(case_prefix) == documents, label
        assert not os.path.exists(commit.journal_path(case_prefix)), label


def test_a_journal_naming_another_file_is_refused_not_followed(tmp_path):
    prefix, _ = _interrupted_publication(tmp_path)
    victim = str(tmp_path / "victim")
    for plan in (
        {"renames": [], "removes": [victim]},
        {"renames": [[victim, prefix + ".bin"]]},
        {"renames": [[commit.temp_path(prefix + ".bin"), victim]]},
        {"renames": [], "removes": ["../" + os.path.basename(victim)]},
    ):
        with open(commit.journal_path(prefix), "w") as f:
            json.dump(plan, f)
        with pytest.raises(tp.CorruptStoreError, match="not a file of the store"):
            tp.IndexedDataset(prefix, lazy=True)
        assert (tmp_path / "victim").read_text() == "not the store's"
    os.unlink(commit.journal_path(prefix))


def test_mutated_run_listings_are_refused_or_name_parts_inside_the_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("part-00000", "part-00001"):
        _write(run / name, chat=False)
    listing = {
        "fingerprint": "abc",
        "parts": [{"name": "part-00000", "documents": 12}, {"name": "part-00001", "documents": 12}],
        "stats": {"ratio": float("nan")},  # prepare's own keys may hold what Python's json writes
    }
    text = json.dumps(listing).encode()
    (run / "tokenport.json").write_bytes(text)
    assert resolve_stores([str(run)]) == [str(run / "part-00000"), str(run / "part-00001")]
    for label, data in mutations(json.dumps({**listing, "stats": {}})):
        (run / "tokenport.json").write_bytes(data)
        try:
            prefixes = resolve_stores([str(run)])
        except TokenportError:
            continue
        assert all(os.path.dirname(p) == str(run) for p in prefixes), label
        assert all(os.path.basename(p) not in ("", ".", "..") for p in prefixes), label


@pytest.mark.parametrize(
    "options, message",
    [
        ({"provenance": {"ratio": float("nan")}}, "provenance=.* cannot go into the manifest"),
        ({"provenance": {"when": object()}}, "provenance=.* cannot go into the manifest"),
        ({"tokenizer": {"eod_id": "2", "vocab_size": 10}}, r"tokenizer=.* is invalid: .*\$\.tokenizer\.eod_id"),
        ({"tokenizer": {"eod_id": 2, "vocab_size": 2.5}}, r"tokenizer=.* is invalid: .*\$\.tokenizer\.vocab_size"),
        ({"tokenizer": {"fingerprint": 5}}, r"tokenizer=.* is invalid: .*\$\.tokenizer\.fingerprint"),
        ({"tokenizer": "byte"}, "tokenizer='byte' is invalid: expected a Tokenizer or a dict"),
        ({"masks": True, "chat": {"x": float("inf")}}, "chat=.* cannot go into the manifest"),
    ],
)
def test_the_writer_refuses_what_the_manifest_reader_would_refuse_before_writing(tmp_path, options, message):
    with pytest.raises(tp.ConfigError, match=message):
        tp.IndexedDatasetWriter(tmp_path / "s", dtype=np.uint16, **options)
    assert os.listdir(tmp_path) == []
    with tp.IndexedDatasetWriter(tmp_path / "ok", dtype=np.uint16, tokenizer={"eod_id": 2}) as writer:  # no vocab
        writer.add_document([1, 2])
    assert tp.IndexedDataset(tmp_path / "ok").manifest.tokenizer == {"eod_id": 2}

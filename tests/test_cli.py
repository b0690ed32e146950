"""The `tokenport` command: verbs print results, faults exit non-zero with the file named."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tokenport as tp
from tokenport.cli import main


@pytest.fixture
def stores(tmp_path):
    identity = tp.load_tokenizer("byte").identity()
    for name, text in (("a", "hello world"), ("b", "print('tokenport')")):
        with tp.IndexedDatasetWriter(tmp_path / name, tokenizer=identity) as writer:
            for k in range(20):
                writer.add_document(list((text * (k + 1)).encode()) + [256])
    return tmp_path


def test_inspect_shows_counts_percentiles_and_text(stores, capsys):
    assert main(["inspect", str(stores / "a")]) == 0
    out = capsys.readouterr().out
    assert "documents  20" in out
    assert "tokens     2,330" in out
    assert "p50=" in out and "#" in out
    assert "document 0: hello world" in out


def test_verify_ok_and_fault(stores, capsys):
    assert main(["verify", str(stores / "a"), str(stores / "b")]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    with open(stores / "b.bin", "r+b") as f:
        f.write(b"\x00\x01")
    assert main(["verify", str(stores / "a"), str(stores / "b")]) == 1
    err = capsys.readouterr().err
    assert "FAIL" in err and "b.bin: block 0" in err


def test_merge(stores, capsys):
    assert main(["merge", str(stores / "ab"), str(stores / "a"), str(stores / "b")]) == 0
    assert "40 sequences" in capsys.readouterr().out
    merged = tp.IndexedDataset(stores / "ab")
    assert np.array_equal(merged[20], tp.IndexedDataset(stores / "b")[0])


def test_errors_are_one_line_not_tracebacks(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tokenport", "inspect", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith("tokenport: error: ") and "missing.idx" in result.stderr
    assert "Traceback" not in result.stderr


def test_prepare_verb_and_bad_input(tmp_path, capsys):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n{"text": "beta"}\n')
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "out"), "--workers", "1", "-q"]) == 0
    assert "2 documents" in capsys.readouterr().out
    store = tp.IndexedDataset(tmp_path / "out" / "part-00000")
    assert bytes(store[1][:-1].astype("uint8")) == b"beta"

    corpus.write_text('{"text": "alpha"}\n{"text": oops}\n')
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "bad"), "--workers", "1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "in.jsonl" in err and "line 2" in err
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "skip"), "--workers", "1", "-q", "--on-error", "skip"]) == 0
    out = capsys.readouterr().out
    assert "1 documents" in out and "skipped: bad_json 1" in out

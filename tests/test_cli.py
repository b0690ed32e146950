"""The `tokenport` command: verbs print results, faults exit non-zero with the file named."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tokenport as tp
from tokenport.cli import main
from tokenport.indexed import resolve_stores


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


def _files(prefix) -> list[str]:
    """What a shell glob such as ``prefix*`` expands to: the store's three files, sorted."""
    return sorted(str(prefix) + suffix for suffix in (".bin", ".idx", ".json"))


def test_merge_of_a_glob_takes_each_store_once(stores, capsys):
    # `tokenport merge out stores/*`: the .bin, .idx and .json of one store are one input, not three
    assert main(["merge", str(stores / "ab"), *_files(stores / "a"), *_files(stores / "b")]) == 0
    assert "merged 2 stores" in capsys.readouterr().out
    merged = tp.IndexedDataset(stores / "ab")
    assert len(merged) == 40
    assert np.array_equal(merged[20], tp.IndexedDataset(stores / "b")[0])


def test_inspect_and_verify_of_a_glob_show_each_store_once(stores, capsys):
    assert main(["verify", *_files(stores / "a")]) == 0
    assert capsys.readouterr().out.count("ok ") == 1
    assert main(["inspect", *_files(stores / "a"), "--documents", "0"]) == 0
    assert capsys.readouterr().out.count("documents  20") == 1
    assert main(["pack-report", *_files(stores / "a"), "--ranks", "2"]) == 0


@pytest.mark.parametrize("verb", ["merge", "verify", "inspect", "pack-report"])
@pytest.mark.parametrize("repeat", [["a", "a"], ["a", "a.bin"], ["a.bin", "b", "a.bin"]])
def test_a_store_named_twice_is_refused(stores, capsys, verb, repeat):
    head = [verb, str(stores / "out")] if verb == "merge" else [verb]
    assert main(head + [str(stores / name) for name in repeat]) == 2
    err = capsys.readouterr().err
    assert "given twice" in err and str(stores / "a") in err
    assert not (stores / "out.bin").exists()


def test_a_prepare_output_directory_means_its_parts_in_order(tmp_path, capsys):
    for name, text in (("x", "first"), ("y", "second")):
        (tmp_path / f"{name}.jsonl").write_text(f'{{"text": "{text}"}}\n')
    out = tmp_path / "web"
    assert main(["prepare", str(tmp_path / "x.jsonl"), str(tmp_path / "y.jsonl"), "-o", str(out), "--workers", "1", "-q"]) == 0
    assert resolve_stores([out]) == [str(out / "part-00000"), str(out / "part-00001")]
    assert main(["merge", str(tmp_path / "all"), str(out)]) == 0
    capsys.readouterr()
    merged = tp.IndexedDataset(tmp_path / "all")
    assert [bytes(merged[i][:-1].astype("uint8")) for i in range(len(merged))] == [b"first", b"second"]
    assert main(["verify", str(out)]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    assert main(["inspect", str(tmp_path)]) == 2
    assert "without tokenport.json" in capsys.readouterr().err


def test_merge_refuses_to_overwrite_without_force(stores, capsys):
    assert main(["merge", str(stores / "ab"), str(stores / "a")]) == 0
    assert main(["merge", str(stores / "ab"), str(stores / "a"), str(stores / "b")]) == 2
    err = capsys.readouterr().err
    assert "ab already exists" in err and "--force" in err
    assert len(tp.IndexedDataset(stores / "ab")) == 20
    assert main(["merge", str(stores / "ab"), str(stores / "a"), str(stores / "b"), "--force"]) == 0
    assert len(tp.IndexedDataset(stores / "ab")) == 40
    assert main(["merge", str(stores / "a"), str(stores / "a.bin"), str(stores / "b"), "--force"]) == 2
    assert "also an input" in capsys.readouterr().err


@pytest.fixture
def blocked(stores):
    """``stores`` plus a plain file named ``file`` (paths under it cannot be created or read)."""
    (stores / "file").write_text("not a directory")
    (stores / "plan.json").write_text(
        '{"cache_dir": "%s", "datasets": ["%s"], "split": "1,0,0", "samples": {"train": 4, "valid": 0, "test": 0},'
        ' "seq_length": 16, "seed": 1}' % (stores / "file" / "cache", stores / "a")
    )
    corpus = stores / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n')
    assert main(["prepare", str(corpus), "-o", str(stores / "run"), "--workers", "1", "-q"]) == 0
    return stores


# (verb arguments, the path the one-line error must name); {d} is the fixture's directory
_MISSING_OR_BLOCKED = [
    (["inspect", "{d}/missing"], "missing.idx"),
    (["inspect", "{d}/file/a"], "file/a"),
    (["verify", "{d}/missing"], "missing.idx"),
    (["verify", "{d}/file/a"], "file/a"),
    (["merge", "{d}/out", "{d}/missing"], "missing.idx"),
    (["merge", "{d}/file/out", "{d}/a"], "{d}/file"),  # the file in the way
    (["pack-report", "{d}/missing"], "missing.idx"),
    (["pack-report", "{d}/file/a.bin"], "file/a"),
    (["report", "{d}/missing"], "missing"),
    (["report", "{d}/run", "--html", "{d}/file/page.html"], "file/page.html"),
    (["report", "{d}/run", "--html", "{d}"], "{d}"),
    (["build-cache", "{d}/missing.json"], "missing.json"),
    (["build-cache", "{d}/plan.json"], "file/cache"),
    (["blend", "{d}/missing.yaml", "--size", "4"], "missing.yaml"),
    (["blend", "1", "{d}/missing", "--size", "4"], "missing.idx"),
    (["demo", "--workdir", "{d}/file/demo", "--limit", "1"], "file/demo"),
    (["prepare", "{d}/missing.jsonl", "-o", "{d}/out"], "missing.jsonl"),
]


@pytest.mark.parametrize("argv, names", _MISSING_OR_BLOCKED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_verb_reports_a_bad_path_in_one_line(blocked, capsys, argv, names):
    capsys.readouterr()
    assert main([arg.format(d=blocked) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenport: error: ") and err.count("\n") == 1, err
    assert names.format(d=blocked) in err


def test_blend_of_a_glob_weighs_each_store_once(stores, capsys):
    assert main(["blend", str(stores / "a"), str(stores / "b"), "--size", "100"]) == 0
    by_prefix = capsys.readouterr().out
    assert main(["blend", *_files(stores / "a"), *_files(stores / "b"), "--size", "100"]) == 0
    assert capsys.readouterr().out == by_prefix
    assert main(["blend", "1", str(stores / "a"), "2", str(stores / "a.bin"), "--size", "100"]) == 2
    assert "given twice" in capsys.readouterr().err


def test_build_cache_plan_datasets_take_each_store_once(stores, capsys):
    plan = stores / "plan.json"
    datasets = ", ".join(f'"{name}"' for name in ["a.bin", "a.idx", "a.json", "b"])
    plan.write_text('{"cache_dir": "cache", "datasets": [%s], "split": "1,0,0", '
                    '"samples": {"train": 4}, "seq_length": 16, "seed": 1}' % datasets)
    assert main(["build-cache", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "2 index sets" in out and out.count("built ") == 2
    plan.write_text('{"cache_dir": "cache", "datasets": ["a", "b", "a.bin"], "split": "1,0,0", '
                    '"samples": {"train": 4}, "seq_length": 16, "seed": 1}')
    assert main(["build-cache", str(plan)]) == 2
    assert "plan.json: 'datasets' store" in capsys.readouterr().err

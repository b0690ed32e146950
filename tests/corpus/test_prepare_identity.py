"""A prepare run's identity includes its inputs' (size, version, digest): a rerun after an input
changed is refused naming the file, overwrite=True starts over, and an mtime-only change is no change."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections import Counter

import numpy as np
import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import pipeline
from tokenport.errors import ConfigError, InputDataError
from tokenport.indexed import IndexedDataset

TEXTS = [f"Document number {i} says something about rivers and bridges." for i in range(40)]


def write_jsonl(path: pathlib.Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


def files(directory: pathlib.Path) -> dict[str, bytes]:
    """Every file under `directory` by relative name, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def tokens(result) -> list[list[int]]:
    out = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            out.extend(np.asarray(ds[i]).tolist() for i in range(len(ds)))
    return out


def config(tmp_path: pathlib.Path, **options) -> PrepareConfig:
    return PrepareConfig(inputs=[str(tmp_path / "in")], output=str(tmp_path / "out"), workers=1, **options)


@pytest.fixture
def corpus(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl", TEXTS[:20])
    (tmp_path / "in" / "b.txt").write_text("A whole text file is one document.")
    return tmp_path


def reference(tmp_path: pathlib.Path, name: str) -> list[list[int]]:
    """The tokens a fresh run gives for the inputs as they are now."""
    return tokens(prepare(PrepareConfig(inputs=[str(tmp_path / "in")], output=str(tmp_path / name), workers=1)))


@pytest.mark.parametrize("change", ["append", "same_size", "new_file", "removed_file"])
def test_a_changed_input_is_refused_naming_it_and_overwrite_rebuilds(corpus, change):
    first = tokens(prepare(config(corpus)))
    before = files(corpus / "out")
    a = corpus / "in" / "a.jsonl"
    if change == "append":
        with a.open("a") as f:
            f.write(json.dumps({"text": "one more line"}) + "\n")
        named = a
    elif change == "same_size":
        data = a.read_bytes()
        a.write_bytes(data.replace(b"number 1 ", b"number X "))
        assert a.stat().st_size == len(data)
        named = a
    elif change == "new_file":
        named = corpus / "in" / "c.txt"
        named.write_text("a file added to the input directory")
    else:
        named = corpus / "in" / "b.txt"
        named.unlink()
    with pytest.raises(ConfigError, match=f"{named}.*overwrite=True \\(--force\\)"):
        prepare(config(corpus))
    assert files(corpus / "out") == before  # the refusal changed nothing
    again = prepare(config(corpus), overwrite=True)
    assert tokens(again) == reference(corpus, "fresh") != first
    assert prepare(config(corpus)).resumed_units == again.units  # and now it is the finished output


def test_a_touched_input_is_no_change_its_digest_says_so(corpus):
    first = prepare(config(corpus))
    for name in ("a.jsonl", "b.txt"):
        os.utime(corpus / "in" / name, ns=(1, 1))  # same bytes, another modification time
    again = prepare(config(corpus))
    assert again.resumed_units == again.units and tokens(again) == tokens(first)


def test_a_big_file_cut_into_ranges_is_digested_too(corpus):
    write_jsonl(corpus / "in" / "a.jsonl", TEXTS)
    first = prepare(config(corpus, unit_bytes=300))
    manifest = json.loads((corpus / "out" / "tokenport.json").read_text())
    assert all(entry["digest"] for entry in manifest["inputs"]) and first.units > 3
    os.utime(corpus / "in" / "a.jsonl", ns=(1, 1))
    assert prepare(config(corpus, unit_bytes=300)).resumed_units == first.units
    data = (corpus / "in" / "a.jsonl").read_bytes()
    (corpus / "in" / "a.jsonl").write_bytes(data.replace(b"number 3", b"number Z"))
    with pytest.raises(ConfigError, match="a.jsonl changed"):
        prepare(config(corpus, unit_bytes=300))


def test_an_unfinished_run_whose_input_changed_is_refused_the_same_way(corpus, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_assemble", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(config(corpus))
    monkeypatch.undo()
    assert (corpus / "out" / ".work" / "state.json").exists()
    with (corpus / "in" / "a.jsonl").open("a") as f:
        f.write(json.dumps({"text": "appended while the run was stopped"}) + "\n")
    before = files(corpus / "out")
    with pytest.raises(ConfigError, match=f"unfinished prepare run whose inputs changed: {corpus / 'in' / 'a.jsonl'}"):
        prepare(config(corpus))
    assert files(corpus / "out") == before
    assert tokens(prepare(config(corpus), overwrite=True)) == reference(corpus, "fresh")


def test_an_input_written_while_the_run_reads_it_is_not_published(corpus, monkeypatch):
    original = pipeline._assemble

    def written_meanwhile(*args, **kwargs):
        with (corpus / "in" / "a.jsonl").open("a") as f:
            f.write(json.dumps({"text": "appended during the run"}) + "\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_assemble", written_meanwhile)
    with pytest.raises(InputDataError, match="a.jsonl was written while prepare read it"):
        prepare(config(corpus))
    monkeypatch.undo()
    assert not (corpus / "out" / "tokenport.json").exists()
    with pytest.raises(ConfigError, match="a.jsonl"):
        prepare(config(corpus))
    assert tokens(prepare(config(corpus), overwrite=True)) == reference(corpus, "fresh")


def test_overwrite_replaces_an_output_of_other_settings_finished_or_not(corpus, monkeypatch):
    prepare(config(corpus))
    with pytest.raises(ConfigError, match="other settings.*overwrite=True"):
        prepare(config(corpus, append_eod=False))
    replaced = prepare(config(corpus, append_eod=False), overwrite=True)
    plain = prepare(PrepareConfig(inputs=[str(corpus / "in")], output=str(corpus / "p"), workers=1, append_eod=False))
    assert tokens(replaced) == tokens(plain)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    shutil.rmtree(corpus / "out")
    monkeypatch.setattr(pipeline, "_assemble", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(config(corpus))
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="unfinished prepare run with other settings \\(different: append_eod\\)"):
        prepare(config(corpus, append_eod=False))
    assert tokens(prepare(config(corpus, append_eod=False), overwrite=True)) == tokens(plain)


def test_overwrite_keeps_an_output_that_matches_and_never_deletes_foreign_files(corpus):
    first = prepare(config(corpus))
    assert prepare(config(corpus), overwrite=True).resumed_units == first.units  # same bytes: kept
    (corpus / "out" / "notes.txt").write_text("mine")
    prepare(config(corpus, append_eod=False), overwrite=True)
    assert (corpus / "out" / "notes.txt").read_text() == "mine"
    foreign = corpus / "foreign"
    foreign.mkdir()
    (foreign / "x.txt").write_text("not a prepare output")
    with pytest.raises(ConfigError, match="not empty"):
        prepare(PrepareConfig(inputs=[str(corpus / "in")], output=str(foreign), workers=1), overwrite=True)
    assert files(foreign) == {"x.txt": b"not a prepare output"}


def test_a_manifest_written_before_inputs_were_recorded_still_reads(corpus):
    first = prepare(config(corpus))
    path = corpus / "out" / "tokenport.json"
    manifest = json.loads(path.read_text())
    del manifest["inputs"]
    path.write_text(json.dumps(manifest))
    assert prepare(config(corpus)).resumed_units == first.units


def test_a_changed_object_store_input_is_refused(tmp_path, s3, monkeypatch):
    pytest.importorskip("s3fs")
    import fsspec

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    fsspec.filesystem("s3").clear_instance_cache()
    s3.put("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:5]).encode(), key="in/a.jsonl")
    url = f"s3://{s3.bucket}/in/a.jsonl"
    settings = PrepareConfig(inputs=[url], output=str(tmp_path / "out"), workers=1)
    first = tokens(prepare(settings))
    s3.put("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[5:10]).encode(), key="in/a.jsonl")
    fsspec.filesystem("s3").clear_instance_cache()
    with pytest.raises(ConfigError, match=f"{url} changed"):
        prepare(settings)
    assert tokens(prepare(settings, overwrite=True)) != first


class Model:
    """What the output directory should hold: nothing, a finished run (its settings and the input bytes
    it read) or an unfinished one (its settings and the inputs' versions when it started)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.eod = True
        self.content: dict[str, bytes] = {}
        self.versions: dict[str, tuple[int, int]] = {}

    def same(self, eod: bool, content: dict[str, bytes], versions: dict[str, tuple[int, int]]) -> bool:
        if self.eod != eod:
            return False
        return self.content == content if self.kind == "finished" else self.versions == versions


def test_random_prepare_calls_and_input_changes_follow_a_shadow_model(tmp_path, monkeypatch):
    """Random sequences of input edits and prepare calls (plain, overwrite, interrupted): each call
    resumes, returns, rebuilds or is refused as the model says; a refusal changes no file."""
    import random

    rng = random.Random(25)
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_jsonl(inputs / "a.jsonl", TEXTS[:6])
    (inputs / "b.txt").write_text("text file")
    out = tmp_path / "out"
    model = Model()
    clock = [10**18]

    def stamp(path: pathlib.Path) -> None:  # a distinct modification time for every edit (no coarse-clock ties)
        clock[0] += 10**9
        os.utime(path, ns=(clock[0], clock[0]))

    def content() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(inputs.iterdir())}

    def versions() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(inputs.iterdir())}

    def expected(eod: bool, read: dict[str, bytes]) -> list[list[int]]:
        docs = []
        for name, data in read.items():
            texts = (
                [json.loads(line)["text"] for line in data.decode().splitlines()]
                if name.endswith("jsonl")
                else [data.decode()]
            )
            docs.extend(list(t.encode()) + ([256] if eod else []) for t in texts)
        return docs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    seen: Counter = Counter()
    for step in range(60):
        action = rng.choice(["append", "same_size", "touch", "add", "remove", *["prepare", "interrupt"] * 2])
        a = inputs / "a.jsonl"
        if action == "append":
            with a.open("a") as f:
                f.write(json.dumps({"text": f"appended {step}"}) + "\n")
            stamp(a)
        elif action == "same_size":
            data = bytearray(a.read_bytes())
            at = len('{"text": "Do')  # a letter of the first line's text, changed in place
            data[at] = ord("A") if data[at] != ord("A") else ord("B")
            a.write_bytes(bytes(data))
            stamp(a)
        elif action == "touch":
            stamp(a)
        elif action == "add":
            (inputs / f"c{step}.txt").write_text(f"added {step}")
        elif action == "remove":
            added = sorted(inputs.glob("c*.txt"))
            if added:
                added[0].unlink()
        else:
            eod, overwrite = rng.random() < 0.7, rng.random() < 0.4
            before = files(out) if out.exists() else None
            same = model.kind is not None and model.same(eod, content(), versions())
            if action == "interrupt":
                monkeypatch.setattr(pipeline, "_assemble", interrupted)
            label = f"step {step}: {action} eod={eod} overwrite={overwrite} over {model.kind}"
            try:
                prepare(config(tmp_path, append_eod=eod), overwrite=overwrite)
            except ConfigError:
                seen["refused"] += 1
                assert model.kind is not None and not same and not overwrite, label
                assert files(out) == before, label  # the refusal changed nothing
            except KeyboardInterrupt:
                seen["interrupted"] += 1
                assert action == "interrupt" and not (model.kind == "finished" and same), label
                model.kind, model.eod, model.versions = "unfinished", eod, versions()
            else:
                assert action == "prepare" or (model.kind == "finished" and same), label
                assert model.kind is None or same or overwrite, label
                seen[{None: "made", "finished": "kept" if same else "rebuilt"}.get(model.kind, "resumed")] += 1
                if model.kind == "unfinished" and not same:
                    seen["restarted"] += 1
                if model.kind == "finished" and same:
                    assert files(out) == before, label
                model.kind, model.eod, model.content = "finished", eod, content()
            finally:
                monkeypatch.undo()
        if model.kind == "finished":
            assert tokens_of(out) == expected(model.eod, model.content), f"step {step}"
        assert (out / "tokenport.json").exists() == (model.kind == "finished"), f"step {step}"
    assert {"kept", "rebuilt", "resumed", "restarted", "refused", "interrupted"} <= set(seen), seen


def tokens_of(out: pathlib.Path) -> list[list[int]]:
    manifest = json.loads((out / "tokenport.json").read_text())
    parts = [str(out / part["name"]) for part in manifest["parts"]]
    result = []
    for prefix in parts:
        with IndexedDataset(prefix) as ds:
            result.extend(np.asarray(ds[i]).tolist() for i in range(len(ds)))
    return result


def test_an_object_store_output_of_inputs_that_changed_is_refused(tmp_path, s3, monkeypatch):
    pytest.importorskip("s3fs")
    import fsspec

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    fsspec.filesystem("s3").clear_instance_cache()
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl", TEXTS[:5])
    settings = PrepareConfig(inputs=[str(tmp_path / "in")], output=f"s3://{s3.bucket}/out", workers=1)
    assert prepare(settings).documents == 5
    assert prepare(settings).resumed_units == 1  # unchanged: the finished upload is the answer
    write_jsonl(tmp_path / "in" / "a.jsonl", TEXTS[:7])
    with pytest.raises(ConfigError, match=f"s3://{s3.bucket}/out: .*{tmp_path / 'in' / 'a.jsonl'} changed"):
        prepare(settings)


def test_the_cli_names_the_changed_input_and_force_prepares_again(corpus, capsys):
    from tokenport.cli import main

    command = ["prepare", str(corpus / "in"), "-o", str(corpus / "out"), "-q", "--workers", "1"]
    assert main(command) == 0
    (corpus / "in" / "b.txt").write_text("A whole text file is one document, and longer now.")
    capsys.readouterr()
    assert main(command) == 2
    error = capsys.readouterr().err
    assert f"{corpus / 'in' / 'b.txt'} changed" in error and "--force" in error
    assert main([*command, "--force"]) == 0
    assert tokens_of(corpus / "out") == reference(corpus, "fresh")

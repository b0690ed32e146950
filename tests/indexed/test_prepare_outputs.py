"""A prepare output directory is accepted where a store is read, and a path that is no store says what it is.

IndexedDataset opens a one-part output's part and refuses several parts with the calls that read
them; a raw corpus file or folder is refused with the prepare command, never "PATH.idx: file not found".
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.errors import ConfigError
from tokenport.indexed import resolve_stores


def prepare_output(directory, parts) -> list[str]:
    """A prepare output directory: each part a store of the given documents, listed in tokenport.json."""
    os.makedirs(directory, exist_ok=True)
    names = [f"part-{k:05d}" for k in range(len(parts))]
    for name, documents in zip(names, parts):
        build_store(os.path.join(directory, name), documents, dtype=np.uint16)
    listing = {"fingerprint": "f", "parts": [{"name": name, "documents": len(d)} for name, d in zip(names, parts)]}
    with open(os.path.join(directory, "tokenport.json"), "w") as f:
        json.dump(listing, f)
    return [os.path.join(directory, name) for name in names]


def test_indexed_dataset_opens_the_one_part_of_a_prepare_output(tmp_path):
    (part,) = prepare_output(tmp_path / "web", [[[1, 2, 3], [4, 5]]])
    for spelling in (tmp_path / "web", str(tmp_path / "web"), str(tmp_path / "web") + "/"):
        with tp.IndexedDataset(spelling) as store:
            assert store.prefix == part and len(store) == 2 and store[1].tolist() == [4, 5]


def test_indexed_dataset_of_several_parts_names_the_calls_that_read_them(tmp_path):
    prepare_output(tmp_path / "web", [[[1, 2]], [[3]]])
    with pytest.raises(ConfigError) as caught:
        tp.IndexedDataset(tmp_path / "web")
    message = str(caught.value)
    assert "prepare output of 2 parts" in message and "resolve_stores" in message and "build_datasets" in message
    assert "tokenport merge -o" in message and ".idx" not in message


def test_a_store_beside_a_directory_of_its_name_is_that_store(tmp_path):
    prepare_output(tmp_path / "web", [[[1, 2]], [[3]]])
    build_store(tmp_path / "web", [[9, 9, 9]], dtype=np.uint16)
    with tp.IndexedDataset(tmp_path / "web") as store:
        assert store.prefix == str(tmp_path / "web") and store[0].tolist() == [9, 9, 9]
    assert resolve_stores([str(tmp_path / "web")]) == [str(tmp_path / "web")]


@pytest.mark.parametrize("name", ["data.jsonl", "data.json", "data.jsonl.gz", "data.parquet", "notes.txt", "t.csv"])
def test_a_raw_corpus_file_is_refused_with_the_prepare_command(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b'{"text": "hello"}\n')
    stem = name.split(".")[0]
    expected = (
        f"{path} is a raw corpus file, not a token store: prepare it first: tokenport prepare {path} -o stores/{stem}"
    )
    for read in (lambda: tp.IndexedDataset(path), lambda: resolve_stores([str(path)])):
        with pytest.raises(ConfigError) as caught:
            read()
        assert str(caught.value) == expected


def test_a_manifest_beside_its_store_is_still_the_store(tmp_path):
    prefix = build_store(tmp_path / "wiki", [[1, 2, 3]], dtype=np.uint16)
    assert resolve_stores([prefix + ".json"]) == [prefix]
    with tp.IndexedDataset(prefix + ".json") as store:
        assert len(store) == 1


def test_a_file_of_no_known_kind_is_named_as_no_store(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"\x00\x01")
    with pytest.raises(
        ConfigError, match=r"blob is a file but not a token store .*tokenport prepare .*blob -o stores/blob"
    ):
        tp.IndexedDataset(path)


def test_directories_that_are_no_prepare_output_say_what_they_hold(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text("{}\n")
    (raw / "b.txt").write_text("x")
    hf = tmp_path / "saved"
    hf.mkdir()
    for name in ("state.json", "dataset_info.json", "data-00000-of-00001.arrow"):
        (hf / name).write_text("{}")
    loose = tmp_path / "loose"
    build_store(loose / "x", [[1]], dtype=np.uint16)
    outputs = tmp_path / "stores"
    prepare_output(outputs / "web", [[[1]]])
    unfinished = tmp_path / "running"
    (unfinished / ".work").mkdir(parents=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "README").write_text("x")
    cases = {
        raw: rf"holds raw corpus files \(a.jsonl, b.txt\), not token stores: prepare it first: "
        rf"tokenport prepare {raw} -o stores/raw$",
        hf: rf"is an HF dataset saved to disk \(a raw corpus\), not a token store: prepare it first: "
        rf"tokenport prepare {hf} -o stores/saved$",
        loose: rf"holds 1 token store\(s\); pass them by prefix: {loose}/x$",
        outputs: rf"holds 1 prepare output\(s\); pass them: {outputs}/web$",
        unfinished: r"unfinished prepare run \(.work/\); rerun the same tokenport prepare command",
        empty: r"without tokenport.json, so not a prepare output: it is empty; pass store prefixes",
        other: r"it holds 1 file\(s\) \(README\), none a token store; pass store prefixes",
    }
    for directory, pattern in cases.items():
        with pytest.raises(ConfigError, match=pattern):
            tp.IndexedDataset(directory)
        with pytest.raises(ConfigError, match=pattern):
            resolve_stores([str(directory)])


def test_a_remote_prefix_is_not_looked_up_as_a_local_path(tmp_path, monkeypatch):
    """s3:// arguments are store prefixes as before: resolve_stores does not list object stores."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("s3:/bucket/out")  # a local folder spelled like the URL must not be taken for it
    assert resolve_stores(["s3://bucket/out"]) == ["s3://bucket/out"]


def test_a_remote_prepare_output_names_its_parts(s3, tmp_path):
    """Store lists expand local directories only; a prepare output on S3 is refused naming its parts."""
    pytest.importorskip("s3fs")
    from tokenport.storage.remote import RemoteOptions

    prepare_output(tmp_path / "web", [[[1, 2]], [[3]]])
    for name in sorted(os.listdir(tmp_path / "web")):
        s3.put((tmp_path / "web" / name).read_bytes(), key=f"runs/web/{name}")
    url = f"s3://{s3.bucket}/runs/web"
    options = RemoteOptions(storage_options=s3.storage_options())
    with pytest.raises(ConfigError) as caught:
        tp.IndexedDataset(url, remote_options=options, cache_dir=tmp_path / "cache")
    assert str(caught.value) == (
        f"{url} is a prepare output on object storage: a remote directory is not expanded to its parts (only a "
        f"local one is); name the parts its tokenport.json lists: {url}/part-00000 {url}/part-00001"
    )
    with tp.IndexedDataset(f"{url}/part-00001", remote_options=options, cache_dir=tmp_path / "cache") as part:
        assert part[0].tolist() == [3]
    with pytest.raises(tp.StorageError):  # no listing there: the missing object's own error
        tp.IndexedDataset(f"s3://{s3.bucket}/runs/nothing", remote_options=options, cache_dir=tmp_path / "cache")

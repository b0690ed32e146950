"""`prepare` into an object store (moto on 127.0.0.1): a reader never finds a half-uploaded output,
and a rerun finishes an interrupted upload or rolls back one of other settings."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests._support.s3_server import FaultProxy, MotoS3
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import ConfigError, StorageError

pytest.importorskip("s3fs")


@pytest.fixture
def through_proxy(s3: MotoS3, fault_proxy: FaultProxy, monkeypatch, tmp_path) -> FaultProxy:
    """s3:// goes through the fault proxy; the staging directory is under tmp_path."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.endpoint_url)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    yield fault_proxy
    s3fs.S3FileSystem.clear_instance_cache()


def _inputs(tmp_path: pathlib.Path) -> list[str]:
    paths = []
    for k in range(3):
        path = tmp_path / f"in{k}.jsonl"
        path.write_text("".join(json.dumps({"text": f"document {i} of file {k}, " * 5}) + "\n" for i in range(40)))
        paths.append(str(path))
    return paths


def _keys(s3: MotoS3, prefix: str) -> list[str]:
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/").get("Contents", [])
    return sorted(o["Key"][len(prefix) + 1 :] for o in listed)


def _object(s3: MotoS3, key: str) -> bytes:
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def test_an_interrupted_upload_shows_no_manifest_and_a_rerun_finishes_it(s3, through_proxy, tmp_path):
    inputs = _inputs(tmp_path)
    local = prepare(PrepareConfig(inputs, str(tmp_path / "local"), workers=1))
    url = f"s3://{s3.bucket}/interrupted"
    through_proxy.inject("403", every=4, methods=("PUT",))  # the 4th PUT (a part's file) is refused
    with pytest.raises(StorageError, match="access denied"):
        prepare(PrepareConfig(inputs, url, workers=1))
    uploaded = _keys(s3, "interrupted")
    assert ".tokenport-upload.json" in uploaded and "tokenport.json" not in uploaded  # nothing names a part yet
    through_proxy.clear()
    finished = prepare(PrepareConfig(inputs, url, workers=1))
    assert finished.resumed_units == finished.units  # the work was kept; only the upload was finished
    assert through_proxy.count("PUT") == len(local.parts) * 3 + 2 - (len(uploaded) - 1)  # the rest, journal, manifest
    assert _keys(s3, "interrupted") == sorted(
        [f"part-{k:05d}.{s}" for k in range(len(local.parts)) for s in ("bin", "idx", "json")] + ["tokenport.json"]
    )
    for prefix in local.parts:
        name = prefix.rsplit("/", 1)[1]
        for suffix in (".bin", ".idx"):
            assert _object(s3, f"interrupted/{name}{suffix}") == pathlib.Path(prefix + suffix).read_bytes()


def test_an_upload_of_other_settings_is_rolled_back_and_a_finished_one_refused(s3, through_proxy, tmp_path):
    inputs = _inputs(tmp_path)
    s3.put(
        json.dumps({"fingerprint": "other", "files": {"part-00007.bin": [3, "x"]}}).encode(),
        "rolled/.tokenport-upload.json",
    )
    s3.put(b"old", "rolled/part-00007.bin")
    url = f"s3://{s3.bucket}/rolled"
    result = prepare(PrepareConfig(inputs, url, workers=1))
    assert "part-00007.bin" not in _keys(s3, "rolled") and "tokenport.json" in _keys(s3, "rolled")
    assert result.documents == 120 and result.output == url
    with pytest.raises(ConfigError, match="rolled: output exists .*other settings"):
        prepare(PrepareConfig(inputs, url, workers=1, append_eod=False))


def test_a_prefix_holding_other_objects_is_refused_before_any_work(s3, through_proxy, tmp_path):
    s3.put(b"someone else's", "taken/notes.txt")
    with pytest.raises(ConfigError, match=r"taken: holds objects \(notes.txt\.\.\.\) and no prepare run"):
        prepare(PrepareConfig(_inputs(tmp_path), f"s3://{s3.bucket}/taken", workers=1))
    assert not (tmp_path / "cache").exists()

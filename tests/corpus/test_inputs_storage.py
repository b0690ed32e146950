"""Raw inputs on object storage open through storage/: a fault on the way gets the retries, backoff
and error messages a token store gets (moto S3 behind the fault-injecting proxy, real s3fs)."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import pytest

from tests._support.s3_server import FaultProxy, MotoS3
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import StorageError
from tokenport.storage import open_source
from tokenport.storage.remote import RemoteOptions

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("s3fs")

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FAST = {"backoff_initial": 0.001, "backoff_max": 0.01}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:10]]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, texts, s3: MotoS3) -> tuple[Path, str]:
    """The same corpus as local files and as objects: gzipped jsonl and parquet."""
    root = tmp_path_factory.mktemp("corpus")
    with gzip.open(root / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[:5])
    pq.write_table(pa.table({"text": texts[5:]}), root / "b.parquet", row_group_size=2)
    for path in sorted(root.iterdir()):
        s3.put(path.read_bytes(), key=f"faulty/{path.name}")
    return root, f"s3://{s3.bucket}/faulty/"


@pytest.fixture
def through_proxy(monkeypatch, fault_proxy: FaultProxy) -> FaultProxy:
    """prepare's reads of s3:// go through the fault proxy."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.endpoint_url)
    s3fs.S3FileSystem.clear_instance_cache()
    yield fault_proxy
    s3fs.S3FileSystem.clear_instance_cache()


def run(inputs: list[str], output: Path):
    return prepare(PrepareConfig(inputs=inputs, output=str(output), workers=1))


def store_files(result) -> list[bytes]:
    return [Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


@pytest.mark.parametrize("name", ["a.jsonl.gz", "b.parquet"])
def test_throttled_inputs_are_retried_and_read_whole(inputs, through_proxy, tmp_path, name):
    local, url = inputs
    expected = run([str(local / name)], tmp_path / "local")
    through_proxy.inject("503", first=1, every=4)  # the first GET, and every fourth after it, fail once
    remote = run([url + name], tmp_path / "remote")
    assert store_files(remote) == store_files(expected) and remote.documents == expected.documents == 5
    assert (
        through_proxy.count("GET", "503") >= 2 if name.endswith(".parquet") else through_proxy.count("GET", "503") == 1
    )


def test_a_throttled_listing_is_retried(inputs, through_proxy, tmp_path):
    local, url = inputs
    through_proxy.inject("503", first=2)
    remote = run([url], tmp_path / "remote")
    assert remote.documents == 10 and through_proxy.count("GET", "503") == 2


@pytest.mark.parametrize("name", ["a.jsonl.gz", "b.parquet"])
def test_denied_input_fails_with_the_stores_message(inputs, through_proxy, tmp_path, name):
    through_proxy.inject("403", first=1000)
    with pytest.raises(StorageError, match=rf"faulty/{name}.*access denied while .*check the credentials"):
        run([inputs[1] + name], tmp_path / "out")


@pytest.mark.parametrize("name", ["a.jsonl.gz", "b.parquet"])
def test_an_input_stream_that_keeps_failing_gives_up_like_a_store(inputs, s3, fault_proxy, name):
    source = open_source(
        inputs[1] + name, options=RemoteOptions(**FAST, max_retries=2), **s3.storage_options(fault_proxy.endpoint_url)
    )
    fault_proxy.inject("500", first=1000)
    with pytest.raises(StorageError, match=r"still failing after 3 attempts"):
        with source.stream() as f:
            pq.ParquetFile(f) if name.endswith(".parquet") else gzip.GzipFile(fileobj=f).read()
    assert source.stats.retries == 2 and fault_proxy.count("GET", "500") == 3
    fault_proxy.clear()
    with source.stream() as f:
        table = pq.read_table(f) if name.endswith(".parquet") else None
        assert table is None or table.num_rows == 5
        assert name.endswith(".parquet") or gzip.GzipFile(fileobj=f).read().count(b"\n") == 5


def test_a_whole_input_read_at_once_takes_one_request(inputs, s3, fault_proxy):
    local, url = inputs
    source = open_source(
        url + "b.parquet", options=RemoteOptions(**FAST), **s3.storage_options(fault_proxy.endpoint_url)
    )
    with source.stream() as f:
        f.seek(3)
        assert f.read() == (local / "b.parquet").read_bytes()[3:]
    assert fault_proxy.count("GET") == source.stats.requests == 1 and source.cached_bytes == 0

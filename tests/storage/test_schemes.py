"""The scheme registry: a toy "mem://" backend, registered in the test and nowhere else, is read by
IndexedDataset and by prepare's inputs; IndexedDataset also reads byte sources passed in."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import pickle
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import ConfigError, StorageError
from tokenport.indexed import IndexedDataset
from tokenport.storage import ByteSource, FileInfo, MmapSource, Scheme, open_source, register_scheme, schemes

STDLIB = Path(sysconfig.get_paths()["stdlib"])


class MemSource(ByteSource):
    """The bytes of one in-memory object."""

    def __init__(self, url: str, data: bytes) -> None:
        self.url, self._data = url, data

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, length: int) -> bytes:
        return self._data[offset : offset + length]


class MemScheme(Scheme):
    """Objects in a dict, keyed by URL: the smallest backend the registry accepts."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def open(self, url: str, **options: Any) -> ByteSource:
        if url not in self.objects:
            raise StorageError(f"{url}: not found")
        return MemSource(url, self.objects[url])

    def find(self, url: str, **options: Any) -> list[FileInfo]:
        names = sorted(
            u for u in self.objects if u == url or u.startswith(url.rstrip("/") + "/") or fnmatch.fnmatch(u, url)
        )
        return [FileInfo(u, len(self.objects[u]), hashlib.sha256(self.objects[u]).hexdigest()) for u in names]


@pytest.fixture
def mem() -> Iterator[MemScheme]:
    scheme = MemScheme()
    register_scheme("mem", scheme)
    try:
        yield scheme
    finally:
        del schemes.SCHEMES["mem"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:12]]


def write_jsonl(path: Path, texts: list[str]) -> bytes:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path.read_bytes()


def run(inputs: list[str], output: Path):
    return prepare(PrepareConfig(inputs=inputs, output=str(output), workers=1, unit_bytes=20_000))


def store_files(result) -> list[bytes]:
    return [Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


def test_a_registered_scheme_feeds_prepares_inputs_and_indexed_dataset(mem, tmp_path, texts):
    half = len(texts) // 2
    (tmp_path / "corpus").mkdir()
    for name, part in (("a.jsonl", texts[:half]), ("b.jsonl", texts[half:])):
        mem.objects[f"mem://corpus/{name}"] = write_jsonl(tmp_path / "corpus" / name, part)
    mem.objects["mem://corpus/notes.txt"] = b"not matched by the glob"
    local = run([str(tmp_path / "corpus" / "*.jsonl")], tmp_path / "local")
    for spec, out in (("mem://corpus/*.jsonl", "glob"), ("mem://corpus/a.jsonl", "one")):
        remote = run([spec] + (["mem://corpus/b.jsonl"] if out == "one" else []), tmp_path / out)
        assert store_files(remote) == store_files(local) and remote.documents == len(texts)

    prefix = local.parts[0]
    for suffix in (".bin", ".idx", ".json"):
        mem.objects[f"mem://stores/wiki{suffix}"] = Path(prefix + suffix).read_bytes()
    with IndexedDataset(prefix) as expected, IndexedDataset("mem://stores/wiki") as store:
        assert len(store) == len(expected) > 3
        assert all(np.array_equal(store[i], expected[i]) for i in range(len(store)))
        assert store.manifest == expected.manifest is not None
        tokens, offsets = store.get_many([3, 1])
        assert np.array_equal(tokens, np.concatenate([expected[3], expected[1]]))


def test_a_scheme_that_keeps_no_manifest_reads_as_a_store_without_one(mem, tmp_path):
    (prefix,) = run([str(Path(__file__))], tmp_path / "out").parts
    for suffix in (".bin", ".idx"):
        mem.objects[f"mem://s{suffix}"] = Path(prefix + suffix).read_bytes()
    with IndexedDataset("mem://s") as store:
        assert store.manifest is None and len(store) == 1


def test_indexed_dataset_reads_sources_passed_in(tmp_path):
    (prefix,) = run([str(Path(__file__))], tmp_path / "out").parts
    idx = MemSource("mem://x.idx", Path(prefix + ".idx").read_bytes())
    bin_ = MemSource("mem://x.bin", Path(prefix + ".bin").read_bytes())
    with IndexedDataset(prefix) as expected:
        for store in (
            IndexedDataset("x", sources=(idx, bin_)),
            pickle.loads(pickle.dumps(IndexedDataset("x", sources=(idx, bin_)))),
        ):
            assert np.array_equal(store[0], expected[0]) and store.token_array() is None
    bad = MemSource("mem://x.bin", Path(prefix + ".bin").read_bytes()[:-2])
    with pytest.raises(Exception, match=r"mem://x\.bin: has .* bytes but the index needs"):
        IndexedDataset("x", sources=(idx, bad))
    with pytest.raises(ConfigError, match="sources must be an \\(idx, bin\\) pair"):
        IndexedDataset("x", sources=(idx,))  # type: ignore[arg-type]


def test_register_scheme_refuses_taken_and_malformed_names(mem):
    with pytest.raises(ConfigError, match="'mem' is registered already"):
        register_scheme("mem", MemScheme())
    for name in ("file", "s3://", ""):
        with pytest.raises(ConfigError, match="is not a scheme name"):
            register_scheme(name, MemScheme())
    with pytest.raises(ConfigError, match="give a storage.Scheme instance"):
        register_scheme("other", object())  # type: ignore[arg-type]


def test_a_url_no_backend_serves_is_refused_by_its_scheme(tmp_path):
    with pytest.raises(ConfigError, match="no storage backend knows the scheme 'nosuch'"):
        open_source("nosuch://bucket/key")
    (tmp_path / "one.jsonl").write_text('{"text": "hello"}\n')
    config = PrepareConfig(inputs=[str(tmp_path / "one.jsonl")], output="nosuch://bucket/out", tokenizer="byte")
    with pytest.raises(ConfigError, match="register one with storage.register_scheme"):
        prepare(config)


@pytest.mark.parametrize("local", [False, True])
def test_stream_reads_seeks_and_tells_like_a_file(tmp_path, local):
    data = np.random.default_rng(0).integers(0, 256, 300_001, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    source = open_source(tmp_path / "f") if local else MemSource("mem://f", data)
    assert isinstance(source, MmapSource) == local
    with source.stream(buffer_size=4096) as f:
        assert f.read(10) == data[:10] and f.tell() == 10
        assert f.seek(-5, io.SEEK_END) == len(data) - 5 and f.read() == data[-5:]
        assert f.seek(123_457) == 123_457 and f.read(200_000) == data[123_457:323_457][:200_000]
        f.seek(0)
        assert f.read() == data and f.read(1) == b""

"""Adding a storage scheme from outside tokenport: a toy ``toy://`` backend (a `Scheme` subclass
that serves the files under one directory) registered with `register_scheme`, read end to end by
IndexedDataset and GPTDataset, its corrupt objects detected, and named on the CLI (`inspect`,
`verify`) in a process where the toy is a ``tokenport.plugins`` entry-point plugin."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.plugins import write_plugin
from tests._support.stores import build_store, random_documents
from tokenport.errors import CorruptStoreError, StorageError
from tokenport.storage import ByteSource, FileInfo, Scheme, open_source, register_scheme, schemes

REPO = Path(__file__).resolve().parents[2]


class ToySource(ByteSource):
    """The bytes of one toy object, read whole at open."""

    def __init__(self, url: str, data: bytes) -> None:
        self.url, self._data = url, data

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, length: int) -> bytes:
        return self._data[offset : offset + length]


class DirScheme(Scheme):
    """``toy://KEY`` is the file KEY under `root`: the smallest backend of objects in a directory."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def _path(self, url: str) -> Path:
        return self.root / url.split("://", 1)[1]

    def open(self, url: str, **options: Any) -> ByteSource:
        path = self._path(url)
        if not path.is_file():
            raise StorageError(f"{url}: no such toy object")
        return ToySource(url, path.read_bytes())

    def find(self, url: str, **options: Any) -> list[FileInfo]:
        keys = sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        key = url.split("://", 1)[1]
        names = [k for k in keys if k == key or k.startswith(key.rstrip("/") + "/") or fnmatch.fnmatch(k, key)]
        return [self._info(f"toy://{k}") for k in names]

    def _info(self, url: str) -> FileInfo:
        data = self._path(url).read_bytes()
        return FileInfo(url, len(data), hashlib.sha256(data).hexdigest())


def write_store(prefix: Path, documents: int = 40) -> str:
    """A small store of `documents` documents with a manifest (checksums), written locally."""
    texts = random_documents(np.random.default_rng(7), documents, tokens=(1, 1000), length=(1, 60))
    return build_store(prefix, texts, dtype=np.uint16, vocab_size=1000)


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[Path]:
    """A directory served as ``toy://``, holding the store ``toy://stores/wiki`` (and its local twin)."""
    local = write_store(tmp_path / "local" / "wiki")
    root = tmp_path / "bucket"
    (root / "stores").mkdir(parents=True)
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(local + suffix, root / "stores" / f"wiki{suffix}")
    register_scheme("toy", DirScheme(root))
    try:
        yield root
    finally:
        del schemes.SCHEMES["toy"]


def test_a_registered_toy_scheme_serves_indexed_and_gpt_datasets(bucket, tmp_path):
    local = str(tmp_path / "local" / "wiki")
    assert isinstance(open_source("toy://stores/wiki.bin"), ToySource)
    with tp.IndexedDataset(local) as expected, tp.IndexedDataset("toy://stores/wiki") as store:
        assert len(store) == len(expected) == 40 and store.manifest == expected.manifest is not None
        assert all(np.array_equal(store[i], expected[i]) for i in range(len(store)))
        tokens, offsets = store.get_many([5, 2, 9])
        assert np.array_equal(tokens, np.concatenate([expected[5], expected[2], expected[9]]))
        config = tp.GPTSampleConfig(seq_length=16, eod_id=0)
        indices = np.arange(expected.num_documents, dtype=np.int32)
        gpt_local, gpt_toy = (tp.GPTDataset(ds, indices, 30, config, 1234) for ds in (expected, store))
        assert len(gpt_toy) == len(gpt_local) > 0
        for i in range(len(gpt_toy)):
            got, want = gpt_toy[i], gpt_local[i]
            assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)
    assert tp.verify("toy://stores/wiki").sequences == 40


def test_a_corrupt_toy_object_is_detected(bucket):
    data = bytearray((bucket / "stores" / "wiki.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bucket / "stores" / "wiki.bin").write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match="toy://stores/wiki"):
        tp.verify("toy://stores/wiki")
    (bucket / "stores" / "wiki.bin").write_bytes(bytes(data[:-3]))  # truncated: refused at open
    with pytest.raises(CorruptStoreError, match=r"toy://stores/wiki\.bin"):
        tp.IndexedDataset("toy://stores/wiki")


PLUGIN = """
import os

from tests.extending.test_storage_scheme import DirScheme
from tokenport.storage import register_scheme

register_scheme("toy", DirScheme(os.environ["TOY_ROOT"]))
"""


def run_cli(tmp_path: Path, root: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m tokenport ARGS` in a process where the toy scheme is a tokenport.plugins plugin."""
    plugins = write_plugin(tmp_path / "plugins", "toy_plugin", PLUGIN, name="toy")
    path = os.pathsep.join([plugins, str(REPO), *sys.path[1:]])
    env = {"PYTHONPATH": path, "PATH": os.environ.get("PATH", "/usr/bin"), "TOY_ROOT": str(root)}
    return subprocess.run(
        [sys.executable, "-m", "tokenport", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_cli_reads_a_store_through_a_plugin_scheme(bucket, tmp_path):
    out = run_cli(tmp_path, bucket, "inspect", "--json", "--documents", "2", "toy://stores/wiki")
    assert out.returncode == 0, out.stderr
    (report,) = json.loads(out.stdout)["stores"]
    assert report["sequences"] == 40 and "toy://stores/wiki" in json.dumps(report)
    out = run_cli(tmp_path, bucket, "verify", "toy://stores/wiki")
    assert out.returncode == 0 and "toy://stores/wiki" in out.stdout, out.stderr
    (bucket / "stores" / "wiki.bin").write_bytes((bucket / "stores" / "wiki.bin").read_bytes()[:-2])
    out = run_cli(tmp_path, bucket, "verify", "toy://stores/wiki")
    assert out.returncode == 1 and "toy://stores/wiki" in out.stderr

"""The node cache is on by default for remote stores: in $TOKENPORT_CACHE_DIR/blocks (the test suite
points that at a temporary directory, tests/conftest.py), off with TOKENPORT_NODE_CACHE=off or
node_cache_dir=None, keyed by each object's version, and never in the way of a read it cannot help."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tests._support.s3_server import MotoS3
from tests._support.stores import build_store, random_documents
from tokenport.errors import StorageError
from tokenport.storage import remote
from tokenport.storage.options import default_node_cache_dir
from tokenport.storage.remote import ObjectStoreSource, RemoteOptions

pytest.importorskip("s3fs")

FAST = {"backoff_initial": 0.001, "backoff_max": 0.01}
MIB = 1 << 20


def _data(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _source(s3: MotoS3, url: str, endpoint: str | None = None, **options: object) -> ObjectStoreSource:
    return ObjectStoreSource(url, RemoteOptions(**{**FAST, **options}), **s3.storage_options(endpoint))


def test_default_options_keep_blocks_in_the_per_user_cache(s3, fault_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "home-cache"))
    options = RemoteOptions()
    assert options.node_cache_dir == str(tmp_path / "home-cache" / "blocks") and options.node_cache_defaulted
    assert options.node_cache_bytes == 32 << 30
    data = _data(3 * MIB + 5, seed=1)
    url = s3.put(data)
    src = _source(s3, url, fault_proxy.endpoint_url)
    fault_proxy.clear()
    assert bytes(src.read(MIB - 3, MIB + 10)) == data[MIB - 3 : 2 * MIB + 7]
    assert fault_proxy.count("GET") >= 1
    assert len(list((tmp_path / "home-cache" / "blocks").glob("*/*.blk"))) == 3  # blocks 0, 1 and 2
    fault_proxy.clear()
    again = _source(s3, url, fault_proxy.endpoint_url)  # another process or a restart: from disk
    assert bytes(again.read(MIB - 3, MIB + 10)) == data[MIB - 3 : 2 * MIB + 7]
    assert fault_proxy.count("GET") == 0


@pytest.mark.parametrize("value", ["off", "0", "None"])
def test_the_default_node_cache_can_be_turned_off(s3, tmp_path, monkeypatch, value):
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TOKENPORT_NODE_CACHE", value)
    assert default_node_cache_dir() is None and RemoteOptions().node_cache_dir is None
    monkeypatch.delenv("TOKENPORT_NODE_CACHE")
    src = _source(s3, s3.put(_data(1000, seed=2)), node_cache_dir=None)
    assert src._node is None and bytes(src.read(0, 10)) and not (tmp_path / "blocks").exists()


def test_without_a_home_or_cache_dir_the_default_is_off(monkeypatch):
    monkeypatch.delenv("TOKENPORT_CACHE_DIR")
    monkeypatch.setattr("os.path.expanduser", lambda path: path)  # HOME unset and no passwd entry
    assert default_node_cache_dir() is None and RemoteOptions().node_cache_dir is None


def test_a_changed_object_is_never_served_the_old_blocks(s3, tmp_path):
    url = s3.put(_data(2 * MIB, seed=3))
    assert bytes(_source(s3, url).read(0, 100)) == _data(2 * MIB, seed=3)[:100]
    new = _data(2 * MIB, seed=4)  # same key, same size, new bytes (a new ETag)
    s3.put(new, key=url.rsplit("/", 1)[1])
    assert bytes(_source(s3, url).read(0, 100)) == new[:100]


def test_an_object_without_a_version_tag_is_not_cached_by_default(s3, tmp_path, monkeypatch):
    """Its blocks could only be keyed by URL and size, so a rewrite of the same size would be served
    stale blocks: the default cache leaves such an object alone (a chosen directory still caches it)."""
    stat = remote._stat
    monkeypatch.setattr(remote, "_stat", lambda *args: (stat(*args)[0], None))
    url = s3.put(_data(1000, seed=5))
    assert _source(s3, url)._node is None
    assert _source(s3, url, node_cache_dir=str(tmp_path / "chosen"))._node is not None


def test_a_default_cache_that_cannot_be_made_falls_back_to_memory(s3, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(blocker))
    data = _data(5000, seed=6)
    url = s3.put(data)
    with caplog.at_level(logging.WARNING, logger="tokenport.storage.remote"):
        src = _source(s3, url)
    assert src._node is None and bytes(src.read(10, 100)) == data[10:110]
    assert "through memory only" in caplog.text
    with pytest.raises(StorageError, match="node_cache_dir"):  # a directory the caller chose is not skipped
        _source(s3, url, node_cache_dir=str(blocker / "mine"))


def test_four_loader_workers_with_default_options_fetch_each_block_once(s3, fault_proxy, tmp_path):
    """StatefulLoader over a remote GPTDataset, 4 workers, no options but the endpoint: every 1 MiB
    block of the .bin is downloaded whole at most once per node (each worker's exact first window
    fetches at most 2 x first_exact_bytes besides: its first ranges and the gaps it bridges), and
    every batch equals the local store's."""
    torch = pytest.importorskip("torch")
    prefix = tmp_path / "s"
    rng = np.random.default_rng(7)
    build_store(prefix, random_documents(rng, 1500, tokens=(3, 1000), length=(500, 1500)), dtype=np.uint16)
    for suffix in (".bin", ".idx", ".json"):
        s3.put((Path(f"{prefix}{suffix}")).read_bytes(), key=f"default/s{suffix}")
    url = f"s3://{s3.bucket}/default/s"
    store = tp.IndexedDataset(
        url, remote_options=RemoteOptions(storage_options=s3.storage_options(fault_proxy.endpoint_url))
    )
    config = tp.GPTSampleConfig(512, 3)
    dataset = tp.GPTDataset(store, np.arange(len(store)), 2000, config, 1)
    local = tp.GPTDataset(tp.IndexedDataset(str(prefix)), np.arange(len(store)), 2000, config, 1)
    torch.set_num_threads(1)
    loader = tp.StatefulLoader.for_dataset(
        dataset, micro_batch_size=16, seed=4, num_workers=4, multiprocessing_context="fork"
    )
    expected = tp.StatefulLoader.for_dataset(local, micro_batch_size=16, seed=4)
    fault_proxy.clear()
    for got, want in zip(loader, expected, strict=True):
        assert torch.equal(got["tokens"], want["tokens"]) and torch.equal(got["labels"], want["labels"])
    size = Path(f"{prefix}.bin").stat().st_size
    whole: Counter[int] = Counter()
    exact = 0
    for path, first, last in fault_proxy.ranges:
        assert path.endswith("/default/s.bin")
        if first % MIB == 0 and ((last + 1) % MIB == 0 or last + 1 == size):
            whole.update(range(first // MIB, last // MIB + 1))
        else:
            exact += last - first + 1
    assert sorted(whole) == list(range(-(-size // MIB)))  # every block of the .bin ...
    assert set(whole.values()) == {1}  # ... downloaded whole once, not once per worker
    assert exact <= 4 * 2 * RemoteOptions().first_exact_bytes  # each worker's ranges and the gaps bridged

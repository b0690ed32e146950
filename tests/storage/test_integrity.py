"""Integrity of what crosses the storage seams: node-cache blocks checked against the checksums
written with them, remote objects pinned at open, the node cache's ledger and pin files read
through the typed schema layer, files it did not write left alone, and kills at each write step."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import build_store
from tokenport._schema import encode
from tokenport.errors import CorruptStoreError, StorageError, TokenportError
from tokenport.storage import blockfile
from tokenport.storage.nodecache import (
    FAULT_ENV,
    FAULT_EXIT_CODE,
    DamagedBlock,
    Ledger,
    NodeCache,
    Pins,
    read_ledger,
    read_pins,
)
from tokenport.storage.remote import ObjectStoreSource, RemoteOptions

KIB = 1 << 10
FAST = {"backoff_initial": 0.001, "backoff_max": 0.01}


def random_bytes(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def key(n: int) -> str:
    return NodeCache.key(f"s3://bucket/object-{n}", 1 << 20, f'"etag-{n}"', 64 * KIB)


def blocks_on_disk(directory: Path) -> dict[str, int]:
    """Path -> size of every block file the cache wrote under `directory` (N.blk beside its N.lock)."""
    return {
        e.path: e.stat().st_size
        for d in os.scandir(directory)
        if d.is_dir() and not d.name.startswith(".")
        for e in os.scandir(d)
        if re.fullmatch(r"(0|[1-9][0-9]*)\.blk", e.name) and os.path.exists(e.path[:-4] + ".lock")
    }


# --- block checksums ----------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 5000, blockfile.CHUNK, 3 * blockfile.CHUNK + 17])
def test_a_block_damaged_in_place_is_never_served(tmp_path, length):
    cache = NodeCache(tmp_path, 1 << 20)
    data = random_bytes(length, seed=length)
    assert cache.put(key(0), {3: data}) == {3}
    path = cache.block_path(key(0), 3)
    assert os.path.getsize(path) == blockfile.stored_size(length)
    assert cache.read(key(0), 3, 0, length) == data
    original = Path(path).read_bytes()
    rng = random.Random(length)
    for at in sorted({0, len(original) - 1, *(rng.randrange(len(original)) for _ in range(40))}):
        damaged = bytearray(original)
        damaged[at] ^= 1 << rng.randrange(8)
        Path(path).write_bytes(bytes(damaged))  # same length, one bit changed
        with pytest.raises(DamagedBlock, match=f"{path}: .*fails its checksums.*delete"):
            cache.read(key(0), 3, 0, length)
        chunk = (at // blockfile.STRIDE) * blockfile.CHUNK  # any read touching the damaged chunk is refused
        with pytest.raises(DamagedBlock):
            cache.read(key(0), 3, min(chunk + at % blockfile.STRIDE, length - 1), 1)
    Path(path).write_bytes(original)
    assert cache.read(key(0), 3, 0, length) == data


def test_chunks_moved_between_blocks_or_places_fail(tmp_path):
    cache = NodeCache(tmp_path, 1 << 20)
    same = b"x" * (2 * blockfile.CHUNK)  # identical chunks: only their place tells them apart
    cache.put(key(0), {0: same, 1: same})
    first, second = (Path(cache.block_path(key(0), i)) for i in (0, 1))
    first.write_bytes(second.read_bytes())  # block 1's file where block 0's belongs
    with pytest.raises(DamagedBlock):
        cache.read(key(0), 0, 0, 10)
    raw = second.read_bytes()
    half = blockfile.STRIDE
    second.write_bytes(raw[half:] + raw[:half])  # chunks swapped within the block
    with pytest.raises(DamagedBlock):
        cache.read(key(0), 1, 0, 10)


def test_truncated_and_extended_blocks_fail(tmp_path):
    cache = NodeCache(tmp_path, 1 << 20)
    data = random_bytes(2 * blockfile.CHUNK + 100, seed=3)
    cache.put(key(0), {0: data})
    path = cache.block_path(key(0), 0)
    raw = Path(path).read_bytes()
    for cut in (len(raw) - 1, blockfile.STRIDE, blockfile.STRIDE + 4, 3):
        Path(path).write_bytes(raw[:cut])
        with pytest.raises(DamagedBlock):
            cache.read(key(0), 0, len(data) - 10, 10)
    Path(path).write_bytes(raw + b"\0")  # the last chunk grew
    with pytest.raises(DamagedBlock):
        cache.read(key(0), 0, len(data) - 10, 10)


def test_a_damaged_block_is_fetched_again_once_then_refused(s3, fault_proxy, tmp_path, monkeypatch):
    data = random_bytes(60_000, seed=31)
    bs = 8 * KIB
    options = RemoteOptions(
        block_size=bs,
        first_exact_bytes=0,
        node_cache_dir=str(tmp_path),
        node_cache_bytes=1 << 20,
        storage_options=s3.storage_options(fault_proxy.endpoint_url),
        **FAST,
    )
    url = s3.put(data)
    src = ObjectStoreSource(url, options)
    assert bytes(src.read(bs + 10, 100)) == data[bs + 10 : bs + 110]
    path = src._node.block_path(src._key, 1)
    raw = bytearray(Path(path).read_bytes())
    raw[100] ^= 0xFF
    Path(path).write_bytes(bytes(raw))  # damaged in place, same length
    fault_proxy.clear()
    assert bytes(src.read(bs + 10, 100)) == data[bs + 10 : bs + 110]  # dropped, fetched again
    assert fault_proxy.count("GET") == 1
    assert blockfile.intact(Path(path).read_bytes(), 1)

    def damage_after_write(self, key, index, block):  # a disk that damages what is written to it
        tmp = write(self, key, index, block)
        raw = bytearray(Path(tmp).read_bytes())
        raw[20] ^= 0xFF
        Path(tmp).write_bytes(bytes(raw))
        return tmp

    write = NodeCache._write_temp
    monkeypatch.setattr(NodeCache, "_write_temp", damage_after_write)
    raw = bytearray(Path(path).read_bytes())
    raw[100] ^= 0xFF
    Path(path).write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=f"{path}: .*damaged again.*delete {tmp_path}"):
        for _ in range(3):  # the first read is served from the bytes fetched again, a later one from disk
            assert bytes(src.read(bs + 10, 100)) == data[bs + 10 : bs + 110]
    src.close()


# --- objects pinned at open ---------------------------------------------------------------


def test_an_object_replaced_while_open_is_refused_never_mixed(s3, tmp_path):
    bs = 8 * KIB
    old, new = random_bytes(5 * bs, seed=41), random_bytes(5 * bs, seed=42)  # same size, other bytes
    url = s3.put(old)
    name = url.split("/", 3)[3]
    for node in (None, str(tmp_path / "blocks")):
        s3.put(old, key=name)
        options = RemoteOptions(block_size=bs, first_exact_bytes=0, node_cache_dir=node, **FAST)
        src = ObjectStoreSource(url, options, **s3.storage_options())
        assert bytes(src.read(0, 100)) == old[:100]  # block 0 is cached
        s3.put(new, key=name)
        with pytest.raises(StorageError, match="changed since it was opened.*reopen"):
            src.read(bs - 50, 100)  # block 0 cached, block 1 would be the new object's: refused
        with pytest.raises(StorageError, match="reopen"):
            src.read_once(0, 10)
        src.close()
        again = ObjectStoreSource(url, options, **s3.storage_options())
        assert bytes(again.read(0, 5 * bs)) == new  # reopened: the new object, no old block from the node cache
        again.close()


def test_an_indexed_dataset_whose_bin_is_replaced_refuses_then_reopens(s3, tmp_path):
    prefixes = []
    for seed in (1, 2):
        prefix = tmp_path / f"s{seed}"
        rng = np.random.default_rng(seed)
        build_store(prefix, [rng.integers(0, 257, 300) for _ in range(50)], tokenizer=tp.load_tokenizer("byte"))
        prefixes.append(prefix)

    def upload(prefix):
        for suffix in (".bin", ".idx", ".json"):
            s3.put(open(f"{prefix}{suffix}", "rb").read(), key=f"replaced/s{suffix}")

    upload(prefixes[0])
    url = f"s3://{s3.bucket}/replaced/s"
    options = RemoteOptions(block_size=4 * KIB, first_exact_bytes=0, storage_options=s3.storage_options(), **FAST)
    first = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    assert np.array_equal(first[0], tp.IndexedDataset(prefixes[0])[0])
    upload(prefixes[1])
    with pytest.raises(StorageError, match="reopen"):
        first[49]
    second = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    local = tp.IndexedDataset(prefixes[1])
    assert all(np.array_equal(second[i], local[i]) for i in range(50))


def test_fetch_cached_never_keeps_bytes_of_another_version(s3, tmp_path, monkeypatch):
    from tokenport.storage import objects as remote

    url = s3.put(b"a" * 1000)
    name = url.split("/", 3)[3]
    stat = remote._stat

    def stat_then_replace(*args, **kwargs):  # the object is replaced between the stat and the GET
        found = stat(*args, **kwargs)
        s3.put(b"b" * 1000, key=name)
        return found

    monkeypatch.setattr(remote, "_stat", stat_then_replace)
    with pytest.raises(StorageError, match="changed"):
        remote.fetch_cached(url, cache_dir=tmp_path, options=RemoteOptions(**FAST), **s3.storage_options())
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]


# --- files the cache did not write ------------------------------------------------------


def test_foreign_files_are_neither_counted_nor_deleted_nor_fatal(tmp_path):
    cache = NodeCache(tmp_path, 8 * (4 * KIB + 8))
    foreign = {
        tmp_path / "notes.txt": b"mine",
        tmp_path / "mydata" / "0.blk": b"a user's file named like a block",
        tmp_path / key(9) / "readme.blk": b"not a block name",
        tmp_path / key(9) / "007.blk": b"not a block name either",
        tmp_path / key(9) / "notes": b"x",
        tmp_path / ".pins" / "not-a-pin": b"{",
        tmp_path / ".pins" / f"{os.getpid()}-77": b"garbage \xff",  # a live pid's pin file, unreadable
    }
    for path, data in foreign.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tmp_path / "link").symlink_to(tmp_path / "mydata")
    for round_ in range(6):  # enough puts to evict several times over
        assert cache.put(key(round_ % 3), {i: random_bytes(4 * KIB, seed=i + round_) for i in range(4)})
        assert cache.used_bytes() == sum(blocks_on_disk(tmp_path).values()) <= cache.budget_bytes
    for path, data in foreign.items():
        assert path.read_bytes() == data
    (tmp_path / ".usage").unlink()  # counted again from the disk: still only the cache's own blocks
    assert cache.used_bytes() == sum(blocks_on_disk(tmp_path).values())


def test_things_in_the_way_are_storage_errors_naming_them_never_os_errors(tmp_path):
    cache = NodeCache(tmp_path, 1 << 20)
    k = key(0)
    (tmp_path / k / "0.blk").mkdir(parents=True)  # a folder where a block belongs
    assert cache.put(k, {0: b"a" * 100, 1: b"b" * 100}) == {1}  # not kept, not fatal
    with pytest.raises(DamagedBlock, match="0.blk: this block of the node cache cannot be read"):
        cache.read(k, 0, 0, 10)
    with pytest.raises(StorageError, match="0.blk: this is not a block the node cache wrote.*remove it"):
        cache.drop(k, 0)
    assert (tmp_path / k / "0.blk").is_dir() and cache.read(k, 1, 0, 100) == b"b" * 100
    assert cache.used_bytes() == blockfile.stored_size(100)
    (tmp_path / key(1)).write_bytes(b"a file where a block folder belongs")
    with pytest.raises(StorageError, match=f"{key(1)}: cannot take a block's lock"):
        cache.wait_claim(key(1), 0)
    (tmp_path / ".usage").unlink()
    (tmp_path / ".usage").mkdir()
    with pytest.raises(StorageError, match=r"\.usage: cannot write the node cache's ledger"):
        cache.used_bytes()


# --- the ledger and pin files through the schema layer ----------------------------------


def test_ledger_mutations_are_refused_and_the_disk_counted_again(tmp_path):
    cache = NodeCache(tmp_path, 1 << 20)
    cache.put(key(0), {0: b"a" * 1000, 1: b"b" * 3000})
    truth = sum(blocks_on_disk(tmp_path).values())
    ledger = tmp_path / ".usage"
    written = ledger.read_bytes()
    assert read_ledger(str(ledger), written) == Ledger(used=truth)
    with_writer = encode(Ledger(used=truth + 5, writers={"4194304": 5}))  # a reservation (of a dead pid)
    before = {p: Path(p).read_bytes() for p in blocks_on_disk(tmp_path)}
    tried = 0
    for text in (written, with_writer):
        for label, data in mutations(text):
            tried += 1
            try:
                document = read_ledger(str(ledger), data)
            except TokenportError as exc:
                assert isinstance(exc, CorruptStoreError) and str(ledger) in str(exc), label
                document = None
            ledger.write_bytes(data)
            used = cache.used_bytes()  # never anything but a number
            if document is None or document.writers:  # refused, or a writer that is not alive: counted again
                assert used == truth, label
            else:
                assert used == document.used, label  # a valid ledger is believed
            assert read_ledger(str(ledger), ledger.read_bytes()).used == used
            assert {p: Path(p).read_bytes() for p in blocks_on_disk(tmp_path)} == before, label
    assert tried > 50
    ledger.write_bytes(b"4000")  # the bare count earlier versions wrote
    assert cache.used_bytes() == 4000


def test_pin_mutations_are_refused_and_skipped(tmp_path):
    cache = NodeCache(tmp_path, 6 * (KIB + 8))
    pins = [(key(0), 0), (key(0), 1)]
    written = encode(Pins(blocks=pins))
    pin_file = tmp_path / ".pins" / f"{os.getpid()}-1"
    assert read_pins(str(pin_file), written) == set(pins)
    assert read_pins(str(pin_file), "".join(f"{k} {i}\n" for k, i in pins).encode()) == set(pins)  # earlier format
    for label, data in mutations(written):
        try:
            read = read_pins(str(pin_file), data)
        except TokenportError as exc:
            assert isinstance(exc, CorruptStoreError) and str(pin_file) in str(exc), label
            read = None
        if read is not None:
            valid = {tuple(block) for block in json.loads(data)["blocks"]} if data.strip() else set()  # empty: no lines
            assert read == valid, label  # what a valid document says
        pin_file.write_bytes(data)
        for i in range(3):  # eviction reads the pins: never a crash
            cache.put(key(1), {i: b"z" * KIB})
        assert pin_file.read_bytes() == data  # a live process's file is left alone
    pin_file.unlink()


# --- kills at each write step -----------------------------------------------------------

CHILD = """
import sys
from tokenport.storage.nodecache import NodeCache
directory, budget, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
cache = NodeCache(directory, budget)
for round_, key in enumerate(keys):
    cache.put(key, {i: bytes([round_ * 8 + i]) * (3000 + i) for i in range(4)})
path = cache.block_path(keys[-1], 0)
with open(path, "r+b") as f:  # damaged in place, then dropped
    f.seek(100)
    f.write(b"!")
cache.drop(keys[-1], 0)
"""


def expected_block(round_: int, index: int) -> bytes:
    return bytes([round_ * 8 + index]) * (3000 + index)


def test_a_writer_killed_at_any_step_is_rolled_back_by_the_next_process(tmp_path):
    keys = [key(k) for k in range(3)]
    budget = 10 * blockfile.stored_size(3003)  # the third put evicts
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    step = 0
    while True:
        step += 1
        directory = tmp_path / f"kill-{step}"
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(directory), str(budget), *keys],
            env={**env, FAULT_ENV: f"nodecache:{step}"},
            capture_output=True,
        )
        assert child.returncode in (0, FAULT_EXIT_CODE), child.stderr.decode()
        cache = NodeCache(directory, budget)  # the next process to touch the cache
        used = cache.used_bytes()
        on_disk = blocks_on_disk(directory)
        assert used == sum(on_disk.values()) <= budget, step
        for round_, k in enumerate(keys):
            for i in range(4):
                try:
                    got = cache.read(k, i, 0, 3000 + i)  # every block there is whole and right ...
                except DamagedBlock:  # ... but the one damaged before its drop was killed
                    assert (round_, i) == (2, 0), step
                    cache.drop(k, i)
                    got = None
                assert got is None or got == expected_block(round_, i), step
        assert cache.put(keys[0], {9: b"q" * 100}) == {9}  # and the cache works on, leaving nothing behind
        assert [p.name for p in directory.rglob("*") if p.name.endswith(".tmp")] == [], step
        assert cache.used_bytes() == sum(blocks_on_disk(directory).values())
        if child.returncode == 0:
            break
    assert step > 12  # the ledger, eviction, write and rename steps of three puts and a drop were each killed


# --- a shadow model of the node cache's mutating calls ----------------------------------


def test_random_calls_match_a_shadow_model(tmp_path):
    rng = random.Random(7)
    budget = 12 * blockfile.stored_size(2 * KIB)
    cache = NodeCache(tmp_path, budget)
    keys = [key(0), "any-key", key(2)]
    model: dict[tuple[str, int], bytes] = {}  # what each block holds when it is on disk
    for step in range(300):
        op = rng.choice(["put", "put", "read", "damage", "pin", "drop", "foreign"])
        k, i = rng.choice(keys), rng.randrange(8)
        if op == "put":
            blocks = {j: random_bytes(rng.randrange(1, 2 * KIB), seed=step * 8 + j) for j in rng.sample(range(8), 3)}
            for j, data in blocks.items():
                if cache.has(k, j):
                    continue
                fd = cache.wait_claim(k, j)
                try:
                    if cache.put(k, {j: data}) == {j}:
                        model[(k, j)] = data
                finally:
                    cache.release(fd)
        elif op == "read" and (k, i) in model:
            try:
                got = cache.read(k, i, 0, len(model[(k, i)]))
            except DamagedBlock:
                cache.drop(k, i)
                assert not cache.has(k, i)
            else:
                assert got is None or got == model[(k, i)], step
        elif op == "damage" and cache.has(k, i):
            path = cache.block_path(k, i)
            raw = bytearray(Path(path).read_bytes())
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            Path(path).write_bytes(bytes(raw))
            before = (cache.used_bytes(), blocks_on_disk(tmp_path))
            with pytest.raises(DamagedBlock):
                cache.read(k, i, 0, len(model[(k, i)]))
            assert (cache.used_bytes(), blocks_on_disk(tmp_path)) == before  # a refused read changes nothing
            cache.drop(k, i)
            assert not cache.has(k, i)
        elif op == "pin":
            cache.pin({(rng.choice(keys), rng.randrange(8)) for _ in range(2)})
        elif op == "drop" and cache.has(k, i):
            cache.drop(k, i)  # an intact block is kept
            assert cache.read(k, i, 0, len(model[(k, i)])) == model[(k, i)]
        elif op == "foreign":
            (tmp_path / k).mkdir(exist_ok=True)
            (tmp_path / k / f"user-{step}.blk").write_bytes(b"not ours")
        on_disk = blocks_on_disk(tmp_path)
        assert cache.used_bytes() == sum(on_disk.values()) <= budget, step
        for path in on_disk:  # every block on disk holds what was put (damaged ones were dropped)
            folder, name = path.rsplit("/", 2)[-2:]
            block = (folder, int(name[:-4]))
            assert cache.read(*block, 0, len(model[block])) == model[block], step
    assert json.loads((tmp_path / ".usage").read_bytes())["used"] == sum(blocks_on_disk(tmp_path).values())

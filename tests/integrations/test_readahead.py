"""Read-ahead: datasets say which store reads their samples make, and StatefulLoader's workers hand
their coming reads to remote stores, which then fetch them in few coalesced GETs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tests._support.s3_server import FaultProxy, MotoS3
from tests._support.stores import Doc, build_store, random_documents
from tokenport.integrations.torch import StatefulLoader
from tokenport.storage.remote import RemoteOptions

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")


def _write(prefix: Path, count: int, seed: int, masks: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    documents = random_documents(rng, count, tokens=(3, 1000), length=(5, 120), eod=2)
    if masks:
        documents = (Doc(tokens, mask=rng.integers(0, 2, len(tokens))) for tokens in documents)
    build_store(prefix, documents, dtype=np.uint16, masks=masks)
    return prefix


def _recorded(store: tp.IndexedDataset, calls: Counter) -> None:
    """Count every (store, document, offset, length) read through ``store.get`` or ``store.get_pieces``."""
    get, get_pieces = store.get, store.get_pieces

    def recording(idx, offset=0, length=None):
        out = get(idx, offset, length)
        calls[(id(store), int(idx), int(offset), len(out))] += 1
        return out

    def recording_pieces(ids, offsets, lengths):
        calls.update((id(store), int(d), int(o), int(n)) for d, o, n in zip(ids, offsets, lengths))
        return get_pieces(ids, offsets, lengths)

    store.get, store.get_pieces = recording, recording_pieces


def _planned(dataset, ids) -> Counter:
    return Counter(
        (id(store), d, o, n)
        for store, documents, offsets, lengths in dataset.read_plan(ids)
        for d, o, n in zip(documents.tolist(), offsets.tolist(), lengths.tolist())
    )


def test_read_plans_name_exactly_the_reads_get_batch_makes(tmp_path):
    plain = tp.IndexedDataset(_write(tmp_path / "a", 80, 1), mode="pread")
    masked = tp.IndexedDataset(_write(tmp_path / "m", 60, 2, masks=True), mode="pread")
    gpt = tp.GPTDataset(plain, np.arange(80), 90, tp.GPTSampleConfig(32, 2), 1)
    packed = tp.PackedDataset(tp.IndexedDataset(tmp_path / "a", mode="pread"), 128, seed=3)
    sft = tp.SFTDataset(masked, 128, seed=4)
    other = tp.GPTDataset(plain, np.arange(40, 80), 30, tp.GPTSampleConfig(32, 2), 5)
    blend = tp.BlendedDataset([gpt, other], [2, 1], 100)
    rng = np.random.default_rng(7)
    for dataset in (gpt, packed, sft, blend):
        stores = {id(s): s for s, *_ in dataset.read_plan(np.arange(len(dataset)))}
        ids = rng.choice(len(dataset), 12, replace=False)
        calls: Counter = Counter()
        for store in stores.values():
            _recorded(store, calls)
        dataset.get_batch(ids)
        for store in stores.values():
            del store.get, store.get_pieces
        assert calls and _planned(dataset, ids) == calls, type(dataset).__name__
    order = [(d, o) for _, documents, offsets, _ in gpt.read_plan([5, 1]) for d, o in zip(documents, offsets)]
    assert order[: len(gpt.lineage(5).pieces)] == [(d, s) for d, s, _ in gpt.lineage(5).pieces]  # in read order
    with pytest.raises(IndexError):
        gpt.read_plan([len(gpt)])


@pytest.fixture(scope="module")
def remote_store(s3: MotoS3, tmp_path_factory) -> tuple[Path, str]:
    prefix = _write(tmp_path_factory.mktemp("ra") / "s", 900, 11)
    for suffix in (".bin", ".idx", ".json"):
        s3.put(open(f"{prefix}{suffix}", "rb").read(), key=f"readahead/s{suffix}")
    return prefix, f"s3://{s3.bucket}/readahead/s"


def _loader_gets(s3: MotoS3, proxy: FaultProxy, url: str, local: tp.GPTDataset, tmp_path: Path, ahead: bool) -> int:
    options = RemoteOptions(
        block_size=2048,
        coalesce_gap=8192,
        first_exact_bytes=0,  # blocks only, all in the plan's first window: a read that outruns the
        first_window_blocks=64,  # background fetch then waits for it, rather than fetching on its own
        max_retries=2,
        backoff_initial=0.01,
        node_cache_dir=str(tmp_path / ("ahead" if ahead else "plain")),  # each run starts cold
        storage_options=s3.storage_options(proxy.endpoint_url),
    )
    store = tp.IndexedDataset(url, remote_options=options, cache_dir=str(tmp_path / "idx"))
    dataset = tp.GPTDataset(store, np.arange(900), 300, tp.GPTSampleConfig(64, 2), 1)
    loader = StatefulLoader.for_dataset(
        dataset, micro_batch_size=8, seed=9, num_workers=2, multiprocessing_context="fork"
    )
    loader_iter = iter(loader) if ahead else _without_read_ahead(loader)
    proxy.clear()
    expected = StatefulLoader.for_dataset(local, micro_batch_size=8, seed=9)
    for got, want in zip(loader_iter, expected, strict=True):
        assert torch.equal(got["tokens"], want["tokens"]) and torch.equal(got["labels"], want["labels"])
    return proxy.count("GET")


def _without_read_ahead(loader: StatefulLoader):
    """The loader's batches with its workers' read-ahead switched off (each read fetches its own blocks)."""
    import tokenport.integrations.torch as module

    real = module.read_ahead
    module.read_ahead = lambda sampler, dataset: None  # type: ignore[assignment]
    try:
        yield from loader
    finally:
        module.read_ahead = real


def test_loader_workers_fetch_their_coming_reads_ahead_in_few_gets(s3, fault_proxy, remote_store, tmp_path):
    prefix, url = remote_store
    local = tp.GPTDataset(tp.IndexedDataset(prefix), np.arange(900), 300, tp.GPTSampleConfig(64, 2), 1)
    torch.set_num_threads(1)
    planned = _loader_gets(s3, fault_proxy, url, local, tmp_path, ahead=True)
    unplanned = _loader_gets(s3, fault_proxy, url, local, tmp_path, ahead=False)
    # the same batches, in spans not block by block: 5 GETs against 21-25 on an idle machine; a
    # worker whose read comes before its read-ahead's span lands fetches for itself, so under load
    # (a busy machine, tests in parallel) the saving shrinks, but it stays a saving
    assert planned < unplanned, (planned, unplanned)


class _Store:
    prefix = "s3://bucket/store"

    def __init__(self) -> None:
        self.plans: list[list[int]] = []

    def prefetch(self, requests):
        self.plans.append([document for document, _, _ in requests])


class _Dataset:
    """Sample i is document i of one remote store."""

    def __init__(self) -> None:
        self.store = _Store()

    def read_plan(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        return [(self.store, ids, np.zeros_like(ids), np.ones_like(ids))]


def test_a_worker_plans_every_nth_batch_from_the_first_it_is_handed_and_finds_its_place_again(monkeypatch):
    from tokenport.integrations import _readahead

    monkeypatch.setattr(_readahead, "HORIZON", 4)
    batches = [[2 * k, 2 * k + 1] for k in range(40)]
    info = type("Info", (), {"num_workers": 3})()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    dataset = _Dataset()
    ahead = _readahead.ReadAhead(batches, dataset)
    ahead.before(batches[1])  # worker 1 of 3: batches 1, 4, 7, ...
    assert dataset.store.plans == [[2, 3, 8, 9, 14, 15, 20, 21, 26, 27]]
    ahead.before(batches[4])
    ahead.before(batches[7])
    assert len(dataset.store.plans) == 1  # 2 of 4 planned batches left: no new plan yet
    ahead.before(batches[10])
    assert dataset.store.plans[-1] == [20, 21, 26, 27, 32, 33, 38, 39, 44, 45]
    ahead.before(batches[26])  # handed another batch than it planned: it finds it and plans from there
    assert dataset.store.plans[-1] == [52, 53, 58, 59, 64, 65, 70, 71, 76, 77]
    ahead.before([999, 998])  # a batch not in the order: it stops planning, reads go on
    plans = len(dataset.store.plans)
    ahead.before(batches[29])
    assert len(dataset.store.plans) == plans


def test_local_stores_are_not_planned(tmp_path):
    from tokenport.integrations._readahead import ReadAhead, read_ahead

    store = tp.IndexedDataset(_write(tmp_path / "s", 30, 1))
    local = tp.GPTDataset(store, np.arange(30), 20, tp.GPTSampleConfig(8, 1), 1)
    assert read_ahead([[0, 1]], local) is None  # no planning, and no start-up work for it
    assert read_ahead([[0, 1]], tp.BlendedDataset([local, local], [1, 1], 10)) is None
    dataset = _Dataset()
    dataset.store.prefix = "/data/store"
    ahead = ReadAhead([[0, 1], [2, 3]], dataset)
    ahead.before([0, 1])
    ahead.before([2, 3])
    assert dataset.store.plans == []

"""Live metrics: a real exporter on 127.0.0.1 scraped with urllib during real runs (loader, S3, dock);
the values must equal what the run did. Off by default, and `import tokenport` never loads prometheus_client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

import tokenport as tp
from tests._support.s3_server import FaultProxy, MotoS3
from tests._support.stores import build_store, random_documents
from tokenport import metrics
from tokenport.dock import Column, Dock
from tokenport.errors import ConfigError
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler
from tokenport.storage.remote import ObjectStoreSource, RemoteOptions

torch = pytest.importorskip("torch")
parser = pytest.importorskip("prometheus_client.parser")

torch.set_num_threads(1)
SEQ_LENGTH = 16


@pytest.fixture
def exporter() -> Iterator[metrics.Exporter]:
    """Metrics on, served on a free loopback port; stopped and off afterwards."""
    metrics.disable()
    served = metrics.serve(0)
    try:
        yield served
    finally:
        served.stop()
        metrics.disable()


def scrape(served: metrics.Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value, parsed from the text format."""
    with urllib.request.urlopen(served.url, timeout=10) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> tp.GPTDataset:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("metrics") / "store"
    build_store(path, random_documents(rng, 60, tokens=(3, 1000), length=(5, 80), eod=2), dtype=np.uint16)
    return tp.GPTDataset(tp.IndexedDataset(path), np.arange(60), 90, tp.GPTSampleConfig(SEQ_LENGTH, 2), 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_counts_what_it_hands_to_the_training_loop(exporter, gpt, workers):
    options = dict(num_workers=workers, prefetch_factor=3) if workers else {}
    loader = StatefulLoader(gpt, PretrainingSampler(len(gpt), 0, 4, 0, 1), **options)
    handed = []
    for batch in loader:
        handed.append(batch)
        if len(handed) == 7:
            samples = scrape(exporter)  # mid-run: the workers have prefetched more than 7 batches
            break
    assert value(samples, "tokenport_loader_batches_total") == 7
    assert value(samples, "tokenport_loader_samples_total") == 7 * 4 == sum(len(b["tokens"]) for b in handed)
    assert value(samples, "tokenport_loader_tokens_total") == 7 * 4 * SEQ_LENGTH
    assert value(samples, "tokenport_loader_wait_seconds_count") == 7
    assert value(samples, "tokenport_loader_wait_seconds_sum") > 0
    assert value(samples, "tokenport_loader_wait_seconds_bucket", le="+Inf") == 7
    outstanding = value(samples, "tokenport_loader_batches_outstanding")
    # torch refills its queue (prefetch_factor per worker) when it hands a batch over, but a batch that
    # arrived out of order waits in torch without a refill: one fewer per worker running ahead
    assert workers * 3 - max(workers - 1, 0) <= outstanding <= workers * 3

    del handed[:]
    for batch in loader:  # the rest of the data
        handed.append(batch)
    samples = scrape(exporter)
    assert value(samples, "tokenport_loader_batches_total") == 7 + len(handed) == len(gpt) // 4
    assert value(samples, "tokenport_loader_samples_total") == loader.consumed_samples == len(gpt) // 4 * 4


def test_a_batch_without_tokens_counts_as_a_batch_only(exporter):
    dataset = [{"id": np.int64(i)} for i in range(12)]
    list(StatefulLoader(dataset, PretrainingSampler(12, 0, 4, 0, 1)))
    samples = scrape(exporter)
    assert value(samples, "tokenport_loader_batches_total") == 3
    assert value(samples, "tokenport_loader_samples_total") == 0
    assert metrics.batch_size({"input_ids": np.zeros((3, 5))}) == (3, 15)
    assert metrics.batch_size(torch.zeros(2, 7)) == (2, 14)


def test_s3_reads_count_gets_bytes_cache_and_retries(exporter, s3: MotoS3, fault_proxy: FaultProxy):
    data = np.random.default_rng(2).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    url = s3.put(data)
    block = 64 << 10
    options = RemoteOptions(block_size=block, cache_bytes=8 * block, backoff_initial=0.001, backoff_max=0.01)
    source = ObjectStoreSource(url, options, **s3.storage_options(fault_proxy.endpoint_url))
    fault_proxy.inject("503", first=2)
    assert bytes(source.read(10, 100_000)) == data[10:100_010]  # blocks 0 and 1, one GET retried twice
    assert bytes(source.read(block + 5, 10)) == data[block + 5 : block + 15]  # block 1 again: a hit
    assert bytes(source.read(200_000, 100_000)) == data[200_000:]  # blocks 3 and 4
    samples = scrape(exporter)
    stats = source.stats
    assert (stats.requests, stats.retries, stats.cache_hits, stats.cache_misses) == (4, 2, 1, 4)
    assert value(samples, "tokenport_storage_get_requests_total") == stats.requests
    assert value(samples, "tokenport_storage_fetched_bytes_total") == stats.bytes_fetched == 300_000 - block
    assert value(samples, "tokenport_storage_cache_hits_total") == 1
    assert value(samples, "tokenport_storage_cache_misses_total") == 4
    assert value(samples, "tokenport_storage_retries_total") == 2


def test_dock_rows_leases_and_latencies(exporter):
    dock = Dock([Column("reward", np.float32), Column("logp", np.float32)], ["train", "ref"])
    metrics.watch_dock(dock, "rl")
    dock.add_partition("step-0", 8)
    dock.put("step-0", {"reward": np.arange(6, dtype=np.float32)}, range(6))
    dock.put("step-0", {"logp": np.zeros(2, dtype=np.float32)}, [0, 1])
    assert dock.get("train", ["reward"], 3, "step-0") is not None
    held = dock.get("ref", ["reward"], 2, "step-0", lease=0.05)
    time.sleep(0.1)
    dock.get("ref", ["reward"], 1, "step-0", lease=60)  # expires the first lease, takes a row back on lease
    samples = scrape(exporter)
    assert held is not None
    assert value(samples, "tokenport_dock_rows", dock="rl", partition="step-0") == 8
    assert value(samples, "tokenport_dock_rows_ready", dock="rl", partition="step-0", column="reward") == 6
    assert value(samples, "tokenport_dock_rows_ready", dock="rl", partition="step-0", column="logp") == 2
    assert value(samples, "tokenport_dock_rows_outstanding", dock="rl", partition="step-0", consumer="train") == 5
    assert value(samples, "tokenport_dock_rows_outstanding", dock="rl", partition="step-0", consumer="ref") == 8
    assert value(samples, "tokenport_dock_rows_leased", dock="rl", partition="step-0", consumer="ref") == 1
    assert value(samples, "tokenport_dock_leases", dock="rl") == 1
    assert value(samples, "tokenport_dock_leases_expired_total", dock="rl") == 1
    assert value(samples, "tokenport_dock_rows_served_total", dock="rl", consumer="ref") == 3
    assert value(samples, "tokenport_dock_put_seconds_count") == 2
    assert value(samples, "tokenport_dock_get_seconds_count") == 3
    with pytest.raises(ConfigError, match="watched already"):
        metrics.watch_dock(dock, "rl")


def test_dock_versions_staleness_and_expiry(exporter):
    """The dock's version, its served rows by versions behind, and rows expired by policy, as the run did."""
    dock = Dock([Column("reward", np.float32)], ["train"], max_staleness=1, on_stale="requeue")
    metrics.watch_dock(dock, "async")
    dock.add_partition("p", 6)
    dock.put("p", {"reward": np.zeros(4, np.float32)}, range(4), version=0)
    dock.set_version(1)
    dock.put("p", {"reward": np.zeros(2, np.float32)}, [4, 5], version=1)
    assert len(dock.get("train", ["reward"], 3, "p").rows) == 3  # rows 0-2: one version behind
    dock.set_version(2)  # row 3 (version 0) is now too stale: requeued
    assert len(dock.get("train", ["reward"], 2, "p").rows) == 2  # rows 4-5: one version behind
    samples = scrape(exporter)
    assert value(samples, "tokenport_dock_version", dock="async") == 2
    served = "tokenport_dock_rows_served_by_staleness_total"
    assert value(samples, served, dock="async", consumer="train", versions_behind="1") == 5
    assert value(samples, "tokenport_dock_rows_expired_total", dock="async", policy="requeued") == 1
    assert value(samples, "tokenport_dock_rows_expired_total", dock="async", policy="dropped") == 0


def test_mixture_shares_and_weight_updates(exporter):
    metrics.record_mixture([0.5, 0.3, 0.2], [0.45, 0.35, 0.2], names=["code", "docs", "prose"])
    metrics.record_mixture([0.6, 0.2, 0.2], [0.5, 0.3, 0.2], names=["code", "docs", "prose"])
    for _ in range(3):
        metrics.record_weight_update()
    samples = scrape(exporter)
    assert value(samples, "tokenport_mixture_target_ratio", dataset="code") == 0.6
    assert value(samples, "tokenport_mixture_realized_ratio", dataset="docs") == 0.3
    assert value(samples, "tokenport_mixture_weight_updates_total") == 3
    with urllib.request.urlopen(exporter.url + "?name[]=tokenport_mixture_weight_updates_total", timeout=10) as reply:
        only = [f.name for f in parser.text_string_to_metric_families(reply.read().decode())]
    assert only == ["tokenport_mixture_weight_updates"]
    with pytest.raises(ConfigError, match="realized 1"):
        metrics.record_mixture([0.5, 0.5], [1.0])
    metrics.disable()
    with pytest.raises(ConfigError, match="names 3"):  # refused while off too
        metrics.record_mixture([0.5, 0.5], [0.5, 0.5], names=["a", "b", "c"])


def test_an_adaptive_loader_exports_its_shares_and_updates(exporter, gpt):
    """Each set_mixture records the target and realized shares of the samples handed over so far."""
    blend = tp.AdaptiveBlend([gpt, gpt], [1, 1], num_samples=80)
    loader = StatefulLoader(blend, tp.PretrainingSampler(80, 0, 4, 0, 1))
    batches = iter(loader)
    for weights in ([3, 1], [1, 3], [1, 1]):
        for _ in range(3):
            next(batches)
        loader.set_mixture(weights)
    handed = loader.consumed_samples
    samples = scrape(exporter)
    assert value(samples, "tokenport_mixture_weight_updates_total") == 3
    for d, (want, got) in enumerate(zip(blend.target_shares(handed), blend.realized_shares(handed))):
        assert value(samples, "tokenport_mixture_target_ratio", dataset=str(d)) == pytest.approx(want)
        assert value(samples, "tokenport_mixture_realized_ratio", dataset=str(d)) == pytest.approx(got)


def test_disabled_records_nothing_and_an_exporter_serves_nothing(gpt):
    metrics.disable()
    assert not metrics.enabled() and metrics.registry() is None
    list(StatefulLoader(gpt, PretrainingSampler(len(gpt), 0, 4, 0, 1)))
    metrics.record_weight_update()
    registry = metrics.enable()
    try:
        assert registry.get_sample_value("tokenport_loader_batches_total") == 0
        assert registry.get_sample_value("tokenport_mixture_weight_updates_total") == 0
        with metrics.serve(0) as served:
            metrics.disable()
            assert scrape(served) == {}
    finally:
        metrics.disable()


def test_serve_refuses_a_bad_or_busy_port(exporter):
    with pytest.raises(ConfigError, match="at most 65535"):
        metrics.serve(70000)
    with pytest.raises(ConfigError, match="cannot listen"):
        metrics.serve(exporter.port)
    with pytest.raises(ConfigError, match="no stats"):
        metrics.watch_dock(object())


def test_import_tokenport_and_reading_do_not_load_prometheus_client(gpt):
    code = (
        "import json, sys, numpy as np, tokenport as tp\n"
        "from tokenport.integrations import StatefulLoader\n"
        "from tokenport.sampling import PretrainingSampler\n"
        f"store = tp.IndexedDataset({str(gpt.dataset.prefix)!r})\n"
        f"d = tp.GPTDataset(store, np.arange(60), 20, tp.GPTSampleConfig({SEQ_LENGTH}, 2), 1)\n"
        "n = len(list(StatefulLoader(d, PretrainingSampler(len(d), 0, 4, 0, 1))))\n"
        "print(json.dumps([n == len(d) // 4, sorted(m for m in sys.modules if m.startswith('prometheus'))]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, []]


def test_mixture_shares_are_kept_as_arrays_and_labelled_when_scraped():
    """The latest call wins per label, over calls with and without names; a caller's array changed
    afterwards changes nothing; shares that are not numbers are refused (ConfigError), on or off."""
    metrics.disable()
    registry = metrics.enable()
    try:
        target = np.array([0.25, 0.75])
        metrics.record_mixture(target, np.array([0.5, 0.5]))
        target[0] = 9.0
        metrics.record_mixture([0.1, 0.9], [0.2, 0.8], names=["1", "b"])
        get = registry.get_sample_value
        assert get("tokenport_mixture_target_ratio", {"dataset": "0"}) == 0.25
        assert get("tokenport_mixture_target_ratio", {"dataset": "1"}) == 0.1  # the later call's
        assert get("tokenport_mixture_realized_ratio", {"dataset": "b"}) == 0.8
        metrics.record_mixture([0.3, 0.7], [0.4, 0.6])  # unnamed again: its labels win back
        assert get("tokenport_mixture_target_ratio", {"dataset": "1"}) == 0.7
        assert get("tokenport_mixture_target_ratio", {"dataset": "b"}) == 0.9
        for bad in (["x", 0.5], [[0.5], [0.5]]):
            with pytest.raises(ConfigError, match="record_mixture"):
                metrics.record_mixture(bad, [0.5, 0.5])
        assert get("tokenport_mixture_target_ratio", {"dataset": "0"}) == 0.3
    finally:
        metrics.disable()
    with pytest.raises(ConfigError, match="record_mixture"):
        metrics.record_mixture(["x", 0.5], [0.5, 0.5])

"""Live metrics in the Prometheus text format: loader, storage, mixture and dock, off by default.

While off (the default) ``live.recorder`` is None and every recording site costs one check of it:
prometheus_client is not imported and no lock is taken. ``enable()`` makes a ``Recorder`` over a
registry of its own (never prometheus_client's global one); ``serve(port)`` enables and starts an
HTTP exporter; ``disable()`` drops the recorder and its values.

Values are per process: what DataLoader worker processes record (their storage reads) stays in
those processes; the loader's own counters are taken in the training process, where batches are
handed over. Each metric's help text (scraped with it) says what it counts:

- loader: ``tokenport_loader_{batches,samples,tokens}_total``, ``tokenport_loader_wait_seconds``
  (histogram), ``tokenport_loader_batches_outstanding``;
- storage: ``tokenport_storage_{get_requests,fetched_bytes,cache_hits,cache_misses,retries}_total``;
- mixture: ``tokenport_mixture_{target,realized}_ratio{dataset}``, ``tokenport_mixture_weight_updates_total``;
- dock: ``tokenport_dock_{put,get}_seconds`` (histograms), and per watched dock (``watch_dock``) its
  rows, ready rows, outstanding and leased rows, leases out and expired.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from math import prod
from threading import get_ident
from typing import Any

import numpy as np

from ._checks import check_int
from ._optional import require
from .errors import ConfigError

__all__ = [
    "Exporter",
    "Recorder",
    "batch_size",
    "disable",
    "enable",
    "enabled",
    "record_mixture",
    "record_weight_update",
    "registry",
    "serve",
    "watch_dock",
]

_SECONDS_BUCKETS = (1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 60.0)
"""Histogram buckets for waits and latencies, 10 µs to a minute."""


class _Live:
    """Where recording sites find the recorder: ``live.recorder``, None while metrics are off."""

    __slots__ = ("recorder",)

    def __init__(self) -> None:
        self.recorder: Recorder | None = None


live = _Live()
"""What recording sites read (``from tokenport.metrics import live``): ``live.recorder`` is None while off."""

_switch = threading.Lock()  # serializes enable/disable/serve, never taken by a recording call


class Recorder:
    """The metrics of one ``enable()``, in its own ``CollectorRegistry``; one method per recording site."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.docks: set[str] = set()  # the names watch_dock has registered
        # loader (StatefulLoader, training process): plain per-thread tallies, exported when scraped
        self._loader_tallies: dict[int, _LoaderTally] = {}
        self._loader_outstanding: int | None = None
        r.register(_LoaderCollector(self))
        # storage (ObjectStoreSource): ranged GETs, block cache, retries
        self.storage_requests = Counter(
            "tokenport_storage_get_requests_total", "Ranged GETs sent to object stores (retries included)", registry=r
        )
        self.storage_bytes = Counter(
            "tokenport_storage_fetched_bytes_total", "Bytes received by ranged GETs from object stores", registry=r
        )
        self.storage_cache_hits = Counter(
            "tokenport_storage_cache_hits_total", "Block lookups served by a block cache", registry=r
        )
        self.storage_cache_misses = Counter(
            "tokenport_storage_cache_misses_total", "Block lookups that had to be fetched", registry=r
        )
        self.storage_retries = Counter(
            "tokenport_storage_retries_total", "Object-store requests retried after a transient fault", registry=r
        )
        # mixture (blends, adaptive controllers): the latest shares kept as arrays, labelled when scraped
        self.mixture = _MixtureCollector()
        r.register(self.mixture)
        self.mixture_updates = Counter(
            "tokenport_mixture_weight_updates_total", "Updates of the mixture weights", registry=r
        )
        # dock (in-process Dock): latencies here; rows and leases read at scrape time (watch_dock)
        self.dock_put = Histogram(
            "tokenport_dock_put_seconds", "Duration of one Dock.put", buckets=_SECONDS_BUCKETS, registry=r
        )
        self.dock_get = Histogram(
            "tokenport_dock_get_seconds",
            "Duration of one Dock.get, waiting for rows included",
            buckets=_SECONDS_BUCKETS,
            registry=r,
        )

    def loader_batch(self, batch: Any, wait_seconds: float, outstanding: int | None) -> None:
        """One batch handed over after ``wait_seconds`` inside ``next()``; ``outstanding`` None when unknown.
        No lock: each thread adds to a tally of its own (the exporter sums them)."""
        samples, tokens = batch_size(batch)
        tally = self._loader_tallies.get(get_ident())
        if tally is None:
            tally = self._loader_tallies.setdefault(get_ident(), _LoaderTally())
        tally.batches += 1
        tally.samples += samples
        tally.tokens += tokens
        tally.wait += wait_seconds
        tally.buckets[bisect_left(_SECONDS_BUCKETS, wait_seconds)] += 1
        if outstanding is not None:
            self._loader_outstanding = outstanding

    def storage_cache(self, hits: int, misses: int) -> None:
        """Block lookups of one read: ``hits`` from the cache, ``misses`` to fetch."""
        self.storage_cache_hits.inc(hits)
        self.storage_cache_misses.inc(misses)


class _LoaderTally:
    """What one thread's loaders handed over: batches, samples, tokens, wait (total and per bucket)."""

    __slots__ = ("batches", "samples", "tokens", "wait", "buckets")

    def __init__(self) -> None:
        self.batches = self.samples = self.tokens = 0
        self.wait = 0.0
        self.buckets = [0] * (len(_SECONDS_BUCKETS) + 1)  # the last one: above every bound


class _LoaderCollector:
    """The loader's tallies as metric families, summed over threads when scraped."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def describe(self) -> list[Any]:
        return self.collect()

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        tallies = list(self.recorder._loader_tallies.values())
        batches = CounterMetricFamily("tokenport_loader_batches", "Batches handed to the training loop")
        batches.add_metric([], sum(t.batches for t in tallies))
        samples = CounterMetricFamily(
            "tokenport_loader_samples", "Samples handed to the training loop (this rank): the tokens field's rows"
        )
        samples.add_metric([], sum(t.samples for t in tallies))
        tokens = CounterMetricFamily(
            "tokenport_loader_tokens",
            "Token positions handed to the training loop (elements of the tokens/input_ids field, padding included)",
        )
        tokens.add_metric([], sum(t.tokens for t in tallies))
        cumulative, buckets = 0, []
        for bound, count in zip((*_SECONDS_BUCKETS, float("inf")), zip(*(t.buckets for t in tallies))):
            cumulative += sum(count)
            buckets.append((floatToGoString(bound), cumulative))
        wait = HistogramMetricFamily(
            "tokenport_loader_wait_seconds",
            "Seconds the training loop waited inside next() on the DataLoader for one batch (_sum: in all)",
            buckets=buckets or [("+Inf", 0)],
            sum_value=sum(t.wait for t in tallies),
        )
        found = [batches, samples, tokens, wait]
        if self.recorder._loader_outstanding is not None:
            outstanding = GaugeMetricFamily(
                "tokenport_loader_batches_outstanding",
                "Batches sent to DataLoader workers and not handed over yet (in progress or prefetched)",
            )
            outstanding.add_metric([], self.recorder._loader_outstanding)
            found.append(outstanding)
        return found


class _MixtureCollector:
    """The target and realized share of each dataset label, as last recorded: ``record`` keeps the arrays of
    one call (O(1) per call whatever the datasets), the gauges are labelled when scraped."""

    def __init__(self) -> None:
        # per list of names (None: 0, 1, ... of a length): (names, target, realized), the latest call last
        self.recorded: dict[Any, tuple[Sequence[str] | None, np.ndarray, np.ndarray]] = {}

    def record(self, names: Sequence[str] | None, target: np.ndarray, realized: np.ndarray) -> None:
        key = len(target) if names is None else tuple(names)
        self.recorded.pop(key, None)  # re-inserted last: its values win over an earlier call's for a label
        self.recorded[key] = (names, target, realized)

    def describe(self) -> list[Any]:
        return self.collect()

    def collect(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        latest: dict[str, tuple[float, float]] = {}
        for names, target, realized in list(self.recorded.values()):
            labels = [str(i) for i in range(len(target))] if names is None else names
            latest.update(zip(labels, zip(target.tolist(), realized.tolist())))
        wanted = GaugeMetricFamily(
            "tokenport_mixture_target_ratio", "Target share of each dataset in the mixture", labels=["dataset"]
        )
        got = GaugeMetricFamily(
            "tokenport_mixture_realized_ratio", "Realized share of each dataset so far", labels=["dataset"]
        )
        for label, (want, real) in latest.items():
            wanted.add_metric([label], want)
            got.add_metric([label], real)
        return [wanted, got]


def batch_size(batch: Any) -> tuple[int, int]:
    """(samples, token positions) of a batch: from its ``tokens`` (else ``input_ids``) field when it is a
    mapping, or from the batch itself when it is one tensor or array; (0, 0) when neither applies."""
    field = batch
    if isinstance(batch, dict) or isinstance(batch, Mapping):  # a dict first: the ABC check costs more
        field = batch.get("tokens")
        if field is None:
            field = batch.get("input_ids")
    shape = getattr(field, "shape", None)
    if not shape:
        return 0, 0
    return shape[0], shape[0] * shape[1] if len(shape) == 2 else prod(shape)


def enable() -> Any:
    """Turn recording on (idempotent); the ``prometheus_client.CollectorRegistry`` the values are in.
    Without prometheus_client, MissingExtraError (naming the ``metrics`` extra) and nothing changes."""
    require("prometheus_client", extra="metrics", feature="tokenport.metrics (enable, serve)")
    with _switch:
        if live.recorder is None:
            live.recorder = Recorder()
        return live.recorder.registry


def enabled() -> bool:
    """Whether metrics are being recorded."""
    return live.recorder is not None


def registry() -> Any:
    """The registry of the values recorded since ``enable()``, or None while metrics are off."""
    current = live.recorder
    return None if current is None else current.registry


def disable() -> None:
    """Turn recording off and forget the values (an exporter still running then serves nothing)."""
    with _switch:
        live.recorder = None


class Exporter:
    """A running HTTP exporter of the metrics (``/metrics``, or any path); ``stop()`` shuts it down."""

    def __init__(self, port: int, addr: str) -> None:
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(port, addr=addr, registry=_Current())
        self.addr = addr
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        """The address to scrape, e.g. ``http://127.0.0.1:9464/metrics``."""
        return f"http://{self.addr}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Current:
    """What the exporter collects: the registry of the current ``enable()``, so disable/enable need no restart."""

    def collect(self) -> Any:
        current = live.recorder
        return [] if current is None else current.registry.collect()

    def restricted_registry(self, names: Any) -> Any:
        """The current registry kept to ``names`` (a scrape of ``/metrics?name[]=...``)."""
        current = live.recorder
        return self if current is None else current.registry.restricted_registry(names)


def serve(port: int, addr: str = "127.0.0.1") -> Exporter:
    """Enable metrics and serve them over HTTP on ``addr:port`` (0: a free port, see ``Exporter.port``)."""
    require("prometheus_client", extra="metrics", feature="tokenport.metrics (enable, serve)")
    port = check_int("port", port, 0)
    if port > 65535:
        raise ConfigError(f"port={port}: a TCP port is at most 65535; pass 0 for a free one")
    enable()
    try:
        return Exporter(port, addr)
    except OSError as exc:
        raise ConfigError(
            f"serve(port={port}, addr={addr!r}): cannot listen ({exc.strerror or exc}); pick another port or 0"
        ) from None


def record_mixture(
    target: Sequence[float] | np.ndarray, realized: Sequence[float] | np.ndarray, names: Sequence[str] | None = None
) -> None:
    """Set the target and realized share of each dataset (label ``dataset``: ``names``, default ``0, 1, ...``).
    Checked even while off (a call per weight update, not per batch); costs no Python step per dataset
    unless ``names`` are given (labels are made when scraped)."""
    labels = None if names is None else [str(name) for name in names]
    if not len(target) == len(realized) == (len(target) if labels is None else len(labels)):
        raise ConfigError(
            f"record_mixture: target has {len(target)} shares, realized {len(realized)}, "
            f"names {len(target) if labels is None else len(labels)}; pass one of each per dataset"
        )
    try:
        wanted, got = np.array(target, dtype=np.float64), np.array(realized, dtype=np.float64)  # copies
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"record_mixture: expected numbers for the shares ({exc})") from None
    if wanted.ndim != 1 or got.ndim != 1:
        raise ConfigError("record_mixture: target and realized must be flat sequences, one share per dataset")
    current = live.recorder
    if current is not None:
        current.mixture.record(labels, wanted, got)


def record_weight_update() -> None:
    """Count one update of the mixture weights."""
    current = live.recorder
    if current is not None:
        current.mixture_updates.inc()


def watch_dock(dock: Any, name: str = "dock") -> None:
    """Export ``dock``'s rows and leases (read from ``dock.stats()`` at each scrape, so they cost nothing
    between scrapes) under the label ``dock=name``, while metrics are on. Enables metrics.

    Gauges: ``tokenport_dock_rows{dock,partition}``, ``tokenport_dock_rows_ready{dock,partition,column}``
    (rows whose column is ready), ``tokenport_dock_rows_outstanding{dock,partition,consumer}`` (rows the
    consumer has not consumed), ``tokenport_dock_rows_leased{dock,partition,consumer}``,
    ``tokenport_dock_leases{dock}`` (leases out); counters ``tokenport_dock_leases_expired_total{dock}``,
    ``tokenport_dock_rows_served_total{dock,consumer}``, ``tokenport_dock_wait_seconds_total{dock,consumer}``;
    staleness: ``tokenport_dock_version{dock}`` (the current policy version),
    ``tokenport_dock_rows_served_by_staleness_total{dock,consumer,versions_behind}`` and
    ``tokenport_dock_rows_expired_total{dock,policy}`` (``requeued`` or ``dropped``).
    """
    if not callable(getattr(dock, "stats", None)):
        raise ConfigError(f"watch_dock: a {type(dock).__name__} has no stats(); pass a Dock or a RayDock")
    with _switch:
        if live.recorder is None:
            live.recorder = Recorder()
        current = live.recorder
        if str(name) in current.docks:
            raise ConfigError(f"watch_dock: a dock named {name!r} is watched already; give each dock its own name")
        current.docks.add(str(name))
        current.registry.register(_DockCollector(dock, str(name)))


class _DockCollector:
    """A dock's ``stats()`` as metric families, computed when scraped."""

    def __init__(self, dock: Any, name: str) -> None:
        self.dock = dock
        self.name = name

    def describe(self) -> list[Any]:
        return []  # the families depend on the dock's partitions: no names are claimed up front

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.dock.stats()
        dock = self.name
        rows = GaugeMetricFamily("tokenport_dock_rows", "Rows of each partition", labels=["dock", "partition"])
        ready = GaugeMetricFamily(
            "tokenport_dock_rows_ready", "Rows whose column is ready", labels=["dock", "partition", "column"]
        )
        outstanding = GaugeMetricFamily(
            "tokenport_dock_rows_outstanding",
            "Rows the consumer has not consumed yet",
            labels=["dock", "partition", "consumer"],
        )
        leased = GaugeMetricFamily(
            "tokenport_dock_rows_leased", "Rows out on lease to the consumer", labels=["dock", "partition", "consumer"]
        )
        for partition, p in stats["partitions"].items():
            rows.add_metric([dock, partition], p["rows"])
            for column, count in p["ready"].items():
                ready.add_metric([dock, partition, column], count)
            for consumer, count in p["consumed"].items():
                outstanding.add_metric([dock, partition, consumer], p["rows"] - count)
            for consumer, count in p["leased"].items():
                leased.add_metric([dock, partition, consumer], count)
        leases = GaugeMetricFamily("tokenport_dock_leases", "Leases outstanding", labels=["dock"])
        leases.add_metric([dock], stats["leases"])
        expired = CounterMetricFamily("tokenport_dock_leases_expired", "Leases that ran out", labels=["dock"])
        expired.add_metric([dock], stats.get("leases_expired", 0))
        served = CounterMetricFamily(
            "tokenport_dock_rows_served", "Rows handed to each consumer by gets", labels=["dock", "consumer"]
        )
        waited = CounterMetricFamily(
            "tokenport_dock_wait_seconds", "Seconds each consumer's gets waited for rows", labels=["dock", "consumer"]
        )
        stale = CounterMetricFamily(
            "tokenport_dock_rows_served_by_staleness",
            "Rows handed to each consumer, by how many policy versions behind the current one they were",
            labels=["dock", "consumer", "versions_behind"],
        )
        for consumer, c in stats["consumers"].items():
            served.add_metric([dock, consumer], c["rows"])
            waited.add_metric([dock, consumer], c["wait_seconds"])
            for behind, count in sorted(c.get("staleness", {}).items()):
                stale.add_metric([dock, consumer, str(behind)], count)
        version = GaugeMetricFamily("tokenport_dock_version", "The current (trainer's) policy version", labels=["dock"])
        version.add_metric([dock], stats.get("version", 0))
        gone = CounterMetricFamily(
            "tokenport_dock_rows_expired",
            "Rows that fell too stale, by what became of them (requeued: handed back to regenerate; dropped)",
            labels=["dock", "policy"],
        )
        for policy in ("requeued", "dropped"):
            gone.add_metric([dock, policy], stats.get("expired", {}).get(policy, 0))
        return [rows, ready, outstanding, leased, leases, expired, served, waited, stale, version, gone]

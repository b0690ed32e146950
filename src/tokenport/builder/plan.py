"""`tokenport build-cache`: build every index a training run will need, offline, into the index cache.

A plan file (JSON, or YAML with PyYAML installed) names the token stores, the split string, the
samples per split and the sample geometry; every (store, split) pair with samples gets its GPT
indices built once and published to the cache, so the training job's ranks only memory-map them.

    {"cache_dir": "index-cache", "datasets": ["data/wiki", "data/code"], "split": "969,30,1",
     "samples": {"train": 1000000, "valid": 10000, "test": 1000}, "seq_length": 4096, "seed": 1234}
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .._checks import check_int, check_seed
from .._files import parse_structured, read_text
from ..blend import ALGORITHMS
from ..errors import ConfigError
from ..indexed import IndexedDataset, resolve_stores
from ..samples.gpt import GPTSampleConfig, store_eod_id
from . import SPLIT_NAMES, IndexCache, build_datasets, cache_key, gpt_index_request, load_blend_spec, parse_split
from .specs import BlendSpec


@dataclass(frozen=True)
class CachePlan:
    """The indices of one run: each store's train/valid/test split at the given sample counts, or
    (with ``spec``, a blend spec file) every index ``build_datasets`` needs for that blend."""

    datasets: tuple[str, ...]
    cache_dir: str
    seq_length: int
    seed: int
    samples: tuple[int, int, int]
    split: str = "969,30,1"
    add_extra_token: bool = True
    drop_last_partial_validation: bool = True
    spec: str | None = None
    algorithm: str = "tijdeman"
    source: str = field(default="<plan>", compare=False)

    def __post_init__(self) -> None:
        """Check every field, naming the plan file and the field at fault."""
        where = self.source
        if (self.spec is None) != bool(self.datasets):
            raise ConfigError(
                f"{where}: give either 'datasets' (a list of store prefixes or URLs) or 'spec' "
                "(a blend spec file), not " + ("both" if self.datasets else "neither")
            )
        if not all(isinstance(d, str) and d for d in self.datasets):
            raise ConfigError(f"{where}: 'datasets' must be a list of store prefixes or URLs")
        if self.spec is not None and (not isinstance(self.spec, str) or not self.spec):
            raise ConfigError(f"{where}: 'spec' must name a blend spec file")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"{where}: 'algorithm' = {self.algorithm!r}: use one of {', '.join(ALGORITHMS)}")
        if not isinstance(self.cache_dir, str) or not self.cache_dir:
            raise ConfigError(f"{where}: 'cache_dir' must name a directory")
        if len(self.samples) != len(SPLIT_NAMES):
            raise ConfigError(f"{where}: 'samples' = {self.samples!r}: give train/valid/test counts, integers >= 0")
        try:
            object.__setattr__(self, "seq_length", check_int("seq_length", self.seq_length))
            object.__setattr__(self, "seed", check_seed("seed", self.seed))
            counts = tuple(
                check_int(f"samples.{name}", n, 0, what="a sample count") for name, n in zip(SPLIT_NAMES, self.samples)
            )
            object.__setattr__(self, "samples", counts)
            parse_split(self.split)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        for name in ("add_extra_token", "drop_last_partial_validation"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{where}: '{name}' must be true or false")


_FIELDS = {
    "datasets",
    "cache_dir",
    "seq_length",
    "seed",
    "samples",
    "split",
    "add_extra_token",
    "drop_last_partial_validation",
    "spec",
    "algorithm",
}


def load_cache_plan(path: str | os.PathLike) -> CachePlan:
    """Read a plan file; ConfigError naming the file and the field for anything unreadable or wrong."""
    where = os.fspath(path)
    data = parse_structured(read_text(where, "plan"), where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of plan fields at the top level")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    missing = sorted({"cache_dir", "seq_length", "seed", "samples"} - set(data))
    if missing:
        raise ConfigError(f"{where}: missing field(s) {', '.join(missing)}")
    values = dict(data)
    if not isinstance(values.get("datasets", []), list):
        raise ConfigError(f"{where}: 'datasets' must be a list of store prefixes or URLs")
    values["samples"] = _samples(values["samples"], where)
    values["cache_dir"] = _relative_to(where, values["cache_dir"])
    datasets = [_relative_to(where, d) for d in values.get("datasets", [])]
    if datasets and all(isinstance(d, str) and d for d in datasets):  # else CachePlan names the fault
        datasets = resolve_stores(datasets, what=f"{where}: 'datasets' store")
    values["datasets"] = tuple(datasets)
    if "spec" in values:
        values["spec"] = _relative_to(where, values["spec"])
    return CachePlan(**values, source=where)


def _samples(value: Any, where: str) -> tuple[int, ...]:
    """Train/valid/test counts from a {"train": n, ...} mapping (absent = 0) or a list."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(SPLIT_NAMES))
        if unknown:
            raise ConfigError(f"{where}: 'samples' has unknown split(s) {', '.join(unknown)}; use train, valid, test")
        return tuple(value.get(name, 0) for name in SPLIT_NAMES)
    if isinstance(value, list):
        return tuple(value) + (0,) * (len(SPLIT_NAMES) - len(value))
    raise ConfigError(f"{where}: 'samples' must be a mapping of split to count or a list of counts")


def _relative_to(plan: str, path: Any) -> Any:
    """Local paths in a plan are relative to the plan file; URLs and absolute paths stay as they are."""
    if not isinstance(path, str) or "://" in path or os.path.isabs(path):
        return path
    return os.path.join(os.path.dirname(os.path.abspath(plan)), path)


@dataclass(frozen=True)
class CacheEntry:
    """What happened to one (store, split): its cache key, built now or found, and the seconds it took."""

    dataset: str
    split: str
    samples: int
    key: str  # the entry's cache key; empty for a blend's split, which spans several entries
    built: bool
    seconds: float

    def render(self) -> str:
        """One line: built or found, which (store, split), how many samples, how long, and its key."""
        action = "built" if self.built else "found"
        target = f" -> {self.key[:16]}" if self.key else ""
        return (
            f"{action} {self.dataset} [{self.split}] {self.samples:,} samples in {self.seconds * 1000:,.1f} ms{target}"
        )


@dataclass(frozen=True)
class CacheReport:
    """What `build_cache` did for a plan: every entry, built now or found in the cache."""

    cache_dir: str
    entries: tuple[CacheEntry, ...]

    def render(self) -> str:
        """The closing line: how many index sets, how many built now."""
        built = sum(entry.built for entry in self.entries)
        return (
            f"{len(self.entries)} index sets in {self.cache_dir}: {built} built, "
            f"{len(self.entries) - built} already there"
        )

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        return {
            "cache_dir": self.cache_dir,
            "entries": [asdict(entry) for entry in self.entries],
            "built": sum(entry.built for entry in self.entries),
        }


def build_cache(
    plan: CachePlan, *, report: Callable[[CacheEntry], None] | None = None, workers: int = 1
) -> list[CacheEntry]:
    """Build (or find) every index of the plan in its cache; `report` sees each entry as it completes.

    ``workers`` > 1 builds in that many spawned processes: the stores of a ``datasets`` plan, or the
    children of a blend spec's blends (see ``build_datasets``). Entries are listed in plan order.
    """
    workers = check_int("workers", workers, 1, what="worker processes")
    if plan.spec is not None:
        return _build_blend_cache(plan, plan.spec, report, workers)
    if workers == 1 or len(plan.datasets) < 2:
        return [entry for prefix in plan.datasets for entry in _store_entries(plan, prefix, report)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # not forked: the caller may hold threads
    with ProcessPoolExecutor(max_workers=min(workers, len(plan.datasets)), mp_context=context) as pool:
        futures = [pool.submit(_store_entries, plan, prefix, None) for prefix in plan.datasets]
        entries = []
        for future in futures:
            for entry in future.result():
                entries.append(entry)
                if report is not None:
                    report(entry)
    return entries


def _store_entries(plan: CachePlan, prefix: str, report: Callable[[CacheEntry], None] | None) -> list[CacheEntry]:
    """Build (or find) the plan's splits of one store; `report` sees each entry."""
    cache = IndexCache(plan.cache_dir)
    entries = []
    store = IndexedDataset(prefix)
    for which, num_samples in zip(SPLIT_NAMES, plan.samples):
        if num_samples == 0:
            continue
        drop_last = which != "valid" or plan.drop_last_partial_validation
        request = gpt_index_request(
            store,
            num_samples,
            plan.seq_length,
            plan.seed,
            split=plan.split,
            which=which,
            add_extra_token=plan.add_extra_token,
            drop_last_partial=drop_last,
        )
        if request is None:
            continue
        built: list[bool] = []

        def build(request=request, built=built) -> dict:
            built.append(True)
            return request.build()

        started = time.perf_counter()
        cache.get_or_build(store, request.params, build, strict=True, distributed=False)
        entry = CacheEntry(
            prefix, which, num_samples, cache_key(store, request.params), bool(built), time.perf_counter() - started
        )
        entries.append(entry)
        if report is not None:
            report(entry)
    store.close()
    return entries


def _build_blend_cache(
    plan: CachePlan, spec_path: str, report: Callable[[CacheEntry], None] | None, workers: int = 1
) -> list[CacheEntry]:
    """Every index of the plan's blend spec (``spec_path``): one entry per split, built when the cache grew."""
    spec = load_blend_spec(spec_path)
    # eod_id changes no index (the sample geometry does), but the stores' must agree: take the first
    # one a manifest names, so build_datasets checks the others against it
    config = GPTSampleConfig(
        seq_length=plan.seq_length, eod_id=_first_eod_id(spec), add_extra_token=plan.add_extra_token
    )
    cache = IndexCache(plan.cache_dir)
    entries = []
    for i, which in enumerate(SPLIT_NAMES):
        if not plan.samples[i]:
            continue
        sizes = tuple(n if k == i else 0 for k, n in enumerate(plan.samples))
        before = _entry_count(cache)
        started = time.perf_counter()
        dataset = build_datasets(
            spec,
            sizes=sizes,
            config=config,
            seed=plan.seed,
            split=plan.split,
            cache=cache,
            algorithm=plan.algorithm,
            drop_last_partial_validation=plan.drop_last_partial_validation,
            workers=workers,
        )[i]
        if dataset is None:
            continue
        entry = CacheEntry(
            spec_path, which, len(dataset), "", _entry_count(cache) > before, time.perf_counter() - started
        )
        entries.append(entry)
        if report is not None:
            report(entry)
    return entries


def _first_eod_id(spec: BlendSpec) -> int:
    """The EOD id the first store of ``spec`` with a manifest names (0 when none does: any id fits)."""
    blends = [spec.blend] if spec.blend is not None else [b for b in spec.per_split or () if b is not None]
    for prefix in (p for blend in blends for p in blend.prefixes):
        with IndexedDataset(prefix) as store:
            eod = store_eod_id(store)
        if eod is not None:
            return eod
    return 0


def _entry_count(cache: IndexCache) -> int:
    """How many published entries the cache directory holds."""
    try:
        return sum(1 for name in os.listdir(cache.directory) if not name.startswith(".") and "." not in name)
    except FileNotFoundError:
        return 0

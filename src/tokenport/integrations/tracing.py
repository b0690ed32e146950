"""Which documents made step N: the samples of a training step traced back to stores, documents and tokens.

A loader state (``StatefulLoader.state_dict()``) holds the sampler's configuration and the data
receipt; the order of the samples is a pure function of them, so no per-step log is needed. Step
``N`` is the ``N``-th batch handed to the trainer, counted from 0, in the state's global batch
(``micro_batch_size * data_parallel_size``), handed over where the state's certificate says: a run
resumed on another global batch (at any position) goes on from there in the new batch, so a state
saved after that traces its steps since the resume and refuses the earlier ones (trace those with a
state saved before it). Its global sample ids come from the sampler built from its state at that
position; each sample's lineage from the dataset, rebuilt from the receipt
(``rebuild.rebuild_dataset``) or given and checked against the receipt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._checks import check_int, renamed_keywords
from ..blend import AdaptiveBlend
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..samples.base import Rebuilder, SampleDataset
from ..samples.lineage import SampleLineage
from ..sampling.state import Certificate, read_loader_state, read_sampler_state
from .rebuild import check_same_data, rebuild_verified
from .receipt import DataReceipt, check_state_agrees
from .samplers import sampler_from_state

__all__ = ["SampleTrace", "TraceReport", "load_state", "resolve_state", "trace", "trace_file"]

_STATE_KEYS = ("version", "sampler", "receipt")


@dataclass(frozen=True)
class SampleTrace:
    """One sample of a traced step: its ``rank`` and ``slot`` in the rank's micro-batch, its global id
    ``sample``, its lineage, and ``texts`` (one per piece) when the store's tokenizer is available."""

    step: int
    rank: int
    slot: int
    sample: int
    lineage: SampleLineage
    texts: tuple[str, ...] | None = None
    removed: tuple[bool, ...] = ()  # per piece: its document was removed from the run before this step

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: the fields above, the lineage as its own dict, ``removed`` one flag per piece."""
        return {
            "step": self.step,
            "rank": self.rank,
            "slot": self.slot,
            "sample": self.sample,
            "lineage": self.lineage.to_dict(),
            "texts": None if self.texts is None else list(self.texts),
            "removed": [k < len(self.removed) and self.removed[k] for k in range(len(self.lineage.pieces))],
        }


@dataclass(frozen=True)
class TraceReport:
    """The traced samples of one step, and where the state was found (for ``tokenport trace``)."""

    source: str
    step: int
    samples: tuple[SampleTrace, ...]

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types."""
        return {"source": self.source, "step": self.step, "samples": [s.to_dict() for s in self.samples]}

    def render(self) -> str:
        """The report as text: per sample, its blend path, store, and each document's range (and text)."""
        lines = [f"step {self.step} (0-based: batch {self.step + 1} handed to the trainer) from {self.source}"]
        for item in self.samples:
            lineage = item.lineage
            via = "".join(f" <- dataset[{child}] sample {sample}" for child, sample in lineage.path)
            lines.append(f"rank {item.rank} slot {item.slot}: sample {item.sample}{via} ({lineage.kind})")
            lines.append(f"  store {lineage.store}: {lineage.num_tokens} tokens")
            for k, (document, start, end) in enumerate(lineage.pieces):
                gone = " (removed from the run: not trained)" if k < len(item.removed) and item.removed[k] else ""
                lines.append(f"    document {document} tokens [{start}, {end}){gone}")
                if item.texts is not None:
                    lines.append("      " + json.dumps(_clip(item.texts[k]), ensure_ascii=False))
        return "\n".join(lines)


def _clip(text: str, limit: int = 240) -> str:
    """``text`` shortened to ``limit`` characters for a terminal ('...' in the middle)."""
    return text if len(text) <= limit else f"{text[: limit // 2]} ... {text[-limit // 2 :]}"


def load_state(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """(loader state, where it was found) from a JSON file of ``StatefulLoader.state_dict()`` or a torch
    checkpoint holding one at its top level or one level down (``torch.load(weights_only=True)``)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            head = handle.read(1)
    except OSError as exc:
        raise ConfigError(
            f"{name}: cannot read the loader state ({exc.strerror}); pass the file it was saved to"
        ) from None
    if head in (b"{", b"[", b" ", b"\n"):
        try:
            with open(name, encoding="utf-8") as handle:
                data: Any = json.load(handle)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{name}: not a JSON loader state nor a torch checkpoint ({exc})") from None
    elif not head:
        raise ConfigError(f"{name}: the file is empty; pass the JSON file of loader.state_dict() or a checkpoint")
    elif head not in (b"P", b"\x80"):  # a torch checkpoint is a zip (PK...) or, before torch 1.6, a pickle
        raise ConfigError(
            f"{name}: neither a JSON loader state nor a torch checkpoint (it starts with {head!r}); pass the JSON "
            "file of loader.state_dict() or the checkpoint holding it"
        )
    else:
        import torch  # lazily: only checkpoints need it

        try:
            data = torch.load(name, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a file that is no checkpoint
            text = str(exc)  # torch wraps every failure in pages of advice; keep the unpickler's own words
            detail = text.split("WeightsUnpickler error:")[-1].strip().splitlines() if text else []
            first = detail[0] if detail else type(exc).__name__
            raise ConfigError(
                f"{name}: not a JSON loader state nor a torch checkpoint loadable with weights_only=True "
                f"({first[:200]}); pass the JSON file of loader.state_dict() or the checkpoint holding it"
            ) from None
    if is_state(data):
        return dict(data), name
    if isinstance(data, Mapping):
        for key, value in data.items():
            if is_state(value):
                return dict(value), f"{name} key {key!r}"
    raise ConfigError(
        f"{name}: holds no StatefulLoader state (a dict with 'version', 'sampler' and 'receipt') at its top level "
        "or one level down; save loader.state_dict() in the checkpoint, or pass its JSON file"
    )


def is_state(value: Any) -> bool:
    """True for a mapping that looks like ``StatefulLoader.state_dict()`` (a receipt is checked later)."""
    return isinstance(value, Mapping) and "sampler" in value and "version" in value


@renamed_keywords(rank="data_parallel_rank")
def trace(
    state: Mapping[str, Any] | str | os.PathLike[str],
    step: int,
    data_parallel_rank: int | None = None,
    *,
    dataset: Any = None,
    stores: Mapping[str, str] | None = None,
    detokenize: bool = True,
) -> list[SampleTrace]:
    """The samples of training step ``step`` (0-based) on ``data_parallel_rank`` (None: every rank, in rank
    order), each with its lineage: from a loader state (or the path of a JSON state or torch checkpoint).
    ``rank=``: the older spelling of ``data_parallel_rank=``, kept for one release.

    ``dataset``: the loader's dataset, checked against the receipt (else rebuilt from it; ``stores`` maps
    recorded prefixes to where the stores are now). ``detokenize``: add each piece's text when the
    store's tokenizer is available here. ConfigError for a step the run had not reached, a state without
    a receipt, data that changed since, or a file that holds no state.
    """
    return list(_trace(state, step, data_parallel_rank, dataset, Rebuilder(stores or {}), detokenize)[1])


@renamed_keywords(rank="data_parallel_rank")
def trace_file(
    path: str | os.PathLike[str],
    step: int,
    data_parallel_rank: int | None = None,
    *,
    stores: Mapping[str, str] | None = None,
) -> TraceReport:
    """``trace`` of the state in ``path``, as a report naming where the state was found (``tokenport trace``;
    ``stores``: its ``--store-path OLD=NEW`` flags, which a moved store's message names)."""
    given = " ".join(f"--store-path {old}={new}" for old, new in (stores or {}).items())
    command = f"tokenport trace {os.fspath(path)} --step {step} {given}".rstrip()

    def store_flag(prefix: str) -> str:
        return f"say where it is now: {command} --store-path {prefix}=NEW_PREFIX (once per moved store)"

    rebuilder = Rebuilder(stores or {}, how_to_move=store_flag)
    source, samples = _trace(path, step, data_parallel_rank, None, rebuilder, True)
    return TraceReport(source, int(step), tuple(samples))


def _trace(
    state: Any, step: int, rank: int | None, dataset: Any, rebuilder: Rebuilder, detokenize: bool
) -> tuple[str, list[SampleTrace]]:
    source, state, dataset = resolve_state(state, dataset, rebuilder)
    certificate = read_loader_state(state, source).certificate
    ids = step_sample_ids(
        state["sampler"], step, rank, dataset, certificate if isinstance(certificate, Certificate) else None
    )
    texts = _Texts(dataset) if detokenize else None
    removed = _removed(state, dataset)
    traced = []
    for r, batch in ids.items():
        for slot, sample in enumerate(batch):
            if not isinstance(dataset, SampleDataset):
                raise ConfigError(f"dataset: a {type(dataset).__name__} has no lineage(); it cannot be traced")
            lineage = dataset.lineage(sample)
            text = None if texts is None else texts.of(lineage)
            gone = tuple(removed.get((lineage.store, d), step + 1) <= step for d, _, _ in lineage.pieces)
            traced.append(SampleTrace(int(step), r, slot, int(sample), lineage, text, gone if any(gone) else ()))
    return source, traced


def _removed(state: Mapping[str, Any], dataset: Any) -> dict[tuple[str, int], int]:
    """(store prefix, document) -> the step it is removed from, for the removals the state's receipt records."""
    from .removal import removed_from

    records = state["receipt"].get("removed_documents") or []
    if not records:
        return {}
    stores: dict[str, IndexedDataset] = {}
    _collect_stores(dataset, stores)
    return removed_from(records, stores)


def resolve_state(state: Any, dataset: Any, rebuilder: Rebuilder) -> tuple[str, dict[str, Any], Any]:
    """(where the state was found, the loader state checked, the dataset it read): from a state or the
    path of one, its dataset rebuilt from the receipt or ``dataset`` checked against it (for trace, where)."""
    if isinstance(state, (str, os.PathLike)):
        state, source = load_state(state)
    elif is_state(state):
        source = "the state given"
    else:
        raise ConfigError("state: expected the dict StatefulLoader.state_dict() returned, or the path of a file")
    if "receipt" not in state:
        raise ConfigError(
            f"{source}: the state has no data receipt (saved before receipts, or stripped), so what its steps "
            "read cannot be known; trace a state saved by StatefulLoader.state_dict()"
        )
    read_loader_state(state, source)  # every field typed before anything is built from it
    read_sampler_state(state["sampler"], f"{source}: state['sampler']")
    saved = DataReceipt.from_dict(state["receipt"], f"{source}: state['receipt']")
    # a registered sampler's state names its registry entry, not its class: the receipt's class is taken
    registered = saved.position.get("sampler") if isinstance(state["sampler"].get("sampler"), str) else None
    try:
        check_state_agrees(saved, state["sampler"], registered)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if dataset is None:
        dataset = rebuild_verified(saved, rebuilder)
    else:
        check_same_data(saved, dataset)
    if isinstance(dataset, AdaptiveBlend):  # its stream is a function of the weight updates the state stored
        mixture = state.get("mixture")
        if not isinstance(mixture, Mapping) or "updates" not in mixture:
            raise ConfigError(
                f"{source}: the state's dataset is an AdaptiveBlend but the state holds no 'mixture' updates; "
                "trace a state saved by StatefulLoader.state_dict()"
            )
        # a blend of its own with the state's updates: the caller's dataset is never changed
        dataset = AdaptiveBlend(
            dataset.datasets, dataset.initial_weights, num_samples=len(dataset), updates=mixture["updates"]
        )
    return source, dict(state), dataset


def step_sample_ids(
    sampler_state: Mapping[str, Any], step: int, rank: int | None, dataset: Any, certificate: Certificate | None = None
) -> dict[int, list[int]]:
    """rank -> the global sample ids of its micro-batch at step ``step``, from a sampler state; ConfigError
    for a step at or past the steps the state had consumed (the run had not trained on it). With the state's
    ``certificate`` whose segment began off this global batch's grid (a resume on another global batch), a
    step of the segment is read where the certificate says it was handed over, and an earlier one refused."""
    read_sampler_state(sampler_state, "state['sampler']")  # a tokenport sampler's state, every field typed
    step = check_int("step", step, 0)
    mbs = check_int("state['sampler']['micro_batch_size']", sampler_state["micro_batch_size"], 1)
    size = check_int("state['sampler']['data_parallel_size']", sampler_state["data_parallel_size"], 1)
    consumed = check_int("state['sampler']['consumed_samples']", sampler_state["consumed_samples"], 0)
    gbs = mbs * size
    off_grid = certificate is not None and segment_start(certificate, gbs) is not None
    taken = certificate.steps if off_grid and certificate is not None else -(-consumed // gbs)
    position = _certified_position(certificate, step, gbs) if off_grid and certificate is not None else step * gbs
    if step >= taken:
        raise ConfigError(
            f"step={step}: the state was saved after {taken} step(s) (consumed_samples={consumed}, global batch "
            f"{gbs} = micro batch {mbs} x {size} rank(s)), so step {step} was not trained yet; trace a step "
            f"below {taken}, or a state saved later"
        )
    if rank is not None and not 0 <= check_int("data_parallel_rank", rank, 0) < size:
        raise ConfigError(
            f"data_parallel_rank={rank}: the run had {size} data-parallel rank(s); pass a rank below {size}"
        )
    out = {}
    for r in range(size) if rank is None else (int(rank),):
        sampler = sampler_from_state(sampler_state, r, dataset)
        sampler.consumed_samples = position
        batch = next(iter(sampler), None)
        out[r] = [] if batch is None else [int(i) for i in batch]
    return out


def segment_start(certificate: Certificate | None, gbs: int) -> tuple[int, int] | None:
    """(step, consumed samples) where the certificate's segment began when a resume began it (step > 0) off the
    grid of global batch ``gbs`` (the run changed its global batch there), else None: steps are on the grid."""
    if certificate is None or certificate.since == 0 or not certificate.runs:
        return None
    since, consumed = (int(value) for value in certificate.runs[0])
    return None if (since, consumed) == (certificate.since, certificate.since * gbs) else (since, consumed)


def _certified_position(certificate: Certificate, step: int, gbs: int) -> int:
    """The position step ``step`` was handed over at, by a certificate whose segment began off the grid of
    ``gbs`` (a resume on another global batch): from its runs; ConfigError for a step before the segment."""
    runs = certificate.runs
    if step < certificate.since:
        raise ConfigError(
            f"step={step}: the state's certificate begins its segment at step {certificate.since} (consumed_samples="
            f"{runs[0][1]}), where the run was resumed on another global batch or position, so step {step} was cut "
            f"from another global batch than this state's {gbs}; trace it with a state saved before step "
            f"{certificate.since}"
        )
    start, consumed = next(((s, c) for s, c in reversed(runs) if s <= step), runs[0])
    return consumed + (step - start) * gbs


class _Texts:
    """Each store's tokenizer, loaded once (None when it is not available here), to decode pieces
    read from the dataset's own stores."""

    def __init__(self, dataset: Any) -> None:
        self.stores: dict[str, IndexedDataset] = {}
        self.tokenizers: dict[str, Any] = {}
        _collect_stores(dataset, self.stores)

    def of(self, lineage: SampleLineage) -> tuple[str, ...] | None:
        """The pieces' texts, or None when the store's tokenizer is not available here."""
        from ..tokenizers import tokenizer_from_identity

        store = self.stores.get(lineage.store)
        if store is None:
            return None
        if lineage.store not in self.tokenizers:
            manifest = store.manifest
            identity = manifest.tokenizer if manifest is not None else None
            self.tokenizers[lineage.store] = tokenizer_from_identity(identity) if isinstance(identity, dict) else None
        tokenizer = self.tokenizers[lineage.store]
        if tokenizer is None:
            return None
        return tuple(tokenizer.decode(store.get(doc, start, end - start)) for doc, start, end in lineage.pieces)


def _collect_stores(dataset: Any, out: dict[str, IndexedDataset]) -> None:
    """prefix -> store of every store ``dataset`` reads (through blends)."""
    if not isinstance(dataset, SampleDataset):
        return
    for child in dataset.datasets:
        _collect_stores(child, out)
    for store in dataset.stores():
        out.setdefault(str(store.prefix), store)

"""One work unit, start to finish: read -> tokenize -> write its store under OUTPUT/.work/.

The unit's store is written atomically by IndexedDatasetWriter, and its counts go to a
``NAME.stats.json`` sidecar written just before; so a store that exists is a finished
unit, and its counts are there to total.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _schema
from ..._schema import Count, Int64, read_document, to_builtins
from ...errors import CorruptStoreError, StorageError
from ...indexed import IndexedDataset, IndexedDatasetWriter
from ...tokenizers import Tokenizer
from ..inputs.documents import Document
from ..inputs.readers import read_slice
from ..steps.base import Step
from ..steps.dedup import keys_path, save_atomically
from ..steps.registry import build_steps, register_step, run_steps, run_wide_step
from ..steps.rejects import RejectedWriter
from .chat import ChatJob, EncodeChat, conversations, per_message
from .identity import file_digest, read_whole
from .state import replace_atomically, write_json
from .stats import Problems, UnitStats
from .tokenize import TokenBatch, Tokenize
from .units import Slice, Unit


class Cancelled(Exception):
    """Raised inside a unit that was asked to stop; its store is discarded."""


@dataclass(frozen=True)
class UnitJob:
    """What every unit of a run shares; small and picklable, sent with each unit to a worker."""

    work_dir: str
    text_key: str
    append_eod: bool
    max_chars_per_piece: int
    batch_size: int
    on_error: str
    steps: Sequence[Mapping[str, Any]] = ()  # cleaning step specs, built afresh for every unit
    sign_position: int | None = None  # set: make the keys of the run-wide step there instead of a store
    keep_rejected: bool = False  # write dropped documents to UNIT.rejected.jsonl for audit
    step_kinds: tuple = ()  # (name, Step class) of the kinds register_step added, for workers to register
    chat: ChatJob | None = None  # set: records are conversations, written to chat stores (tokens + masks)


@dataclass(frozen=True)
class UnitRecord:
    """A finished unit: its store's prefix, its counts, and the documents of each of its slices."""

    prefix: str
    stats: UnitStats
    documents_per_slice: tuple[int, ...]
    digests: tuple[tuple[str, str], ...] = ()  # (path, sha256) of the local files its slices read whole


def unit_prefix(work_dir: str, unit: Unit) -> str:
    return os.path.join(work_dir, unit.name)


def run_unit(
    job: UnitJob,
    unit: Unit,
    tokenizer: Tokenizer,
    cancelled: Callable[[], bool] = lambda: False,
    progress: Callable[[int], None] | None = None,
) -> UnitRecord:
    """Read, tokenize and store every slice of `unit`; returns its record. Between batches,
    raises Cancelled (leaving no store) once `cancelled()` is true, and passes `progress` how
    much more of the unit's `size` is done (a few times a second at most)."""
    for kind, step_class in job.step_kinds:
        register_step(kind, step_class)
    if job.sign_position is not None:
        return sign_unit(job, unit, cancelled, progress)
    stats = UnitStats()
    problems = Problems(job.on_error, stats)
    encode = _encoder(job, tokenizer, problems)
    prefix = unit_prefix(job.work_dir, unit)
    steps = _steps(job, unit)
    rejected = rejected_path(job.work_dir, unit) if job.keep_rejected and steps else None
    chat = None if job.chat is None else job.chat.describe()
    provenance = {"prepare_unit": unit.describe()}
    with IndexedDatasetWriter(
        prefix, tokenizer=tokenizer, provenance=provenance, masks=chat is not None, chat=chat
    ) as writer:
        sink_file = open(rejected + ".tmp", "w", encoding="utf-8") if rejected else None
        try:
            if sink_file is not None:
                sinks = RejectedWriter(sink_file)
                for label, step in steps:
                    step.sink = sinks.sink_for(label)
            documents_per_slice, digests = _write_slices(
                job, unit, steps, encode, writer, stats, problems, cancelled, progress
            )
        finally:
            if sink_file is not None:
                sink_file.close()
        if rejected is not None:  # in place before the store is published: a finished unit has it
            replace_atomically(rejected + ".tmp", rejected)
        for label, step in steps:
            stats.steps[label].update(step.counts())
        write_json(
            prefix + ".stats.json",
            {"stats": stats.to_dict(), "documents_per_slice": documents_per_slice, "digests": dict(digests)},
        )
    return UnitRecord(prefix, stats, tuple(documents_per_slice), tuple(digests))


def _encoder(
    job: UnitJob, tokenizer: Tokenizer, problems: Problems
) -> Callable[[Iterable[Document]], Iterator[TokenBatch]]:
    """Documents in, token batches out: text documents tokenized, or conversations encoded with masks."""
    if job.chat is not None:
        return EncodeChat(tokenizer, job.chat, problems, job.batch_size)
    return Tokenize(
        tokenizer,
        problems,
        append_eod=job.append_eod,
        max_chars_per_piece=job.max_chars_per_piece,
        batch_size=job.batch_size,
    )


def _write_slices(
    job: UnitJob,
    unit: Unit,
    steps: list[tuple[str, Step]],
    encode: Callable[[Iterable[Document]], Iterator[TokenBatch]],
    writer: IndexedDatasetWriter,
    stats: UnitStats,
    problems: Problems,
    cancelled: Callable[[], bool],
    progress: Callable[[int], None] | None,
) -> tuple[list[int], list[tuple[str, str]]]:
    """Every slice of `unit` through the steps and `encode` into `writer`: the documents of each
    slice, and the digests of the files read whole."""
    documents_per_slice, digests = [], []
    meter = _Meter(stats, progress)
    for piece in unit.slices:
        before = stats.documents
        meter.start(piece.size)
        for batch in encode(run_steps(_documents(job, piece, problems), steps, stats.steps, stats.step_costs)):
            if cancelled():
                raise Cancelled(unit.name)
            writer.add_documents(batch.tokens, batch.lengths, masks=batch.masks)
            meter.tick()
        meter.tick(finished=True)
        documents_per_slice.append(stats.documents - before)
        if read_whole(piece):  # read just now, so from the page cache: the run's identity of it
            digests.append((piece.path, file_digest(piece.path)))
    return documents_per_slice, digests


class _Meter:
    """Progress within a unit, in the units of its slices' `size`: input bytes read so far in the
    current slice (at most its size; all of it once the slice is done), reported as increments."""

    _EVERY = 0.25  # seconds between reports

    def __init__(self, stats: UnitStats, progress: Callable[[int], None] | None) -> None:
        self.stats, self.progress = stats, progress
        self.size = self.reported = self.read_before = 0
        self.last = time.monotonic()

    def start(self, size: int) -> None:
        self.size, self.reported, self.read_before = size, 0, self.stats.bytes_in

    def tick(self, finished: bool = False) -> None:
        if self.progress is None or not (finished or time.monotonic() - self.last >= self._EVERY):
            return
        done = self.size if finished else min(self.stats.bytes_in - self.read_before, self.size)
        if done > self.reported:
            self.progress(done - self.reported)
            self.reported = done
        self.last = time.monotonic()


def _documents(job: UnitJob, piece: Slice, problems: Problems) -> Iterator[Document]:
    """The documents of `piece` as the steps see them: texts, or conversations for a chat run."""
    if job.chat is None:
        return read_slice(piece, job.text_key, problems)
    return conversations(read_slice(piece, None, problems), job.chat.format, problems, keyed=bool(job.steps))


def _steps(job: UnitJob, unit: Unit, upto: int | None = None) -> list[tuple[str, Step]]:
    """The unit's cleaning steps (before position `upto`), each on whole messages in a chat run."""
    steps = build_steps(job.steps, job.work_dir, unit.name, upto=upto)
    return steps if job.chat is None else per_message(steps)


def rejected_path(work_dir: str, unit: Unit) -> str:
    """Where a unit's rejected documents go (moved beside the parts when the run finishes)."""
    return os.path.join(work_dir, f"{unit.name}.rejected.jsonl")


def sign_unit(
    job: UnitJob,
    unit: Unit,
    cancelled: Callable[[], bool] = lambda: False,
    progress: Callable[[int], None] | None = None,
) -> UnitRecord:
    """Pass 1 of the run-wide step at ``job.sign_position`` (a dedup step): run the steps before it and
    save one key row per document reaching it (``dedup.keys_path``); progress as in ``run_unit``."""
    position = job.sign_position
    assert position is not None  # run_unit signs only for a job with a sign_position
    stats = UnitStats()
    problems = Problems(job.on_error, stats)
    sign = run_wide_step(job.steps, position).sign
    steps = _steps(job, unit, upto=position)
    rows: list[np.ndarray] = []
    meter = _Meter(stats, progress)
    for piece in unit.slices:
        meter.start(piece.size)
        for document in run_steps(_documents(job, piece, problems), steps, stats.steps):
            if len(rows) % 1024 == 0:
                if cancelled():
                    raise Cancelled(unit.name)
                meter.tick()
            rows.append(sign(document.text))
        meter.tick(finished=True)
    path = keys_path(job.work_dir, position, unit.name)
    save_atomically(path, np.stack(rows) if rows else np.zeros((0, 1), dtype=np.uint64))
    return UnitRecord(path, stats, ())


def signed_unit(work_dir: str, position: int, unit: Unit) -> bool:
    """Whether pass 1 of the run-wide step at ``position`` is done for ``unit``."""
    return os.path.exists(keys_path(work_dir, position, unit.name))


class UnitCounts(_schema.Document, frozen=True):
    """A unit's counters as ``UnitStats.to_dict`` writes them."""

    documents: Count
    tokens: Count
    bytes_in: Count
    skipped: dict[str, Count]
    steps: dict[str, dict[str, Count]] = {}
    step_costs: dict[str, dict[str, Int64]] = {}


class UnitStatsFile(_schema.Document, frozen=True):
    """``.work/UNIT.stats.json``: a finished unit's counters, documents per slice, and the digests of
    the files it read whole (absent in files written before digests were kept)."""

    stats: UnitCounts
    documents_per_slice: list[Count]
    digests: dict[str, str] = {}

    def __post_init__(self) -> None:
        if sum(self.documents_per_slice) != self.stats.documents:
            raise ValueError("documents_per_slice does not add up to stats.documents")


def finished_unit(work_dir: str, unit: Unit) -> UnitRecord | None:
    """The record of `unit` if an earlier run finished it, else None; CorruptStoreError naming the
    field when its counts are damaged or do not fit the unit and its store."""
    prefix = unit_prefix(work_dir, unit)
    path = prefix + ".stats.json"
    remedy = f"delete {prefix}.* to prepare this unit again"
    try:
        with IndexedDataset(prefix) as ds:  # finishes an interrupted publication, if any
            documents, tokens = ds.num_documents, ds.num_tokens
        data = read_document(path, UnitStatsFile, remedy=remedy, error=CorruptStoreError)
    except (StorageError, FileNotFoundError):
        return None
    if len(data.documents_per_slice) != len(unit.slices) or (data.stats.documents, data.stats.tokens) != (
        documents,
        tokens,
    ):
        raise CorruptStoreError(
            f"{path}: stats: {len(data.documents_per_slice)} slices, {data.stats.documents} documents and "
            f"{data.stats.tokens} tokens, but the unit has {len(unit.slices)} slices and its store {documents} "
            f"documents and {tokens} tokens; {remedy}"
        )
    return UnitRecord(
        prefix,
        UnitStats.from_dict(to_builtins(data.stats)),
        tuple(data.documents_per_slice),
        tuple(data.digests.items()),
    )

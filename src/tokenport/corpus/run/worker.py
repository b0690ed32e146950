"""One work unit, start to finish: read -> tokenize -> write its store under OUTPUT/.work/.

The unit's store is written atomically by IndexedDatasetWriter, and its counts go to a
``NAME.stats.json`` sidecar written just before; so a store that exists is a finished
unit, and its counts are there to total.
"""

from __future__ import annotations

import heapq
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ... import _schema
from ..._schema import Count, Int64, read_document, to_builtins
from ...errors import CorruptStoreError, StorageError
from ...indexed import IndexedDataset, IndexedDatasetWriter
from ...tokenizers import Tokenizer
from ..inputs.documents import Document
from ..inputs.readers import read_slice
from ..steps.base import Step
from ..steps.dedup import keys_path, prekeys_path, save_atomically
from ..steps.registry import build_steps, register_step, run_steps, run_wide_positions, run_wide_step
from ..steps.rejects import RejectedWriter
from ..steps.runwide import adjacent
from .chat import ChatJob, EncodeChat, conversations, per_message
from .identity import file_digest, read_whole
from .provenance import Recorder, pass_path
from .spill import SpillReader, SpillWriter, spill_path
from .state import replace_atomically, temporary_path, write_json
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
    provenance: bool = False  # record why each document was dropped or changed (provenance.Recorder)
    id_field: str | None = None  # the field naming each input document, kept in its provenance


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
    """Read, tokenize and store every slice of `unit`; returns its record. Raises Cancelled (leaving
    no store) once `cancelled()` is true, and passes `progress` how much more of the unit's `size`
    is done (every half MiB of input or a quarter second, whichever comes first). With run-wide steps,
    the documents come from the spill of the last one's keys pass, past the steps before it."""
    for kind, step_class in job.step_kinds:
        register_step(kind, step_class)
    if job.sign_position is not None:
        return sign_unit(job, unit, cancelled, progress)
    previous = _previous(job, None)
    work = _Pass(job, unit, previous, cancelled, progress)
    stats = work.stats
    encode = _encoder(job, tokenizer, work.problems)
    prefix = unit_prefix(job.work_dir, unit)
    chat = None if job.chat is None else job.chat.describe()
    provenance = {"prepare_unit": unit.describe()}
    begun, writing = time.perf_counter(), 0.0
    with IndexedDatasetWriter(
        prefix, tokenizer=tokenizer, provenance=provenance, masks=chat is not None, chat=chat
    ) as writer:
        with work:
            documents_per_slice = []
            for documents in work.slices():
                before = stats.documents
                for batch in encode(work.passing(documents)):
                    if cancelled():
                        raise Cancelled(unit.name)
                    started = time.perf_counter()
                    writer.add_documents(batch.tokens, batch.lengths, masks=batch.masks)
                    writing += time.perf_counter() - started
                documents_per_slice.append(stats.documents - before)
        if work.rejected is not None:  # in place before the store is published: a finished unit has it
            merge_rejected(work.rejected_files(), rejected_path(job.work_dir, unit))
        if work.recorder is not None:  # likewise: a finished unit has its provenance
            work.recorder.save(pass_path(job.work_dir, None, unit.name), getattr(encode, "failed", ()))
        work.bill("tokenize", time.perf_counter() - begun, write=writing)
        write_json(
            prefix + ".stats.json",
            {"stats": stats.to_dict(), "documents_per_slice": documents_per_slice, "digests": dict(work.digests)},
        )
    return UnitRecord(prefix, stats, tuple(documents_per_slice), tuple(work.digests))


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


class _Pass:
    """One pass over a unit: its documents from the input, or from the spill of the run-wide step at
    `previous` (the steps before it ran in its keys pass), through the steps from there on (up to
    `upto`); counts start from that pass's. A context: on exit, the steps' counters go to `stats` and
    the rejected-documents file is closed (kept only when the pass ended without an error)."""

    def __init__(
        self,
        job: UnitJob,
        unit: Unit,
        previous: int | None,
        cancelled: Callable[[], bool],
        progress: Callable[[int], None] | None,
        upto: int | None = None,
    ) -> None:
        self.job, self.unit, self.previous, self.cancelled = job, unit, previous, cancelled
        self.stats, self.digests, spilled = _earlier_pass(job, unit, previous)
        self.problems = Problems(job.on_error, self.stats)
        self.steps = _steps(job, unit, start=previous or 0, upto=upto)
        self.reader = None if previous is None else SpillReader(spill_path(job.work_dir, previous, unit.name), spilled)
        self.meter = _Meter(progress)
        self.ordinal = -1  # of the unit's input document last read
        self.read = 0  # input bytes of the current slice read
        self.reading = 0.0  # seconds spent reading documents (the input, or the spill)
        self.rejected = rejected_pass_path(job.work_dir, upto, unit.name) if job.keep_rejected and self.steps else None
        self.sink_file: IO[str] | None = None
        self.recorder = Recorder(lambda: self.ordinal, previous is None) if job.provenance else None

    def __enter__(self) -> _Pass:
        if self.rejected is not None:
            os.makedirs(os.path.dirname(self.rejected), exist_ok=True)
            self.sink_file = open(temporary_path(self.rejected), "w", encoding="utf-8")
            sinks = RejectedWriter(_Numbered(self.sink_file, self))
            for label, step in self.steps:
                step.sink = sinks.sink_for(label)
        if self.recorder is not None:
            for label, step in self.steps:
                self.recorder.watch(label, step)
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if self.reader is not None:
            self.reader.close()
        if self.sink_file is not None:
            self.sink_file.close()
            if kind is None:
                replace_atomically(temporary_path(self.rejected or ""), self.rejected or "")
            else:
                os.unlink(temporary_path(self.rejected or ""))
        if kind is None:
            for label, step in self.steps:
                self.stats.steps[label].update(step.counts())

    def slices(self) -> Iterator[Iterator[Document]]:
        """Per slice of the unit, in order, its documents past this pass's steps."""
        stats = self.stats
        for index, piece in enumerate(self.unit.slices):
            self.meter.start(piece.size)
            self.read = 0
            yield run_steps(self._metered(index, piece), self.steps, stats.steps, stats.step_costs)
            self.meter.tick(piece.size)
            if self.reader is None and read_whole(piece):  # read just now, so from the page cache
                self.digests.append((piece.path, file_digest(piece.path)))
        if self.reader is not None:
            self.reader.finish()

    def passing(self, documents: Iterable[Document]) -> Iterator[Document]:
        """``documents`` (past the pass's steps), each noted as passed on for provenance."""
        if self.recorder is None:
            yield from documents
            return
        passed = self.recorder.passed
        for document in documents:
            passed.append(self.ordinal)
            yield document

    def _metered(self, index: int, piece: Slice) -> Iterator[Document]:
        """The slice's documents as read, timed."""
        documents = self._noted(index, piece)
        while True:
            started = time.perf_counter()
            document = next(documents, None)
            self.reading += time.perf_counter() - started
            if document is None:
                return
            yield document

    def bill(self, rest: str, seconds: float, **known: float) -> None:
        """Add this pass's `seconds` to the unit's stages: reading, the `known` ones, and the rest
        (less its steps' own time, counted per step) to `rest`."""
        steps = sum(self.stats.step_costs.get(label, Counter())["time_ms"] for label, _ in self.steps) / 1000
        parts = {"read": self.reading, **known}
        parts[rest] = parts.get(rest, 0.0) + max(0.0, seconds - steps - sum(parts.values()))
        self.stats.stages.update({name: round(value * 1000) for name, value in parts.items()})

    def _noted(self, index: int, piece: Slice) -> Iterator[Document]:
        """The slice's documents as read, noting each one's ordinal and how far the input is read."""
        if self.reader is not None:
            reader = self.reader
            for document in reader.documents(index):
                self.ordinal, self.read = reader.ordinal, reader.read
                self._tick()
                yield document
            self.read = reader.read
            return
        stats = self.stats
        before = stats.bytes_in
        recorder = self.recorder
        for document in _documents(self.job, piece, self.problems):
            self.ordinal += 1
            if recorder is not None:
                recorder.read(piece.file, piece.format, document)
            self.read = stats.bytes_in - before
            self._tick()
            yield document

    def _tick(self) -> None:
        if self.cancelled():
            raise Cancelled(self.unit.name)
        self.meter.tick(self.read)

    def rejected_files(self) -> list[str]:
        """The rejected-document files of this unit's passes so far, in pass order."""
        earlier = [rejected_pass_path(self.job.work_dir, p, self.unit.name) for p in _positions(self.job)]
        return [path for path in [*earlier, self.rejected or ""] if os.path.exists(path)]


class _Numbered:
    """A text file whose lines are prefixed with the ordinal of the pass's current document."""

    def __init__(self, file: IO[str], where: _Pass) -> None:
        self.file, self.where = file, where

    def write(self, line: str) -> None:
        self.file.write(f"{self.where.ordinal}\t{line}")


def merge_rejected(sources: list[str], target: str) -> None:
    """The passes' rejected documents (lines ``ORDINAL\tJSON``, each file in ordinal order) as one
    jsonl file in input order, written atomically to ``target`` (the sources stay for a rerun until
    the unit is written: its store is published after this)."""
    files = [open(path, encoding="utf-8") for path in sources]
    try:
        temporary = temporary_path(target)
        with open(temporary, "w", encoding="utf-8") as out:
            for line in heapq.merge(*files, key=lambda line: int(line.split("\t", 1)[0])):
                out.write(line.split("\t", 1)[1])
    finally:
        for f in files:
            f.close()
    replace_atomically(temporary, target)


class _Meter:
    """Progress within a unit, in the units of its slices' `size`: input bytes read so far in the
    current slice (at most its size; all of it once the slice is done), reported as increments at
    least every `_BYTES` of input or `_EVERY` seconds, whichever comes first."""

    _EVERY = 0.25  # seconds between reports
    _BYTES = 1 << 19  # input between reports: half a MiB, so that a report (a document at a time) covers under 1 MiB

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.size = self.reported = 0
        self.last = time.monotonic()

    def start(self, size: int) -> None:
        self.size, self.reported = size, 0

    def tick(self, read: int) -> None:
        """Report `read` bytes of the slice done if a report is due (always once all of it is)."""
        if self.progress is None:
            return
        done = min(read, self.size)
        if done - self.reported < self._BYTES and done < self.size and time.monotonic() - self.last < self._EVERY:
            return
        if done > self.reported:
            self.progress(done - self.reported)
            self.reported = done
        self.last = time.monotonic()


def _documents(job: UnitJob, piece: Slice, problems: Problems) -> Iterator[Document]:
    """The documents of `piece` as the steps see them: texts, or conversations for a chat run."""
    if job.chat is None:
        return read_slice(piece, job.text_key, problems, job.id_field if job.provenance else None)
    return conversations(read_slice(piece, None, problems), job.chat.format, problems, keyed=bool(job.steps))


def _steps(job: UnitJob, unit: Unit, start: int = 0, upto: int | None = None) -> list[tuple[str, Step]]:
    """The unit's cleaning steps (from position `start`, before position `upto`), each on whole
    messages in a chat run."""
    steps = build_steps(job.steps, job.work_dir, unit.name, upto=upto, start=start)
    return steps if job.chat is None else per_message(steps)


def _positions(job: UnitJob) -> list[int]:
    """Where the keys passes are: the first of each run of neighbouring run-wide steps."""
    return [group[0] for group in adjacent(run_wide_positions(job.steps))]


def _previous(job: UnitJob, position: int | None) -> int | None:
    """The position of the keys pass before `position`'s pass (None: the write pass), or None when
    that pass reads the input."""
    before = [p for p in _positions(job) if position is None or p < position]
    return before[-1] if before else None


def rejected_path(work_dir: str, unit: Unit) -> str:
    """Where a unit's rejected documents go (moved beside the parts when the run finishes)."""
    return os.path.join(work_dir, f"{unit.name}.rejected.jsonl")


def rejected_pass_path(work_dir: str, position: int | None, unit_name: str) -> str:
    """Where the keys pass of the run-wide step at `position` (None: the write pass) keeps the
    documents its steps dropped, each line prefixed by its input ordinal, until the unit is written."""
    directory = work_dir if position is None else os.path.join(work_dir, f"dedup-{position}")
    return os.path.join(directory, f"{unit_name}.rejected.tsv")


def pass_stats_path(work_dir: str, position: int, unit_name: str) -> str:
    """The counts of a unit's passes up to the keys pass of the run-wide step at `position`; written
    last, so it marks the pass done."""
    return os.path.join(work_dir, f"dedup-{position}", f"{unit_name}.pass.json")


def sign_unit(
    job: UnitJob,
    unit: Unit,
    cancelled: Callable[[], bool] = lambda: False,
    progress: Callable[[int], None] | None = None,
) -> UnitRecord:
    """The keys pass of the run-wide step at ``job.sign_position`` (a dedup step) and its run-wide
    neighbours after it: run the steps since the keys pass before (on its spill, or on the input),
    save one key row per document reaching it for each (``dedup.keys_path``; ``prekeys_path`` for
    the neighbours) and the documents themselves (``spill``), then the counts so far
    (``pass_stats_path``, which marks the pass done); progress as in ``run_unit``."""
    position = job.sign_position
    assert position is not None  # run_unit signs only for a job with a sign_position
    group = next(g for g in adjacent(run_wide_positions(job.steps)) if g[0] == position)
    signs = [run_wide_step(job.steps, q).sign for q in group]
    work = _Pass(job, unit, _previous(job, position), cancelled, progress, upto=position)
    spill = SpillWriter(spill_path(job.work_dir, position, unit.name))
    rows: list[list[np.ndarray]] = [[] for _ in group]
    begun = time.perf_counter()
    try:
        with work:
            for index, documents in enumerate(work.slices()):
                for document in work.passing(documents):
                    spill.add(index, work.read, document, work.ordinal)
                    for keys, sign in zip(rows, signs):
                        keys.append(sign(document.text))
    except BaseException:
        spill.discard()
        raise
    spill.publish()
    for q, keys in zip(group, rows):
        where = keys_path if q == position else prekeys_path
        save_atomically(where(job.work_dir, q, unit.name), np.stack(keys) if keys else np.zeros((0, 1), np.uint64))
    work.bill("keys", time.perf_counter() - begun)
    if work.recorder is not None:  # before the counts, which mark the pass done
        work.recorder.save(pass_path(job.work_dir, position, unit.name))
    write_json(
        pass_stats_path(job.work_dir, position, unit.name),
        {"stats": work.stats.to_dict(), "spilled": len(rows[0]), "digests": dict(work.digests)},
    )
    return UnitRecord(keys_path(job.work_dir, position, unit.name), work.stats, ())


def signed_unit(work_dir: str, position: int, unit: Unit) -> bool:
    """Whether the keys pass of the run-wide step at ``position`` is done for ``unit``."""
    return os.path.exists(pass_stats_path(work_dir, position, unit.name))


def _position_of(item: tuple[str, object]) -> int:
    return int(item[0].split(":", 1)[0])


def _earlier_pass(job: UnitJob, unit: Unit, previous: int | None) -> tuple[UnitStats, list[tuple[str, str]], int]:
    """The counts, digests and spilled documents of the unit's keys pass at `previous` (nothing if None)."""
    if previous is None:
        return UnitStats(), [], 0
    path = pass_stats_path(job.work_dir, previous, unit.name)
    data = read_document(
        path, PassStatsFile, remedy=f"delete {os.path.dirname(path)} to make it again", error=CorruptStoreError
    )
    stats = UnitStats.from_dict(to_builtins(data.stats))
    stats.steps = dict(sorted(stats.steps.items(), key=_position_of))  # JSON sorted "N:kind" labels as text
    stats.step_costs = dict(sorted(stats.step_costs.items(), key=_position_of))
    return stats, list(data.digests.items()), data.spilled


class UnitCounts(_schema.Document, frozen=True):
    """A unit's counters as ``UnitStats.to_dict`` writes them."""

    documents: Count
    tokens: Count
    bytes_in: Count
    skipped: dict[str, Count]
    steps: dict[str, dict[str, Count]] = {}
    step_costs: dict[str, dict[str, Int64]] = {}
    stages: dict[str, Int64] = {}


class PassStatsFile(_schema.Document, frozen=True):
    """``.work/dedup-N/UNIT.pass.json``: a unit's counts up to the keys pass of the run-wide step at N,
    how many documents reached it (and were kept in its spill), and the digests of files read whole."""

    stats: UnitCounts
    spilled: Count
    digests: dict[str, str] = {}


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

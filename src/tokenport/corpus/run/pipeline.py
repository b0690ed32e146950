"""`prepare`: raw corpus files to token stores, in parallel, resumable, deterministic.

Plan units -> run each unit (read -> tokenize -> its own store in OUTPUT/.work/) on worker
processes -> assemble unit stores, in unit order, into ``part-NNNNN`` stores -> write
``tokenport.json`` -> remove ``.work/``. Every step is atomic and leaves a record, so a run
stopped at any point (even by ``kill -9``) resumes from where it was, and the final
.bin/.idx bytes depend only on the inputs and the output settings, never on the worker
count or on interruptions.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as _dt
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec
import numpy as np

from ..._jit import announce_compilation
from ...chat.template import load_chat_template
from ...errors import ConfigError, InputDataError
from ...indexed import IndexedDataset
from ...storage import is_remote
from ...tokenizers import HFTokenizer, Tokenizer, choose_engine, load_tokenizer
from ..inputs.inflate import discard_chunk
from ..inputs.sample import sample_texts
from ..inputs.sources import InputFile, expand_inputs
from ..steps.dedup import drops_path, keys_path, originals_path, prekeys_path, save_atomically
from ..steps.registry import (
    check_steps_reach_workers,
    registered_steps,
    run_wide_positions,
    run_wide_step,
    step_modules,
)
from ..steps.runwide import Signatures, adjacent
from .assemble import Part, finished_part, name_parts, plan_parts, write_part
from .chat import ChatJob
from .config import PrepareConfig, fingerprint
from .executor import Executor, LocalExecutor
from .failures import output_failure
from .identity import InputIdentity, changed_input, changed_while_read, identify, planner_digests
from .outcome import nothing_left, warn_of_steps_that_removed_everything
from .provenance import PROVENANCE_FILE, pass_path
from .provenance import assemble as assemble_provenance
from .ray_executor import RayExecutor
from .state import DATASET_FORMAT, OutputDir, not_a_directory, replace_atomically, to_builtins
from .stats import UnitStats
from .units import Unit, plan_units
from .upload import check_remote_output, staging_dir, upload_output
from .worker import UnitJob, UnitRecord, finished_unit, rejected_path, signed_unit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepareResult:
    """What a prepare run produced: part prefixes and totals over the whole dataset.

    `seconds` is this call's wall time; `resumed_units` of the `units` were finished by an
    earlier, interrupted call (all of them when the output was already complete).
    """

    output: str
    parts: tuple[str, ...]
    documents: int
    tokens: int
    bytes_in: int
    seconds: float
    skipped: dict[str, int]
    workers: int
    units: int
    resumed_units: int
    steps: dict[str, dict[str, int]] = field(default_factory=dict)

    def summary(self) -> str:
        """A few human-readable lines: totals and throughput (of a run that did all the work)."""
        lines = [
            f"{self.documents:,} documents, {self.tokens:,} tokens in {len(self.parts)} part(s) under {self.output}"
        ]
        if self.resumed_units:
            lines.append(
                f"{self.bytes_in / 1e6:,.1f} MB in; {self.resumed_units} of {self.units} units were done by an earlier "
                f"run, so this {self.seconds:.1f} s run gives no throughput"
            )
        else:
            seconds = max(self.seconds, 1e-9)
            mb_per_s = self.bytes_in / 1e6 / seconds
            lines.append(
                f"{self.bytes_in / 1e6:,.1f} MB in {self.seconds:.1f} s: {self.documents / seconds:,.0f} docs/s, "
                f"{mb_per_s:,.2f} MB/s, {mb_per_s / self.workers:,.2f} MB/s per worker ({self.workers} workers)"
            )
        if self.skipped:
            lines.append("skipped: " + ", ".join(f"{kind} {n:,}" for kind, n in sorted(self.skipped.items())))
        for label, counts in self.steps.items():
            changes = ", ".join(f"{key} {n:,}" for key, n in counts.items() if not key.startswith("documents_"))
            lines.append(
                f"step {label}: {counts.get('documents_in', 0):,} documents in, "
                f"{counts.get('documents_out', 0):,} out" + (f"; {changes}" if changes else "")
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        data = asdict(self)
        data["parts"] = list(self.parts)
        return data


_CALL = "call prepare(PrepareConfig(inputs=['data/prose.jsonl'], output='stores/prose'))"


def prepare(config: PrepareConfig, progress: bool = False, *, overwrite: bool = False) -> PrepareResult:
    """Tokenize `config.inputs` into token stores under `config.output`, a directory or an
    object-store URL (see PrepareConfig).

    Resumes an interrupted run with the same output settings and unchanged inputs; returns the
    existing result when the output is already finished with them (see ``identity`` for what
    "unchanged" means); raises ConfigError for other settings or changed inputs, naming what
    differs, unless `overwrite` (``--force``): then the earlier run's work and output are deleted
    and the run starts over. A run that fails before producing anything leaves no ``.work/``. An OS
    error while writing (disk full, permissions) is a StorageError naming `config.output`.
    """
    if not isinstance(config, PrepareConfig):
        raise ConfigError(f"prepare: expected a PrepareConfig, got a {type(config).__name__}; {_CALL}")
    url = config.output.rstrip("/") if is_remote(config.output) else None
    try:
        return _prepare(config, progress, overwrite)
    except OSError as exc:
        failure = output_failure(config.output, config.output if url is None else staging_dir(url), exc)
        if failure is None:
            raise
        raise failure from exc


def _prepare(config: PrepareConfig, progress: bool, overwrite: bool) -> PrepareResult:
    """`prepare`, its OS errors not yet named by the output."""
    started = time.perf_counter()
    announce_compilation(step_modules(config.steps))
    if config.workers > 1 and config.executor == "local":  # fresh worker processes import each step's class
        check_steps_reach_workers(config.steps)
    tokenizer = load_tokenizer(config.tokenizer)
    if config.append_eod and config.format == "text":
        tokenizer.eod_id  # noqa: B018 - now: a tokenizer without one is refused naming --no-eod, before any work
    identity = tokenizer.identity()
    chat = _chat_job(config, tokenizer)
    settings = config.output_settings(identity, None if chat is None else chat.describe())
    run_fingerprint = fingerprint(settings)
    url = config.output.rstrip("/") if is_remote(config.output) else None
    out = OutputDir(config.output if url is None else staging_dir(url))
    if url is None and os.path.exists(out.path) and not os.path.isdir(out.path):
        raise not_a_directory(out.path)  # before the inputs: an input given as the output is not "no files"
    files = expand_inputs(config.inputs, exclude=out.path, as_text=config.as_text)
    if url is not None:  # an object store: prepared in a local staging directory, then uploaded
        manifest = check_remote_output(url, run_fingerprint, overwrite=overwrite)
        if manifest is not None:
            _check_remote_inputs(url, manifest, files)
            logger.info("%s is already prepared with these settings", url)
            return _result(url, manifest, config.workers, time.perf_counter() - started, resumed=-1)
    resumed = -1
    manifest = out.finished(run_fingerprint, files, overwrite=overwrite)
    if manifest is None:
        stages = _Stages(started)
        run = _Run(config, progress, out, tokenizer, identity, chat, settings, run_fingerprint, overwrite, stages)
        manifest, resumed = _prepare_into(run, files)
    else:
        logger.info("%s is already prepared with these settings", out.path)
    if url is not None:
        logger.info("uploading %s to %s", out.path, url)
        upload_output(out.path, url, run_fingerprint, replace=overwrite)
        shutil.rmtree(out.path, ignore_errors=True)
    result = _result(url or out.path, manifest, config.workers, time.perf_counter() - started, resumed)
    if resumed >= 0:
        logger.info("prepared %s", result.summary().replace("\n", "; "))
    return result


def _check_remote_inputs(url: str, manifest: dict[str, Any], files: list[InputFile]) -> None:
    """Refuse a finished object-store output whose recorded inputs changed since (naming the input)."""
    recorded = manifest.get("inputs")
    if not isinstance(recorded, list):
        return  # written before inputs were recorded
    try:
        changed = changed_input([msgspec.convert(entry, InputIdentity) for entry in recorded], files)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{url}/tokenport.json: inputs: {exc}; delete the dataset at {url} and run again") from None
    if changed is not None:
        raise ConfigError(
            f"{url}: holds a finished prepare run, but {changed}; pass overwrite=True (--force) to prepare it again "
            "from scratch, or choose another URL"
        )


@dataclass(frozen=True)
class _Run:
    """What `_prepare_into` needs of one prepare call."""

    config: PrepareConfig
    progress: bool
    out: OutputDir
    tokenizer: Tokenizer
    identity: dict[str, Any]
    chat: ChatJob | None
    settings: dict[str, Any]
    fingerprint: str
    overwrite: bool
    stages: _Stages


class _Stages:
    """The wall time of a run, by stage: each ``mark(name)`` bills the time since the last mark to
    ``name``, so the stages add up to the run's time (recorded in the manifest as ``stages``, ms)."""

    def __init__(self, started: float) -> None:
        self.started = self.last = started
        self.seconds: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now

    def milliseconds(self) -> dict[str, int]:
        """Each stage's time, and the ``wall`` time since the run started (to the last mark)."""
        return {
            **{name: round(s * 1000) for name, s in self.seconds.items()},
            "wall": round((self.last - self.started) * 1000),
        }


def _prepare_into(run: _Run, files: list[InputFile]) -> tuple[dict[str, Any], int]:
    """The work of `prepare` in the local directory `run.out` (the output, or the staging directory of
    an object-store output, which Ray tasks then do not share): its manifest, and the units an
    earlier run finished. On an error or an interrupt, nothing of the workers' is left half-written:
    the run's `.work/` is deleted if it holds nothing to resume, else its temporaries are."""
    config, out = run.config, run.out
    if run.chat is not None:
        _check_records(files)
    engine = _engine(config, run.tokenizer, files, run.chat is not None)
    with contextlib.ExitStack() as stack:
        shared = not is_remote(config.output)
        executor: Executor = stack.enter_context(_executor(config, engine, shared))  # workers start while we plan
        stack.enter_context(out.claim(run.settings, run.fingerprint, files, overwrite=run.overwrite))
        try:
            return _work(run, files, executor)
        except BaseException as exc:
            executor.close()
            if isinstance(exc, Exception) and not out.produced():
                out.abandon()
            else:
                out.remove_temporaries()
            raise


def _work(run: _Run, files: list[InputFile], executor: Executor) -> tuple[dict[str, Any], int]:
    """Plan, run and assemble the units of a claimed output directory; publish its manifest."""
    config, out, chat, stages = run.config, run.out, run.chat, run.stages
    stages.mark("start")  # the tokenizer loaded, the workers starting, the output claimed
    units = plan_units(files, config.unit_bytes, os.path.join(out.work, "inflated"), run.progress)
    out.remove_stale_units(unit.name for unit in units)
    stages.mark("plan")
    records, resumed, digests = _passes(run, files, units, executor)
    totals = UnitStats.total(r.stats for r in records)
    warn_of_steps_that_removed_everything(totals)
    if totals.documents == 0 and not config.allow_empty:
        out.abandon()
        raise InputDataError(nothing_left(config.output, totals, len(files)))
    parts = name_parts(out.path, plan_parts(units, records, config.shard_by, config.shard_tokens), run.fingerprint)
    recipe = fingerprint({key: value for key, value in run.settings.items() if key != "inputs"})
    no_eod = chat is None and not config.append_eod
    described = _assemble(parts, run.tokenizer, [f.path for f in files], recipe, chat, append_eod=not no_eod)
    stages.mark("assemble")
    changed = changed_while_read(files)
    if changed is not None:
        raise InputDataError(
            f"{changed}, so its output could mix old and new bytes; nothing was published. Prepare it again "
            "with overwrite=True (--force) once the inputs are final"
        )
    manifest: dict[str, Any] = {
        "format": DATASET_FORMAT,
        "tokenport_version": _version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": run.fingerprint,
        "config": config.to_dict(),
        "tokenizer": run.identity,
        "parts": described,
        "totals": {
            "documents": totals.documents,
            "tokens": totals.tokens,
            "bytes_in": totals.bytes_in,
            "input_files": len(files),
            "units": len(units),
        },
        "skipped": dict(sorted(totals.skipped.items())),
        "steps": {label: dict(sorted(counts.items())) for label, counts in totals.steps.items()},
        "step_costs": {label: dict(sorted(counts.items())) for label, counts in totals.step_costs.items()},
        "inputs": to_builtins(identify(files, digests)),
    }
    if chat is not None:
        manifest["chat"] = {**chat.describe(), "template_origin": chat.template.origin}
    if config.keep_rejected:
        manifest["rejected"] = _move_rejected(out, units)
    if chat is None:
        _provenance(config, out, units, records, parts, [f.path for f in files])
    stages.mark("finish")
    manifest["unit_stages"] = dict(sorted(totals.stages.items()))
    manifest["stages"] = stages.milliseconds()
    out.finish(manifest, len(parts))
    return manifest, resumed


def _passes(
    run: _Run, files: list[InputFile], units: list[Unit], executor: Executor
) -> tuple[list[UnitRecord], int, dict[str, str]]:
    """Every pass over the units (the dedup steps' keys passes, then the one writing their stores) and
    the digests of the inputs: the units' records, how many were finished earlier, the digests."""
    config, stages = run.config, run.stages
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="digest") as digesting:
        try:  # the planner's digests are read on a thread while the units run (hashing frees the GIL)
            pending = digesting.submit(planner_digests, files, units, stop.is_set)
            for group in adjacent(run_wide_positions(config.steps)):
                _dedup_pass(config, executor, run.out.work, units, group, run.progress, stages, run.chat)
            records, resumed = _run(config, executor, run.out.work, units, run.progress, run.chat)
            stages.mark("units")
            executor.close()
            stages.mark("stop workers")
            digests = pending.result()
            stages.mark("input digests")
        finally:
            stop.set()  # on an error or an interrupt, the digests stop within a block
    for record in records:
        digests.update(record.digests)
    return records, resumed, digests


def _engine(config: PrepareConfig, tokenizer: Tokenizer, files: list[InputFile], chat: bool) -> Tokenizer:
    """The tokenizer that encodes for `tokenizer` (gigatoken for an ``hf:`` one when it gives the same
    ids on a sample of the input, see ``choose_engine``); the output's identity stays `tokenizer`'s."""
    if config.tokenizer_engine == "hf" or type(tokenizer) is not HFTokenizer:
        return choose_engine(tokenizer, config.tokenizer_engine, [])
    return choose_engine(tokenizer, config.tokenizer_engine, sample_texts(files, None if chat else config.text_key))


def _chat_job(config: PrepareConfig, tokenizer: Tokenizer) -> ChatJob | None:
    """How a chat run renders and masks its conversations (None for text): the template loaded once
    here, so a bad one fails before any work."""
    if config.format != "chat":
        return None
    template = load_chat_template(config.chat_template, tokenizer)
    return ChatJob(template, config.chat_format, config.chat_policy, config.reasoning, config.completion_only_loss)


def _check_records(files: list[InputFile]) -> None:
    """Refuse text-file inputs in a chat run (a whole file is no conversation record) before any work."""
    for file in files:
        if file.format == "text":
            raise ConfigError(
                f"inputs: {file.path} is read as a text file (one document), which holds no conversation "
                "records; give jsonl, parquet or HF dataset inputs with format='chat' (--format chat)"
            )


def _executor(config: PrepareConfig, tokenizer: Tokenizer, shared: bool) -> Executor:
    """The executor ``config.executor`` names: local processes, or a Ray cluster (whose nodes share
    the output directory only if `shared`)."""
    if config.executor == "ray":
        return RayExecutor(tokenizer, config.ray_address, shared=shared, resources=config.ray_resources)
    return LocalExecutor(tokenizer, config.workers)


def _run(
    config: PrepareConfig, executor: Executor, work: str, units: list[Unit], progress: bool, chat: ChatJob | None
) -> tuple[list[UnitRecord], int]:
    """Records of every unit, in unit order (finished earlier, or run now on the workers), and
    how many were finished earlier."""
    records: dict[str, UnitRecord] = {}
    for unit in units:
        record = finished_unit(work, unit)
        if record is not None and (chat is not None or os.path.exists(pass_path(work, None, unit.name))):
            records[unit.name] = record
    resumed = len(records)
    todo = [unit for unit in units if unit.name not in records]
    logger.info("%d units to run (%d finished earlier) on %d workers", len(todo), len(records), config.workers)
    job = _unit_job(config, work, keep_rejected=config.keep_rejected, chat=chat)
    bar = _Bar(progress, "prepare", units, records)

    def on_done(unit: Unit, record: UnitRecord) -> None:
        records[unit.name] = record
        for piece in unit.slices:
            if piece.inflated:
                discard_chunk(piece.inflated)
        bar.finish(unit, documents=sum(r.stats.documents for r in records.values()))

    with bar:
        executor.run(job, todo, on_done, bar.on_progress)
    return [records[unit.name] for unit in units], resumed


def _provenance(
    config: PrepareConfig,
    out: OutputDir,
    units: list[Unit],
    records: list[UnitRecord],
    parts: list[Part],
    inputs: list[str],
) -> None:
    """Join the units' provenance records into ``OUTPUT/provenance.npz`` (see ``provenance``)."""
    work = out.work
    labels = [f"{k}:{spec['step']}" for k, spec in enumerate(config.steps)]
    groups = adjacent(run_wide_positions(config.steps))
    signing = [p for group in groups for p in group[:1]]
    passes = [[*(pass_path(work, p, u.name) for p in signing), pass_path(work, None, u.name)] for u in units]
    dedups = [
        [
            (
                pass_path(work, group[0], u.name),
                [(drops_path(work, q, u.name), _if_there(originals_path(work, q, u.name))) for q in group],
            )
            for u in units
        ]
        for group in groups
    ]
    unit_of = {record.prefix: k for k, record in enumerate(records)}
    planned = [(os.path.basename(p.prefix), [(unit_of[s.prefix], s.first, s.count) for s in p.segments]) for p in parts]
    path = os.path.join(out.path, PROVENANCE_FILE)
    assemble_provenance(path, inputs, labels, passes, dedups, planned, config.id_field)


def _if_there(path: str) -> str:
    return path if os.path.exists(path) else ""


def _move_rejected(out: OutputDir, units: list[Unit]) -> list[str]:
    """Move the units' rejected-document files from the work directory to OUTPUT/rejected/."""
    target = os.path.join(out.path, "rejected")
    os.makedirs(target, exist_ok=True)
    names = []
    for unit in units:
        source = rejected_path(out.work, unit)
        if os.path.exists(source):
            replace_atomically(source, os.path.join(target, f"{unit.name}.jsonl"))
        if os.path.exists(os.path.join(target, f"{unit.name}.jsonl")):
            names.append(f"rejected/{unit.name}.jsonl")
    return names


def _dedup_pass(
    config: PrepareConfig,
    executor: Executor,
    work: str,
    units: list[Unit],
    group: list[int],
    progress: bool,
    stages: _Stages,
    chat: ChatJob | None = None,
) -> None:
    """Passes 1 and 2 of the neighbouring run-wide steps at ``group`` (see ``runwide``): keys of every
    unit (and the documents reaching the first step, for the next pass to start from), then each
    step's decisions in turn; all kept in ``work`` so a rerun skips what is done."""
    position = group[0]

    def signed(unit: Unit) -> bool:  # with its provenance record, in a text run
        done = signed_unit(work, position, unit)
        return done and (chat is not None or os.path.exists(pass_path(work, position, unit.name)))

    if all(signed(u) and all(os.path.exists(drops_path(work, q, u.name)) for q in group) for u in units):
        return
    job = _unit_job(config, work, sign_position=position, keep_rejected=config.keep_rejected, chat=chat)
    todo = [unit for unit in units if not signed(unit)]
    logger.info("dedup step %d: keys of %d units (%d made earlier)", position, len(todo), len(units) - len(todo))
    with _Bar(progress, f"dedup step {position}: keys", units, [u.name for u in units if u not in todo]) as bar:
        executor.run(job, todo, lambda unit, record: bar.finish(unit), bar.on_progress)
    stages.mark(f"{position}:{config.steps[position]['step']} keys")
    kept = [np.ones(len(np.load(keys_path(work, position, u.name), mmap_mode="r")), dtype=bool) for u in units]
    for q in group:
        if q != position:  # signed with the first: the keys of the documents the steps before it kept
            for unit, mask in zip(units, kept):
                save_atomically(keys_path(work, q, unit.name), np.load(prekeys_path(work, q, unit.name))[mask])
        key_files = [keys_path(work, q, unit.name) for unit in units]
        step = run_wide_step(config.steps, q)
        drops = step.decide(Signatures(key_files, executor.map_bands))
        for k, (unit, drop, mask) in enumerate(zip(units, drops, kept)):
            if step.originals is not None:  # before the drops, which mark the decision made
                save_atomically(originals_path(work, q, unit.name), step.originals[k])
            save_atomically(drops_path(work, q, unit.name), drop)
            mask[mask] = ~drop
        stages.mark(f"{q}:{config.steps[q]['step']} decide")


def _assemble(
    parts: list[Part],
    tokenizer: Tokenizer,
    inputs: list[str],
    recipe: str,
    chat: ChatJob | None = None,
    append_eod: bool = True,
) -> list[dict[str, Any]]:
    """Write every part not finished earlier (chat stores for a chat run); describe each for the dataset manifest."""
    described = []
    for part in parts:
        if finished_part(part):
            with IndexedDataset(part.prefix) as ds:
                documents, tokens = ds.num_documents, ds.num_tokens
        else:
            described_chat = None if chat is None else chat.describe()
            documents, tokens = write_part(part, tokenizer, inputs, recipe, described_chat, append_eod=append_eod)
        sources = list(dict.fromkeys(inputs[s.file] for s in part.segments))
        described.append(
            {"name": os.path.basename(part.prefix), "documents": documents, "tokens": tokens, "inputs": sources}
        )
    return described


class _Bar:
    """A tqdm bar over the input bytes of `units` (those in `done` already counted) when asked for:
    it moves as running units report progress, and to each unit's full size when it finishes."""

    def __init__(self, enabled: bool, label: str, units: list[Unit], done: Iterable[str]) -> None:
        from tqdm.auto import tqdm

        finished = set(done)
        self.shown: dict[str, int] = {}  # of each running unit's size, how much the bar shows done
        self.tqdm = tqdm(
            total=sum(u.size for u in units),
            initial=sum(u.size for u in units if u.name in finished),
            unit="B",
            unit_scale=True,
            desc=label,
            disable=not enabled,
        )

    def on_progress(self, unit: Unit, more: int) -> None:
        self.shown[unit.name] = self.shown.get(unit.name, 0) + more
        self.tqdm.update(more)

    def finish(self, unit: Unit, **postfix: int) -> None:
        self.tqdm.update(unit.size - self.shown.pop(unit.name, 0))
        if postfix:
            self.tqdm.set_postfix(postfix, refresh=False)

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.tqdm.close()


def _result(output: str, manifest: dict[str, Any], workers: int, seconds: float, resumed: int) -> PrepareResult:
    """The result a manifest describes; `resumed` units were done before this call (-1: all)."""
    totals = manifest["totals"]
    return PrepareResult(
        output=output,
        parts=tuple(os.path.join(output, part["name"]) for part in manifest["parts"]),
        documents=totals["documents"],
        tokens=totals["tokens"],
        bytes_in=totals["bytes_in"],
        seconds=seconds,
        skipped=dict(manifest["skipped"]),
        workers=workers,
        units=totals["units"],
        resumed_units=totals["units"] if resumed < 0 else resumed,
        steps={label: dict(counts) for label, counts in manifest.get("steps", {}).items()},
    )


def _version() -> str:
    from ..._version import __version__

    return __version__


def _unit_job(config: PrepareConfig, work: str, **options: Any) -> UnitJob:
    """What every unit of a pass gets from the config; ``options`` set the pass's own fields."""
    return UnitJob(
        work_dir=work,
        text_key=config.text_key,
        append_eod=config.append_eod,
        max_chars_per_piece=config.max_chars_per_piece,
        batch_size=config.batch_size,
        on_error=config.on_error,
        steps=config.steps,
        step_kinds=registered_steps(config.steps),
        provenance=options.get("chat") is None,
        id_field=config.id_field,
        **options,
    )

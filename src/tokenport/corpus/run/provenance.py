"""Cleaning provenance: why prepare dropped or changed each input document, and where it kept the rest.

Each pass over a unit (a dedup step's keys pass, or the pass writing its store) records, by the
unit's input ordinal, what its steps did: the input pass each document's input file and line (the
line of a jsonl file from 1, the row of a parquet file from 0, 1 for a text file) and a 64-bit
hash of its text; every pass the drops (step, reason), the changes (step, the kinds replaced) and
the documents it passed on. That is a ``.prov.npz`` beside the pass's other output, written before
the file that marks the pass done. At the end ``assemble`` joins them, with the dedup decisions'
originals (which kept document each duplicate repeats), into ``OUTPUT/provenance.npz``: a header
(``ProvenanceHeader``: input files, step labels, reasons, parts) and one row per input document,
with no text, and each input document's identifier when prepare kept them (``identifiers``: the header's
``id_field``, and a string column). ``read`` checks the header and every array (lengths, ranges) before
``lookup`` uses them.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ... import _schema
from ..._schema import Count, Text
from ...errors import ConfigError, CorruptStoreError
from ..inputs.documents import Document
from ..steps.base import Step
from ..steps.dedup import INDEXED
from . import identifiers
from .state import replace_atomically, temporary_path

__all__ = ["FORMAT", "PROVENANCE_FILE", "Provenance", "ProvenanceHeader", "Recorder", "pass_path", "read"]

logger = logging.getLogger(__name__)

FORMAT = "tokenport.provenance/1"
PROVENANCE_FILE = "provenance.npz"
KEPT = -1
"""``step`` of a document that was kept (stored)."""
TOKENIZE = "tokenize"
"""The last step label: the tokenizer failed on the document (reported as encode_failed)."""

_COLUMNS = {  # name: dtype of the output file's arrays
    "input": np.int32,
    "line": np.int64,
    "text_hash": np.uint64,
    "step": np.int32,
    "reason": np.int32,
    "part": np.int32,
    "document": np.int64,
    "duplicate": np.int64,
    "change_row": np.int64,
    "change_step": np.int32,
    "change_reason": np.int32,
}


def text_hash(text: str) -> int:
    """The 64-bit hash of a document's text kept for ``--text`` lookups."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def pass_path(work_dir: str, position: int | None, unit_name: str) -> str:
    """A unit's record of the keys pass at ``position`` (None: the pass writing its store)."""
    directory = work_dir if position is None else os.path.join(work_dir, f"dedup-{position}")
    return os.path.join(directory, f"{unit_name}.prov.npz")


class Recorder:
    """One pass's record, by the unit's input ordinal (``ordinal()`` names the current document)."""

    def __init__(self, ordinal: Callable[[], int], reads_input: bool) -> None:
        self.ordinal, self.reads_input = ordinal, reads_input
        self.file: list[int] = []
        self.line: list[int] = []
        self.hashes: list[int] = []
        self.events: list[tuple[int, int, int, int]] = []  # (ordinal, step position, 0 drop / 1 change, reason)
        self.reasons: dict[str, int] = {}
        self.passed: list[int] = []  # ordinals of the documents the pass's steps passed on, in order
        self.ids: list[bytes] = []  # each input document's identifier (b"": none)
        self.ids_refused = 0  # input documents whose identifier field held a value of another type

    def read(self, file: int, text_format: str, document: Document) -> None:
        """Note an input document (the input pass only): its file, line and text hash."""
        head, _, tail = document.id.rpartition(":")
        self.file.append(file)
        self.line.append(int(tail) if text_format != "text" and head and tail.isdigit() else 1)
        self.hashes.append(text_hash(document.text))
        identifier = identifiers.encode(document.identifier)
        if identifier is None:
            self.ids_refused += 1
        self.ids.append(identifier or b"")

    def watch(self, label: str, step: Step) -> None:
        """Record the drops and changes of ``step`` (labelled ``N:kind``), keeping its other sink."""
        position, other = int(label.split(":", 1)[0]), step.sink
        seen = dict(step.replaced)

        def dropped(document: Document, reason: str) -> None:
            self.events.append((self.ordinal(), position, 0, self._code(reason)))
            if other is not None:
                other(document, reason)

        def changed(before: Document, after: Document) -> None:
            if before.text == after.text:
                return
            kinds = sorted(kind for kind, n in step.replaced.items() if n != seen.get(kind, 0))
            seen.update(step.replaced)
            self.events.append((self.ordinal(), position, 1, self._code(",".join(kinds) or "changed")))

        step.sink, step.on_change = dropped, changed

    def _code(self, reason: str) -> int:
        return self.reasons.setdefault(reason, len(self.reasons))

    def save(self, path: str, failed: Sequence[int] = ()) -> None:
        """Write the record atomically (``failed``: positions in ``passed`` the tokenizer failed on)."""
        events = np.array(self.events, dtype=np.int64).reshape(-1, 4)
        id_bytes, id_offsets = identifiers.pack(self.ids)
        arrays: dict[str, np.ndarray] = {
            "input": np.array(self.file, dtype=np.int32),
            "line": np.array(self.line, dtype=np.int64),
            "text_hash": np.array(self.hashes, dtype=np.uint64),
            "events": events,
            "reasons": np.array(list(self.reasons), dtype=str),
            "passed": np.array(self.passed, dtype=np.int64),
            "failed": np.array(failed, dtype=np.int64),
            "reads_input": np.array(self.reads_input),
            "id_bytes": id_bytes,
            "id_offsets": id_offsets,
            "ids_refused": np.array(self.ids_refused, dtype=np.int64),
        }
        _save(path, arrays)


def _save(path: str, arrays: dict[str, np.ndarray]) -> None:
    """An npz file (one ``.npy`` per array) with fixed timestamps, so the same record gives the same
    bytes; written to a temporary name, then renamed into place."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = temporary_path(path)
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.save(buffer, array, allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())
    replace_atomically(temporary, path)


_PASS_ARRAYS = ("input", "line", "text_hash", "events", "reasons", "passed", "failed", "reads_input")
_ID_ARRAYS = ("id_bytes", "id_offsets")
"""The identifier column of ``provenance.npz`` (see ``identifiers``), there when the header names an id_field."""


def _load(path: str, remedy: str, names: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Every array of an npz file (holding at least ``names``), read whole; CorruptStoreError naming
    ``path`` if it is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
            arrays = {name: loaded[name] for name in loaded.files}
        missing = sorted(set(names) - set(arrays))
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        return arrays
    except FileNotFoundError:
        raise CorruptStoreError(f"{path}: missing; {remedy}") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CorruptStoreError(f"{path}: not a provenance record ({exc}); {remedy}") from None


class ProvenanceHeader(_schema.Document, frozen=True, omit_defaults=True):
    """The header of ``OUTPUT/provenance.npz``: what its codes mean and how many rows it has (the
    identifier fields are written only when identifiers are kept, so other headers read as before)."""

    format: Text
    inputs: list[Text]
    steps: list[Text]  # step labels ("N:kind"), then "tokenize"
    reasons: list[Text]
    parts: list[Text]
    documents: Count
    changes: Count
    id_field: Text | None = None  # the input field identifiers were kept from (None: none kept)
    identified: Count = 0  # input documents with an identifier
    ids_refused: Count = 0  # input documents whose id_field held a value of another type (no identifier)

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise ValueError(f"format {self.format!r} is not {FORMAT!r}")
        if not self.steps or self.steps[-1] != TOKENIZE:
            raise ValueError(f"steps must end with {TOKENIZE!r}")
        if self.id_field is None and (self.identified or self.ids_refused):
            raise ValueError("identified and ids_refused count identifiers, but no id_field is named")
        if self.identified + self.ids_refused > self.documents:
            raise ValueError(f"identified + ids_refused exceed the {self.documents} documents")


@dataclass(frozen=True)
class Provenance:
    """A checked ``provenance.npz``: its header and its columns (see ``_COLUMNS``)."""

    header: ProvenanceHeader
    columns: dict[str, np.ndarray]

    @cached_property
    def identifiers(self) -> identifiers.IdentifierIndex:
        """The documents by identifier, indexed on first use (``id_bytes``/``id_offsets`` checked by ``read``)."""
        return identifiers.IdentifierIndex.build(self.columns["id_bytes"], self.columns["id_offsets"])


def write(path: str, header: ProvenanceHeader, columns: dict[str, np.ndarray]) -> None:
    """Publish ``OUTPUT/provenance.npz`` atomically (a temporary name, then rename)."""
    arrays = {name: np.asarray(columns[name], dtype=dtype) for name, dtype in _COLUMNS.items()}
    if header.id_field is not None:
        arrays.update({name: columns[name] for name in _ID_ARRAYS})
    _save(path, {"header": np.frombuffer(_schema.encode(header), dtype=np.uint8), **arrays})


def read(path: str) -> Provenance:
    """``provenance.npz`` with its header decoded and every column checked; CorruptStoreError if not."""
    remedy = "prepare the output again (--force) to rebuild its provenance"
    arrays = _load(path, remedy)
    raw = arrays.pop("header", None)
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise CorruptStoreError(f"{path}: no header; {remedy}")
    header = _schema.decode(raw.tobytes(), ProvenanceHeader, where=f"{path}: header", remedy=remedy)
    expected = {*_COLUMNS, *(_ID_ARRAYS if header.id_field is not None else ())}
    if set(arrays) != expected:
        raise CorruptStoreError(f"{path}: holds arrays {sorted(arrays)}, expected {sorted(expected)}; {remedy}")
    for name, dtype in _COLUMNS.items():
        rows = header.changes if name.startswith("change_") else header.documents
        column = arrays[name]
        if column.dtype != dtype or column.shape != (rows,):
            raise CorruptStoreError(
                f"{path}: {name} is {column.dtype} of shape {column.shape}, expected "
                f"{np.dtype(dtype)} of shape ({rows},); {remedy}"
            )
    _check_ranges(path, header, arrays, remedy)
    if header.id_field is not None:
        _check_identifiers(path, header, arrays, remedy)
    return Provenance(header, arrays)


def _check_identifiers(path: str, header: ProvenanceHeader, c: dict[str, np.ndarray], remedy: str) -> None:
    """The identifier column cuts its bytes into one identifier per document, as many as the header counts."""
    problem = identifiers.check_column(c["id_bytes"], c["id_offsets"], header.documents)
    if problem is None and int(np.count_nonzero(np.diff(c["id_offsets"]))) != header.identified:
        problem = f"the header counts {header.identified} identified documents, id_offsets another number"
    if problem is None:
        try:
            c["id_bytes"].tobytes().decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            problem = f"id_bytes is not UTF-8 text (byte {exc.start})"
    if problem is not None:
        raise CorruptStoreError(f"{path}: {problem}; {remedy}")


def _check_ranges(path: str, header: ProvenanceHeader, c: dict[str, np.ndarray], remedy: str) -> None:
    n, kept = header.documents, c["step"] == KEPT
    limits = {
        "input": (0, len(header.inputs)),
        "line": (0, 2**63 - 1),
        "step": (KEPT, len(header.steps)),
        "reason": (-1, len(header.reasons)),
        "part": (-1, len(header.parts)),
        "document": (-1, 2**63 - 1),
        "duplicate": (INDEXED, n),
        "change_row": (0, n),
        "change_step": (0, len(header.steps)),
        "change_reason": (0, len(header.reasons)),
    }
    for name, (low, high) in limits.items():
        column = c[name]
        if len(column) and (int(column.min()) < low or int(column.max()) >= high):
            raise CorruptStoreError(f"{path}: {name} has values outside [{low}, {high}); {remedy}")
    if not np.array_equal(kept, c["part"] >= 0) or not np.array_equal(kept, c["document"] >= 0):
        raise CorruptStoreError(f"{path}: kept documents and their parts disagree; {remedy}")
    if np.any(kept & (c["reason"] >= 0)) or np.any(~kept & (c["reason"] < 0)):
        raise CorruptStoreError(f"{path}: reasons and outcomes disagree; {remedy}")
    if np.any(np.diff(c["change_row"]) < 0):  # in row order, so a document's changes are found by bisection
        raise CorruptStoreError(f"{path}: change_row is not in row order; {remedy}")


def assemble(
    path: str,
    inputs: Sequence[str],
    step_labels: Sequence[str],
    passes: Sequence[Sequence[str]],
    dedups: Sequence[Sequence[tuple[str, Sequence[tuple[str, str]]]]],
    parts: Sequence[tuple[str, Sequence[tuple[int, int, int]]]],
    id_field: str | None = None,
) -> ProvenanceHeader:
    """Join the units' pass records into ``path``; returns its header.

    ``passes``: per unit, its pass records in pass order (the input pass first, the store's last).
    ``dedups``: per group of neighbouring run-wide steps, per unit, the record of the keys pass
    signing the group and per step of it (drop mask file, originals file or "").
    ``parts``: per part, its name and segments (unit, first unit document, count).
    ``id_field``: the field the input passes read identifiers from (None: keep none).
    """
    reasons: dict[str, int] = {}
    units = [_unit(files, reasons) for files in passes]
    offsets = np.cumsum([0, *(len(u.file) for u in units)])
    n = int(offsets[-1])
    step = np.concatenate([u.step for u in units]) if units else np.zeros(0, np.int32)
    reason = np.concatenate([u.reason for u in units]) if units else np.zeros(0, np.int32)
    part, document, duplicate = np.full(n, -1, np.int32), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    tokenize_code = len(step_labels)
    for u, unit in enumerate(units):
        if len(unit.failed):
            failed = offsets[u] + unit.failed
            step[failed], reason[failed] = tokenize_code, reasons.setdefault("encode_failed", len(reasons))
    _place_kept(parts, units, passes, offsets, part, document)
    for group in dedups:
        _duplicates(group, offsets, duplicate)
    changes = [(offsets[u] + unit.changes) for u, unit in enumerate(units)]
    identified = _joined_identifiers(units)
    header = ProvenanceHeader(
        format=FORMAT,
        inputs=list(inputs),
        steps=[*step_labels, TOKENIZE],
        reasons=list(reasons),
        parts=[name for name, _ in parts],
        documents=n,
        changes=sum(len(c) for c in changes),
        **_identified(path, id_field, identified["id_offsets"], sum(u.ids_refused for u in units)),
    )
    columns = {
        "input": _joined([u.file for u in units]),
        "line": _joined([u.line for u in units]),
        "text_hash": _joined([u.hashes for u in units]),
        "step": step,
        "reason": reason,
        "part": part,
        "document": document,
        "duplicate": duplicate,
        "change_row": _joined(changes),
        "change_step": _joined([u.change_step for u in units]),
        "change_reason": _joined([u.change_reason for u in units]),
        **identified,
    }
    write(path, header, columns)
    return header


def _identified(path: str, id_field: str | None, id_offsets: np.ndarray, refused: int) -> dict[str, Any]:
    """The header's identifier fields, warning of documents whose identifier field held another type."""
    if id_field is None:
        return {}
    if refused:
        logger.warning(
            "%d input document(s) hold a %r that is no string or integer (a list, an object, a float, a bool): "
            "they have no identifier in %s",
            refused,
            id_field,
            path,
        )
    return {"id_field": id_field, "identified": int(np.count_nonzero(np.diff(id_offsets))), "ids_refused": refused}


def _joined_identifiers(units: list[Any]) -> dict[str, np.ndarray]:
    """The units' identifier columns as one: ``id_bytes`` and ``id_offsets``."""
    data = np.concatenate([u.id_bytes for u in units]) if units else np.zeros(0, np.uint8)
    sizes = np.cumsum([0, *(len(u.id_bytes) for u in units)])
    tails = [u.id_offsets[1:] + sizes[k] for k, u in enumerate(units)]
    return {"id_bytes": data, "id_offsets": np.concatenate([np.zeros(1, np.int64), *tails]).astype(np.int64)}


def _place_kept(
    parts: Sequence[tuple[str, Sequence[tuple[int, int, int]]]],
    units: list[Any],
    passes: Sequence[Sequence[str]],
    offsets: np.ndarray,
    part: np.ndarray,
    document: np.ndarray,
) -> None:
    """Fill each kept row's part and document id from the parts' segments (unit, first document, count)."""
    for k, (_, segments) in enumerate(parts):
        at = 0
        for u, first, count in segments:
            if first + count > len(units[u].kept):
                raise CorruptStoreError(
                    f"{passes[u][-1]}: records {len(units[u].kept)} stored documents, its store holds more; "
                    "delete OUTPUT/.work to prepare the output again"
                )
            rows = offsets[u] + units[u].kept[first : first + count]
            part[rows], document[rows] = k, np.arange(at, at + count)
            at += count


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class _Unit:
    file: np.ndarray
    line: np.ndarray
    hashes: np.ndarray
    step: np.ndarray
    reason: np.ndarray
    kept: np.ndarray  # ordinal of each document of the unit's store
    failed: np.ndarray  # ordinals the tokenizer failed on
    changes: np.ndarray
    change_step: np.ndarray
    change_reason: np.ndarray
    id_bytes: np.ndarray
    id_offsets: np.ndarray
    ids_refused: int


def _unit(files: Sequence[str], reasons: dict[str, int]) -> _Unit:
    """One unit's pass records joined (reason codes made run-wide in ``reasons``)."""
    remedy = "delete OUTPUT/.work to prepare the output again"
    records = [_load(path, remedy, _PASS_ARRAYS) for path in files]
    first = records[0]
    n = len(first["input"])
    if not (first["line"].shape == first["text_hash"].shape == (n,)) or not bool(first["reads_input"]):
        raise CorruptStoreError(f"{files[0]}: not the record of a pass reading the input; {remedy}")
    refused = first.get("ids_refused")
    problem = identifiers.check_column(first.get("id_bytes", np.zeros(0)), first.get("id_offsets", np.zeros(0)), n)
    if problem is not None or refused is None or refused.shape != () or not 0 <= int(refused) <= n:
        raise CorruptStoreError(f"{files[0]}: its identifiers do not fit ({problem or 'ids_refused'}); {remedy}")
    step, reason = np.full(n, KEPT, dtype=np.int32), np.full(n, -1, dtype=np.int32)
    changes: list[np.ndarray] = []
    for path, record in zip(files, records):
        codes = np.array([reasons.setdefault(str(r), len(reasons)) for r in record["reasons"]], dtype=np.int64)
        events = np.array(record["events"], dtype=np.int64)
        shaped = events.ndim == 2 and events.shape[1] == 4
        if not (shaped and _within(events[:, 0], n) and _within(events[:, 3], len(codes))):
            raise CorruptStoreError(f"{path}: events do not fit the unit's {n} documents; {remedy}")
        events[:, 3] = codes[events[:, 3]]
        drops = events[events[:, 2] == 0]
        step[drops[:, 0]], reason[drops[:, 0]] = drops[:, 1], drops[:, 3]
        changes.append(events[events[:, 2] == 1])
    passed, failed = records[-1]["passed"], records[-1]["failed"]
    if not _within(passed, n) or not _within(failed, len(passed)):
        raise CorruptStoreError(f"{files[-1]}: passed documents do not fit the unit's {n}; {remedy}")
    change = np.concatenate(changes)
    change = change[np.argsort(change[:, 0], kind="stable")]
    return _Unit(
        file=first["input"],
        line=first["line"],
        hashes=first["text_hash"],
        step=step,
        reason=reason,
        kept=np.delete(passed, failed),
        failed=passed[failed],
        changes=change[:, 0],
        change_step=change[:, 1].astype(np.int32),
        change_reason=change[:, 3].astype(np.int32),
        id_bytes=first["id_bytes"],
        id_offsets=first["id_offsets"],
        ids_refused=int(refused),
    )


def _within(values: np.ndarray, limit: int) -> bool:
    return values.ndim == 1 and (len(values) == 0 or (int(values.min()) >= 0 and int(values.max()) < limit))


def _duplicates(
    group: Sequence[tuple[str, Sequence[tuple[str, str]]]], offsets: np.ndarray, duplicate: np.ndarray
) -> None:
    """Fill ``duplicate`` (rows of the kept originals) for the drops of one group of neighbouring
    run-wide steps: per unit, its keys pass record and per step (drop mask file, originals file or "")."""
    remedy = "delete OUTPUT/.work to prepare the output again"
    reach = []  # per unit, the rows of the documents reaching the group's first step
    for u, (signed, _) in enumerate(group):
        passed = _load(signed, remedy, _PASS_ARRAYS)["passed"]
        if not _within(passed, int(offsets[u + 1] - offsets[u])):
            raise CorruptStoreError(f"{signed}: passed documents do not fit the unit; {remedy}")
        reach.append(offsets[u] + passed)
    for k in range(len(group[0][1]) if group else 0):  # the group's steps in order
        rows = _joined(reach)
        for u, (_, steps) in enumerate(group):
            drop_file, original_file = steps[k]
            drop = _array(drop_file, remedy)
            original = _array(original_file, remedy) if original_file else None
            if drop.dtype != bool or drop.shape != reach[u].shape:
                raise CorruptStoreError(f"{drop_file}: does not fit its keys pass; {remedy}")
            if original is not None:
                fits = original.dtype.kind == "i" and original.shape == drop.shape
                if not (fits and _within(original[drop] + 2, len(rows) + 2)):
                    raise CorruptStoreError(f"{original_file}: does not fit its keys pass; {remedy}")
                which = original[drop]
                duplicate[reach[u][drop]] = np.where(which >= 0, rows[np.maximum(which, 0)], INDEXED)
            reach[u] = reach[u][~drop]


def _array(path: str, remedy: str) -> np.ndarray:
    """A ``.npy`` file's array; CorruptStoreError naming ``path`` if it is not one."""
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CorruptStoreError(f"{path}: not an array ({exc}); {remedy}") from None


def describe(provenance: Provenance, row: int) -> dict[str, Any]:
    """One input document's story: where it came from, kept (part, document) or dropped (step, reason,
    the kept document it duplicates), and every change made to it."""
    h, c = provenance.header, provenance.columns
    story = _outcome(provenance, row)
    if story["outcome"] == "dropped":
        original = int(c["duplicate"][row])
        if original == INDEXED:
            story["duplicate_of"] = {"index": True}
        elif original >= 0:
            story["duplicate_of"] = _outcome(provenance, original)
    rows = c["change_row"]
    changed = range(int(np.searchsorted(rows, row, "left")), int(np.searchsorted(rows, row, "right")))
    story["changes"] = [
        {"step": h.steps[int(c["change_step"][k])], "replaced": h.reasons[int(c["change_reason"][k])]} for k in changed
    ]
    return story


def _outcome(provenance: Provenance, row: int) -> dict[str, Any]:
    """Where a document came from and what became of it: kept (part, document) or dropped (step, reason)."""
    h, c = provenance.header, provenance.columns
    story: dict[str, Any] = {"input": h.inputs[int(c["input"][row])], "line": int(c["line"][row])}
    if h.id_field is not None and c["id_offsets"][row + 1] > c["id_offsets"][row]:
        story["identifier"] = identifiers.text(c["id_bytes"], c["id_offsets"], row)
    step = int(c["step"][row])
    if step == KEPT:
        story.update(outcome="kept", part=h.parts[int(c["part"][row])], document=int(c["document"][row]))
    else:
        story.update(outcome="dropped", step=h.steps[step], reason=h.reasons[int(c["reason"][row])])
    return story


def lookup_input(provenance: Provenance, output: str, file: str, line: int) -> dict[str, Any]:
    """The story of the document at ``file``:``line``; ConfigError naming FILE:LINE if there is none."""
    inputs = provenance.header.inputs
    index = _input_index(inputs, file)
    c = provenance.columns
    rows = np.flatnonzero((c["input"] == index) & (c["line"] == line)) if index is not None else np.zeros(0, np.int64)
    if len(rows) == 0:
        known = "" if index is not None else f" (not an input of it: {', '.join(inputs[:3])}...)"
        raise ConfigError(
            f"{file}:{line}: no document of {output} comes from this line{known}; give a line (jsonl, from 1) "
            "or row (parquet, from 0) that holds a document"
        )
    return describe(provenance, int(rows[0]))


def lookup_text(provenance: Provenance, output: str, text: str) -> list[dict[str, Any]]:
    """The stories of every input document with exactly ``text``; ConfigError if there is none."""
    rows = np.flatnonzero(provenance.columns["text_hash"] == np.uint64(text_hash(text)))
    if len(rows) == 0:
        raise ConfigError(f"--text: no input document of {output} has exactly this text; check it, or use --input")
    return [describe(provenance, int(row)) for row in rows]


def _input_index(inputs: Sequence[str], file: str) -> int | None:
    """The position of ``file`` among the inputs: by path as given, by absolute path, or by the same file."""
    for k, path in enumerate(inputs):
        if path == file or os.path.abspath(path) == os.path.abspath(file):
            return k
    for k, path in enumerate(inputs):
        if os.path.exists(path) and os.path.exists(file) and os.path.samefile(path, file):
            return k
    return None

"""A few rejected documents per step and reason, read back from a run's ``rejected/*.jsonl`` (written
by ``prepare --keep-rejected``) for the report page; each line is read through its schema."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..._schema import Document, Text, decode
from ...errors import CorruptStoreError

__all__ = ["RejectedRecord", "sample_rejected"]

SCAN_LINES = 100_000
"""Rejected documents read at most when looking for examples (a run may have kept millions)."""


class RejectedRecord(Document, frozen=True):
    """One line of ``rejected/*.jsonl`` (``corpus.steps.rejects.RejectedWriter``)."""

    id: str
    step: Text
    reason: Text
    text: str
    metadata: dict[str, Any]


def sample_rejected(output: str, names: Sequence[str], per_reason: int = 3) -> tuple[RejectedRecord, ...]:
    """Up to ``per_reason`` records per (step, reason) from the files ``names`` (relative to ``output``), in
    file order; CorruptStoreError naming the file and line for a missing file or a line that is not a record."""
    kept: dict[tuple[str, str], list[RejectedRecord]] = {}
    scanned = 0
    for name in names:
        path = os.path.join(output, name)
        try:
            with open(path, "rb") as handle:
                for number, line in enumerate(handle, 1):
                    if scanned >= SCAN_LINES:
                        break
                    scanned += 1
                    record = _record(line, f"{path} line {number}")
                    group = kept.setdefault((record.step, record.reason), [])
                    if len(group) < per_reason:
                        group.append(record)
        except OSError as exc:
            raise CorruptStoreError(f"{path}: cannot read the rejected documents ({exc.strerror}); {_REMEDY}") from None
    return tuple(record for group in kept.values() for record in group)


def _record(line: bytes, where: str) -> RejectedRecord:
    """One line as a record. The writer's ``json.dumps`` writes a metadata NaN (a parquet float column's
    missing value) as ``NaN``: such constants read as null (the page shows no metadata)."""
    try:
        data = json.loads(line.decode("utf-8"), parse_constant=lambda constant: None)
    except UnicodeDecodeError as exc:
        raise CorruptStoreError(f"{where}: not UTF-8 text (byte {exc.start}); {_REMEDY}") from None
    except ValueError as exc:
        raise CorruptStoreError(f"{where}: not a JSON line ({exc}); {_REMEDY}") from None
    return decode(data, RejectedRecord, where=where, remedy=_REMEDY)


_REMEDY = "the run's rejected documents are damaged: run the same prepare again with --keep-rejected --force"

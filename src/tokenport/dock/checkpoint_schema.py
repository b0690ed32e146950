"""The typed description of a dock checkpoint (``dock.json``), as `_schema` documents.

Every format's description reads through `description_of`: a wrong type, a missing or unknown key,
an integer out of int64's range or negative where a count belongs, a string where a list belongs,
or fields that contradict each other (a consumer limit of no consumer, a requeued row past the
partition, two partitions in one file) is one CorruptStoreError naming ``dock.json`` and the field.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

from .._schema import Count, Document, Positive, Text, decode
from ..errors import CorruptStoreError

__all__ = [
    "FORMAT",
    "FORMAT_1",
    "PARTITION_FILE",
    "ColumnEntry",
    "Description",
    "Expired",
    "PartitionEntry",
    "description_bytes",
    "description_of",
]

FORMAT: Final = "tokenport.dock-checkpoint/2"
FORMAT_1 = "tokenport.dock-checkpoint/1"  # before versions and segments
PARTITION_FILE = re.compile(r"partition-\d{5,}\.npz")  # a file of the checkpoint's own folder, never a path

_REMEDY = "the checkpoint is damaged: load an earlier one, or start the dock afresh"


class ColumnEntry(Document, frozen=True, kw_only=True):
    """One column: name, dtype (numpy's string, or "bfloat16", or "object" for Python values), per-row
    (or per-item) shape, ragged and segmented flags."""

    name: Text
    dtype: Text
    shape: list[Positive]
    ragged: bool
    segmented: bool = False


class Expired(Document, frozen=True, kw_only=True):
    """The rows expired as stale so far, by policy."""

    requeued: Count = 0
    dropped: Count = 0


class PartitionEntry(Document, frozen=True, kw_only=True):
    """One partition: its name, rows, arrays file, requeued rows not yet handed back, and the
    segmented columns each appended row writes."""

    name: Text
    rows: Count
    file: Text
    requeue: list[Count] = []
    segment_columns: list[tuple[Count, list[Text]]] = []

    def __post_init__(self) -> None:
        if not PARTITION_FILE.fullmatch(self.file):
            raise ValueError(f"file: {self.file!r} is not a partition file of the checkpoint")
        _unique(self.requeue, "requeued row", "requeue")
        _unique([row for row, _ in self.segment_columns], "segment row", "segment_columns")
        for row in [*self.requeue, *(row for row, _ in self.segment_columns)]:
            if row >= self.rows:
                raise ValueError(f"requeue/segment_columns: row {row} is past the partition's {self.rows} rows")


class Description(Document, frozen=True, kw_only=True):
    """``dock.json``: the dock's schema and policy, consumers, current version, expiry counts, partitions."""

    format: Literal["tokenport.dock-checkpoint/2", "tokenport.dock-checkpoint/1"]
    n_samples_per_prompt: Positive
    closed: bool
    consumers: list[Text]
    columns: list[ColumnEntry]
    partitions: list[PartitionEntry]
    max_age: Positive | None = None
    consumer_limits: dict[str, Count | None] = {}
    version: Count = 0
    max_staleness: Count | None = None
    on_stale: Literal["requeue", "drop"] = "requeue"
    max_inflight_versions: Positive | None = None
    expired: Expired = Expired()

    def __post_init__(self) -> None:
        _unique(self.consumers, "consumer", "consumers")
        _unique([c.name for c in self.columns], "column", "columns")
        _unique([p.name for p in self.partitions], "partition", "partitions")
        _unique([p.file for p in self.partitions], "partition file", "partitions")
        unknown = sorted(set(self.consumer_limits) - set(self.consumers))
        if unknown:
            raise ValueError(f"consumer_limits: limits of {unknown}, which are not among the consumers")
        segmented = {c.name for c in self.columns if c.segmented}
        for partition in self.partitions:
            if partition.rows % self.n_samples_per_prompt:
                raise ValueError(
                    f"partitions: {partition.name!r} has {partition.rows} rows, not a multiple of "
                    f"n_samples_per_prompt={self.n_samples_per_prompt}"
                )
            for _, names in partition.segment_columns:
                if not names or set(names) - segmented or len(set(names)) != len(names):
                    raise ValueError(
                        f"partitions: segment_columns {names} of partition {partition.name!r} are not distinct "
                        "segmented columns"
                    )


def _unique(values: list, what: str, field: str) -> None:
    if len(set(values)) != len(values):
        twice = next(v for i, v in enumerate(values) if v in values[:i])
        raise ValueError(f"{field}: {what} {twice!r} appears twice")


def description_of(data: bytes, path: str) -> Description:
    """``dock.json``'s bytes as a `Description`, or a CorruptStoreError naming ``path`` and the field."""
    return decode(data, Description, where=path, remedy=_REMEDY, error=CorruptStoreError)


def description_bytes(description: Description) -> bytes:
    """The description as the indented JSON the dock writes."""
    return msgspec.json.format(msgspec.json.encode(description, order="sorted"), indent=1)

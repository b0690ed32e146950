"""What a ``get`` returns: the rows, their columns (arrays, or Packed for ragged ones), and the lease."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError
from .ragged import Packed, Padded, take_rows
from .schema import BFLOAT16, OBJECT

__all__ = ["Batch"]


@dataclass(frozen=True, eq=False)
class Batch:
    """Rows of one partition. ``batch[name]`` is an array ``(rows, *shape)`` for a fixed column and
    ``Packed`` (flat values + lengths) for a ragged one. ``lease_id`` is set when the rows were
    handed out under a lease: ``Dock.ack(lease_id)`` consumes them, ``Dock.nack`` returns them.
    ``versions`` and ``latest_versions`` are each row's oldest and newest policy version; when a
    segmented column is asked for, ``segments`` holds each row's segment item counts (boundaries in
    its concatenation) and ``segment_versions`` their versions, both ``Packed`` by row."""

    partition: str
    rows: np.ndarray
    columns: dict[str, np.ndarray | Packed]
    lease_id: int | None = None
    group_size: int = field(default=1, repr=False)
    ages: np.ndarray | None = field(default=None, repr=False)  # unfinished puts per row (partial rollout)
    versions: np.ndarray | None = field(default=None, repr=False)  # oldest policy version per row
    latest_versions: np.ndarray | None = field(default=None, repr=False)  # newest policy version per row
    segments: Packed | None = field(default=None, repr=False)  # per row: items of each segment
    segment_versions: Packed | None = field(default=None, repr=False)  # per row: version of each segment

    def __getitem__(self, name: str) -> np.ndarray | Packed:
        try:
            return self.columns[name]
        except KeyError:
            raise ConfigError(f"batch has no column {name!r}; it holds {sorted(self.columns)}") from None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def prompts(self) -> np.ndarray:
        """The prompt (group) of each row: ``row // n_samples_per_prompt``."""
        return self.rows // self.group_size

    def padded(self, name: str, pad_value: Any = 0, *, multiple_of: int = 1) -> Padded:
        """A ragged column padded to its longest row (rounded up to ``multiple_of``)."""
        column = self[name]
        if not isinstance(column, Packed):
            raise ConfigError(f"column {name!r} is not ragged: it is already a {column.shape} array")
        return column.padded(pad_value, multiple_of=multiple_of)

    def split(self, parts: int) -> list[Batch]:
        """``parts`` consecutive batches of equal row count (the per-rank parts of a ``Balanced`` batch)."""
        if not is_int(parts) or parts < 1 or len(self) % parts:
            raise ConfigError(f"parts={parts!r}: the batch's {len(self)} rows do not split into that many equal parts")
        parts = int(parts)
        size = len(self) // parts
        return [self.select(np.arange(k * size, (k + 1) * size)) for k in range(parts)]

    def select(self, positions: np.ndarray) -> Batch:
        """The batch restricted to the rows at ``positions`` (indices into ``self.rows``), same lease."""
        columns: dict[str, np.ndarray | Packed] = {}
        for name, column in self.columns.items():
            if isinstance(column, Packed):
                columns[name] = take_rows(column, positions)
            else:
                columns[name] = column[positions]

        def rows_of(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[positions]

        def packed_of(values: Packed | None) -> Packed | None:
            return None if values is None else take_rows(values, positions)

        return Batch(
            self.partition,
            self.rows[positions],
            columns,
            self.lease_id,
            self.group_size,
            rows_of(self.ages),
            rows_of(self.versions),
            rows_of(self.latest_versions),
            packed_of(self.segments),
            packed_of(self.segment_versions),
        )

    def to_torch(self, pad_value: Any = 0) -> dict[str, Any]:
        """Torch tensors: fixed columns as they are; ragged ones padded, with ``<name>_lengths``;
        bfloat16 columns as bfloat16 tensors; a column of Python values as its list of values."""
        import torch

        def tensor(values: np.ndarray) -> Any:
            if values.dtype == BFLOAT16:
                return torch.from_numpy(np.ascontiguousarray(values).view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(np.ascontiguousarray(values))

        tensors: dict[str, Any] = {"rows": torch.from_numpy(self.rows)}
        for name, column in self.columns.items():
            if isinstance(column, Packed):
                padded = column.padded(pad_value)
                tensors[name] = tensor(padded.values)
                tensors[f"{name}_lengths"] = torch.from_numpy(padded.lengths)
            elif column.dtype == OBJECT:
                tensors[name] = column.tolist()
            else:
                tensors[name] = tensor(column)
        return tensors

"""A re-implementation of how MindSpeed-RL's TransferDock stores and serves RL experience, as the
baseline for bench_dock.py.

Written from a description of its design (not copied), keeping the parts that set its cost:

* Storage: per column, a Python list of ``max_len = prompts_num * n_samples_per_prompt`` slots,
  each holding one row as its own 1-D torch tensor; per column a ``torch.int32`` readiness status
  tensor (1 = written); per consumer a ``torch.int32`` consumption status tensor (1 = taken) and a
  lock, so that one sampler at a time picks rows for that consumer.
* put: rows are written slot by slot and their status set to 1. Callers hand padded 2-D tensors
  plus lengths, and the producer-side wrapper removes the padding row by row
  (``tensor[i, :length[i]].clone()``) before the put: ``put_padded`` models that.
* get: under the consumer's lock, the ready rows (every requested column written, not yet taken
  by this consumer) are found with torch ops; if fewer than ``count`` are ready it releases the
  lock, sleeps 0.1 s and tries again (no timeout). Otherwise it picks ``count`` of them at random
  (``torch.multinomial`` over the ready rows, without replacement), marks them taken, gathers each
  column's row tensors and pads them with ``pad_sequence(batch_first=True)``; it returns the
  padded tensors and the row indexes.

No part is slowed on purpose; the 0.1 s poll is the original's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

POLL_SECONDS = 0.1


class TransferDockBaseline:
    """Experience store shaped like MindSpeed-RL's TransferDock (see the module docstring)."""

    def __init__(
        self, columns: Sequence[str], consumers: Sequence[str], prompts_num: int, n_samples_per_prompt: int
    ) -> None:
        self.max_len = prompts_num * n_samples_per_prompt
        self.columns = list(columns)
        self.consumers = list(consumers)
        self.data: dict[str, list[torch.Tensor | None]] = {c: [None] * self.max_len for c in self.columns}
        self.data_status = {c: torch.zeros(self.max_len, dtype=torch.int32) for c in self.columns}
        self.consumer_status = {c: torch.zeros(self.max_len, dtype=torch.int32) for c in self.consumers}
        self.consumer_locks = {c: threading.Lock() for c in self.consumers}
        self.polls = 0  # times a get slept 0.1 s waiting for rows (for the benchmark's report)

    # -- put -------------------------------------------------------------------------------------

    def put(self, columns: Sequence[str], experience: Sequence[Sequence[torch.Tensor]], indexes: Sequence[int]) -> None:
        """Store, for each column, its list of per-row 1-D tensors in the rows `indexes`."""
        for name in columns:
            if name not in self.data:
                raise ValueError(f"unknown column {name!r}")
        if max(indexes) >= self.max_len:
            raise ValueError(f"row {max(indexes)} is past the dock's {self.max_len} rows")
        for name, rows in zip(columns, experience):
            slots = self.data[name]
            status = self.data_status[name]
            for i, index in enumerate(indexes):
                slots[index] = rows[i]
                status[index] = 1

    def put_padded(
        self, batch: Mapping[str, torch.Tensor | tuple[torch.Tensor, torch.Tensor]], indexes: Sequence[int]
    ) -> None:
        """The producer-side wrapper: `batch` maps each column to ``(padded 2-D tensor, lengths)``
        for ragged columns, or to a 1-D tensor (one value per row) for scalar ones; the padding is
        removed row by row (each row cloned, as the original does) and the rows are put."""
        columns, experience = [], []
        for name, value in batch.items():
            if isinstance(value, tuple):
                padded, lengths = value
                rows = [padded[i, : int(lengths[i])].clone() for i in range(len(indexes))]
            else:
                rows = [value[i : i + 1].clone() for i in range(len(indexes))]
            columns.append(name)
            experience.append(rows)
        self.put(columns, experience, list(indexes))

    # -- get -------------------------------------------------------------------------------------

    def _sample_ready(self, consumer: str, columns: Sequence[str], count: int) -> list[int] | None:
        not_taken = self.consumer_status[consumer] == 0
        written = torch.all(torch.stack([self.data_status[c] == 1 for c in columns]), dim=0)
        usable = (not_taken & written).nonzero(as_tuple=True)[0]
        if usable.numel() < count:
            return None
        picked = torch.multinomial(torch.ones(usable.numel()), count, replacement=False)
        indexes = usable[picked]
        self.consumer_status[consumer][indexes] = 1
        return indexes.tolist()

    def get(
        self, consumer: str, columns: Sequence[str], count: int, pad_value: int | float = 0
    ) -> tuple[dict[str, torch.Tensor], list[int]]:
        """`count` rows of `columns` not yet taken by `consumer`, chosen at random among the ready
        ones (polling every 0.1 s until `count` are ready, without limit), each column padded to
        its longest row: ``({column: tensor [count, longest]}, row indexes)``."""
        if consumer not in self.consumer_status:
            raise ValueError(f"unknown consumer {consumer!r}")
        if count > self.max_len:
            raise ValueError(f"count {count} exceeds the dock's {self.max_len} rows")
        lock = self.consumer_locks[consumer]
        while True:
            with lock:
                indexes = self._sample_ready(consumer, columns, count)
            if indexes is not None:
                break
            self.polls += 1
            time.sleep(POLL_SECONDS)
        batch = {}
        for name in columns:
            slots = self.data[name]
            rows = [slots[i] for i in indexes]
            value = 0.0 if rows[0].is_floating_point() else pad_value
            batch[name] = pad_sequence(rows, batch_first=True, padding_value=value)
        return batch, indexes

    def all_consumed(self, consumer: str) -> bool:
        return int(self.consumer_status[consumer].sum()) == self.max_len

"""StreamSampler: one global sample stream, cut into batches of any size for any number of ranks.

The stream depends on ``total_samples``, ``seed`` and the order only, never on the micro batch,
the data-parallel size or the global batch: epoch ``e`` is an order ``order(e)`` of all
``total_samples`` ids (none dropped) and the stream is ``order(0) + order(1) + ...``. The global
batch at stream position ``p`` (``p = consumed_samples``) is ``stream[p : p + G]`` with
``G = micro_batch_size * data_parallel_size``, and rank ``r`` takes its slots
``[r * mbs, (r + 1) * mbs)``. A batch may straddle an epoch boundary. So a run saved on 4 ranks
resumes on 1, 2 or 8, with the same or another global batch, and the stream from the saved
position on is the one the saved run would have read; only where batches are cut moves.

Orders (``order=``):

- ``"random"``: ``numpy.random.default_rng([seed, epoch]).permutation(total_samples)``;
- ``"sequential"``: ``0, 1, ..., total_samples - 1`` every epoch (Megatron's ``'single'`` order;
  the one for a blend under a mixture schedule, whose ids are already in training order);
- ``"length_grouped"``: ``length_grouped_order(lengths, group_size, mega_batch_mult,
  seed=(seed, epoch))``: transformers' length grouping (megabatches of ``mega_batch_mult *
  group_size`` ids sorted longest first) drawn with numpy. ``group_size`` is the grouping's own
  parameter, part of the order: it stays fixed when the training batch changes (set it to the
  micro batch you expect, so each micro-batch holds samples of similar length);
- ``"feistel"``: a keyed pseudo-random permutation of the epoch (``feistel.py``: a Feistel network
  keyed by (seed, epoch), with cycle walking) computed at the positions a batch needs: the same
  stream on every rank, without building the epoch's order.

For ``"random"`` and ``"length_grouped"`` each rank holds one epoch's order (4 bytes a sample for
``"random"`` below 2^31 samples, 8 for ``"length_grouped"``), as Megatron's unsharded cyclic
sampler does, and builds it on each epoch start and each resume (O(total_samples)). The ranks of
one process share a ``"random"`` order (held while any of them holds it): 10^4 simulated ranks
hold one epoch's order, not 10^4 copies.
``"sequential"`` and ``"feistel"`` hold nothing: memory O(batch), resume O(1) in the total and
the position.

One ``__iter__`` yields the rest of the current epoch: every batch that *starts* in it, the last
one possibly running into the next epoch; ``epoch`` is the epoch of the next batch's first
sample. ``consumed_samples`` counts as in the other samplers (one global batch before each
micro-batch is yielded, or ``advance()`` with ``auto_advance=False``) and may be any count.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import check_choice, check_int, check_seed
from ..errors import ConfigError
from .feistel import feistel_ids
from .length_grouping import _check_lengths, length_grouped_order
from .pretraining import _PretrainingBase

__all__ = ["StreamSampler"]

ORDERS = ("sequential", "random", "length_grouped", "feistel")  # states store the index: append only
_CHUNK_ROWS = 4096  # micro-batches converted to Python lists at a time, at most
_FIRST_CHUNK_ROWS = 16  # ... and in the first chunk of an __iter__ (time to the first batch)
_HASH_CHUNK = 1 << 20  # lengths hashed at a time (as int64)
_STREAM_CHUNK = 1 << 22  # ids per array of consumed_stream
_MAX_POSITION = 2**63 - 1  # stream positions are int64
# "random" epoch orders by (total_samples, seed, epoch), shared by the samplers of a process while one holds it
_SHARED_ORDERS: weakref.WeakValueDictionary[tuple[int, int, int], np.ndarray] = weakref.WeakValueDictionary()


class StreamSampler(_PretrainingBase):
    """Batch sampler over a global stream that no layout changes: resumes on any dp size and global batch.

    See the module docstring for the stream and the orders. ``lengths`` (one token count per
    sample, e.g. a dataset's sample lengths) and ``group_size`` are required for, and only
    accepted with, ``order="length_grouped"``; ``mega_batch_mult`` defaults as in
    ``get_length_grouped_indices``. ``state_dict()`` holds a few ints; ``load_state_dict``
    accepts a state saved with any micro batch, dp size or global batch, and refuses another
    total, seed, order or grouping with a ConfigError naming the field.
    """

    _kind = 3

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        seed: int = 0,
        order: str = "random",
        *,
        lengths: Sequence[int] | np.ndarray | None = None,
        group_size: int | None = None,
        mega_batch_mult: int | None = None,
        auto_advance: bool = True,
    ) -> None:
        self.seed = check_seed("seed", seed)
        self.order = str(check_choice("order", order, ORDERS))
        total = check_int("total_samples", total_samples, 1)
        grouping = {"lengths": lengths, "group_size": group_size, "mega_batch_mult": mega_batch_mult}
        if self.order != "length_grouped":
            given = [name for name, value in grouping.items() if value is not None]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} given with order={self.order!r}: they define the length-grouped order; "
                    "pass order='length_grouped' or drop them"
                )
            self.lengths: np.ndarray | None = None
            self.group_size = self.mega_batch_mult = 0
            self._lengths_fingerprint = 0
        else:
            if lengths is None or group_size is None:
                raise ConfigError(
                    "order='length_grouped' needs lengths= (one token count per sample) and group_size= "
                    "(the batch size the grouping aims at)"
                )
            self.lengths = _check_lengths(lengths)
            if len(self.lengths) != total:
                raise ConfigError(
                    f"lengths has {len(self.lengths)} entries but total_samples={total}: pass one length per sample"
                )
            self.group_size = check_int("group_size", group_size, 1)
            default = max(1, min(total // (self.group_size * 4), 50))  # get_length_grouped_indices' default
            self.mega_batch_mult = default if mega_batch_mult is None else check_int("mega_batch_mult", mega_batch_mult)
            self._lengths_fingerprint = _hash_lengths(self.lengths)
        self._cache: tuple[int, np.ndarray] | None = None  # one epoch's order: the stream is read forward
        super().__init__(
            total_samples, consumed_samples, micro_batch_size, data_parallel_rank, data_parallel_size, auto_advance
        )

    @property
    def epoch(self) -> int:
        """Return the epoch of the next batch's first sample."""
        return self.consumed_samples // self.total_samples

    def _identity(self) -> dict[str, int]:
        """Return the order-defining fields: total, seed, order and grouping (never a batch size)."""
        return {
            **super()._identity(),
            "seed": self.seed,
            "order": ORDERS.index(self.order),
            "group_size": self.group_size,
            "mega_batch_mult": self.mega_batch_mult,
            "lengths_fingerprint": self._lengths_fingerprint,
        }

    def state_dict(self) -> dict[str, int]:
        """Return the resume state (a few ints): consumed samples, the order's identity, the saved layout, epoch."""
        return {**super().state_dict(), "epoch": self.epoch}

    def _check_consumed(self, consumed: int) -> int:
        """Return ``consumed`` unless the stream positions of the epoch it lies in would pass int64."""
        if consumed > _MAX_POSITION - 2 * self.total_samples - self.global_batch_size:
            raise ConfigError(
                f"consumed_samples={consumed} is out of range: the stream positions past it would not fit in int64; "
                "pass the consumed count of a real run"
            )
        return consumed

    def _check_state_extra(self, state: Mapping[str, Any], identity: Mapping[str, int], consumed: int) -> None:
        """Raise ConfigError unless the state's epoch agrees with its consumed samples."""
        if "epoch" not in state:
            raise ConfigError("state has no 'epoch': pass the dict returned by StreamSampler.state_dict()")
        if int(state["epoch"]) != consumed // self.total_samples:
            raise ConfigError(
                f"state epoch={state['epoch']} disagrees with consumed_samples={consumed} "
                f"(epoch {consumed // self.total_samples} at total_samples={self.total_samples} per epoch)"
            )

    def __len__(self) -> int:
        """Return the number of micro-batches the next ``__iter__`` yields (those starting in this epoch)."""
        left = (self.epoch + 1) * self.total_samples - self.consumed_samples
        return -(-left // self.global_batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this rank's micro-batches of every global batch that starts in the current epoch."""
        gbs, mbs = self.global_batch_size, self.micro_batch_size
        batches = len(self)
        first = self.consumed_samples + self.data_parallel_rank * mbs
        columns = np.arange(mbs, dtype=np.int64)
        row, size = 0, _FIRST_CHUNK_ROWS  # chunks double: the first batch comes fast, later ones cheap
        while row < batches:
            rows = np.arange(row, min(batches, row + size), dtype=np.int64)
            positions = first + rows[:, None] * gbs + columns
            for batch in self._ids_at(positions).tolist():
                if self.auto_advance:
                    self.consumed_samples += gbs
                yield batch
            row, size = row + size, min(2 * size, _CHUNK_ROWS)

    def global_stream(self, start: int, stop: int) -> np.ndarray:
        """The global sample ids at stream positions ``[start, stop)`` (int64): what all ranks read there."""
        start = check_int("start", start, 0)
        stop = check_int("stop", stop, start)
        return self._ids_at(np.arange(start, stop, dtype=np.int64))

    def consumed_stream(self) -> Iterator[np.ndarray]:
        """The global sample ids consumed so far (all ranks), in order, in chunks of at most 2^22."""
        for start in range(0, self.consumed_samples, _STREAM_CHUNK):
            yield self.global_stream(start, min(self.consumed_samples, start + _STREAM_CHUNK))

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Return ``order(epoch)``: the epoch's ``total_samples`` ids in stream order (a read-only integer array)."""
        epoch = check_int("epoch", epoch, 0)
        if self._cache is None or self._cache[0] != epoch:
            order: np.ndarray
            if self.order == "feistel":
                order = feistel_ids(np.arange(self.total_samples, dtype=np.int64), self.total_samples, self.seed, epoch)
            elif self.order == "random":
                order = _random_order(self.total_samples, self.seed, epoch)
            elif self.order == "length_grouped":
                assert self.lengths is not None
                order = length_grouped_order(
                    self.lengths, self.group_size, self.mega_batch_mult, seed=(self.seed, epoch)
                )
            else:
                order = np.arange(self.total_samples, dtype=np.int64)
            order.setflags(write=False)
            self._cache = (epoch, order)
        return self._cache[1]

    def _ids_at(self, positions: np.ndarray) -> np.ndarray:
        """Map non-decreasing stream positions (any shape) to sample ids."""
        total = self.total_samples
        if self.order == "sequential" or positions.size == 0:
            return positions % total
        epochs = positions // total
        first, last = int(epochs.min()), int(epochs.max())
        if first == last:
            return self._epoch_ids(first, positions - first * total)
        out = np.empty_like(positions)
        for epoch in range(first, last + 1):
            mask = epochs == epoch
            out[mask] = self._epoch_ids(epoch, positions[mask] - epoch * total)
        return out

    def _epoch_ids(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        """Map offsets into epoch ``epoch`` to sample ids: computed ("feistel") or read from the epoch's order."""
        if self.order == "feistel":
            return feistel_ids(offsets, self.total_samples, self.seed, epoch)
        return self.epoch_order(epoch)[offsets].astype(np.int64, copy=False)


def _random_order(total: int, seed: int, epoch: int) -> np.ndarray:
    """Return ``default_rng([seed, epoch]).permutation(total)``, read-only, shared with every sampler holding it."""
    order = _SHARED_ORDERS.get((total, seed, epoch))
    if order is None:
        # permutation(n) is shuffle(arange(n)); int32 ids where they fit halve the memory, same order
        order = np.arange(total, dtype=np.int32 if total < 2**31 else np.int64)
        np.random.default_rng([seed, epoch]).shuffle(order)
        order.setflags(write=False)
        _SHARED_ORDERS[(total, seed, epoch)] = order
    return order


def _hash_lengths(lengths: np.ndarray) -> int:
    """Return a 63-bit hash of the lengths' values (not their dtype), so the same lengths always match."""
    digest = hashlib.blake2b(digest_size=8)
    for start in range(0, len(lengths), _HASH_CHUNK):
        digest.update(np.ascontiguousarray(lengths[start : start + _HASH_CHUNK], dtype="<i8").tobytes())
    return int.from_bytes(digest.digest(), "big") >> 1

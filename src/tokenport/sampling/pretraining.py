"""Pretraining samplers: Megatron-LM's sequential and cyclic batch samplers, with exact and elastic resume.

Both are batch samplers for ``torch.utils.data.DataLoader(dataset, batch_sampler=...)``: each
yields, on data-parallel rank ``r``, lists of int sample ids (``micro_batch_size`` of them).
The ranks together walk *global batches* of ``global_batch_size = micro_batch_size *
data_parallel_size`` samples; rank ``r``'s micro-batch is its part of each global batch.

``PretrainingSampler`` is Megatron-LM's ``MegatronPretrainingSampler`` (``dataloader_type
'single'``): the ids ``consumed_samples, consumed_samples + 1, ... total_samples - 1`` in order,
rank ``r`` taking slice ``[r * mbs, (r + 1) * mbs)`` of each global batch.

``RandomSampler`` is Megatron-LM's ``MegatronPretrainingRandomSampler`` (``'cyclic'``): the
data is seen epoch after epoch, each epoch in a fresh random order; one ``__iter__`` walks the
rest of the current epoch (Megatron's ``cyclic_iter`` simply iterates it again). Only
``active = total_samples - total_samples % global_batch_size`` samples are used per epoch, the
epoch is ``consumed_samples // active`` and the position in it ``consumed_samples % active``.

Modes of ``RandomSampler``:

- ``megatron_compat=True`` yields exactly Megatron-LM's ids (a ``torch.Generator`` seeded with
  the epoch, ``torch.randperm``; ``seed`` must stay 0 since Megatron has none). With
  ``data_sharding`` each rank shuffles its own contiguous bucket of ``(total // gbs) * mbs``
  ids; without it one global permutation of ``(total // mbs) * mbs`` ids is dealt to the ranks
  with a stride of ``data_parallel_size`` (when ``mbs < dp`` that deal can give low ranks one
  micro-batch more per epoch than the others, and so a larger consumed count; compat mode
  reproduces it). Both depend on ``micro_batch_size`` and ``data_parallel_size`` themselves, not
  only on their product, so a compat state resumes only on the same layout: an elastic resume
  raises ConfigError.
- By default numpy draws the order from ``(seed, epoch)`` (torch is not imported), every rank
  yields the same number of batches, and the order depends only on ``total_samples``,
  ``global_batch_size`` and ``seed``: it is *elastic*. The global batch is ``gbs`` slots and
  rank ``r`` owns slots ``[r * mbs, (r + 1) * mbs)``, so the concatenation of the ranks'
  micro-batches in rank order is the same global batch for any ``mbs * dp == gbs``.
  Without ``data_sharding`` slot ``s`` of global batch ``j`` holds ``perm[j * gbs + s]`` with
  ``perm`` a permutation of all ``total_samples`` ids. With ``data_sharding`` slot ``s`` owns the
  contiguous bucket ``[s * B, (s + 1) * B)`` (``B = total // gbs``) and walks its own
  permutation of it, drawn from ``(seed, epoch, s)``: rank ``r`` reads only
  ``[r * mbs * B, (r + 1) * mbs * B)``, the very bucket Megatron gives it, yet the buckets are
  defined by the global batch, not by ``dp``. The price: a micro-batch holds one sample from each
  of its slots' buckets (a stratified shuffle) rather than ``mbs`` draws from one bucket.

Changing the global batch on resume: ``PretrainingSampler`` takes any (its order is the id
order). ``RandomSampler``'s epoch length and buckets depend on the global batch, so a state
resumes with another one only when the stream stays the same: no data sharding, the same
``active`` samples per epoch and ``consumed_samples`` a multiple of the new batch; otherwise
ConfigError. Runs that will change their global batch use ``StreamSampler`` (``stream.py``).

Consumed samples: as in Megatron's cyclic sampler, iterating advances ``consumed_samples`` by
one global batch just before each micro-batch is yielded (for ``PretrainingSampler`` too, where
Megatron leaves the count to the training loop). A DataLoader fetches batches ahead of training;
to count only what was trained on, pass ``auto_advance=False`` and call ``advance()`` after each
optimizer step. ``state_dict()`` holds a few ints; ``load_state_dict`` rejects a state of another
configuration with a ConfigError naming the fields that differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .._checks import check_bool, check_int
from .._schema import INT64_MAX, to_builtins
from ..errors import ConfigError
from ..rng.torch_randperm import randperm
from .state import RegisteredState, read_sampler_state

__all__ = ["PretrainingSampler", "RandomSampler"]

# Sampler kinds, stored in the state so that one kind's state is not loaded into the other.
_KINDS = {1: "PretrainingSampler", 2: "RandomSampler", 3: "StreamSampler"}
# Rows converted to Python lists at a time: keeps the per-batch cost low without a huge list.
_CHUNK_ROWS = 4096
_STREAM_CHUNK = 1 << 22  # ids per array of PretrainingSampler.consumed_stream


def _fingerprint(identity: Mapping[str, int]) -> int:
    """Return a 63-bit hash of the fields that fix a sampler's global order (fits an int64)."""
    text = ",".join(f"{key}={int(identity[key])}" for key in sorted(identity))
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class _PretrainingBase:
    """Shared layout checks, consumed-sample counting and state handling of both samplers."""

    _kind = 0

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        auto_advance: bool,
    ) -> None:
        self.total_samples = check_int("total_samples", total_samples, 1, INT64_MAX)
        self.micro_batch_size = check_int("micro_batch_size", micro_batch_size, 1)
        self.data_parallel_size = check_int("data_parallel_size", data_parallel_size, 1)
        self.data_parallel_rank = check_int("data_parallel_rank", data_parallel_rank, 0)
        if self.data_parallel_rank >= self.data_parallel_size:
            raise ConfigError(
                f"data_parallel_rank={data_parallel_rank} is invalid: pass a rank in "
                f"[0, data_parallel_size={self.data_parallel_size})"
            )
        self.global_batch_size = self.micro_batch_size * self.data_parallel_size
        self.auto_advance = check_bool("auto_advance", auto_advance)
        self.consumed_samples = self._checked(check_int("consumed_samples", consumed_samples, 0))

    def _checked(self, consumed: int) -> int:
        """Return ``consumed`` if it fits int64 (a state holds it) and the sampler can start there, else ConfigError."""
        if consumed > INT64_MAX:
            raise ConfigError(
                f"consumed_samples={consumed} is past 2**63 - 1: a state could not hold it; pass a real run's count"
            )
        return self._check_consumed(consumed)

    def _check_consumed(self, consumed: int) -> int:
        """Return ``consumed`` if this sampler can start there, else raise ConfigError."""
        return consumed

    def _identity(self) -> dict[str, int]:
        """Return the fields that fix the global sample order (never dp size or rank), fingerprinted in the state."""
        return {"sampler": self._kind, "total_samples": self.total_samples}

    # Identity fields a state may differ in, when _check_state_extra finds the change exact.
    _resumable: frozenset[str] = frozenset()
    # Identity fields a state leaves out at their default (older states never held them): the default.
    _defaults: Mapping[str, int] = {}

    def advance(self, num_samples: int | None = None) -> None:
        """Count ``num_samples`` more samples as consumed (default: one global batch, one training step)."""
        step = self._default_step() if num_samples is None else check_int("num_samples", num_samples, 0)
        self.consumed_samples = self._checked(self.consumed_samples + step)

    def _default_step(self) -> int:
        """Return the samples one training step consumes from the current position."""
        return self.global_batch_size

    def state_dict(self) -> dict[str, int]:
        """Return the resume state: consumed samples, the order-defining fields, layout and fingerprint."""
        identity = self._identity()
        return {
            "consumed_samples": self.consumed_samples,
            **identity,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
            "fingerprint": _fingerprint(identity),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``'s output; raise ConfigError if it belongs to another configuration."""
        typed = read_sampler_state(state)  # typed: every field present, an integer in range
        if isinstance(typed, RegisteredState):
            raise ConfigError(f"state is from a {typed.sampler} sampler, not a {_KINDS[self._kind]}")
        state = to_builtins(typed)
        mine = self._identity()
        if state["sampler"] != self._kind:  # before the fields, which differ per kind
            raise ConfigError(f"state is from a {_KINDS[state['sampler']]}, not a {_KINDS[self._kind]}")
        theirs = {key: int(state[key]) for key in {**self._defaults, **mine} if key in state}
        if _fingerprint(theirs) != int(state["fingerprint"]):
            raise ConfigError("state fingerprint does not match its fields: the state is corrupt or was edited")
        theirs, mine = {**self._defaults, **theirs}, {**self._defaults, **mine}
        differ = [
            f"{key} (state {theirs[key]}, this sampler {mine[key]})"
            for key in mine
            if theirs[key] != mine[key] and key not in self._resumable
        ]
        if differ:
            raise ConfigError(
                "state is from a different sampler configuration: "
                + ", ".join(differ)
                + "; build the sampler with the configuration the state was saved with"
            )
        self._check_layout(
            check_int("state['micro_batch_size']", state["micro_batch_size"], 1),
            check_int("state['data_parallel_size']", state["data_parallel_size"], 1),
        )
        consumed = check_int("state['consumed_samples']", state["consumed_samples"], 0)
        self._check_state_extra(state, theirs, consumed)
        self.consumed_samples = self._checked(consumed)

    def _check_layout(self, micro_batch_size: int, data_parallel_size: int) -> None:
        """Raise ConfigError if the order cannot continue on this layout (both default modes are elastic)."""

    def _check_state_extra(self, state: Mapping[str, Any], identity: Mapping[str, int], consumed: int) -> None:
        """Raise ConfigError if the state cannot resume exactly here (a resumable identity change, other fields)."""


class PretrainingSampler(_PretrainingBase):
    """Megatron-LM's sequential batch sampler: consecutive ids from ``consumed_samples``, one slice per rank.

    Yields, per global batch of ``micro_batch_size * data_parallel_size`` consecutive ids, this
    rank's ``micro_batch_size`` of them. With ``drop_last`` a final incomplete global batch is
    dropped; without it the partial batch is sliced per rank as Megatron does, so a rank past the
    remaining ids gets an empty list (every rank still takes the same number of steps).
    ``consumed_samples`` need not be a multiple of the global batch; it may be at most
    ``total_samples`` (there, nothing is left to yield; Megatron asserts instead).
    Elastic: the order is the id order, so a state resumes on any layout and any global batch
    (``micro_batch_size * data_parallel_size``), from any consumed count up to ``total_samples``.
    """

    _kind = 1
    _defaults = {"drop_last": 1}

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        drop_last: bool = True,
        *,
        auto_advance: bool = True,
    ) -> None:
        self.drop_last = check_bool("drop_last", drop_last)
        super().__init__(
            total_samples, consumed_samples, micro_batch_size, data_parallel_rank, data_parallel_size, auto_advance
        )

    def _identity(self) -> dict[str, int]:
        """The order's fields, with ``drop_last: 0`` when the final partial batch is kept (left out at the default,
        so states saved before it existed read unchanged): a resumed or traced run keeps that last step."""
        identity = super()._identity()
        return identity if self.drop_last else {**identity, "drop_last": 0}

    def _check_consumed(self, consumed: int) -> int:
        """Return ``consumed`` unless it lies past the end of the data."""
        if consumed > self.total_samples:
            raise ConfigError(
                f"consumed_samples={consumed} is past the end: total_samples={self.total_samples}; "
                "the sequential sampler does not cycle (use RandomSampler for epochs)"
            )
        return consumed

    def _default_step(self) -> int:
        """Return one global batch, or what is left of the data if less."""
        return min(self.global_batch_size, self.total_samples - self.consumed_samples)

    def __len__(self) -> int:
        """Return the number of micro-batches the next ``__iter__`` yields (Megatron returns total_samples)."""
        left = self.total_samples - self.consumed_samples
        return left // self.global_batch_size + (0 if self.drop_last or left % self.global_batch_size == 0 else 1)

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this rank's micro-batches from ``consumed_samples`` to the end of the data."""
        gbs, mbs = self.global_batch_size, self.micro_batch_size
        lo = self.data_parallel_rank * mbs
        start = self.consumed_samples
        full, partial = divmod(self.total_samples - start, gbs)
        for base in range(start + lo, start + lo + full * gbs, gbs):
            if self.auto_advance:
                self.consumed_samples += gbs
            yield list(range(base, base + mbs))
        if partial and not self.drop_last:
            base = start + full * gbs
            if self.auto_advance:
                self.consumed_samples += partial
            # Megatron slices the partial batch list: batch[lo:lo + mbs], possibly short or empty.
            yield list(range(base + min(lo, partial), base + min(lo + mbs, partial)))

    def global_stream(self, start: int, stop: int) -> np.ndarray:
        """The global sample ids at stream positions ``[start, stop)`` (int64; none past the data): all ranks' ids."""
        start = check_int("start", start, 0)
        stop = check_int("stop", stop, start)
        return np.arange(min(start, self.total_samples), min(stop, self.total_samples), dtype=np.int64)

    def consumed_stream(self) -> Iterator[np.ndarray]:
        """The global sample ids consumed so far (all ranks), in order, in chunks: ``0 .. consumed - 1``."""
        for start in range(0, self.consumed_samples, _STREAM_CHUNK):
            yield np.arange(start, min(self.consumed_samples, start + _STREAM_CHUNK), dtype=np.int64)


class RandomSampler(_PretrainingBase):
    """Megatron-LM's cyclic random batch sampler; elastic and numpy-seeded unless ``megatron_compat``.

    See the module docstring for the modes. ``consumed_samples`` must be a multiple of the global
    batch (Megatron asserts the same); it may exceed ``total_samples``: the epoch follows from it.
    ``__iter__`` yields the rest of the current epoch; iterate again for the next one.
    """

    _kind = 2

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        seed: int = 0,
        data_sharding: bool = True,
        megatron_compat: bool = False,
        *,
        auto_advance: bool = True,
    ) -> None:
        self.seed = check_int("seed", seed, 0)
        self.data_sharding = check_bool("data_sharding", data_sharding)
        self.megatron_compat = check_bool("megatron_compat", megatron_compat)
        if self.megatron_compat and self.seed != 0:
            raise ConfigError(
                f"seed={seed!r} is invalid with megatron_compat=True: Megatron-LM seeds its sampler with the "
                "epoch only; leave seed=0, or pass megatron_compat=False to shuffle with your seed"
            )
        total = check_int("total_samples", total_samples, 1)
        gbs = check_int("micro_batch_size", micro_batch_size, 1) * check_int(
            "data_parallel_size", data_parallel_size, 1
        )
        if total < gbs:
            raise ConfigError(
                f"total_samples={total} is smaller than one global batch (micro_batch_size * data_parallel_size "
                f"= {gbs}): an epoch would hold no batch; use more samples or a smaller batch"
            )
        # Samples per epoch: the tail that does not fill a global batch is never used (as in Megatron).
        self.active_samples = total - total % gbs
        self._cache: tuple[int, np.ndarray] | None = None
        super().__init__(
            total_samples, consumed_samples, micro_batch_size, data_parallel_rank, data_parallel_size, auto_advance
        )

    @property
    def epoch(self) -> int:
        """Return the epoch the next batch comes from."""
        return self.consumed_samples // self.active_samples

    def _check_consumed(self, consumed: int) -> int:
        """Return ``consumed`` if it is a whole number of global batches."""
        if consumed % self.global_batch_size:
            raise ConfigError(
                f"consumed_samples={consumed} is not a multiple of the global batch "
                f"(micro_batch_size * data_parallel_size = {self.global_batch_size}): the random sampler resumes "
                "only at a global-batch boundary"
            )
        return consumed

    # The global batch fixes the epoch length and the buckets, yet some changes of it are exact.
    _resumable = frozenset({"global_batch_size"})

    def _identity(self) -> dict[str, int]:
        """Return the order-defining fields: sampler, total_samples, global batch, seed and modes."""
        return {
            **super()._identity(),
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
            "data_sharding": int(self.data_sharding),
            "megatron_compat": int(self.megatron_compat),
        }

    def state_dict(self) -> dict[str, int]:
        """Return the resume state, with the current epoch."""
        return {**super().state_dict(), "epoch": self.epoch}

    def _check_layout(self, micro_batch_size: int, data_parallel_size: int) -> None:
        """Reject an elastic resume of Megatron's order, whose buckets/stride depend on mbs and dp."""
        if self.megatron_compat and (micro_batch_size, data_parallel_size) != (
            self.micro_batch_size,
            self.data_parallel_size,
        ):
            what = "each rank's bucket" if self.data_sharding else "the permutation length and the rank stride"
            raise ConfigError(
                f"state was saved with micro_batch_size={micro_batch_size}, data_parallel_size={data_parallel_size}, "
                f"this sampler has {self.micro_batch_size}, {self.data_parallel_size}: with megatron_compat=True "
                f"{what} depends on them, so Megatron-LM's order cannot resume elastically; resume on the saved "
                "layout, or use megatron_compat=False (elastic) for new runs"
            )

    def _check_state_extra(self, state: Mapping[str, Any], identity: Mapping[str, int], consumed: int) -> None:
        """Raise ConfigError unless a changed global batch keeps the order and the epoch agrees with consumed."""
        saved = identity["global_batch_size"]
        if saved != self.global_batch_size:
            self._check_global_batch_change(saved, consumed)
        if "epoch" not in state:
            raise ConfigError("state has no 'epoch': pass the dict returned by RandomSampler.state_dict()")
        if int(state["epoch"]) != consumed // self.active_samples:
            raise ConfigError(
                f"state epoch={state['epoch']} disagrees with consumed_samples={consumed} "
                f"(epoch {consumed // self.active_samples} at {self.active_samples} samples per epoch)"
            )

    def _check_global_batch_change(self, saved: int, consumed: int) -> None:
        """Raise ConfigError unless resuming a state of global batch ``saved`` here continues its stream exactly.

        Without data sharding the epoch is ``perm[:active]`` whatever the global batch, so a change
        is exact when ``active`` stays the same and ``consumed`` falls on a boundary of the new batch.
        """
        gbs = self.global_batch_size
        instead = (
            "resume with that global batch, or for runs that will change their global batch use StreamSampler "
            "(its stream does not depend on the global batch)"
        )
        change = f"state global_batch_size={saved}, this sampler {gbs}"
        if self.data_sharding:
            raise ConfigError(
                f"{change}: with data_sharding=True each global-batch slot shuffles its own bucket of "
                f"total_samples // global_batch_size ids, so another global batch is another order; {instead}"
            )
        saved_active = self.total_samples - self.total_samples % saved
        if saved_active != self.active_samples:
            raise ConfigError(
                f"{change}: an epoch would use {self.active_samples} of total_samples={self.total_samples} "
                f"instead of {saved_active} (the tail that does not fill a global batch is dropped), so the "
                f"stream would change; {instead}, or data_sharding=False with a global batch that leaves the same tail"
            )
        if consumed % gbs:
            raise ConfigError(
                f"{change}: state consumed_samples={consumed} is not a multiple of the new global batch, and the "
                f"random sampler resumes only at a global-batch boundary; {instead}"
            )

    def __len__(self) -> int:
        """Return the number of micro-batches the next ``__iter__`` yields (the rest of this epoch)."""
        return max(0, self._rows_per_epoch() - self.consumed_samples % self.active_samples // self.global_batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this rank's micro-batches for the rest of the current epoch."""
        epoch, offset = divmod(self.consumed_samples, self.active_samples)
        rows = self.epoch_batches(epoch)
        gbs = self.global_batch_size
        for first in range(offset // gbs, len(rows), _CHUNK_ROWS):
            for batch in rows[first : first + _CHUNK_ROWS].tolist():
                if self.auto_advance:
                    self.consumed_samples += gbs
                yield batch

    def consumed_stream(self) -> Iterator[np.ndarray]:
        """The global sample ids consumed so far (all ranks), in order: one array per epoch begun.

        Megatron-compatible mode without data sharding counts the extra micro-batch some ranks
        take per epoch (see the module docstring) in ``consumed_samples``; the stream leaves it out.
        """
        epoch, offset = divmod(self.consumed_samples, self.active_samples)
        for past in range(epoch):
            yield self.global_batches(past).reshape(-1)
        if offset:
            yield self.global_batches(epoch)[: offset // self.global_batch_size].reshape(-1)

    def global_batches(self, epoch: int) -> np.ndarray:
        """All ranks' micro-batches of an epoch, rank after rank in each global batch: (batches, gbs)."""
        batches = self.active_samples // self.global_batch_size
        if not self.megatron_compat:  # elastic: the order depends only on the global batch
            whole = RandomSampler(self.total_samples, 0, self.global_batch_size, 0, 1, self.seed, self.data_sharding)
            return whole.epoch_batches(epoch)
        ranks = [
            RandomSampler(
                self.total_samples,
                0,
                self.micro_batch_size,
                rank,
                self.data_parallel_size,
                data_sharding=self.data_sharding,
                megatron_compat=True,
            ).epoch_batches(epoch)[:batches]
            for rank in range(self.data_parallel_size)
        ]
        return np.concatenate(ranks, axis=1)

    def epoch_batches(self, epoch: int) -> np.ndarray:
        """Return this rank's micro-batches of a whole epoch as an int64 array of shape (batches, mbs)."""
        epoch = check_int("epoch", epoch, 0)
        if self._cache is None or self._cache[0] != epoch:
            make = self._megatron_rows if self.megatron_compat else self._numpy_rows
            rows = make(epoch)
            rows.setflags(write=False)
            self._cache = (epoch, rows)
        return self._cache[1]

    def _numpy_rows(self, epoch: int) -> np.ndarray:
        """Return the elastic order: global-batch slots, this rank's mbs of them, from numpy."""
        mbs, gbs = self.micro_batch_size, self.global_batch_size
        per_slot = self.active_samples // gbs  # batches per epoch == ids per slot bucket
        first_slot = self.data_parallel_rank * mbs
        if self.data_sharding:
            rows = np.empty((per_slot, mbs), dtype=np.int64)
            for column, slot in enumerate(range(first_slot, first_slot + mbs)):
                order = np.random.default_rng([self.seed, epoch, slot]).permutation(per_slot)
                rows[:, column] = order + slot * per_slot
            return rows
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.total_samples)
        slots = perm[: self.active_samples].reshape(per_slot, gbs)
        return np.ascontiguousarray(slots[:, first_slot : first_slot + mbs])

    def _megatron_rows(self, epoch: int) -> np.ndarray:
        """Return Megatron-LM's order for this rank (torch.randperm seeded with the epoch, drawn by the twin)."""
        import torch  # lazily: only Megatron's exact order needs torch

        mbs, dp, rank = self.micro_batch_size, self.data_parallel_size, self.data_parallel_rank
        batches = self.active_samples // self.global_batch_size
        generator = torch.Generator()
        generator.manual_seed(epoch)
        if self.data_sharding:
            # Rank r shuffles bucket [r * size, (r + 1) * size), size = (total // gbs) * mbs; resuming at
            # c consumed samples skips c // dp = (c // gbs) * mbs ids of it, i.e. c // gbs whole rows.
            size = batches * mbs
            perm = randperm(size, generator).astype(np.int64)
            return (perm + rank * size).reshape(batches, mbs)
        # One permutation of (total // mbs) * mbs ids (longer than the active samples when total % gbs
        # >= mbs); Megatron takes perm[c:][rank::dp], which equals perm[rank::dp][c // dp:] since dp divides
        # c, and drops its last incomplete micro-batch. See _rows_per_epoch for the extra row.
        size = (self.total_samples // mbs) * mbs
        perm = randperm(size, generator).astype(np.int64)
        rows = self._rows_per_epoch()
        return np.ascontiguousarray(perm[rank::dp][: rows * mbs]).reshape(rows, mbs)

    def _rows_per_epoch(self) -> int:
        """Return this rank's micro-batches in a whole epoch."""
        mbs, dp, rank = self.micro_batch_size, self.data_parallel_size, self.data_parallel_rank
        if not (self.megatron_compat and not self.data_sharding):
            return self.active_samples // self.global_batch_size
        # Megatron's strided deal of (total // mbs) * mbs ids gives rank r ceil((size - r) / dp) of them: when
        # mbs < dp - r and total % gbs is large enough, that is one whole micro-batch more than the epoch's
        # active samples hold, so low ranks yield one extra micro-batch per epoch (and count it as consumed).
        size = (self.total_samples // mbs) * mbs
        return max(0, -(-(size - rank) // dp)) // mbs

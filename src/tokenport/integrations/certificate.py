"""The certificate of a stream: a hash chain over the global batches a StatefulLoader handed to the trainer.

Handover ``k`` (counted from 0 over the whole run) is recorded by its position ``consumed_k`` (samples
all ranks had consumed when batch ``k`` was handed over). Format ``tokenport.certificate/2`` links the
positions in blocks of ``LINK`` (64) handovers counted from the segment's start ``since``::

    D_0 = base;  D_{i+1} = blake2b-128(D_i || data || order || consumed over block i)
    digest after n handovers = blake2b-128(D_i || data || order || consumed over handovers s .. n - 1)

with ``s = since + i * LINK`` the last block start before ``n`` (so a full block's digest is its
``D``), positions as little-endian int64. ``data`` is the digest of the receipt's dataset tree
(``data_digest``: store content checksums, sample configs, orders; not prefixes, tokenizers or
recipes, which never change the tokens); ``order`` the digest of the sampler's global order
(``order_digest``: its kind, seed, order, length and global batch, the fields that decide which ids
each global batch holds, not its position or its ranks). A tokenport sampler's global batch at a
position is a pure function of its order, and the receipt pins each store's content, so (data,
order, position) determine every sample id and every token: neither is hashed, and one blake2b call
covers 64 steps whatever the global batch (tens of ns a step). That holds for the sampler code that
handed the batches over; so that a resume or an audit under another one (a tokenport or numpy
version that orders samples otherwise) is caught, a /2 certificate also names ``batch``: the digest
of rank 0's micro-batch of the last step (``batch_digest``), which both recompute with the sampler at
hand (rank 0's share of the order: every rank computes it alone, as cheaply as its own share).
Format ``/1`` (registered samplers, whose order tokenport cannot name, and states saved before /2)
extends the chain step by step over the global batch's sample ids instead of the order:
``digest_{k+1} = blake2b-128(digest_k || data || consumed_k || ids_k)``, ids of every rank's
micro-batch in rank order, little-endian int64.
Every rank computes the same chain from the sampler alone (no communication), so the state stays
rank-independent. A loader counts handovers (one integer compare per batch: a position moved from
outside the loader is recorded as a jump in ``runs``) and hashes them when a state is taken.

A chain has one *segment* per data, order and global batch: on a resume that accepts a data change
(``allow_changes``), changes the global batch or resumes a /1 state, a new segment starts (``since``:
the handovers before it, ``base``: the digest they reached); states of the earlier segment certify
those steps.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._schema import to_builtins
from ..errors import ConfigError
from ..sampling.pretraining import PretrainingSampler, RandomSampler
from ..sampling.state import (
    CERTIFICATE_FORMAT,
    IDS_FORMAT,
    Certificate,
    RandomState,
    RegisteredState,
    read_sampler_state,
)
from ..sampling.stream import StreamSampler
from .samplers import sampler_from_state

__all__ = [
    "Chain",
    "GlobalBatches",
    "batch_digest",
    "data_digest",
    "LINK",
    "extend",
    "genesis",
    "link",
    "order_digest",
]

_SIZE = 16  # bytes of a digest
_MAX = 1 << 63  # past any position: a bisect key
_ROWS = 4096  # global batches computed at once when hashing ids (format /1)
_BLOCK = 1 << 16  # positions computed at once (a multiple of LINK)
_POSITION = frozenset({"consumed_samples", "epoch"})  # sampler state fields that move with the position
_LAYOUT = frozenset({"micro_batch_size", "data_parallel_size"})  # fields a global batch's ids do not depend on
LINK = 64  # handovers a /2 chain links per blake2b call
_NOT_DATA = frozenset({"prefix", "tokenizer", "prepared", "build"})  # receipt fields that never change a token


def genesis() -> bytes:
    """The digest a chain starts from (no batch handed over yet; the same for every format)."""
    return hashlib.blake2b(IDS_FORMAT.encode(), digest_size=_SIZE).digest()


def data_digest(tree: Mapping[str, Any]) -> bytes:
    """The digest of a receipt's dataset tree over the fields that decide the tokens."""
    text = json.dumps(_data_part(tree), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.blake2b(text.encode(), digest_size=_SIZE).digest()


def _data_part(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _data_part(item) for key, item in value.items() if key not in _NOT_DATA}
    if isinstance(value, (list, tuple)):
        return [_data_part(item) for item in value]
    return value


def order_digest(sampler_state: Mapping[str, Any]) -> bytes:
    """The digest of the global order of a tokenport sampler's state (its fields but the position, and the
    layout where the ids do not depend on it: elastic samplers); b"" for a registered sampler (format /1)."""
    typed = read_sampler_state(sampler_state, "state['sampler']")
    if isinstance(typed, RegisteredState):
        return b""
    kept = _POSITION if isinstance(typed, RandomState) and typed.megatron_compat else _POSITION | _LAYOUT
    order = {key: value for key, value in to_builtins(typed).items() if key not in kept}
    order["global_batch"] = typed.micro_batch_size * typed.data_parallel_size
    return _blake(json.dumps(order, sort_keys=True, separators=(",", ":")).encode())


def link(digest: bytes, data: bytes, order: bytes, positions: np.ndarray) -> bytes:
    """A /2 chain's digest after handovers at ``positions`` (a block of up to LINK), linked onto ``digest``."""
    return _blake(digest + data + order + np.ascontiguousarray(positions, "<i8").tobytes())


def extend(digest: bytes, data: bytes, consumed: int, ids: np.ndarray) -> bytes:
    """The /1 chain's digest after one more handed-over global batch."""
    return _blake(digest + data + int(consumed).to_bytes(8, "little") + np.ascontiguousarray(ids, "<i8").tobytes())


def batch_digest(batches: GlobalBatches, consumed: int) -> bytes:
    """The digest of rank 0's micro-batch of the global batch handed over at ``consumed`` (little-endian int64):
    every rank computes it alone, at the cost of rank 0's share of the order (what each rank's sampler computes
    of its own anyway), not of the whole global order."""
    first = batches.first
    if type(first) is StreamSampler:  # rank 0 reads positions [consumed, consumed + mbs): no chunk of later rows
        ids: Any = first.global_stream(consumed, consumed + first.micro_batch_size)
    else:
        first.consumed_samples = consumed
        ids = next(iter(first), None)
    return _blake(np.asarray([] if ids is None else ids, "<i8").tobytes())


def _blake(message: bytes) -> bytes:
    return hashlib.blake2b(message, digest_size=_SIZE).digest()


class GlobalBatches:
    """The global batch (every rank's micro-batch, in rank order) at any position of a sampler state's stream."""

    def __init__(self, sampler_state: Mapping[str, Any], dataset: Any) -> None:
        self.state, self.dataset, self.size = sampler_state, dataset, int(sampler_state["data_parallel_size"])
        self.global_batch = int(sampler_state["micro_batch_size"]) * self.size
        self.first = sampler_from_state(sampler_state, 0, dataset)  # ConfigError now for a stream not replayable
        self._samplers: list[Any] = []  # every rank's, built when batches are taken rank by rank
        self._epoch: tuple[int, np.ndarray] | None = None  # a RandomSampler's global batches of one epoch

    @property
    def samplers(self) -> list[Any]:
        """Every rank's sampler, in rank order."""
        if not self._samplers:
            rest = [sampler_from_state(self.state, rank, self.dataset) for rank in range(1, self.size)]
            self._samplers = [self.first, *rest]
        return self._samplers

    def rows(self, consumed: int, count: int) -> np.ndarray | None:
        """The global batches of up to ``count`` consecutive steps from ``consumed`` (at least one) as a
        (steps, global batch) array, computed at once where tokenport's sampler has a global order (each
        rank's micro-batch is its slice of it, in rank order); None where batches are taken rank by rank."""
        first, gbs = self.first, self.global_batch
        if type(first) is StreamSampler:
            return first.global_stream(consumed, consumed + count * gbs).reshape(count, gbs)
        if type(first) is PretrainingSampler:
            count = min(count, (first.total_samples - consumed) // gbs)  # a partial last batch: rank by rank
            return np.arange(consumed, consumed + count * gbs, dtype=np.int64).reshape(count, gbs) if count else None
        if type(first) is RandomSampler and not first.megatron_compat and consumed % gbs == 0:
            epoch, offset = divmod(consumed, first.active_samples)
            if self._epoch is None or self._epoch[0] != epoch:
                self._epoch = (epoch, first.global_batches(epoch))
            batches = self._epoch[1][offset // gbs : offset // gbs + count]
            return batches if len(batches) else None
        return None

    def ids(self, consumed: int) -> np.ndarray:
        """The global sample ids handed over at ``consumed`` samples consumed (empty past the end of the data)."""
        parts = []
        for sampler in self.samplers:
            sampler.consumed_samples = consumed
            batch = next(iter(sampler), None)
            if batch is not None:
                parts.append(np.asarray(batch, dtype=np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@dataclass
class Chain:
    """A certificate being extended: the segment's start, its runs of consecutive positions, the digests."""

    data: bytes
    global_batch: int
    since: int = 0
    base: bytes = field(default_factory=genesis)
    runs: list[tuple[int, int]] = field(default_factory=list)  # (handover, consumed) where the position jumped
    steps: int = 0  # handovers hashed into ``digest``
    digest: bytes = b""
    previous: bytes = b""
    order: bytes = b""  # format /2: the sampler's order digest; b"": format /1, the ids are hashed
    batch: bytes = b""  # format /2: the digest of the last step's global sample ids (b"": no step in the segment)
    boundary: tuple[int, bytes] | None = None  # /2: the last block start reached and its digest (not stored)

    @property
    def format(self) -> Literal["tokenport.certificate/1", "tokenport.certificate/2"]:
        """The certificate format this chain hashes by."""
        return CERTIFICATE_FORMAT if self.order else IDS_FORMAT

    def __post_init__(self) -> None:
        if not self.digest:
            self.digest = self.previous = self.base

    def jump(self, handover: int, consumed: int) -> None:
        """Record that handover ``handover`` was made at position ``consumed``, not where the last run led."""
        if self.runs and self.runs[-1][0] == handover:
            self.runs[-1] = (handover, consumed)
        else:
            self.runs.append((handover, consumed))

    def position(self, handover: int) -> int:
        """The sampler's position (consumed samples) when handover ``handover`` of this segment was made."""
        start, consumed = next((s, c) for s, c in reversed(self.runs) if s <= handover)
        return consumed + (handover - start) * self.global_batch

    def handed(self, first: int, stop: int, batches: GlobalBatches) -> Iterator[tuple[int, np.ndarray]]:
        """(first position, rows) for the handovers ``first .. stop - 1``, many at a time: each row is a
        handover's position then its global sample ids (little-endian int64), as the chain hashes them."""
        while first < stop:
            end = min(next((start for start, _ in self.runs if start > first), stop), stop, first + _ROWS)
            consumed = self.position(first)
            fast = batches.rows(consumed, end - first)
            ids = batches.ids(consumed)[None, :] if fast is None else fast
            rows = np.empty((len(ids), 1 + ids.shape[1]), "<i8")
            rows[:, 0] = consumed + self.global_batch * np.arange(len(ids), dtype=np.int64)
            rows[:, 1:] = ids
            yield consumed, rows
            first += len(rows)

    def positions(self, first: int, stop: int) -> np.ndarray:
        """The positions (consumed samples) of handovers ``first .. stop - 1``, little-endian int64."""
        out = np.empty(stop - first, "<i8")
        k = max(bisect.bisect_right(self.runs, (first, _MAX)) - 1, 0)  # the run handover ``first`` is in
        while k < len(self.runs) and self.runs[k][0] < stop:
            start, consumed = self.runs[k]
            end = self.runs[k + 1][0] if k + 1 < len(self.runs) else stop
            a, b = max(start, first), min(end, stop)
            out[a - first : b - first] = np.arange(b - a, dtype=np.int64) * self.global_batch + (
                consumed + (a - start) * self.global_batch
            )
            k += 1
        return out

    def hash_on(self, first: int, digest: bytes, batches: Callable[[], GlobalBatches]) -> tuple[bytes, bytes]:
        """(previous, digest): a /1 chain's digests before and after handover ``steps - 1``, hashed on from
        ``digest`` after handover ``first - 1``, one step at a time over the ids ``batches()`` gives."""
        previous, data, blake = digest, self.data, hashlib.blake2b
        for _, rows in self.handed(first, self.steps, batches()):
            raw, width = rows.tobytes(), rows.shape[1] * 8
            for at in range(0, len(raw), width):
                previous = digest
                digest = blake(digest + data + raw[at : at + width], digest_size=_SIZE).digest()
        return previous, digest

    def _walk(self, start: int, digest: bytes, stop: int) -> tuple[int, bytes]:
        """(block start, its digest) of the last /2 block before handover ``stop`` (``stop - start`` in
        1..LINK), linked on from block start ``start`` and its ``digest``: one blake2b call per LINK handovers."""
        fixed, blake, width = self.data + self.order, hashlib.blake2b, LINK * 8
        while stop - start > LINK:
            end = start + min(_BLOCK, (stop - start - 1) // LINK * LINK)
            raw = self.positions(start, end).tobytes()
            for at in range(0, len(raw), width):
                digest = blake(digest + fixed + raw[at : at + width], digest_size=_SIZE).digest()
            start = end
        return start, digest

    def _linked(self) -> tuple[bytes, bytes]:
        """(previous, digest) of a /2 chain after ``steps`` handovers, linked on from its last block boundary
        (from ``base`` when none is known)."""
        steps, since = self.steps, self.since
        if steps == since:
            return self.base, self.base
        known = self.boundary if self.boundary is not None and self.boundary[0] < steps else None
        start, block = self._walk(*(known or (since, self.base)), steps)
        self.boundary = (start, block)
        digest = link(block, self.data, self.order, self.positions(start, steps))
        if steps - 1 == start:
            return block, digest
        return link(block, self.data, self.order, self.positions(start, steps - 1)), digest

    def recompute(self, batches: Callable[[], GlobalBatches]) -> tuple[bytes, bytes]:
        """(previous, digest): the chain's digests recomputed from ``base`` over its runs (and, /1, the ids)."""
        if self.order:
            self.boundary = None
            return self._linked()
        return self.hash_on(self.since, self.base, batches)

    def catch_up(self, handed: int, batches: Callable[[], GlobalBatches]) -> None:
        """Hash the handovers made since the last call (up to ``handed``)."""
        if handed > self.steps:
            first, self.steps = self.steps, handed
            if self.order:
                self.previous, self.digest = self._linked()
                self.batch = batch_digest(batches(), self.position(handed - 1))
            else:
                self.previous, self.digest = self.hash_on(first, self.digest, batches)

    def document(self) -> dict[str, Any]:
        """The certificate as the loader state stores it (plain JSON types)."""
        doc = Certificate(
            format=self.format,
            data=self.data.hex(),
            steps=self.steps,
            digest=self.digest.hex(),
            previous=self.previous.hex(),
            since=self.since,
            base=self.base.hex(),
            runs=[(s, c) for s, c in self.runs],
            order=self.order.hex() if self.order else None,
            batch=self.batch.hex() if self.order and self.steps > self.since else None,
        )
        out = dict(to_builtins(doc))
        for key in ("order", "batch"):
            if out[key] is None:
                del out[key]  # /1 as it was written; no step in the segment
        return out

    @classmethod
    def from_document(cls, doc: Certificate, global_batch: int) -> Chain:
        """The chain a saved certificate holds (typed already by ``read_loader_state``)."""
        return cls(
            data=bytes.fromhex(doc.data),
            global_batch=global_batch,
            since=doc.since,
            base=bytes.fromhex(doc.base),
            runs=[(int(s), int(c)) for s, c in doc.runs],
            steps=doc.steps,
            digest=bytes.fromhex(doc.digest),
            previous=bytes.fromhex(doc.previous),
            order=bytes.fromhex(doc.order) if doc.order is not None else b"",
            batch=bytes.fromhex(doc.batch) if doc.batch is not None else b"",
        )

    def end(self) -> int:
        """The position after the last handover: where the sampler stands when nothing moved it from outside."""
        if self.steps == self.since and self.runs[-1][0] == self.steps:
            return self.runs[-1][1]
        return self.position(self.steps - 1) + self.global_batch

    def batch_differs(self, batches: Callable[[], GlobalBatches]) -> bool:
        """Whether the last step's rank-0 micro-batch, recomputed by the sampler at hand, is not the one the /2
        certificate names (``batch``): the sampler orders samples otherwise than the one that handed them over."""
        if not self.order or self.steps == self.since:
            return False
        return batch_digest(batches(), self.position(self.steps - 1)) != self.batch

    def check_batch(self, batches: Callable[[], GlobalBatches], where: str) -> None:
        """ConfigError when ``batch_differs``: positions and order digest agree, but the ids at them do not."""
        if self.batch_differs(batches):
            last = self.steps - 1
            raise ConfigError(
                f"{where}: step {last}'s global batch, recomputed by this sampler at consumed_samples="
                f"{self.position(last)}, holds other sample ids than the run handed over (`batch`, rank 0's "
                "micro-batch): the sampler "
                "here orders samples otherwise (another tokenport or numpy version?) or `batch` was edited; resume "
                "with the versions the run was trained with, or start a new run"
            )

    def check(self, batches: Callable[[], GlobalBatches], where: str) -> None:
        """ConfigError unless the chain recomputed from the receipt and the sampler gives the certificate's
        digests: a /2 segment whole from ``base`` (tens of ns a step), a /1 one its last step from ``previous``."""
        if self.steps == self.since:
            if self.digest != self.base or self.previous != self.base:
                raise ConfigError(
                    f"{where}: no step hashed since step {self.since} but the digests differ from `base`; "
                    "the state was edited: resume from a state saved whole by StatefulLoader.state_dict()"
                )
            return
        last = self.steps - 1
        consumed = self.position(last)
        if self.order:
            self.check_batch(batches, where)
            previous, again = self.recompute(batches)
            if previous != self.previous:
                raise ConfigError(
                    f"{where}: the chain recomputed from step {self.since} (`base`) over the certified positions "
                    f"does not reach the digest before step {last} (`previous`): a step in {self.since}..{last - 1} "
                    "diverges (`base`, `runs` or `previous` was edited); run `tokenport audit` over the run's "
                    "checkpoints, and resume from a state saved whole by StatefulLoader.state_dict()"
                )
        else:
            again = extend(self.previous, self.data, consumed, batches().ids(consumed))
        if again != self.digest:
            raise ConfigError(
                f"{where}: step {last} (the last batch the state certifies, at consumed_samples={consumed}) "
                "recomputed from the receipt and the sampler does not give the certificate's digest: the state "
                "was edited or the run read other batches; run `tokenport audit` over the run's checkpoints to "
                "find the first divergent step, and resume from a state saved whole by StatefulLoader.state_dict()"
            )

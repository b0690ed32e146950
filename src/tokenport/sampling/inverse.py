"""The samplers' order inverted: at which stream positions a run reads given sample ids.

Every tokenport sampler reads one global stream: position ``p`` is slot ``p % G`` of step ``p // G``
(``G`` the global batch), that is rank ``slot // mbs`` at place ``slot % mbs`` of its micro-batch.
``stream_positions`` maps sample ids to every position before ``stop`` that holds them, epoch by
epoch, without walking the steps:

- ``PretrainingSampler`` and ``StreamSampler(order="sequential")``: the id is its own offset;
- ``StreamSampler(order="feistel")``: the Feistel permutation deciphered (``feistel_offsets``), O(ids);
- ``RandomSampler`` with data sharding: the id fixes its slot's bucket; only that bucket's order is
  drawn (O(total / G) per bucket asked);
- the other orders (``"random"``, ``"length_grouped"``, ``RandomSampler`` without sharding or in
  Megatron's mode) have no closed-form inverse: each epoch's order is replayed once (O(total) time
  and the order's own memory per epoch) and searched for the ids.

Memory beyond a replayed order is O(ids asked + positions found).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError
from .feistel import feistel_offsets
from .pretraining import PretrainingSampler, RandomSampler
from .stream import StreamSampler

__all__ = ["epoch_length", "invertible", "stream_positions"]


def invertible(sampler: Any) -> bool:
    """True for a sampler whose order ``stream_positions`` inverts: tokenport's own."""
    return isinstance(sampler, (PretrainingSampler, RandomSampler, StreamSampler))


def epoch_length(sampler: Any) -> int:
    """Stream positions per epoch of a tokenport sampler (a PretrainingSampler has one epoch, without its
    incomplete last global batch under ``drop_last``)."""
    if isinstance(sampler, RandomSampler):
        return int(sampler.active_samples)
    if isinstance(sampler, PretrainingSampler) and sampler.drop_last:
        return int(sampler.total_samples - sampler.total_samples % sampler.global_batch_size)
    return int(sampler.total_samples)


def stream_positions(sampler: Any, samples: np.ndarray, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, position) int64 arrays, sorted by position: every stream position in ``[0, stop)`` that holds
    ``samples[k]`` (distinct ids), for a tokenport sampler's order (ConfigError for another: replay it)."""
    if not invertible(sampler):
        raise ConfigError(
            f"{type(sampler).__name__}: not a tokenport sampler, whose order cannot be inverted; replay its steps"
        )
    ids = np.asarray(samples, dtype=np.int64).reshape(-1)
    length = epoch_length(sampler)
    if isinstance(sampler, PretrainingSampler):  # one pass: nothing is read past it
        stop = min(stop, length)
    epochs = -(-stop // length) if length else 0
    found_k, found_p = [], []
    for epoch in range(epochs):
        k, offset = _epoch_offsets(sampler, epoch, ids)
        position = offset + epoch * length
        keep = position < stop
        found_k.append(k[keep])
        found_p.append(position[keep])
    k = np.concatenate(found_k) if found_k else np.empty(0, np.int64)
    p = np.concatenate(found_p) if found_p else np.empty(0, np.int64)
    order = np.argsort(p, kind="stable")
    return k[order], p[order]


def _epoch_offsets(sampler: Any, epoch: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, offset in the epoch) of every place of ``ids[k]`` in epoch ``epoch``'s order."""
    everyone = np.arange(len(ids), dtype=np.int64)
    valid = (ids >= 0) & (ids < sampler.total_samples)
    if isinstance(sampler, PretrainingSampler) or getattr(sampler, "order", None) == "sequential":
        return everyone[valid], ids[valid]
    if isinstance(sampler, StreamSampler) and sampler.order == "feistel":
        return everyone[valid], feistel_offsets(ids[valid], sampler.total_samples, sampler.seed, epoch)
    if isinstance(sampler, RandomSampler) and sampler.data_sharding and not sampler.megatron_compat:
        return _bucket_offsets(sampler, epoch, ids)
    if isinstance(sampler, StreamSampler):
        return _search(sampler.epoch_order(epoch), ids)
    return _search(sampler.global_batches(epoch).reshape(-1), ids)


def _search(order: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, offset) of every offset of a replayed ``order`` holding some ``ids[k]`` (ids distinct)."""
    rank = np.argsort(ids, kind="stable")
    offsets = np.flatnonzero(np.isin(order, ids))
    which = rank[np.searchsorted(ids[rank], order[offsets])]
    return which.astype(np.int64), offsets.astype(np.int64)


def _bucket_offsets(sampler: RandomSampler, epoch: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elastic sharded order: slot ``s`` walks its own permutation of bucket ``[s * B, (s + 1) * B)``."""
    gbs = sampler.global_batch_size
    per_slot = sampler.active_samples // gbs
    ks, ps = [], []
    asked = np.flatnonzero((ids >= 0) & (ids < per_slot * gbs))
    slots = ids[asked] // per_slot
    for slot in np.unique(slots).tolist():  # one bucket's order drawn per slot asked
        k = asked[slots == slot]
        order = np.random.default_rng([sampler.seed, epoch, slot]).permutation(per_slot)
        which, rows = _search(order, ids[k] - slot * per_slot)
        ks.append(k[which])
        ps.append(rows * gbs + slot)
    if not ks:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(ks).astype(np.int64), np.concatenate(ps).astype(np.int64)

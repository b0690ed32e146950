"""Cost of the stream's certificate: per batch handed over, and per step hashed when a state is taken.

What is timed (best of N, time.perf_counter), on a StatefulLoader over a view of a synthetic store's
GPTDataset (no sample is read: only the sampler's positions), for every sampler (StreamSampler feistel,
random, length_grouped; PretrainingSampler; RandomSampler unsharded and sharded) at global batches of
8 x 128 ranks and 1024 x 1 rank:
  handover   StatefulLoader._hand_over() (what the loader does per batch handed to the trainer: the
             sampler advances one step and the certificate checks the position), minus the sampler's
             own advance() alone (run in turns): the certificate's cost per batch.
  hashing    certificate() after K handovers (the work state_dict() adds), divided by K: one blake2b
             call per 64 steps over their positions, and the last step's global sample ids digested
             (the certificate's `batch`). "per batch in all" adds the two: the goal (under 1 us a batch)
             is on it, for states taken within an epoch (K handovers, or fewer where an epoch is
             shorter). The first state of an epoch computes the epoch's global order once for the last
             step's ids ("first state of an epoch", a permutation of the epoch for the random orders), beside
             the sampler's own computation of its epoch order (the baseline: what iterating the epoch costs
             the sampler anyway).
  audit      tokenport.audit of two states of one run (K/2 and K steps in), per step: the dataset rebuilt
             from the receipt, the later state hashed on from the earlier one's digest.
  resume     load_state_dict of a state after 1,000 and K steps: its position checked, its whole chain
             recomputed.

    python benchmarks/bench_certificate.py            # K = 100,000 steps
    python benchmarks/bench_certificate.py --quick    # K = 10,000 steps
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

import tokenport as tp
from _harness import Row, best_of, best_of_each, print_table, scratch_directory
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

SAMPLES = 10**9  # the dataset's length the samplers index (a view: no sample is read)
RANDOM_SAMPLES = 10**6  # RandomSampler builds each epoch's permutation: a smaller dataset


class _Span:
    """A dataset of SAMPLES samples that is never read: the certificate needs only its length."""

    def __init__(self, inner: tp.GPTDataset, length: int = SAMPLES) -> None:
        self.inner, self.length = inner, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return self.inner[index % len(self.inner)]


def _store(prefix: str) -> tp.GPTDataset:
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 500, 200)
    tokens = rng.integers(3, 50_000, int(lengths.sum())).astype(np.uint16)
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    store = tp.IndexedDataset(prefix)
    return tp.GPTDataset(store, np.arange(200), 200_000, tp.GPTSampleConfig(128, 2), 1)


def _lengths(total: int) -> np.ndarray:
    return np.random.default_rng(0).integers(1, 4096, total).astype(np.int64)


SAMPLERS: dict[str, Callable[[int, int, int], object]] = {
    "StreamSampler feistel": lambda total, mbs, size: StreamSampler(total, 0, mbs, 0, size, seed=1, order="feistel"),
    "StreamSampler random": lambda total, mbs, size: StreamSampler(total, 0, mbs, 0, size, seed=1, order="random"),
    "StreamSampler length_grouped": lambda total, mbs, size: StreamSampler(
        total, 0, mbs, 0, size, seed=1, order="length_grouped", lengths=_lengths(total), group_size=mbs * size
    ),
    "PretrainingSampler": lambda total, mbs, size: PretrainingSampler(total, 0, mbs, 0, size),
    "RandomSampler": lambda total, mbs, size: RandomSampler(total, 0, mbs, 0, size, seed=1),
    "RandomSampler sharded": lambda total, mbs, size: RandomSampler(total, 0, mbs, 0, size, seed=1, data_sharding=True),
}
TOTALS = {"StreamSampler feistel": SAMPLES, "PretrainingSampler": SAMPLES}  # others: RANDOM_SAMPLES (a permutation)


def _span(inner: tp.GPTDataset, kind: str) -> _Span:
    """The dataset ``kind`` indexes (with the lengths a length-grouped order reads)."""
    span = _Span(inner, TOTALS.get(kind, RANDOM_SAMPLES))
    if kind.endswith("length_grouped"):
        span.lengths = _lengths(span.length)  # type: ignore[attr-defined]
    return span


def _handover(dataset: _Span, kind: str, mbs: int, size: int, steps: int) -> float:
    """Seconds per _hand_over minus seconds per sampler.advance alone: the certificate's cost per batch."""
    loader = StatefulLoader(dataset, SAMPLERS[kind](len(dataset), mbs, size))
    sampler = SAMPLERS[kind](len(dataset), mbs, size)
    sampler.auto_advance = False  # type: ignore[attr-defined]
    steps = min(steps, len(dataset) // (mbs * size) - 1)

    def hand() -> None:
        loader.sampler.consumed_samples = 0
        for _ in range(steps):
            loader._hand_over()

    def advance() -> None:
        sampler.consumed_samples = 0  # type: ignore[attr-defined]
        for _ in range(steps):
            sampler.advance()  # type: ignore[attr-defined]

    hand_s, advance_s = best_of_each([hand, advance], 5)
    return max(hand_s - advance_s, 0.0) / steps


def _hashing(dataset: _Span, kind: str, mbs: int, size: int, steps: int) -> tuple[float, float, float]:
    """(seconds of the first certificate() of an epoch, seconds per step of a later one after ``steps`` more
    handovers in the same epoch, seconds of the sampler's own epoch order): fresh loaders, best of 3."""
    first = best = own = float("inf")
    steps = min(steps, len(dataset) // (mbs * size) - 2)  # within the first epoch
    for _ in range(3):
        sampler = SAMPLERS[kind](len(dataset), mbs, size)
        began = time.perf_counter()
        next(iter(sampler))  # the sampler's own first batch of the epoch: its epoch order computed
        own = min(own, time.perf_counter() - began)
        loader = StatefulLoader(dataset, SAMPLERS[kind](len(dataset), mbs, size))
        loader.certificate()  # the data digest (the receipt) once, as at the first state_dict
        loader._hand_over()
        began = time.perf_counter()
        loader.certificate()  # the epoch's order computed for the last step's ids
        first = min(first, time.perf_counter() - began)
        for _ in range(steps):
            loader._hand_over()
        began = time.perf_counter()
        loader.certificate()
        best = min(best, time.perf_counter() - began)
    return first, best / steps, own


def _resume(dataset: _Span, steps: int) -> float:
    """Seconds of load_state_dict of a state ``steps`` steps in (its whole chain recomputed), best of 5."""
    loader = StatefulLoader(dataset, SAMPLERS["StreamSampler feistel"](len(dataset), 8, 1))
    for _ in range(steps):
        loader._hand_over()
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = StatefulLoader(dataset, SAMPLERS["StreamSampler feistel"](len(dataset), 8, 1))
    return best_of(lambda: fresh.load_state_dict(state), 5)


def _audit(dataset: tp.GPTDataset, steps: int) -> float:
    """Seconds per step of tokenport.audit over two states of one run (``steps // 2`` and ``steps`` steps in),
    the dataset rebuilt from the receipt, best of 3."""
    loader = StatefulLoader.for_dataset(dataset, micro_batch_size=8, seed=1)
    states = []
    for _ in range(2):
        for _ in range(steps // 2):
            loader._hand_over()
        states.append(json.loads(json.dumps(loader.state_dict())))
    assert tp.audit(states).consistent
    return best_of(lambda: tp.audit(states), 3) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^4 steps instead of 10^5")
    args = parser.parse_args()
    steps = 10_000 if args.quick else 100_000
    rows = []
    with scratch_directory(None, "bench_certificate", args.quick) as root:
        inner = _store(f"{root}/store")
        for kind in SAMPLERS:
            for mbs, size in ((8, 128), (1024, 1)):
                dataset = _span(inner, kind)
                hand = _handover(dataset, kind, mbs, size, steps)
                first, per_step, own = _hashing(dataset, kind, mbs, size, steps)
                case = f"{kind}, {mbs} x {size}"
                rows.append(Row("handover", case, "s/batch", hand, float("nan"), "-", absolute=True))
                own_row = Row("first state of an epoch", case, "s", first, own, "sampler's own", lower_is_better=True)
                rows.append(own_row)
                rows.append(  # per 1,000 steps: a step's share is tens of ns
                    Row(
                        "hashing at state_dict", case, "s/1000 steps", per_step * 1000, float("nan"), "-", absolute=True
                    )
                )
                rows.append(
                    Row(
                        "per batch in all",
                        f"{case}: handover + hashing, within an epoch",
                        "s/batch",
                        hand + per_step,
                        float("nan"),
                        "-",
                        goal=1e-6,
                        goal_text="<1 us",
                        absolute=True,
                        lower_is_better=True,
                    )
                )
        rows.append(
            Row(
                "audit",
                "two states of one run, StreamSampler, 8 x 1",
                "s/step",
                _audit(inner, steps),
                float("nan"),
                "-",
                absolute=True,
            )
        )
        span = _Span(inner)
        for count in (1000, steps):
            took = _resume(span, count)
            rows.append(
                Row("resume", f"load_state_dict, {count} steps recomputed", "s", took, float("nan"), "-", absolute=True)
            )
    print_table(rows)


if __name__ == "__main__":
    main()

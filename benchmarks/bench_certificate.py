"""Cost of the stream's certificate: per batch handed over, and per step hashed when a state is taken.

What is timed (best of N, time.perf_counter), on a StatefulLoader over a GPTDataset of a synthetic
store (the dataset's size does not enter: only the sampler's positions and ids are used):
  handover   StatefulLoader._hand_over() (what the loader does per batch handed to the trainer: the
             sampler advances one step and the certificate checks the position), minus the sampler's
             own advance() alone: the certificate's cost per batch.
  hashing    certificate() after K handovers (the work state_dict() adds), divided by K: the global
             batch of every step recomputed (a StreamSampler's global stream at once; other samplers
             rank by rank) and hashed, 8 samples a step on 1 or 8 ranks. "per batch in all" adds the two:
             the goal (under 1 us a batch) is on it.
  audit      tokenport.audit of two states of one run (K/2 and K steps in), per step: the dataset rebuilt
             from the receipt, the later state hashed on from the earlier one's digest.
  resume     load_state_dict of a state after 1,000 steps: its position checked, its last step replayed
             (a cost independent of the step count).

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
from _harness import Row, best_of, print_table, scratch_directory
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


SAMPLERS: dict[str, Callable[[int, int], object]] = {
    "StreamSampler feistel": lambda mbs, size: StreamSampler(SAMPLES, 0, mbs, 0, size, seed=1, order="feistel"),
    "PretrainingSampler": lambda mbs, size: PretrainingSampler(SAMPLES, 0, mbs, 0, size),
    "RandomSampler": lambda mbs, size: RandomSampler(RANDOM_SAMPLES, 0, mbs, 0, size, seed=1),
}


def _handover(dataset: _Span, steps: int) -> tuple[float, float]:
    """(seconds per _hand_over, seconds per sampler.advance alone) over ``steps`` calls."""
    loader = StatefulLoader(dataset, SAMPLERS["StreamSampler feistel"](8, 1))
    sampler = StreamSampler(SAMPLES, 0, 8, 0, 1, seed=1, order="feistel", auto_advance=False)

    def hand() -> None:
        for _ in range(steps):
            loader._hand_over()

    def advance() -> None:
        for _ in range(steps):
            sampler.advance()

    return best_of(hand, 5) / steps, best_of(advance, 5) / steps


def _hashing(dataset: object, kind: str, mbs: int, size: int, steps: int) -> float:
    """Seconds per step of certificate() after ``steps`` handovers (fresh loaders, best of 3)."""
    best = float("inf")
    for _ in range(3):
        loader = StatefulLoader(dataset, SAMPLERS[kind](mbs, size))
        loader.certificate()  # the data digest (the receipt) once, as at the first state_dict
        for _ in range(steps):
            loader._hand_over()
        began = time.perf_counter()
        loader.certificate()
        best = min(best, time.perf_counter() - began)
    return best / steps


def _resume(dataset: _Span) -> float:
    """Seconds of load_state_dict of a state 1,000 steps in (the last step replayed), best of 5."""
    loader = StatefulLoader(dataset, SAMPLERS["StreamSampler feistel"](8, 1))
    for _ in range(1000):
        loader._hand_over()
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = StatefulLoader(dataset, SAMPLERS["StreamSampler feistel"](8, 1))
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
        dataset = _Span(_store(f"{root}/store"))
        hand, advance = _handover(dataset, steps)
        rows.append(
            Row(
                "handover",
                "certificate's cost per batch (StreamSampler, 8 x 1)",
                "s/batch",
                hand - advance,
                advance,
                "sampler.advance",
                goal=1e-6,
                goal_text="<1 us",
                absolute=True,
                lower_is_better=True,
            )
        )
        for kind, mbs, size in (
            ("StreamSampler feistel", 8, 1),
            ("StreamSampler feistel", 1, 8),
            ("PretrainingSampler", 8, 1),
            ("PretrainingSampler", 1, 8),
            ("RandomSampler", 8, 1),
        ):
            over = _Span(dataset.inner, RANDOM_SAMPLES) if kind == "RandomSampler" else dataset
            per_step = _hashing(over, kind, mbs, size, steps)
            rows.append(
                Row(
                    "hashing at state_dict",
                    f"{kind}, {mbs} x {size} ranks",
                    "s/step",
                    per_step,
                    float("nan"),
                    "-",
                    absolute=True,
                )
            )
            rows.append(
                Row(
                    "per batch in all",
                    f"{kind}, {mbs} x {size} ranks: handover + hashing",
                    "s/batch",
                    hand - advance + per_step,
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
                _audit(dataset.inner, steps),
                float("nan"),
                "-",
                absolute=True,
            )
        )
        rows.append(
            Row(
                "resume", "load_state_dict, last step replayed", "s", _resume(dataset), float("nan"), "-", absolute=True
            )
        )
    print_table(rows)


if __name__ == "__main__":
    main()

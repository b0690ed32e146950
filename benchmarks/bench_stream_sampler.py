"""tokenport's StreamSampler vs torch's and transformers' distributed samplers: one rank's epoch, and a resume.

One data-parallel rank (rank 3 of 8, micro batch 8) walks a whole epoch of N sample ids; every
side yields lists of Python ints, what a DataLoader's batch_sampler hands on. The sides draw
different random orders (that is the point of none of them), so outputs are checked for shape,
not equality. Every figure is the best of R runs timed with time.perf_counter, in turns.

    python benchmarks/bench_stream_sampler.py            # 10^7 samples (a few minutes)
    python benchmarks/bench_stream_sampler.py --quick    # 10^6 samples

Rows:
  random epoch      StreamSampler(order="random") vs BatchSampler(torch DistributedSampler(shuffle=True)).
  grouped epoch     StreamSampler(order="length_grouped", group_size=8) vs BatchSampler(transformers'
                    DistributedLengthGroupedSampler(batch_size=8)), lognormal lengths (mean ~1000).
  resume mid-epoch  time to the first micro-batch half an epoch in: StreamSampler.load_state_dict, vs
                    torch's sampler, which has no state, skipping half an epoch of batches (what a
                    stateless loader, e.g. the HF Trainer's skip loop, does at the sampler level).
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from torch.utils.data import BatchSampler, DistributedSampler
from transformers.trainer_pt_utils import DistributedLengthGroupedSampler

from _harness import Row, best_of_each, lognormal_lengths, print_table, scratch_directory
from tokenport.sampling import StreamSampler

RANK, WORLD, MBS = 3, 8, 8


def drain(batches) -> int:
    """Consume an iterable of micro-batches; return how many there were."""
    count = 0
    for _ in batches:
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^6 samples instead of 10^7")
    parser.add_argument("--count", type=int, default=None, help="number of samples (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per side (default 3, quick 2)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (unused; kept for a uniform CLI)")
    args = parser.parse_args()
    count = args.count or (10**6 if args.quick else 10**7)
    repeat = args.repeat or (2 if args.quick else 3)
    per_rank = count // (MBS * WORLD)

    with scratch_directory(args.dir, "tp_bench_stream_", args.quick):
        indices = range(count)  # torch's samplers need only len()
        lengths = lognormal_lengths(np.random.default_rng(args.seed), count, 1000, 1.0)
        as_list = lengths.tolist()  # transformers converts its lengths to a list too

        def ours(order: str, consumed: int = 0) -> StreamSampler:
            grouping = dict(lengths=lengths, group_size=MBS) if order == "length_grouped" else {}
            return StreamSampler(count, consumed, MBS, RANK, WORLD, seed=args.seed, order=order, **grouping)

        def torch_random() -> BatchSampler:
            sampler = DistributedSampler(indices, WORLD, RANK, shuffle=True, seed=args.seed, drop_last=True)
            return BatchSampler(sampler, MBS, drop_last=True)

        def hf_grouped() -> BatchSampler:
            sampler = DistributedLengthGroupedSampler(
                MBS, num_replicas=WORLD, rank=RANK, seed=args.seed, lengths=as_list
            )
            return BatchSampler(sampler, MBS, drop_last=True)

        for name, make in (("ours random", lambda: ours("random")), ("torch", torch_random), ("hf", hf_grouped)):
            got = drain(make())
            if abs(got - per_rank) > 1:
                raise SystemExit(f"{name}: {got} micro-batches in an epoch, expected about {per_rank}")
        half = ours("random")
        drain(itertools.islice(iter(half), per_rank // 2))
        state = half.state_dict()

        def resume_ours() -> list[int]:
            sampler = ours("random")
            sampler.load_state_dict(state)
            return next(iter(sampler))

        def resume_torch() -> list[int]:
            return next(itertools.islice(iter(torch_random()), per_rank // 2, None))

        if (
            resume_ours()
            != half.global_stream(state["consumed_samples"], state["consumed_samples"] + 64)[24:32].tolist()
        ):
            raise SystemExit("StreamSampler resumed at the wrong place")

        t_random, t_torch, t_grouped, t_hf, t_resume, t_skip = best_of_each(
            [
                lambda: drain(ours("random")),
                lambda: drain(torch_random()),
                lambda: drain(ours("length_grouped")),
                lambda: drain(hf_grouped()),
                resume_ours,
                resume_torch,
            ],
            repeat,
        )
        case = f"{count:,} samples, rank {RANK} of {WORLD}, mbs {MBS}"
        rows = [
            Row("random epoch", case, "s", t_random, t_torch, "torch DistributedSampler", lower_is_better=True),
            Row("grouped epoch", case, "s", t_grouped, t_hf, "transformers DistLengthGrouped", lower_is_better=True),
            Row("resume mid-epoch", case, "s", t_resume, t_skip, "torch sampler, skipping", lower_is_better=True),
        ]
        print_table(rows)


if __name__ == "__main__":
    main()

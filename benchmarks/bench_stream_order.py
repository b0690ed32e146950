"""StreamSampler's orders: "feistel" (ids computed per position) vs "random" (the epoch's permutation built).

One data-parallel rank (rank 3 of 8, micro batch 8) of an epoch of N samples; both sides yield
lists of Python ints, what a DataLoader's batch_sampler hands on. Times are the best of R runs
(time.perf_counter), sides in turns; memory is tracemalloc's peak over one resume (numpy's
arrays are traced), measured in a separate, untimed run.

    python benchmarks/bench_stream_order.py                     # N = 10^6 and 10^7
    python benchmarks/bench_stream_order.py --counts 1000000000 --repeat 1

Rows (per N):
  resume              load_state_dict half an epoch in, then the first micro-batch: what a restart
                      (and, for "random", every epoch start) costs before training goes on.
  per 1000 batches    3 * 4096 micro-batches (fewer if the epoch ends first) in steady state: after
                      the first 8192 of an epoch (untimed, with the order built), per 1000.
  resume peak memory  what tracemalloc saw allocated at once during a resume (MB).
"""

from __future__ import annotations

import argparse
import itertools
import tracemalloc
from collections.abc import Iterator

from _harness import Row, best_of_each, print_table
from tokenport.sampling import StreamSampler

RANK, WORLD, MBS = 3, 8, 8
BATCHES = 3 * 4096  # three of StreamSampler's chunks of micro-batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10**6, 10**7], help="epoch sizes N")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--skip-random-above", type=int, default=None, help="time only feistel for larger N")
    args = parser.parse_args()

    rows: list[Row] = []
    for count in args.counts:
        position = (count // 2) // (MBS * WORLD) * (MBS * WORLD)
        orders = ["feistel"]
        if args.skip_random_above is None or count <= args.skip_random_above:
            orders.append("random")

        def resume(order: str, count: int = count, position: int = position) -> list[int]:
            sampler = StreamSampler(count, 0, MBS, RANK, WORLD, seed=args.seed, order=order)
            sampler.load_state_dict({**sampler.state_dict(), "consumed_samples": position, "epoch": 0})
            return next(iter(sampler))

        running: dict[str, Iterator[list[int]]] = {}
        warm = 2 * 4096  # StreamSampler's chunks grow from 16 to 4096 micro-batches over the first 8176

        def start(order: str, count: int = count) -> None:
            """Untimed: a sampler at an epoch start, its first chunks drawn (and the order built, for random)."""
            running[order] = iter(StreamSampler(count, 0, MBS, RANK, WORLD, seed=args.seed, order=order))
            for _ in itertools.islice(running[order], warm):
                pass

        per_run = min(BATCHES, -(-count // (MBS * WORLD)) - warm)  # fewer if the epoch ends first

        def run(order: str, per_run: int = per_run) -> int:
            return sum(1 for _ in itertools.islice(running[order], per_run))

        reference = StreamSampler(count, 0, 1, 0, 1, seed=args.seed, order="feistel")
        expected = reference.global_stream(position, position + MBS * WORLD)[RANK * MBS : (RANK + 1) * MBS]
        if resume("feistel") != expected.tolist():
            raise SystemExit("feistel resumed at the wrong place")
        if "random" in orders and sorted(resume("random")) == sorted(resume("feistel")):
            raise SystemExit("random and feistel drew the same batch: the orders are not distinct")

        peaks = {}
        for order in orders:
            tracemalloc.start()
            resume(order)
            peaks[order] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

        timed = best_of_each([lambda o=o: resume(o) for o in orders], args.repeat)
        batch_times = best_of_each(
            [lambda o=o: run(o) for o in orders], args.repeat, [lambda o=o: start(o) for o in orders]
        )
        case = f"N={count:,}, rank {RANK} of {WORLD}, mbs {MBS}"
        if "random" in orders:
            rows += [
                Row("resume", case, "s", timed[0], timed[1], 'order="random"', lower_is_better=True),
                Row(
                    "per 1000 batches",
                    case,
                    "s",
                    batch_times[0] / per_run * 1000,
                    batch_times[1] / per_run * 1000,
                    'order="random"',
                    lower_is_better=True,
                ),
                Row(
                    "resume peak memory",
                    case,
                    "MB",
                    peaks["feistel"] / 1e6,
                    peaks["random"] / 1e6,
                    'order="random"',
                    lower_is_better=True,
                ),
            ]
        else:
            print(
                f"{case}: feistel only: resume {timed[0] * 1e3:.2f} ms, per micro-batch "
                f"{batch_times[0] / per_run * 1e6:.2f} us, resume peak {peaks['feistel'] / 1e6:.1f} MB"
            )
    if rows:
        print_table(rows)


if __name__ == "__main__":
    main()

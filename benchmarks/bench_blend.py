"""tokenport blending indices vs megatron-core's build_blending_indices, on the same weights.

Both sides build the full (dataset_index, dataset_sample_index) pair in the same process, the
outputs freshly allocated for every run. Every figure is the best of N runs timed with
time.perf_counter, the sides timed in turns (A B A B ...).

    python benchmarks/bench_blend.py            # the full run (about 5 minutes)
    python benchmarks/bench_blend.py --quick    # a small run (under a minute)

Sections:
  speed   size 10^8 (quick 10^7), n = 2, 16, 256 Dirichlet(1) weights: tokenport's default
          (Tijdeman) and its algorithm="megatron" against megatron-core's C++ helper. A goal-less
          row shows each blend's quality, max |C_i(t) - t w_i| (lower is better).
  huge    size 10^9 (quick 10^8) over n = 10^4 datasets, tokenport only, in a child process:
          build_dataset_index plus SampleIndexCheckpoints (the memory-lean pair), its peak RSS
          (getrusage ru_maxrss) against a 6 GiB limit. megatron's time is extrapolated from a
          run at 10^5 samples: its cost is linear in size x n.
  getitem BlendedDataset.__getitem__ against the child's own __getitem__ on the same (dataset,
          sample) pairs: the blend's overhead per sample (goal <= 2 us), measured over children
          that cost next to nothing (precise), and over GPT children (the real case, noisy).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

from _harness import Row, best_of_each, print_goals, print_table, scratch_directory
from tokenport.blend import SampleIndexCheckpoints, build_blending_indices, build_dataset_index, max_prefix_deviation

SPEED_DATASETS = (2, 16, 256)
HUGE_DATASETS = 10_000
MEMORY_LIMIT_MB = 6 * 1024
EXTRAPOLATE_FROM = 10**5


def import_megatron():
    """megatron-core's compiled helpers and its weight normalization, quietly (no TE/Apex warnings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import helpers_cpp
        from megatron.core.datasets.utils import normalize
    return helpers_cpp, normalize


def megatron_build(helpers, weights: list[float], size: int):
    """megatron's BlendedDataset build: int16/int64 outputs, then its C++ helper."""
    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(dataset_index, dataset_sample_index, weights, len(weights), size, False)
    return dataset_index, dataset_sample_index


def bench_speed(rows: list[Row], helpers, normalize, args) -> None:
    size = args.size
    for n in SPEED_DATASETS:
        weights = np.random.default_rng(args.seed + n).dirichlet(np.ones(n))
        theirs_weights = normalize(weights.tolist())
        theirs = megatron_build(helpers, theirs_weights, size)
        mine = build_blending_indices(weights, size, algorithm="megatron")
        if not all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(mine, theirs)):
            raise SystemExit(f"speed: algorithm='megatron' differs from megatron-core at n={n}")
        quality_theirs = max_prefix_deviation(theirs[0], weights)
        del mine, theirs
        ours = build_blending_indices(weights, size)
        quality_ours = max_prefix_deviation(ours[0], weights)
        del ours
        t0 = time.perf_counter()
        t_ours, t_theirs, t_exact = best_of_each(
            [
                lambda: build_blending_indices(weights, size),
                lambda: megatron_build(helpers, theirs_weights, size),
                lambda: build_blending_indices(weights, size, algorithm="megatron"),
            ],
            args.repeat,
        )
        case = f"n={n}, size={size:.0e}"
        goal = 5.0 if n >= 256 else 1.0
        rows.append(
            Row("build, default (tijdeman)", case, "s", t_ours, t_theirs, "megatron C++", goal, lower_is_better=True)
        )
        rows.append(
            Row(
                "build, algorithm=megatron",
                case,
                "s",
                t_exact,
                t_theirs,
                "megatron C++",
                1.0 if n <= 16 else None,
                lower_is_better=True,
            )
        )
        rows.append(
            Row("max |C_i(t) - t w_i|", case, "dev", quality_ours, quality_theirs, "megatron C++", lower_is_better=True)
        )
        print(f"  n={n} done in {time.perf_counter() - t0:.1f} s", flush=True)


def huge_child(size: int, n: int, seed: int) -> None:
    """Build the lean pair for a huge blend and print times and peak RSS as JSON (run in a child)."""
    weights = np.random.default_rng(seed).dirichlet(np.ones(n))
    SampleIndexCheckpoints(build_dataset_index(weights, 1000), n)  # compile (or load) the kernels first
    t0 = time.perf_counter()
    dataset_index = build_dataset_index(weights, size)
    t1 = time.perf_counter()
    checkpoints = SampleIndexCheckpoints(dataset_index, n)
    t2 = time.perf_counter()
    probe = np.random.default_rng(seed).integers(0, size, 1000)
    checkpoints.take(probe)
    t3 = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "index_s": t1 - t0,
                "checkpoints_s": t2 - t1,
                "lookup_s": (t3 - t2) / len(probe),
                "peak_mb": peak_mb,
                "table_mb": checkpoints.counts.nbytes / 2**20,
            }
        )
    )


def bench_huge(rows: list[Row], helpers, normalize, args) -> None:
    size, n = args.huge_size, HUGE_DATASETS
    command = [sys.executable, __file__, "--huge-child", str(size), str(n), str(args.seed)]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    weights = normalize(np.random.default_rng(args.seed).dirichlet(np.ones(n)).tolist())
    (t_small,) = best_of_each([lambda: megatron_build(helpers, weights, EXTRAPOLATE_FROM)], args.repeat)
    t_theirs = t_small * size / EXTRAPOLATE_FROM
    ours = result["index_s"] + result["checkpoints_s"]
    case = f"n={n:,}, size={size:.0e}"
    rows.append(
        Row(
            "build, lean (index+checkpoints)",
            case,
            "s",
            ours,
            t_theirs,
            f"megatron C++ (extrapolated from {EXTRAPOLATE_FROM:.0e})",
            lower_is_better=True,
        )
    )
    rows.append(
        Row(
            "peak RSS, lean build",
            case,
            "MB",
            result["peak_mb"],
            MEMORY_LIMIT_MB,
            "limit 6 GiB",
            1.0,
            "<=6 GiB",
            lower_is_better=True,
        )
    )
    print(
        f"  huge: dataset_index {result['index_s']:.1f} s, checkpoints {result['checkpoints_s']:.1f} s "
        f"(table {result['table_mb']:.0f} MB), sample index lookup {result['lookup_s'] * 1e6:.1f} us, "
        f"peak RSS {result['peak_mb']:.0f} MB; megatron {t_small:.2f} s at {EXTRAPOLATE_FROM:.0e} samples, "
        f"x{size // EXTRAPOLATE_FROM:,} (linear in size x n) = {t_theirs:,.0f} s",
        flush=True,
    )


def bench_getitem(rows: list[Row], directory: str, args) -> None:
    """BlendedDataset.__getitem__ against reading the same (dataset, sample) from the child directly."""
    import tokenport as tp

    rng = np.random.default_rng(args.seed)
    prefixes = []
    for k in range(3):
        prefix = f"{directory}/store{k}"
        with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
            lengths = np.maximum(1, rng.lognormal(5.5, 1.0, 20_000)).astype(np.int64)
            tokens = rng.integers(3, 50_000, int(lengths.sum()))
            tokens[np.cumsum(lengths) - 1] = 2
            writer.add_documents(tokens, lengths)
        prefixes.append(prefix)
    config = tp.GPTSampleConfig(seq_length=256, eod_id=2)
    blend, _, _ = tp.build_datasets(
        tp.Blend(tuple(prefixes), (0.5, 0.3, 0.2)), sizes=(200_000, 0, 0), config=config, seed=args.seed, split="1"
    )
    ids = rng.integers(0, len(blend), args.getitem_samples).tolist()
    located = [blend.locate(i) for i in ids]
    children = blend.datasets

    def through_blend():
        for i in ids:
            blend[i]

    def direct():
        for d, k in located:
            children[d][k]

    # the same blend over children that cost next to nothing, so the blend's own work is what is timed
    trivial = tp.BlendedDataset.from_indices(
        [_Trivial(len(child)) for child in children], blend.dataset_index, blend.dataset_sample_index
    )
    trivial_children = trivial.datasets

    def through_trivial():
        for i in ids:
            trivial[i]

    def trivial_direct():
        for d, k in located:
            trivial_children[d][k]

    for fn in (through_blend, direct, through_trivial, trivial_direct):
        fn()
    t_blend, t_direct, t_trivial, t_trivial_direct = best_of_each(
        [through_blend, direct, through_trivial, trivial_direct], 7
    )
    count = len(ids)
    # the goal row is the precise one; with GPT children the difference drowns in their own jitter
    rows.append(
        Row(
            "BlendedDataset[i] overhead",
            f"3 trivial children (dict copied), {count:,} ids",
            "s/sample",
            max(t_trivial - t_trivial_direct, 1e-9) / count,
            2e-6,
            "the 2 us budget",
            1.0,
            "<=2 us",
            lower_is_better=True,
        )
    )
    rows.append(
        Row(
            "BlendedDataset[i] overhead",
            f"3 GPT children, seq 256, {count:,} ids",
            "s/sample",
            max(t_blend - t_direct, 1e-9) / count,
            2e-6,
            "the 2 us budget",
            lower_is_better=True,
        )
    )
    print(
        f"  getitem: blend {t_blend / count * 1e6:.2f} us, child directly {t_direct / count * 1e6:.2f} us; "
        f"trivial children {t_trivial / count * 1e6:.2f} vs {t_trivial_direct / count * 1e6:.2f} us",
        flush=True,
    )


class _Trivial:
    """A dataset whose samples cost nothing to make: a new one-key dict."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> dict:
        return {"tokens": k}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (10^7 and 10^8 samples)")
    parser.add_argument("--sections", default="speed,huge,getitem", help="comma-separated: speed,huge,getitem")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--huge-child", nargs=3, type=int, metavar=("SIZE", "N", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.huge_child:
        huge_child(*args.huge_child)
        return

    args.size = 10**7 if args.quick else 10**8
    args.huge_size = 10**8 if args.quick else 10**9
    args.repeat = 2 if args.quick else 3
    args.getitem_samples = 20_000 if args.quick else 100_000
    sections = set(args.sections.split(","))
    helpers, normalize = import_megatron()
    rows: list[Row] = []
    with scratch_directory(None, "bench_blend_", args.quick) as directory:
        if "speed" in sections:
            bench_speed(rows, helpers, normalize, args)
        if "huge" in sections:
            bench_huge(rows, helpers, normalize, args)
        if "getitem" in sections:
            bench_getitem(rows, directory, args)
    print()
    print_table(rows)
    print()
    print("ratio: baseline / tokenport (time, deviation, memory: higher is better).")
    print_goals(rows)


if __name__ == "__main__":
    main()

"""What merge's input verification costs: `tokenport.merge` with and without checking each input's
checksums as it streams, on stores written by tokenport's writer (files in the page cache).

    python benchmarks/bench_merge_verify.py            # 4 stores of ~100 MB (uint16), best of 3
    python benchmarks/bench_merge_verify.py --quick    # 2 stores of ~10 MB

The row's "baseline" is merge without verification (checksums=False); the goal is that verifying
costs at most 10% of merge time (ratio >= 1/1.10). The checksum algorithm is the one the writer
used: xxh3-64 with `xxhash` installed (tokenport[fast]), else blake2b-128.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, lognormal_lengths, print_table, scratch_directory
from tokenport.indexed.checksums import available_algorithm


def build_store(prefix: str, tokens: int, seed: int, algorithm: str | None = None) -> str:
    """A uint16 store of about ``tokens`` tokens in documents of realistic lengths (mean ~500)."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, max(1, tokens // 500), 500.0, 1.0)
    tokenizer = {"eod_id": 0, "vocab_size": 50000}
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, tokenizer=tokenizer, checksum=algorithm) as writer:
        for start in range(0, len(lengths), 100_000):
            part = lengths[start : start + 100_000]
            writer.add_documents(rng.integers(1, 50000, int(part.sum()), dtype=np.uint16), part)
    return prefix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="scratch directory (kept); default: a temporary one")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--algorithm",
        default=None,
        choices=("xxh3-64", "blake2b-128"),
        help="checksums of the inputs (default: fastest)",
    )
    args = parser.parse_args()
    stores, megabytes = (2, 10) if args.quick else (4, 100)
    with scratch_directory(args.dir, "tp-bench-merge-", args.quick) as directory:
        tokens = megabytes * 1_000_000 // 2
        inputs = [build_store(os.path.join(directory, f"in{k}"), tokens, k, args.algorithm) for k in range(stores)]
        size = sum(os.path.getsize(p + ".bin") for p in inputs)
        output = os.path.join(directory, "out")

        def merge(checksums: bool):
            return lambda: tp.merge(output, inputs, overwrite=True, checksums=checksums)

        merge(True)()  # warm the page cache and the output's directory
        plain, checked = best_of_each([merge(False), merge(True)], args.repeat)
        case = f"{stores} x {size / stores / 1e6:.0f} MB, {args.algorithm or available_algorithm()}"
        rows = [
            Row(
                "merge",
                case,
                "s",
                checked,
                plain,
                "unverified",
                goal=1 / 1.10,
                goal_text="<=10% cost",
                lower_is_better=True,
            ),
            Row("merge", case, "bytes/s", size / checked, size / plain, "unverified"),
        ]
        print_table(rows)
        print(
            f"verification cost: {100 * (checked / plain - 1):+.1f}% of merge time ({plain:.3f} s -> {checked:.3f} s)"
        )


if __name__ == "__main__":
    main()

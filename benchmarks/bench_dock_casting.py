"""What refusing values that do not fit costs a dock put: the checked cast vs numpy's unchecked one.

Dock.put casts each column's values to the column's dtype. It used numpy's ``astype`` after a
``same_kind`` dtype check, which wraps (2**40 into int32 is 0); it now range-checks with min/max
on the input (tokenport.dock.casting.fitted). Inputs whose dtype is the column's, or whose whole
range fits it, are cast as before and not checked (bench_dock.py's workload is all of that kind).
Here the inputs that are checked, ~1M items each (one GRPO step's responses):

  int64 -> int32       tokens from Python lists or torch int64 (min/max, then the cast)
  uint64 -> int64      ids from an unsigned source (min/max, then the cast)
  int64 padded -> int32  a Padded (rows, width) batch, padding included in min/max
  float64 -> float32   log-probs in float64 (the cast, then min/max of the result for inf)

Rate = input bytes / time, best of N, the two sides in turns; ratio = checked / unchecked (1.0:
free; 0.5: the put's cast takes twice as long).

    python benchmarks/bench_dock_casting.py            # 2**20 items, best of 20
    python benchmarks/bench_dock_casting.py --quick    # 2**16 items, best of 5
"""

from __future__ import annotations

import argparse

import numpy as np

from _harness import Row, best_of_each, print_table
from tokenport.dock.casting import fitted


def unchecked(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """What Dock.put did before: a same_kind dtype check, then a cast that may wrap."""
    if not np.can_cast(values.dtype, dtype, casting="same_kind"):
        raise TypeError(f"{values.dtype} -> {dtype}")
    return values.astype(dtype, copy=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2**16 items, best of 5")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    items = 2**16 if args.quick else 2**20
    repeat = args.repeat or (5 if args.quick else 20)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 150_000, items)
    cases = [
        ("int64 -> int32", tokens, np.dtype(np.int32), None),
        ("uint64 -> int64", tokens.astype(np.uint64), np.dtype(np.int64), None),
        (
            "int64 padded -> int32",
            tokens.reshape(1024, -1),
            np.dtype(np.int32),
            rng.integers(0, items // 1024 + 1, 1024),
        ),
        ("float64 -> float32", -rng.exponential(2.0, items), np.dtype(np.float32), None),
    ]
    print(f"  numpy {np.__version__}, {items:,} items per put")
    rows = []
    for name, values, dtype, lengths in cases:
        assert np.array_equal(fitted(values, dtype, "column 'x'", lengths=lengths), unchecked(values, dtype))
        t_checked, t_unchecked = best_of_each(
            [lambda: fitted(values, dtype, "column 'x'", lengths=lengths), lambda: unchecked(values, dtype)], repeat
        )
        rows.append(
            Row("put cast", name, "B/s", values.nbytes / t_checked, values.nbytes / t_unchecked, "astype (unchecked)")
        )
    print_table(rows)
    print("\nratio: checked rate / unchecked rate (1.0: the check is free).")


if __name__ == "__main__":
    main()

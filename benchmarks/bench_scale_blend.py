"""A blend of 10^5 tiny stores: build its indices, then reopen them from the index cache; time and memory.

N stores of 20 short documents each (uint16, 4..39 tokens, written by _tiny_stores.py: the writer's
bytes without its per-store fsyncs), equal weights, seq_length 16, 10 samples per store in the blend
(split "1,0,0", the default algorithm). Each phase runs in a fresh process (imports and numba's
start-up are timed apart and not counted):

  build    build_datasets(..., cache=DIR) with an empty cache: indices built, one cache entry written
  reopen   the same call in a new process: the entry found through the stat record and mapped
  first batch  reopen, then read samples 0..31 of the blend

Memory is the process's peak resident set (ru_maxrss) after the phase, less the one after the
imports. Both phases check the blend: its length, and the first batch's tokens summed (the same
in both phases).

    python benchmarks/bench_scale_blend.py                    # N = 10^4 and 10^5
    python benchmarks/bench_scale_blend.py --stores 100000    # one size
    python benchmarks/bench_scale_blend.py --quick            # N = 10^3

No peer, no goal (bench_many_stores.py compares with megatron-core up to 10^4 stores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

SEQ_LENGTH = 16
SAMPLES_PER_STORE = 10
BATCH = 32
SEED = 1234


def child(store_dir: str, count: int, cache: str) -> None:
    """One phase in this (fresh) process; prints a JSON line."""
    started = time.perf_counter()
    from numba.core.registry import cpu_target

    import tokenport as tp
    import tokenport.builder.datasets  # noqa: F401  (what build_datasets loads)
    import tokenport.samples.gpt  # noqa: F401

    cpu_target.target_context.refresh()  # numba's start-up, a fixed cost of the process
    out: dict = {"imports": time.perf_counter() - started}
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    prefixes = [os.path.join(store_dir, f"s{k:06d}") for k in range(count)]
    spec = [x for prefix in prefixes for x in ("1", prefix)]
    config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=2)
    started = time.perf_counter()
    train, _, _ = tp.build_datasets(
        spec, sizes=[SAMPLES_PER_STORE * count, 0, 0], config=config, seed=SEED, split="1,0,0", cache=cache
    )
    out["build"] = time.perf_counter() - started
    out["peak_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    tokens = train.get_batch(np.arange(BATCH))["tokens"]
    out["first_batch"] = time.perf_counter() - started
    out["samples"] = len(train)
    out["tokens_sum"] = int(tokens.astype(np.int64).sum())
    print(json.dumps(out))


def run_child(store_dir: str, count: int, cache: str) -> dict:
    """Run ``child`` in a fresh interpreter and return its JSON."""
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--dir", store_dir, "--count", str(count)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH", "")])))
    done = subprocess.run([*cmd, "--cache", cache], capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(lines[-1])


def main() -> None:
    from _harness import Row, print_table
    from _tiny_stores import write_tiny_stores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, nargs="+", default=[10_000, 100_000], help="store counts N")
    parser.add_argument("--root", default=None, help="directory for stores and caches (default: one in /dev/shm)")
    parser.add_argument("--quick", action="store_true", help="N = 10^3")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.dir, args.count, args.cache)
        return
    import tempfile

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # tmpfs: 3 files a store, 10^5 stores in minutes
    root = args.root or tempfile.mkdtemp(prefix="bench_scale_blend-", dir=shm)
    rows: list[Row] = []
    nan = math.nan
    for count in [1_000] if args.quick else args.stores:
        started = time.perf_counter()
        store_dir = os.path.join(root, f"stores{count}")
        write_tiny_stores(store_dir, count)
        print(f"{count:,} stores ready in {time.perf_counter() - started:.1f} s ({store_dir})", flush=True)
        cache = os.path.join(root, f"cache{count}")
        shutil.rmtree(cache, ignore_errors=True)
        build, reopen = run_child(store_dir, count, cache), run_child(store_dir, count, cache)
        if (build["samples"], build["tokens_sum"]) != (reopen["samples"], reopen["tokens_sum"]):
            raise AssertionError(f"{count} stores: the reopened blend differs from the built one")
        for phase, result in (("build", build), ("reopen", reopen)):
            rows.append(Row("scale blend", f"{count:,} stores, {phase}", "s", result["build"], nan, "-"))
            rows.append(
                Row("scale blend", f"{count:,} stores, {phase} + first batch", "s", result["first_batch"], nan, "-")
            )
            rows.append(Row("scale blend", f"{count:,} stores, {phase} peak memory", "MB", result["peak_mb"], nan, "-"))
    print_table(rows)
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

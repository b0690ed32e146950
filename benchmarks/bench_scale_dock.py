"""A dock's bookkeeping at 10^5 - 10^7 rows and 10^3 consumers, in one process: latency per call, memory per row.

One ``tokenport.dock.Dock`` (no Ray) with 10^3 consumers (task names) and a staleness limit (the
asynchronous-RL setting: every put checks the rows' staleness for each consumer), one partition of
R rows and one tiny cell per row (a float32 reward): the bookkeeping, not the data, is measured.

  put      R rows put in calls of B rows (version 0)
  get      A consumers each take G batches of B rows (consumed at once)
  claim    C consumers each take one batch of B rows on lease (get with lease=), then
  ack      acknowledge it (the rows become consumed)
  set_version  one move of the policy version with no row too stale, timed once; then one that
           makes every row too stale for every consumer that has not consumed it (they expire, requeued)
  clear    the partition cleared, timed once

Latencies are time.perf_counter per call: p50 and p99 (ms). Memory is the partition's arrays
(``nbytes``, exact): "per row" is what a row costs with nobody having read it (cell, readiness,
versions, flags, age); "per row and reader" is the consumption (and lease) bytes each consumer that
read the partition adds per row. A (R x consumers) dock read by all consumers holds R * (per row +
consumers * per row and reader); at 10^7 x 10^3 that is ~10 GB of one-byte consumption flags, more than
the machine shares, so A is capped at --max-bitmap bytes of flags and the rest is the product above.

    python benchmarks/bench_scale_dock.py                  # R = 10^5, 10^6, 10^7
    python benchmarks/bench_scale_dock.py --quick          # R = 10^5
    python benchmarks/bench_scale_dock.py --rows 1000000   # one size

No peer, no goal: the figures are the simulation's.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from _harness import Row, print_table
from tokenport.dock import Column, Dock

CONSUMERS = 1_000
BATCH = 1_024


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def partition_bytes(dock: Dock) -> tuple[int, int]:
    """(the partition's per-row arrays but consumption and leases, consumption and lease bytes)."""
    p = dock.state.partition("p")
    flags = sum(b.nbytes for b in (*p.consumed.values(), *p.leased.values()))
    rows = p.completed.nbytes + p.age.nbytes + p.dropped.nbytes + p.version_first.nbytes + p.version_last.nbytes
    rows += sum(b.nbytes for b in (*p.ready.values(), *p.fixed.values()))
    return rows, flags


def measure(rows: int, gets: int, claims: int, max_bitmap: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    consumers = [f"task{k:04d}" for k in range(CONSUMERS)]
    dock = Dock([Column("reward", np.float32)], consumers, max_staleness=4)
    dock.add_partition("p", rows)
    times: dict[str, list[float]] = {name: [] for name in ("put", "get", "claim", "ack", "set_version", "clear")}
    for start in range(0, rows, BATCH):
        ids = np.arange(start, min(rows, start + BATCH))
        cells = {"reward": ids.astype(np.float32)}
        times["put"].append(timed(lambda ids=ids, cells=cells: dock.put("p", cells, ids, version=0)))
    readers = max(1, min(CONSUMERS - claims, max_bitmap // rows))
    for consumer in consumers[:readers]:
        for _ in range(gets):
            times["get"].append(timed(lambda c=consumer: dock.get(c, ["reward"], BATCH, "p")))
    for consumer in consumers[CONSUMERS - claims :]:
        held = []
        times["claim"].append(timed(lambda c=consumer: held.append(dock.get(c, ["reward"], BATCH, "p", lease=600))))
        times["ack"].append(timed(lambda lease=held[0].lease_id: dock.ack(lease)))
    times["set_version"].append(timed(lambda: dock.set_version(1)))
    base, flags = partition_bytes(dock)
    memory = {"per row": base / rows, "per row and reader": flags / (rows * (readers + claims)), "readers": readers}
    times["set_version, every row too stale"] = [timed(lambda: dock.set_version(6))]
    times["clear"].append(timed(lambda: dock.clear("p")))
    return times, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**5, 10**6, 10**7], help="partition rows R")
    parser.add_argument("--gets", type=int, default=5, help="batches each reading consumer takes (G)")
    parser.add_argument("--claims", type=int, default=100, help="consumers that claim on lease (C)")
    parser.add_argument("--max-bitmap", type=int, default=2 * 10**9, help="bytes of consumption flags at most")
    parser.add_argument("--quick", action="store_true", help="R = 10^5 only")
    args = parser.parse_args()
    nan = math.nan
    result: list[Row] = []
    for rows in [10**5] if args.quick else args.rows:
        times, memory = measure(rows, args.gets, args.claims, args.max_bitmap)
        for call, seconds in times.items():
            ms = np.array(seconds) * 1e3
            case = f"{rows:,} rows, {CONSUMERS:,} consumers, {call}"
            if len(ms) > 1:
                result.append(Row("scale dock", f"{case} p50 ({len(ms)} calls)", "ms", float(np.median(ms)), nan, "-"))
                result.append(Row("scale dock", f"{case} p99", "ms", float(np.percentile(ms, 99)), nan, "-"))
            else:
                result.append(Row("scale dock", f"{case} (one call)", "ms", float(ms[0]), nan, "-"))
        readers = f"{int(memory['readers']) + args.claims} readers"
        result.append(Row("scale dock", f"{rows:,} rows, bytes per row", "bytes", memory["per row"], nan, "-"))
        result.append(
            Row(
                "scale dock",
                f"{rows:,} rows, bytes per row and reader ({readers})",
                "bytes",
                memory["per row and reader"],
                nan,
                "-",
            )
        )
        print(f"{rows:,} rows measured", flush=True)
    print_table(result)


if __name__ == "__main__":
    main()

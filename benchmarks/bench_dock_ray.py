"""tokenport.dock.ray.RayDock on a local Ray (2 CPUs), against moving the same bytes with plain Ray.

Workload: the same data as benchmarks/bench_dock.py (imported from it): 128 prompts x 8 samples
= 1024 rows, 6 columns (prompts, responses, old_log_prob, ref_log_prob, advantages ragged up to
4096 int32/float32 items per row; rewards one float32 per row), payload about 18 MB (the bytes of
all values, no padding). The producer hands its rows in 8 chunks of 128 rows, each ragged column
as `Padded` (a 2-D array padded to the chunk's longest row, about 71 MB in all) plus lengths; the
consumer gets all 6 columns in batches of 64 rows with the dock's default sampler (lowest ready
rows first) and receives `Packed` columns. `RayDock(..., shards=K)` runs a controller actor and K
shard actors; K = 1, 2, 4 on this 2-core machine. Each timed run uses a new partition of one
dock per K (add_partition untimed; the previous run's partition is dropped untimed); the dock's
actors are started once per K (untimed) and killed before the next K.

The ceiling ("Ray round trip, K actors"): K plain actors, the rows split among them by prompt
exactly as RayDock routes them (prompt % K). Put: for each of the 8 chunks, one call per actor
that carries that actor's rows of the chunk already packed (flat values + lengths per column,
prepared untimed; the payload bytes and nothing else), waited on as RayDock.put waits; the actor
keeps the arrays as Ray hands them over (zero-copy views of the object store: no copy in the
actor). Get: for each batch of 64 rows, one call per actor that holds rows of it, returning those
rows' arrays (stored per batch, so no gather either). So each byte is copied into the object
store once on the way in and once on the way out, with one actor call per chunk/batch and actor:
the least any Ray-actor store can do. "ray.put+get, one process" is cruder still: the driver
ray.put()s each chunk's packed arrays and ray.get()s them back (one copy in; the get maps the
shared memory), no actor at all.

Before timing, for each K, one full put + get is checked: every row served once, each row's
contents in all 6 columns equal to the source. Every throughput figure is the best of N runs
(time.perf_counter), tokenport and the ceiling timed in turns; latencies are percentiles over
individually timed calls.

    python benchmarks/bench_dock_ray.py            # 128 prompts (1024 rows), best of 5, 208 gets per K
    python benchmarks/bench_dock_ray.py --quick    # 32 prompts (256 rows), best of 5, 16 gets per K

Rows (ratio = tokenport / ceiling for rates, ceiling / tokenport for times: the fraction of the
ceiling tokenport reaches):
  put+get vs plain Ray actors, K = 1/2/4
                       the driver puts the 8 chunks, then gets every row in batches of 64;
                       rate = (payload put + payload gotten) / time. Goal (issue 28): >= 0.8 of the
                       ceiling at every K.
  put+get, Packed in   the same with each chunk's ragged columns converted to `Packed` before the
                       timed put (so the padding does not travel), conversion untimed.
  put / get alone      the two halves of the put+get runs, rate = payload / time.
  actors, K shards     a producer actor puts the 8 chunks (handed to it untimed, as `Padded`) while
                       a consumer actor gets batches of 64 as soon as they are ready, both given the
                       RayDock object; wall time from the driver's two calls until both return, and
                       the rate (2 x payload) / wall. Against the ceiling's sequential put+get time.
  ray.put+get, driver  tokenport's put+get rate (K=1) against the one-process ray.put/ray.get.
  get latency p50/p99  one get of 64 rows x 6 columns, data already in the dock (several
                       partitions filled untimed, each read to its end), timed call by call;
                       against the ceiling's fetch of the same 64 rows from K actors.
  call overhead p50    RayDock.all_consumed (one controller round trip, no data) and a 1-row get
                       of the fixed column rewards, against a no-op actor call.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster needs no token
import ray  # noqa: E402

from _harness import Row, best_of_each, print_table, scratch_directory  # noqa: E402
from bench_dock import (  # noqa: E402
    BATCH,
    CHUNKS,
    COLUMNS,
    CONSUMER,
    DTYPES,
    RAGGED,
    SAMPLES_PER_PROMPT,
    check_tokenport_batches,
    make_chunks,
    make_rows,
    payload_bytes,
    tokenport_chunks,
)
from tokenport.dock import Column, Packed, Padded  # noqa: E402
from tokenport.dock.ray import RayDock  # noqa: E402

SHARDS = (1, 2, 4)
CEILING = "Ray round trip"
GOAL = 0.8  # issue 28: put+get at >= 0.8 of plain Ray actors, at every K


# -- tokenport -------------------------------------------------------------------------------------


def new_ray_dock(shards: int) -> RayDock:
    return RayDock(
        [Column(name, DTYPES[name], ragged=name in RAGGED) for name in COLUMNS],
        [CONSUMER],
        SAMPLES_PER_PROMPT,
        shards=shards,
    )


def dock_put(dock: RayDock, partition: str, chunks) -> None:
    for rows, cols in chunks:
        dock.put(partition, cols, rows=rows)


def dock_get(dock: RayDock, partition: str, sink: list | None = None) -> int:
    got = 0
    while (batch := dock.get(CONSUMER, list(COLUMNS), count=BATCH, partition=partition, timeout=60.0)) is not None:
        got += batch.rows.size
        if sink is not None:
            sink.append(batch)
    return got


def packed_chunks(chunks):
    """The chunks with every Padded column converted to Packed (what a producer could send instead)."""

    def pack(v):
        if isinstance(v, Padded):
            mask = np.arange(v.values.shape[1]) < v.lengths[:, None]
            return Packed(v.values[mask], v.lengths)
        return v

    return [(rows, {name: pack(v) for name, v in cols.items()}) for rows, cols in chunks]


class Partitions:
    """Fresh partition names for one dock; `fresh()` drops the last one (untimed) and adds a new one."""

    def __init__(self, dock: RayDock, prompts: int, tag: str) -> None:
        self.dock, self.prompts, self.tag, self.count, self.current = dock, prompts, tag, 0, None

    def fresh(self) -> str:
        if self.current is not None:
            self.dock.drop_partition(self.current)
        self.count += 1
        self.current = f"{self.tag}-{self.count}"
        self.dock.add_partition(self.current, num_prompts=self.prompts)
        gc.collect()
        return self.current


# -- the ceiling: plain actors holding the packed bytes --------------------------------------------


class Holder:
    """A plain Ray actor that keeps what it is sent (Ray's zero-copy views) and returns it per batch."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, np.ndarray]]] = {}

    def store(self, pieces: dict[int, dict[str, np.ndarray]]) -> None:
        for batch, arrays in pieces.items():  # a batch may span two chunks (--quick: 32-row chunks)
            self.batches.setdefault(batch, []).append(arrays)

    def fetch(self, batch: int) -> list[dict[str, np.ndarray]]:
        return self.batches[batch]

    def clear(self) -> None:
        self.batches.clear()

    def noop(self) -> None:
        return None


def ceiling_plan(data, n: int, shards: int) -> list[list[tuple[int, dict]]]:
    """Per chunk, per actor: (actor, {batch: {column / column_lengths: packed arrays of its rows}})."""
    owner = (np.arange(n) // SAMPLES_PER_PROMPT) % shards
    plan = []
    for rows in np.array_split(np.arange(n), CHUNKS):
        calls = []
        for k in range(shards):
            pieces = {}
            for b in np.unique(rows // BATCH):
                mine = rows[(rows // BATCH == b) & (owner[rows] == k)]
                if not len(mine):
                    continue
                arrays = {}
                for name in COLUMNS:
                    if name in RAGGED:
                        arrays[name] = np.concatenate([data[name][r] for r in mine])
                        arrays[name + "_lengths"] = np.array([data[name][r].size for r in mine], dtype=np.int64)
                    else:
                        arrays[name] = np.ascontiguousarray(data[name][mine])
                pieces[int(b)] = arrays
            if pieces:
                calls.append((k, pieces))
        plan.append(calls)
    return plan


def batch_owners(n: int, shards: int) -> list[list[int]]:
    """Per batch of 64 rows, the actors that hold rows of it."""
    owner = (np.arange(n) // SAMPLES_PER_PROMPT) % shards
    return [sorted(set(owner[b * BATCH : (b + 1) * BATCH].tolist())) for b in range(-(-n // BATCH))]


def ceiling_put(holders, plan) -> None:
    for calls in plan:
        ray.get([holders[k].store.remote(pieces) for k, pieces in calls])


def ceiling_get(holders, owners) -> int:
    got = 0
    for b, ks in enumerate(owners):
        for pieces in ray.get([holders[k].fetch.remote(b) for k in ks]):
            got += sum(len(piece["rewards"]) for piece in pieces)
    return got


def ceiling_clear(holders) -> None:
    ray.get([h.clear.remote() for h in holders])
    gc.collect()


# -- producer and consumer actors --------------------------------------------------------------------


class Producer:
    def __init__(self, chunks) -> None:
        self.chunks = chunks

    def run(self, dock: RayDock, partition: str) -> float:
        for rows, cols in self.chunks:
            dock.put(partition, cols, rows=rows)
        return time.perf_counter()


class Consumer:
    def run(self, dock: RayDock, partition: str, columns: list[str], batch: int, consumer: str) -> tuple[int, float]:
        got = 0
        while (b := dock.get(consumer, columns, count=batch, partition=partition, timeout=60.0)) is not None:
            got += b.rows.size
        return got, time.perf_counter()


# -- checks ----------------------------------------------------------------------------------------


def fail(message: str) -> None:
    raise SystemExit(f"check failed: {message}")


def check(dock: RayDock, partition: str, data, chunks, n: int, shards: int) -> None:
    """One full put + get: every row served once, each row's contents in all columns exact."""
    dock_put(dock, partition, chunks)
    batches: list = []
    dock_get(dock, partition, sink=batches)
    if not dock.all_consumed(CONSUMER, partition):
        fail(f"K={shards}: not every row consumed")
    check_tokenport_batches(f"K={shards}", batches, data, n)
    print(
        f"  checked K={shards}: each of the {n:,} rows served once, all {len(COLUMNS)} columns exact "
        f"({len(batches)} batches)",
        flush=True,
    )


def check_ceiling(holders, owners, plan, data, n: int) -> None:
    """The ceiling returns the same bytes too (its rows, per batch, in routing order)."""
    ceiling_put(holders, plan)
    owner = (np.arange(n) // SAMPLES_PER_PROMPT) % len(holders)
    for b, ks in enumerate(owners):
        pieces = ray.get([holders[k].fetch.remote(b) for k in ks])
        for k, piece in zip(ks, pieces):
            rows = np.arange(b * BATCH, min(n, (b + 1) * BATCH))
            rows = rows[owner[rows] == k]
            for name in RAGGED:
                if not np.array_equal(
                    np.concatenate([p[name] for p in piece]), np.concatenate([data[name][r] for r in rows])
                ):
                    fail(f"ceiling batch {b}: {name} differs")
    ceiling_clear(holders)


# -- measurements ----------------------------------------------------------------------------------


def percentiles(times: list[float]) -> tuple[float, float]:
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def bench_shards(
    rows: list[Row],
    shards: int,
    data,
    chunks,
    chunks_packed,
    n: int,
    prompts: int,
    payload: int,
    holders,
    producer,
    consumer,
    args,
) -> float | None:
    """Every measurement for one K (a new RayDock, killed at the end); returns the K=1 put+get rate."""
    case = f"{n:,} rows, {len(COLUMNS)} cols, {payload / 1e6:,.1f} MB"
    both = 2 * payload
    t0 = time.perf_counter()
    dock = new_ray_dock(shards)
    parts = Partitions(dock, prompts, f"K{shards}")
    check(dock, parts.fresh(), data, chunks, n, shards)  # also the warm-up of every actor
    holders = holders[:shards]
    plan, owners = ceiling_plan(data, n, shards), batch_owners(n, shards)
    check_ceiling(holders, owners, plan, data, n)

    # driver: put+get, tokenport (Padded in, Packed in) and the ceiling, in turns
    split: dict[str, list[tuple[float, float]]] = {"tp": [], "tp_packed": [], "ceiling": []}
    state: dict = {}

    def timed(key, put, get):
        def run():
            t = time.perf_counter()
            put()
            t_put = time.perf_counter()
            got = get()
            split[key].append((t_put - t, time.perf_counter() - t_put))
            if got != n:
                fail(f"K={shards} {key}: got {got} rows, not {n}")

        return run

    def fresh_dock():
        state["part"] = parts.fresh()

    fns = [
        timed("tp", lambda: dock_put(dock, state["part"], chunks), lambda: dock_get(dock, state["part"])),
        timed("tp_packed", lambda: dock_put(dock, state["part"], chunks_packed), lambda: dock_get(dock, state["part"])),
        timed("ceiling", lambda: ceiling_put(holders, plan), lambda: ceiling_get(holders, owners)),
    ]
    t_tp, t_tp_packed, t_ceiling = best_of_each(
        fns, args.repeat, setups=[fresh_dock, fresh_dock, lambda: ceiling_clear(holders)]
    )
    name = f"{CEILING}, {shards} actor{'s' if shards > 1 else ''}"
    k = f"K={shards}"
    rows.append(
        Row("put+get vs plain Ray actors", f"K = {shards}", "B/s", both / t_tp, both / t_ceiling, name, goal=GOAL)
    )
    rows.append(Row(f"put+get, {k}, Packed in", case, "B/s", both / t_tp_packed, both / t_ceiling, name))
    best = {key: np.min(np.array(v), axis=0) for key, v in split.items()}
    rows.append(Row(f"put alone, {k}", case, "B/s", payload / best["tp"][0], payload / best["ceiling"][0], name))
    rows.append(
        Row(
            f"put alone, {k}, Packed in",
            case,
            "B/s",
            payload / best["tp_packed"][0],
            payload / best["ceiling"][0],
            name,
        )
    )
    rows.append(Row(f"get alone, {k}", case, "B/s", payload / best["tp"][1], payload / best["ceiling"][1], name))
    if shards == 1:
        state["driver_rate"] = both / t_tp
    ceiling_clear(holders)

    # a producer actor and a consumer actor, concurrently, on the same dock
    walls: list[tuple[float, float]] = []

    def actors_pair():
        part = state["part"]
        t = time.perf_counter()
        (got, got_done), put_done = ray.get(
            [consumer.run.remote(dock, part, list(COLUMNS), BATCH, CONSUMER), producer.run.remote(dock, part)]
        )
        wall = time.perf_counter() - t
        if got != n:
            fail(f"K={shards} actors: the consumer got {got} rows, not {n}")
        walls.append((wall, max(got_done - put_done, 0.0)))

    fresh_dock()
    actors_pair()  # warm-up: the actors' first use of this dock's handles
    walls.clear()
    best_of_each([actors_pair], args.repeat, setups=[fresh_dock])
    wall = min(w for w, _ in walls)
    drain = float(np.median([d for _, d in walls]))
    rows.append(Row(f"actors, {k}: wall", case, "s", wall, t_ceiling, f"{name}, sequential", lower_is_better=True))
    rows.append(Row(f"actors, {k}", case, "B/s", both / wall, both / t_ceiling, f"{name}, sequential"))
    dock.drop_partition(parts.current)
    parts.current = None

    # latency of single gets, data in place
    per_part = -(-n // BATCH)
    fills = -(-args.gets // per_part)
    names = []
    for _ in range(fills):
        parts.count += 1
        names.append(f"lat-{shards}-{parts.count}")
        dock.add_partition(names[-1], num_prompts=prompts)
        dock_put(dock, names[-1], chunks)
    gc.collect()
    times = []
    for part in names:
        while True:
            t = time.perf_counter()
            batch = dock.get(CONSUMER, list(COLUMNS), count=BATCH, partition=part, timeout=60.0)
            times.append(time.perf_counter() - t)
            if batch is None:
                times.pop()  # the end-of-partition call is not a batch
                break
            del batch
    ceiling_put(holders, plan)
    ceiling_times = []
    for i in range(len(times)):
        b = i % len(owners)
        t = time.perf_counter()
        pieces = ray.get([holders[k].fetch.remote(b) for k in owners[b]])
        ceiling_times.append(time.perf_counter() - t)
        del pieces
    ceiling_clear(holders)
    p50, p99 = percentiles(times)
    c50, c99 = percentiles(ceiling_times)
    what = f"{BATCH} rows x {len(COLUMNS)} cols, {len(times)} gets"
    rows.append(Row(f"get latency p50, {k}", what, "s", p50, c50, name, lower_is_better=True))
    rows.append(Row(f"get latency p99, {k}", what, "s", p99, c99, name, lower_is_better=True))

    # per-call overheads: a controller round trip, a 1-row get, against a no-op actor call
    overhead = []
    for _ in range(args.calls):
        t = time.perf_counter()
        dock.all_consumed(CONSUMER, names[0])
        overhead.append(time.perf_counter() - t)
    small_part = f"small-{shards}"
    dock.add_partition(small_part, num_prompts=prompts)
    dock.put(small_part, {"rewards": data["rewards"]}, rows=np.arange(n))
    small = []
    for _ in range(min(args.calls, n)):
        t = time.perf_counter()
        dock.get(CONSUMER, ["rewards"], count=1, partition=small_part)
        small.append(time.perf_counter() - t)
    noop = []
    for _ in range(args.calls):
        t = time.perf_counter()
        ray.get(holders[0].noop.remote())
        noop.append(time.perf_counter() - t)
    n50 = percentiles(noop)[0]
    rows.append(
        Row(
            f"call p50, {k}",
            "all_consumed (controller only)",
            "s",
            percentiles(overhead)[0],
            n50,
            "no-op actor call",
            lower_is_better=True,
        )
    )
    rows.append(
        Row(
            f"call p50, {k}",
            "get 1 row x rewards",
            "s",
            percentiles(small)[0],
            n50,
            "no-op actor call",
            lower_is_better=True,
        )
    )
    dock.shutdown()
    print(
        f"  K={shards}: put {best['tp'][0] * 1e3:,.1f} ms + get {best['tp'][1] * 1e3:,.1f} ms "
        f"(Packed in: put {best['tp_packed'][0] * 1e3:,.1f} ms), ceiling put {best['ceiling'][0] * 1e3:,.1f} ms "
        f"+ get {best['ceiling'][1] * 1e3:,.1f} ms; actors wall {wall * 1e3:,.1f} ms (drain after last put, "
        f"median {drain * 1e3:,.1f} ms); get p50 {p50 * 1e3:,.2f} ms p99 {p99 * 1e3:,.2f} ms "
        f"[{time.perf_counter() - t0:,.1f} s]",
        flush=True,
    )
    return state.get("driver_rate")


def bench_driver_only(chunks_packed, payload: int, repeat: int) -> float:
    """ray.put each chunk's packed arrays from the driver and ray.get them back; (2 x payload) / time."""
    arrays = [{name: v.values if isinstance(v, Packed) else v for name, v in cols.items()} for _, cols in chunks_packed]
    arrays = [
        {**a, **{f"{name}_lengths": cols[name].lengths for name in RAGGED}}
        for a, (_, cols) in zip(arrays, chunks_packed)
    ]

    def run():
        for a in arrays:
            got = ray.get(ray.put(a))
            del got

    run()
    (t,) = best_of_each([run], repeat)
    return 2 * payload / t


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 prompts (256 rows) instead of 128, fewer timed calls")
    parser.add_argument("--prompts", type=int, default=None, help="number of prompts (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per side (default 5)")
    parser.add_argument("--gets", type=int, default=None, help="timed single gets per K (default 200, quick 16)")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per overhead row (default 200, quick 20)")
    parser.add_argument("--shards", type=int, nargs="+", default=list(SHARDS), help="values of K (default 1 2 4)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (unused: all in memory)")
    args = parser.parse_args(argv)
    prompts = args.prompts or (32 if args.quick else 128)
    args.repeat = args.repeat or 5
    args.gets = args.gets or (16 if args.quick else 200)
    args.calls = args.calls or (20 if args.quick else 200)
    n = prompts * SAMPLES_PER_PROMPT
    if n % BATCH or n % CHUNKS:
        raise SystemExit(f"{n} rows must divide into batches of {BATCH} and {CHUNKS} chunks")

    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_dock_ray_", args.quick):
        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        print(
            f"  ray {ray.__version__}, local cluster of {int(ray.cluster_resources().get('CPU', 0))} CPUs "
            f"(started in {time.perf_counter() - t0:,.1f} s)",
            flush=True,
        )
        try:
            data = make_rows(np.random.default_rng(args.seed), prompts)
            payload = payload_bytes(data)
            chunks = tokenport_chunks(make_chunks(data, n))
            chunks_packed = packed_chunks(chunks)
            padded = sum(
                v.values.nbytes + v.lengths.nbytes if isinstance(v, Padded) else v.nbytes
                for _, cols in chunks
                for v in cols.values()
            )
            print(
                f"  {n:,} rows x {len(COLUMNS)} columns, payload {payload / 1e6:,.1f} MB ({padded / 1e6:,.1f} MB "
                f"as the producer's Padded chunks); {CHUNKS} chunks, batches of {BATCH}; K = "
                f"{', '.join(map(str, args.shards))}",
                flush=True,
            )
            holder_actor = ray.remote(num_cpus=0)(Holder)
            holders = [holder_actor.remote() for _ in range(max(args.shards))]
            producer = ray.remote(num_cpus=0)(Producer).remote(chunks)
            consumer = ray.remote(num_cpus=0)(Consumer).remote()
            ray.get([h.noop.remote() for h in holders])
            driver_rate = None
            for shards in args.shards:
                rate = bench_shards(
                    rows, shards, data, chunks, chunks_packed, n, prompts, payload, holders, producer, consumer, args
                )
                driver_rate = rate if rate is not None else driver_rate
            if driver_rate is not None:
                raw = bench_driver_only(chunks_packed, payload, args.repeat)
                rows.append(
                    Row(
                        "put+get, K=1",
                        f"{n:,} rows, {payload / 1e6:,.1f} MB",
                        "B/s",
                        driver_rate,
                        raw,
                        "ray.put+get, one process",
                    )
                )
            for actor in (*holders, producer, consumer):
                ray.kill(actor)
        finally:
            ray.shutdown()
        print(f"  total {time.perf_counter() - t0:,.1f} s", flush=True)
    print()
    print_table(rows)
    print()
    print(
        "ratio: tokenport / ceiling (rates) or ceiling / tokenport (times): the fraction of plain Ray "
        f"tokenport reaches; goal: put+get >= {GOAL} of it at every K."
    )


if __name__ == "__main__":
    main()

"""RayDock against the real peers across processes, and its scaling with shards and clients.

Workload: bench_dock.py's data (128 prompts x 8 samples = 1024 rows, 5 ragged columns + rewards,
about 18 MB of values), put in 8 chunks of 128 rows and got in batches of 64. One run, one local Ray
(``num_cpus=16`` logical slots on this 2-core VM: TransferQueue's controller and each storage unit
reserve one, so 2 would not even start it; the slots do not change the two physical cores).

* RayDock (``shards=K``): the driver puts the chunks as ``Packed`` columns, then gets batches of 64
  (default sampler) until the partition is consumed.
* TransferDock: the real MindSpeed-RL ``GRPOTransferDock`` actor (transfer_dock_real.py loads it
  from the MindSpeed-RL sources), driven as MindSpeed-RL's workers drive it: each chunk padded
  with its own ``padding_dict_to_tensor_dict`` (untimed) and put with ``put_experience``; gets with
  ``get_experience("actor_train", columns, 64)`` (whole prompt groups, its default). One actor: it
  has no shards; compared with RayDock at K = 2.
* TransferQueue: the real ``transfer_queue`` (0.1.11), ``SimpleStorage`` with K storage units,
  driven as verl does: ``tq.init(conf)``, ``client.put(data=TensorDict, partition_id=...)`` per
  chunk (ragged columns as jagged nested tensors, built untimed), then ``client.get_meta(fields,
  64, partition, mode="fetch", task_name=...)`` + ``client.get_data(meta)`` per batch.

Before timing, each side's full put + get is checked: every row served once, responses and
rewards equal to the source. Rates: (payload put + payload got) / time, best of N runs; get latency
percentiles over every timed get of those runs (one get = the peer's whole get: get_meta +
get_data for TransferQueue).

Client scaling: C = 1, 8, 32 client actors (processes started untimed, each handed its share of
the chunks untimed) share one RayDock with K shards; each puts its rows (by prompt, chunks of up to
128 rows) and then gets batches of 64 until the partition is consumed. Wall time from the driver's
calls until all return; rate = 2 x payload / wall.

    python benchmarks/bench_dock_ray_scale.py            # 128 prompts, best of 3
    python benchmarks/bench_dock_ray_scale.py --quick    # 32 prompts, best of 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster needs no token
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import transfer_dock_real  # noqa: E402

GRPOTransferDock, padding_dict_to_tensor_dict, MINDSPEED_COMMIT = transfer_dock_real.load()  # before ray.init

import ray  # noqa: E402
import torch  # noqa: E402

from _harness import Row, print_table  # noqa: E402
from bench_dock import (  # noqa: E402
    BATCH,
    COLUMNS,
    RAGGED,
    SAMPLES_PER_PROMPT,
    make_chunks,
    make_rows,
    payload_bytes,
    tokenport_chunks,
)
from bench_dock_ray import new_ray_dock, packed_chunks  # noqa: E402
from tokenport.dock import Packed  # noqa: E402
from tokenport.dock.ray import RayDock  # noqa: E402

CONSUMER = "train"
TD_CONSUMER = "actor_train"


def fail(message: str) -> None:
    raise SystemExit(f"CHECK FAILED: {message}")


def percentile(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times), q))


# -- inputs, prepared untimed ----------------------------------------------------------------------


def td_chunks(data, chunks):
    """The chunks as MindSpeed-RL producers hand them to TransferDock: padded TensorDicts."""
    out = []
    for rows, _ in chunks:
        columns = {}
        for name in COLUMNS:
            if name in RAGGED:
                columns[name] = [torch.from_numpy(data[name][i]) for i in rows]
            else:
                columns[name] = [torch.from_numpy(data[name][i : i + 1]) for i in rows]
        out.append((rows.tolist(), padding_dict_to_tensor_dict(columns)))
    return out


def tq_chunks(data, chunks):
    """The chunks as TensorDicts with ragged columns as jagged nested tensors."""
    from tensordict import TensorDict

    out = []
    for rows, _ in chunks:
        fields = {}
        for name in COLUMNS:
            if name in RAGGED:
                fields[name] = torch.nested.nested_tensor(
                    [torch.from_numpy(data[name][i]) for i in rows], layout=torch.jagged
                )
            else:
                fields[name] = torch.from_numpy(np.ascontiguousarray(data[name][rows]))
        out.append(TensorDict(fields, batch_size=[len(rows)]))
    return out


# -- the three sides -------------------------------------------------------------------------------


class RayDockSide:
    def __init__(self, shards: int, prompts: int, chunks) -> None:
        self.dock, self.prompts, self.chunks, self.count = new_ray_dock(shards), prompts, chunks, 0

    def fresh(self) -> str:
        if self.count:
            self.dock.drop_partition(f"p{self.count}")
        self.count += 1
        self.dock.add_partition(f"p{self.count}", num_prompts=self.prompts)
        return f"p{self.count}"

    def run(self, latencies: list[float], sink: list | None = None) -> tuple[float, float]:
        partition = self.fresh()
        began = time.perf_counter()
        for rows, cols in self.chunks:
            self.dock.put(partition, cols, rows=rows)
        put = time.perf_counter() - began
        while True:
            t = time.perf_counter()
            batch = self.dock.get(CONSUMER, list(COLUMNS), BATCH, partition, timeout=60.0)
            if batch is None:
                break
            latencies.append(time.perf_counter() - t)
            if sink is not None:
                sink.append((batch.rows.tolist(), batch["responses"].to_list(), batch["rewards"].tolist()))
        return put, time.perf_counter() - began - put

    def close(self) -> None:
        self.dock.shutdown()


class TransferDockSide:
    def __init__(self, prompts: int, chunks) -> None:
        self.prompts, self.chunks, self.actor = prompts, chunks, None

    def fresh(self) -> None:
        if self.actor is not None:
            ray.kill(self.actor)
        self.actor = GRPOTransferDock.options(num_cpus=0).remote(
            prompts_num=self.prompts,
            n_samples_per_prompt=SAMPLES_PER_PROMPT,
            addition_columns=["rewards"],
            GBS_train=self.prompts,
        )
        ray.get(self.actor.get_cur_index.remote())

    def run(self, latencies: list[float], sink: list | None = None) -> tuple[float, float]:
        self.fresh()  # a new actor per run (untimed): TransferDock has no partitions to drop
        n = self.prompts * SAMPLES_PER_PROMPT
        began = time.perf_counter()
        for rows, tensors in self.chunks:
            ray.get(self.actor.put_experience.remote(data_dict=tensors, indexes=rows))
        put = time.perf_counter() - began
        for _ in range(n // BATCH):
            t = time.perf_counter()
            batch, indexes = ray.get(self.actor.get_experience.remote(TD_CONSUMER, list(COLUMNS), BATCH))
            latencies.append(time.perf_counter() - t)
            if batch is None:
                fail("TransferDock returned no batch although every row was put")
            if sink is not None:
                lengths = batch["original_length"].reshape(len(COLUMNS), -1)  # per column, in column order
                responses = batch["responses"]
                k = COLUMNS.index("responses")
                rows_resp = [responses[i, : int(lengths[k, i])].numpy() for i in range(len(indexes))]
                sink.append((list(indexes), rows_resp, batch["rewards"][:, 0].tolist()))
        return put, time.perf_counter() - began - put

    def close(self) -> None:
        if self.actor is not None:
            ray.kill(self.actor)


class TransferQueueSide:
    def __init__(self, units: int, chunks) -> None:
        import transfer_queue as tq
        from omegaconf import OmegaConf

        self.tq = tq
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": units}}}))
        self.client, self.chunks, self.count = tq.get_client(), chunks, 0

    def run(self, latencies: list[float], sink: list | None = None) -> tuple[float, float]:
        self.count += 1
        partition = f"p{self.count}"
        if self.count > 1:
            self.client.clear_partition(f"p{self.count - 1}")
        n = sum(len(c) for c in self.chunks)
        began = time.perf_counter()
        for chunk in self.chunks:
            self.client.put(data=chunk, partition_id=partition)
        put = time.perf_counter() - began
        for _ in range(n // BATCH):
            t = time.perf_counter()
            meta = self.client.get_meta(list(COLUMNS), BATCH, partition, mode="fetch", task_name=CONSUMER)
            batch = self.client.get_data(meta)
            latencies.append(time.perf_counter() - t)
            if sink is not None:
                responses = batch["responses"].unbind()
                sink.append((list(meta.global_indexes), [r.numpy() for r in responses], batch["rewards"].tolist()))
        return put, time.perf_counter() - began - put

    def close(self) -> None:
        self.tq.close()


def check(side, name: str, data, n: int, offset_of=None) -> None:
    """One full put + get: every row once, responses and rewards equal to the source."""
    sink: list = []
    side.run([], sink)
    seen = []
    for rows, responses, rewards in sink:
        for row, response, reward in zip(rows, responses, rewards, strict=True):
            row = int(row) if offset_of is None else offset_of(int(row))
            seen.append(row)
            if not np.array_equal(np.asarray(response), data["responses"][row]):
                fail(f"{name}: row {row} responses differ")
            if np.float32(reward) != data["rewards"][row]:
                fail(f"{name}: row {row} reward differs")
    if sorted(seen) != list(range(n)):
        fail(f"{name}: {len(seen)} rows served, not each of {n} once")
    print(f"  checked {name}: each of the {n:,} rows served once, responses and rewards exact", flush=True)


def report(name: str, put: float, get: float, latencies: list[float]) -> None:
    print(
        f"  {name}: put {put * 1e3:,.1f} ms + get {get * 1e3:,.1f} ms, get p50 "
        f"{percentile(latencies, 50) * 1e3:.2f} ms p99 {percentile(latencies, 99) * 1e3:.2f} ms",
        flush=True,
    )


def measure(side, repeat: int) -> tuple[float, float, float, list[float]]:
    """Best put+get time (with its put and get parts) over ``repeat`` runs, and every get latency."""
    latencies: list[float] = []
    best = (float("inf"), 0.0, 0.0)
    for _ in range(repeat):
        put, get = side.run(latencies)
        if put + get < best[0]:
            best = (put + get, put, get)
    return *best, latencies


# -- client scaling --------------------------------------------------------------------------------


class Client:
    """A client process: holds its share of the chunks (handed over untimed), puts them, then gets."""

    def load(self, chunks) -> int:
        self.chunks = chunks
        return len(chunks)

    def run(self, dock: RayDock, partition: str) -> int:
        for rows, cols in self.chunks:
            dock.put(partition, cols, rows=rows)
        got = 0
        while (batch := dock.get(CONSUMER, list(COLUMNS), BATCH, partition, timeout=120.0)) is not None:
            got += len(batch.rows)
        return got


def client_shares(data, n: int, clients: int):
    """Rows split among clients by prompt, each share in chunks of up to 128 rows, as Packed."""
    prompts = n // SAMPLES_PER_PROMPT
    shares = []
    for mine in np.array_split(np.arange(prompts), clients):
        rows = (mine[:, None] * SAMPLES_PER_PROMPT + np.arange(SAMPLES_PER_PROMPT)).ravel()
        chunks = []
        for part in np.array_split(rows, max(1, -(-len(rows) // 128))):
            cols = {}
            for name in COLUMNS:
                if name in RAGGED:
                    pieces = [data[name][i] for i in part]
                    cols[name] = Packed(np.concatenate(pieces), np.array([p.size for p in pieces]))
                else:
                    cols[name] = np.ascontiguousarray(data[name][part])
            chunks.append((part.astype(np.int64), cols))
        shares.append(chunks)
    return shares


def bench_clients(data, n: int, prompts: int, payload: int, shard_counts, client_counts, repeat: int):
    results = {}
    actors = [ray.remote(num_cpus=0)(Client).remote() for _ in range(max(client_counts))]
    for clients in client_counts:
        shares = client_shares(data, n, clients)
        ray.get([actor.load.remote(share) for actor, share in zip(actors, shares, strict=False)])
        for shards in shard_counts:
            dock = new_ray_dock(shards)
            best = float("inf")
            for attempt in range(repeat + 1):  # the first run warms the clients up (untimed)
                partition = f"c{clients}-{attempt}"
                dock.add_partition(partition, num_prompts=prompts)
                began = time.perf_counter()
                got = sum(ray.get([a.run.remote(dock, partition) for a in actors[:clients]]))
                wall = time.perf_counter() - began
                if got != n:
                    fail(f"K={shards}, {clients} clients: {got} rows got, not {n}")
                if attempt:
                    best = min(best, wall)
                dock.drop_partition(partition)
            dock.shutdown()
            results[(shards, clients)] = 2 * payload / best
            print(
                f"  K={shards}, {clients} clients: {best * 1e3:,.1f} ms, {2 * payload / best / 1e6:,.1f} MB/s",
                flush=True,
            )
    for actor in actors:
        ray.kill(actor)
    return results


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 prompts, best of 2")
    parser.add_argument("--prompts", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--units", type=int, nargs="+", default=[1, 2, 4], help="K: shards / storage units")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--skip", nargs="*", default=[], choices=["td", "tq", "clients"])
    args = parser.parse_args(argv)
    prompts = args.prompts or (32 if args.quick else 128)
    repeat = args.repeat or (2 if args.quick else 3)
    n = prompts * SAMPLES_PER_PROMPT
    data = make_rows(np.random.default_rng(0), prompts)
    payload = payload_bytes(data)
    chunks = make_chunks(data, n)
    packed = packed_chunks(tokenport_chunks(chunks))  # as bench_dock_ray.py's 'Packed in' puts
    ray.init(num_cpus=16, include_dashboard=False, log_to_driver=False, configure_logging=False)
    print(
        f"{n:,} rows, {payload / 1e6:.1f} MB payload, 8 chunks, batches of {BATCH}; "
        f"MindSpeed-RL {MINDSPEED_COMMIT[:10]}",
        flush=True,
    )
    rows: list[Row] = []
    size = f"{n} rows, {payload / 1e6:.1f} MB"

    ray_results = {}
    for k in args.units:
        side = RayDockSide(k, prompts, packed)
        check(side, f"RayDock K={k}", data, n)
        ray_results[k] = measure(side, repeat)
        side.close()
        total, put, get, lat = ray_results[k]
        report(f"RayDock K={k}", put, get, lat)
    if "td" not in args.skip:
        side = TransferDockSide(prompts, td_chunks(data, chunks))
        check(side, "TransferDock", data, n)
        td = measure(side, repeat)
        side.close()
        total, put, get, lat = td
        report("TransferDock", put, get, lat)
        k = 2 if 2 in ray_results else args.units[0]
        mine = ray_results[k]
        rows.append(
            Row(f"put+get, K={k}", size, "B/s", 2 * payload / mine[0], 2 * payload / td[0], "TransferDock actor", 5.0)
        )
        rows.append(
            Row(
                f"get p99, K={k}",
                "64 rows x 6 cols",
                "s",
                percentile(mine[3], 99),
                percentile(td[3], 99),
                "TransferDock actor",
                lower_is_better=True,
            )
        )
    if "tq" not in args.skip:
        tq_in = tq_chunks(data, chunks)
        for k in args.units:
            side = TransferQueueSide(k, tq_in)
            try:
                check(side, f"TransferQueue {k} units", data, n, offset_of=lambda g: g)
                tq = measure(side, repeat)
            finally:
                side.close()
            total, put, get, lat = tq
            report(f"TransferQueue {k} units", put, get, lat)
            mine = ray_results[k]
            rows.append(
                Row(
                    f"put+get, K={k}",
                    size,
                    "B/s",
                    2 * payload / mine[0],
                    2 * payload / tq[0],
                    f"TransferQueue, {k} units",
                    3.0,
                )
            )
            rows.append(
                Row(
                    f"get p99, K={k}",
                    "64 rows x 6 cols",
                    "s",
                    percentile(mine[3], 99),
                    percentile(tq[3], 99),
                    f"TransferQueue, {k} units",
                    2.0,
                    "p99 <= half",
                    lower_is_better=True,
                )
            )
    if "clients" not in args.skip:
        scaling = bench_clients(data, n, prompts, payload, args.units, args.clients, repeat)
        base = scaling[(args.units[0], args.clients[0])]
        for (k, c), rate in scaling.items():
            rows.append(
                Row(f"{c} clients, K={k}", size, "B/s", rate, base, f"K={args.units[0]}, {args.clients[0]} client")
            )
    print_table(rows)
    ray.shutdown()


if __name__ == "__main__":
    main()

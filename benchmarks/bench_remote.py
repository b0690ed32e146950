"""Random sample reads from S3: one GET per sample versus ObjectStoreSource (block cache + prefetch plan).

Setup. A moto S3 server on loopback holds one token file: 64 MiB of uint16 tokens, read
as Megatron-style samples of 2048+1 tokens (sample i = tokens[i*2048 : i*2048 + 2049], one
token shared with the next sample for the shifted labels), so 16,383 samples of 4,098 bytes.
The reader takes 10^4 of them in a random order: the first 10^4 entries of a random
permutation, i.e. one window of a shuffled epoch. The window holds 1.64x as many samples as
are drawn from it, within the 1.5-3x of the shuffle windows and buffers streaming loaders use,
and the shape of a Megatron epoch over a small dataset or a blend component. The order is
known in advance, so the reader calls `prefetch` with the next `--chunk` sample ranges, then
`read`s them one by one.

Why this size. At this density 61% of the file is wanted, so fetching the window in large
coalesced spans (kept in a cache that holds the window) transfers at most 1.64x the sample
bytes while cutting GETs by orders of magnitude. When samples are drawn sparsely from a far
larger dataset (10^4 out of 10^7), no reader can cut GETs without fetching unneeded bytes:
there one GET per sample is right (block_size about one sample, coalesce_gap 0), and `prefetch`
only adds concurrency. Use --dataset-mib / --samples to move between the two regimes.

GETs are counted from the moto server's own request log; bytes from what the clients received.

    PYTHONPATH=src python benchmarks/bench_remote.py
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import time
from typing import Callable, Sequence

import numpy as np

from tokenport.storage.remote import ObjectStoreSource, RemoteOptions

MIB = 1 << 20
BUCKET = "bench"
KEY = "tokens/train.bin"


class GetCounter(logging.Handler):
    """Counts GET requests in the moto (werkzeug) request log."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def emit(self, record: logging.LogRecord) -> None:
        if '"GET ' in record.getMessage():
            self.gets += 1


def start_server() -> tuple[object, str, GetCounter]:
    """A moto S3 server on a free loopback port, fake credentials, and a GET counter on its log."""
    from moto.server import ThreadedMotoServer

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "bench"
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    counter = GetCounter()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(counter)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}", counter


def upload(endpoint: str, n_tokens: int, seed: int) -> None:
    import boto3

    tokens = np.random.default_rng(seed).integers(0, 50_257, n_tokens, dtype=np.uint16)
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key=KEY, Body=tokens.tobytes())


def sample_order(n_samples: int, count: int, seed: int) -> np.ndarray:
    """`count` sample ids in training order: a shuffled epoch, repeated if more are asked than exist."""
    rng = np.random.default_rng(seed + 1)
    epochs = -(-count // n_samples)
    return np.concatenate([rng.permutation(n_samples) for _ in range(epochs)])[:count]


def run(name: str, body: Callable[[], tuple[bytes, int]], counter: GetCounter) -> dict[str, object]:
    before = counter.gets
    start = time.perf_counter()
    digest, fetched = body()
    return {"name": name, "gets": counter.gets - before, "bytes": fetched, "secs": time.perf_counter() - start, "digest": digest}


def one_get_per_sample(fs: object, url: str, ranges: Sequence[tuple[int, int]]) -> tuple[bytes, int]:
    h = hashlib.blake2b()
    fetched = 0
    for offset, length in ranges:
        data = fs.cat_file(url, start=offset, end=offset + length)
        fetched += len(data)
        h.update(data)
    return h.digest(), fetched


def through_source(source: ObjectStoreSource, ranges: Sequence[tuple[int, int]], chunk: int) -> tuple[bytes, int]:
    h = hashlib.blake2b()
    for lo in range(0, len(ranges), chunk or len(ranges)):
        batch = ranges[lo : lo + chunk] if chunk else ranges
        if chunk:
            source.prefetch(batch)
        for offset, length in batch:
            h.update(source.read(offset, length))
    return h.digest(), source.stats.bytes_fetched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset-mib", type=int, default=64, help="size of the token file")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per sample (plus one for labels)")
    parser.add_argument("--samples", type=int, default=10_000, help="samples read, in random order")
    parser.add_argument("--chunk", type=int, default=1024, help="samples per prefetch call")
    parser.add_argument("--block-kib", type=int, default=1024, help="RemoteOptions.block_size in KiB")
    parser.add_argument("--cache-mib", type=int, default=256, help="RemoteOptions.cache_bytes in MiB")
    parser.add_argument("--gap-kib", type=int, default=1024, help="RemoteOptions.coalesce_gap in KiB")
    parser.add_argument("--max-request-mib", type=int, default=64, help="RemoteOptions.max_request_bytes in MiB")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import s3fs

    n_tokens = args.dataset_mib * MIB // 2
    n_samples = (n_tokens - 1) // args.seq_len
    sample_bytes = (args.seq_len + 1) * 2
    order = sample_order(n_samples, args.samples, args.seed)
    ranges = [(int(i) * args.seq_len * 2, sample_bytes) for i in order]
    wanted = len(ranges) * sample_bytes

    server, endpoint, counter = start_server()
    try:
        upload(endpoint, n_tokens, args.seed)
        url = f"s3://{BUCKET}/{KEY}"
        options = RemoteOptions(
            block_size=args.block_kib * 1024,
            cache_bytes=args.cache_mib * MIB,
            coalesce_gap=args.gap_kib * 1024,
            max_request_bytes=args.max_request_mib * MIB,
            storage_options={"endpoint_url": endpoint},
        )
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.info(url)  # connect before timing
        results = [run("(a) one GET per sample (fs.cat_file)", lambda: one_get_per_sample(fs, url, ranges), counter)]
        for name, chunk in (("(b) ObjectStoreSource: block cache only", 0), ("(c) ObjectStoreSource: cache + prefetch", args.chunk)):
            source = ObjectStoreSource(url, options)
            results.append(run(name, lambda: through_source(source, ranges, chunk), counter))
            source.close()
    finally:
        server.stop()

    if len({r["digest"] for r in results}) != 1:
        raise SystemExit("the readers returned different bytes")
    print(
        f"dataset {args.dataset_mib} MiB, {n_samples:,} samples of {args.seq_len}+1 tokens ({sample_bytes} B); "
        f"{len(ranges):,} read in random order (window/draw = {n_samples / len(ranges):.2f}x), "
        f"{wanted / MIB:.1f} MiB of sample bytes"
    )
    print(
        f"options: block {args.block_kib} KiB, cache {args.cache_mib} MiB, coalesce gap {args.gap_kib} KiB, "
        f"max request {args.max_request_mib} MiB, prefetch chunk {args.chunk} samples\n"
    )
    base = results[0]
    header = f"{'reader':42} {'GETs':>7} {'MiB moved':>10} {'moved/wanted':>13} {'wall s':>8} {'fewer GETs':>11} {'speedup':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['name']:42} {r['gets']:>7,} {r['bytes'] / MIB:>10.1f} {r['bytes'] / wanted:>12.2f}x "
            f"{r['secs']:>8.2f} {base['gets'] / max(r['gets'], 1):>10.0f}x {base['secs'] / r['secs']:>7.1f}x"
        )
    best = results[-1]
    met = base["gets"] / max(best["gets"], 1) >= 10 and best["bytes"] <= 2 * wanted
    print(f"\ngoal (>= 10x fewer GETs, <= 2x the sample bytes) for (c): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()

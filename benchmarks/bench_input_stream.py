"""Streaming a raw input from S3: fsspec's own file (how corpus/inputs read URLs before issue 13)
versus `storage.open_source(url).stream()` (ranged GETs with the stores' retries, no block cache).

A moto S3 server on loopback holds one object of --mib MiB of random bytes; each reader reads it
front to back in 1 MiB reads (as the jsonl reader's buffered stream does) and the bytes are
checked. GETs are counted from moto's request log. Caveat: moto reads the whole object for every
ranged GET, so each GET costs more here than on a real store and the ratio favours fewer GETs.

    PYTHONPATH=src python benchmarks/bench_input_stream.py
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from _harness import best_of_each
from bench_remote import BUCKET, start_server
from tokenport.storage import open_source

MIB = 1 << 20
KEY = "corpus/big.jsonl"


def digest_of(open_stream: Callable[[], BinaryIO]) -> bytes:
    h = hashlib.sha256()
    with open_stream() as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.digest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import boto3
    import fsspec

    server, endpoint, counter = start_server()
    try:
        data = np.random.default_rng(0).integers(0, 256, args.mib * MIB, dtype=np.uint8).tobytes()
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key=KEY, Body=data)
        url, expected = f"s3://{BUCKET}/{KEY}", hashlib.sha256(data).digest()
        fs = fsspec.filesystem("s3", endpoint_url=endpoint)
        readers = {
            "fsspec file (before)": lambda: fs.open(url, "rb"),
            "open_source().stream()": lambda: open_source(url, endpoint_url=endpoint).stream(),
        }
        gets = {}
        for name, reader in readers.items():
            before = counter.gets
            assert digest_of(reader) == expected, name
            gets[name] = counter.gets - before
        seconds = best_of_each([lambda r=r: digest_of(r) for r in readers.values()], args.repeat)
        print(f"{args.mib} MiB object, read in 1 MiB reads, best of {args.repeat}")
        for (name, _), s in zip(readers.items(), seconds):
            print(f"  {name:24s} {s:7.3f} s  {args.mib / s:7.1f} MiB/s  {gets[name]:3d} GETs")
        print(f"  ratio (stream / fsspec): {seconds[1] / seconds[0]:.2f}x time")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""Streaming training samples from S3 into a DataLoader: tokenport vs MosaicML streaming (MDS), litData and
streaming-community (the maintained fork of MosaicML streaming).

Setup. One corpus of `--samples` samples of `--seq-length`+1 uint16 tokens (sample i's tokens are a
fixed function of i, so every reader checks every token it gets), written three ways: a tokenport
store (one document per sample), MDS shards (`mosaicml-streaming` 0.13.0, column
`ndarray:uint16`, 64 MiB shards) and litData optimized chunks (`litdata` 0.2.76, 64 MB chunks). All
three are uploaded to one moto S3 server on 127.0.0.1, read through one counting proxy in front of it
(tests/_support/s3_server.FaultProxy with no faults) that tallies GETs and body bytes per run. The
server and the proxy each run in a process of their own (`--role moto` / `--role proxy`), so no reader
or the driver shares their GIL; by default moto serves a ranged GET by slicing a kept copy of the
object (`--moto-ranges slice`; stock moto copies the whole object for every GET).

Each run is a fresh process reading `--read` samples of a shuffled epoch in batches of `--batch`
with `--workers` DataLoader workers (torch 2.13). tokenport runs with the defaults a user gets (no
RemoteOptions but the endpoint, so its node cache is the default one, $TOKENPORT_CACHE_DIR/blocks,
pointed at the run's cache): side `tokenport-loader` (the headline) is `StatefulLoader` over a remote
`GPTDataset`; side `tokenport` is an IterableDataset whose workers each plan their share of the order
(`IndexedDataset.prefetch`) and read with `get_many`. The peers use their own shuffled
`StreamingDataset` and loader with a local cache. Runs: cold (empty cache), warm (the cache the cold run left), and
budget (a cache budget of `--budget-mib`, smaller than the data). Reported: samples/s from the start
of the dataset's construction (imports excluded) to the last batch, time to first batch, GETs
and bytes moved per sample, peak and final local disk of the cache (sampled every 50 ms).

The peers cannot be installed beside tokenport's dev environment (mosaicml-streaming pins older
transformers/numpy), so they run in their own venv, made on first use at --peers-venv:
`pip install mosaicml-streaming==0.13.0 litdata==0.2.76 torch==2.13.0 boto3 numpy`, and
streaming-community 0.14.2 (the same `streaming` package name) in another at --community-venv. Its torchvision
wheel does not load against the CPU torch, so the peer runner stubs `streaming.vision` (unused here);
litData's obstore client is allowed plain http (moto's endpoint; real S3 is https), and MosaicML's
downloader drops the boto3 client the parent made before the workers fork (otherwise the workers share
its sockets and the first batch waits for a 60 s read timeout).

Goal rows: the loader cold (>= 1.5x) and warm (>= 2x) against the faster of MosaicML streaming and
litData, its first batch cold (< 0.5 s) and how often each block of the .bin was downloaded (<= 1.0).

    PYTHONPATH=src python benchmarks/bench_streaming.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20
BUCKET = "bench-streaming"
HERE = Path(__file__).resolve().parent
PEERS = ("litdata", "mosaic", "community")
PEER_NAMES = {
    "litdata": "litData 0.2.76",
    "mosaic": "MosaicML streaming 0.13.0",
    "community": "streaming-community 0.14.2",
}


def sample_tokens(ids: np.ndarray, width: int) -> np.ndarray:
    """The tokens of samples `ids` (a pseudo-random function of the id and position), shape (n, width)."""
    ids = np.asarray(ids, dtype=np.uint64)[:, None]
    j = np.arange(width, dtype=np.uint64)[None, :]
    x = ids * np.uint64(0x9E3779B97F4A7C15) + j * np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    return (x % np.uint64(50_257)).astype(np.uint16)


def shuffled_order(n_samples: int, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n_samples)[:count]


# --- writers (tokenport in this interpreter, the peers in their venv) -------------------


def write_tokenport(out: Path, n_samples: int, width: int) -> None:
    import tokenport as tp

    with tp.IndexedDatasetWriter(out / "tokenport" / "store", dtype=np.uint16) as writer:
        for lo in range(0, n_samples, 4096):
            ids = np.arange(lo, min(lo + 4096, n_samples))
            tokens = sample_tokens(ids, width)
            writer.add_documents(tokens.reshape(-1), np.full(len(ids), width, dtype=np.int64))


def write_peers(out: Path, n_samples: int, width: int) -> None:
    _stub_vision()
    from litdata import optimize
    from streaming import MDSWriter

    with MDSWriter(out=str(out / "mds"), columns={"tokens": "ndarray:uint16"}, size_limit=1 << 26) as writer:
        for lo in range(0, n_samples, 4096):
            for row in sample_tokens(np.arange(lo, min(lo + 4096, n_samples)), width):
                writer.write({"tokens": row})
    optimize(
        fn=_litdata_item,
        inputs=[(lo, min(lo + 1024, n_samples), width) for lo in range(0, n_samples, 1024)],
        output_dir=str(out / "litdata"),
        chunk_bytes="64MB",
        num_workers=1,
        mode="overwrite",
    )


def _litdata_item(task: tuple[int, int, int]):  # a generator: litData stores each yielded item
    lo, hi, width = task
    yield from sample_tokens(np.arange(lo, hi), width)


def _stub_vision() -> None:
    import types

    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))


# --- readers: one fresh process per run ---------------------------------------------------


def read_run(args: argparse.Namespace) -> dict[str, float]:
    """Read `args.read` samples with `args.workers` workers; timings of this run, as JSON on stdout."""
    import torch

    torch.set_num_threads(1)
    width = args.seq_length + 1
    _import_side(args.side)  # imports are not timed: each side's clock starts at its dataset
    _ids_of(sample_tokens(np.zeros(1, dtype=np.int64), width), width)  # the checker's table, not timed
    check = _check_gpt(args) if args.side == "tokenport-loader" else _check_samples(args.side, width)
    start = time.perf_counter()
    loader, expected_count = _loader(args, width)
    if hasattr(check, "prepare"):
        check.prepare(loader)
    first = None
    seen = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - start
        seen += check(batch, loader)
        if seen >= expected_count:
            break
    total = time.perf_counter() - start
    return {"first_batch_s": first or 0.0, "total_s": total, "samples": seen}


def _check_samples(side: str, width: int):
    """The check of a batch of whole samples (each names itself by its first tokens); its size."""

    def check(batch, loader) -> int:
        tokens = batch["tokens"] if isinstance(batch, dict) else batch
        tokens = np.asarray(tokens.numpy() if hasattr(tokens, "numpy") else tokens)
        tokens = tokens.reshape(-1, width)
        ids = _ids_of(tokens, width)
        if not np.array_equal(tokens, sample_tokens(ids, width)):
            raise SystemExit(f"{side}: wrong tokens")
        return len(tokens)

    return check


def _check_gpt(args: argparse.Namespace):
    """The check of a StatefulLoader's GPT batch: equal to the same samples of the local store
    (built before the clock starts; it also starts numba, which the benchmark counts with imports)."""
    import copy

    import tokenport as tp

    local = _gpt_dataset(tp.IndexedDataset(Path(args.data) / "tokenport" / "store"), args)
    local.get_batch([0])
    expected = []

    def check(batch, loader) -> int:
        want = local.get_batch(next(expected[0]))
        for name in ("tokens", "labels"):
            if not np.array_equal(batch[name].numpy(), want[name]):
                raise SystemExit(f"tokenport-loader: wrong {name}")
        return len(batch["tokens"])

    check.prepare = lambda loader: expected.append(iter(copy.copy(loader.sampler)))  # its batches, from the start
    return check


def _gpt_dataset(store, args: argparse.Namespace):
    import tokenport as tp

    config = tp.GPTSampleConfig(args.seq_length, args.seed)
    return tp.GPTDataset(store, np.arange(len(store)), args.read, config, args.seed)


def _import_side(side: str) -> None:
    if side.startswith("tokenport"):
        import s3fs  # noqa: F401

        import tokenport.indexed  # noqa: F401
        import tokenport.integrations.torch  # noqa: F401  (StatefulLoader: the peers' loaders import with them)
        import tokenport.samples.gpt  # noqa: F401
        import tokenport.storage.remote  # noqa: F401
    elif side == "litdata":
        import litdata  # noqa: F401
    else:
        _stub_vision()
        import streaming  # noqa: F401


_ID_BITS: dict[int, dict[int, int]] = {}


def _ids_of(tokens: np.ndarray, width: int) -> np.ndarray:
    """Sample ids from their tokens: a sample's first three tokens name it (all are checked by the caller)."""
    table = _ID_BITS.get(width)
    if table is None:
        n = int(os.environ["BENCH_SAMPLES"])
        table = dict(zip(_key(sample_tokens(np.arange(n), 3)).tolist(), range(n)))
        _ID_BITS[width] = table
    keys = _key(tokens)
    return np.array([table.get(k, 0) for k in keys.tolist()], dtype=np.int64)


def _key(tokens: np.ndarray) -> np.ndarray:
    t = tokens[:, :3].astype(np.int64)
    return (t[:, 0] * 50_257 + t[:, 1]) * 50_257 + t[:, 2]


def _loader(args: argparse.Namespace, width: int):
    import torch

    options = {"batch_size": None, "num_workers": args.workers}
    if args.workers:
        options["multiprocessing_context"] = "fork"
    if args.side == "tokenport":
        dataset = _TokenportStream(args, width)
        return torch.utils.data.DataLoader(dataset, **options), args.read
    if args.side == "tokenport-loader":
        return _tokenport_loader(args), args.read
    _stub_vision()
    if args.side == "litdata":
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming import downloader

        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # moto is plain http; S3 itself is https

        ld = StreamingDataset(
            f"s3://{BUCKET}/litdata",
            shuffle=True,
            seed=args.seed,
            cache_dir=args.cache,
            max_cache_size=f"{args.budget_mib}MB" if args.budget_mib else "100GB",
            storage_options={"endpoint_url": args.endpoint},
        )
        return StreamingDataLoader(ld, batch_size=args.batch, num_workers=args.workers), args.read
    from streaming import StreamingDataset

    ms = StreamingDataset(
        remote=f"s3://{BUCKET}/mds",
        local=args.cache,
        shuffle=True,
        shuffle_seed=args.seed,
        batch_size=args.batch,
        cache_limit=f"{args.budget_mib}mb" if args.budget_mib else None,
    )
    for stream in ms.streams:  # its downloader keeps the parent's boto3 client across fork (workers then
        stream._downloader.clean_up()  # share its sockets and hang until a 60 s timeout): one client each
    loader = torch.utils.data.DataLoader(ms, batch_size=args.batch, num_workers=args.workers)
    return loader, args.read


class _TokenportStream:
    """Per worker: its batches of the shuffled order (round robin, as the DataLoader hands them out),
    planned with one `prefetch`, read with `get_many`. An IterableDataset (made one when torch loads)."""

    def __new__(cls, args: argparse.Namespace, width: int):
        import torch

        class Stream(torch.utils.data.IterableDataset):
            def __init__(self) -> None:
                import tokenport as tp

                self.store = tp.IndexedDataset(f"s3://{BUCKET}/tokenport/store", remote_options=_options(args))
                self.order = shuffled_order(len(self.store), args.read, args.seed)

            def __iter__(self):
                info = torch.utils.data.get_worker_info()
                worker, workers = (info.id, info.num_workers) if info else (0, 1)
                batches = [self.order[b : b + args.batch] for b in range(0, len(self.order), args.batch)]
                mine = batches[worker::workers]
                self.store.prefetch([(i, 0, None) for ids in mine for i in ids.tolist()])
                for ids in mine:
                    tokens, _ = self.store.get_many(ids)
                    yield torch.from_numpy(tokens.reshape(len(ids), width))

        return Stream()


def _options(args: argparse.Namespace):
    """The defaults a user gets: only the endpoint is given. The node cache is then the default one,
    $TOKENPORT_CACHE_DIR/blocks (the driver points TOKENPORT_CACHE_DIR at the run's cache), and the
    .idx copy lands in $TOKENPORT_CACHE_DIR/objects. Budget runs bound the node cache; --block-kib
    overrides the block size."""
    from tokenport.storage.remote import RemoteOptions

    chosen = {"node_cache_bytes": args.budget_mib * MIB} if args.budget_mib else {}
    if args.block_kib:
        chosen["block_size"] = args.block_kib * 1024
    return RemoteOptions(storage_options={"endpoint_url": args.endpoint}, **chosen)


def _tokenport_loader(args: argparse.Namespace):
    """tokenport as a trainer uses it: StatefulLoader over a GPTDataset (seq_length tokens and labels)
    of the remote store; its workers read ahead (ReadAhead) through the node cache."""
    import tokenport as tp

    store = tp.IndexedDataset(f"s3://{BUCKET}/tokenport/store", remote_options=_options(args))
    return tp.StatefulLoader.for_dataset(
        _gpt_dataset(store, args),
        micro_batch_size=args.batch,
        seed=args.seed,
        fields=("tokens", "labels"),
        num_workers=args.workers,
        **({"multiprocessing_context": "fork"} if args.workers else {}),
    )


# --- the driver ----------------------------------------------------------------------------


PEER_PACKAGES = {
    "peers": ["mosaicml-streaming==0.13.0", "litdata==0.2.76"],
    "community": ["streaming-community==0.14.2"],
}


def ensure_venv(path: Path, which: str = "peers") -> Path:
    """The python of a peers' venv, made on first use, with torch pinned to 2.13.0 (this interpreter's
    site-packages are appended to the venv's path, after the venv's own, so its torch may satisfy the pin)."""
    python = path / "bin" / "python"
    if not python.exists():
        print(f"making the {which} venv at {path} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        import torch

        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        (Path(site) / "zz_tokenport_torch.pth").write_text(str(Path(torch.__file__).parent.parent) + "\n")
        packages = [*PEER_PACKAGES[which], "torch==2.13.0", "boto3", "numpy"]  # the pin keeps torchvision from
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)  # pulling a newer torch
    return python


def disk_usage(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


class DiskWatch(threading.Thread):
    """The peak size of the files under a directory, sampled every 50 ms."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.peak, self.stop = path, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, disk_usage(self.path))


def upload(client, directory: Path, prefix: str) -> None:
    for root, _, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            key = f"{prefix}/{path.relative_to(directory)}"
            client.upload_file(str(path), BUCKET, key)
            # one byte straight from moto, untimed and uncounted: with --moto-ranges slice its first GET
            # of a key copies the whole object (0.1-0.3 s for the 191 MiB .bin), which no real S3 does
            client.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-0")["Body"].read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=48_871, help="samples in the corpus")
    parser.add_argument("--seq-length", type=int, default=2048, help="tokens per sample, plus one")
    parser.add_argument("--read", type=int, default=20_000, help="samples read per run, in shuffled order")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-mib", type=int, default=64, help="cache budget of the budget runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--block-kib", type=int, default=0, help="tokenport's RemoteOptions.block_size in KiB (0: its default)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="cold and warm runs on a smaller corpus (8,192 samples, 4,096 read)"
    )
    parser.add_argument("--sides", default="tokenport-loader,litdata,mosaic,community")
    parser.add_argument("--peers-venv", default=str(Path.home() / ".cache" / "tokenport-bench" / "peers-venv"))
    parser.add_argument(
        "--community-venv",
        default=str(Path.home() / ".cache" / "tokenport-bench" / "community-venv"),
        help="streaming-community installs the same `streaming` package as MosaicML's: a venv of its own",
    )
    parser.add_argument("--work", default=str(Path.home() / ".cache" / "tokenport-bench" / "streaming"))
    parser.add_argument("--reuse-data", action="store_true", help="keep the corpus of the last run (same sizes)")
    parser.add_argument(
        "--moto-ranges",
        choices=("slice", "copy"),
        default="slice",
        help="slice: a ranged GET costs its range, as on S3; copy: stock moto, which copies the whole object per GET",
    )
    parser.add_argument("--runs", default="cold,warm,budget", help="which runs of each side")
    parser.add_argument("--run-timeout", type=float, default=600, help="seconds before a run is given up")
    parser.add_argument("--role", default="drive", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick and args.role == "drive":
        args.samples, args.read, args.budget_mib = (
            min(args.samples, 8192),
            min(args.read, 4096),
            min(args.budget_mib, 16),
        )
        args.runs = "cold,warm" if args.runs == "cold,warm,budget" else args.runs  # the goals' runs only
    width = args.seq_length + 1
    if args.role == "write-peers":
        write_peers(Path(args.out), args.samples, width)
        return
    if args.role == "read":
        print(json.dumps(read_run(args)))
        return
    if args.role in ("moto", "proxy"):
        serve(args)
        return
    drive(args, width)


def serve(args: argparse.Namespace) -> None:
    """A process of its own (so no GIL is shared with a reader or the driver): the moto S3 server, or
    the counting proxy in front of it. Prints its endpoint; the proxy then answers `count` and
    `clear` lines on stdin; both stop when stdin closes."""
    sys.path.insert(0, str(HERE.parent))
    from tests._support.s3_server import FaultProxy, start_moto

    if args.role == "moto":
        if args.moto_ranges == "slice":
            _ranged_gets_slice()
        server, endpoint = start_moto()
        print(endpoint, flush=True)
        sys.stdin.read()
        server.stop()
        return
    proxy = FaultProxy(args.endpoint)
    print(proxy.endpoint_url, flush=True)
    for line in sys.stdin:
        if line.strip() == "clear":
            proxy.clear()
            print("{}", flush=True)
        else:
            counts = {"gets": proxy.count("GET"), "bytes": proxy.bytes_sent, "per_block": _downloads_per_block(proxy)}
            print(json.dumps(counts), flush=True)
    proxy.close()


def _downloads_per_block(proxy) -> float:
    """How many times each 1 MiB block of tokenport's .bin that was read at all was downloaded, on
    average: body bytes of the ranged GETs of the .bin over the bytes of the blocks they touched
    (1.0: each block once per node; a partial first-window GET counts its bytes, not a whole block)."""
    moved, blocks = 0, set()
    for path, first, last in list(proxy.ranges):
        if path.endswith("/tokenport/store.bin"):
            moved += last - first + 1
            blocks.update(range(first // MIB, last // MIB + 1))
    return moved / (len(blocks) * MIB) if blocks else 0.0


def _ranged_gets_slice() -> None:
    """Make moto serve a ranged GET at a cost that grows with the range, as S3 does: moto 5 copies the
    whole object out of its buffer for every GET (~50 ms for a 191 MiB object) and then slices it.
    The objects here are written once, so each key keeps one immutable copy and GETs slice that."""
    from moto.s3.models import FakeKey

    buffered = FakeKey.value

    def value(self: FakeKey) -> bytes:
        cached = self.__dict__.get("_bench_value")
        if cached is None or len(cached) != self.contentsize:
            cached = self.__dict__["_bench_value"] = buffered.fget(self)
        return cached

    def set_value(self: FakeKey, new_value: bytes) -> None:
        self.__dict__.pop("_bench_value", None)
        buffered.fset(self, new_value)

    FakeKey.value = property(value, set_value)


class Served:
    """A `serve` role running in a child process, spoken to over its stdin and stdout."""

    def __init__(self, role: str, env: dict[str, str], endpoint: str = "", moto_ranges: str = "slice") -> None:
        command = [sys.executable, __file__, "--role", role, "--moto-ranges", moto_ranges]
        command += ["--endpoint", endpoint] if endpoint else []
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdin is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.endpoint = self.stdout.readline().strip()
        if not self.endpoint.startswith("http://"):
            raise SystemExit(f"the {role} process did not start")

    def ask(self, line: str) -> dict:
        self.stdin.write(line + "\n")
        self.stdin.flush()
        return json.loads(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=30)


def drive(args: argparse.Namespace, width: int) -> None:
    sys.path.insert(0, str(HERE.parent))  # tests/_support: the moto server and the counting proxy
    import boto3

    sides = args.sides.split(",")
    peers_python = ensure_venv(Path(args.peers_venv)) if set(sides) & {"litdata", "mosaic", "community"} else None
    community_python = ensure_venv(Path(args.community_venv), "community") if "community" in sides else None
    work = Path(args.work)
    reuse = args.reuse_data and (work / "data" / "written").exists()
    shutil.rmtree(work if not reuse else work / "cache", ignore_errors=True)
    (work / "data").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    env["BENCH_SAMPLES"] = str(args.samples)
    env["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = str(1 << 40)  # objects in memory, not temp files
    os.environ.update(env)
    t0 = time.perf_counter()
    ours = any(side.startswith("tokenport") for side in sides)
    if ours and not reuse:
        write_tokenport(work / "data", args.samples, width)
    if peers_python is not None and not reuse:
        subprocess.run(
            [str(peers_python), __file__, "--role", "write-peers", "--out", str(work / "data")]
            + ["--samples", str(args.samples), "--seq-length", str(args.seq_length)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    if ours and peers_python is not None:
        (work / "data" / "written").write_text(f"{args.samples} {args.seq_length}\n")
    server = Served("moto", env, moto_ranges=args.moto_ranges)
    proxy = Served("proxy", env, server.endpoint)
    try:
        client = boto3.client("s3", endpoint_url=server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        for side, folder in (("tokenport", "tokenport"), ("litdata", "litdata"), ("mosaic", "mds")):
            if side in sides or (side == "tokenport" and ours):
                upload(client, work / "data" / folder, folder)
        print(f"data written and uploaded in {time.perf_counter() - t0:.0f}s", flush=True)
        results = []
        for side in sides:
            python = sys.executable if side.startswith("tokenport") else str(peers_python)
            python = str(community_python) if side == "community" else python
            for run, budget in (("cold", 0), ("warm", 0), ("budget", args.budget_mib)):
                if run not in args.runs.split(","):
                    continue
                cache = work / "cache" / side / ("budget" if budget else "full")
                if run != "warm":
                    shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir(parents=True, exist_ok=True)
                run_env = dict(env, S3_ENDPOINT_URL=proxy.endpoint, AWS_ENDPOINT_URL=proxy.endpoint)
                if side.startswith("tokenport"):
                    run_env["PYTHONPATH"] = str(HERE.parent / "src")
                    run_env["TOKENPORT_CACHE_DIR"] = str(cache)  # the default node cache: cache/blocks
                    run_env.pop("TOKENPORT_NODE_CACHE", None)
                proxy.ask("clear")
                watch = DiskWatch(cache)
                watch.start()
                try:
                    out = subprocess.run(
                        [str(python), __file__, "--role", "read", "--side", side, "--cache", str(cache)]
                        + ["--data", str(work / "data")]
                        + ["--endpoint", proxy.endpoint, "--samples", str(args.samples)]
                        + ["--seq-length", str(args.seq_length), "--read", str(args.read), "--batch", str(args.batch)]
                        + ["--workers", str(args.workers), "--budget-mib", str(budget), "--seed", str(args.seed)]
                        + ["--block-kib", str(args.block_kib)]
                        + (["--quick"] if args.quick else []),
                        env=run_env,
                        capture_output=True,
                        text=True,
                        timeout=args.run_timeout,
                    )
                except subprocess.TimeoutExpired:
                    out = subprocess.CompletedProcess([], 1, "", f"timed out after {args.run_timeout:g}s")
                watch.stop.set()
                watch.join()
                if out.returncode != 0:
                    print(f"{side} {run}: failed\n{out.stderr[-3000:]}", flush=True)
                    continue
                row = json.loads(out.stdout.strip().splitlines()[-1])
                counts = proxy.ask("count")
                row.update(
                    side=side,
                    run=run,
                    gets=counts["gets"],
                    per_block=counts["per_block"],
                    bytes=counts["bytes"],
                    peak_disk=max(watch.peak, disk_usage(cache)),
                    final_disk=disk_usage(cache),
                )
                results.append(row)
                print(
                    f"{side:10} {run:7} {row['samples'] / row['total_s']:>9,.0f} samples/s  first batch "
                    f"{row['first_batch_s']:.2f}s  GETs {row['gets']:>6,}  moved {row['bytes'] / MIB:7.1f} MiB  "
                    f"disk peak {row['peak_disk'] / MIB:7.1f} MiB",
                    flush=True,
                )
    finally:
        proxy.close()
        server.close()
    report(args, width, results)


def report(args: argparse.Namespace, width: int, results: list[dict]) -> None:
    data_mib = args.samples * width * 2 / MIB
    print(
        f"\n{args.samples:,} samples of {width} uint16 tokens ({data_mib:.0f} MiB); {args.read:,} shuffled samples "
        f"read per run, batch {args.batch}, {args.workers} workers; budget runs: {args.budget_mib} MiB\n"
    )
    header = (
        f"{'side':10} {'run':7} {'samples/s':>10} {'first batch':>12} {'GETs/sample':>12} "
        f"{'bytes/sample':>13} {'MiB moved':>10} {'disk peak MiB':>14} {'disk end MiB':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['side']:10} {r['run']:7} {r['samples'] / r['total_s']:>10,.0f} {r['first_batch_s']:>11.2f}s "
            f"{r['gets'] / r['samples']:>12.4f} {r['bytes'] / r['samples']:>13,.0f} {r['bytes'] / MIB:>10.1f} "
            f"{r['peak_disk'] / MIB:>14.1f} {r['final_disk'] / MIB:>13.1f}"
        )
    by = {(r["side"], r["run"]): r for r in results}
    ours = {run: by.get(("tokenport-loader", run)) or by.get(("tokenport", run)) for run in ("cold", "warm", "budget")}
    print()
    for run, goal in (("cold", None), ("warm", None), ("budget", None)):  # the goals: the table below
        peers = [by[(p, run)] for p in PEERS if (p, run) in by]
        if ours[run] is None or not peers:
            continue
        rate = ours[run]["samples"] / ours[run]["total_s"]
        best = max(peers, key=lambda r: r["samples"] / r["total_s"])
        ratio = rate / (best["samples"] / best["total_s"])
        verdict = "" if goal is None else f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"
        print(f"{run}: tokenport / fastest peer ({best['side']}) samples/s = {ratio:.2f}x{verdict}")
        fewest = min(p["bytes"] for p in peers)
        print(f"{run}: bytes moved, tokenport / fewest of the peers = {ours[run]['bytes'] / max(fewest, 1):.2f}")
    goal_rows(results)
    if ours["budget"] is not None:
        held = ours["budget"]["peak_disk"] <= args.budget_mib * MIB + 2 * MIB  # + the .idx copy
        print(f"budget {args.budget_mib} MiB honoured by tokenport's block cache: {'yes' if held else 'NO'}")


SECTION = "streaming from S3, defaults"


def goal_rows(results: list[dict]) -> None:
    """The headline rows: StatefulLoader over a remote GPTDataset with no options but the endpoint,
    against the faster of MosaicML streaming and litData (streaming-community shown beside)."""
    from _harness import Row, print_table

    by = {(r["side"], r["run"]): r for r in results}
    rows = []
    for run, goal in (("cold", 1.5), ("warm", 2.0)):
        ours = by.get(("tokenport-loader", run))
        if ours is None:
            continue
        rate = ours["samples"] / ours["total_s"]
        peers = [
            (by[(p, run)]["samples"] / by[(p, run)]["total_s"], p) for p in ("mosaic", "litdata") if (p, run) in by
        ]
        if peers:
            best, name = max(peers)
            rows.append(
                Row(SECTION, f"loader {run} vs faster peer", "samples/s", rate, best, PEER_NAMES[name], goal=goal)
            )
        if ("community", run) in by:
            theirs = by[("community", run)]["samples"] / by[("community", run)]["total_s"]
            rows.append(Row(SECTION, f"loader {run} vs community", "samples/s", rate, theirs, PEER_NAMES["community"]))
    cold = by.get(("tokenport-loader", "cold"))
    if cold is not None:
        nan = float("nan")
        rows.append(
            Row(
                SECTION,
                "loader first batch cold",
                "s",
                cold["first_batch_s"],
                nan,
                "-",
                goal=0.5,
                goal_text="<0.5 s",
                absolute=True,
                lower_is_better=True,
            )
        )
        rows.append(
            Row(
                SECTION,
                "loader downloads per block cold",
                "x",
                cold["per_block"],
                nan,
                "-",
                goal=1.0,
                goal_text="<=1.0",
                absolute=True,
                lower_is_better=True,
            )
        )
    if rows:
        print()
        print_table(rows)


if __name__ == "__main__":
    main()

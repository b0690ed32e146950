"""Benchmark: `tokenport.prepare` on a compressed jsonl, decompressed once into chunks for all workers,
against the same file read as one unit of work (the planner before issue 12), the planner of issue 12
(chunks only when the compressed size x 4 exceeds a unit) and the plain .jsonl.

Same corpus and tokenizer as bench_prepare.py (stdlib sources and docstrings, a HF byte-level BPE
trained there), compressed here (gzip, xz, bz2 or zstd). Every output is compared with the plain .jsonl's.

    python benchmarks/bench_prepare_compressed.py --size-mb 16 --workers 2 --unit-bytes 4000000 --engine hf
    python benchmarks/bench_prepare_compressed.py --size-mb 32 --workers 1,2 --compression xz
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import lzma
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_prepare import build_corpus


def cpu_seconds() -> tuple[float, float]:
    """CPU time of this process and of its ended children (prepare's worker processes end with the run)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def zstd_open(path: Path, mode: str):  # noqa: ANN201 (a zstandard stream)
    import zstandard

    return zstandard.open(path, mode, cctx=zstandard.ZstdCompressor(level=19))


OPENERS = {
    "gz": lambda path, mode: gzip.open(path, mode, compresslevel=6),
    "xz": lambda path, mode: lzma.open(path, mode, preset=6),
    "bz2": lambda path, mode: bz2.open(path, mode),
    "zst": zstd_open,
}


def run(
    inputs: Path, output: Path, tokenizer: Path, engine: str, workers: int, unit_bytes: int, ratio: int | None
) -> tuple[float, tuple[float, float], list[bytes]]:
    """(wall seconds, CPU seconds of this process and of the worker processes) of one prepare run,
    and its .bin/.idx bytes; `ratio` replaces the planner's bound on how much jsonl inflates
    (0: compressed files are one unit each, as before issue 12; 4: the guess of issue 12; None: now)."""
    from tokenport.corpus import PrepareConfig, prepare
    from tokenport.corpus.run import units

    shutil.rmtree(output, ignore_errors=True)
    kept = units._MAX_RATIO
    units._MAX_RATIO = kept if ratio is None else ratio
    try:
        start, (own, children) = time.perf_counter(), cpu_seconds()
        result = prepare(
            PrepareConfig(
                [str(inputs)],
                str(output),
                tokenizer=f"hf:{tokenizer}",
                tokenizer_engine=engine,
                workers=workers,
                unit_bytes=unit_bytes,
            )
        )
        seconds = time.perf_counter() - start
        cpu = (cpu_seconds()[0] - own, cpu_seconds()[1] - children)
    finally:
        units._MAX_RATIO = kept
    return seconds, cpu, [Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=32)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--unit-bytes", type=int, default=16 << 20, help="prepare's unit_bytes (default 16 MiB)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, best kept (default 2)")
    parser.add_argument("--engine", default="auto", help="prepare's tokenizer_engine for the trained tokenizer.json")
    parser.add_argument("--compression", default="gz", choices=sorted(OPENERS), help="how the input is compressed")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tokenport-bench-prepare"))
    args = parser.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, tokenizer, documents = build_corpus(workdir, args.size_mb)
    packed = corpus.with_suffix(f".jsonl.{args.compression}")
    if not packed.exists():
        with open(corpus, "rb") as f, OPENERS[args.compression](packed, "wb") as out:
            shutil.copyfileobj(f, out)
    size = corpus.stat().st_size
    print(
        f"corpus {corpus}: {size / 1e6:.1f} MB, {documents:,} documents; "
        f"{args.compression} {packed.stat().st_size / 1e6:.1f} MB"
    )
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}; tokenizer hf:{tokenizer} ({args.engine})")
    print(
        f"{'input':<32}{'workers':>8}{'seconds':>9}{'MB/s':>8}{'cores busy':>12}{'CPU s here':>12}"
        f"{'CPU s workers':>15}{'vs one unit':>13}"
    )
    suffix = f"jsonl.{args.compression}"
    modes = [
        ("jsonl", corpus, None),
        (f"{suffix}, one unit (before)", packed, 0),
        (f"{suffix}, 4x guess (issue 12)", packed, 4),
        (f"{suffix}, chunks (now)", packed, None),
    ]
    for workers in [int(w) for w in args.workers.split(",")]:
        best: dict[str, tuple[float, tuple[float, float]]] = {}
        outputs = []
        for _ in range(args.repeat):  # in turns, so load from elsewhere on the machine hits each alike
            for k, (name, inputs, ratio) in enumerate(modes):
                output = workdir / f"out-{k}"
                seconds, cpu, out = run(inputs, output, tokenizer, args.engine, workers, args.unit_bytes, ratio)
                best[name] = min(best.get(name, (seconds, cpu)), (seconds, cpu))
                outputs.append(out)
        assert all(out == outputs[0] for out in outputs), "outputs differ"
        before = best[modes[1][0]][0]
        for name, (seconds, (here, others)) in best.items():
            print(
                f"{name:<32}{workers:>8}{seconds:>9.2f}{size / 1e6 / seconds:>8.2f}{(here + others) / seconds:>12.2f}"
                f"{here:>12.1f}{others:>15.1f}"
                f"{before / seconds:>12.2f}x",
                flush=True,
            )
    print("every output byte-identical to the plain .jsonl's")


if __name__ == "__main__":
    main()

"""Benchmark: `tokenport.prepare` on a .jsonl.gz, decompressed once into chunks for all workers,
against the same file read as one unit of work (the planner before issue 12) and the plain .jsonl.

Same corpus and tokenizer as bench_prepare.py (stdlib sources and docstrings, a HF byte-level BPE
trained there), gzip-compressed here. Every output is compared with the plain .jsonl's.

    python benchmarks/bench_prepare_compressed.py --size-mb 16 --workers 2 --unit-bytes 4000000 --engine hf
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_prepare import build_corpus


def cpu_seconds() -> float:
    """CPU time of this process and its ended children (prepare's worker processes end with the run)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run(
    inputs: Path, output: Path, tokenizer: str, workers: int, unit_bytes: int, whole: bool
) -> tuple[float, float, list[bytes]]:
    """(wall seconds, CPU seconds) of one prepare run, and its .bin/.idx bytes; `whole` plans
    compressed files as one unit each, as before (no chunks)."""
    from tokenport.corpus import PrepareConfig, prepare
    from tokenport.corpus.run import units

    shutil.rmtree(output, ignore_errors=True)
    ratio = units._RATIO
    units._RATIO = 0 if whole else ratio
    try:
        start, cpu = time.perf_counter(), cpu_seconds()
        result = prepare(
            PrepareConfig([str(inputs)], str(output), tokenizer=tokenizer, workers=workers, unit_bytes=unit_bytes)
        )
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    finally:
        units._RATIO = ratio
    return seconds, cpu, [Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=32)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--unit-bytes", type=int, default=16 << 20, help="prepare's unit_bytes (default 16 MiB)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, best kept (default 2)")
    parser.add_argument("--engine", default="gigatoken", help="tokenizer engine for the trained tokenizer.json")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tokenport-bench-prepare"))
    args = parser.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, tokenizer, documents = build_corpus(workdir, args.size_mb)
    packed = corpus.with_suffix(".jsonl.gz")
    if not packed.exists():
        with open(corpus, "rb") as f, gzip.open(packed, "wb", compresslevel=6) as out:
            shutil.copyfileobj(f, out)
    size = corpus.stat().st_size
    spec = f"{args.engine}:{tokenizer}"
    print(f"corpus {corpus}: {size / 1e6:.1f} MB, {documents:,} documents; gzip {packed.stat().st_size / 1e6:.1f} MB")
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}; tokenizer {spec}")
    print(f"{'input':<32}{'workers':>8}{'seconds':>9}{'MB/s':>8}{'cores busy':>12}{'vs one unit':>13}")
    modes = [
        ("jsonl", corpus, False),
        ("jsonl.gz, one unit (before)", packed, True),
        ("jsonl.gz, chunks (now)", packed, False),
    ]
    for workers in [int(w) for w in args.workers.split(",")]:
        best: dict[str, tuple[float, float]] = {}
        outputs = []
        for _ in range(args.repeat):  # in turns, so load from elsewhere on the machine hits each alike
            for k, (name, inputs, whole) in enumerate(modes):
                seconds, cpu, out = run(inputs, workdir / f"out-{k}", spec, workers, args.unit_bytes, whole)
                best[name] = min(best.get(name, (seconds, cpu)), (seconds, cpu))
                outputs.append(out)
        assert all(out == outputs[0] for out in outputs), "outputs differ"
        before = best[modes[1][0]][0]
        for name, (seconds, cpu) in best.items():
            print(
                f"{name:<32}{workers:>8}{seconds:>9.2f}{size / 1e6 / seconds:>8.2f}{cpu / seconds:>12.2f}"
                f"{before / seconds:>12.2f}x",
                flush=True,
            )
    print("every output byte-identical to the plain .jsonl's")


if __name__ == "__main__":
    main()

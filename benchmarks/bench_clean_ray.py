"""Scaling of `prepare` with cleaning steps: the local executor and the Ray executor, 1 and 2 workers.

Workload: the dedup corpus of bench_clean.py (random lines of standard-library prose, 5% exact and
10% near copies), 10^5 documents (`--docs`), prepared with the byte tokenizer through
`gopher_quality`, `exact_dedup`, `minhash_dedup` and `pii`. Each configuration starts from an empty
output; Ray runs on a local cluster started with `num_cpus` equal to the worker count, so its
scheduler, not the local pool, sets the parallelism. The four outputs are checked byte for byte
equal. On a cluster the Ray executor adds nodes' CPUs the same way (one task per unit of work,
signatures grouped by band in one task per band); here two cores cap the speed-up at 2x.

    python benchmarks/bench_clean_ray.py            # 10^5 documents, about 3 minutes
    python benchmarks/bench_clean_ray.py --quick    # 2*10^4 documents
"""

from __future__ import annotations

import argparse
import os
import time

from _harness import Row, print_table, scratch_directory
from bench_clean import dedup_corpus, module_paragraphs, stdlib_modules
from tokenport.corpus import PrepareConfig, prepare

STEPS = [
    {"step": "gopher_quality", "min_words": 20},
    {"step": "exact_dedup"},
    {"step": "minhash_dedup"},
    {"step": "pii"},
]


def run(corpus: str, output: str, executor: str, workers: int) -> tuple[float, list[bytes], int]:
    started = time.perf_counter()
    result = prepare(
        PrepareConfig([corpus], output, workers=workers, steps=STEPS, executor=executor, unit_bytes=4 << 20)
    )
    elapsed = time.perf_counter() - started
    stores = []
    for prefix in result.parts:
        with open(prefix + ".bin", "rb") as f:
            stores.append(f.read())
    return elapsed, stores, result.documents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    count = args.docs or (20_000 if args.quick else 100_000)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    with scratch_directory(args.dir, "tp_bench_clean_ray_", args.quick) as directory:
        prose = [module_paragraphs(source) for source in stdlib_modules()]
        corpus = os.path.join(directory, "corpus.jsonl")
        dedup_corpus(corpus, prose, count, seed=1234)
        rows, outputs = [], {}
        for executor in ("local", "ray"):
            for workers in (1, 2):
                if executor == "ray":
                    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
                try:
                    seconds, stores, kept = run(
                        corpus, os.path.join(directory, f"{executor}{workers}"), executor, workers
                    )
                finally:
                    if executor == "ray":
                        ray.shutdown()
                outputs[(executor, workers)] = stores
                print(
                    f"  {executor} x{workers}: {seconds:.1f} s, {count / seconds:,.0f} docs/s, {kept:,} kept",
                    flush=True,
                )
                rows.append((executor, workers, seconds))
        first = next(iter(outputs.values()))
        if any(stores != first for stores in outputs.values()):
            raise SystemExit("outputs differ between executors or worker counts")
        table = []
        for executor in ("local", "ray"):
            one = next(s for e, w, s in rows if e == executor and w == 1)
            two = next(s for e, w, s in rows if e == executor and w == 2)
            case = f"{count:,} docs, 4 steps"
            table.append(
                Row(f"{executor}, 2 workers", case, "s", two, one, f"{executor}, 1 worker", lower_is_better=True)
            )
        print_table(table)
        print("  outputs identical for local x1, local x2, ray x1, ray x2")


if __name__ == "__main__":
    main()

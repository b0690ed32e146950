"""Cleaning runs pay only for their own work: a prepare run with run-wide dedup steps against the same
run without them, same data, same workers; how often progress moves; how much of the wall time the
run's report accounts for.

Corpus: pages of the Python standard library's docstrings (1-6 per page; --quick: of its first 250
modules, read faster), repeated to --size-mb with
5% exact copies and 5% near copies (a word changed) of earlier pages, so both dedup steps drop some.
Tokenizer: ``byte`` (so the figure is the cleaning's, not a tokenizer's). Each run is ``prepare`` in
this process with ``workers`` local workers (this process and one subprocess by default) on units of a
quarter of the input (so every worker has work), timed in
turns (A B A B ...), best of N.

    python benchmarks/bench_clean_dedup.py            # 8 MB, best of 3
    python benchmarks/bench_clean_dedup.py --quick    # 1.5 MB, best of 2 (well under 30 s)

Rows (goal rows' section and case are stable keys):
  clean dedup   [five steps vs no dedup]  wall of steps (language, gopher_repetition, exact_dedup,
                minhash_dedup, pii) against (language, gopher_repetition, pii): the dedup run's
                time over the other's; goal <= 1.15x (the dedups cost only their own work).
  clean dedup   [progress max gap]  the longest time between two progress moves of a unit, or of a
                unit's start and its first move, in the five-step run (seconds; goal <= 1 s, or a
                move at least every 1 MiB: the MiB row).
  clean dedup   [progress max MiB]  the most input bytes one move covered (MiB; goal <= 1).
  clean dedup   [report coverage]  the share of the five-step run's wall time (the ``prepare`` call)
                that the run's report accounts for, by stage (``tokenport report``'s stages; goal >= 0.95).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time

from _harness import Row, best_of_each, print_goals, print_table, scratch_directory
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import pipeline
from tokenport.corpus.run.report import load_report
from tokenport.demo.corpus import docstrings, read_source, stdlib_sources

FIVE = [
    {"step": "language", "languages": ["en"], "min_score": 0.5},
    {"step": "gopher_repetition"},
    {"step": "exact_dedup"},
    {"step": "minhash_dedup"},
    {"step": "pii"},
]
NO_DEDUP = [spec for spec in FIVE if not spec["step"].endswith("_dedup")]


def build_corpus(path: str, size: int, modules: int | None) -> int:
    """Write ``size`` bytes of jsonl pages (of the docstrings of the first ``modules`` standard library
    modules, or all) to ``path``; returns the number of pages."""
    rng = random.Random(7)
    texts = [t for p in stdlib_sources(modules) if (s := read_source(p)) for t in docstrings(s)]
    pages: list[str] = []
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            roll = rng.random()
            if pages and roll < 0.05:
                page = pages[rng.randrange(len(pages))]
            elif pages and roll < 0.10:
                words = pages[rng.randrange(len(pages))].split(" ")
                words[rng.randrange(len(words))] = "changed"
                page = " ".join(words)
            else:
                page = "\n\n".join(texts[rng.randrange(len(texts))] for _ in range(rng.randint(1, 6)))
            pages.append(page)
            line = json.dumps({"text": page}) + "\n"
            f.write(line)
            written += len(line.encode())
    return len(pages)


class ProgressLog:
    """Wraps the prepare progress bars' methods to time the gaps between moves of a bar (from its
    start to its first move, between moves, to its end) and the largest single move."""

    def __init__(self) -> None:
        self.gap = 0.0
        self.biggest = 0
        self.last = time.perf_counter()
        bar = pipeline._Bar
        original_init, original_progress, original_finish = bar.__init__, bar.on_progress, bar.finish
        log = self

        def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            original_init(self, *args, **kwargs)
            log.last = time.perf_counter()

        def on_progress(self, unit, more):  # type: ignore[no-untyped-def]
            log.move(more)
            original_progress(self, unit, more)

        def finish(self, unit, **postfix):  # type: ignore[no-untyped-def]
            log.move(unit.size - self.shown.get(unit.name, 0))
            original_finish(self, unit, **postfix)

        bar.__init__, bar.on_progress, bar.finish = init, on_progress, finish  # type: ignore[method-assign]

    def move(self, more: int) -> None:
        now = time.perf_counter()
        self.gap = max(self.gap, now - self.last)
        self.biggest = max(self.biggest, more)
        self.last = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1.5 MB and best of 2 instead of 8 MB, best of 3")
    parser.add_argument("--size-mb", type=float, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--dir", default=None, help="scratch directory (kept)")
    args = parser.parse_args()
    size = int((args.size_mb or (1.5 if args.quick else 8)) * 1e6)
    repeat = args.repeat or (2 if args.quick else 3)
    with scratch_directory(args.dir, "tp_bench_clean_dedup_", args.quick) as directory:
        corpus = f"{directory}/pages.jsonl"
        pages = build_corpus(corpus, size, 250 if args.quick else None)
        print(f"{pages:,} pages, {size / 1e6:.1f} MB, {args.workers} workers, best of {repeat}")

        def run(steps: list, name: str) -> None:
            config = PrepareConfig(
                [corpus],
                f"{directory}/{name}",
                tokenizer="byte",
                workers=args.workers,
                steps=steps,
                unit_bytes=size // 4,
            )
            prepare(config)

        def clear(name: str) -> None:
            shutil.rmtree(f"{directory}/{name}", ignore_errors=True)

        run(FIVE, "five")  # warm: numba's cache loaded, pages in the page cache
        five, plain = best_of_each(
            [lambda: run(FIVE, "five"), lambda: run(NO_DEDUP, "plain")],
            repeat,
            [lambda: clear("five"), lambda: clear("plain")],
        )
        clear("five")
        log = ProgressLog()
        config = PrepareConfig(
            [corpus], f"{directory}/five", tokenizer="byte", workers=args.workers, steps=FIVE, unit_bytes=size // 4
        )
        started = time.perf_counter()
        prepare(config)
        wall = time.perf_counter() - started
        report = load_report(f"{directory}/five")
        stages = getattr(report, "stages", {})  # none in runs of tokenport before stages were recorded
        print(report.render())
        coverage = sum(ms for name, ms in stages.items() if name != "wall") / 1000 / wall if stages else 0.0
    rows = [
        Row("clean dedup", "five steps vs no dedup", "x time", five / plain, float("nan"), "no dedup steps",
            goal=1.15, goal_text="<=1.15x", absolute=True, lower_is_better=True),
        Row("clean dedup", "progress max gap", "s", log.gap, float("nan"), "-", goal=1.0, goal_text="<=1 s",
            absolute=True, lower_is_better=True),
        Row("clean dedup", "progress max MiB", "MiB", log.biggest / 2**20, float("nan"), "-", goal=1.0,
            goal_text="<=1 MiB", absolute=True, lower_is_better=True),
        Row("clean dedup", "report coverage", "fraction", coverage, float("nan"), "-", goal=0.95,
            goal_text=">=0.95", absolute=True),
    ]  # fmt: skip
    print_table(rows)
    print_goals(rows)


if __name__ == "__main__":
    main()

"""Helpers shared by the benchmark scripts: timing, synthetic document lengths and the results table.

The scripts are run as ``python benchmarks/bench_X.py``, so this directory is on sys.path and they
import from here with ``from _harness import ...``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

import tokenport as tp


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` timed calls, in seconds (gc.collect() before each, so that one
    call's garbage does not bill the next)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def best_of_each(
    fns: list[Callable[[], object]], repeat: int, setups: list[Callable[[], object] | None] | None = None
) -> list[float]:
    """The fastest of `repeat` timed calls of each function, run in turns (A B C A B C ...), so
    that load from elsewhere on the machine, or page-cache writeback, hits every side alike.
    `setups[k]`, if given, runs untimed before each call of `fns[k]`."""
    setups = setups or [None] * len(fns)
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            if setups[k] is not None:
                setups[k]()
            best[k] = min(best[k], best_of(fn, 1))
    return best


def write_repeated(path: str | os.PathLike[str], lines: list[str], target_bytes: int) -> None:
    """Write `lines` to `path` over and over until `target_bytes` of UTF-8 are written (published by
    rename, so an interrupted run leaves no half corpus that a later run would take as made)."""
    written = 0
    with open(f"{os.fspath(path)}.tmp", "w", encoding="utf-8") as f:
        while written < target_bytes:
            for line in lines:
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= target_bytes:
                    break
    os.replace(f"{os.fspath(path)}.tmp", path)


def lognormal_lengths(rng: np.random.Generator, count: int, mean: float, sigma: float) -> np.ndarray:
    """`count` lengths >= 1 drawn from a lognormal with the given mean and log-space sigma, for
    synthetic documents whose lengths look like real ones."""
    mu = np.log(mean) - sigma**2 / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, count))).astype(np.int64)


@dataclass
class Row:
    """One line of the results table: tokenport's figure against a baseline's, with an optional goal."""

    section: str
    case: str
    metric: str
    ours: float
    theirs: float
    theirs_name: str
    goal: float | None = None  # ratio wanted (rates: ours/theirs; "lower is better" rows: theirs/ours)
    goal_text: str | None = None  # how to print the goal, when not ">=goal x"
    lower_is_better: bool = False
    absolute: bool = False  # the goal is on `ours` itself (a time, a fraction), not on a ratio

    @property
    def ratio(self) -> float:
        if self.absolute:
            return self.ours
        if self.lower_is_better:
            return self.theirs / self.ours if self.ours else float("inf")
        return self.ours / self.theirs if self.theirs else float("inf")

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        if self.absolute and self.lower_is_better:
            return self.ours <= self.goal
        return self.ratio >= self.goal


def human(value: float, metric: str) -> str:
    """`value` printed for a person in the unit `metric` names: rates ("x/s") with a G/M/k
    suffix, times ("s", "s/sample") in us/ms/s, "MB" as megabytes, anything else in 3 digits."""
    if metric.endswith("/s"):
        for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if value >= scale:
                return f"{value / scale:,.2f}{unit}"
        return f"{value:,.0f}"
    if metric == "MB":
        return f"{value:,.1f} MB"
    if metric.startswith("s"):
        if value < 1e-3:
            return f"{value * 1e6:,.1f} us"
        if value < 1:
            return f"{value * 1e3:,.2f} ms"
        return f"{value:,.2f} s"
    return f"{value:,.3g}"


def record_goals(rows: list[Row]) -> None:
    """Append each row that has a goal, as one JSON line, to the file $TOKENPORT_BENCH_RECORD names
    (set by benchmarks/run_all.py, which collects every script's headline figures this way)."""
    path = os.environ.get("TOKENPORT_BENCH_RECORD")
    if not path:
        return
    script = os.path.basename(sys.argv[0])
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            if r.goal is None:
                continue
            line = {
                "script": script,
                "section": r.section,
                "case": r.case,
                "metric": r.metric,
                "ours": r.ours,
                "theirs": r.theirs,
                "theirs_name": r.theirs_name,
                "ratio": r.ratio,
                "goal": r.goal,
                "goal_text": r.goal_text or f">={r.goal:g}x",
                "lower_is_better": r.lower_is_better,
                "absolute": r.absolute,
                "met": r.met,
            }
            f.write(json.dumps(line) + "\n")


def print_table(rows: list[Row]) -> None:
    """Print the rows as an aligned table (text columns left, figures right), each goal marked
    met or NOT met, so that every benchmark reports in the same shape; goal rows are also
    recorded for run_all.py (`record_goals`)."""
    record_goals(rows)
    header = ("section", "case", "metric", "tokenport", "baseline", "vs", "ratio", "goal")
    lines = [header]
    for r in rows:
        if r.goal is None:
            goal = ""
        else:
            goal = (r.goal_text or f">={r.goal:g}x") + (" met" if r.met else " NOT met")
        lines.append(
            (
                r.section,
                r.case,
                r.metric,
                human(r.ours, r.metric),
                human(r.theirs, r.metric),
                r.theirs_name,
                human(r.ours, r.metric) if r.absolute else f"{r.ratio:,.2f}x",
                goal,
            )
        )
    widths = [max(len(line[k]) for line in lines) for k in range(len(header))]
    for n, line in enumerate(lines):
        print(
            "  ".join(
                cell.ljust(w) if k < 3 or k == 5 or k == 7 else cell.rjust(w)
                for k, (cell, w) in enumerate(zip(line, widths))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def print_goals(rows: list[Row]) -> None:
    """Print how many goals were met, then each goal row as met or NOT met with its ratio."""
    goals = [r for r in rows if r.goal is not None]
    print(f"goals met: {sum(bool(r.met) for r in goals)} of {len(goals)}")
    for r in goals:
        if r.absolute:
            what = human(r.ours, r.metric)
        elif r.goal < 1:
            what = f"tokenport takes {1 / r.ratio:,.2f}x megatron's time"
        else:
            what = f"{r.ratio:,.2f}x"
        print(
            f"  {'met    ' if r.met else 'NOT met'}  {r.section} [{r.case}]: {what}, "
            f"goal {r.goal_text or f'>={r.goal:g}x'}"
        )


@contextlib.contextmanager
def scratch_directory(directory: str | None, prefix: str, quick: bool) -> Iterator[str]:
    """The scratch directory to work in: `directory` if given (created if missing, kept), else a
    new temporary one named `prefix...` (removed afterwards); prints the versions line that heads
    every benchmark's output, so runs can be compared knowing what they ran on."""
    made_directory = directory is None
    directory = directory or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(directory, exist_ok=True)
    print(
        f"tokenport {tp.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, scratch {directory}{' (quick)' if quick else ''}"
    )
    try:
        yield directory
    finally:
        if made_directory:
            shutil.rmtree(directory, ignore_errors=True)

"""Start-up and small runs: fresh `tokenport` processes, a DataLoader worker's first fetch, small prepares.

Each command runs in a new interpreter (this checkout's ``src`` first on the path, bytecode
allowed so installed-package conditions hold), in turns with the others, best of --repeat:

  tokenport --help; inspect and verify of a small store     goals: < 0.15 s, < 0.3 s (wall)
  numba on the paths that run no kernel                    goal: 0 (``python -X importtime``)
  a StatefulLoader worker (num_workers=2, fork, a local GPT dataset): from its fork to its
  first get_batch                                          goal: < 0.1 s
  tokenport prepare of two 6 MB jsonl files, --workers 2 against --workers 1   goal: >= 1.6x
  tokenport prepare of 1 MB                                goal: <= 1.5 s (wall)

The corpus is the Python standard library's source, one jsonl document per file, repeated to size;
the tokenizer a HF byte-level BPE trained here on part of it (a local tokenizer.json, as the tests
use). ``python benchmarks/bench_startup.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, print_table, scratch_directory, write_repeated

ROOT = Path(__file__).resolve().parents[1]
NUMBA_FREE = {  # commands that run no numba kernel
    "import tokenport": ["-c", "import tokenport"],
    "tokenport --help": ["-m", "tokenport", "--help"],
}


def child_env() -> dict[str, str]:
    """This checkout's src first, bytecode written and read (as an installed package has it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def fresh(argv: list[str]) -> None:
    """Run ``python ARGV`` in a new interpreter; raise if it fails."""
    subprocess.run([sys.executable, *argv], env=child_env(), stdout=subprocess.DEVNULL, check=True)


def stdlib_corpus(path: Path, megabytes: float, skip: int = 0) -> Path:
    """A jsonl file of about `megabytes` MB: stdlib sources (from the `skip`-th), one document each."""
    if path.exists():
        return path
    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    lines = []
    for source in sources[skip:] + sources[:skip]:
        try:
            lines.append(json.dumps({"text": source.read_text(encoding="utf-8")}) + "\n")
        except (UnicodeDecodeError, OSError):
            continue
    write_repeated(path, lines, int(megabytes * 1_000_000))
    return path


def tokenizer_file(directory: Path) -> Path:
    """A HF byte-level BPE (vocab 4000) trained on 400 stdlib sources, cached in `directory`."""
    path = directory / "tokenizer.json"
    if not path.exists():
        sys.path.insert(0, str(ROOT))
        from tests._support.bpe import train_byte_level_bpe

        sources = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[:400]
        texts = [s.read_text(encoding="utf-8", errors="replace") for s in sources]
        train_byte_level_bpe(texts, 4000, str(path))
    return path


def small_store(directory: Path) -> str:
    """A prepared dataset of 1 MB of stdlib source (byte tokenizer), for inspect and verify."""
    out = directory / "small"
    if not (out / "tokenport.json").exists():
        corpus = stdlib_corpus(directory / "small.jsonl", 1)
        tp.prepare(tp.PrepareConfig([str(corpus)], str(out), workers=1), progress=False)
    return str(out)


def numba_imports(argv: list[str]) -> int:
    """1 if ``python -X importtime ARGV`` imports numba, else 0."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=child_env(), capture_output=True, text=True, check=True
    )
    return int(any(line.rstrip().endswith("| numba") for line in done.stderr.splitlines()))


def worker_ready(directory: Path, repeat: int) -> float:
    """Seconds from a StatefulLoader worker's fork to its first get_batch (the later of two workers),
    best of `repeat` fresh iterations of a loader over a local GPT dataset."""
    rng = np.random.default_rng(0)
    prefix = str(directory / "loader")
    lengths = rng.integers(100, 3000, 4000)
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        writer.add_documents(rng.integers(1, 50000, int(lengths.sum())).astype(np.uint16), lengths)
    config = tp.GPTSampleConfig(seq_length=1024, eod_id=0)
    train, _, _ = tp.build_datasets([prefix], sizes=[2000, 0, 0], config=config, seed=1, split="1,0,0")
    stamps = directory / "stamps"
    forked = {"at": 0.0}
    os.register_at_fork(after_in_child=lambda: forked.update(at=time.monotonic()))
    kind, parent = type(train), os.getpid()
    original = kind.get_batch

    def timed(self, ids):  # type: ignore[no-untyped-def]
        if os.getpid() != parent and forked["at"]:
            with open(stamps / str(os.getpid()), "w") as f:
                f.write(repr(time.monotonic() - forked["at"]))
            forked["at"] = 0.0
        return original(self, ids)

    kind.get_batch = timed
    best = float("inf")
    try:
        for _ in range(repeat):
            stamps.mkdir(exist_ok=True)
            for old in stamps.iterdir():
                old.unlink()
            loader = tp.StatefulLoader.for_dataset(train, micro_batch_size=8, seed=0, num_workers=2)
            batches = iter(loader)
            for _ in range(4):
                next(batches)
            del batches
            delays = [float(p.read_text()) for p in stamps.iterdir()]
            if len(delays) == 2:
                best = min(best, max(delays))
    finally:
        kind.get_batch = original
    return best


def prepare_argv(inputs: list[Path], out: Path, tokenizer: Path, workers: int) -> list[str]:
    return ["-m", "tokenport", "prepare", "-q", "-o", str(out), "--tokenizer", str(tokenizer)] + [
        "--workers",
        str(workers),
        *map(str, inputs),
    ]


def fresh_prepare(argv: list[str], out: Path) -> None:
    """One fresh `tokenport prepare` into an empty `out`."""
    subprocess.run(["rm", "-rf", str(out)], check=True)
    fresh(argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (same sizes)")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--dir", default=None, help="scratch directory (kept)")
    args = parser.parse_args()
    repeat = args.repeat or (2 if args.quick else 5)
    with scratch_directory(args.dir, "bench_startup_", args.quick) as scratch:
        work = Path(scratch)
        store = small_store(work)
        commands = {
            "tokenport --help": ["-m", "tokenport", "--help"],
            "inspect small store": ["-m", "tokenport", "inspect", store],
            "verify small store": ["-m", "tokenport", "verify", store],
            "python -c pass": ["-c", "pass"],
        }
        for argv in commands.values():
            fresh(argv)  # bytecode written once, as after an install
        times = best_of_each([lambda argv=argv: fresh(argv) for argv in commands.values()], repeat)
        seconds = dict(zip(commands, times))
        rows = [
            Row(
                "start-up",
                case,
                "s",
                seconds[case],
                float("nan"),
                "-",
                goal=goal,
                goal_text=f"<{goal:g} s",
                absolute=True,
                lower_is_better=True,
            )
            for case, goal in (("tokenport --help", 0.15), ("inspect small store", 0.3), ("verify small store", 0.3))
        ]
        rows.append(Row("start-up", "python -c pass", "s", seconds["python -c pass"], float("nan"), "-", absolute=True))
        free = {**NUMBA_FREE, "inspect": commands["inspect small store"], "verify": commands["verify small store"]}
        loaded = sum(numba_imports(argv) for argv in free.values())
        rows.append(
            Row(
                "start-up",
                "numba on kernel-free paths",
                "count",
                loaded,
                float("nan"),
                "-",
                goal=0,
                goal_text="0 of 4",
                absolute=True,
                lower_is_better=True,
            )
        )
        ready = worker_ready(work, repeat)
        rows.append(
            Row(
                "start-up",
                "loader worker fork to first fetch",
                "s",
                ready,
                float("nan"),
                "-",
                goal=0.1,
                goal_text="<0.1 s",
                absolute=True,
                lower_is_better=True,
            )
        )
        tokenizer = tokenizer_file(work)
        pair = [stdlib_corpus(work / "a.jsonl", 6), stdlib_corpus(work / "b.jsonl", 6, skip=700)]
        one_mb = [stdlib_corpus(work / "c.jsonl", 1, skip=1400)]
        runs = {
            "w1": (prepare_argv(pair, work / "w1", tokenizer, 1), work / "w1"),
            "w2": (prepare_argv(pair, work / "w2", tokenizer, 2), work / "w2"),
            "1mb": (prepare_argv(one_mb, work / "1mb", tokenizer, 2), work / "1mb"),
        }
        fresh_prepare(*runs["1mb"])  # numba's cache and bytecode, once
        t1, t2, small = best_of_each([lambda r=r: fresh_prepare(*r) for r in runs.values()], max(1, repeat // 2))
        same = all(
            (work / "w1" / n).read_bytes() == (work / "w2" / n).read_bytes()
            for n in ("part-00000.bin", "part-00000.idx", "part-00001.bin", "part-00001.idx")
        )
        assert same, "--workers 2 wrote other bytes than --workers 1"
        rows.append(
            Row("prepare", "two 6 MB files, --workers 2", "s", t2, t1, "--workers 1", goal=1.6, lower_is_better=True)
        )
        rows.append(
            Row(
                "prepare",
                "prepare_1mb",
                "s",
                small,
                float("nan"),
                "-",
                goal=1.5,
                goal_text="<=1.5 s",
                absolute=True,
                lower_is_better=True,
            )
        )
        print(f"load: {os.getloadavg()[0]:.2f} (1 min)")
        print_table(rows)


if __name__ == "__main__":
    main()

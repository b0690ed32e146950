"""Start-up cost: `import tokenport`, `tokenport --help` and `import tokenport.packing` in fresh interpreters.

Each command runs in a new process, in turns with the same command against `--before` (another
checkout's ``src``, e.g. the eager root of an older commit) and with a bare ``python -c pass``,
so load from elsewhere on the machine hits every side alike. Prints the median seconds of each
(the start-up goals are bench_startup.py's rows).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import Row, print_table

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import tokenport": ["-c", "import tokenport"],
    "tokenport --help": ["-m", "tokenport", "--help"],
    "import tokenport.packing": ["-c", "import tokenport.packing"],
}


def run_once(args: list[str], src: str) -> float:
    """Wall seconds of one fresh interpreter running `args` with `src` first on its path."""
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--before", help="another checkout's src directory to compare against")
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 10)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # children read and write bytecode, as an installed package
    trees = {"now": str(Path(__file__).resolve().parents[1] / "src")}
    if args.before:
        trees["before"] = args.before
    for argv in COMMANDS.values():
        for src in trees.values():
            run_once(argv, src)  # bytecode written once
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in COMMANDS for t in trees}
    for _ in range(repeat):
        for command, argv in COMMANDS.items():
            for tree, src in trees.items():
                times[command, tree].append(run_once(argv, src))
    rows = []
    for command in COMMANDS:
        now = statistics.median(times[command, "now"])
        if "before" in trees:
            before = statistics.median(times[command, "before"])
            rows.append(Row("import", command, "s", now, before, "before", lower_is_better=True))
        else:
            rows.append(Row("import", command, "s", now, math.nan, "-", absolute=True))
    print_table(rows)


if __name__ == "__main__":
    main()

"""Start-up cost: `import tokenport`, `tokenport --help` and `import tokenport.packing` in fresh interpreters.

Each command runs in a new process, in turns with the same command against `--before` (another
checkout's ``src``, e.g. the eager root of an older commit) and with a bare ``python -c pass``,
so load from elsewhere on the machine hits every side alike. Prints the best and median seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--before", help="another checkout's src directory to compare against")
    args = parser.parse_args()
    trees = {"now": str(Path(__file__).resolve().parents[1] / "src")}
    if args.before:
        trees["before"] = args.before
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in COMMANDS for t in trees}
    for _ in range(args.repeat):
        for command, argv in COMMANDS.items():
            for tree, src in trees.items():
                times[command, tree].append(run_once(argv, src))
    print(f"{'command':28s} {'tree':7s} {'best s':>8s} {'median s':>9s} {'vs before':>10s}")
    for command in COMMANDS:
        for tree in trees:
            best, median = min(times[command, tree]), statistics.median(times[command, tree])
            ratio = ""
            if "before" in trees and tree == "now":
                ratio = f"{statistics.median(times[command, 'before']) / median:9.1f}x"
            print(f"{command:28s} {tree:7s} {best:8.3f} {median:9.3f} {ratio:>10s}")


if __name__ == "__main__":
    main()

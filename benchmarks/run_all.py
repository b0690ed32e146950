"""Re-measure every headline figure and print it beside its recorded figure and goal.

Each benchmark script reports its goals as `_harness.Row`s with `goal=` set; `print_table` appends
them as JSON lines to the file `$TOKENPORT_BENCH_RECORD` names. This script runs every script below
in its `--quick` mode (each in a fresh process, one after another, so that no two share the
machine), collects those lines and prints one table: the figure now, the figure recorded in
`benchmarks/headlines.json`, the goal, met or not. With `--record` the figures just measured
replace the recorded ones and the table that opens BENCHMARKS.md is rewritten from them, so a
figure that no longer reproduces is corrected rather than kept.

    python benchmarks/run_all.py --quick               # every script, about 10 minutes on 2 cores
    python benchmarks/run_all.py --quick --only bench_gpt bench_indexed
    python benchmarks/run_all.py --quick --record      # and write headlines.json + BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _harness import human

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "headlines.json"
BENCHMARKS_MD = HERE.parent / "BENCHMARKS.md"
START, END = "<!-- headlines:start -->", "<!-- headlines:end -->"


@dataclass(frozen=True)
class Script:
    """One benchmark script run by run_all: its file, the extra arguments of its quick run, and
    how long that run may take before it is stopped and reported as such."""

    name: str
    args: tuple[str, ...] = ()
    timeout_s: float = 120.0

    @property
    def command(self) -> str:
        return " ".join(["python", f"benchmarks/{self.name}.py", "--quick", *self.args])


SCRIPTS = (
    Script("bench_import"),
    Script("bench_startup"),
    Script("bench_indexed", ("--sections", "read,scan,write", "--repeat", "2")),
    Script("bench_gpt"),
    Script("bench_blend"),
    Script("bench_many_stores"),
    Script("bench_sampling"),
    Script("bench_packing"),
    Script("bench_batching"),
    Script("bench_stream_sampler"),
    Script("bench_resume"),
    Script("bench_loader"),
    Script("bench_megatron_provider"),
    Script("bench_mixing"),
    Script("bench_metrics"),
    Script("bench_sft_dataset"),
    Script("bench_sft_prepare"),
    Script("bench_prepare"),
    Script("bench_clean"),
    Script("bench_clean_dedup"),
    Script("bench_pii"),
    Script("bench_merge_verify"),
    Script("bench_dock"),
    Script("bench_dock_casting"),
    Script("bench_dock_ray", timeout_s=180.0),
    Script("bench_streaming", timeout_s=240.0),
    Script("bench_certificate"),
)

# The scripts run_all leaves out, and why: each has no goal of its own (its figures explain another
# headline, or compare tokenport with itself).
NOT_RUN = {
    "bench_where": "measured at 10^6-10^8 samples (a 10^9 run's indices and lookups need ~40 GB of memory and "
    "disk, more than the benchmark machine holds), not at the 10^9 its goal names, so its rows are no headline yet",
    "bench_where_order": "the sampler half of bench_where's figures (no goal of its own)",
    "bench_dock_ray_scale": "runs the real TransferDock from a MindSpeed-RL snapshot a fresh machine lacks",
    "bench_chat_template": "encode_chat against apply_chat_template per conversation: explains bench_sft_prepare",
    "bench_clean_ray": "Ray against local executors on 1 and 2 workers: scaling figures, no peer, no goal",
    "bench_input_stream": "the raw-input reader's throughput with and without compression: no goal",
    "bench_prepare_compressed": "one decompression feeding many workers: explains bench_prepare, no goal",
    "bench_remote": "the block cache and prefetch planner alone: explains bench_streaming, no goal",
    "bench_stream_order": 'StreamSampler order="feistel" vs order="random": tokenport against itself',
    "bench_identifiers": "what keeping identifiers costs prepare and the identifier index's speed: no goal",
    "bench_takedown": "what masking removed documents adds to each handed batch: no peer, no goal",
    "bench_dock_cluster": "RayDock against TransferQueue on a 1/2/4-node Ray cluster on one machine: cluster "
    "figures (oversubscribed cores), no goal",
    "bench_prepare_cluster": "prepare on 1 Ray node against 3, with and without a node killed: no peer, no goal",
    "bench_scale_ranks": "10^4 ranks simulated in one process: exactness and memory per rank, no peer, no goal",
    "bench_scale_dock": "a dock's bookkeeping at 10^5-10^7 rows x 10^3 consumers: latency and memory, no peer, no goal",
    "bench_scale_blend": "build and reopen of a 10^5-store blend: time and memory, no peer, no goal",
    "bench_dock_recovery": "RayDock's recovery times and replication cost on a local 3-node cluster: no peer, no goal",
}


def headline_key(row: dict) -> str:
    """The key a goal row is known by across runs: script, section, case and the peer compared."""
    return f"{row['script'].removesuffix('.py')} | {row['section']} | {row['case']} | {row['theirs_name']}"


def figure(row: dict) -> str:
    """A row's figure as printed in the table: the value itself for absolute goals, else the ratio
    followed by tokenport's own figure in its unit."""
    if row["absolute"]:
        return f"{row['ours']:.3g} {row['metric']}"
    return f"{row['ratio']:,.2f}x ({with_unit(row['ours'], row['metric'])})"


def with_unit(value: float, metric: str) -> str:
    """`value` in the unit `metric` names, as `_harness.human` prints it (times and MB carry their unit)."""
    if metric.startswith("s"):
        return human(value, "s") + metric[1:]
    if metric == "MB":
        return human(value, metric)
    return f"{human(value, metric)} {metric}"


def run_script(script: Script, record: Path) -> tuple[str, float]:
    """Run one script's quick mode with goal rows recorded to `record`; returns its outcome
    ("ok", "failed (rc N)", "timed out", "missing") and its wall time."""
    path = HERE / f"{script.name}.py"
    if not path.exists():
        return "missing", 0.0
    env = dict(os.environ, TOKENPORT_BENCH_RECORD=str(record))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(path), "--quick", *script.args],
            cwd=HERE.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=script.timeout_s,
        )
    except subprocess.TimeoutExpired:
        return "timed out", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-15:])
        print(f"--- {script.name} failed (rc {done.returncode}); its last lines:\n{tail}\n---", flush=True)
        return f"failed (rc {done.returncode})", wall
    return "ok", wall


def read_rows(record: Path) -> list[dict]:
    """The goal rows the scripts recorded, in the order they were reported."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_recorded() -> dict[str, dict]:
    """The recorded headline figures (benchmarks/headlines.json), by headline key."""
    if not RECORDED.exists():
        return {}
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def print_headlines(rows: list[dict], recorded: dict[str, dict], commands: dict[str, str]) -> None:
    """Print each headline now, beside its recorded figure and goal, marked met or NOT met."""
    lines = [("headline", "now", "recorded", "goal", "", "command")]
    for row in rows:
        key = headline_key(row)
        before = recorded.get(key, {}).get("figure", "-")
        met = "met" if row["met"] else "NOT met"
        lines.append((key, figure(row), before, row["goal_text"], met, commands[row["script"].removesuffix(".py")]))
    widths = [max(len(line[k]) for line in lines) for k in range(len(lines[0]))]
    for n, line in enumerate(lines):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    met = sum(bool(r["met"]) for r in rows)
    print(f"\ngoals met: {met} of {len(rows)}")


def markdown_table(recorded: dict[str, dict]) -> str:
    """The table that opens BENCHMARKS.md: every recorded headline, its figure, goal, peer, command and date."""
    out = [
        "| benchmark | section | case | figure | goal | met | peer | command | date |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {s.name: n for n, s in enumerate(SCRIPTS)}
    for key, entry in sorted(recorded.items(), key=lambda item: (order.get(item[0].split(" | ")[0], 1 << 30), item[0])):
        script, section, case, peer = key.split(" | ")
        out.append(
            f"| {script} | {section} | {case} | {entry['figure']} | {entry['goal']} | "
            f"{'met' if entry['met'] else '**not met**'} | {peer} | `{entry['command']}` | {entry['date']} |"
        )
    return "\n".join(out)


def write_record(rows: list[dict], commands: dict[str, str], recorded: dict[str, dict]) -> None:
    """Replace the recorded figures of the headlines just measured and rewrite BENCHMARKS.md's opening table."""
    today = datetime.date.today().isoformat()
    for row in rows:
        recorded[headline_key(row)] = {
            "figure": figure(row),
            "goal": row["goal_text"],
            "met": bool(row["met"]),
            "command": commands[row["script"].removesuffix(".py")],
            "date": today,
        }
    RECORDED.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    text = BENCHMARKS_MD.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{BENCHMARKS_MD}: the markers {START} and {END} are missing; add them where the table goes")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    BENCHMARKS_MD.write_text(f"{head}{START}\n{markdown_table(recorded)}\n{END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="run each script's quick mode (the only mode)")
    parser.add_argument("--only", nargs="+", metavar="SCRIPT", help="run only these scripts (bench_x)")
    parser.add_argument("--record", action="store_true", help="write headlines.json and BENCHMARKS.md's table")
    parser.add_argument("--list", action="store_true", help="list the scripts and their commands, run nothing")
    args = parser.parse_args()
    known = {s.name: s for s in SCRIPTS}
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        parser.error(f"unknown script(s) {unknown}; known: {sorted(known)}")
    scripts = [known[name] for name in args.only] if args.only else list(SCRIPTS)
    if args.list:
        for s in scripts:
            print(s.command)
        return 0
    if not args.quick:
        parser.error("give --quick: run_all runs each script's quick mode (run a script alone for its full figures)")
    commands = {s.name: s.command for s in SCRIPTS}
    outcomes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tp-run-all-") as tmp:
        record = Path(tmp) / "rows.jsonl"
        t0 = time.perf_counter()
        for s in scripts:
            outcome, wall = run_script(s, record)
            outcomes[s.name] = outcome
            print(f"{s.name:<28} {outcome:<16} {wall:6.1f} s", flush=True)
        rows = read_rows(record)
        print(f"\nall scripts: {time.perf_counter() - t0:.0f} s\n")
    recorded = load_recorded()
    print_headlines(rows, recorded, commands)
    seen = {headline_key(r) for r in rows}
    finished = {name for name, outcome in outcomes.items() if outcome == "ok"}
    gone = sorted(k for k in recorded if k.split(" | ")[0] in finished and k not in seen)
    if gone:
        print("\nrecorded headlines their script no longer reports (renamed or removed):")
        for key in gone:
            print(f"  {key}")
    if args.record:
        for key in gone:
            recorded.pop(key)
        write_record(rows, commands, recorded)
        print(f"\nwrote {RECORDED.relative_to(HERE.parent)} and the table at the top of BENCHMARKS.md")
    bad = {name: outcome for name, outcome in outcomes.items() if outcome != "ok"}
    if bad:
        print(f"\nscripts that did not finish: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

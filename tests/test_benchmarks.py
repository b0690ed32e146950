"""benchmarks/run_all.py: every script with a goal is re-measured, and its figures are recorded faithfully.

No timing is asserted: these tests check the bookkeeping (which scripts run, how a goal row is
recorded, judged and written into BENCHMARKS.md), not any figure.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _harness  # noqa: E402
import run_all  # noqa: E402


def test_every_script_is_run_by_run_all_or_says_why_not() -> None:
    scripts = {path.stem for path in BENCHMARKS.glob("bench_*.py")}
    listed = {s.name for s in run_all.SCRIPTS}
    assert listed & set(run_all.NOT_RUN) == set()
    assert scripts - listed - set(run_all.NOT_RUN) == set(), "add these to run_all.SCRIPTS or run_all.NOT_RUN"
    assert set(run_all.NOT_RUN) <= scripts


@pytest.mark.parametrize("script", run_all.SCRIPTS, ids=lambda s: s.name)
def test_every_listed_script_exists_and_has_a_quick_mode(script: run_all.Script) -> None:
    path = BENCHMARKS / f"{script.name}.py"
    assert path.exists(), f"{path} is listed in run_all.SCRIPTS but missing"
    text = path.read_text(encoding="utf-8")
    assert '"--quick"' in text, f"{path} has no --quick mode"
    assert "print_table" in text, f"{path} does not report its goals through _harness.print_table"


def test_goal_rows_are_recorded_as_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "rows.jsonl"
    monkeypatch.setenv("TOKENPORT_BENCH_RECORD", str(record))
    monkeypatch.setattr(sys, "argv", ["bench_toy.py"])
    rows = [
        _harness.Row("reads", "random", "docs/s", 300.0, 100.0, "megatron", goal=2.0),
        _harness.Row("reads", "no goal", "docs/s", 1.0, 1.0, "megatron"),
        _harness.Row("build", "time", "s", 2.0, 10.0, "megatron", goal=10.0, lower_is_better=True),
        _harness.Row(
            "start",
            "first batch",
            "s",
            0.7,
            math.nan,
            "-",
            goal=0.5,
            goal_text="<0.5 s",
            absolute=True,
            lower_is_better=True,
        ),
        _harness.Row("share", "busy", "fraction", 1.0, math.nan, "-", goal=1.0, absolute=True),
    ]
    _harness.print_table(rows)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["section"], r["case"], r["met"]) for r in lines] == [
        ("reads", "random", True),
        ("build", "time", False),
        ("start", "first batch", False),
        ("share", "busy", True),
    ]
    assert lines[0]["ratio"] == 3.0 and lines[1]["ratio"] == 5.0 and lines[2]["ratio"] == 0.7
    assert {r["script"] for r in lines} == {"bench_toy.py"}
    assert run_all.headline_key(lines[0]) == "bench_toy | reads | random | megatron"
    assert run_all.figure(lines[0]) == "3.00x (300 docs/s)" and run_all.figure(lines[2]) == "0.7 s"


def test_without_the_variable_nothing_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKENPORT_BENCH_RECORD", raising=False)
    monkeypatch.chdir(tmp_path)
    _harness.print_table([_harness.Row("reads", "random", "docs/s", 3.0, 1.0, "megatron", goal=2.0)])
    assert list(tmp_path.iterdir()) == []


def test_record_replaces_figures_and_rewrites_the_opening_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    md = tmp_path / "BENCHMARKS.md"
    md.write_text(f"# Benchmarks\n\nintro\n\n{run_all.START}\nold table\n{run_all.END}\n\n## History\nkept\n")
    recorded = tmp_path / "headlines.json"
    old = {"bench_x | a | b | peer": {"figure": "9.00x", "goal": ">=2x", "met": True, "command": "c", "date": "d"}}
    recorded.write_text(json.dumps(old))
    monkeypatch.setattr(run_all, "BENCHMARKS_MD", md)
    monkeypatch.setattr(run_all, "RECORDED", recorded)
    row = {
        "script": "bench_x.py",
        "section": "a",
        "case": "b",
        "theirs_name": "peer",
        "metric": "docs/s",
        "ours": 1.5,
        "theirs": 1.0,
        "ratio": 1.5,
        "goal_text": ">=2x",
        "absolute": False,
        "met": False,
    }
    run_all.write_record([row], {"bench_x": "python benchmarks/bench_x.py --quick"}, run_all.load_recorded())
    entry = json.loads(recorded.read_text())["bench_x | a | b | peer"]
    assert entry["figure"] == "1.50x (2 docs/s)" and entry["met"] is False
    text = md.read_text()
    assert "old table" not in text and text.endswith("## History\nkept\n")
    row = "| bench_x | a | b | 1.50x (2 docs/s) | >=2x | **not met** | peer | `python benchmarks/bench_x.py --quick` |"
    assert row in text


def test_the_recorded_headlines_match_the_table_in_benchmarks_md() -> None:
    recorded = run_all.load_recorded()
    text = run_all.BENCHMARKS_MD.read_text(encoding="utf-8")
    assert run_all.START in text and run_all.END in text
    table = text.split(run_all.START)[1].split(run_all.END)[0].strip()
    assert table == run_all.markdown_table(recorded)

"""The demo's progress echo: a heartbeat through silences, unit progress, whole lines from two threads."""

from __future__ import annotations

import threading
import time

import pytest

from tokenport.demo.progress import Progress
from tokenport.errors import ConfigError


def wait_for(condition, seconds: float = 30.0) -> bool:
    """Poll `condition` until it holds (True) or `seconds` pass (False); no timing is asserted."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_a_silent_stage_gets_heartbeat_lines_naming_it_and_its_work():
    lines: list[str] = []
    with Progress(lines.append, interval=0.01) as progress:
        progress("\n== 8. sampling: length grouping")
        progress.doing("packing the merged store")
        assert wait_for(lambda: len(lines) >= 3)  # the stage says nothing itself: the heartbeat speaks
    assert lines[0] == "\n== 8. sampling: length grouping"
    assert all(line.startswith("  ... 8. sampling: packing the merged store, ") for line in lines[1:])
    assert all(line.endswith(" s") for line in lines[1:])


def test_no_heartbeat_before_the_interval_or_after_the_block():
    lines: list[str] = []
    with Progress(lines.append, interval=3600) as progress:
        progress("\n== 1. corpus: files")
        time.sleep(0.05)
    assert lines == ["\n== 1. corpus: files"]
    with Progress(lines.append, interval=0.01) as progress:
        progress.doing("work")
    count = len(lines)
    time.sleep(0.05)
    assert len(lines) == count  # the heartbeat thread stopped with the block


def test_units_report_every_step_at_interval_zero_and_none_within_a_long_interval():
    every: list[str] = []
    progress = Progress(every.append, interval=0)
    progress("\n== 11. train: a tiny model")
    for step in range(1, 4):
        progress.step(step, 3, "straight run")
    assert [line.rsplit(",", 1)[0] for line in every[1:]] == [
        f"  ... 11. train: straight run, step {step}/3" for step in (1, 2, 3)
    ]
    quiet: list[str] = []
    progress = Progress(quiet.append, interval=3600)
    for step in range(1, 4):
        progress.step(step, 3, "straight run")
    assert quiet == []


def test_lines_from_the_stage_and_the_heartbeat_never_interleave():
    """print writes a line and its newline separately: both threads echo under one lock."""
    written: list[str] = []
    lock_free = threading.Event()

    def echo(line: str) -> None:  # a print that could be cut between its two writes
        written.append(line)
        lock_free.wait(0.0001)
        written.append("\n")

    with Progress(echo, interval=0.001) as progress:
        for i in range(300):
            progress(f"line {i}")
    pairs = list(zip(written[::2], written[1::2]))
    assert all(end == "\n" and text != "\n" for text, end in pairs)
    assert [text for text, _ in pairs if text.startswith("line ")] == [f"line {i}" for i in range(300)]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_heartbeat_that_cannot_echo_stops_quietly():
    def broken(line: str) -> None:
        if line.startswith("  ..."):
            raise BrokenPipeError("the reader went away")

    with Progress(broken, interval=0.001) as progress:
        progress.doing("work")
        time.sleep(0.05)
    # the demo's own next echo reports a closed pipe; the heartbeat thread only stops


@pytest.mark.parametrize("interval", [-1.0, float("nan"), float("inf")])
def test_an_interval_that_is_not_seconds_is_refused(interval):
    with pytest.raises(ConfigError, match="heartbeat interval"):
        Progress(print, interval=interval)

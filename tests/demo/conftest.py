"""The tiny training example run as a user runs it: examples/train_tiny.py in a subprocess, and one
uninterrupted 2-rank run (a session fixture) that the resume tests compare against."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tokenport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"
STEPS = 16
CHECKPOINT_EVERY = 4


def command(workdir: Path, *flags: str) -> list[str]:
    """The example's command line for `workdir` (16 steps, checkpoints every 4, unless flags say more)."""
    every = str(CHECKPOINT_EVERY)
    return [sys.executable, str(EXAMPLE), "--workdir", str(workdir), "--checkpoint-every", every, *flags]


def environment() -> dict[str, str]:
    """This checkout's tokenport first on the path of the example's processes."""
    src = str(Path(tokenport.__file__).resolve().parents[1])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))


def run(workdir: Path, *flags: str) -> subprocess.CompletedProcess:
    """Run the example to completion; its output and exit status."""
    return subprocess.run(command(workdir, *flags), env=environment(), capture_output=True, text=True, timeout=300)


def resume_from(straight: Path, step: int, workdir: Path) -> Path:
    """A new workdir holding only `straight`'s checkpoint at `step` (its stores are made afresh)."""
    name = f"step-{step:06d}.pt"
    (workdir / "run").mkdir(parents=True)
    shutil.copy(straight / "run" / name, workdir / "run" / name)
    return workdir


@pytest.fixture(scope="session")
def straight(tmp_path_factory) -> Path:
    """The workdir of an uninterrupted run: 16 steps on 2 ranks, checkpoints at 4, 8, 12, 16."""
    workdir = tmp_path_factory.mktemp("straight")
    done = run(workdir, "--steps", str(STEPS), "--ranks", "2")
    assert done.returncode == 0, done.stderr
    return workdir

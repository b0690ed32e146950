"""Nothing left behind: a run that fails before making anything removes its `.work/`, so the rerun its
message suggests works; SIGTERM stops `tokenport prepare` as Ctrl-C does (one message, exit 130, no
worker traceback, no temporaries), and the rerun resumes to the uninterrupted output."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import InputDataError
from tokenport.indexed import IndexedDataset

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tokens(parts) -> list[list[int]]:
    out = []
    for prefix in parts:
        with IndexedDataset(str(prefix)) as ds:
            out.extend(np.asarray(ds[i]).tolist() for i in range(len(ds)))
    return out


def leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.tmp"))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("existing", [False, True])
def test_a_run_failing_on_bad_input_leaves_no_work_so_the_suggested_rerun_works(tmp_path, workers, existing):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"content": f"text {i}"}) + "\n" for i in range(50)))
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    config = PrepareConfig(inputs=[str(corpus)], output=str(out), workers=workers, unit_bytes=300)
    with pytest.raises(InputDataError, match="text_key / --text-key"):
        prepare(config)
    assert (sorted(os.listdir(out)) == []) if existing else not out.exists()
    again = prepare(PrepareConfig(inputs=[str(corpus)], output=str(out), workers=workers, text_key="content"))
    assert again.documents == 50


def test_a_run_failing_after_making_units_keeps_them_without_temporaries(tmp_path):
    corpus = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": f"text {i}"}) for i in range(60)]
    lines[50] = "{not json"
    corpus.write_text("\n".join(lines) + "\n")
    config = PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "out"), workers=1, unit_bytes=200)
    with pytest.raises(InputDataError, match="line 51"):
        prepare(config)
    work = tmp_path / "out" / ".work"
    assert any(name.endswith(".bin") for name in os.listdir(work)) and leftovers(tmp_path / "out") == []


def worker_writing(work: pathlib.Path, caller: int) -> bool:
    """Whether a process other than `caller` has temporaries of a unit store in `work`."""
    names = os.listdir(work) if work.is_dir() else []
    return any(name.startswith(".unit-") and name.endswith(".tmp") and f".{caller}." not in name for name in names)


CHILD = textwrap.dedent(
    """
    import sys
    from tests._support.slow_step import Slow
    from tokenport import cli
    from tokenport.corpus.run import config
    from tokenport.corpus.steps.registry import register_step

    register_step("slow", Slow)
    original = config.config_from_options
    config.config_from_options = lambda inputs, output, given: original(inputs, output, {**given, "unit_bytes": 300})
    sys.exit(cli.main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("signum, group", [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGTERM, True)])
def test_sigterm_and_ctrl_c_stop_prepare_cleanly_and_the_rerun_resumes(tmp_path, signum, group):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 3}) + "\n" for i in range(800)))
    (tmp_path / "steps.json").write_text(json.dumps([{"step": "slow", "seconds": 0.01}]))
    out = tmp_path / "out"
    command = [sys.executable, "-c", CHILD, "prepare", str(corpus), "-o", str(out), "-q", "--workers", "3"]
    command += ["--steps", str(tmp_path / "steps.json")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    child = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not worker_writing(out / ".work", child.pid):  # a worker process has a unit's store half-written
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
        time.sleep(0.005)
    if group:  # a terminal's Ctrl-C, a supervisor stopping the group: every worker gets it too
        os.killpg(child.pid, signum)
    else:
        os.kill(child.pid, signum)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert stderr.strip() == "tokenport: interrupted; rerun the same command to resume"  # no worker traceback
    assert leftovers(out) == [] and not (out / "tokenport.json").exists() and (out / ".work" / "state.json").exists()
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    manifest = json.loads((out / "tokenport.json").read_text())
    plain = prepare(PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "plain"), workers=1))
    assert tokens(out / part["name"] for part in manifest["parts"]) == tokens(plain.parts)
    assert list(out.iterdir()) and leftovers(out) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_killed_caller_takes_its_workers_with_it_and_the_rerun_completes(tmp_path):
    psutil = pytest.importorskip("psutil")
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 3}) + "\n" for i in range(40)))
    # units of about ten documents, each 0.3 s: a worker left alone would write on for seconds
    (tmp_path / "steps.json").write_text(json.dumps([{"step": "slow", "seconds": 0.3}]))
    out = tmp_path / "out"
    command = [sys.executable, "-c", CHILD, "prepare", str(corpus), "-o", str(out), "-q", "--workers", "3"]
    command += ["--steps", str(tmp_path / "steps.json")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    child = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not worker_writing(out / ".work", child.pid):
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    workers = psutil.Process(child.pid).children()
    assert workers
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)

    def alive(worker) -> bool:  # a zombie is dead: an init that does not reap (a container's) keeps it listed
        try:
            return worker.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 1
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(alive(w) for w in workers), "a worker outlived its killed caller"
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    manifest = json.loads((out / "tokenport.json").read_text())
    plain = prepare(PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "plain"), workers=1))
    assert tokens(out / part["name"] for part in manifest["parts"]) == tokens(plain.parts)
    assert leftovers(out) == []

"""The tiny training run's certificate on real processes: kill -9 and resume repeats the loss curve
bit for bit; attention stays inside each document; a resume of another configuration is refused."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from tests.demo.conftest import CHECKPOINT_EVERY, STEPS, command, environment, run
from tokenport.errors import ConfigError

torch = pytest.importorskip("torch")
train = pytest.importorskip("tokenport.demo.train")
TrainLog, TrainConfig, launch = train.TrainLog, train.TrainConfig, train.launch


def logged_steps(run_dir) -> int:
    """Steps rank 0 has logged so far (0 before the first)."""
    try:
        with open(run_dir / "log.json", encoding="utf-8") as f:
            return len(json.load(f)["steps"])
    except FileNotFoundError:
        return 0


def test_kill_9_at_a_random_step_then_resume_repeats_the_loss_curve_bitwise(straight, tmp_path):
    kill_at = random.randrange(CHECKPOINT_EVERY + 1, STEPS - 2)
    process = subprocess.Popen(
        command(tmp_path, "--steps", str(STEPS), "--ranks", "2"),
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the launcher and its rank processes: one group to kill
    )
    deadline = time.monotonic() + 240
    while logged_steps(tmp_path / "run") < kill_at:
        assert process.poll() is None, f"the run ended before step {kill_at}: {process.stderr.read().decode()}"
        assert time.monotonic() < deadline, f"step {kill_at} not reached"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()
    killed = logged_steps(tmp_path / "run")
    assert kill_at <= killed < STEPS, f"killed at step {killed}, aimed at {kill_at}"
    newest = train.latest_checkpoint(str(tmp_path / "run"))
    assert newest is not None
    saved = int(os.path.basename(newest)[5:11])  # the log is written before a checkpoint: a kill may fall between
    assert saved % CHECKPOINT_EVERY == 0 and 0 <= killed - saved <= CHECKPOINT_EVERY, (saved, killed)

    done = run(tmp_path, "--steps", str(STEPS), "--ranks", "2", "--resume")
    assert done.returncode == 0, done.stderr
    expected, resumed = TrainLog.load(str(straight / "run")), TrainLog.load(str(tmp_path / "run"))
    assert [s["loss"] for s in resumed.steps] == [s["loss"] for s in expected.steps], f"killed at step {killed}"
    assert resumed.steps == expected.steps
    assert resumed.losses[-1] < resumed.losses[0]


def test_attention_stays_inside_each_document():
    torch.manual_seed(0)
    cu_seqlens = torch.tensor([[0, 3, 5, 8, 8, 8]], dtype=torch.int32)
    mask = train.document_mask(cu_seqlens, 8)[0, 0]
    assert mask[4].tolist() == [False, False, False, True, True, False, False, False]
    assert mask[2].tolist() == [True, True, True, False, False, False, False, False]
    model = train.TinyDecoder(vocab_size=11, seq_length=8, width=16, layers=2, heads=2)
    tokens = torch.randint(0, 11, (1, 8))
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2]])
    other = tokens.clone()
    other[0, :3] = (other[0, :3] + 1) % 11  # change the first document only
    before, after = model(tokens, positions, cu_seqlens), model(other, positions, cu_seqlens)
    assert torch.equal(before[0, 3:], after[0, 3:]) and not torch.equal(before[0, :3], after[0, :3])
    # without the documents' mask, the first document's tokens would reach the later ones
    whole = torch.tensor([[0, 8, 8, 8, 8, 8]], dtype=torch.int32)
    assert not torch.equal(model(tokens, positions, whole)[0, 3:], model(other, positions, whole)[0, 3:])


def test_a_resume_with_another_configuration_is_refused(tmp_path):
    spec = train.prepare_training_stores(str(tmp_path))
    run_dir = str(tmp_path / "run")
    config = TrainConfig(steps=2, checkpoint_every=2, num_samples=64, width=16, layers=1, heads=2)
    launch(spec, run_dir, config, ranks=1)
    with pytest.raises(ConfigError, match=r"seed 1234 -> 7"):
        launch(spec, run_dir, TrainConfig(**{**vars(config), "steps": 4, "seed": 7}), ranks=1, resume=True)
    with pytest.raises(ConfigError, match=r"seed 1234 -> 7"):  # refused before any rank starts
        launch(spec, run_dir, TrainConfig(**{**vars(config), "steps": 4, "seed": 7}), ranks=2, resume=True)
    with pytest.raises(ConfigError, match="needs a torch.distributed process group"):
        train.train(spec, run_dir, config, resume=True, data_parallel_rank=1, data_parallel_size=2)
    with pytest.raises(ConfigError, match="holds checkpoints of an earlier run"):
        launch(spec, run_dir, config, ranks=1)
    with pytest.raises(ConfigError, match="global_batch_size=8 does not split over 3 ranks"):
        launch(spec, run_dir, config, ranks=3)
    for unfinished in ("step-000009.pt.tmp-123", "log.json.tmp-45"):  # as a kill mid-write leaves them
        (tmp_path / "run" / unfinished).write_bytes(b"half")
    assert train.latest_checkpoint(run_dir).endswith("step-000002.pt")
    resumed = launch(spec, run_dir, TrainConfig(**{**vars(config), "steps": 3}), ranks=1, resume=True)
    assert [s["step"] for s in resumed.steps] == [1, 2, 3]
    assert sorted(os.listdir(run_dir)) == ["log.json", "step-000002.pt"]

"""The toy GRPO run through the dock: the policy learns, and both modes are deterministic for a seed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tokenport.demo.grpo import GRPOConfig, _Run, make_dock, run_grpo  # noqa: E402 (after torch's check)
from tokenport.errors import ConfigError  # noqa: E402

CONFIG = GRPOConfig(steps=30)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reward_rises_and_a_run_repeats_bit_for_bit(mode):
    first, again = run_grpo(CONFIG, mode), run_grpo(CONFIG, mode)
    assert np.mean(first.rewards[-5:]) > np.mean(first.rewards[:5]) + 0.1  # chance is 0.1
    assert first.rewards == again.rewards and first.versions == again.versions
    for name, value in first.parameters.items():
        assert torch.equal(value, again.parameters[name]), name
    # sync trains on the newest policy's rollouts; async on rollouts one version behind (max_staleness=1)
    expected = list(range(CONFIG.steps)) if mode == "sync" else [0] + list(range(CONFIG.steps - 1))
    assert list(first.versions) == expected


def test_async_rollouts_never_run_more_than_one_version_ahead_and_nothing_expires():
    run = _Run(CONFIG, make_dock(CONFIG))
    result = run.go("async")
    stats = run.dock.stats()
    assert stats["version"] == CONFIG.steps
    assert stats["expired"] == {"requeued": 0, "dropped": 0, "pending": 0}
    assert len(result.rewards) == CONFIG.steps
    assert run_grpo(CONFIG, "sync").rewards != result.rewards  # off-policy by one version: another run


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="group=1"):
        GRPOConfig(group=1)
    with pytest.raises(ConfigError, match="mode='ray'"):
        run_grpo(CONFIG, "ray")


def test_the_example_script_runs(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "grpo_toy.py"
    spec = importlib.util.spec_from_file_location("grpo_toy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--mode", "async", "--steps", "12"]) == 0
    out = capsys.readouterr().out
    assert out.count("mean reward") == 13 and "(rollouts of policy version 10)" in out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_ray_actors_and_a_ray_dock_the_run_is_the_same_bit_for_bit(ray_session, mode):
    """Rollout and scoring as Ray actors around a RayDock of 2 shards give the in-process run's bits."""
    config = GRPOConfig(steps=12, prompts=32)
    local, remote = run_grpo(config, mode), run_grpo(config, mode, ray_shards=2)
    assert remote.rewards == local.rewards and remote.versions == local.versions
    for name, value in local.parameters.items():
        assert torch.equal(value, remote.parameters[name]), name

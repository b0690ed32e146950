"""A toy GRPO run through the experience dock: a tiny policy learns small sums from a verifiable reward.

A prompt is two digits ``(a, b)``; the policy (an embedding and an MLP, a few thousand parameters)
answers one digit; the reward is 1 when the answer is ``(a + b) % 10``. Each step, the rollout stage
samples ``group`` answers per prompt and puts them into the dock with the policy version that made
them; the reward and reference stages score them (the reference is the initial policy, for the KL
term); the trainer gets the step's rows, normalizes the rewards within each prompt's group (GRPO's
advantage), takes one clipped policy-gradient step and moves the dock's version on.

``mode="sync"``: every stage in turn in one thread, the rollout always on the newest policy.
``mode="async"``: each stage in its own thread, the rollout one step ahead on the policy one version
behind (``max_staleness=1``; admission holds it back from running further ahead). The rollout's version
for each step is fixed by the schedule, not by timing, so both modes are deterministic for a seed.
``run_grpo(..., ray_shards=K)`` runs the same schedule with a ``RayDock`` of K shards and the rollout and
scoring stages as Ray actors: the same bits as in process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_int, check_positive
from ..dock import Column, Dock
from ..errors import ConfigError, DockTimeout

__all__ = ["GRPOConfig", "GRPORun", "Policy", "RolloutStage", "ScoreStage", "make_dock", "run_grpo"]

DIGITS = 10
COLUMNS = (
    Column("prompt", "int64", shape=(2,)),
    Column("answer", "int64"),
    Column("old_logprob", "float32"),
    Column("ref_logprob", "float32"),
    Column("reward", "float32"),
)
STAGES = ("reward", "reference", "train")
TRAINED = ["prompt", "answer", "old_logprob", "ref_logprob", "reward"]  # what the trainer gets of a row
# Staleness at most 1 version; rows that fall too stale are dropped (counted), at most 2 versions in flight.
DOCK_OPTIONS: dict[str, Any] = {"max_staleness": 1, "on_stale": "drop", "max_inflight_versions": 2}


@dataclass(frozen=True)
class GRPOConfig:
    """The run: steps, prompts per step, answers per prompt, the policy's width, the optimizer, the KL weight."""

    steps: int = 40
    prompts: int = 64
    group: int = 8
    hidden: int = 64
    learning_rate: float = 0.05
    kl: float = 0.01
    clip: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        """Check every field, naming the one at fault."""
        for name in ("steps", "prompts", "group", "hidden"):
            check_int(name, getattr(self, name))
        if self.group < 2:
            raise ConfigError(f"group={self.group}: GRPO compares answers within a group; pass 2 or more")
        check_positive("learning_rate", self.learning_rate)
        for name in ("kl", "clip"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0")


class Policy(nn.Module):
    """(a, b) -> logits over the answer digit: two embeddings and a two-layer MLP."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(DIGITS, 16)
        self.mlp = nn.Sequential(nn.Linear(32, hidden), nn.Tanh(), nn.Linear(hidden, DIGITS))

    def forward(self, prompts: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(prompts).flatten(1))


@dataclass(frozen=True)
class GRPORun:
    """Per step: the mean reward of the rollouts trained on, and the policy version that made them."""

    rewards: tuple[float, ...]
    versions: tuple[int, ...]
    parameters: dict[str, torch.Tensor]


def make_dock(config: GRPOConfig) -> Dock:
    """The dock the stages share: one partition per step, rows = prompts x group, staleness at most 1."""
    return Dock(COLUMNS, STAGES, config.group, **DOCK_OPTIONS)


def run_grpo(config: GRPOConfig, mode: str = "sync", *, ray_shards: int | None = None) -> GRPORun:
    """Train a fresh policy for ``config.steps`` GRPO steps through a dock (see the module docstring).

    ``ray_shards=K``: the dock is a ``RayDock`` of K shards and the rollout and scoring stages are Ray
    actors (``ray.init`` must have run); the run gives the same bits as in process, in either mode."""
    if mode not in ("sync", "async"):
        raise ConfigError(f"mode={mode!r}: pass 'sync' or 'async'")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if ray_shards is None:
            return _Run(config, make_dock(config)).go(mode)
        return _ray_run(config, mode, check_int("ray_shards", ray_shards))
    finally:
        torch.set_num_threads(threads)


class RolloutStage:
    """Samples ``group`` answers per prompt with a given policy version's parameters and puts them in the dock."""

    def __init__(self, dock: Any, config: GRPOConfig) -> None:
        self.dock, self.config = dock, config
        torch.set_num_threads(1)

    def run(self, step: int, version: int, parameters: dict[str, torch.Tensor]) -> None:
        policy = Policy(self.config.hidden)
        policy.load_state_dict(parameters)
        generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + step)
        prompts = torch.randint(0, DIGITS, (self.config.prompts, 2), generator=generator)
        prompts = prompts.repeat_interleave(self.config.group, dim=0)
        with torch.no_grad():
            logprobs = F.log_softmax(policy(prompts), dim=-1)
            answers = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(1)
            old = logprobs.gather(1, answers[:, None]).squeeze(1)
        columns = {"prompt": prompts.numpy(), "answer": answers.numpy(), "old_logprob": old.numpy()}
        self.dock.put(_partition(step), columns, rows=range(len(answers)), version=version)


class ScoreStage:
    """The reward (the verifier) and the reference policy's log-probs of a step's answers."""

    def __init__(self, dock: Any, config: GRPOConfig, reference: dict[str, torch.Tensor]) -> None:
        self.dock, self.config = dock, config
        torch.set_num_threads(1)
        self.reference = Policy(config.hidden)
        self.reference.load_state_dict(reference)

    def run(self, step: int) -> None:
        rows = self.config.prompts * self.config.group
        batch = self.dock.get("reward", ["prompt", "answer"], rows, _partition(step), timeout=60)
        prompts, answers = np.asarray(batch["prompt"]), np.asarray(batch["answer"])
        rewards = (answers == prompts.sum(axis=1) % DIGITS).astype(np.float32)
        self.dock.put(_partition(step), {"reward": rewards}, rows=batch.rows)
        batch = self.dock.get("reference", ["prompt", "answer"], rows, _partition(step), timeout=60)
        with torch.no_grad():
            logprobs = F.log_softmax(self.reference(torch.from_numpy(np.asarray(batch["prompt"]))), dim=-1)
            answers_t = torch.from_numpy(np.asarray(batch["answer"]))
            reference = logprobs.gather(1, answers_t[:, None]).squeeze(1).numpy()
        self.dock.put(_partition(step), {"ref_logprob": reference}, rows=batch.rows)


class _Trainer:
    """The policy, its optimizer and the GRPO step; each step's mean reward and the version it trained on."""

    def __init__(self, config: GRPOConfig) -> None:
        self.config = config
        torch.manual_seed(config.seed)
        self.policy = Policy(config.hidden)
        self.initial = _snapshot(self.policy)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.rewards: list[float] = []
        self.versions: list[int] = []

    def train(self, batch: Any) -> dict[str, torch.Tensor]:
        """One clipped GRPO step on a step's rows; the new parameters (the next version's)."""
        order = np.argsort(batch.rows, kind="stable")  # rows in row order: groups are consecutive rows
        data = {name: torch.from_numpy(np.asarray(batch[name])[order]) for name in TRAINED}
        reward = data["reward"].view(-1, self.config.group)
        advantage = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-4)).flatten()
        logprobs = F.log_softmax(self.policy(data["prompt"]), dim=-1)
        logprob = logprobs.gather(1, data["answer"][:, None]).squeeze(1)
        ratio = (logprob - data["old_logprob"]).exp()
        clipped = ratio.clamp(1 - self.config.clip, 1 + self.config.clip)
        surrogate = torch.minimum(ratio * advantage, clipped * advantage)
        log_ratio = data["ref_logprob"] - logprob  # k3 estimator of KL(policy || reference)
        kl = log_ratio.exp() - log_ratio - 1
        loss = -(surrogate - self.config.kl * kl).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.rewards.append(float(reward.mean()))
        self.versions.append(int(np.asarray(batch.versions).min()))
        return _snapshot(self.policy)

    def result(self) -> GRPORun:
        return GRPORun(tuple(self.rewards), tuple(self.versions), _snapshot(self.policy))


class _Run:
    """One in-process run: the stages over one Dock, in turn or in threads; the published policy versions."""

    def __init__(self, config: GRPOConfig, dock: Dock) -> None:
        self.config, self.dock = config, dock
        self.trainer = _Trainer(config)
        self.rollouts = RolloutStage(dock, config)
        self.scores = ScoreStage(dock, config, self.trainer.initial)
        self.published = {0: self.trainer.initial}  # version -> parameters, as the trainer published them
        self.ready = threading.Condition()
        self.failure: BaseException | None = None  # a stage thread's error, raised in the trainer's thread

    def go(self, mode: str) -> GRPORun:
        for step in range(self.config.steps):
            self.dock.add_partition(_partition(step), self.config.prompts)
        if mode == "sync":
            for step in range(self.config.steps):
                self.rollout(step, version=step)
                self.scores.run(step)
                self.train(step)
        else:
            stages = [
                threading.Thread(target=self._guarded, args=(self._rollouts,), daemon=True),
                threading.Thread(target=self._guarded, args=(self._scores,), daemon=True),
            ]
            for stage in stages:
                stage.start()
            for step in range(self.config.steps):
                self.train(step)
            for stage in stages:
                stage.join(timeout=60)
        return self.trainer.result()

    def rollout(self, step: int, version: int) -> None:
        """The rollout of ``step`` on the policy of ``version``, once the trainer has published it."""
        with self.ready:
            if not self.ready.wait_for(lambda: version in self.published, timeout=60):
                raise DockTimeout(f"the rollout waited 60 s for policy version {version}; is the trainer running?")
            parameters = self.published[version]
        self.rollouts.run(step, version, parameters)

    def train(self, step: int) -> None:
        """Train on the step's rows; move the dock's version on, then publish the policy as that version."""
        parameters = self.trainer.train(self._get(step))
        self.dock.set_version(step + 1)  # first: a rollout may put rows of a version once it is published
        with self.ready:
            self.published[step + 1] = parameters
            self.ready.notify_all()

    def _get(self, step: int) -> Any:
        """The step's rows for the trainer, waiting up to 60 s, a second at a time so that a failed stage
        thread's error is raised here instead of a timeout."""
        rows = self.config.prompts * self.config.group
        for _ in range(60):
            if self.failure is not None:
                raise self.failure
            try:
                return self.dock.get("train", TRAINED, rows, _partition(step), timeout=1)
            except DockTimeout:
                continue
        raise DockTimeout(f"train waited 60 s for the rows of step {step}")

    def _guarded(self, stage: Any) -> None:
        try:
            stage()
        except BaseException as error:  # handed to the trainer's thread, which raises it
            self.failure = error

    def _rollouts(self) -> None:
        for step in range(self.config.steps):
            self.dock.admit(timeout=60)
            self.rollout(step, version=max(0, step - 1))  # one step ahead, one version behind

    def _scores(self) -> None:
        for step in range(self.config.steps):
            self.scores.run(step)


def _ray_run(config: GRPOConfig, mode: str, shards: int) -> GRPORun:
    """The run with a RayDock and the rollout and scoring stages as Ray actors, the trainer in this process.
    The schedule is the in-process one: sync rolls out step s on version s; async rolls out step s + 1 on
    version s while step s trains."""
    import ray

    from ..dock.ray import RayDock

    dock = RayDock(COLUMNS, STAGES, config.group, shards=shards, **DOCK_OPTIONS)
    try:
        trainer = _Trainer(config)
        rollouts: Any = ray.remote(RolloutStage).remote(dock, config)  # actor handles: .run.remote(...)
        scores: Any = ray.remote(ScoreStage).remote(dock, config, trainer.initial)
        for step in range(config.steps):
            dock.add_partition(_partition(step), config.prompts)
        rows = config.prompts * config.group
        parameters = trainer.initial
        pending: list[Any] = []
        if mode == "async":
            pending = [rollouts.run.remote(0, 0, parameters), scores.run.remote(0)]
        for step in range(config.steps):
            if mode == "sync":
                ray.get(rollouts.run.remote(step, step, parameters))
                ray.get(scores.run.remote(step))
            elif step + 1 < config.steps:  # the next step's rollout, on the version just published
                pending += [rollouts.run.remote(step + 1, step, parameters), scores.run.remote(step + 1)]
            batch = dock.get("train", TRAINED, rows, _partition(step), timeout=120)
            parameters = trainer.train(batch)
            dock.set_version(step + 1)
        ray.get(pending)
        return trainer.result()
    finally:
        dock.shutdown()


def _partition(step: int) -> str:
    return f"step-{step:05d}"


def _snapshot(policy: nn.Module) -> dict[str, Any]:
    return {name: value.detach().clone() for name, value in policy.state_dict().items()}

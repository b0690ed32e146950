"""Stage 9 of `tokenport demo`: a GRPO-shaped step through the experience dock, in process and without
torch: rollout, reward and advantage stages in threads, two training ranks balanced by Karmarkar-Karp."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import cast

import numpy as np

from ..dock import Balanced, Column, Dock, Packed, PromptGroups
from ..indexed import IndexedDataset


def experience_stage(prefix: str, checkpoint: str, echo: Callable[[str], None]) -> None:
    """A GRPO-shaped step through the experience dock: rollout, reward, advantages, balanced training."""
    echo("\n== 9. dock: RL experience between stages (rollout -> reward -> advantages -> 2 training ranks)")
    ds = IndexedDataset(prefix)
    group, prompts = 8, 16
    dock = Dock(
        [
            Column("prompts", np.uint16, ragged=True),
            Column("responses", np.uint16, ragged=True),
            Column("reward", np.float32),
            Column("advantages", np.float32),
        ],
        ["rollout", "reward", "advantage", "train"],
        n_samples_per_prompt=group,
    )
    dock.add_partition("step-0", num_prompts=prompts)
    dock.put(
        "step-0",
        {"prompts": [ds[i % len(ds)][:64] for i in range(0, prompts * group, group) for _ in range(group)]},
        rows=range(prompts * group),
    )
    stages = [threading.Thread(target=stage) for stage in _dock_stages(dock, ds, group)]
    begin = time.perf_counter()
    for stage in stages:
        stage.start()
    loads = []
    while (
        batch := dock.get(
            "train", ["responses", "advantages"], 32, "step-0", sampler=Balanced(2, "responses"), timeout=30
        )
    ) is not None:
        loads.append([int(cast(Packed, part["responses"]).lengths.sum()) for part in batch.split(2)])
    for stage in stages:
        stage.join()
    elapsed = time.perf_counter() - begin
    stats = dock.stats()["consumers"]
    echo(
        f"{prompts * group} rows ({prompts} prompts x {group}) through 3 stage threads and the trainer in "
        f"{elapsed * 1000:.0f} ms; rows served per stage: "
        + ", ".join(f"{name} {s['rows']}" for name, s in stats.items())
    )
    echo(f"train batches of 32 split over 2 ranks by Karmarkar-Karp, response tokens per rank: {loads}")
    dock.save(checkpoint)
    restored = Dock.load(checkpoint)
    echo(
        f"checkpoint {os.path.basename(checkpoint)}/ saved and reloaded: {restored.partitions['step-0']} rows, "
        f"all consumed by train: {restored.all_consumed('train', 'step-0')}"
    )
    ds.close()


def _dock_stages(dock: Dock, ds: IndexedDataset, group: int) -> tuple[Callable[[], None], ...]:
    """The stages before training, each a loop over the dock's batches: rollout, reward, advantages."""

    def rollout() -> None:  # a stand-in for generation: each response is a slice of another document
        while (batch := dock.get("rollout", ["prompts"], 32, "step-0", timeout=30)) is not None:
            responses = [ds[(7 * row + 3) % len(ds)][: 16 + 61 * (row % 23)] for row in batch.rows.tolist()]
            dock.put("step-0", {"responses": responses}, rows=batch.rows)

    def reward() -> None:  # a stand-in scorer: share of spaces among the response's bytes
        while (batch := dock.get("reward", ["responses"], 16, "step-0", timeout=30)) is not None:
            responses = cast(Packed, batch["responses"]).to_list()
            scores = [float(np.mean(r == 32)) if len(r) else 0.0 for r in responses]
            dock.put("step-0", {"reward": np.array(scores)}, rows=batch.rows)

    def advantages() -> None:  # GRPO: reward normalized within each prompt's group
        while (
            batch := dock.get("advantage", ["reward"], group, "step-0", sampler=PromptGroups(), timeout=30)
        ) is not None:
            r = cast(np.ndarray, batch["reward"])
            dock.put("step-0", {"advantages": (r - r.mean()) / (r.std() + 1e-6)}, rows=batch.rows)

    return rollout, reward, advantages

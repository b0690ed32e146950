"""The demo's mixing run: a tiny decoder trained on an AdaptiveBlend whose weights a controller moves as it learns.

Each step's per-dataset loss (from the batch's ``dataset_id``) goes to the loader's controller; the weights it
returns apply from the next sample the loader has not yet resolved, and every update is kept in the loader
state, so the run can be resumed, and any step traced back to its documents, without the controller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..blend import AdaptiveBlend, MixtureController, MixtureSignals
from ..integrations.torch import StatefulLoader
from ..sampling import PretrainingSampler
from ..tokenizers import load_tokenizer
from .train import TinyDecoder, TrainConfig, _deterministic

__all__ = ["MixingRun", "train_mixture"]


@dataclass(frozen=True)
class MixingRun:
    """What a mixing run did: per step the mean loss of each dataset in its batch (nan when absent), the weight
    updates (first sample, weights), the target and realized shares of all samples read, and the loader state."""

    losses: np.ndarray
    updates: tuple[tuple[int, tuple[float, ...]], ...]
    target: np.ndarray
    realized: np.ndarray
    state: dict[str, Any]


def train_mixture(
    children: Sequence[Any],
    config: TrainConfig,
    controller: MixtureController,
    *,
    on_step: Callable[[int, int], None] | None = None,
) -> MixingRun:
    """Train a fresh TinyDecoder for ``config.steps`` steps of ``config.global_batch_size`` GPT samples drawn
    from ``children`` (equal weights at first) by an AdaptiveBlend that ``controller`` steers after each step;
    ``on_step(steps done, steps)`` follows it."""
    n = len(children)
    total = config.steps * config.global_batch_size
    with _deterministic():
        torch.manual_seed(config.seed)
        model = TinyDecoder(
            load_tokenizer("byte").vocab_size, config.seq_length, config.width, config.layers, config.heads
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
        blend = AdaptiveBlend(children, [1.0] * n, num_samples=total)
        sampler = PretrainingSampler(total, 0, config.global_batch_size, 0, 1)
        loader = StatefulLoader(blend, sampler, controller=controller)
        losses = np.full((config.steps, n), np.nan)
        for step, batch in zip(range(config.steps), loader):
            logits = model(batch["tokens"].long(), batch["position_ids"].long(), batch["cu_seqlens"])
            token_loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].long().flatten(), reduction="none")
            mask = batch["loss_mask"].to(token_loss.dtype)
            per_sample = (token_loss.view_as(mask) * mask).sum(1)
            counts = mask.sum(1)
            optimizer.zero_grad(set_to_none=True)
            (per_sample.sum() / counts.sum()).backward()
            optimizer.step()
            signals = MixtureSignals.from_batch(
                batch["dataset_id"].numpy(), per_sample.detach().numpy(), counts.numpy(), n
            )
            losses[step] = signals.mean_loss()
            loader.update_mixture(signals)
            if on_step is not None:
                on_step(step + 1, config.steps)
        read = loader.consumed_samples
        return MixingRun(
            losses,
            tuple((int(start), tuple(float(w) for w in weights)) for start, weights in blend.updates),
            blend.target_shares(read),
            blend.realized_shares(read),
            loader.state_dict(),
        )

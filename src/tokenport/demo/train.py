"""A tiny decoder-only model trained on the demo's stores through tokenport, with exact resume.

The run reads a blend of the code and prose stores as GPT samples (``seq_length`` tokens, position
ids restarting at each document, no loss on EOD), each data-parallel rank taking its micro-batch
from a `StatefulLoader`; attention is causal within each document of a sample (a block-causal mask
from the samples' ``cu_seqlens``). Ranks all-reduce their gradients over ``torch.distributed``
(gloo); kernels are deterministic on one CPU thread, so a run resumed from a checkpoint (model,
optimizer, RNG, step, loss log and the loader's state, written atomically) repeats the loss curve
bit for bit. Rank 0 keeps ``log.json``: per step the loss (exact float hex), the global sample ids
and a digest of the global batch's tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .. import RandomSampler, StatefulLoader
from .._checks import check_int, check_positive, check_seed
from ..builder import build_datasets
from ..corpus import PrepareConfig, prepare
from ..errors import ConfigError
from ..samples.gpt import GPTSampleConfig
from ..tokenizers import load_tokenizer
from .corpus import build_demo_corpus

__all__ = [
    "TinyDecoder",
    "TrainConfig",
    "TrainLog",
    "document_mask",
    "fit",
    "latest_checkpoint",
    "launch",
    "masked_loss",
    "prepare_training_stores",
    "train",
]

_CHECKPOINT = re.compile(r"^step-(\d{6})\.pt$")
_UNFINISHED = re.compile(r"\.tmp-\d+$")  # a file being written, renamed into place when complete
# Fields a resumed run may change: the others fix the data stream, the model or the optimizer.
_FREE_FIELDS = ("steps", "checkpoint_every")


@dataclass(frozen=True)
class TrainConfig:
    """One tiny run: data (samples, batch, seed), model shape, optimizer, length and checkpoint interval.

    ``num_samples`` GPT samples are built from the blend; the sampler walks them epoch after epoch,
    each in a fresh order, so ``steps`` may grow on resume. ``global_batch_size`` is split evenly
    over the data-parallel ranks.
    """

    steps: int = 40
    checkpoint_every: int = 10
    global_batch_size: int = 8
    seq_length: int = 64
    num_samples: int = 2048
    seed: int = 1234
    width: int = 64
    layers: int = 2
    heads: int = 4
    learning_rate: float = 3e-3

    def __post_init__(self) -> None:
        """Check every field, naming the one at fault."""
        for name in ("steps", "checkpoint_every", "global_batch_size", "seq_length", "num_samples"):
            check_int(name, getattr(self, name))
        for name in ("width", "layers", "heads"):
            check_int(name, getattr(self, name))
        check_seed("seed", self.seed)
        check_positive("learning_rate", self.learning_rate)
        if self.width % self.heads:
            raise ConfigError(f"width={self.width} is not a multiple of heads={self.heads}: pass a width heads divides")


class _Block(nn.Module):
    """Pre-norm transformer block: attention through a given mask, then an MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks, a vocabulary head.

    ``forward(tokens, position_ids, cu_seqlens)`` attends causally within each document of a
    sample (documents from the samples' ``cu_seqlens``) and returns logits ``(batch, seq, vocab)``.
    """

    def __init__(self, vocab_size: int, seq_length: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(seq_length, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        mask = document_mask(cu_seqlens, tokens.shape[1])
        x = self.embed(tokens) + self.position(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def document_mask(cu_seqlens: torch.Tensor, seq_length: int) -> torch.Tensor:
    """The (batch, 1, seq, seq) boolean mask, True where a query may attend: same document, not later.

    ``cu_seqlens`` (batch, n) are each sample's document starts then ``seq_length`` repeated, as
    tokenport's GPT samples give them.
    """
    positions = torch.arange(seq_length, dtype=cu_seqlens.dtype).expand(cu_seqlens.shape[0], seq_length)
    document = torch.searchsorted(cu_seqlens.contiguous(), positions.contiguous(), right=True)
    same = document[:, :, None] == document[:, None, :]
    causal = torch.ones(seq_length, seq_length, dtype=torch.bool).tril()
    return (same & causal)[:, None]


@dataclass(frozen=True)
class TrainLog:
    """Rank 0's record of a run: per step its number, loss (float hex), data-parallel size,
    global sample ids (rank after rank) and the blake2b digest of the global batch's tokens."""

    config: dict[str, Any]
    steps: tuple[dict[str, Any], ...]

    @property
    def losses(self) -> list[float]:
        """The per-step losses, exactly."""
        return [float.fromhex(step["loss"]) for step in self.steps]

    @classmethod
    def load(cls, run_dir: str) -> TrainLog:
        """Read ``run_dir/log.json``."""
        with open(os.path.join(run_dir, "log.json"), encoding="utf-8") as f:
            data = json.load(f)
        return cls(data["config"], tuple(data["steps"]))


def prepare_training_stores(workdir: str, *, limit: int | None = 40) -> str:
    """The blend spec of code and prose stores under ``workdir/stores`` (the demo's layout), made
    from the first ``limit`` stdlib modules when it is not there yet; returns the spec's path."""
    stores = os.path.join(workdir, "stores")
    spec = os.path.join(stores, "blend.json")
    if os.path.exists(spec):
        return spec
    corpus = build_demo_corpus(os.path.join(workdir, "corpus"), limit=limit)
    parts = {}
    for name, path in (("code", corpus.code_path), ("prose", corpus.prose_path)):
        result = prepare(PrepareConfig(inputs=(path,), output=os.path.join(stores, name), workers=1))
        parts[name] = list(result.parts)
    blend = {"blend": [{"name": n, "weight": w, "parts": parts[n]} for n, w in (("code", 0.3), ("prose", 0.7))]}
    _write_atomic(spec, json.dumps(blend, indent=2).encode())
    return spec


def latest_checkpoint(run_dir: str) -> str | None:
    """The path of the newest complete checkpoint in ``run_dir`` (temporary files are ignored), or None."""
    if not os.path.isdir(run_dir):
        return None
    found = sorted(name for name in os.listdir(run_dir) if _CHECKPOINT.match(name))
    return os.path.join(run_dir, found[-1]) if found else None


def train(
    spec: str,
    run_dir: str,
    config: TrainConfig,
    *,
    resume: bool = False,
    data_parallel_rank: int = 0,
    data_parallel_size: int = 1,
    on_step: Callable[[int, int], None] | None = None,
) -> TrainLog:
    """Train this rank to ``config.steps`` (all ranks call it; a process group is needed above one rank).

    ``resume`` continues from ``latest_checkpoint(run_dir)``, on any number of ranks dividing the
    global batch; a checkpoint of another configuration (beyond ``steps`` and
    ``checkpoint_every``) is refused. Returns the log (complete on rank 0).
    """
    _check_ranks(config, data_parallel_size)
    if data_parallel_size > 1 and not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(
            f"data_parallel_size={data_parallel_size} needs a torch.distributed process group: "
            "call dist.init_process_group first, or use launch()"
        )
    with _deterministic():
        state = _checkpoint_to_resume(run_dir, config, resume)
        dataset = _training_dataset(spec, config, data_parallel_rank)
        torch.manual_seed(config.seed)
        model = TinyDecoder(
            load_tokenizer("byte").vocab_size, config.seq_length, config.width, config.layers, config.heads
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
        loader, sampler = _loader(dataset, config, data_parallel_rank, data_parallel_size)
        steps: list[dict[str, Any]] = []
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            loader.load_state_dict(state["loader"])
            steps = list(state["steps"])
        os.makedirs(run_dir, exist_ok=True)
        if data_parallel_rank == 0:
            _remove_unfinished(run_dir)
        batches = _batches(loader)
        while len(steps) < config.steps:
            record = _step(model, optimizer, sampler, next(batches), data_parallel_size)
            steps.append({"step": len(steps) + 1, "data_parallel_size": data_parallel_size, **record})
            if data_parallel_rank == 0:
                _write_atomic(
                    os.path.join(run_dir, "log.json"), json.dumps({"config": asdict(config), "steps": steps}).encode()
                )
                if len(steps) % config.checkpoint_every == 0:
                    _save(run_dir, config, model, optimizer, loader, steps)
            if on_step is not None:
                on_step(len(steps), config.steps)
        return TrainLog(asdict(config), tuple(steps))


def _check_ranks(config: TrainConfig, ranks: int) -> None:
    """ConfigError unless ``ranks`` is a positive count that divides the global batch."""
    if check_int("ranks", ranks) and config.global_batch_size % ranks:
        raise ConfigError(
            f"global_batch_size={config.global_batch_size} does not split over {ranks} ranks: "
            "pass a rank count that divides it"
        )


def _training_dataset(spec: str, config: TrainConfig, data_parallel_rank: int) -> Any:
    """The blend's train split as GPT samples; rank 0 builds the cached indices before the others read them."""
    sample_config = GPTSampleConfig(config.seq_length, reset_position_ids=True, eod_mask_loss=True)
    cache = os.path.join(os.path.dirname(os.path.abspath(spec)), "index-cache")

    def build() -> Any:
        split = "1,0,0"  # every document is training data
        sizes = (config.num_samples, 0, 0)
        return build_datasets(spec, sizes=sizes, config=sample_config, seed=config.seed, split=split, cache=cache)[0]

    if not (dist.is_available() and dist.is_initialized()):
        return build()
    dataset = build() if data_parallel_rank == 0 else None
    dist.barrier()
    return build() if dataset is None else dataset


def _batches(loader: StatefulLoader) -> Iterator[dict[str, torch.Tensor]]:
    """The loader's batches epoch after epoch (one ``for`` over it walks the rest of one epoch)."""
    while True:
        yield from loader


def _step(
    model: TinyDecoder,
    optimizer: torch.optim.Optimizer,
    sampler: RandomSampler,
    batch: dict[str, torch.Tensor],
    data_parallel_size: int,
) -> dict[str, Any]:
    """One optimizer step on the global batch; the loss is the mean over all ranks' loss tokens."""
    consumed = sampler.consumed_samples - sampler.global_batch_size  # the loader counted this batch already
    epoch, offset = divmod(consumed, sampler.active_samples)
    ids = sampler.global_batches(epoch)[offset // sampler.global_batch_size]
    total, count = masked_loss(model, batch)
    tokens = batch["tokens"].long()
    if data_parallel_size > 1:
        dist.all_reduce(count)
        gathered = [torch.empty_like(tokens) for _ in range(data_parallel_size)]
        dist.all_gather(gathered, tokens)
        tokens = torch.cat(gathered)
    optimizer.zero_grad(set_to_none=True)
    (total / count).backward()
    if data_parallel_size > 1:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        total = total.detach().clone()
        dist.all_reduce(total)
    optimizer.step()
    loss = float(total.detach() / count)
    return {
        "loss": loss.hex(),
        "loss_repr": repr(loss),
        "sample_ids": ids.tolist(),
        "tokens_digest": hashlib.blake2b(tokens.numpy().astype(np.int64).tobytes(), digest_size=16).hexdigest(),
    }


def masked_loss(model: TinyDecoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the token losses where ``loss_mask`` is 1, their count) on a Megatron-shaped batch
    (``tokens``, pre-shifted ``labels`` with -100 ignored, ``loss_mask``, ``position_ids``, ``cu_seqlens``)."""
    logits = model(batch["tokens"].long(), batch["position_ids"].long(), batch["cu_seqlens"])
    losses = F.cross_entropy(logits.flatten(0, 1), batch["labels"].long().flatten(), reduction="none")
    mask = batch["loss_mask"].flatten().to(losses.dtype)
    return (losses * mask).sum(), mask.sum()


def fit(dataset: Any, config: TrainConfig, *, on_step: Callable[[int, int], None] | None = None) -> list[float]:
    """Train a fresh `TinyDecoder` for ``config.steps`` steps on one rank over ``dataset`` (any tokenport
    dataset of Megatron-shaped samples of ``config.seq_length`` tokens, e.g. an `SFTDataset`); returns
    the per-step losses. No checkpoints: the quick run the demo's SFT stage makes."""
    if getattr(dataset, "seq_length", config.seq_length) != config.seq_length:
        raise ConfigError(
            f"seq_length={config.seq_length}: the dataset's samples hold {dataset.seq_length} tokens; "
            "pass the dataset's seq_length"
        )
    with _deterministic():
        torch.manual_seed(config.seed)
        model = TinyDecoder(
            load_tokenizer("byte").vocab_size, config.seq_length, config.width, config.layers, config.heads
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
        batches = _batches(_loader(dataset, config, 0, 1)[0])
        losses = []
        for _ in range(config.steps):
            total, count = masked_loss(model, next(batches))
            optimizer.zero_grad(set_to_none=True)
            (total / count).backward()
            optimizer.step()
            losses.append(float(total.detach() / count))
            if on_step is not None:
                on_step(len(losses), config.steps)
        return losses


def _save(
    run_dir: str,
    config: TrainConfig,
    model: TinyDecoder,
    optimizer: torch.optim.Optimizer,
    loader: StatefulLoader,
    steps: list[dict[str, Any]],
) -> None:
    """Write ``step-NNNNNN.pt`` to a temporary name and rename it into place: a kill leaves no half file."""
    state = {
        "config": asdict(config),
        "step": len(steps),
        "steps": steps,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "loader": loader.state_dict(),
    }
    path = os.path.join(run_dir, f"step-{len(steps):06d}.pt")
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def _checkpoint_to_resume(run_dir: str, config: TrainConfig, resume: bool) -> dict[str, Any] | None:
    """The newest checkpoint's state when resuming (checked against ``config``), else None.

    ConfigError: resuming with no checkpoint, or one of another configuration; starting anew
    where checkpoints are.
    """
    path = latest_checkpoint(run_dir)
    if not resume:
        if path is not None:
            raise ConfigError(f"{run_dir} holds checkpoints of an earlier run: pass resume=True, or a new run_dir")
        return None
    if path is None:
        raise ConfigError(f"resume: {run_dir} holds no checkpoint (step-NNNNNN.pt); run without resume first")
    state = torch.load(path, weights_only=True)
    saved = state["config"]
    changed = [
        f"{f.name} {saved.get(f.name)!r} -> {getattr(config, f.name)!r}"
        for f in fields(config)
        if f.name not in _FREE_FIELDS and saved.get(f.name) != getattr(config, f.name)
    ]
    if changed:
        raise ConfigError(
            f"{path}: written by a run of another configuration ({'; '.join(changed)}); only steps and "
            "checkpoint_every may change on resume: pass the checkpoint's values or start a new run_dir"
        )
    if state["step"] > config.steps:
        raise ConfigError(f"steps={config.steps} is behind the checkpoint's step {state['step']}: pass more steps")
    return dict(state)


def _loader(
    dataset: Any, config: TrainConfig, data_parallel_rank: int, data_parallel_size: int
) -> tuple[StatefulLoader, RandomSampler]:
    """This rank's loader and its elastic RandomSampler (the order depends only on the global batch and seed)."""
    sampler = RandomSampler(
        len(dataset),
        0,
        micro_batch_size=config.global_batch_size // data_parallel_size,
        data_parallel_rank=data_parallel_rank,
        data_parallel_size=data_parallel_size,
        seed=config.seed,
    )
    return StatefulLoader(dataset, sampler), sampler


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """Deterministic kernels on one thread for the block, restoring the caller's settings after."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _remove_unfinished(run_dir: str) -> None:
    """Delete the temporary files of writes a killed run left (never renamed into place, never read)."""
    for name in os.listdir(run_dir):
        if _UNFINISHED.search(name):
            os.remove(os.path.join(run_dir, name))


def _write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def launch(
    spec: str,
    run_dir: str,
    config: TrainConfig,
    *,
    ranks: int = 2,
    resume: bool = False,
    on_step: Callable[[int, int], None] | None = None,
) -> TrainLog:
    """Run `train` on ``ranks`` processes over gloo on this machine (in this process for one rank, which
    calls ``on_step(steps done, steps)`` after each step)."""
    _check_ranks(config, ranks)
    if ranks == 1:
        return train(spec, run_dir, config, resume=resume, on_step=on_step)
    if on_step is not None:
        raise ConfigError(
            f"on_step with ranks={ranks}: the ranks train in other processes, so it would never be called; "
            "use ranks=1, or follow the run in RUN_DIR/log.json"
        )
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with _deterministic():  # set up (imports), indices cached and sample kernels loaded once, before the fork
        state = _checkpoint_to_resume(run_dir, config, resume)
        dataset = _training_dataset(spec, config, 0)
        dataset[0]
        if state is not None:  # a refused resume is an error here, not in every rank
            _loader(dataset, config, 0, ranks)[0].load_state_dict(state["loader"])
        mp.start_processes(
            _rank_main, args=(ranks, port, spec, run_dir, config, resume), nprocs=ranks, start_method="fork"
        )
    return TrainLog.load(run_dir)


def _rank_main(rank: int, ranks: int, port: int, spec: str, run_dir: str, config: TrainConfig, resume: bool) -> None:
    """One spawned rank: join the gloo group, train, leave."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    try:
        train(spec, run_dir, config, resume=resume, data_parallel_rank=rank, data_parallel_size=ranks)
    finally:
        dist.destroy_process_group()

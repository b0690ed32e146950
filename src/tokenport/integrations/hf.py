"""transformers' Trainer on tokenport datasets: tokenport's sampler, its loader state in every checkpoint.

``TokenportTrainer`` is a ``transformers.Trainer`` whose training batches come from a tokenport
``StatefulLoader`` over ``train_dataset`` (a GPTDataset, BlendedDataset, PackedDataset, a split of
``build_datasets``...): this rank's part of each global batch, in the order of a tokenport
``RandomSampler`` (``train_sampling_strategy="random"``, reshuffled each epoch, seeded with
``data_seed`` or ``seed``) or ``PretrainingSampler`` (``"sequential"``, one pass). Each checkpoint
directory gets ``tokenport_loader.json``; ``train(resume_from_checkpoint=...)`` restores it and
continues with exactly the next batch, without the Trainer's skip loop (no batch is read twice or
skipped over), while the Trainer's step, epoch and gradient-accumulation bookkeeping stays its own.
``TokenportCollator`` turns tokenport's samples (pre-shifted Megatron labels) into a causal LM's inputs.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .._optional import require

try:
    import torch
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "transformers", extra="trainer", feature="tokenport.integrations.hf (HF Trainer)")
    raise
from .._schema import Count, Document, decode
from ..errors import ConfigError, InputDataError
from ..sampling.pretraining import PretrainingSampler, RandomSampler
from ..sampling.state import read_loader_state
from .receipt import check_allow_changes
from .torch import StatefulLoader

__all__ = ["LOADER_STATE_NAME", "TokenportCollator", "TokenportTrainer"]

LOADER_STATE_NAME = "tokenport_loader.json"
_FILE_VERSION = 1


class _LoaderFile(Document, frozen=True):
    """``tokenport_loader.json`` in a checkpoint: its version, the Trainer's global step, the loader state."""

    version: Literal[1]
    global_step: Count
    loader: dict[str, Any]


_STRATEGIES = ("random", "sequential")
# The Trainer internals TokenportTrainer hooks (transformers 5): _run_epoch and the parameters it passes on.
_RUN_EPOCH_PARAMETERS = (
    "self",
    "model",
    "epoch",
    "train_dataloader",
    "steps_in_epoch",
    "num_update_steps_per_epoch",
    "trial",
    "ignore_keys_for_eval",
    "start_time",
    "resume_from_checkpoint",
    "epochs_trained",
    "steps_trained_in_current_epoch",
)


class TokenportCollator:
    """tokenport sample dicts -> ``input_ids``, ``labels``, ``shift_labels`` and ``position_ids`` tensors.

    tokenport's samples carry Megatron's pre-shifted ``labels`` (``labels[t]`` is the target of
    position ``t``) and, for GPT samples, a ``loss_mask``; positions without loss get
    ``ignore_index``. ``shift_labels`` holds those targets as they are: transformers' causal LM loss
    uses it instead of shifting ``labels``, so the last position keeps its target. ``labels`` is the
    same targets in Hugging Face's unshifted layout (``labels[t + 1] == shift_labels[t]``), so a model
    that ignores ``shift_labels`` still trains on the right targets (all but the last). With
    ``position_ids=True`` the samples' position ids are passed: where they restart (packed samples,
    ``reset_position_ids``), transformers' sdpa/eager attention masks each document off the others
    (when the model runs without a KV cache, as under the Trainer: ``args.use_cache`` is False).
    Hugging Face-shaped samples (``SFTDataset(shape="hf")``: ``input_ids`` and unshifted ``labels``) are
    taken as they are: ``labels`` is passed and ``shift_labels`` is ``labels`` shifted left by one.
    """

    removal_layout = "causal_lm"
    """How a loader hides a removed document's tokens in this collate's batches (``integrations.removal``)."""

    def __init__(self, *, position_ids: bool = True, ignore_index: int = -100) -> None:
        self.position_ids = bool(position_ids)
        self.ignore_index = int(ignore_index)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """The batch of ``samples`` as int64 tensors of shape (batch, seq_length)."""
        if len(samples) == 0:
            raise ConfigError("samples: the batch is empty; the sampler must give at least one sample")
        hf = isinstance(samples[0], Mapping) and "input_ids" in samples[0]
        tokens = _stack(samples, "input_ids" if hf else "tokens")
        given = _stack(samples, "labels")
        if given.shape != tokens.shape:
            raise InputDataError(f"samples: labels {given.shape} and tokens {tokens.shape} differ in shape")
        if hf:  # unshifted: labels[t] is the target of position t - 1
            labels = given
            if ((labels < 0) & (labels != self.ignore_index)).any():
                raise InputDataError(
                    f"samples: labels hold negative values other than ignore_index={self.ignore_index}; build the "
                    f"dataset with label_pad={self.ignore_index} or pass TokenportCollator(ignore_index=...) to match"
                )
            targets = np.full_like(labels, self.ignore_index)
            targets[:, :-1] = labels[:, 1:]
        else:  # pre-shifted: labels[t] is the target of position t
            targets = given.copy()
            if "loss_mask" in samples[0]:
                targets[_stack(samples, "loss_mask", integer=False) == 0] = self.ignore_index
            labels = np.full_like(targets, self.ignore_index)
            labels[:, 1:] = targets[:, :-1]
        batch = {"input_ids": tokens, "labels": labels, "shift_labels": targets}
        if self.position_ids and "position_ids" in samples[0]:
            batch["position_ids"] = _stack(samples, "position_ids")
        return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in batch.items()}


def _stack(samples: Sequence[Mapping[str, Any]], name: str, *, integer: bool = True) -> np.ndarray:
    """Field ``name`` of every sample as one (batch, length) array (int64 when ``integer``)."""
    for index, sample in enumerate(samples):
        if not isinstance(sample, Mapping) or name not in sample:
            keys = sorted(sample) if isinstance(sample, Mapping) else type(sample).__name__
            raise ConfigError(
                f"samples[{index}] has no {name!r} (got {keys}): TokenportCollator takes tokenport's GPT, "
                "blended, packed or SFT samples; pass your own data_collator= for other data"
            )
    rows = [np.asarray(sample[name]) for sample in samples]
    lengths = {row.shape for row in rows}
    if len(lengths) != 1 or rows[0].ndim != 1:
        raise InputDataError(
            f"samples: {name!r} must be 1-D and of one length in a batch, got shapes {sorted(lengths)}"
        )
    array = np.stack(rows)
    if integer:
        if array.dtype.kind not in "iu":
            raise InputDataError(f"samples: {name!r} must hold integer ids, got dtype {array.dtype}")
        return array.astype(np.int64, copy=False)
    return array


class TokenportTrainer(Trainer):
    """A ``transformers.Trainer`` reading ``train_dataset`` through tokenport's sampler, resumed exactly.

    Per-device micro-batch ``per_device_train_batch_size``, data-parallel rank and size from
    ``args.process_index`` and ``args.world_size``; the loader is not wrapped by accelerate (each
    rank reads only its own samples). ``data_collator`` defaults to ``TokenportCollator()``. A final
    incomplete global batch is never used (Megatron's rule), whatever ``dataloader_drop_last`` says.
    Settings that cannot resume exactly are refused with a ConfigError saying what to set instead.
    ``self.loader`` is the StatefulLoader of the current ``train()`` call. On
    ``resume_from_checkpoint`` the checkpoint's data receipt must match ``train_dataset``;
    ``allow_changes`` names the differences accepted (``tokenport.integrations.ALLOWED_CHANGES``).
    """

    def __init__(
        self,
        model: Any = None,
        args: Any = None,
        data_collator: Any = None,
        *,
        allow_changes: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        _check_trainer_api()
        self.allow_changes = tuple(sorted(check_allow_changes(allow_changes)))
        collator = TokenportCollator() if data_collator is None else data_collator
        super().__init__(model, args, collator, **kwargs)
        _check_arguments(self.args)
        self.loader: StatefulLoader | None = None
        self._batches_per_epoch = 0
        self.add_callback(_EpochFromLoader(self))

    def get_train_dataloader(self) -> StatefulLoader:  # type: ignore[override]
        """This rank's batches of ``train_dataset`` in the order of a fresh tokenport sampler."""
        dataset = self.train_dataset
        if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
            raise ConfigError(
                "train_dataset: TokenportTrainer needs a map-style dataset with a length (a tokenport GPTDataset, "
                f"BlendedDataset, PackedDataset...), got {type(dataset).__name__}"
            )
        parallel = self.get_tp_size() * self.get_cp_size() * self.get_sp_size()
        if parallel != 1:
            raise ConfigError(
                f"parallelism_config: tensor/context/sequence parallel sizes multiply to {parallel}; TokenportTrainer "
                "maps ranks to data-parallel ranks one to one, so run with data parallelism only"
            )
        sampler = self._sampler(len(dataset))
        self._global_batch_size = sampler.global_batch_size
        args = self.args
        self.loader = StatefulLoader(
            dataset,
            sampler,
            collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
            multiprocessing_context=args.dataloader_multiprocessing_context,
            # its own generator: starting an epoch's DataLoader draws no number from torch's global RNG,
            # so a resumed run's RNG (restored from the checkpoint) stays equal to the uninterrupted run's
            generator=torch.Generator().manual_seed(self._data_seed()),
        )
        self._batches_per_epoch = len(self.loader)
        return self.loader

    def _sampler(self, total_samples: int) -> PretrainingSampler | RandomSampler:
        """The sampler ``args`` ask for, from sample 0; a single-pass sequential order must cover the run."""
        args = self.args
        layout = (total_samples, 0, self._train_batch_size, args.process_index, args.world_size)
        if args.train_sampling_strategy == "random":
            return RandomSampler(*layout, seed=self._data_seed())
        sampler = PretrainingSampler(*layout, drop_last=True)
        batches = len(sampler)
        if batches == 0:
            raise ConfigError(
                f"train_dataset: {total_samples} samples do not fill one global batch of {sampler.global_batch_size} "
                "(per_device_train_batch_size x world_size); use more samples or a smaller batch"
            )
        steps = -(-batches // args.gradient_accumulation_steps)
        if (args.max_steps > 0 and args.max_steps > steps) or (args.max_steps <= 0 and args.num_train_epochs > 1):
            raise ConfigError(
                f"train_sampling_strategy='sequential' reads the dataset once ({steps} optimizer steps) but the run "
                f"asks for max_steps={args.max_steps}, num_train_epochs={args.num_train_epochs}; use 'random' "
                "(reshuffled each epoch) or build the dataset with more samples"
            )
        return sampler

    def _get_collator_with_removed_columns(self, data_collator: Any, description: str | None = None) -> Any:
        """Keep tokenport's sample fields for TokenportCollator (evaluation too): they are not the model's
        arguments by name (``tokens``, ``loss_mask``...), the collator maps them onto those."""
        if isinstance(data_collator, TokenportCollator):
            return data_collator
        return super()._get_collator_with_removed_columns(data_collator, description)

    def _data_seed(self) -> int:
        """``args.data_seed``, else ``args.seed``: the sampler's seed."""
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def _run_epoch(
        self,
        model: Any,
        epoch: int,
        train_dataloader: Any,
        steps_in_epoch: int,
        num_update_steps_per_epoch: int,
        trial: Any,
        ignore_keys_for_eval: Any,
        start_time: float,
        resume_from_checkpoint: str | None,
        epochs_trained: int,
        steps_trained_in_current_epoch: int,
    ) -> None:
        """One epoch of the Trainer's; on the resumed one, the loader restored and no batch replayed."""
        done = 0
        if resume_from_checkpoint is not None and epoch == epochs_trained:
            done = steps_trained_in_current_epoch
            self._restore_loader(resume_from_checkpoint, epoch, done)
        # The loader continues at batch `done` of this epoch, so the Trainer is shown the rest of the epoch as the
        # whole of it: it neither skips batches (accelerate's skip_first_batches) nor miscounts its steps.
        super()._run_epoch(
            model=model,
            epoch=epoch,
            train_dataloader=train_dataloader,
            steps_in_epoch=steps_in_epoch - done,
            num_update_steps_per_epoch=num_update_steps_per_epoch - done // self.args.gradient_accumulation_steps,
            trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval,
            start_time=start_time,
            resume_from_checkpoint=resume_from_checkpoint,
            epochs_trained=epochs_trained,
            steps_trained_in_current_epoch=steps_trained_in_current_epoch - done,
        )

    def _restore_loader(self, checkpoint: str, epoch: int, done: int) -> None:
        """Load the checkpoint's loader state; ConfigError unless it sits where the Trainer's state says."""
        assert self.loader is not None  # get_train_dataloader ran first in _inner_training_loop
        path = os.path.join(checkpoint, LOADER_STATE_NAME)
        if not os.path.isfile(path):
            raise ConfigError(
                f"{path}: missing, so the data position of this checkpoint is unknown; resume from a checkpoint "
                "TokenportTrainer saved, or start the run afresh"
            )
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as error:
            raise InputDataError(f"{path}: unreadable ({error.strerror}); the checkpoint is damaged") from None
        remedy = "the checkpoint is damaged: resume from an intact one"
        decode(data, _LoaderFile, where=path, remedy=remedy, error=InputDataError)
        saved = json.loads(data)
        read_loader_state(saved["loader"], f"{path}: loader")
        if saved["global_step"] != self.state.global_step:
            raise ConfigError(
                f"{path}: saved at global step {saved.get('global_step')} but the checkpoint's trainer state is at "
                f"{self.state.global_step}; the directory mixes two saves: resume from an intact checkpoint"
            )
        before = self.loader.state_dict()
        self.loader.load_state_dict(saved["loader"], allow_changes=self.allow_changes)
        gbs = self._global_batch_size
        consumed = self.loader.consumed_samples
        expected = epoch * self._batches_per_epoch + done
        if consumed != expected * gbs:
            self.loader.load_state_dict(before)  # validate, then commit: the refused state leaves the loader as it was
            raise ConfigError(
                f"{path}: the loader consumed {consumed} samples ({consumed / gbs:g} global batches of {gbs}) but the "
                f"Trainer resumes at epoch {epoch}, batch {done} of {self._batches_per_epoch} ({expected} batches); "
                "resume with the run's gradient_accumulation_steps and global batch (per_device_train_batch_size x "
                "world size)"
            )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The Trainer's checkpoint plus ``tokenport_loader.json``: where the data stream continues."""
        super()._save_checkpoint(model, trial)
        if self.loader is None or not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        saved = {"version": _FILE_VERSION, "global_step": self.state.global_step, "loader": self.loader.state_dict()}
        temporary = os.path.join(folder, f".{LOADER_STATE_NAME}.tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(saved, file, indent=1)
        os.replace(temporary, os.path.join(folder, LOADER_STATE_NAME))


class _EpochFromLoader(TrainerCallback):
    """Sets ``state.epoch`` from the loader's position (the Trainer counts only the resumed epoch's rest)."""

    def __init__(self, trainer: TokenportTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``epoch + batches / batches_per_epoch``, the Trainer's own formula, over the whole epoch."""
        loader, per_epoch = self.trainer.loader, self.trainer._batches_per_epoch
        if loader is not None and per_epoch:
            epoch, batch = divmod(loader.consumed_samples // self.trainer._global_batch_size, per_epoch)
            state.epoch = epoch + batch / per_epoch


def _check_trainer_api() -> None:
    """ConfigError unless the installed Trainer has the internals TokenportTrainer hooks, as in transformers 5."""
    import transformers

    run_epoch = getattr(Trainer, "_run_epoch", None)
    found = tuple(inspect.signature(run_epoch).parameters) if run_epoch is not None else ()
    if found != _RUN_EPOCH_PARAMETERS or not hasattr(Trainer, "get_sp_size"):
        raise ConfigError(
            f"transformers {transformers.__version__}: its Trainer lacks the _run_epoch(...) TokenportTrainer "
            "hooks to resume without replaying batches (transformers 5 has it); install a transformers 5 release"
        )


def _check_arguments(args: Any) -> None:
    """ConfigError for TrainingArguments under which the data cannot be resumed exactly."""
    if args.auto_find_batch_size:
        raise ConfigError(
            "auto_find_batch_size=True: it changes the batch size and so the sampler's global batch mid-run; "
            "set per_device_train_batch_size yourself and leave auto_find_batch_size=False"
        )
    if args.ignore_data_skip:
        raise ConfigError(
            "ignore_data_skip=True: TokenportTrainer never replays data on resume (it restores "
            f"{LOADER_STATE_NAME}), and ignoring the position would restart the epoch's step count; leave it False"
        )
    if not getattr(args, "dataloader_in_order", True):
        raise ConfigError(
            "dataloader_in_order=False: the loader counts batches in the sampler's order to checkpoint its position; "
            "batches handed over out of order would make that position wrong; leave it True"
        )
    if args.train_sampling_strategy not in _STRATEGIES:
        raise ConfigError(
            f"train_sampling_strategy={args.train_sampling_strategy!r}: TokenportTrainer orders the data with "
            "tokenport's samplers: 'random' (RandomSampler, reshuffled each epoch) or 'sequential' "
            "(PretrainingSampler); for length grouping use tokenport.sampling with your own loop"
        )

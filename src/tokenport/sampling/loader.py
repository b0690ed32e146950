"""StatefulLoader: a torch DataLoader whose checkpoint resumes exactly, worker processes and prefetch included.

A DataLoader asks its batch sampler for batches ahead of the training loop (``num_workers ×
prefetch_factor`` of them), so a sampler that counts what it *yields* counts batches that were
never trained on. Here the sampler does not count itself (``auto_advance=False``); the loader
counts one step for each batch it hands to the training loop, so ``state_dict()`` after ``k``
batches resumes with batch ``k + 1``, whatever was prefetched and thrown away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..errors import ConfigError
from .pretraining import PretrainingSampler, RandomSampler
from .progress import DatasetEpochs, dataset_epochs

__all__ = ["StatefulLoader"]

_STATE_VERSION = 1


class StatefulLoader:
    """Batches of ``dataset`` in the order of a tokenport batch sampler, through ``torch.utils.data.DataLoader``.

    ``sampler`` is a PretrainingSampler or RandomSampler (its ``auto_advance`` is switched off:
    the loader counts). Keyword arguments go to the DataLoader (``num_workers``,
    ``prefetch_factor``, ``pin_memory``, ``persistent_workers``...). One ``for`` loop runs to the
    end of the data (PretrainingSampler) or of the current epoch (RandomSampler: loop again for
    the next; ``epoch`` says which). ``state_dict()``/``load_state_dict()`` checkpoint between steps;
    ``dataset_epochs()`` reports how far each dataset of a blend has got and where its epochs ended.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: PretrainingSampler | RandomSampler,
        *,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        **loader_options: Any,
    ) -> None:
        if not isinstance(sampler, (PretrainingSampler, RandomSampler)):
            raise ConfigError(
                f"sampler: expected a tokenport PretrainingSampler or RandomSampler, got {type(sampler).__name__}"
            )
        for name in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
            if name in loader_options:
                raise ConfigError(f"{name}=: the batch sampler decides the batches; drop this DataLoader option")
        sampler.auto_advance = False
        self.dataset = dataset
        self.sampler = sampler
        self.collate_fn = collate_fn
        self.loader_options = loader_options

    @property
    def consumed_samples(self) -> int:
        """Samples of the batches handed to the training loop so far (all data-parallel ranks together)."""
        return self.sampler.consumed_samples

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (always 0 for the sequential sampler)."""
        return getattr(self.sampler, "epoch", 0)

    def __len__(self) -> int:
        """Batches the next ``for`` loop yields."""
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        """This rank's batches from the current position, each counted as consumed when handed over."""
        from torch.utils.data import DataLoader

        options = dict(self.loader_options)
        if self.collate_fn is not None:
            options["collate_fn"] = self.collate_fn
        loader = DataLoader(self.dataset, batch_sampler=self.sampler, **options)
        for batch in loader:
            self.sampler.advance()
            yield batch

    def dataset_epochs(self) -> tuple[DatasetEpochs, ...]:
        """Per dataset (each child of a blend, else the one dataset): samples consumed by all ranks,
        epochs so far and the consumed-sample count where each epoch ended. Recomputed from the
        consumed samples (cost linear in them): call it when logging, not every step."""
        return dataset_epochs(self.dataset, self.sampler.consumed_stream())

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state at the last batch handed over (a few integers)."""
        return {"version": _STATE_VERSION, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where ``state_dict()`` was taken; ConfigError for a state of another configuration."""
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION or "sampler" not in state:
            raise ConfigError("state: expected the dict returned by StatefulLoader.state_dict()")
        self.sampler.load_state_dict(state["sampler"])

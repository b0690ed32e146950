"""Grain: tokenport datasets as Grain data sources, and a torchtitan data loader with exact, elastic resume.

Grain (``pip install tokenport[grain]``) reads records from a ``RandomAccessDataSource`` and
composes pipelines on a ``grain.MapDataset``; torchtitan builds its data pipelines on it and
MaxText reads Megatron's memory-mapped stores through it. Here:

- ``GrainSource``: Grain's ``RandomAccessDataSource`` protocol over a tokenport dataset (GPT,
  packed, SFT samples, blends): ``len``, ``source[i]`` (negative ``i`` counts from the end),
  picklable for Grain's worker processes (stores reopen their memory maps after unpickling),
  and a ``repr`` naming the data (Grain's DataLoader checkpoint compares it).
- ``grain_dataset(dataset)``: ``grain.MapDataset.source(GrainSource(dataset))``, to compose
  ``.shuffle``/``.map``/``.batch`` on.
- ``GrainLoader``: one data-parallel rank's batches of tokenport's global stream, read through a
  Grain pipeline. Grain's own iterator state is one rank's position in that rank's shard, so it
  resumes on the same sharding only; tokenport's state is the count of samples all ranks consumed
  in one global stream (a ``StreamSampler``), so global batch ``b`` holds the same samples on any
  data-parallel size and a checkpoint resumes on another size, or on another global batch size that
  divides the samples consumed (step ``b`` reads positions ``[b * G, (b + 1) * G)``).

``GrainLoader`` follows torchtitan's ``BaseDataLoader`` contract (torchtitan/components/dataloader.py,
a ``torch.distributed.checkpoint.stateful.Stateful``): ``state_dict()``/``load_state_dict()``,
checkpointed by torchtitan's ``CheckpointManager`` (``dcp.save``/``dcp.load`` of a dict holding the
loader), and ``__iter__`` yielding ``(input_dict, labels)`` with ``input_dict["input"]`` and
``input_dict["positions"]`` as torchtitan's text datasets do. Unlike ``ParallelAwareDataloader``,
whose state sits under a per-rank key ``dp_rank_{r}`` (and refuses another ``world_size``), the
state is the same on every rank and sits under one key, ``tokenport``, so DCP stores it once and
a rank of any data-parallel size finds it; ``world_size`` records the size it was saved on. The
state document (``GrainLoaderState``) holds the global batch size and a ``StatefulLoader`` state
(sampler and data receipt), read through the typed schema layer: a state of another dataset, seed
or order, or one whose position is off this loader's global-batch boundaries, is a ConfigError,
changing nothing. ``get_state``/``set_state`` are
Grain's iterator contract over the same document, as a JSON dict.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal

import numpy as np

from .._checks import NOT_GIVEN, check_int, check_sample_id, is_int, shuffle_seed
from .._optional import MissingExtraError, require
from .._schema import Document, Positive, decode, encode, to_builtins
from ..blend import AdaptiveBlend
from ..errors import ConfigError
from ..sampling.state import LoaderState
from ..sampling.stream import StreamSampler
from ._fetch import batch_signature
from .receipt import data_receipt
from .torch import StatefulLoader, data_parallel_position

__all__ = ["GrainLoader", "GrainLoaderState", "GrainSource", "grain_dataset", "torchtitan_batch"]

STATE_FORMAT: Final = "tokenport.grain/1"
STATE_KEY = "tokenport"  # the state_dict() key of the state document (one key for every rank)
IGNORE_INDEX = -100  # torchtitan's cross-entropy ignore_index: labels without loss
_INT64_MAX = 2**63 - 1


def _grain() -> Any:
    """The ``grain`` package, or a ConfigError naming the extra that installs it."""
    try:
        return require("grain", extra="grain", feature="tokenport.integrations.grain")
    except MissingExtraError as e:
        raise ConfigError(str(e)) from e.__cause__


class GrainSource:
    """Grain's ``RandomAccessDataSource`` over a tokenport dataset: record ``i`` is ``dataset[i]``."""

    def __init__(self, dataset: Any) -> None:
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise ConfigError(
                f"dataset: a {type(dataset).__name__} has no len() and [i]; pass a tokenport dataset "
                "(GPTDataset, PackedDataset, SFTDataset, BlendedDataset)"
            )
        self.dataset = dataset
        self._length = int(len(dataset))
        self._digest: str | None = None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` of the dataset; ``-len <= index < 0`` counts from the end (SampleIdError otherwise)."""
        if is_int(index) and -self._length <= index < 0:
            index = int(index) + self._length
        return self.dataset[check_sample_id(index, self._length)]

    def __repr__(self) -> str:
        """The dataset's type, length and the digest of its data receipt: Grain compares it on resume."""
        if self._digest is None:
            self._digest = _digest(data_receipt(self.dataset).dataset)
        return f"GrainSource({type(self.dataset).__name__}, samples={self._length}, data={self._digest})"

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "digest": self._digest}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"])  # type: ignore[misc]
        self._digest = state["digest"]


def grain_dataset(dataset: Any) -> Any:
    """``grain.MapDataset.source(GrainSource(dataset))``: a Grain MapDataset of the dataset's samples."""
    return _grain().MapDataset.source(GrainSource(dataset))


class GrainLoaderState(Document, frozen=True):
    """``GrainLoader``'s state: the format, the global batch size, the dp size it was saved on and the
    ``StatefulLoader`` state (sampler state and data receipt) of the global stream."""

    format: Literal["tokenport.grain/1"]
    global_batch_size: Positive
    data_parallel_size: Positive
    loader: LoaderState

    def __post_init__(self) -> None:
        consumed = self.loader.sampler.get("consumed_samples")
        if is_int(consumed) and consumed % self.global_batch_size:
            raise ValueError(
                f"`loader.sampler.consumed_samples`={consumed} is not a multiple of "
                f"`global_batch_size`={self.global_batch_size}"
            )
        if self.global_batch_size % self.data_parallel_size:
            raise ValueError(
                f"`global_batch_size`={self.global_batch_size} does not divide among "
                f"`data_parallel_size`={self.data_parallel_size} ranks"
            )


class _Checkpoint(Document, frozen=True):
    """What ``GrainLoader.state_dict()`` returns: the state document's JSON bytes and the dp size."""

    tokenport: bytes
    world_size: Positive


class GrainLoader:
    """This data-parallel rank's batches of one global stream over ``dataset``, through a Grain pipeline.

    The stream is a ``StreamSampler``'s (an int ``seed``: a keyed random order of every sample each
    epoch; ``seed=None``, formerly ``shuffle=False``: the id order), endless, epoch after epoch. Global batch ``b`` is
    stream positions ``[b * G, (b + 1) * G)`` (``G = global_batch_size``); rank ``r`` of ``dp``
    takes its ``G // dp`` slots ``[r * G // dp, (r + 1) * G // dp)``, so the ranks' batches in rank
    order are the same global batch for any ``dp`` dividing ``G``. Each ``next`` yields
    ``(input_dict, labels)`` as torch tensors: ``input_dict["input"]`` the tokens,
    ``input_dict["positions"]`` the position ids when samples have them, ``labels`` (pre-shifted)
    with ``-100`` (torchtitan's ignore_index) where the loss mask is 0 (``torchtitan_batch``).

    ``data_parallel_rank``/``data_parallel_size`` default to torch.distributed's (``group``),
    else 0 and 1. ``read_options``: a ``grain.ReadOptions`` (default: 2 threads, 4 batches ahead);
    ``worker_count`` > 0 makes the batches in that many processes (Grain's ``mp_prefetch``; the
    dataset is pickled to them). A batch counts as consumed when handed over, however far Grain read ahead.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        global_batch_size: int,
        seed: int | None = 0,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        group: Any = None,
        read_options: Any = None,
        worker_count: int = 0,
        shuffle: Any = NOT_GIVEN,
    ) -> None:
        rank, size = data_parallel_position(data_parallel_rank, data_parallel_size, group)
        gbs = check_int("global_batch_size", global_batch_size, 1)
        if gbs % size:
            raise ConfigError(
                f"global_batch_size={gbs} does not divide among data_parallel_size={size} ranks: "
                "pass a global batch size that is a multiple of the data-parallel size"
            )
        drawn = shuffle_seed("GrainLoader", seed, shuffle)
        workers = check_int("worker_count", worker_count, 0)
        if isinstance(dataset, AdaptiveBlend):
            raise ConfigError(
                "dataset: an AdaptiveBlend changes its weights while training, which GrainLoader does not "
                "follow; read it with StatefulLoader"
            )
        if len(dataset) == 0:
            raise ConfigError("dataset is empty: a GrainLoader needs at least one sample")
        order = "sequential" if drawn is None else "feistel"
        sampler = StreamSampler(
            len(dataset), 0, gbs // size, rank, size, seed=drawn or 0, order=order, auto_advance=False
        )
        self._sampler = sampler  # the loader's own, typed as the stream it is
        self._loader = StatefulLoader(dataset, sampler)  # the state and its receipt; refuses a shuffled schedule
        self.dataset = dataset
        self.global_batch_size = gbs
        self.data_parallel_rank = rank
        self.data_parallel_size = size
        self.read_options = read_options
        self.worker_count = workers
        self._batched = batch_signature(dataset) is not None

    @property
    def consumed_samples(self) -> int:
        """Samples of the global batches handed over so far (all data-parallel ranks together)."""
        return self._loader.consumed_samples

    @property
    def step(self) -> int:
        """The global batches handed over so far: the next batch is global batch ``step``."""
        return self.consumed_samples // self.global_batch_size

    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        """This rank's batches from the current position on, endless; each counted when handed over."""
        grain = _grain()
        sampler = self._sampler
        last = (_INT64_MAX - 2 * sampler.total_samples) // self.global_batch_size - 1  # stream positions fit int64
        steps = grain.MapDataset.range(self.step, last).map(_RankBatch(self.dataset, sampler, self._batched))
        options = self.read_options or grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
        pipeline = steps.to_iter_dataset(options)
        if self.worker_count:
            pipeline = pipeline.mp_prefetch(grain.MultiprocessingOptions(num_workers=self.worker_count))
        batches = iter(pipeline)
        try:
            for batch in batches:
                batch = self._loader._masked(batch)  # documents removed: their tokens hidden (integrations.removal)
                self._loader._hand_over()  # the sampler advances; the state's certificate counts the batch
                yield torchtitan_batch(batch)
        finally:
            batches.close()  # stops Grain's threads and worker processes when the loop lets go

    def remove_documents(self, documents: Any) -> int:
        """Remove documents from the run from the next batch handed over, as ``StatefulLoader.remove_documents``
        (its state carries the removal; returns the step it applies from)."""
        return self._loader.remove_documents(documents)

    def global_batch_ids(self, step: int) -> list[int]:
        """The sample ids of global batch ``step`` (all ranks, in rank order)."""
        step = check_int("step", step, 0)
        start = step * self.global_batch_size
        return self._sampler.global_stream(start, start + self.global_batch_size).tolist()

    # -- state: torchtitan's Stateful and Grain's get_state/set_state over one document --

    def _document(self) -> GrainLoaderState:
        return GrainLoaderState(
            format=STATE_FORMAT,
            global_batch_size=self.global_batch_size,
            data_parallel_size=self.data_parallel_size,
            loader=decode(
                self._loader.state_dict(), LoaderState, where="GrainLoader", remedy="report it", error=ConfigError
            ),
        )

    def state_dict(self) -> dict[str, Any]:
        """``{"tokenport": the state document as JSON bytes, "world_size": this data-parallel size}``: the
        same on every rank, saved once by DCP; torchtitan's Stateful contract."""
        return {STATE_KEY: encode(self._document()), "world_size": self.data_parallel_size}

    def load_state_dict(self, state_dict: Mapping[str, Any], *, allow_changes: Iterable[str] = ()) -> None:
        """Resume where ``state_dict()`` was taken, on this loader's data-parallel size (any size dividing the
        global batch) and global batch (any dividing the samples consumed); an empty dict is a fresh start
        (torchtitan's contract). ConfigError, changing nothing, for a state of other data, seed or order, or
        at a position off this loader's global-batch boundaries (``allow_changes``: as
        ``StatefulLoader.load_state_dict``)."""
        if isinstance(state_dict, Mapping) and not state_dict:
            return
        checkpoint = decode(
            state_dict,
            _Checkpoint,
            where="GrainLoader state_dict",
            remedy="pass the dict GrainLoader.state_dict() returned (as torch.distributed.checkpoint loads it)",
            error=ConfigError,
        )
        self._load(bytes(checkpoint.tokenport), allow_changes)

    def get_state(self) -> dict[str, Any]:
        """The state document as a JSON dict (Grain's ``DatasetIterator.get_state`` contract)."""
        state: dict[str, Any] = json.loads(encode(self._document()))
        return state

    def set_state(self, state: Mapping[str, Any], *, allow_changes: Iterable[str] = ()) -> None:
        """Resume at ``get_state()``'s document (Grain's ``set_state``); refuses as ``load_state_dict``."""
        if not isinstance(state, Mapping):
            raise ConfigError(
                f"state: expected the dict GrainLoader.get_state() returned, got a {type(state).__name__}"
            )
        self._load(state, allow_changes)

    def _load(self, data: bytes | Mapping[str, Any], allow_changes: Iterable[str]) -> None:
        """Validate the state document against this loader, then resume at it (nothing changes on a refusal)."""
        document = decode(
            data,
            GrainLoaderState,
            where="GrainLoader state",
            remedy="pass the state a GrainLoader over the same data saved, unedited",
            error=ConfigError,
        )
        consumed = document.loader.sampler.get("consumed_samples")  # typed by the loader below when no int
        if is_int(consumed) and consumed % self.global_batch_size:  # another global batch: on its own boundaries
            raise ConfigError(
                f"state global_batch_size={document.global_batch_size} at consumed_samples={consumed}, but this "
                f"loader's global_batch_size={self.global_batch_size} does not divide {consumed}: its step b reads "
                f"stream positions [b * {self.global_batch_size}, (b + 1) * {self.global_batch_size}), so it resumes "
                f"only on a boundary of its global batch; build the GrainLoader with a global_batch_size dividing "
                f"{consumed} (the saved {document.global_batch_size} does), or resume with a StatefulLoader"
            )
        self._loader.load_state_dict(to_builtins(document.loader), allow_changes=allow_changes)

    def __repr__(self) -> str:
        return (
            f"GrainLoader({type(self.dataset).__name__}, global_batch_size={self.global_batch_size}, "
            f"data_parallel_rank={self.data_parallel_rank}, data_parallel_size={self.data_parallel_size}, "
            f"step={self.step})"
        )


class _RankBatch:
    """Global batch ``step`` -> this rank's samples as a dict of stacked numpy arrays: the map of GrainLoader's
    pipeline (numpy, which Grain's worker processes hand over in shared memory)."""

    def __init__(self, dataset: Any, sampler: StreamSampler, batched: bool) -> None:
        self.dataset = dataset
        self.batched = batched
        self.rank, self.micro = sampler.data_parallel_rank, sampler.micro_batch_size
        self.global_batch_size = sampler.global_batch_size
        self.sampler = sampler  # only its stream is read: global_stream is a pure function of position

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        first = step * self.global_batch_size + self.rank * self.micro
        ids = self.sampler.global_stream(first, first + self.micro)
        if self.batched:  # one get_batch: equal to stacking the samples (batch_signature checked it)
            batch: dict[str, np.ndarray] = self.dataset.get_batch(ids)
            return batch
        samples = [self.dataset[i] for i in ids.tolist()]
        names = list(samples[0]) if isinstance(samples[0], Mapping) else None
        if names is None or any(not isinstance(s, Mapping) or list(s) != names for s in samples):
            raise ConfigError(
                f"dataset: the samples of a {type(self.dataset).__name__} are not dicts of the same fields; "
                "GrainLoader reads tokenport datasets (tokens and labels)"
            )
        return {name: np.stack([np.asarray(s[name]) for s in samples]) for name in names}


def torchtitan_batch(batch: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """A batch of tokenport fields as torchtitan's ``({"input": tokens, "positions": ...}, labels)``: tensors,
    labels ``-100`` where ``loss_mask`` is 0 (torchtitan's loss ignores those, as Megatron's mask does).

    The labels must be pre-shifted (``labels[t]`` the target after ``tokens[t]``: GPT, packed and
    Megatron-shaped SFT samples). HF-shaped samples (``input_ids`` with unshifted labels, which the model
    shifts) are refused: torchtitan does not shift, so each token would be trained to predict itself."""
    try:
        torch = require("torch", extra="torch", feature="GrainLoader (it yields torch tensors)")
    except MissingExtraError as e:
        raise ConfigError(str(e)) from e.__cause__

    if "input_ids" in batch and "tokens" not in batch:
        raise ConfigError(
            "dataset: its samples are HF-shaped (input_ids, labels not shifted); torchtitan trains on pre-shifted "
            "labels: build the SFTDataset with shape='megatron' (tokens, labels, loss_mask)"
        )
    missing = [name for name in ("tokens", "labels") if name not in batch]
    if missing:
        raise ConfigError(
            f"dataset: its samples have no {' or '.join(missing)} (fields: {', '.join(batch)}); GrainLoader "
            "reads samples with tokens and pre-shifted labels"
        )
    tensors = {name: torch.as_tensor(value) for name, value in batch.items()}
    labels = tensors["labels"].to(torch.int64)
    if "loss_mask" in tensors:
        labels = torch.where(tensors["loss_mask"] == 0, IGNORE_INDEX, labels)
    inputs = {"input": tensors["tokens"].to(torch.int64)}
    if "position_ids" in tensors:
        inputs["positions"] = tensors["position_ids"].to(torch.int64)
    return inputs, labels


def _digest(tree: Any) -> str:
    """A short hex digest of a receipt's dataset tree (its canonical JSON)."""
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

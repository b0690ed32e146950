"""BlendedDataset: many datasets read as one stream, sample ``t`` taken from the dataset the blend names."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import check_sample_id, check_sample_ids, renamed_keywords
from ..errors import ConfigError, InputDataError
from ..indexed.same_tokenizer import check_datasets_tokenizer
from ..samples.base import Describer, Rebuilder, SampleDataset, digest, kept_while_frozen, plain, register_dataset_kind
from ..samples.lineage import Occurrences, ReadPlan, SampleLineage
from .checkpoints import SampleIndexCheckpoints
from .indices import build_blending_indices, build_dataset_index, check_size, check_weights
from .inverse import BlendInverse, blend_inverse_arrays, blend_occurrences
from .oversampling import oversampled, warn_oversampled
from .schedule import MixtureSchedule, build_scheduled_indices

logger = logging.getLogger(__name__)

# Above this many samples the int64 dataset_sample_index (8 bytes a sample) gives way to checkpoints.
FULL_SAMPLE_INDEX_LIMIT = 1 << 27


class BlendedDataset(SampleDataset):
    """Sample ``t`` is ``datasets[d][k]`` with ``d = dataset_index[t]`` and ``k`` the samples of ``d`` before ``t``.

    ``weights`` are relative (normalized here); ``num_samples`` is the number of samples (``size``:
    its older spelling, kept for one release), or None to
    take every sample of every dataset once (then the weights are ignored and each dataset's
    length is its count). A GPT child read more than ``OVERSAMPLING_EPOCHS`` times warns
    (`OversamplingWarning`). Items are the child's sample dict plus ``dataset_id``, as in
    megatron-core. A child shorter than the samples the blend takes from it is read around
    (``k`` modulo its length) with a warning; build children with ``samples_per_dataset()``
    samples to avoid that (``tokenport.build_datasets`` does).
    """

    batch_path = True
    fresh_items = True
    _caches = ("_inverse",)
    _inverse: BlendInverse | None = None  # built on the first occurrences() call
    lookups: Callable[[Callable[[], dict[str, np.ndarray]]], dict[str, np.ndarray]] | None = None
    """Where occurrences' lookups are kept (as ``GPTDataset.lookups``): set by the builder that cached the indices."""

    @renamed_keywords(size="num_samples")
    def __init__(
        self,
        datasets: Sequence[SampleDataset],
        weights: Sequence[float] | np.ndarray | None,
        num_samples: int | None,
        *,
        algorithm: str = "tijdeman",
        allow_mixed_tokenizers: bool = False,
    ) -> None:
        if not isinstance(datasets, (list, tuple)):
            raise ConfigError(f"datasets={datasets!r:.80} is invalid: pass a list of datasets to blend")
        if not len(datasets):
            raise ConfigError("datasets is empty: a blend needs at least one dataset")
        check_datasets_tokenizer(datasets, allow_mixed_tokenizers=allow_mixed_tokenizers, what="BlendedDataset")
        counts = np.array([len(d) for d in datasets], dtype=np.int64)
        if num_samples is None:
            target = counts
        else:
            given = None if weights is None else check_weights(weights)
            if given is None or len(given) != len(datasets):
                raise ConfigError(
                    f"weights: expected {len(datasets)} weights, one per dataset, "
                    f"got {'none' if given is None else len(given)}"
                )
            target = given
            num_samples = check_size(num_samples)
        if num_samples is not None and num_samples > FULL_SAMPLE_INDEX_LIMIT:
            dataset_index = build_dataset_index(target, num_samples, algorithm=algorithm)
            sample_index: np.ndarray | SampleIndexCheckpoints = SampleIndexCheckpoints(dataset_index, len(datasets))
        else:
            dataset_index, sample_index = build_blending_indices(target, num_samples, algorithm=algorithm)
        self._adopt(datasets, dataset_index, sample_index)
        warn_oversampled(oversampled(self.datasets, self.samples_per_dataset().tolist(), "the blend"), stacklevel=4)
        self.recipe: dict[str, Any] | None = {
            "weights": None if num_samples is None else target.tolist(),
            "size": num_samples,
            "algorithm": algorithm,
        }

    @classmethod
    def from_indices(
        cls,
        datasets: Sequence[SampleDataset],
        dataset_index: np.ndarray,
        dataset_sample_index: np.ndarray | SampleIndexCheckpoints,
        *,
        schedule: MixtureSchedule | None = None,
        recipe: dict[str, Any] | None = None,
        allow_mixed_tokenizers: bool = False,
    ) -> BlendedDataset:
        """A blend over indices built earlier (from the index cache, or Megatron's own).

        ``schedule``: the MixtureSchedule the indices follow, if any; its weights change with the
        sample position, so a loader refuses to shuffle this blend's ids. ``recipe``: how the indices
        were built, when known (``weights``, ``size``, ``algorithm``: the arguments of
        ``build_blending_indices``, or ``size`` and ``algorithm`` with the schedule), so a data
        receipt can rebuild the blend.
        """
        if schedule is not None and not isinstance(schedule, MixtureSchedule):
            raise ConfigError(f"schedule: expected a MixtureSchedule or None, got {type(schedule).__name__}")
        check_datasets_tokenizer(datasets, allow_mixed_tokenizers=allow_mixed_tokenizers, what="BlendedDataset")
        self = cls.__new__(cls)
        if len(dataset_index) != len(dataset_sample_index):
            raise ConfigError(
                f"dataset_index has {len(dataset_index)} entries but dataset_sample_index {len(dataset_sample_index)}: "
                "pass the two arrays of one build"
            )
        self._adopt(datasets, np.asarray(dataset_index), dataset_sample_index)
        self.schedule = schedule
        self.recipe = None if recipe is None else dict(recipe)
        return self

    def _adopt(
        self,
        datasets: Sequence[SampleDataset],
        dataset_index: np.ndarray,
        sample_index: np.ndarray | SampleIndexCheckpoints,
    ) -> None:
        self.datasets = list(datasets)
        self.schedule: MixtureSchedule | None = None
        self.recipe = None
        self.dataset_index = dataset_index
        self.dataset_sample_index = sample_index
        self._inverse = None
        self._lengths = [len(d) for d in self.datasets]
        taken = self.samples_per_dataset()
        self._wraps = [int(n) > length for n, length in zip(taken.tolist(), self._lengths)]
        for d, wraps in enumerate(self._wraps):
            if wraps:
                logger.warning(
                    "dataset %d supplies %d samples to the blend but holds %d: its samples repeat "
                    "(read modulo its length); build it with at least %d samples",
                    d,
                    int(taken[d]),
                    self._lengths[d],
                    int(taken[d]),
                )
        self._fresh = [isinstance(d, SampleDataset) and d.fresh_items for d in self.datasets]

    def __len__(self) -> int:
        return len(self.dataset_index)

    def samples_per_dataset(self) -> np.ndarray:
        """How many samples the blend takes from each dataset (int64, one per dataset)."""
        if len(self.dataset_index) and int(self.dataset_index.max()) >= len(self.datasets):
            raise ConfigError(
                f"dataset_index names dataset {int(self.dataset_index.max())} of {len(self.datasets)}: "
                "pass the datasets the indices were built for"
            )
        return np.bincount(self.dataset_index, minlength=len(self.datasets)).astype(np.int64)

    def locate(self, idx: int) -> tuple[int, int]:
        """(dataset, sample within it) of blended sample ``idx``."""
        index = check_sample_id(idx, len(self.dataset_index))
        dataset = self.dataset_index.item(index)
        sample_index = self.dataset_sample_index
        sample = sample_index.item(index) if isinstance(sample_index, np.ndarray) else sample_index[index]
        if self._wraps[dataset]:
            sample %= self._lengths[dataset]
        return dataset, sample

    def lineage(self, idx: int) -> SampleLineage:
        """Where blended sample ``idx`` comes from: the child's lineage, with (child, its sample) on its path."""
        dataset, sample = self.locate(idx)
        child = self.datasets[dataset]
        if not isinstance(child, SampleDataset):
            raise ConfigError(
                f"dataset {dataset} of the blend is a {type(child).__name__}, which cannot say where its samples "
                "come from (no lineage()); blend GPT, packed, SFT datasets or blends of them"
            )
        return child.lineage(sample).through(check_sample_id(idx, len(self)), dataset)

    def _occurrences(self, store: str, document: int) -> Occurrences:
        """The children's occurrences as blended samples: each child's positions in the blend sorted out once
        (``lookups``' cache entry when set, else in memory), its ``k``-th sample at its ``k``-th position (modulo
        its length when read around)."""
        if self._inverse is None:
            sample_index = self.dataset_sample_index

            def samples_of(positions: np.ndarray) -> np.ndarray:
                if isinstance(sample_index, np.ndarray):
                    return sample_index[positions]
                return sample_index.take(positions)

            checkpoints = isinstance(sample_index, SampleIndexCheckpoints)  # counts by construction
            index, children = self.dataset_index, len(self.datasets)

            def build() -> dict[str, np.ndarray]:
                return blend_inverse_arrays(index, children, samples_of, counting=checkpoints)

            arrays = build() if self.lookups is None else self.lookups(build)
            self._inverse = BlendInverse(index, children, samples_of, arrays=arrays)
        return blend_occurrences(self.datasets, self._inverse, self._lengths, store, document, "blend")

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """The child's sample with its ``dataset_id``."""
        dataset, sample = self.locate(idx)
        item = self.datasets[dataset][sample]
        if self._fresh[dataset]:  # a new dict every call: adding the key is safe and saves a copy
            item["dataset_id"] = dataset
            return item
        return {"dataset_id": dataset, **item}

    def _children(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(child, sample of the child) of each of samples ``ids``, or an IndexError."""
        ids = check_sample_ids(ids, len(self))
        datasets = self.dataset_index[ids].astype(np.int64)
        sample_index = self.dataset_sample_index
        samples = (sample_index[ids] if isinstance(sample_index, np.ndarray) else sample_index.take(ids)).astype(
            np.int64
        )
        lengths = np.array(self._lengths, dtype=np.int64)
        return datasets, np.where(np.array(self._wraps)[datasets], samples % lengths[datasets], samples)

    def get_batch(self, ids: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Samples ``ids`` stacked on a leading axis: one ``get_batch`` per child dataset involved."""
        datasets, samples = self._children(ids)
        return gather(self.datasets, datasets, samples, "BlendedDataset")

    def read_plan(self, ids: Sequence[int] | np.ndarray) -> ReadPlan:
        """The store reads samples ``ids`` make, per store in read order: [(store, documents, offsets,
        lengths)] from the children that can say (their ``read_plan`` is not None)."""
        datasets, samples = self._children(ids)
        order = np.argsort(datasets, kind="stable")  # each child's samples together, in read order
        children, first, counts = np.unique(datasets, return_index=True, return_counts=True)
        groups = dict(zip(children.tolist(), np.split(samples[order], np.cumsum(counts)[:-1])))
        plans = (
            self.datasets[d].read_plan(groups[d]) if isinstance(self.datasets[d], SampleDataset) else None
            for d in children[np.argsort(first)].tolist()  # children in order of first use
        )
        return merge_plans(plan for plan in plans if plan is not None)

    def describe(self, describer: Describer) -> dict[str, Any]:
        """Its children, the samples it takes from each, its schedule, a digest of its order, its recipe."""
        index = (self.dataset_index,)
        return {
            "datasets": [describer.child(k, child) for k, child in enumerate(self.datasets)],
            "samples_per_dataset": kept_while_frozen(self, "taken", index, lambda: self.samples_per_dataset().tolist()),
            "schedule": None if self.schedule is None else plain(self.schedule.to_data()),
            "order": kept_while_frozen(self, "order", index, lambda: digest(self.dataset_index)),
            "build": None if self.recipe is None else plain(self.recipe),
        }

    @classmethod
    def from_description(cls, node: Mapping[str, Any], rebuilder: Rebuilder) -> BlendedDataset:
        """The blend a receipt node describes: its children rebuilt, its indices built again from its recipe
        (with ``allow_mixed_tokenizers``: the digests hold it to the stores it was trained on)."""
        recipe = node["build"]
        children = [rebuilder.child(k, child) for k, child in enumerate(node["datasets"])]
        algorithm = recipe["algorithm"]
        if recipe.get("schedule") is not None:
            schedule = MixtureSchedule.from_data(recipe["schedule"])
            dataset_index, sample_index = build_scheduled_indices(schedule, int(recipe["size"]), algorithm=algorithm)
            return cls.from_indices(
                children, dataset_index, sample_index, schedule=schedule, recipe=recipe, allow_mixed_tokenizers=True
            )
        blend = cls(children, recipe["weights"], recipe["size"], algorithm=algorithm, allow_mixed_tokenizers=True)
        blend.recipe = dict(recipe)
        return blend


register_dataset_kind("BlendedDataset", BlendedDataset)


def merge_plans(
    plans: Iterable[ReadPlan],
) -> ReadPlan:
    """Read plans joined into one entry per store (children may share a store), in order of first use."""
    parts: dict[int, list[tuple[Any, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for plan in plans:
        for entry in plan:
            parts.setdefault(id(entry[0]), []).append(entry)
    joined = []
    for entries in parts.values():
        documents, offsets, lengths = (np.concatenate([entry[k] for entry in entries]) for k in (1, 2, 3))
        joined.append((entries[0][0], documents, offsets, lengths))
    return joined


def gather(children: Sequence[Any], datasets: np.ndarray, samples: np.ndarray, owner: str) -> dict[str, np.ndarray]:
    """Sample ``samples[k]`` of child ``datasets[k]`` for every ``k``, stacked on a leading axis with
    ``dataset_id``: one ``get_batch`` per child involved (``owner`` names the blend in errors)."""
    groups = [(d, np.flatnonzero(datasets == d)) for d in np.unique(datasets).tolist()]
    groups = groups or [(0, np.zeros(0, dtype=np.int64))]  # an empty batch has the fields too, with no rows
    # children that pad their rows (SFT samples) are padded to one width, the widest any of them needs
    widths = [
        children[d].batch_width(samples[rows]) if isinstance(children[d], SampleDataset) else None for d, rows in groups
    ]
    padding = [w is not None for w in widths]
    width = max((w for w in widths if w is not None), default=None)
    parts = [
        (
            d,
            rows,
            children[d].get_batch(samples[rows], width=width) if pads else children[d].get_batch(samples[rows]),
        )
        for (d, rows), pads in zip(groups, padding)
    ]
    batch: dict[str, np.ndarray] = {}
    if parts:
        first, _, fields = parts[0]
        for dataset, _, part in parts[1:]:
            _check_same_fields(first, fields, dataset, part, owner)
        for name, values in fields.items():
            dtype = np.result_type(*(part[name].dtype for _, _, part in parts))
            batch[name] = np.empty((len(datasets),) + values.shape[1:], dtype=dtype)
            for _, rows, part in parts:
                batch[name][rows] = part[name]
    batch["dataset_id"] = datasets
    return batch


def _check_same_fields(
    first: int, fields: dict[str, np.ndarray], other: int, part: dict[str, np.ndarray], owner: str
) -> None:
    """InputDataError unless child ``other``'s batch has ``first``'s field names and per-sample shapes."""
    mine = {name: values.shape[1:] for name, values in fields.items()}
    theirs = {name: values.shape[1:] for name, values in part.items()}
    if mine != theirs:
        raise InputDataError(
            f"{owner}.get_batch: child {other} gives fields {theirs} (name: per-sample shape) but child "
            f"{first} gives {mine}; samples of different kinds cannot be stacked into one batch: blend datasets of "
            "one kind and sample config, or read the samples one by one"
        )

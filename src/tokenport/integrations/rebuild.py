"""Rebuild the dataset a data receipt describes, and prove it is the same one (its fresh receipt equals the saved).

Each receipt node records what building it takes (``build``: a GPTDataset's seed, sample count and
split documents; a packed or SFT dataset's ids; a blend's weights or schedule, size and algorithm)
beside its stores, sample config and digests. Rebuilding opens each store at its recorded prefix
(``stores`` maps a recorded prefix to where it is now, for moved stores), builds every dataset
again, then compares the fresh receipt with the saved one as a resume would: any difference (a
store whose content changed, another order) is a ConfigError naming it. Blends are rebuilt with
``allow_mixed_tokenizers``: a rebuild reproduces what was trained (the digests hold it to the same
stores), it does not compose, so a blend built with the override rebuilds too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

import numpy as np

from .._schema import Count, Document, Int64, decode
from ..blend import AdaptiveBlend, BlendedDataset
from ..blend.schedule import MixtureSchedule, build_scheduled_indices
from ..errors import ConfigError, TokenportError
from ..indexed import IndexedDataset
from ..samples.gpt import GPTDataset, GPTSampleConfig
from ..samples.packed import PackedDataset
from ..samples.sft import SFTDataset
from .receipt import DataReceipt, check_receipt, data_receipt

__all__ = ["REBUILDERS", "check_same_data", "rebuild_dataset"]

T = TypeVar("T")
Rebuilder = Callable[[Mapping[str, Any], str, "_Stores"], Any]


class _Stores:
    """Stores opened once per prefix, through the caller's map of moved prefixes."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        if not isinstance(moved, Mapping) or not all(
            isinstance(old, str) and isinstance(new, str) for old, new in moved.items()
        ):
            raise ConfigError(f"stores={moved!r}: pass a dict of recorded prefix -> where the store is now (strings)")
        self.moved = dict(moved)
        self.opened: dict[str, IndexedDataset] = {}

    def open(self, node: Mapping[str, Any], path: str) -> IndexedDataset:
        """The store a node records, opened at its prefix (or where ``stores`` says it moved)."""
        store = node.get("store")
        prefix = store.get("prefix") if isinstance(store, Mapping) else None
        if not isinstance(prefix, str):
            raise ConfigError(f"{path}: the receipt records no store prefix; it cannot be rebuilt")
        where = self.moved.get(prefix, prefix)
        if where not in self.opened:
            try:
                self.opened[where] = IndexedDataset(where)
            except (TokenportError, OSError) as exc:
                raise ConfigError(
                    f"{path}: the store at {where!r} the receipt names cannot be opened ({exc}); "
                    "pass stores={old_prefix: new_prefix} when it moved"
                ) from None
        return self.opened[where]


def rebuild_dataset(receipt: DataReceipt | Mapping[str, Any], *, stores: Mapping[str, str] | None = None) -> Any:
    """The dataset ``receipt`` describes, built again from its stores and recipes and verified: its fresh
    receipt must equal the saved one (ConfigError naming what differs, e.g. a store whose content changed)."""
    saved = receipt if isinstance(receipt, DataReceipt) else DataReceipt.from_dict(receipt)
    dataset = _rebuild(saved.dataset, "dataset", _Stores(stores or {}))
    check_same_data(saved, dataset)
    return dataset


def check_same_data(saved: DataReceipt, dataset: Any) -> None:
    """ConfigError naming every difference between ``dataset`` and the data ``saved`` records (the
    sampler's seed and position are not the dataset's: not compared)."""
    fresh = dataclasses.replace(data_receipt(dataset), seed=saved.seed)
    try:
        check_receipt(saved, fresh)
    except ConfigError as exc:
        raise ConfigError(f"the data the receipt records is not the data here: {exc}") from None


def _rebuild(node: Mapping[str, Any], path: str, stores: _Stores) -> Any:
    """One receipt node's dataset (children first for a blend)."""
    kind = node.get("type")
    if not isinstance(kind, str) or kind not in REBUILDERS:
        if node.get("length") == 0:  # a blend's place for a store it takes nothing from
            return ()
        raise ConfigError(
            f"{path}: a {kind} cannot be rebuilt from a receipt (rebuildable: {', '.join(sorted(REBUILDERS))})"
        )
    recipe = node.get("build")
    if not isinstance(recipe, Mapping):
        raise ConfigError(
            f"{path} ({kind}): the receipt records no recipe ('build'): it was saved by an older tokenport or the "
            "dataset was built from indices of unknown origin; trace with the dataset itself (dataset=)"
        )
    try:
        return REBUILDERS[kind](node, path, stores)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        # a recipe or sample config the schema leaves open (each kind's own keys) that the dataset refuses
        raise ConfigError(
            f"{path} ({kind}): the receipt's recipe or sample config cannot build the dataset "
            f"({type(exc).__name__}: {exc}); trace with the dataset itself (dataset=), or a receipt saved unedited"
        ) from None


Runs = list[tuple[Count, Count]]


class _GPTBuild(Document, frozen=True):
    """A GPTDataset's recipe: its seed, sample count, last-partial rule and split documents (None: too many runs)."""

    seed: Int64
    num_samples: Count
    drop_last_partial: bool
    documents: Runs | None


class _PackedBuild(Document, frozen=True):
    """A PackedDataset's recipe: its sequence ids ("all", runs, or None: too many runs) and shuffle."""

    ids: Literal["all"] | Runs | None
    shuffle: bool


class _SFTBuild(Document, frozen=True):
    """An SFTDataset's recipe: its sequence ids and sample count (None: each once)."""

    ids: Literal["all"] | Runs | None
    num_samples: Count | None


def _recipe(node: Mapping[str, Any], schema: type[T], path: str) -> T:
    """The node's ``build`` as ``schema``; ConfigError naming the node and field."""
    return decode(
        node["build"],
        schema,
        where=f"{path}.build",
        remedy="trace with the dataset itself (dataset=)",
        error=ConfigError,
    )


def _ids(runs: Any, key: str, path: str) -> np.ndarray | None:
    """Sequence ids from their recorded runs (None: all of the store's)."""
    if runs == "all":
        return None
    if not isinstance(runs, list):
        raise ConfigError(f"{path}: the receipt records too many runs of {key} to rebuild them")
    parts = [np.arange(int(start), int(stop), dtype=np.int64) for start, stop in runs]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _gpt(node: Mapping[str, Any], path: str, stores: _Stores) -> GPTDataset:
    recipe = _recipe(node, _GPTBuild, path)
    config = GPTSampleConfig(**node["sample_config"])
    indices = _ids(recipe.documents, "documents", path)
    store = stores.open(node, path)
    return GPTDataset(
        store,
        np.arange(len(store), dtype=np.int64) if indices is None else indices,
        recipe.num_samples,
        config,
        recipe.seed,
        drop_last_partial=recipe.drop_last_partial,
    )


def _packed(node: Mapping[str, Any], path: str, stores: _Stores) -> PackedDataset:
    config = node["sample_config"]
    recipe = _recipe(node, _PackedBuild, path)
    return PackedDataset(
        stores.open(node, path),
        config["capacity"],
        ids=_ids(recipe.ids, "ids", path),
        split_long=config["split_long"],
        window=config["window"],
        shuffle=recipe.shuffle,
        seed=node["seed"],
        pad_id=config["pad_id"],
        label_pad=config["label_pad"],
        cu_seqlens_length=config["cu_seqlens_length"],
    )


def _sft(node: Mapping[str, Any], path: str, stores: _Stores) -> SFTDataset:
    config = node["sample_config"]
    recipe = _recipe(node, _SFTBuild, path)
    return SFTDataset(
        stores.open(node, path),
        config["seq_length"],
        packing=config["packing"],
        too_long=config["too_long"],
        seed=node["seed"],
        window=config["window"],
        ids=_ids(recipe.ids, "ids", path),
        shape=config["shape"],
        pad_id=config["pad_id"],
        label_pad=config["label_pad"],
        cu_seqlens_length=config["cu_seqlens_length"],
        num_samples=recipe.num_samples,
    )


def _blend(node: Mapping[str, Any], path: str, stores: _Stores) -> BlendedDataset:
    recipe = node["build"]
    children = [_rebuild(child, f"{path}[{k}]", stores) for k, child in enumerate(node["datasets"])]
    algorithm = recipe["algorithm"]
    if recipe.get("schedule") is not None:
        schedule = MixtureSchedule.from_data(recipe["schedule"])
        dataset_index, sample_index = build_scheduled_indices(schedule, int(recipe["size"]), algorithm=algorithm)
        return BlendedDataset.from_indices(
            children, dataset_index, sample_index, schedule=schedule, recipe=recipe, allow_mixed_tokenizers=True
        )
    blend = BlendedDataset(
        children, recipe["weights"], recipe["size"], algorithm=algorithm, allow_mixed_tokenizers=True
    )
    blend.recipe = dict(recipe)
    return blend


def _adaptive(node: Mapping[str, Any], path: str, stores: _Stores) -> AdaptiveBlend:
    """The adaptive blend without its weight updates (they travel in the loader state's "mixture")."""
    children = [_rebuild(child, f"{path}[{k}]", stores) for k, child in enumerate(node["datasets"])]
    return AdaptiveBlend.from_description({**node["build"], "updates": []}, children, allow_mixed_tokenizers=True)


REBUILDERS: dict[str, Rebuilder] = {
    "AdaptiveBlend": _adaptive,
    "BlendedDataset": _blend,
    "GPTDataset": _gpt,
    "PackedDataset": _packed,
    "SFTDataset": _sft,
}
"""Receipt node type -> its rebuilder ``(node, path, stores) -> dataset``; a new dataset kind registers its own
here."""

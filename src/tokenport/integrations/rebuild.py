"""Rebuild the dataset a data receipt describes, and prove it is the same one (its fresh receipt equals the saved).

Each receipt node records its kind (the name it was registered with, ``register_dataset_kind``) and
what building it takes (``build``: a GPTDataset's seed, sample count and split documents; a packed
or SFT dataset's ids; a blend's weights or schedule, size and algorithm) beside its stores, sample
config and digests. Rebuilding finds each node's kind in the registry (plugins load on a miss) and
calls its ``from_description``, which opens each store at its recorded prefix (``stores`` maps a
recorded prefix to where it is now, for moved stores); then it compares the fresh receipt with the
saved one as a resume would: any difference (a store whose content changed, another order) is a
ConfigError naming it. Blends are rebuilt with ``allow_mixed_tokenizers``: a rebuild reproduces
what was trained (the digests hold it to the same stores), it does not compose, so a blend built
with the override rebuilds too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import blend, samples
from ..errors import ConfigError
from ..samples.base import Rebuilder, rebuild_node
from .receipt import DataReceipt, check_receipt, data_receipt

__all__ = ["check_same_data", "rebuild_dataset"]


def _import_own_kinds() -> None:
    """Resolve every public name of samples/ and blend/: their modules' ``register_dataset_kind`` calls
    make tokenport's own kinds known, so a new kind needs only its file and its export."""
    for package in (samples, blend):
        for name in package.__all__:
            getattr(package, name)


def rebuild_dataset(receipt: DataReceipt | Mapping[str, Any], *, stores: Mapping[str, str] | None = None) -> Any:
    """The dataset ``receipt`` describes, built again from its stores and recipes and verified: its fresh
    receipt must equal the saved one (ConfigError naming what differs, e.g. a store whose content changed)."""
    saved = receipt if isinstance(receipt, DataReceipt) else DataReceipt.from_dict(receipt)
    return rebuild_verified(saved, Rebuilder(stores or {}))


def rebuild_verified(saved: DataReceipt, rebuilder: Rebuilder) -> Any:
    """``rebuild_dataset`` with the caller's rebuilder (e.g. one whose moved-store hint names a CLI flag)."""
    built = rebuild_unverified(saved, rebuilder)
    check_same_data(saved, built)
    return built


def rebuild_unverified(saved: DataReceipt, rebuilder: Rebuilder) -> Any:
    """The dataset ``saved`` describes, built from its stores and recipes, not yet compared with the receipt
    (``audit`` reports a difference as a divergence instead of refusing)."""
    _import_own_kinds()
    return rebuild_node(saved.dataset, rebuilder)


def check_same_data(saved: DataReceipt, dataset: Any) -> None:
    """ConfigError naming every difference between ``dataset`` and the data ``saved`` records (the
    sampler's seed and position are not the dataset's: not compared)."""
    fresh = dataclasses.replace(data_receipt(dataset), seed=saved.seed)
    try:
        check_receipt(saved, fresh)
    except ConfigError as exc:
        raise ConfigError(f"the data the receipt records is not the data here: {exc}") from None

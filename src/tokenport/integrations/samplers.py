"""Samplers chosen by name: ``register_sampler`` and a sampler rebuilt from a saved state.

A loader state holds its sampler's ``state_dict()``, whose ``sampler`` names its kind: 1, 2, 3 for
tokenport's PretrainingSampler, RandomSampler and StreamSampler, or the name a sampler was
registered under. ``trace`` rebuilds the sampler from that state alone through this registry
(``sampler_from_state``), so a sampler defined outside tokenport replays its steps too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._checks import check_int
from .._registry import Registry
from ..errors import ConfigError
from ..sampling.contract import Sampler
from ..sampling.pretraining import PretrainingSampler, RandomSampler
from ..sampling.state import read_sampler_state
from ..sampling.stream import ORDERS, StreamSampler

__all__ = ["SamplerFactory", "register_sampler", "replayable", "sampler_from_state"]

SamplerFactory = Callable[[Mapping[str, Any], int, Any], Sampler]
"""``factory(state, data_parallel_rank, dataset)``: the sampler ``state`` was saved from, built on that rank at
position 0 with the configuration the state records (the caller then loads the state into it)."""

_SAMPLERS: Registry[SamplerFactory] = Registry(
    "sampler", callable, "a function (state, data_parallel_rank, dataset) -> a sampler"
)
_KINDS = {1: "PretrainingSampler", 2: "RandomSampler", 3: "StreamSampler"}  # a tokenport sampler state's kind


def register_sampler(name: str, factory: SamplerFactory) -> None:
    """Make the states of samplers whose ``state_dict()`` holds ``"sampler": name`` rebuildable by ``factory``
    (see `SamplerFactory`); a name taken by another factory is a ConfigError, changing nothing."""
    _SAMPLERS.register(name, factory)


def sampler_from_state(state: Mapping[str, Any], rank: int, dataset: Any) -> Sampler:
    """The sampler ``state`` was saved from, on data-parallel ``rank`` over ``dataset``, with the state loaded
    (its configuration checked by the sampler's ``load_state_dict``); ConfigError for an unknown kind."""
    read_sampler_state(state, "state['sampler']")
    kind = state.get("sampler")
    total = check_int("state['sampler']['total_samples']", state.get("total_samples"), 1)
    if total != len(dataset):
        raise ConfigError(
            f"state['sampler']: total_samples={total} but the dataset holds {len(dataset)} samples: "
            "the state belongs to another dataset"
        )
    name = kind if isinstance(kind, str) else _KINDS.get(kind) if isinstance(kind, int) else None
    if name is None:
        raise ConfigError(
            f"state['sampler']['sampler']={kind!r}: not a sampler tokenport can replay "
            "(PretrainingSampler, RandomSampler, StreamSampler, or a name given to register_sampler)"
        )
    sampler = _SAMPLERS.get(name, where="state['sampler']['sampler']")(state, rank, dataset)
    sampler.load_state_dict(state)  # refuses a state whose fields do not fit (fingerprint, configuration)
    return sampler


def replayable(state: Mapping[str, Any]) -> bool:
    """True when ``sampler_from_state`` can rebuild the sampler of ``state`` (typed already): one of tokenport's
    kinds, or a name given to ``register_sampler``."""
    kind = state.get("sampler")
    return (isinstance(kind, int) and kind in _KINDS) or (isinstance(kind, str) and _SAMPLERS.find(kind) is not None)


def _pretraining(state: Mapping[str, Any], rank: int, dataset: Any) -> PretrainingSampler:
    """A PretrainingSampler of ``state``'s configuration."""
    total, mbs, size = int(state["total_samples"]), int(state["micro_batch_size"]), int(state["data_parallel_size"])
    return PretrainingSampler(total, 0, mbs, rank, size, bool(state.get("drop_last", 1)), auto_advance=False)


def _random(state: Mapping[str, Any], rank: int, dataset: Any) -> RandomSampler:
    """A RandomSampler of ``state``'s configuration."""
    total, mbs, size = int(state["total_samples"]), int(state["micro_batch_size"]), int(state["data_parallel_size"])
    return RandomSampler(
        total,
        0,
        mbs,
        rank,
        size,
        int(state["seed"]),
        bool(state["data_sharding"]),
        bool(state["megatron_compat"]),
        auto_advance=False,
    )


def _stream(state: Mapping[str, Any], rank: int, dataset: Any) -> StreamSampler:
    """A StreamSampler of ``state``'s configuration (a length-grouped order reads the dataset's lengths)."""
    total, mbs, size = int(state["total_samples"]), int(state["micro_batch_size"]), int(state["data_parallel_size"])
    order = ORDERS[int(state["order"])]
    grouped = order == "length_grouped"
    if grouped and not hasattr(dataset, "lengths"):
        raise ConfigError("state['sampler']: a length-grouped order needs the dataset's sample lengths")
    return StreamSampler(
        total,
        0,
        mbs,
        rank,
        size,
        int(state["seed"]),
        order,
        lengths=dataset.lengths if grouped else None,
        group_size=int(state["group_size"]) if grouped else None,
        mega_batch_mult=int(state["mega_batch_mult"]) if grouped else None,
        auto_advance=False,
    )


for _name, _factory in (("PretrainingSampler", _pretraining), ("RandomSampler", _random), ("StreamSampler", _stream)):
    register_sampler(_name, _factory)
_SAMPLERS.seal_built_ins()

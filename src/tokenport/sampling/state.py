"""The schema of loader and sampler states: what ``state_dict()`` holds, read through `_schema` before any use.

A sampler state is one document kind per sampler, told apart by ``sampler`` (1 PretrainingSampler,
2 RandomSampler, 3 StreamSampler; a name: a sampler registered by that name, ``RegisteredState``).
A loader state (``StatefulLoader.state_dict()``) holds its ``version``, its sampler's state, the
data receipt (``ReceiptDocument``: the dataset tree, its length, the sampler's seed and position)
and, over an AdaptiveBlend, the weight updates (``mixture``). They live here, under the rooms that
write them (integrations) and read them (builder's ``blend --state``). A wrong type, a missing or
unknown key, a number out of range or NaN is one ConfigError naming where the state came from and
the field, before anything is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from .._schema import Count, Document, Int64, NonNegativeFinite, Positive, Seed, Text, decode
from ..errors import ConfigError

__all__ = [
    "Certificate",
    "LoaderState",
    "ReceiptDocument",
    "RegisteredState",
    "Removal",
    "SamplerState",
    "read_loader_state",
    "read_sampler_state",
]

RECEIPT_FORMAT = "tokenport.receipt/1"
CERTIFICATE_FORMAT: Final = "tokenport.certificate/2"  # a chain over positions and the order's digest
IDS_FORMAT: Final = "tokenport.certificate/1"  # a chain over sample ids: registered samplers, older states

Flag = Annotated[int, msgspec.Meta(ge=0, le=1)]
"""A bool stored as 0 or 1."""


class _State(Document, frozen=True):
    """The fields every sampler state holds."""

    consumed_samples: Count
    total_samples: Positive
    micro_batch_size: Positive
    data_parallel_size: Positive
    fingerprint: Count


class PretrainingState(_State, frozen=True, tag_field="sampler", tag=1):
    """``PretrainingSampler.state_dict()``; ``drop_last`` only when 0 (the final partial batch kept)."""

    drop_last: Flag | UnsetType = UNSET


class RandomState(_State, frozen=True, tag_field="sampler", tag=2):
    """``RandomSampler.state_dict()``."""

    global_batch_size: Positive
    seed: Count
    data_sharding: Flag
    megatron_compat: Flag
    epoch: Count


class StreamState(_State, frozen=True, tag_field="sampler", tag=3):
    """``StreamSampler.state_dict()``; ``order`` indexes ``stream.ORDERS``."""

    seed: Seed
    order: Annotated[int, msgspec.Meta(ge=0, le=3)]
    group_size: Count
    mega_batch_mult: Count
    lengths_fingerprint: Count
    epoch: Count


class RegisteredState(Document, frozen=True):
    """The state of a sampler registered by name (``register_sampler``): the name, the fields every reader of
    a state uses (trace replays steps from them), and the sampler's own JSON fields under ``own``."""

    sampler: Text
    consumed_samples: Count
    total_samples: Positive
    micro_batch_size: Positive
    data_parallel_size: Positive
    own: dict[str, Any] = msgspec.field(default_factory=dict)


SamplerState = PretrainingState | RandomState | StreamState


def read_sampler_state(
    state: Mapping[str, Any] | Any, where: str = "state"
) -> PretrainingState | RandomState | StreamState | RegisteredState:
    """``state`` (a sampler's ``state_dict()``) as its typed document: one of tokenport's samplers' (an integer
    ``sampler`` kind), or a registered sampler's (its name); ConfigError naming ``where`` and the field."""
    if not isinstance(state, Mapping):
        raise ConfigError(f"{where}: expected the dict a sampler's state_dict() returned, got a {type(state).__name__}")
    schema: Any = RegisteredState if isinstance(state.get("sampler"), str) else SamplerState
    return decode(
        state, schema, where=where, remedy="pass the dict the sampler's state_dict() returned", error=ConfigError
    )


# -- the data receipt ----------------------------------------------------------------------------


class _Store(Document, frozen=True):
    """A store a receipt node reads: its prefix (not compared), content identity, tokenizer, recipe."""

    prefix: str
    content: dict[str, Any] | None
    tokenizer: dict[str, Any] | None = None
    prepared: Any = None


class _Documents(Document, frozen=True):
    """A GPTDataset's split documents: how many and their digest."""

    count: Count
    digest: Text


_NODE_FIELDS: dict[str, tuple[str, ...]] = {
    "AdaptiveBlend": ("dataset_lengths", "initial_weights", "datasets", "order"),
    "BlendedDataset": ("datasets", "samples_per_dataset", "schedule", "order"),
    "GPTDataset": ("store", "sample_config", "documents", "order"),
    "PackedDataset": ("store", "sample_config", "seed", "order"),
    "SFTDataset": ("store", "sample_config", "seed", "order"),
}
"""The fields each of tokenport's own dataset kinds writes (``SampleDataset.describe``, beside ``type`` and
``length``; ``build`` is optional: receipts written before it compare as before). A plugin's kind may use any
of ``ReceiptNode``'s fields."""


class ReceiptNode(Document, frozen=True):
    """One dataset of a receipt's tree: each field typed, those its type records present (``_NODE_FIELDS``)."""

    type: Text
    length: Count
    datasets: list[ReceiptNode] | UnsetType = UNSET
    store: _Store | UnsetType = UNSET
    sample_config: dict[str, Any] | UnsetType = UNSET
    seed: Int64 | None | UnsetType = UNSET
    order: Text | UnsetType = UNSET
    documents: _Documents | UnsetType = UNSET
    samples_per_dataset: list[Count] | UnsetType = UNSET
    schedule: list[dict[str, Any]] | None | UnsetType = UNSET
    build: dict[str, Any] | None | UnsetType = UNSET
    dataset_lengths: list[Count] | UnsetType = UNSET
    initial_weights: list[NonNegativeFinite] | UnsetType = UNSET
    certified: bool | UnsetType = UNSET

    def __post_init__(self) -> None:
        missing = [name for name in _NODE_FIELDS.get(self.type, ()) if getattr(self, name) is UNSET]
        if missing:
            raise ValueError(f"a {self.type} node has no `{missing[0]}`")
        children = None if isinstance(self.datasets, UnsetType) else len(self.datasets)
        for name in ("samples_per_dataset", "dataset_lengths", "initial_weights"):
            values = getattr(self, name)
            if children is not None and not isinstance(values, UnsetType) and len(values) != children:
                raise ValueError(f"`{name}` holds {len(values)} values for {children} datasets")


class _Position(Document, frozen=True):
    """Where the sampler stood: its type name, the samples all ranks consumed, the epoch."""

    sampler: Text | None
    consumed_samples: Count
    epoch: Count


class Removal(Document, frozen=True):
    """One removal of documents from a run (``integrations.removal``): the store's prefix (for people) and content
    identity (as the receipt's tree records it; None for a store without one), the document ids (sorted, distinct),
    and where it applies from: the samples all ranks had consumed (``consumed_samples``) and that ``step``."""

    store: Text
    identity: dict[str, Any] | None
    documents: list[Count]
    consumed_samples: Count
    step: Count

    def __post_init__(self) -> None:
        if not self.documents:
            raise ValueError("a removal lists no `documents`")
        if any(b <= a for a, b in zip(self.documents, self.documents[1:])):
            raise ValueError(f"`documents` {self.documents[:8]} must be sorted and distinct")


class ReceiptDocument(Document, frozen=True):
    """``DataReceipt.to_dict()``: the format, the dataset tree, its length, the sampler's seed and position;
    ``removed_documents`` (absent when nothing was removed) the removals in the order they were made."""

    format: Literal["tokenport.receipt/1"]
    dataset: ReceiptNode
    length: Count
    seed: Count | None
    position: _Position
    uncertified: list[str]
    removed_documents: list[Removal] | UnsetType = UNSET

    def __post_init__(self) -> None:
        removals = [] if isinstance(self.removed_documents, UnsetType) else self.removed_documents
        if any(b.consumed_samples < a.consumed_samples for a, b in zip(removals, removals[1:])):
            raise ValueError("`removed_documents` must be in the order made (`consumed_samples` non-decreasing)")
        if any(r.consumed_samples > self.position.consumed_samples for r in removals):
            raise ValueError("a removal of `removed_documents` applies from past the receipt's position")
        if self.length != self.dataset.length:
            raise ValueError(f"`length`={self.length} but the dataset it certifies holds {self.dataset.length}")
        named: list[str] = []
        _uncertified(self.dataset, "dataset", named)
        if sorted(named) != sorted(self.uncertified):
            raise ValueError(f"`uncertified`={self.uncertified} but the dataset tree leaves uncertified {named}")


def _uncertified(node: ReceiptNode, path: str, out: list[str]) -> None:
    """The paths of the datasets (``certified: false``) and stores (no content identity) a tree leaves uncertified."""
    if node.certified is False:
        out.append(path)
    if not isinstance(node.store, UnsetType) and node.store.content is None:
        out.append(f"{path}.store")
    for k, child in enumerate([] if isinstance(node.datasets, UnsetType) else node.datasets):
        _uncertified(child, f"{path}[{k}]", out)


def check_format(receipt: Any, where: str) -> None:
    """ConfigError when ``receipt`` is a dict of another receipt format (its own message: another version)."""
    if isinstance(receipt, Mapping) and "format" in receipt and receipt["format"] != RECEIPT_FORMAT:
        raise ConfigError(
            f"{where}['format']={receipt['format']!r}: expected {RECEIPT_FORMAT!r}; "
            "a receipt of another tokenport version cannot be compared"
        )


# -- the loader state ----------------------------------------------------------------------------


STATE_VERSION = 2  # 1: the sampler's state only; 2: with the data receipt


class Mixture(Document, frozen=True):
    """An AdaptiveBlend's weight updates: ``[from_sample, [weights...]]`` in sample order."""

    updates: list[tuple[Count, list[NonNegativeFinite]]]


Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
"""A 16-byte digest as 32 lowercase hex digits."""


class Certificate(Document, frozen=True):
    """The stream's certificate (``integrations.certificate``): its segment's data digest, start (``since``
    handovers, digest ``base``), runs of consecutive positions ``[handover, consumed_samples]``, the handovers
    hashed (``steps``) and the digests after the last one and the one before it; format /2 also the digest of
    the sampler's global order (``order``) and of the last step's rank-0 micro-batch (``batch``), which a resume
    and an audit recompute with the sampler at hand, so a sampler that orders samples otherwise is caught."""

    format: Literal["tokenport.certificate/1", "tokenport.certificate/2"]
    data: Digest
    steps: Count
    digest: Digest
    previous: Digest
    since: Count
    base: Digest
    runs: list[tuple[Count, Count]]
    order: Digest | None = None  # /2: the digest of the sampler's global order; /1 has none
    batch: Digest | None = None  # /2 with a step hashed: the digest of the last step's rank-0 micro-batch

    def __post_init__(self) -> None:
        if (self.order is None) != (self.format == IDS_FORMAT):
            raise ValueError(f"a {self.format} certificate {'has no' if self.order is None else 'has an'} `order`")
        if (self.batch is None) != (self.order is None or self.steps == self.since):
            raise ValueError(
                "`batch` (the last step's rank-0 micro-batch) belongs to a /2 certificate with a step hashed in its "
                f"segment, and to no other (format {self.format}, steps {self.steps}, since {self.since})"
            )
        if self.since > self.steps:
            raise ValueError(f"`since`={self.since} is past `steps`={self.steps}")
        if not self.runs or self.runs[0][0] != self.since:
            raise ValueError(f"`runs` must start with the segment's first handover, `since`={self.since}")
        starts = [start for start, _ in self.runs]
        if starts != sorted(set(starts)) or any(start >= self.steps for start in starts[1:]):
            raise ValueError(f"`runs` handovers {starts} must increase and stay below `steps`={self.steps}")
        if self.steps == self.since and (self.digest, self.previous) != (self.base, self.base):
            raise ValueError("no step is hashed in the segment, so `digest` and `previous` must equal `base`")


class LoaderState(Document, frozen=True):
    """``StatefulLoader.state_dict()``: a version 2 state has a receipt; a version 1 state may lack one.
    ``certificate``: absent in states saved before certificates (a resume starts a chain)."""

    version: Literal[1, 2]
    sampler: dict[str, Any]
    receipt: ReceiptDocument | UnsetType = UNSET
    mixture: Mixture | UnsetType = UNSET
    certificate: Certificate | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.version == STATE_VERSION and isinstance(self.receipt, UnsetType):
            raise ValueError("a version 2 state has no `receipt`")


def read_loader_state(state: Mapping[str, Any] | Any, where: str = "state") -> LoaderState:
    """``state`` (the dict, or a file's bytes) as a typed ``LoaderState``; ConfigError naming ``where`` and the
    field when it is not one."""
    if not isinstance(state, (Mapping, bytes)):
        raise ConfigError(
            f"{where}: expected the dict StatefulLoader.state_dict() returned, got a {type(state).__name__}"
        )
    if isinstance(state, Mapping):
        check_format(state.get("receipt"), f"{where}['receipt']")
    return decode(
        state,
        LoaderState,
        where=where,
        remedy="pass the dict StatefulLoader.state_dict() returned, unedited",
        error=ConfigError,
    )

"""Data receipts: what a loader checkpoint was trained on, so that resuming against other data is refused.

A ``DataReceipt`` is a JSON-able record of a dataset and a position in it. It walks the dataset: a
``BlendedDataset`` records its children, the samples it takes from each (its realized weights) and
a digest of its order (its schedule); a ``GPTDataset`` its store, sample config, split documents
and a digest of its indices (its seed); a ``PackedDataset`` its store, packing parameters, seed and
a digest of its bins. A store is recorded by its content identity
(``indexed.identity.store_identity``: the PREFIX.json checksums), its tokenizer (the manifest's
``tokenizer``) and its preparation recipe (``provenance["prepare"]["recipe"]``: the cleaning steps,
tokenizer and text settings of ``prepare``, without the input paths, so re-preparing a corpus that
moved is no change). The prefix is recorded for people to read but never compared: a store moved to
another directory with the same content is the same store. Each kind describes itself
(``SampleDataset.describe``) under the name it was registered with (``register_dataset_kind``); a
dataset of no registered kind is recorded by its type and length only and named in
``uncertified`` (with a warning). A store without a manifest
(written by Megatron) is identified by its files' sizes and mtimes, so copying it (not moving it)
counts as a change.

Each node also records its recipe (``build``, never compared, so receipts without it compare as
before): a GPTDataset's seed, ``num_samples``, ``drop_last_partial`` and split documents as runs of
ids; a packed or SFT dataset's ids and shuffle or ``num_samples``; a blend's weights (or schedule),
size and algorithm. ``rebuild.rebuild_dataset`` builds the dataset again from it (``tokenport trace``).

Cost: one pass over the datasets' index arrays (hashed 4M values at a time), linear in
the dataset's size and independent of the position; ``StatefulLoader`` computes it once per dataset.

``check_receipt(saved, current, allow_changes=...)`` lists every difference and refuses them
unless each is of a kind the caller accepts (``ALLOWED_CHANGES``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._checks import is_int
from .._schema import decode
from ..errors import ConfigError
from ..samples.base import dataset_length, describe_dataset
from ..sampling.state import RECEIPT_FORMAT, ReceiptDocument, check_format

__all__ = ["ALLOWED_CHANGES", "DataReceipt", "check_receipt", "check_state_agrees", "data_receipt"]

logger = logging.getLogger(__name__)


ALLOWED_CHANGES: dict[str, str] = {
    "no_receipt": (
        "the state has no receipt (saved before receipts existed, or stripped): nothing can be "
        "certified; the sampler state alone is loaded"
    ),
    "provenance": (
        "a store holds the same tokens but its manifest names another tokenizer or preparation "
        "recipe (re-prepared with other steps or settings that gave the same bytes): the stream is unchanged"
    ),
    "sample_config": (
        "sample fields changed (GPTSampleConfig fields, PackedDataset pad_id/label_pad/cu_seqlens_length) "
        "while every order stayed the same: the same samples continue, assembled the new way"
    ),
    "seed": (
        "a dataset's own shuffle changed (a GPTDataset or PackedDataset built with another seed) with "
        "the same stores and lengths: the run continues at the same sample position of the new order, "
        "so within the current pass some samples repeat and others are skipped"
    ),
    "stores_appended": (
        "a blend gained datasets after its existing ones, which are unchanged in content: the run "
        "continues at the same sample position of the new blend; what the new blend puts before that "
        "position is not read, and its existing children may be resized (other length and order)"
    ),
}
"""The change kinds ``allow_changes`` may name, each with what accepting it means for the stream."""


@dataclass(frozen=True)
class DataReceipt:
    """What a checkpoint's batches came from: the dataset tree (stores, configs, orders), the
    sampler's seed, the dataset length, the position, the paths of uncertified datasets, and the documents
    removed from the run (``integrations.removal``; each a ``Removal`` as a dict, in the order made)."""

    dataset: dict[str, Any]
    length: int
    seed: int | None
    position: dict[str, Any]
    uncertified: tuple[str, ...] = ()
    format: str = RECEIPT_FORMAT
    removed: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (survives ``json.dumps`` and ``torch.load(weights_only=True)``);
        ``removed_documents`` only when something was removed, so other receipts stay as they were."""
        out = {
            "format": self.format,
            "dataset": copy.deepcopy(self.dataset),
            "length": self.length,
            "seed": self.seed,
            "position": dict(self.position),
            "uncertified": list(self.uncertified),
        }
        if self.removed:
            out["removed_documents"] = copy.deepcopy(list(self.removed))
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "state['receipt']") -> DataReceipt:
        """The receipt ``to_dict`` wrote (also after a JSON round trip), read through its schema
        (``ReceiptDocument``); ConfigError naming ``where`` and the bad field."""
        check_format(data, where)
        decode(
            data,
            ReceiptDocument,
            where=where,
            remedy="pass the receipt StatefulLoader.state_dict() saved, unedited",
            error=ConfigError,
        )
        return cls(
            dataset=copy.deepcopy(dict(data["dataset"])),
            length=int(data["length"]),
            seed=None if data["seed"] is None else int(data["seed"]),
            position=dict(data["position"]),
            uncertified=tuple(str(path) for path in data["uncertified"]),
            removed=tuple(copy.deepcopy(dict(r)) for r in data.get("removed_documents", ())),
        )


_SAMPLER_KINDS = {1: "PretrainingSampler", 2: "RandomSampler", 3: "StreamSampler"}  # a sampler state's "sampler"


def check_state_agrees(receipt: DataReceipt, sampler_state: Mapping[str, Any], sampler: str | None = None) -> None:
    """ConfigError naming each field the receipt records that contradicts the sampler state it certifies:
    the position (the sampler's type, consumed samples, epoch), the seed and the length. ``sampler``: the
    type name of the sampler loading the state (a subclass of tokenport's records its own name; without it,
    as in trace, a name that is none of tokenport's samplers' is taken for a subclass of the state's kind)."""
    kind = sampler_state.get("sampler")
    name = _SAMPLER_KINDS.get(int(kind)) if is_int(kind) else None
    ours = name is not None
    position = receipt.position
    recorded: dict[str, tuple[Any, Any, str]] = {}
    recorded_name = position.get("sampler")
    subclass = sampler is None and ours and recorded_name not in _SAMPLER_KINDS.values()  # trace: a subclass of ours
    if recorded_name not in {name if ours else sampler, sampler} and not subclass:
        what = "the sampler state's kind" if ours else "the loading sampler's type"
        recorded["['position']['sampler']"] = (position.get("sampler"), name if ours else sampler, what)
    fields = {
        "['position']['consumed_samples']": (position.get("consumed_samples"), "consumed_samples", None),
        "['position']['epoch']": (position.get("epoch"), "epoch", 0),
        "['seed']": (receipt.seed, "seed", None),
        "['length']": (receipt.length, "total_samples", None),
    }
    for field, (saved, key, absent) in fields.items():
        if key in sampler_state or (ours and key != "total_samples"):
            recorded[field] = (saved, sampler_state.get(key, absent), f"state['sampler']['{key}']")
    wrong = [
        f"state['receipt']{field}={saved!r} but {what} is {actual!r}"
        for field, (saved, actual, what) in recorded.items()
        if saved != actual or type(saved) is not type(actual)
    ]
    if wrong:
        raise ConfigError(
            "state: the receipt contradicts the sampler state it certifies ("
            + "; ".join(wrong)
            + "): the state was edited or assembled from two saves; resume from a state saved whole by "
            "StatefulLoader.state_dict()"
        )


def data_receipt(dataset: Any, sampler: Any = None) -> DataReceipt:
    """The receipt of ``dataset`` read through ``sampler`` (a tokenport batch sampler, or None: position 0)."""
    uncertified: list[str] = []
    tree = describe_dataset(dataset, "dataset", uncertified)
    length = dataset_length(dataset)
    return DataReceipt(tree, length, sampler_seed(sampler), sampler_position(sampler), tuple(uncertified))


def sampler_seed(sampler: Any) -> int | None:
    """The seed of a tokenport sampler (None when it has none, as the sequential sampler)."""
    seed = getattr(sampler, "seed", None)
    return int(seed) if is_int(seed) else None


def sampler_position(sampler: Any) -> dict[str, Any]:
    """Where a sampler stands: its type, consumed samples (all ranks) and epoch."""
    if sampler is None:
        return {"sampler": None, "consumed_samples": 0, "epoch": 0}
    return {
        "sampler": type(sampler).__name__,
        "consumed_samples": int(sampler.consumed_samples),
        "epoch": int(getattr(sampler, "epoch", 0)),
    }


def check_receipt(
    saved: DataReceipt | Mapping[str, Any] | None, current: DataReceipt, allow_changes: Iterable[str] = ()
) -> tuple[str, ...]:
    """Refuse (ConfigError listing them all) the differences between two receipts that
    ``allow_changes`` does not accept; return the accepted ones, each also logged as a warning."""
    allowed = check_allow_changes(allow_changes)
    if isinstance(saved, Mapping):  # a receipt as to_dict() wrote it
        saved = DataReceipt.from_dict(saved, "saved")
    if saved is None:
        changes = [
            _Change(
                "no_receipt",
                "the state has no data receipt (saved before receipts, or stripped): its data cannot be compared",
            )
        ]
    else:
        changes = _compare_receipts(saved, current)
    refused = [change for change in changes if change.kind not in allowed]
    if refused:
        lines = "\n".join(
            f"  - {change.message}" + (f" [allow_changes: {change.kind!r}]" if change.kind else "")
            for change in refused
        )
        raise ConfigError(
            f"state: the data differs from the data this checkpoint was taken on ({len(refused)} change(s)):\n{lines}\n"
            f"{_resize_remedy(saved, current) if saved is not None else ''}"
            "Resume against the data the checkpoint was taken on (state['receipt'] names every store and its "
            "content digest), or start a new run; a change marked [allow_changes: KIND] can be accepted with "
            "load_state_dict(state, allow_changes=(KIND, ...)) (see ALLOWED_CHANGES for what each means)"
        )
    for kind in sorted({change.kind for change in changes}):
        logger.warning(
            "resuming with an accepted data change (%s): %s. %s",
            kind,
            "; ".join(change.message for change in changes if change.kind == kind),
            ALLOWED_CHANGES[kind][0].upper() + ALLOWED_CHANGES[kind][1:],
        )
    return tuple(change.message for change in changes)


def receipt_changes(saved: DataReceipt, current: DataReceipt) -> list[str]:
    """Each difference between two receipts, as the message a refused resume gives."""
    return [change.message for change in _compare_receipts(saved, current)]


def check_allow_changes(allow_changes: Iterable[str]) -> frozenset[str]:
    """The accepted change kinds; ConfigError for a string (not a list) or an unknown kind."""
    if isinstance(allow_changes, str):
        raise ConfigError(f"allow_changes={allow_changes!r}: pass a tuple of change kinds, e.g. ({allow_changes!r},)")
    try:
        kinds = tuple(allow_changes)
    except TypeError:
        raise ConfigError(f"allow_changes={allow_changes!r}: pass a tuple of change kinds, e.g. ('seed',)") from None
    unknown = [kind for kind in kinds if kind not in ALLOWED_CHANGES]
    if unknown:
        raise ConfigError(
            f"allow_changes: unknown change kind(s) {', '.join(map(repr, unknown))}; "
            f"valid kinds are {', '.join(sorted(ALLOWED_CHANGES))}"
        )
    return frozenset(kinds)


# -- describing a dataset ----------------------------------------------------------------------


# -- comparing two receipts ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Change:
    """One difference; ``kind`` is the allow_changes name that accepts it, "" when none does."""

    kind: str
    message: str


def _compare_receipts(saved: DataReceipt, current: DataReceipt) -> list[_Change]:
    """Every difference between the saved and the current receipt (the position is not one)."""
    changes: list[_Change] = []
    if saved.seed != current.seed:
        changes.append(
            _Change("", f"sampler seed {saved.seed} -> {current.seed} (the sampler's order is drawn from it)")
        )
    _compare_node(saved.dataset, current.dataset, "dataset", changes, resized=False)
    for path in saved.uncertified:
        logger.warning(
            "%s was not certified when the checkpoint was taken: only its type and length are compared", path
        )
    return changes


def _compare_node(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: list[_Change], resized: bool) -> None:
    """The differences of one dataset node; ``resized``: its blend gained datasets (lengths may differ)."""
    label = _label(old, path)
    if old.get("type") != new.get("type"):
        out.append(_Change("", f"{path}: was a {old.get('type')}, is now a {new.get('type')}"))
        return
    content_changed = "store" in old and _compare_store(old["store"], new["store"], out)
    length_changed = old.get("length") != new.get("length")
    if length_changed:
        out.append(
            _Change(
                "stores_appended" if resized else "",
                f"{label}: length {old.get('length')} -> {new.get('length')} samples",
            )
        )
    for field in sorted(set(old.get("sample_config", {})) | set(new.get("sample_config", {}))):
        before, after = old.get("sample_config", {}).get(field), new.get("sample_config", {}).get(field)
        if before != after:
            out.append(_Change("sample_config", f"{label}: sample config {field} {before} -> {after}"))
    if "seed" in old and old.get("seed") != new.get("seed"):
        out.append(_Change("seed", f"{label}: seed {old.get('seed')} -> {new.get('seed')}"))
    documents_changed = "documents" in old and old["documents"] != new.get("documents")
    if documents_changed:
        before, after = old["documents"], new.get("documents") or {}
        out.append(
            _Change(
                "",
                f"{label}: the split's documents changed ({before.get('count')} -> {after.get('count')} documents, "
                f"digest {_arrow(before.get('digest'), after.get('digest'))}): another split",
            )
        )
    if "datasets" in old:
        _compare_blend(old, new, path, label, out, resized)
    elif old.get("order") != new.get("order") and not (length_changed or content_changed or documents_changed):
        before, after = _built_for(old), _built_for(new)
        if before != after and before is not None and after is not None:
            # Megatron-style indices: the epochs and the last epoch's own shuffle follow num_samples
            why = (
                f"built for {before} -> {after} samples with the same seed, and its shuffle depends on the "
                "number of samples it is built for"
            )
            kind = "stores_appended" if resized else ""
        else:
            why = "built with another seed (or another sample config)"
            kind = "stores_appended" if resized else "seed"
        out.append(
            _Change(
                kind,
                f"{label}: sample order changed (order digest {_arrow(old.get('order'), new.get('order'))}): {why}",
            )
        )


def _compare_blend(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, label: str, out: list[_Change], resized: bool
) -> None:
    """A blend's children (by position), realized weights and order."""
    before, after = list(old["datasets"]), list(new.get("datasets", []))
    appended = len(after) > len(before)
    for k in range(min(len(before), len(after))):
        _compare_node(before[k], after[k], f"{path}[{k}]", out, resized or appended)
    if appended:
        names = ", ".join(_label(child, f"{path}[{k}]") for k, child in enumerate(after) if k >= len(before))
        out.append(_Change("stores_appended", f"{label}: {len(after) - len(before)} dataset(s) appended: {names}"))
    elif len(after) < len(before):
        names = ", ".join(_label(child, f"{path}[{k}]") for k, child in enumerate(before) if k >= len(after))
        out.append(_Change("", f"{label}: {len(before) - len(after)} dataset(s) removed: {names}"))
    kind = "stores_appended" if appended or resized else ""
    if old.get("schedule") != new.get("schedule"):
        out.append(
            _Change(
                kind,
                f"{label}: mixture schedule changed ({_phases(old.get('schedule'))} -> {_phases(new.get('schedule'))})",
            )
        )
    elif old.get("samples_per_dataset") != new.get("samples_per_dataset"):
        counts = f"samples per dataset {old.get('samples_per_dataset')} -> {new.get('samples_per_dataset')}"
        weights = [_recipe(node).get("weights") for node in (old, new)]
        what = (
            "blend weights changed" if weights[0] != weights[1] or weights[0] is None else "same weights, another size"
        )
        out.append(_Change(kind, f"{label}: {what} ({counts})"))
    elif old.get("order") != new.get("order"):
        out.append(
            _Change(
                kind,
                f"{label}: blend order changed (order digest {_arrow(old.get('order'), new.get('order'))}): "
                "another schedule or blending algorithm",
            )
        )


def _recipe(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A node's ``build`` (empty for a receipt saved without one)."""
    build = node.get("build")
    return build if isinstance(build, Mapping) else {}


def _built_for(node: Mapping[str, Any]) -> Any:
    """The number of samples a dataset was built for (a GPTDataset's num_samples, a blend's size), or None."""
    build = _recipe(node)
    return build.get("num_samples", build.get("size"))


def _resize_remedy(saved: DataReceipt, current: DataReceipt) -> str:
    """What to do when the run was built for another number of samples; "" when it was not."""
    before, after = _built_for(saved.dataset), _built_for(current.dataset)
    if before is None or after is None or before == after:
        return ""
    return (
        f"The checkpoint's run was built for {before} samples and this dataset for {after}: how many samples a "
        "dataset is built for decides its order (its epochs, the shuffle of its last epoch, the blend's counts), "
        f"so a run cannot grow or shrink in place. To resume, build the dataset for {before} samples as before "
        "(the same sizes= or train_samples); for another number of samples, start a new run.\n"
    )


def _phases(schedule: Any) -> str:
    """A schedule in a line: each phase's end and weights (``none`` for a blend without one)."""
    if not schedule:
        return "none"
    return "; ".join(
        ", ".join(f"{key}={value}" for key, value in sorted(phase.items()))
        if isinstance(phase, Mapping)
        else str(phase)
        for phase in schedule
    )


def _compare_store(old: Mapping[str, Any], new: Mapping[str, Any], out: list[_Change]) -> bool:
    """The differences of one store; True when its content changed."""
    where = f"store '{old.get('prefix')}'" + (
        f" (now '{new.get('prefix')}')" if new.get("prefix") != old.get("prefix") else ""
    )
    if old.get("content") != new.get("content"):
        out.append(_Change("", f"{where} changed content ({_content_change(old.get('content'), new.get('content'))})"))
        return True
    if old.get("tokenizer") != new.get("tokenizer"):
        out.append(_Change("provenance", f"{where}: tokenizer {old.get('tokenizer')} -> {new.get('tokenizer')}"))
    if old.get("prepared") != new.get("prepared"):
        out.append(
            _Change(
                "provenance",
                f"{where}: preparation recipe (cleaning steps, text settings) "
                f"{_short(old.get('prepared'))} -> {_short(new.get('prepared'))}",
            )
        )
    return False


def _content_change(old: Any, new: Any) -> str:
    """The first content field that differs, shortened: 'idx digest a1b2c3d4.. -> c3d4e5f6..'."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return f"identity {old} -> {new}"
    if old.get("masks") != new.get("masks") and all(old.get(k) == new.get(k) for k in old if k != "masks"):
        return f"loss masks {_content_change(old.get('masks'), new.get('masks'))}"
    for key in ("idx", "bin_blocks_sha256", "tokens", "bin"):
        if key in old and old.get(key) != new.get(key):
            name = {"idx": "idx digest", "bin_blocks_sha256": "bin digest"}.get(key, key)
            return f"{name} {_short(old.get(key))} -> {_short(new.get(key))}"
    return f"identity {old} -> {new}"


def _label(node: Mapping[str, Any], path: str) -> str:
    """``dataset[1] (GPTDataset of store 'x/code')``: a node named for a reader."""
    store = node.get("store")
    of = f" of store '{store.get('prefix')}'" if isinstance(store, Mapping) else ""
    return f"{path} ({node.get('type')}{of})"


def _short(value: Any) -> str:
    """A digest shortened for a message ('a1b2c3d4..'); other values as they are."""
    return f"{value[:8]}.." if isinstance(value, str) and len(value) > 10 else str(value)


def _arrow(before: Any, after: Any) -> str:
    """'a1b2c3d4.. -> c3d4e5f6..': a change of digests for a message."""
    return f"{_short(before)} -> {_short(after)}"

"""Removed documents: their records in a receipt, and their tokens masked from the removal's step on.

A removal names documents of the run's stores (``(store, document)`` pairs, a ``WhereReport`` or the
JSON ``tokenport where --json`` printed). ``StatefulLoader.remove_documents`` applies it from the next
batch handed over; ``tokenport.takedown(state, documents)`` (``integrations.takedown``) writes it into a
saved state, which a loader applies when it loads it. The receipt lists each removal
(``receipt["removed_documents"]``: the store's prefix and content identity, the sorted ids, the
``consumed_samples`` and ``step`` it applies from), so a resumed run keeps it, and ``trace``, ``where``
and ``audit`` know it. Nothing moves: every sample keeps its id, every
other token its position, and ``position_ids``, ``cu_seqlens``, attention masks stay as they were.

The masking rule, by the layout of the sample a removed document's piece lies in (``R``: the positions of
the sample its removed pieces hold, as ``lineage``/``occurrences`` give them; for a GPT sample the window
of ``seq_length`` tokens plus the extra one):

- GPTDataset: ``tokens[j] = 0`` for ``j`` in R (Megatron's pad convention: a pad is held as 0 with no
  loss, with or without a ``pad_id``); ``labels[j] = 0`` where ``j + 1`` is in R; ``loss_mask[j] = 0``
  where ``j`` or ``j + 1`` is in R: no gradient from or to a removed token.
- PackedDataset: ``tokens[j] = pad_id`` for ``j`` in R; ``labels[j] = label_pad`` where ``j`` or
  ``j + 1`` is in R.
- SFTDataset, ``shape="megatron"``: ``tokens`` ``pad_id`` in R; ``labels`` ``label_pad`` and ``loss_mask``
  0 where ``j`` or ``j + 1`` is in R.
- SFTDataset, ``shape="hf"`` (unshifted labels): ``input_ids`` ``pad_id`` and ``labels`` ``label_pad``
  for ``j`` in R (the label after a piece's last token is ``label_pad`` already).

Blends (fixed, scheduled, adaptive) mask through the child that holds the sample. The samples a
removal touches are found once (``dataset.occurrences``: exact for every kind, recomputed for an
AdaptiveBlend after each weight update); at each handover the loader looks its micro-batch's ids up and
masks copies of the affected fields, in the main process, so workers and prefetching do not matter.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import is_int
from ..blend import AdaptiveBlend
from ..errors import ConfigError, TokenportError
from ..indexed.identity import store_identity
from ..samples.base import SampleDataset, plain, store_documents
from ..samples.gpt import GPTDataset
from ..samples.packed import PackedDataset
from ..samples.sft import SFTDataset
from .certificate import GlobalBatches, data_digest

__all__ = [
    "Layout",
    "Masker",
    "certified_data",
    "layouts",
    "removal_step",
    "removed_from",
    "requested",
    "store_identities",
]


@dataclass(frozen=True)
class Layout:
    """How a dataset kind's samples hide a removed token: ``kind`` (gpt, packed, megatron, hf), the token
    written in its place and the label that carries no loss."""

    kind: str
    pad: int
    label_pad: int

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields masking writes (each must reach the trainer, or the removal is refused)."""
        return {
            "gpt": ("tokens", "labels", "loss_mask"),
            "packed": ("tokens", "labels"),
            "megatron": ("tokens", "labels", "loss_mask"),
            "hf": ("input_ids", "labels"),
        }[self.kind]

    def writes(self, positions: np.ndarray, width: int) -> dict[str, tuple[np.ndarray, int]]:
        """field -> (columns, value) that hide the tokens at ``positions`` in a row of ``width`` columns."""
        held = positions[positions < width]
        before = positions - 1
        before = before[(before >= 0) & (before < width)]
        both = np.union1d(held, before)
        if self.kind == "gpt":
            return {"tokens": (held, 0), "labels": (before, 0), "loss_mask": (both, 0)}
        if self.kind == "packed":
            return {"tokens": (held, self.pad), "labels": (both, self.label_pad)}
        if self.kind == "megatron":
            return {"tokens": (held, self.pad), "labels": (both, self.label_pad), "loss_mask": (both, 0)}
        return {"input_ids": (held, self.pad), "labels": (held, self.label_pad)}

    def collated_writes(self, positions: np.ndarray, width: int, ignore: int) -> dict[str, tuple[np.ndarray, int]]:
        """The writes of ``writes`` in the batch of a collate that declares ``removal_layout = "causal_lm"``
        (``integrations.hf.TokenportCollator``): ``input_ids``, unshifted ``labels`` and ``shift_labels``
        (``labels[t + 1] == shift_labels[t]``), ``ignore`` where no loss is taken."""
        held = positions[positions < width]
        if self.kind == "hf":  # unshifted labels: the target of a removed token is its own label
            targets = held - 1
            targets = targets[targets >= 0]
            return {"input_ids": (held, self.pad), "labels": (held, ignore), "shift_labels": (targets, ignore)}
        both = self.writes(positions, width)["labels" if self.kind == "packed" else "loss_mask"][0]
        after = both + 1
        return {"input_ids": (held, self.pad), "shift_labels": (both, ignore), "labels": (after[after < width], ignore)}


def _layout(dataset: Any) -> Layout | None:
    """The layout of a dataset that reads a store itself, or None for a kind tokenport cannot mask."""
    if isinstance(dataset, GPTDataset):
        return Layout("gpt", 0, 0)
    if isinstance(dataset, PackedDataset):
        return Layout("packed", int(dataset.pad_id), int(dataset.label_pad))
    if isinstance(dataset, SFTDataset):
        return Layout("megatron" if dataset.shape == "megatron" else "hf", int(dataset.pad_id), int(dataset.label_pad))
    return None


def layouts(dataset: Any, prefixes: Iterable[str]) -> dict[str, Layout]:
    """prefix -> the layout of the samples that hold the store's tokens, for each of ``prefixes``; ConfigError
    when a store is read by a kind tokenport cannot mask, or by datasets of two layouts."""
    found: dict[str, set[Layout | None]] = {}
    names: dict[str, str] = {}

    def walk(node: Any) -> None:
        if not isinstance(node, SampleDataset):
            return
        for child in node.datasets:
            walk(child)
        for store in node.stores():
            found.setdefault(str(store.prefix), set()).add(_layout(node))
            names[str(store.prefix)] = type(node).__name__

    walk(dataset)
    out: dict[str, Layout] = {}
    for prefix in prefixes:
        kinds = found.get(prefix, {None})
        layout = next(iter(kinds))
        if layout is None or len(kinds) != 1:
            what = f"a {names.get(prefix, 'dataset')}" if None in kinds else "datasets of different sample layouts"
            raise ConfigError(
                f"store {prefix!r} is read by {what}, whose samples tokenport cannot mask: removing documents "
                "works over GPTDataset, PackedDataset, SFTDataset and blends of them, each store read by one kind"
            )
        out[prefix] = layout
    return out


# -- what is asked -------------------------------------------------------------------------------


def requested(documents: Any) -> list[tuple[str, int]]:
    """``documents`` as (store, document) pairs: from pairs, a ``WhereReport`` or the dict ``tokenport where
    --json`` printed; ConfigError naming the item that is none of these."""
    to_json = getattr(documents, "to_json", None)
    if callable(to_json) and not isinstance(documents, Mapping):  # a WhereReport: what where --json prints
        documents = to_json()
    if isinstance(documents, Mapping):
        store, ids = documents.get("store"), documents.get("documents")
        if not isinstance(store, str) or not isinstance(ids, list):
            raise ConfigError(
                "documents: a dict must be what `tokenport where --json` printed (its 'store' a string and its "
                "'documents' a list of ids); pass that, a WhereReport or (store, document) pairs"
            )
        return [(store, _document(d, f"documents['documents'][{k}]")) for k, d in enumerate(ids)]
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Iterable):
        raise ConfigError(
            f"documents: a {type(documents).__name__}; pass (store, document) pairs, a WhereReport or the dict "
            "`tokenport where --json` printed"
        )
    pairs = []
    for k, item in enumerate(documents):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], (str, os.PathLike)):
            raise ConfigError(f"documents[{k}]={item!r:.80}: expected a (store prefix, document id) pair")
        pairs.append((os.fspath(item[0]), _document(item[1], f"documents[{k}]")))
    if not pairs:
        raise ConfigError("documents: nothing to remove; name at least one (store, document) pair")
    return pairs


def _document(value: Any, where: str) -> int:
    """A document id (an int, not a bool, at least 0); ConfigError naming ``where`` otherwise."""
    if not is_int(value) or isinstance(value, (bool, np.bool_)) or int(value) < 0:
        raise ConfigError(f"{where}={value!r:.80}: a document id is an int of at least 0")
    return int(value)


def store_identities(tree: Mapping[str, Any]) -> dict[str, Any]:
    """prefix -> content identity (None when uncertified) of every store a receipt's dataset tree records."""
    out: dict[str, Any] = {}
    store = tree.get("store")
    if isinstance(store, Mapping):
        out[str(store.get("prefix"))] = store.get("content")
    for child in tree.get("datasets") or ():
        out.update(store_identities(child))
    return out


def resolve_store(name: str, known: Iterable[str]) -> str | None:
    """The prefix of ``known`` that ``name`` names: itself, the same path spelled otherwise, or the one store under
    a folder (a prepare output names its single part, as ``where --store`` takes it); None if none."""
    known = list(known)
    if name in known:
        return name
    real = os.path.realpath(name)
    same = [prefix for prefix in known if os.path.realpath(prefix) == real]
    under = [prefix for prefix in known if os.path.realpath(prefix).startswith(real.rstrip("/") + "/")]
    return same[0] if same else under[0] if len(under) == 1 else None


def plan(
    pairs: list[tuple[str, int]],
    dataset: Any,
    tree: Mapping[str, Any],
    removed: Iterable[Mapping[str, Any]],
    consumed: int,
    step: int,
    recorded: Mapping[str, str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The new removals (dataset prefix, receipt record) ``pairs`` ask for, one per store in the order first named:
    each store checked against ``dataset``'s stores, each id against the store; ids removed already left out.
    ``recorded``: dataset prefix -> the prefix the receipt records (a moved store). ConfigError naming the item."""
    counts = store_documents(dataset)
    identities = store_identities(tree)
    gone = {(_identity_key(r.get("identity"), str(r["store"])), int(d)) for r in removed for d in r["documents"]}
    asked: dict[str, set[int]] = {}
    for k, (name, document) in enumerate(pairs):
        prefix = resolve_store(name, counts) or resolve_store(name, _moved_back(counts, recorded))
        if prefix is None:
            listed = ", ".join(sorted(counts)) or "none"
            raise ConfigError(f"documents[{k}]: store {name!r} is not read by this dataset; its stores are: {listed}")
        prefix = _moved(prefix, counts, recorded)
        if document >= counts[prefix]:
            raise ConfigError(
                f"documents[{k}]: document {document} is not in store {prefix!r}, which holds {counts[prefix]} "
                f"documents (ids 0 to {counts[prefix] - 1})"
            )
        asked.setdefault(prefix, set()).add(document)
    out = []
    for prefix, ids in asked.items():
        name = (recorded or {}).get(prefix, prefix)
        identity = identities.get(name)
        kept = sorted(d for d in ids if (_identity_key(identity, name), d) not in gone)
        if kept:
            record = {"store": name, "identity": copy.deepcopy(identity), "documents": kept}
            out.append((prefix, {**record, "consumed_samples": int(consumed), "step": int(step)}))
    return out


def _moved_back(counts: Mapping[str, int], recorded: Mapping[str, str] | None) -> list[str]:
    """The recorded prefixes of the dataset's stores (as the receipt names them)."""
    return [(recorded or {}).get(prefix, prefix) for prefix in counts]


def _moved(name: str, counts: Mapping[str, int], recorded: Mapping[str, str] | None) -> str:
    """The dataset's prefix of a store named by its dataset prefix or its recorded one."""
    if name in counts:
        return name
    return next(prefix for prefix in counts if (recorded or {}).get(prefix, prefix) == name)


def _identity_key(identity: Any, prefix: str | None) -> str:
    """A store's identity as a comparable string (its prefix when it has no identity)."""
    if identity is None:
        return f"prefix:{prefix}"
    return json.dumps(identity, sort_keys=True, separators=(",", ":"))


def adopt(removed: Iterable[Mapping[str, Any]], dataset: Any, tree: Mapping[str, Any], where: str) -> list[str]:
    """The dataset prefix of each removal a state records: its store found by content identity (a moved store
    still matches), else by prefix; ConfigError for a store the dataset does not read or whose content differs."""
    counts = store_documents(dataset)
    identities = store_identities(tree)
    out = []
    for k, record in enumerate(removed):
        prefix, identity = str(record["store"]), record.get("identity")
        if identity is not None:
            same = [p for p, content in identities.items() if content == identity and p in counts]
            found = prefix if prefix in same else (same[0] if same else None)
        else:
            found = prefix if prefix in counts and identities.get(prefix) is None else None
        if found is None:
            what = "has other content here" if prefix in counts else "is not read by this dataset"
            raise ConfigError(
                f"{where}['removed_documents'][{k}]: store {prefix!r} {what}: the removal cannot be applied; resume "
                "over the data the state was taken on (a moved store is found by its content)"
            )
        if max(record["documents"]) >= counts[found]:
            raise ConfigError(
                f"{where}['removed_documents'][{k}]: document {max(record['documents'])} is not in store {found!r} "
                f"({counts[found]} documents)"
            )
        out.append(found)
    return out


def removal_step(consumed: int, global_batch: int) -> int:
    """The step of the next batch handed over at ``consumed`` samples consumed (as trace and where count)."""
    return -(-int(consumed) // int(global_batch))


def certified_data(tree: Mapping[str, Any], removed: Iterable[Mapping[str, Any]]) -> bytes:
    """The certificate's data digest: the receipt's tree, and after a removal also the removals (each by its store's
    identity, ids, position and step; not its prefix, so a moved store certifies the same)."""
    base = data_digest(tree)
    listed = [
        [_identity_key(r.get("identity"), str(r["store"])), list(r["documents"]), r["consumed_samples"], r["step"]]
        for r in removed
    ]
    if not listed:
        return base
    text = json.dumps(listed, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(base + text.encode(), digest_size=len(base)).digest()


def removed_from(records: Iterable[Mapping[str, Any]], stores: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """(prefix of one of ``stores`` (prefix -> IndexedDataset, as a rebuilt dataset opened them), document) -> the
    first step it is removed from, for the removals a state's receipt records (for trace and where)."""
    identities: dict[str, Any] = {}
    for prefix, store in stores.items():
        try:
            identities[prefix] = plain(store_identity(store))
        except TokenportError:  # a store without an identity is matched by its prefix
            identities[prefix] = None
    out: dict[tuple[str, int], int] = {}
    for record in records:
        identity, name = record.get("identity"), str(record["store"])
        prefixes = [p for p, i in identities.items() if (i == identity if identity is not None else p == name)]
        for prefix in prefixes:
            for document in record["documents"]:
                out.setdefault((prefix, int(document)), int(record["step"]))
    return out


# -- masking at handover -------------------------------------------------------------------------


_BLOCK = 64  # global batches computed at once for the handovers to come


class Masker:
    """The removals a loader applies: per removal, the samples it touches (sample -> positions), and this rank's
    micro-batch ids at any position, to mask each batch handed over."""

    def __init__(
        self,
        dataset: Any,
        sampler_state: Mapping[str, Any],
        rank: int,
        removals: list[tuple[str, Any]],
        ignore: int | None = None,
    ) -> None:
        self.ignore = ignore  # None: the dataset's fields; an int: a causal-LM collate's batch (ignore_index)
        self.dataset = dataset
        self.removals = removals  # (dataset prefix, record) in the order made
        self.layouts = layouts(dataset, {prefix for prefix, _ in removals})
        self.mbs = int(sampler_state["micro_batch_size"])
        self.rank = int(rank)
        self.batches = GlobalBatches(sampler_state, dataset)
        self._block: tuple[int, np.ndarray | None] = (0, None)  # (position, the global batches from there)
        self._key: Any = None
        self._masks: list[tuple[int, dict[int, tuple[Layout, np.ndarray]]]] = []  # computed at the first handover

    def _refresh(self) -> None:
        """(Re)compute the affected samples: once, or after an AdaptiveBlend's weights changed."""
        key = self.dataset.updates if isinstance(self.dataset, AdaptiveBlend) else None
        if self._masks and key == self._key:
            return
        masks = []
        for prefix, record in self.removals:
            layout, touched = self.layouts[prefix], {}
            for sample, positions in affected(self.dataset, prefix, record["documents"]).items():
                touched[sample] = (layout, positions)
            masks.append((int(record["consumed_samples"]), touched))
        self._key, self._masks = key, masks

    def ids(self, consumed: int) -> np.ndarray:
        """This rank's micro-batch ids handed over at ``consumed`` samples consumed (global batches computed
        ``_BLOCK`` steps at a time: handovers are consecutive)."""
        start, rows = self._block
        gbs = self.batches.global_batch
        step, within = divmod(consumed - start, gbs)
        if rows is None or within or not 0 <= step < len(rows):
            start, rows = consumed, self.batches.rows(consumed, _BLOCK)
            self._block, step = (start, rows), 0
        if rows is not None and len(rows):
            return np.asarray(rows[step][self.rank * self.mbs : (self.rank + 1) * self.mbs], dtype=np.int64)
        sampler = self.batches.samplers[self.rank]
        sampler.consumed_samples = consumed
        batch = next(iter(sampler), None)
        return np.zeros(0, np.int64) if batch is None else np.asarray(batch, dtype=np.int64)

    def apply(self, batch: Any, consumed: int) -> Any:
        """``batch`` (handed over at ``consumed``) with the removed tokens of its samples hidden: the fields touched
        are copies, so the dataset's arrays are never written."""
        self._refresh()
        rows: dict[int, tuple[Layout, list[np.ndarray]]] = {}
        for row, sample in enumerate(self.ids(consumed).tolist()):
            for since, touched in self._masks:
                hit = touched.get(sample) if since <= consumed else None
                if hit is not None:
                    rows.setdefault(row, (hit[0], []))[1].append(hit[1])
        if not rows or not isinstance(batch, Mapping):
            return batch
        out = dict(batch)
        copied: set[str] = set()
        for row, (layout, parts) in rows.items():
            positions = np.unique(np.concatenate(parts))
            first = layout.fields[0] if self.ignore is None else "input_ids"
            width = int(out[first].shape[-1]) if first in out else 0
            writes = (
                layout.writes(positions, width)
                if self.ignore is None
                else layout.collated_writes(positions, width, self.ignore)
            )
            for name, (columns, value) in writes.items():
                if name not in out or not len(columns):
                    continue
                if name not in copied:
                    out[name], copied = _copy(out[name]), copied | {name}
                _write(out[name], row, columns, value)
        return out


def affected(dataset: Any, prefix: str, documents: Iterable[int]) -> dict[int, np.ndarray]:
    """sample -> the positions (sorted) its pieces of ``documents`` of store ``prefix`` hold."""
    samples, positions = [], []
    for document in documents:
        occ = dataset.occurrences(prefix, int(document))
        lengths = (occ.end - occ.start).astype(np.int64)
        first = np.repeat(occ.offset, lengths)
        within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        samples.append(np.repeat(occ.sample, lengths))
        positions.append(first + within)
    if not samples:
        return {}
    sample, position = np.concatenate(samples), np.concatenate(positions)
    order = np.lexsort((position, sample))
    sample, position = sample[order], position[order]
    cuts = np.flatnonzero(np.diff(sample)) + 1
    firsts = sample[np.concatenate(([0], cuts))].tolist() if len(sample) else []
    return dict(zip(firsts, np.split(position, cuts)))  # pieces never overlap: positions distinct and sorted


def _copy(value: Any) -> Any:
    """A copy of a field (a torch tensor or a numpy array) that masking may write."""
    clone = getattr(value, "clone", None)
    return clone() if callable(clone) else np.array(value, copy=True)


def _write(value: Any, row: int, columns: np.ndarray, fill: int) -> None:
    """``value[row, columns] = fill`` for a torch tensor or a numpy array."""
    if hasattr(value, "clone"):
        import torch

        value[row, torch.as_tensor(columns, dtype=torch.long)] = fill
    else:
        value[row, columns] = fill

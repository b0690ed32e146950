"""Where a document was trained: every step, rank, slot and token range that held it, the inverse of trace.

From a loader state (or a checkpoint holding one) the dataset is rebuilt from the receipt, as
``trace`` does. The dataset maps a document of one of its stores to the samples holding it
(``dataset.occurrences(store, document)``: arrays ``sample``, ``piece``, ``offset``, ``start``,
``end``); the sampler's inverse order (``sampling.inverse.stream_positions``) maps those samples to
the stream positions that read them, so no step is walked. A sampler registered from outside
tokenport has no inverse: its steps are replayed one by one (O(steps x ranks) sampler calls), and
the report says so.

The planned run is one pass of the sampler over the dataset (a dataset is sized to the run's
samples), or the steps the state had already taken when that is more; each place says whether the
state had trained it yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .._checks import check_int
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..samples.base import Rebuilder, SampleDataset
from ..sampling.inverse import epoch_length, invertible, stream_positions
from ..sampling.state import Certificate, read_loader_state
from .samplers import sampler_from_state
from .tracing import _collect_stores, resolve_state, segment_start

if TYPE_CHECKING:
    from .where_identifiers import IdentifiedReport

__all__ = ["Place", "WhereReport", "occurrences", "where_file", "where_identifiers_file"]

_SCAN_CHUNK = 4096  # documents decoded at a time by a text search


@dataclass(frozen=True)
class Place:
    """One place a document was trained: ``step``, ``data_parallel_rank`` and ``slot`` in its micro-batch,
    global ``sample`` id, token ``offset`` in the sample, the document's tokens ``[start, end)`` there,
    and whether the state had ``trained`` that step yet."""

    document: int
    step: int
    data_parallel_rank: int
    slot: int
    sample: int
    offset: int
    start: int
    end: int
    trained: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: the fields above."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class WhereReport:
    """Every place the documents asked about were trained, in step order (for ``tokenport where``)."""

    source: str
    store: str
    documents: tuple[int, ...]
    steps_trained: int
    steps_covered: int
    replayed: bool
    places: tuple[Place, ...]
    removed: tuple[tuple[int, int], ...] = ()  # (document, the step it is removed from the run at)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types: one object."""
        return {
            "source": self.source,
            "store": self.store,
            "documents": list(self.documents),
            "steps_trained": self.steps_trained,
            "steps_covered": self.steps_covered,
            "replayed": self.replayed,
            "places": [place.to_dict() for place in self.places],
            "removed": [{"document": d, "step": k} for d, k in self.removed],
        }

    def render(self) -> str:
        """The report as text: a header, then one line per place."""
        how = "by replaying the sampler's steps" if self.replayed else "by inverting the sampler's order"
        asked = ", ".join(map(str, self.documents)) or "none (the text is in no document)"
        lines = [
            f"store {self.store} document(s) {asked} in steps [0, {self.steps_covered}) of {self.source} "
            f"({self.steps_trained} step(s) trained; found {how}): {len(self.places)} place(s)"
        ]
        lines.extend(f"document {d} was removed from the run from step {k} on" for d, k in self.removed)
        gone = dict(self.removed)
        for p in self.places:
            removed = p.step >= gone.get(p.document, p.step + 1)
            late = "" if p.trained else " (removed: not trained)" if removed else " (not trained yet)"
            lines.append(
                f"step {p.step} rank {p.data_parallel_rank} slot {p.slot}: sample {p.sample} tokens [{p.offset}, "
                f"{p.offset + p.end - p.start}) hold document {p.document} tokens [{p.start}, {p.end}){late}"
            )
        return "\n".join(lines)


@overload
def occurrences(
    state_or_checkpoint: Mapping[str, Any] | str | os.PathLike[str],
    *,
    store: str | os.PathLike[str],
    document: int | Sequence[int] | np.ndarray | None = None,
    text: str | None = None,
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
    dataset: Any = None,
    identifier: None = None,
) -> WhereReport: ...


@overload
def occurrences(
    state_or_checkpoint: Mapping[str, Any] | str | os.PathLike[str],
    *,
    store: str | os.PathLike[str],
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
    dataset: Any = None,
    identifier: str | Sequence[str],
) -> IdentifiedReport: ...


def occurrences(
    state_or_checkpoint: Mapping[str, Any] | str | os.PathLike[str],
    *,
    store: str | os.PathLike[str],
    document: int | Sequence[int] | np.ndarray | None = None,
    text: str | None = None,
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
    dataset: Any = None,
    identifier: str | Sequence[str] | None = None,
) -> WhereReport | IdentifiedReport:
    """Every place ``store``'s ``document`` (an id or several), or each document containing ``text``, was
    trained in the run of a loader state (or the path of a JSON state or torch checkpoint): up to step
    ``up_to_step`` (inclusive) or over the whole planned run.

    ``text`` scans the store: every document decoded with the store's tokenizer, in chunks, O(the store's
    tokens). ``stores`` maps recorded prefixes to where the stores are now; ``dataset``: the loader's own,
    checked against the receipt. ConfigError for an unknown store, both or neither of document and text,
    a document the store lacks, or a step past the planned run. ``identifier`` (one or several; ``store``
    then names a prepare output directory): the input documents prepare recorded with it, an IdentifiedReport
    (``where_identifiers.IdentifiedReport``: each input document's story, and one WhereReport per part store).
    """
    if identifier is not None:
        return _identified(state_or_checkpoint, store, identifier, document, text, up_to_step, stores, dataset)
    return _occurrences(state_or_checkpoint, store, document, text, up_to_step, dataset, Rebuilder(stores or {}))


def _identified(
    state: Any, output: Any, identifier: Any, document: Any, text: Any, up_to_step: Any, stores: Any, dataset: Any
) -> IdentifiedReport:
    """``occurrences`` by identifier (``where_identifiers.identifier_report``), refusing document= or text= too:
    each input document recorded with it resolved through the prepare output's provenance to its part store."""
    from .where_identifiers import identifier_report

    if document is not None or text is not None:
        raise ConfigError(
            "document/text/identifier: name the documents by exactly one: document=, text= or identifier="
        )
    return identifier_report(state, output, identifier, up_to_step, dataset, Rebuilder(stores or {}), _occurrences)


def where_identifiers_file(
    path: str | os.PathLike[str],
    *,
    output: str,
    identifier: Sequence[str],
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
) -> IdentifiedReport:
    """``occurrences(identifier=)`` of the state in ``path`` for ``tokenport where --id``: a moved store's
    message names the command's own ``--store-path OLD=NEW`` flag."""
    from .where_identifiers import identifier_report

    rebuilder = _command_rebuilder(path, output, " ".join(f"--id {name}" for name in identifier), stores)
    return identifier_report(path, output, identifier, up_to_step, None, rebuilder, _occurrences)


def where_file(
    path: str | os.PathLike[str],
    *,
    store: str,
    document: Sequence[int] | None = None,
    text: str | None = None,
    up_to_step: int | None = None,
    stores: Mapping[str, str] | None = None,
) -> WhereReport:
    """``occurrences`` of the state in ``path`` for ``tokenport where``: a moved store's message names the
    command's own ``--store-path OLD=NEW`` flag."""
    asked = f"--text {text!r}" if document is None else " ".join(f"--document {d}" for d in document)
    rebuilder = _command_rebuilder(path, store, asked, stores)
    return _occurrences(path, store, document, text, up_to_step, None, rebuilder)


def _command_rebuilder(
    path: str | os.PathLike[str], store: str, asked: str, stores: Mapping[str, str] | None
) -> Rebuilder:
    """The rebuilder of a ``tokenport where`` command: a moved store's message repeats the command with the
    ``--store-path OLD=NEW`` flag it needs."""
    given = " ".join(f"--store-path {old}={new}" for old, new in (stores or {}).items())
    command = f"tokenport where {os.fspath(path)} --store {store} {asked} {given}".rstrip()

    def store_flag(prefix: str) -> str:
        return f"say where it is now: {command} --store-path {prefix}=NEW_PREFIX (once per moved store)"

    return Rebuilder(stores or {}, how_to_move=store_flag)


def _occurrences(
    state_or_checkpoint: Any,
    store: str | os.PathLike[str],
    document: int | Sequence[int] | np.ndarray | None,
    text: str | None,
    up_to_step: int | None,
    dataset: Any,
    rebuilder: Rebuilder,
) -> WhereReport:
    if (document is None) == (text is None):
        raise ConfigError(
            "document/text: name the document by exactly one: document= (its id in the store) or text= "
            "(a text the document contains)"
        )
    source, state, dataset = resolve_state(state_or_checkpoint, dataset, rebuilder)
    prefix, handle = _find_store(dataset, os.fspath(store), rebuilder.moved)
    asked = _documents(handle, document) if document is not None else _search_text(handle, text or "")
    sampler_state = state["sampler"]
    mbs, size = int(sampler_state["micro_batch_size"]), int(sampler_state["data_parallel_size"])
    gbs = mbs * size
    sampler = sampler_from_state(sampler_state, 0, dataset)
    replayed = not invertible(sampler)  # a sampler registered from outside: its steps are replayed
    certificate = read_loader_state(state, source).certificate
    certified = None if replayed or not isinstance(certificate, Certificate) else certificate
    grid = segment_start(certified, gbs)
    since, first = (0, 0) if grid is None else grid  # step `since` began at position `first`, on this grid on
    taken = -(-int(sampler_state["consumed_samples"]) // gbs)
    if grid is not None and certified is not None:
        taken = certified.steps
    one_pass = int(sampler_state["total_samples"]) if replayed else epoch_length(sampler)
    planned = max(since + -(-max(0, one_pass - first) // gbs), taken)
    if up_to_step is not None and check_int("up_to_step", up_to_step, 0) >= planned:
        raise ConfigError(
            f"up_to_step={up_to_step}: the planned run has {planned} step(s) (steps 0 to {planned - 1}; "
            f"{taken} trained); pass a step below {planned}, or leave it out for the whole planned run"
        )
    covered = planned if up_to_step is None else int(up_to_step) + 1
    if covered <= since:
        raise ConfigError(
            f"up_to_step={up_to_step}: this state's steps from {since} on follow a resume on another global batch "
            f"(at consumed_samples={first}); ask `where` of a state saved before step {since} for earlier steps"
        )
    rows = [_rows(dataset, prefix, d) for d in asked]
    samples = np.unique(np.concatenate([r[1] for r in rows])) if rows else np.empty(0, np.int64)
    if replayed:
        which, positions = _replay(sampler_state, dataset, samples, covered, size, mbs)
    else:
        which, positions = stream_positions(sampler, samples, first + (covered - since) * gbs)
        if grid is not None:
            _refuse_before(positions, since, first, asked)
    positions = positions - first + since * gbs  # on this global batch's grid from step `since`
    places = _places(rows, samples[which], positions, gbs, mbs, taken)
    removed = _removed_steps(state, dataset, prefix, asked)
    places = _untrained_after_removal(places, removed)
    return WhereReport(source, prefix, tuple(asked), taken, covered, replayed, places, tuple(sorted(removed.items())))


def _refuse_before(positions: np.ndarray, since: int, first: int, asked: Sequence[int]) -> None:
    """ConfigError when a document was read before a resume on another global batch began the state's segment."""
    if len(positions) and int(positions.min()) < first:
        raise ConfigError(
            f"documents {list(asked)}: read at stream position {int(positions.min())}, before step {since} "
            f"(consumed_samples={first}), where the run resumed on another global batch, so this state does not "
            f"know that step's layout; ask `where` of a state saved before step {since} for those steps"
        )


def _find_store(dataset: Any, name: str, moves: Mapping[str, str]) -> tuple[str, IndexedDataset]:
    """(recorded prefix, store) of the store named by its recorded prefix or where it is now."""
    found: dict[str, IndexedDataset] = {}
    _collect_stores(dataset, found)
    names = {p: {p, moves.get(p), *(old for old, new in moves.items() if new == p)} for p in found}
    exact = [prefix for prefix, spelled in names.items() if name in spelled]
    # prepare's output folder names its single part store (out/part-00000) too
    under = [p for p, spelled in names.items() if any(s and s.startswith(name.rstrip("/") + "/") for s in spelled)]
    chosen = exact or under
    if len(chosen) == 1:
        return chosen[0], found[chosen[0]]
    known = ", ".join(sorted(chosen or found)) or "none"
    what = "names several of the run's stores" if chosen else "the run read no such store"
    raise ConfigError(
        f"store={name!r}: {what}; its stores are: {known} (pass one of them, as the receipt records it or where "
        "it is now)"
    )


def _documents(store: IndexedDataset, document: int | Sequence[int] | np.ndarray) -> list[int]:
    """The distinct document ids asked, each checked against the store."""
    several = isinstance(document, (Sequence, np.ndarray)) and not isinstance(document, str)
    ids: list[Any] = list(np.asarray(document).reshape(-1).tolist()) if several else [document]
    out = []
    for d in ids:
        check_int("document", d, 0)
        if int(d) >= len(store):
            raise ConfigError(
                f"document={d}: the store {store.prefix} holds {len(store)} documents (ids 0 to {len(store) - 1}); "
                "pass an id of that store"
            )
        out.append(int(d))
    return sorted(set(out))


def _search_text(store: IndexedDataset, text: str) -> list[int]:
    """The documents of ``store`` whose decoded text contains ``text``: a chunked scan of the whole store."""
    from ..tokenizers import tokenizer_from_identity

    if not isinstance(text, str) or not text:
        raise ConfigError("text: pass a non-empty string to search the store's documents for")
    manifest = store.manifest
    identity = manifest.tokenizer if manifest is not None else None
    tokenizer = tokenizer_from_identity(identity) if isinstance(identity, dict) else None
    if tokenizer is None:
        raise ConfigError(
            f"text={text!r}: the tokenizer of store {store.prefix} is not available here, so its documents "
            "cannot be read as text; name the document by id (document=)"
        )
    found: list[int] = []
    for first in range(0, len(store), _SCAN_CHUNK):  # one read per chunk of documents, then decoded one by one
        chunk = store[first : first + _SCAN_CHUNK]
        assert isinstance(chunk, list)  # a slice reads a list of documents
        found.extend(first + k for k, tokens in enumerate(chunk) if text in tokenizer.decode(tokens))
    return found


def _rows(dataset: Any, prefix: str, document: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(document, sample, offset, start, end) arrays of every piece of ``document`` in the dataset's samples."""
    if not isinstance(dataset, SampleDataset):
        raise ConfigError(f"dataset: a {type(dataset).__name__} has no occurrences(); where a document went is unknown")
    inverse: Any = dataset  # every dataset's inverse lineage: occurrences (samples/lineage.py)
    occ = inverse.occurrences(prefix, document)
    arrays = [np.asarray(getattr(occ, name), dtype=np.int64) for name in ("sample", "offset", "start", "end")]
    return document, arrays[0], arrays[1], arrays[2], arrays[3]


def _replay(
    state: Mapping[str, Any], dataset: Any, samples: np.ndarray, steps: int, size: int, mbs: int
) -> tuple[np.ndarray, np.ndarray]:
    """(k, position) of ``samples[k]`` in the first ``steps`` steps, every rank's sampler stepped forward."""
    ks, ps = [], []
    samplers = [sampler_from_state(state, rank, dataset) for rank in range(size)]
    for step in range(steps):
        for rank, sampler in enumerate(samplers):
            sampler.consumed_samples = step * mbs * size
            batch = np.asarray(next(iter(sampler), []), dtype=np.int64)
            k = np.searchsorted(samples, batch)
            hit = (k < len(samples)) & (samples[np.minimum(k, len(samples) - 1)] == batch) if len(samples) else k < 0
            ks.append(k[hit])
            ps.append(step * mbs * size + rank * mbs + np.flatnonzero(hit))
    if not ks:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(ks).astype(np.int64), np.concatenate(ps).astype(np.int64)


def _places(
    rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    hit_samples: np.ndarray,
    positions: np.ndarray,
    gbs: int,
    mbs: int,
    taken: int,
) -> tuple[Place, ...]:
    """Each (document piece, stream position reading its sample) as a Place, in step order: one vectorized join."""
    if not rows:
        return ()
    document = np.concatenate([np.full(len(r[1]), r[0], dtype=np.int64) for r in rows])
    sample, offset, start, end = (np.concatenate([r[k] for r in rows]) for k in (1, 2, 3, 4))
    order = np.argsort(hit_samples, kind="stable")
    sorted_samples, sorted_positions = hit_samples[order], positions[order]
    lo = np.searchsorted(sorted_samples, sample, side="left")
    counts = np.searchsorted(sorted_samples, sample, side="right") - lo
    piece = np.repeat(np.arange(len(sample)), counts)  # each piece once per position reading its sample
    within = np.arange(len(piece)) - np.repeat(np.cumsum(counts) - counts, counts)
    position = sorted_positions[lo[piece] + within]
    step, slot = np.divmod(position, gbs)
    rank, place = np.divmod(slot, mbs)
    columns = (document[piece], step, rank, place, sample[piece], offset[piece], start[piece], end[piece])
    keys = np.lexsort((columns[0], columns[5], place, rank, step))  # step, rank, slot, offset, document
    lists = [column[keys].tolist() for column in columns]
    return tuple(Place(d, st, r, sl, sa, o, a, e, st < taken) for d, st, r, sl, sa, o, a, e in zip(*lists, strict=True))


def _removed_steps(state: Mapping[str, Any], dataset: Any, prefix: str, asked: Sequence[int]) -> dict[int, int]:
    """document -> the step it is removed from the run at, for the asked documents the state's receipt removes."""
    from .tracing import _removed

    removed = _removed(state, dataset)
    return {d: removed[(prefix, d)] for d in asked if (prefix, d) in removed}


def _untrained_after_removal(places: tuple[Place, ...], removed: Mapping[int, int]) -> tuple[Place, ...]:
    """``places`` with those at or after their document's removal not trained (its tokens were masked)."""
    if not removed:
        return places
    return tuple(
        replace(p, trained=False) if p.document in removed and p.step >= removed[p.document] else p for p in places
    )

"""Audit a run's checkpoints: did each state's stream follow its receipt, and does each extend the one before?

``audit(states)`` takes loader states (dicts, JSON files or torch checkpoints, in step order). For
each it rebuilds the dataset from the receipt (``--store-path OLD=NEW`` for moved stores), recomputes
every global batch its certificate covers (``integrations.certificate``) and compares the chain
with the certificate's digest; a position that jumped within the run (``runs``) is a skipped or
repeated step. Across the series, each state must certify at least the steps of the one before and
read the same batches (position, sample ids) on the same data (the receipts' data digests) over
the steps both certify. The report gives the first divergence (the lowest step; the comparison of
two states before a state's own check) or says the series is consistent.

Cost: each state's chain is recomputed from its positions (one blake2b call per 64 steps, tens of ns
a step; a /1 state's ids are recomputed, hashed on from the state before it when it carries that one
on) with memory for one block of positions; batches (sample ids) are recomputed and compared only
where a chain does not carry on the one before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..samples.base import Rebuilder
from ..sampling.state import Certificate, read_loader_state, read_sampler_state
from .certificate import Chain, GlobalBatches, data_digest, genesis, order_digest
from .rebuild import check_same_data, rebuild_unverified
from .receipt import DataReceipt, receipt_changes
from .removal import certified_data
from .tracing import is_state, load_state

__all__ = ["AuditReport", "Divergence", "audit"]


@dataclass(frozen=True)
class Divergence:
    """The first place the series departs from its receipts or from itself: the state, the step, what differs."""

    source: str
    step: int
    what: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {"source": self.source, "step": self.step, "what": self.what}


@dataclass(frozen=True)
class AuditReport:
    """What ``tokenport audit`` prints: each state and the steps it certifies, and the first divergence."""

    sources: tuple[str, ...]
    steps: tuple[int, ...]
    divergence: Divergence | None

    @property
    def consistent(self) -> bool:
        """True when no divergence was found."""
        return self.divergence is None

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types."""
        return {
            "consistent": self.consistent,
            "states": [{"source": s, "steps": n} for s, n in zip(self.sources, self.steps)],
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
        }

    def render(self) -> str:
        """The report as text: one line per state, then the verdict."""
        lines = [f"{source}: {steps} step(s) certified" for source, steps in zip(self.sources, self.steps)]
        if self.divergence is None:
            lines.append(f"consistent: {len(self.sources)} state(s) follow their receipts and extend each other")
        else:
            d = self.divergence
            lines.append(f"first divergence at step {d.step} in {d.source}: {d.what}")
        return "\n".join(lines)


@dataclass
class _Audited:
    """One state of the series, read and typed."""

    source: str
    state: Mapping[str, Any]
    receipt: DataReceipt
    chain: Chain
    batches: GlobalBatches | None = None  # its global batches over the dataset rebuilt here
    verified: bool = False  # its digests are its chain recomputed, over the positions of the state before it

    @property
    def steps(self) -> int:
        return self.chain.steps


def audit(
    states: Sequence[Mapping[str, Any] | str | os.PathLike[str]], *, stores: Mapping[str, str] | None = None
) -> AuditReport:
    """Audit loader states of one run, in step order (see the module docstring). ConfigError for a state
    without a receipt or a certificate, or a store that cannot be found (``stores``: recorded prefix -> now)."""
    if isinstance(states, (str, bytes, os.PathLike, Mapping)) or not states:
        raise ConfigError("states: pass a list of loader states or checkpoint paths, in step order (at least one)")
    audited = [_read(state, k) for k, state in enumerate(states)]
    found: list[tuple[int, int, int, Divergence]] = []  # (step, phase, index, divergence)
    found.extend(_removal_divergences(audited))  # first: at the same step, the removal says what differs
    for k in range(1, len(audited)):
        divergence = _compare_data(audited[k - 1], audited[k])
        if divergence is not None:
            found.append((divergence.step, 0, k, divergence))
    rebuilder = Rebuilder(stores or {})
    for k, item in enumerate(audited):
        before = audited[k - 1] if k else None
        divergence = _recompute(item, before, rebuilder, cannot_build=bool(found))
        if divergence is not None:
            found.append((divergence.step, 1, k, divergence))
        if before is not None and before.batches is not None and item.batches is not None and not item.verified:
            divergence = _compare_batches(before, item)
            if divergence is not None:
                found.append((divergence.step, 0, k, divergence))
    first = min(found, key=lambda entry: entry[:3])[3] if found else None
    return AuditReport(tuple(a.source for a in audited), tuple(a.steps for a in audited), first)


def _read(state: Any, index: int) -> _Audited:
    """One state of the series, typed; ConfigError when it has no receipt or no certificate."""
    if isinstance(state, (str, os.PathLike)):
        state, source = load_state(state)
    elif is_state(state):
        source = f"state {index}"
    else:
        raise ConfigError(f"states[{index}]: expected a dict StatefulLoader.state_dict() returned, or a file's path")
    typed = read_loader_state(state, source)
    if "receipt" not in state or not isinstance(typed.certificate, Certificate):
        raise ConfigError(
            f"{source}: the state has no {'receipt' if 'receipt' not in state else 'certificate'} (saved by an "
            "older tokenport, or stripped), so what its steps read cannot be certified; audit states saved by "
            "StatefulLoader.state_dict() of this version"
        )
    sampler = read_sampler_state(state["sampler"], f"{source}: state['sampler']")
    gbs = sampler.micro_batch_size * sampler.data_parallel_size
    receipt = DataReceipt.from_dict(state["receipt"], f"{source}: state['receipt']")
    return _Audited(source, state, receipt, Chain.from_document(typed.certificate, gbs))


def _compare_data(before: _Audited, after: _Audited) -> Divergence | None:
    """A divergence when ``after`` certifies fewer steps than ``before``, or other data over steps both certify."""
    if after.steps < before.steps:
        return Divergence(
            after.source,
            after.steps,
            f"certifies {after.steps} step(s) but {before.source}, earlier in the series, certifies {before.steps}: "
            f"steps {after.steps}..{before.steps - 1} were repeated (a resume from an older state) or the states "
            "are out of order",
        )
    if after.chain.since == before.steps and after.chain.base != before.chain.digest:
        started = after.chain.base == genesis()
        return Divergence(
            after.source,
            after.chain.since,
            f"its chain starts at step {after.chain.since} "
            + ("afresh (resumed from a state without a certificate)" if started else "from another digest")
            + f" than the one {before.source} certifies there: the run was not resumed from that state's stream",
        )
    mixed = _compare_updates(before, after)
    if mixed is not None:
        return mixed
    overlap = max(before.chain.since, after.chain.since)
    if overlap < before.steps and data_digest(before.receipt.dataset) != data_digest(after.receipt.dataset):
        changes = "; ".join(receipt_changes(before.receipt, after.receipt))
        return Divergence(
            after.source,
            overlap,
            f"trained on other data than {before.source} over steps both certify: {changes or 'the data differs'}",
        )
    return None


def _compare_updates(before: _Audited, after: _Audited) -> Divergence | None:
    """A divergence when an AdaptiveBlend's weight updates for samples ``before`` had consumed differ in ``after``
    (the sample ids are the blend's positions: the updates decide which child sample each one is)."""
    consumed = int(before.state["sampler"]["consumed_samples"])
    old, new = (_updates(item.state, consumed) for item in (before, after))
    if old == new:
        return None
    differ = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    sample = min(update[0] for update in old[differ : differ + 1] + new[differ : differ + 1])
    step = next((h for h in range(before.steps) if before.chain.position(h) + before.chain.global_batch > sample), 0)
    return Divergence(
        after.source,
        step,
        f"its adaptive blend's weight updates before sample {consumed} differ from {before.source}'s from sample "
        f"{sample} on: the steps from there read other documents",
    )


def _updates(state: Mapping[str, Any], before: int) -> list[tuple[int, list[float]]]:
    """A state's AdaptiveBlend updates that apply to samples before ``before`` ([] without a mixture)."""
    mixture = state.get("mixture")
    if not isinstance(mixture, Mapping):
        return []
    return [(int(start), [float(w) for w in weights]) for start, weights in mixture["updates"] if start < before]


def _recompute(item: _Audited, before: _Audited | None, rebuilder: Rebuilder, cannot_build: bool) -> Divergence | None:
    """Rebuild ``item``'s dataset and recompute its chain; a divergence for data that is not the receipt's, a
    jumped position (skipped or repeated steps) or a digest that the recomputed batches do not give.
    ``item.verified`` when its digests are its chain recomputed and it carries on ``before``'s verified chain
    (then no sample id is recomputed to compare them; a /1 chain, over ids, is hashed on from ``before``'s
    digest: a hash chain that reaches the same digest read the same batches)."""
    chain, source = item.chain, item.source
    try:
        dataset = rebuild_unverified(item.receipt, rebuilder)
    except ConfigError:
        if cannot_build:  # another divergence comes first; a state on other data need not build here
            return None
        raise
    try:
        check_same_data(item.receipt, dataset)
    except ConfigError as exc:
        return Divergence(source, chain.since, f"its receipt's data is not the data here: {exc}")
    if chain.data != certified_data(item.receipt.dataset, item.receipt.removed):
        edited = "its certificate's data digest is not its receipt's: the state was edited"
        return Divergence(source, chain.since, edited)
    if chain.order and chain.order != order_digest(item.state["sampler"]):
        edited = "its certificate's order digest is not its sampler state's: the state was edited"
        return Divergence(source, chain.since, edited)
    item.batches = GlobalBatches(item.state["sampler"], dataset)
    jump = _first_jump(chain, source)
    claimed, batches = (chain.previous, chain.digest), item.batches
    if not chain.order and before is not None and _continues(before, item) and before.steps < chain.steps:
        if chain.hash_on(before.steps, before.chain.digest, lambda: batches) == claimed:  # /1: ids from there on
            item.verified = True
            return jump or _moved(item)
    if chain.recompute(lambda: batches) != claimed:
        step = chain.steps - 1 if chain.steps > chain.since else chain.since
        return Divergence(
            source,
            step,
            f"the certificate's digests (`digest`, `previous`) after {chain.steps} step(s) are not the chain "
            "recomputed from the receipt and the sampler: the state was edited, or its run read other batches at or "
            "before this step",
        )
    if chain.batch_differs(lambda: batches):
        return Divergence(
            source,
            chain.steps - 1,
            "this step's global batch, recomputed by the sampler here, holds other sample ids than the run handed "
            "over (the certificate's `batch`): the sampler here orders samples otherwise (another tokenport or numpy "
            "version?), or `batch` was edited",
        )
    item.verified = before is None or _continues(before, item)
    return jump or _moved(item)


def _moved(item: _Audited) -> Divergence | None:
    """A divergence when the state's position is not where its certified steps end: resuming from it would skip
    or repeat its next step (the position was moved outside the loader after the last handover)."""
    chain, consumed = item.chain, int(item.state["sampler"]["consumed_samples"])
    end = chain.end()
    if consumed == end:
        return None
    kind = "skipped" if consumed > end else "repeated"
    return Divergence(
        item.source,
        chain.steps,
        f"its position consumed_samples={consumed} is not where its {chain.steps} certified step(s) end "
        f"({end}): the next step, read from there, would be {kind} (the sampler's position was moved outside "
        "the loader)",
    )


def _first_jump(chain: Chain, source: str) -> Divergence | None:
    """The first run whose position does not continue the one before: skipped or repeated steps."""
    for (start, consumed), (next_start, next_consumed) in zip(chain.runs, chain.runs[1:]):
        expected = consumed + (next_start - start) * chain.global_batch
        if next_consumed != expected:
            kind = "skipped" if next_consumed > expected else "repeated"
            first, last = sorted((expected, next_consumed))
            return Divergence(
                source,
                next_start,
                f"the batch handed over at step {next_start} was read at consumed_samples={next_consumed}, not "
                f"{expected}: {last - first} sample(s) ({(last - first) / chain.global_batch:g} step(s)) {kind} "
                "(the sampler's position was moved outside the loader)",
            )
    return None


def _continues(before: _Audited, after: _Audited) -> bool:
    """True when ``after``'s segment is ``before``'s, verified, carried on: same start, data, global batch and
    positions over ``before``'s steps."""
    a, b = before.chain, after.chain
    same = (a.since, a.base, a.data, a.order, a.global_batch) == (b.since, b.base, b.data, b.order, b.global_batch)
    runs = [run for run in b.runs if run[0] < a.steps or run[0] == b.since]
    return before.verified and same and a.steps <= b.steps and runs == a.runs


def _compare_batches(before: _Audited, after: _Audited) -> Divergence | None:
    """A divergence at the first step both certify whose position or sample ids differ (recomputed in blocks)."""
    assert before.batches is not None and after.batches is not None
    lo = max(before.chain.since, after.chain.since)
    hi = min(before.steps, after.steps)
    ours, theirs = before.chain.handed(lo, hi, before.batches), after.chain.handed(lo, hi, after.batches)
    handover = lo
    for (_, a_rows), (_, b_rows) in zip(_rows(ours), _rows(theirs)):
        if not np.array_equal(a_rows, b_rows):
            return _batch_divergence(before, after, handover)
        handover += 1
    return None


def _rows(blocks: Any) -> Any:
    """One (position, ids) row at a time from ``Chain.handed``'s blocks."""
    for first, rows in blocks:
        for row in rows:
            yield first, row


def _batch_divergence(before: _Audited, after: _Audited, handover: int) -> Divergence:
    """The divergence of two states that read other batches at ``handover``."""
    a, b = before.chain.position(handover), after.chain.position(handover)
    return Divergence(
        after.source,
        handover,
        f"reads other batches than {before.source}: "
        + (f"position consumed_samples={b}, not {a}" if a != b else f"other sample ids at consumed_samples={a}")
        + " (another seed or order, skipped or repeated steps)",
    )


# -- removals (integrations.takedown) --------------------------------------------------------------


def _removal_divergences(audited: list[_Audited]) -> list[tuple[int, int, int, Divergence]]:
    """(step, phase, index, divergence) for each state whose removals contradict its chain or the state before."""
    found = []
    for k, item in enumerate(audited):
        divergence = _removals_fit(item) or (_compare_removals(audited[k - 1], item) if k else None)
        if divergence is not None:
            found.append((divergence.step, 0, k, divergence))
    return found


def _removal_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """A removal as compared across states: all but its prefix (a moved store is the same store)."""
    return tuple(sorted((key, repr(value)) for key, value in record.items() if key != "store"))


def _removals_fit(item: _Audited) -> Divergence | None:
    """A divergence when a state's latest removal applies from after its chain's segment began: the segment's data
    digest would cover a removal its earlier steps were trained without."""
    removed = item.receipt.removed
    if not removed:
        return None
    last = removed[-1]
    start = item.chain.runs[0][1]
    if int(last["consumed_samples"]) > start:
        return Divergence(
            item.source,
            int(last["step"]),
            f"its removal of store {last['store']!r} documents {last['documents']} from step {last['step']} "
            f"(consumed_samples={last['consumed_samples']}) is later than its certificate's segment, which begins at "
            f"consumed_samples={start}: the removal's step was edited",
        )
    return None


def _compare_removals(before: _Audited, after: _Audited) -> Divergence | None:
    """A divergence when ``after`` lost a removal ``before`` records, or records one from a step ``before`` had
    already trained without it."""
    kept = {_removal_key(record) for record in after.receipt.removed}
    for record in before.receipt.removed:
        if _removal_key(record) not in kept:
            return Divergence(
                after.source,
                int(record["step"]),
                f"it lost the removal of store {record['store']!r} documents {record['documents']} from step "
                f"{record['step']} that {before.source} records: the run resumed from a state before the removal",
            )
    known = {_removal_key(record) for record in before.receipt.removed}
    trained = int(before.state["sampler"]["consumed_samples"])
    for record in after.receipt.removed:
        if _removal_key(record) not in known and int(record["consumed_samples"]) < trained:
            return Divergence(
                after.source,
                int(record["step"]),
                f"it removes store {record['store']!r} documents {record['documents']} from step {record['step']}, "
                f"but {before.source} had trained on to consumed_samples={trained} without that removal",
            )
    return None

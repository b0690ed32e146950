"""The demo's accountability stage: which steps trained on a docstring; take it down mid-run and resume.

The straight run of the training stage is the run in question. A docstring that the run read after
its step-12 checkpoint is found by tracing those steps; ``tokenport.occurrences`` lists every step,
rank, slot and token range that held it. ``tokenport.takedown`` writes the step-12 checkpoint again
with the docstring removed, the run resumes from it to the end, and the two runs' batches are
compared token by token: the docstring's tokens became padding with no loss, every other token is
where it was.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..integrations import trace
from ..integrations.audit import audit
from ..integrations.takedown import takedown
from ..integrations.where import occurrences
from .progress import Progress

Echo = Callable[[str], None]

CHECKPOINT = 12  # the straight run's checkpoint the takedown resumes from
STEPS = 24  # the straight run's length


@dataclass(frozen=True)
class _Compared:
    """Two runs' batches after the takedown, position by position (tokens, labels and loss mask each)."""

    positions: int  # positions compared
    differing: int  # positions where the runs differ in any field
    outside: int  # of those, positions neither holding a removed token nor predicting one
    removed: int  # input positions the removed document held
    hidden: int  # of those, positions whose token changed and whose loss is 0


def takedown_stage(spec: str, train_dir: str, echo: Progress) -> None:
    """Find a docstring the straight run read after step 12, list its places, remove it from the step-12
    checkpoint, resume to the end and compare the runs token by token."""
    echo("\n== 15. account: the steps a docstring trained, and taking it down mid-run without reshuffling")
    import torch

    from .train import TrainConfig, _training_dataset, launch

    straight = os.path.join(train_dir, "straight")
    final = os.path.join(straight, f"step-{STEPS:06d}.pt")
    middle = os.path.join(straight, f"step-{CHECKPOINT:06d}.pt")
    store, document = _a_docstring(torch.load(final, weights_only=True)["loader"], spec)
    report = occurrences(final, store=store, document=document, up_to_step=STEPS - 1)
    steps = sorted({place.step for place in report.places})
    echo(f"the docstring of {_identifier(store, document)} ({_rel(store, train_dir)} document {document})")
    echo(
        f"tokenport where {_rel(final, train_dir)} --store {_rel(store, train_dir)} --document {document} "
        f"--up-to-step {STEPS - 1}: {len(report.places)} place(s), step(s) {', '.join(map(str, steps))}"
    )
    for place in report.places[:4]:
        echo(
            f"  step {place.step} rank {place.data_parallel_rank} slot {place.slot}: sample {place.sample} tokens "
            f"[{place.offset}, {place.offset + place.end - place.start}) = document tokens [{place.start}, {place.end})"
        )
    echo.doing("removing the docstring from the step-12 checkpoint and resuming")
    config = TrainConfig(steps=STEPS, checkpoint_every=CHECKPOINT)
    run = os.path.join(train_dir, "takedown")
    checkpoint = _resume_without(spec, middle, run, store, document, config)
    resumed = launch(spec, run, config, ranks=1, resume=True)
    later = [place for place in report.places if place.step >= CHECKPOINT]
    echo(
        f"tokenport takedown {_rel(middle, train_dir)} --store {_rel(store, train_dir)} --document {document} "
        f"-o {_rel(run, train_dir)}/step-{CHECKPOINT:06d}.pt, then resumed to step {STEPS}: "
        f"{len(later)} of its {len(report.places)} place(s) come after the takedown"
    )

    dataset = _training_dataset(spec, config, 0)
    compared = _compare(dataset, config, checkpoint, torch.load(middle, weights_only=True)["loader"], later)
    hidden = "all" if compared.hidden == compared.removed else f"ONLY {compared.hidden} of"
    echo(
        f"steps {CHECKPOINT}..{STEPS - 1} of both runs, position by position: {compared.differing} of "
        f"{compared.positions:,} differ, {compared.outside} outside the docstring's tokens and the labels "
        f"predicting them; {hidden} its {compared.removed} tokens are padding with no loss"
    )
    before = _log(straight).steps
    same_ids = all(a["sample_ids"] == b["sample_ids"] for a, b in zip(resumed.steps, before, strict=True))
    first = next((a["step"] for a, b in zip(resumed.steps, before) if a["loss"] != b["loss"]), None)
    losses = "equal throughout" if first is None else f"equal before step {first - 1}, then apart (its first place)"
    echo(f"sample ids of every step {'equal' if same_ids else 'DIFFER'}: nothing was reshuffled; losses {losses}")
    _echo_after(middle, os.path.join(run, f"step-{STEPS:06d}.pt"), store, document, train_dir, echo)


def _resume_without(spec: str, middle: str, run: str, store: str, document: int, config: Any) -> dict[str, Any]:
    """Write ``middle`` again under ``run`` with the document taken down (``tokenport.takedown``); its loader state."""
    import torch

    checkpoint = torch.load(middle, weights_only=True)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    checkpoint["loader"] = takedown(checkpoint["loader"], [(store, document)])
    torch.save(checkpoint, os.path.join(run, f"step-{CHECKPOINT:06d}.pt"))
    return dict(checkpoint["loader"])


def _echo_after(middle: str, after: str, store: str, document: int, train_dir: str, echo: Echo) -> None:
    """`where` and `audit` on the run that resumed without the document."""
    kept = occurrences(after, store=store, document=document, up_to_step=STEPS - 1)
    trained = sum(place.trained for place in kept.places)
    echo(
        f"tokenport where {_rel(after, train_dir)} ...: {trained} of {len(kept.places)} place(s) trained "
        f"(removed from step {CHECKPOINT} on)"
    )
    verdict = "consistent" if audit([middle, after]).consistent else "DIVERGES"
    echo(
        f"tokenport audit {_rel(middle, train_dir)} {_rel(after, train_dir)}: {verdict} (the takedown run "
        f"continues the certified stream, its removal recorded from step {CHECKPOINT})"
    )


def _identifier(store: str, document: int) -> str:
    """The identifier prepare kept for a document of its output (``provenance.npz``: the input's ``id``)."""
    from ..corpus.run.provenance import KEPT
    from ..corpus.run.why import read_provenance

    provenance = read_provenance(os.path.dirname(store))
    h, c = provenance.header, provenance.columns
    part = h.parts.index(os.path.basename(store))
    rows = np.flatnonzero((c["step"] == KEPT) & (c["part"] == part) & (c["document"] == document))
    if not len(rows) or h.id_field is None:
        return "an unnamed docstring"
    offsets = c["id_offsets"]
    return bytes(c["id_bytes"][offsets[rows[0]] : offsets[rows[0] + 1]]).decode()


def _a_docstring(state: dict[str, Any], spec: str) -> tuple[str, int]:
    """(store, document) of a docstring a step after the checkpoint held: the first that shares its sample with
    other text (so the comparison shows its neighbours untouched), else the first."""
    found: list[tuple[int, str, int]] = []
    for step in range(CHECKPOINT, STEPS):
        for item in trace(state, step, detokenize=False):
            if f"{os.sep}prose{os.sep}" in item.lineage.store:
                found.extend((len(item.lineage.pieces), item.lineage.store, d) for d, _, _ in item.lineage.pieces)
    if not found:
        raise RuntimeError(f"no docstring in steps {CHECKPOINT}..{STEPS - 1} of {spec}'s run")
    _, store, document = next((f for f in found if f[0] > 1), found[0])
    return store, document


def _compare(
    dataset: Any, config: Any, removed: dict[str, Any], kept: dict[str, Any], places: Sequence[Any]
) -> _Compared:
    """Both runs' batches from the checkpoint on (the loaders built as training builds them), compared."""
    from .train import _loader

    runs = []
    for state in (kept, removed):
        loader, _ = _loader(dataset, config, 0, 1)
        loader.load_state_dict(state)
        batches = iter(loader)
        runs.append([{k: v.numpy() for k, v in next(batches).items()} for _ in range(STEPS - CHECKPOINT)])
    held = {(p.step, p.slot, p.offset + k) for p in places for k in range(p.end - p.start)}
    positions = differing = outside = removed_count = hidden = 0
    for offset, (a, b) in enumerate(zip(*runs)):
        step = CHECKPOINT + offset
        diff = (a["tokens"] != b["tokens"]) | (a["labels"] != b["labels"]) | (a["loss_mask"] != b["loss_mask"])
        positions += diff.size
        for slot, j in zip(*np.nonzero(diff)):
            differing += 1
            outside += (step, int(slot), int(j)) not in held and (step, int(slot), int(j) + 1) not in held
        for s, slot, j in held:
            if s == step and j < b["tokens"].shape[1]:  # the window's last token is a label only
                removed_count += 1
                hidden += int(b["tokens"][slot, j] != a["tokens"][slot, j] and b["loss_mask"][slot, j] == 0)
    return _Compared(positions, differing, outside, removed_count, hidden)


def _log(run_dir: str) -> Any:
    from .train import TrainLog

    return TrainLog.load(run_dir)


def _rel(path: str, train_dir: str) -> str:
    return os.path.relpath(path, os.path.dirname(train_dir))

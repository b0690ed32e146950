"""Takedown without reshuffling: documents removed from a saved run, and ``tokenport takedown``'s file.

``takedown(state, documents)`` returns a new loader state whose receipt lists the removal from the
state's next step (``integrations.removal`` holds the records, the masking rule and the loader's
masks); a loader that loads it hides those documents' tokens. ``tokenport takedown`` writes that
state as JSON under a temporary name beside the output, flushed to disk, then renamed into place: a
reader sees the old file or the whole new one, never a part. The input state is never overwritten
(it is the record of what the run trained on before the removal; ``tokenport audit`` reads it beside
the new one); an existing output is replaced only with ``force``.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._files import KillPoints, parse_structured, read_text
from ..errors import ConfigError
from ..samples.base import Rebuilder, store_documents
from ..sampling.state import read_sampler_state
from .receipt import DataReceipt
from .removal import certified_data, layouts, plan, removal_step, requested, resolve_store
from .tracing import load_state, resolve_state

__all__ = ["KILL_AT", "TakedownReport", "takedown", "takedown_file"]

KILL_AT = "TOKENPORT_TAKEDOWN_KILL_AT"
"""Directed-kill tests set this to N: the process ends (``os._exit``) at the N-th step of publishing the output."""
_kill_point = KillPoints(KILL_AT)


def takedown(
    state: Mapping[str, Any] | str | os.PathLike[str], documents: Any, *, stores: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A new loader state (``state`` is not changed): ``state`` (a dict, or the path of a JSON state or checkpoint)
    with ``documents`` removed from its next step on, listed in its receipt; a loader that loads it masks them.
    ``documents`` as ``StatefulLoader.remove_documents`` takes them; ``stores``: recorded prefix -> where the store
    is now. ConfigError (the dataset rebuilt from the receipt) for an unknown store or document."""
    moves = dict(stores or {})
    source, checked, dataset = resolve_state(state, None, Rebuilder(moves))
    pairs = requested(documents)
    saved = DataReceipt.from_dict(checked["receipt"], f"{source}: state['receipt']")
    sampler = read_sampler_state(checked["sampler"], f"{source}: state['sampler']")
    consumed = sampler.consumed_samples
    step = removal_step(consumed, sampler.micro_batch_size * sampler.data_parallel_size)
    recorded = {  # the dataset's prefix -> the receipt's
        p: next((old for old, new in moves.items() if resolve_store(new, [p])), p) for p in store_documents(dataset)
    }
    new = plan(pairs, dataset, saved.dataset, saved.removed, consumed, step, recorded)
    layouts(dataset, {prefix for prefix, _ in new})
    out = copy.deepcopy(dict(checked))
    if not new:
        return out
    records = [*copy.deepcopy(list(saved.removed)), *(record for _, record in new)]
    out["receipt"]["removed_documents"] = records
    certificate = out.get("certificate")
    if isinstance(certificate, dict):  # a new segment: its data digest covers the removals
        steps, digest = int(certificate["steps"]), str(certificate["digest"])
        certificate.update(
            data=certified_data(saved.dataset, records).hex(),
            since=steps,
            base=digest,
            previous=digest,
            runs=[[steps, int(consumed)]],
        )
        certificate.pop("batch", None)  # no step in the new segment yet
    return out


@dataclass(frozen=True)
class TakedownReport:
    """What ``tokenport takedown`` did: the state read, the file written, the removals it added."""

    source: str
    output: str
    removals: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types: one object."""
        return {"source": self.source, "output": self.output, "removals": [dict(r) for r in self.removals]}

    def render(self) -> str:
        """The report as text: one line per removal, then where the new state is."""
        lines = [
            f"store {r['store']}: document(s) {', '.join(map(str, r['documents']))} removed from step {r['step']} "
            f"(consumed_samples={r['consumed_samples']}) on"
            for r in self.removals
        ] or ["nothing new to remove: every document named is removed already"]
        lines.append(f"wrote {self.output} (from {self.source}): load it with StatefulLoader.load_state_dict to resume")
        return "\n".join(lines)


def takedown_file(
    path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    store: str | None = None,
    documents: Sequence[int] | None = None,
    where: str | os.PathLike[str] | None = None,
    stores: Mapping[str, str] | None = None,
    force: bool = False,
) -> TakedownReport:
    """Remove ``store``'s ``documents`` (or those of the ``tokenport where --json`` output in the file ``where``)
    from the state in ``path`` and write the new state to ``output`` as JSON; ConfigError naming the argument."""
    name, out = os.fspath(path), os.fspath(output)
    if (store is None or not documents) == (where is None):
        raise ConfigError(
            "name the documents by --store S --document N [N ...], or by --where WHERE.json (what "
            "`tokenport where --json` printed), not both"
        )
    if os.path.exists(out) and (os.path.abspath(out) == os.path.abspath(name) or os.path.samefile(out, name)):
        raise ConfigError(f"-o {out}: that is the state read; write the new state to another file (keep the old one)")
    if os.path.exists(out) and not force:
        raise ConfigError(f"-o {out}: the file exists; pass --force to replace it, or another path")
    asked: Any = (
        parse_structured(read_text(os.fspath(where), "where output"), os.fspath(where), yaml_ok=False)
        if where is not None
        else [(store, d) for d in documents or ()]
    )
    state, source = load_state(name)
    before = len((state.get("receipt") or {}).get("removed_documents") or [])
    new = takedown(state, asked, stores=stores)
    publish(out, new)
    return TakedownReport(source, out, tuple(new["receipt"].get("removed_documents", [])[before:]))


def publish(path: str, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` as JSON: a temporary file, flushed, renamed into place; a killed writer's
    temporary is removed by the next one."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1, allow_nan=False)
            handle.flush()
            _kill_point()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ConfigError(f"-o {path}: cannot write the new state ({exc.strerror})") from None
    _kill_point()
    os.replace(temporary, path)
    _kill_point()
    for leftover in glob.glob(glob.escape(path) + ".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)

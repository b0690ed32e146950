"""Running work units as Ray tasks, for a cluster: the same units, the same output as local runs.

Each unit is one task (one CPU); a task loads the tokenizer once per worker process and runs the
unit exactly as a local worker would. With a shared filesystem (a local output directory every
node sees) it writes under ``OUTPUT/.work/`` itself, and the dedup passes group MinHash
signatures by band on the cluster too (one task per band). Without one (``shared=False``, as for
an object-store output) a task gets the files its unit reads from the work directory (a
decompressed chunk, dedup decisions, the documents an earlier keys pass kept) with it, runs in a
directory of its own node, and sends back the files it wrote, which are written into the work
directory here; band pairs are then computed here. ``ray.init`` is called with ``address`` unless
the caller has connected already.

A node may die mid-run: Ray runs a task whose worker or node died again elsewhere (``RETRIES``
times), and recomputes a finished task's result that was lost with its node (lineage
reconstruction, which the same retries allow). A unit is deterministic and its files are published
atomically under its own name (a store, then its stats), so a rerun leaves each unit's files once,
the same bytes; a unit whose task still fails after that stops the run as a TokenportError, and a
rerun of the command resumes it. ``resources`` (custom Ray resources each task needs) keeps units
on the nodes that declare them.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._optional import require
from ...errors import TokenportError
from ...tokenizers import Tokenizer, load_tokenizer, register_tokenizer
from ..steps.dedup import band_edges
from .executor import OnDone, OnProgress, _added_backend, _attempt, _Failure
from .state import replace_atomically, temporary_path
from .units import Unit
from .worker import UnitJob, UnitRecord

__all__ = ["RayExecutor"]


RETRIES = 3
"""How often Ray runs a unit's task again after its worker or node died (or its result was lost)."""

Backends = tuple[tuple[str, Any], ...]
"""The tokenizer backend a spec names, if the driver registered it (not built in): a task registers it too."""


@functools.lru_cache(maxsize=4)
def _tokenizer(spec: str, backends: Backends) -> Tokenizer:
    for name, factory in backends:
        register_tokenizer(name, factory)
    return load_tokenizer(spec)


def _run_task(job: UnitJob, unit: Unit, spec: str, backends: Backends) -> UnitRecord | _Failure:
    return _attempt(job, unit, _tokenizer(spec, backends), lambda: False)


Files = dict[str, bytes]
"""Files of a work directory by their path relative to it."""


def _run_detached(
    job: UnitJob, unit: Unit, spec: str, backends: Backends, given: Files
) -> tuple[UnitRecord | _Failure, Files]:
    """Run `unit` in a directory of this node holding the `given` work files; the outcome (a record's
    prefix relative to that directory) and the files the unit wrote there."""
    with tempfile.TemporaryDirectory(prefix="tokenport-unit-") as work:
        for name, data in given.items():
            os.makedirs(os.path.dirname(os.path.join(work, name)), exist_ok=True)
            with open(os.path.join(work, name), "wb") as f:
                f.write(data)
        slices = tuple(
            dataclasses.replace(piece, inflated=os.path.join(work, _chunk_name(piece.inflated)))
            if piece.inflated
            else piece
            for piece in unit.slices
        )
        here = dataclasses.replace(job, work_dir=work)
        outcome = _attempt(here, dataclasses.replace(unit, slices=slices), _tokenizer(spec, backends), lambda: False)
        if isinstance(outcome, _Failure):
            return outcome, {}
        written: Files = {}
        for directory, _, names in os.walk(work):
            for name in names:
                path = os.path.join(directory, name)
                if os.path.relpath(path, work) not in given:
                    with open(path, "rb") as f:
                        written[os.path.relpath(path, work)] = f.read()
        return dataclasses.replace(outcome, prefix=os.path.relpath(outcome.prefix, work)), written


def _chunk_name(path: str) -> str:
    """A decompressed chunk's path relative to the work directory (``inflated/DIGEST/NNNNNN.jsonl``)."""
    return os.path.join("inflated", *path.split(os.sep)[-2:])


_PASS_FILES = ("drop.npy", "docs", "pass.json", "rejected.tsv")


def _given(work: str, unit: Unit) -> Files:
    """The work files `unit` reads: its decompressed chunks, its dedup steps' decisions, and what the
    keys passes before kept of it (``spill``)."""
    paths = {os.path.join(work, _chunk_name(piece.inflated)): piece.inflated for piece in unit.slices if piece.inflated}
    for kind in _PASS_FILES:  # the decisions; the documents, counts and rejects of the keys pass before
        paths.update((p, p) for p in glob.glob(os.path.join(glob.escape(work), "dedup-*", f"{unit.name}.{kind}")))
    given = {}
    for name, path in paths.items():
        with open(path, "rb") as f:
            given[os.path.relpath(name, work)] = f.read()
    return given


def _receive(work: str, outcome: UnitRecord, written: Files) -> UnitRecord:
    """Write a detached unit's files into `work`, each atomically and its stats last (a unit is
    finished once they are there, a keys pass once its counts are); its record, with its prefix under `work`."""
    for name in sorted(written, key=lambda n: n.endswith((".stats.json", ".pass.json"))):
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = temporary_path(path)
        with open(temporary, "wb") as f:
            f.write(written[name])
        replace_atomically(temporary, path)
    return dataclasses.replace(outcome, prefix=os.path.join(work, outcome.prefix))


class RayExecutor:
    """Runs units on a Ray cluster: an ``Executor``, as ``LocalExecutor`` is."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        address: str | None = None,
        shared: bool = True,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        self._ray = require("ray", extra="ray", feature="executor='ray'")
        self.tokenizer = tokenizer
        self.address = address
        self.shared = shared
        self.resources = dict(resources or {})

    def __enter__(self) -> RayExecutor:
        if not self._ray.is_initialized():
            self._ray.init(address=self.address, log_to_driver=False)
        self._task: Any = self._remote(_run_task if self.shared else _run_detached)
        return self

    def _remote(self, function: Any) -> Any:
        """`function` as a Ray task of one CPU (and `resources`), run again if its worker or node dies;
        an error it raises is never retried (a unit's errors come back as a _Failure)."""
        return self._ray.remote(num_cpus=1, resources=self.resources, max_retries=RETRIES, retry_exceptions=False)(
            function
        )

    def _get(self, ref: Any, what: str) -> Any:
        """The result of `ref`, or a TokenportError naming `what` when Ray could not make it (its task
        or its result was lost more often than ``RETRIES`` allows, or no node could run it)."""
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)  # what a task raised, without Ray's traceback
            if isinstance(cause, TokenportError):  # a band's error (a unit's comes back as a _Failure)
                raise cause from None
            error = cause if isinstance(cause, BaseException) else exc
            reason = (str(error).strip().splitlines() or [""])[0]
            raise TokenportError(
                f"{what}: its Ray task failed ({type(error).__name__}: {reason}; a task is run again up to "
                f"{RETRIES} times when its worker or node dies); check the cluster's nodes, then rerun the same "
                "command to resume (finished units are kept)"
            ) from None

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to stop: tasks end with their units (the Ray connection stays the caller's)."""

    def map_bands(
        self, key_files: list[str], bands: list[int], index_file: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """A dedup step's band pairs, one task per band: the signatures are grouped by band on the
        cluster (the key files are on the shared filesystem) and only the pairs come back; without
        a shared filesystem, here, band by band."""
        if not self.shared:
            return [band_edges(key_files, band, index_file) for band in bands]
        task = self._remote(band_edges)
        refs = [task.remote(key_files, band, index_file) for band in bands]
        return [self._get(ref, f"the pairs of band {band}") for ref, band in zip(refs, bands)]

    def run(self, job: UnitJob, units: Sequence[Unit], on_done: OnDone, on_progress: OnProgress | None = None) -> None:
        """Run every unit as a task, calling ``on_done`` here as each finishes; the first failure
        cancels the rest and is raised as the TokenportError it was. A task reports no progress
        before it finishes (``on_progress`` is not called), so progress moves unit by unit."""
        ray = self._ray
        spec = self.tokenizer.spec()
        backends = tuple(_added_backend(spec))
        todo = sorted(units, key=lambda u: (-u.size, u.index))[::-1]  # popped from the end: largest first
        # Without a shared filesystem a task carries its unit's input files: a window of tasks in
        # flight (two per CPU) keeps the driver's memory and Ray's object store to a few units' worth.
        window = len(todo) if self.shared else max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        pending: dict[Any, Unit] = {}
        try:
            while todo or pending:
                while todo and len(pending) < window:
                    unit = todo.pop()
                    given = () if self.shared else (_given(job.work_dir, unit),)
                    pending[self._task.remote(job, unit, spec, backends, *given)] = unit
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    unit = pending.pop(ref)
                    outcome = self._get(ref, f"preparing {unit.name}")
                    if not self.shared:
                        outcome, written = outcome
                        if not isinstance(outcome, _Failure):
                            outcome = _receive(job.work_dir, outcome, written)
                    if isinstance(outcome, _Failure):
                        raise outcome.error()
                    on_done(unit, outcome)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

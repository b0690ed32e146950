"""Running work units as Ray tasks, for a cluster: the same units, the same output as local runs.

Each unit is one task (one CPU); a task loads the tokenizer once per worker process and runs the
unit exactly as a local worker would, writing under ``OUTPUT/.work/``, so the output directory
must be on a filesystem every node shares. Finished units stay finished; the dedup passes run
their key pass on the cluster too, and MinHash decisions group the signatures by band there (one
task per band), returning only the pairs of documents that share a band key. ``ray.init`` is called
with ``address`` unless the caller has connected already.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...tokenizers import Tokenizer, load_tokenizer
from ..steps.dedup import band_edges
from .executor import OnDone, OnProgress, _attempt, _Failure
from .units import Unit
from .worker import UnitJob, UnitRecord

__all__ = ["RayExecutor"]


@functools.lru_cache(maxsize=4)
def _tokenizer(spec: str) -> Tokenizer:
    return load_tokenizer(spec)


def _run_task(job: UnitJob, unit: Unit, spec: str) -> UnitRecord | _Failure:
    return _attempt(job, unit, _tokenizer(spec), lambda: False)


class RayExecutor:
    """Runs units on a Ray cluster: an ``Executor``, as ``LocalExecutor`` is."""

    def __init__(self, tokenizer: Tokenizer, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("executor='ray' needs Ray: pip install 'tokenport[ray]'") from None
        self._ray = ray
        self.tokenizer = tokenizer
        self.address = address

    def __enter__(self) -> RayExecutor:
        if not self._ray.is_initialized():
            self._ray.init(address=self.address, log_to_driver=False)
        self._task = self._ray.remote(num_cpus=1, max_retries=0)(_run_task)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to stop: tasks end with their units (the Ray connection stays the caller's)."""

    def map_bands(
        self, key_files: list[str], bands: list[int], index_file: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """A dedup step's band pairs, one task per band: the signatures are grouped by band on the
        cluster (the key files are on the shared filesystem) and only the pairs come back."""
        task = self._ray.remote(num_cpus=1, max_retries=0)(band_edges)
        return self._ray.get([task.remote(key_files, band, index_file) for band in bands])

    def run(self, job: UnitJob, units: Sequence[Unit], on_done: OnDone, on_progress: OnProgress | None = None) -> None:
        """Run every unit as a task, calling ``on_done`` here as each finishes; the first failure
        cancels the rest and is raised as the TokenportError it was. A task reports no progress
        before it finishes (``on_progress`` is not called), so progress moves unit by unit."""
        ray = self._ray
        spec = self.tokenizer.spec()
        pending: dict[Any, Unit] = {
            self._task.remote(job, unit, spec): unit for unit in sorted(units, key=lambda u: (-u.size, u.index))
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    unit = pending.pop(ref)
                    outcome = ray.get(ref)
                    if isinstance(outcome, _Failure):
                        raise outcome.error()
                    on_done(unit, outcome)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

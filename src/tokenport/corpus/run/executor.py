"""Running work units: the ``Executor`` protocol, and its local kind on this process and `workers - 1`
worker subprocesses (``ray_executor.RayExecutor`` is the other kind, for a cluster).

This process works too (on a thread, with the tokenizer it already has), so work starts at
once and `workers` processes are busy. Each worker is a fresh ``python -c`` subprocess: no
fork, so threads of the caller cannot deadlock it, and no re-import of the caller's main
module, so scripts need no ``__main__`` guard. Workers start when the executor is entered
and load the tokenizer (and warm it up) while the caller plans the work; then they run
units sent over a pipe. Units go largest first, so the last to finish is a small one. An
error in a worker comes back as the same TokenportError with its message; everyone else
stops at once, and units already finished stay finished for a rerun to reuse.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, runtime_checkable

import numpy as np

from ... import errors
from ...errors import ConfigError, TokenportError
from ...tokenizers import Tokenizer, load_tokenizer, register_tokenizer
from ...tokenizers.base import TOKENIZERS
from ..steps.dedup import band_edges
from .units import Unit
from .worker import Cancelled, UnitJob, UnitRecord, run_unit

_BOOTSTRAP = (
    "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
    "from tokenport.corpus.run.executor import serve; serve()"
)

OnDone = Callable[[Unit, UnitRecord], None]
OnProgress = Callable[[Unit, int], None]


@runtime_checkable
class Executor(Protocol):
    """Where ``prepare`` runs its work: units (and a MinHash step's bands); entered before planning
    (workers start meanwhile), closed once the units are done."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, job: UnitJob, units: Sequence[Unit], on_done: OnDone, on_progress: OnProgress | None = None) -> None:
        """Run every unit, calling ``on_done(unit, record)`` in this process as each one finishes (and
        ``on_progress(unit, more)`` as more of its size is done, if the executor can tell); the first
        failure stops the rest and is raised as the TokenportError it was."""
        ...

    def map_bands(
        self, key_files: list[str], bands: list[int], index_file: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """A MinHash dedup step's pairs of documents sharing a key, per band (``dedup.band_edges``)."""
        ...

    def close(self) -> None:
        """Release the workers; idempotent."""
        ...


@dataclass(frozen=True)
class _Progress:
    """A worker's report that `done` more of its unit's size is read (sent before its record)."""

    done: int


@dataclass(frozen=True)
class _Failure:
    """An error raised in a worker, as plain data: its class name and message (or traceback)."""

    kind: str
    message: str
    errno: int | None = None  # an OSError's (a unit's files could not be written), raised here as one
    filename: str | None = None

    def error(self) -> Exception:
        """The error to raise here: the worker's TokenportError class with its message, or its OSError
        (which `prepare` reports naming the output the user gave)."""
        if self.kind == "OSError":
            return OSError(self.errno, self.message, self.filename)
        cls = getattr(errors, self.kind, None)
        if isinstance(cls, type) and issubclass(cls, TokenportError):
            return cls(self.message)
        return TokenportError(self.message)


def _attempt(
    job: UnitJob,
    unit: Unit,
    tokenizer: Tokenizer,
    cancelled: Callable[[], bool],
    progress: Callable[[int], None] | None = None,
) -> UnitRecord | _Failure:
    """Run one unit; any error comes back as a _Failure (a TokenportError's class and message)."""
    try:
        return run_unit(job, unit, tokenizer, cancelled, progress)
    except TokenportError as exc:
        return _Failure(type(exc).__name__, str(exc))
    except Cancelled:
        raise
    except OSError as exc:  # disk full, permissions, a file in the way: prepare names its output
        return _Failure("OSError", exc.strerror or str(exc), exc.errno, exc.filename)
    except Exception:
        return _Failure("TokenportError", f"preparing {unit.name} failed:\n{traceback.format_exc()}")


def serve() -> None:
    """A worker's main loop: a tokenizer spec (with the tokenizer backends registered in the caller),
    then (job, unit) pickles in on stdin;
    a None (ready), then per unit some _Progress and a UnitRecord or _Failure, out.

    Interrupts are the caller's to handle (a worker runs in a session of its own, so a terminal's
    Ctrl-C or a signal to the caller's process group does not reach it, and a SIGINT sent to it
    alone is ignored): the caller stops its workers, and one whose caller died ends at its stdin's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_caller()
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints (a library's, never ours) go to stderr, not into the pipe
    try:
        spec, backends = pickle.load(requests)
        for name, factory in backends:
            register_tokenizer(name, factory)
        tokenizer = load_tokenizer(spec)
        tokenizer.encode_batch(["warm up"])  # lazy imports and caches, before the first unit
        ready: _Failure | None = None
    except TokenportError as exc:
        ready = _Failure(type(exc).__name__, str(exc))
    pickle.dump(ready, replies)
    replies.flush()
    while ready is None:
        try:
            job, unit = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(
            _attempt(job, unit, tokenizer, lambda: False, lambda done: _reply(replies, _Progress(done))), replies
        )
        replies.flush()


def _end_with_caller() -> None:
    """On Linux, have the kernel kill this worker when its caller dies: in a session of its own, a
    kill -9 of the caller (or of its group) would otherwise leave it writing a unit a rerun redoes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no libc symbol: the worker still ends at its stdin's end
        return


_PR_SET_PDEATHSIG = 1


def _reply(replies: IO[bytes], message: object) -> None:
    pickle.dump(message, replies)
    replies.flush()


class _Worker:
    """One worker subprocess and the pipes to it."""

    def __init__(self, tokenizer_spec: str, backends: list[tuple[str, Any]]) -> None:
        self.process = subprocess.Popen(  # its own session: the caller's Ctrl-C is the caller's to handle
            [sys.executable, "-c", _BOOTSTRAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        self._starting = threading.Lock()
        self._failure: _Failure | None = None
        self._checked = False
        self._send(sys.path)
        self._send((tokenizer_spec, backends))

    def _send(self, value: object) -> None:
        stdin: IO[bytes] = self.process.stdin  # type: ignore[assignment]
        pickle.dump(value, stdin)
        stdin.flush()

    @property
    def is_ready(self) -> bool:
        """Whether the worker's start is over (loaded, or failed): a driver will not wait on it."""
        return self._checked

    def ready(self) -> _Failure | None:
        """Wait until the worker has loaded its tokenizer; a _Failure if it could not. Its answer is
        read once, by one driver at a time; later calls return it."""
        with self._starting:
            if not self._checked:
                try:
                    self._failure = pickle.load(self.process.stdout)  # type: ignore[arg-type]
                except (OSError, EOFError, ValueError, pickle.UnpicklingError):  # ValueError: stop() closed it
                    self._failure = _Failure(
                        "TokenportError", "a worker process died while starting; see its error output above"
                    )
                self._checked = True
            return self._failure

    def run(self, job: UnitJob, unit: Unit, progress: Callable[[int], None]) -> UnitRecord | _Failure:
        try:
            self._send((job, unit))
            while isinstance(reply := pickle.load(self.process.stdout), _Progress):  # type: ignore[arg-type]
                progress(reply.done)
            return reply
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            return _Failure(
                "TokenportError",
                f"a worker process died (killed, or out of memory) while preparing {unit.name}; rerun the same "
                "command to resume (finished units are kept), with fewer workers if memory ran out",
            )

    def stop(self) -> None:
        """End the process at once: it is idle, or its unit is abandoned (and leaves no store)."""
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:
                pass  # the pipe broke with the process


def _added_backend(spec: str) -> list[tuple[str, Any]]:
    """The backend `spec` names if it was registered in this process (not built in), for a worker to
    register too; ConfigError if its factory cannot be sent (a lambda or a function defined inside another)."""
    added = [(name, factory) for name, factory in TOKENIZERS.added() if spec.startswith(name + ":")]
    try:
        pickle.dumps(added)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise ConfigError(
            f"tokenizer spec {spec!r}: the factory registered for its backend cannot be sent to worker processes "
            f"({exc}); register a module-level function or class, or prepare with workers=1"
        ) from None
    return added


class LocalExecutor:
    """Runs units on `workers` local processes: this one and `workers - 1` subprocesses."""

    def __init__(self, tokenizer: Tokenizer, workers: int) -> None:
        self.tokenizer = tokenizer
        self.workers = workers
        self._pool: list[_Worker] = []

    def __enter__(self) -> LocalExecutor:
        spec = self.tokenizer.spec()
        backends = _added_backend(spec) if self.workers > 1 else []  # checked before a worker starts
        self._pool = [_Worker(spec, backends) for _ in range(self.workers - 1)]
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker subprocesses (idle ones, or all on an error); later units run here."""
        for worker in self._pool:
            worker.stop()
        self._pool = []

    def map_bands(
        self, key_files: list[str], bands: list[int], index_file: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """A dedup step's band pairs, computed here band by band (the key files are local)."""
        return [band_edges(key_files, band, index_file) for band in bands]

    def run(self, job: UnitJob, units: Sequence[Unit], on_done: OnDone, on_progress: OnProgress | None = None) -> None:
        """Run every unit, calling `on_done(unit, record)` in this process as each one finishes, and
        `on_progress(unit, more)` as more of a running unit's size is done."""
        if not self._pool:
            for unit in units:
                report = None if on_progress is None else functools.partial(on_progress, unit)
                on_done(unit, run_unit(job, unit, self.tokenizer, progress=report))
            return
        todo: queue.SimpleQueue[Unit] = queue.SimpleQueue()
        for unit in sorted(units, key=lambda u: (-u.size, u.index)):
            todo.put(unit)
        results: queue.SimpleQueue[tuple[Unit | None, UnitRecord | _Failure | _Progress]] = queue.SimpleQueue()
        stop = threading.Event()
        drivers: list[_Worker | None] = [None, *self._pool]
        threads = [
            threading.Thread(target=self._drive, args=(w, job, todo, results, stop), daemon=True) for w in drivers
        ]
        for thread in threads:
            thread.start()
        try:
            _collect(results, len(units), on_done, on_progress)
        except BaseException:
            stop.set()
            self.close()
            raise
        finally:
            stop.set()  # a driver whose worker is still starting finds no work when it is ready
            for thread, worker in zip(threads, drivers):
                if worker is None or worker.is_ready:  # never wait for a start the work no longer needs
                    thread.join()

    def _drive(
        self,
        worker: _Worker | None,
        job: UnitJob,
        todo: queue.SimpleQueue[Unit],
        results: queue.SimpleQueue[tuple[Unit | None, UnitRecord | _Failure | _Progress]],
        stop: threading.Event,
    ) -> None:
        """One thread's loop: take units from `todo` until it is empty, `stop` is set or a unit fails,
        running each on `worker` (or here, for None) and putting its progress and outcome in `results`."""
        if worker is not None:
            failure = worker.ready()  # take no unit before the worker can run it
            if failure is not None:
                results.put((None, failure))
                return
        while not stop.is_set():
            try:
                unit = todo.get_nowait()
            except queue.Empty:
                return
            progress = functools.partial(lambda unit, done: results.put((unit, _Progress(done))), unit)
            if worker is None:
                try:
                    outcome = _attempt(job, unit, self.tokenizer, stop.is_set, progress)
                except Cancelled:
                    return
            else:
                try:
                    outcome = worker.run(job, unit, progress)
                except Exception as exc:  # e.g. the job cannot be pickled: reported, never a silent hang
                    outcome = _Failure(
                        "TokenportError",
                        f"could not hand {unit.name} to a worker process ({type(exc).__name__}: {exc}); "
                        "rerun with --workers 1 to prepare every unit in this process",
                    )
            results.put((unit, outcome))
            if isinstance(outcome, _Failure):
                return


def _collect(
    results: queue.SimpleQueue[tuple[Unit | None, UnitRecord | _Failure | _Progress]],
    count: int,
    on_done: OnDone,
    on_progress: OnProgress | None,
) -> None:
    """Hand the drivers' results to the callbacks until `count` units are done; raise the first failure."""
    finished = 0
    while finished < count:
        unit, outcome = results.get()
        if isinstance(outcome, _Failure):
            raise outcome.error()
        assert unit is not None  # only a worker that failed to start reports no unit
        if isinstance(outcome, _Progress):
            if on_progress is not None:
                on_progress(unit, outcome.done)
            continue
        on_done(unit, outcome)
        finished += 1

"""The output directory: its lock, the settings of the run under ``.work/``, and the dataset manifest.

A run records its output settings and its inputs' identity (``identity``) in ``.work/state.json``;
a rerun resumes only with the same settings and unchanged inputs, and a finished output
(``tokenport.json`` present) is returned only for the same settings and unchanged inputs, never
written into again. With ``overwrite`` an output of other settings or changed inputs is replaced
instead. So two different runs are never mixed in one directory. Both documents are read through
the typed schema layer (``RunState``, ``DatasetManifest``): a damaged one is refused naming the field.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
from collections.abc import Iterable
from typing import IO, Annotated, Any, Literal

import msgspec

from ..._files import KillPoints
from ..._schema import Count, Document, Int64, Text, decode, read_document, to_builtins
from ...errors import ConfigError, CorruptStoreError
from ...indexed.commit import recover
from ..inputs.sources import InputFile
from .identity import InputIdentity, changed_input, identify

WORK_DIR = ".work"
MANIFEST_NAME = "tokenport.json"
_PART_FILE = re.compile(r"^part-(\d+)\.(bin|idx|json|tokenport-commit)$")
_PART_TEMPORARY = re.compile(r"^\.part-\d+\..*\.tmp$")  # a part writer's, left if it was killed
_UNIT_FILE = re.compile(r"^\.?(unit-\d+-[0-9a-f]+)\.")  # a unit store's file, or its writer's temporary
_FORCE = "pass overwrite=True (--force) to prepare it again from scratch"
DATASET_FORMAT = "tokenport.dataset/1"


class RunState(Document, frozen=True):
    """``.work/state.json``: the settings of an unfinished run, their fingerprint, its inputs' identity
    (absent in states written before inputs were recorded)."""

    fingerprint: Text
    settings: dict[str, Any]
    inputs: list[InputIdentity] | None = None


class PartEntry(Document, frozen=True):
    """One part as the dataset manifest lists it."""

    name: Annotated[str, msgspec.Meta(pattern=r"^part-\d{5,}$")]
    documents: Count
    tokens: Count
    inputs: list[str]


class Totals(Document, frozen=True):
    documents: Count
    tokens: Count
    bytes_in: Count
    input_files: Count
    units: Count


class DatasetManifest(Document, frozen=True):
    """``tokenport.json``: what a finished run holds. Optional keys are those only some runs write
    (``chat``, ``rejected``) or older versions did not (``steps``, ``step_costs``, ``inputs``, ``stages``: the
    run's wall time by stage in ms, ``unit_stages``: the workers' time by stage in ms)."""

    format: Literal["tokenport.dataset/1"]
    tokenport_version: Text
    created: Text
    fingerprint: Text
    config: dict[str, Any]
    tokenizer: dict[str, Any]
    parts: list[PartEntry]
    totals: Totals
    skipped: dict[str, Count]
    steps: dict[str, dict[str, Count]] = {}
    step_costs: dict[str, dict[str, Int64]] = {}
    stages: dict[str, Int64] = {}
    unit_stages: dict[str, Int64] = {}
    chat: dict[str, Any] | None = None
    rejected: list[Annotated[str, msgspec.Meta(pattern=r"^rejected/[^/]+\.jsonl$")]] | None = None
    inputs: list[InputIdentity] | None = None

    def __post_init__(self) -> None:
        names = [part.name for part in self.parts]
        if len(set(names)) != len(names):
            raise ValueError("parts: a part is listed twice")
        if sum(part.documents for part in self.parts) != self.totals.documents:
            raise ValueError("totals.documents is not the sum of the parts' documents")
        if sum(part.tokens for part in self.parts) != self.totals.tokens:
            raise ValueError("totals.tokens is not the sum of the parts' tokens")
        if self.inputs is not None and len(self.inputs) != self.totals.input_files:
            raise ValueError("totals.input_files is not the number of inputs listed")


KILL_AT = "TOKENPORT_PREPARE_KILL_AT"
"""Directed-kill tests set this to N: the process ends at the N-th rename of a file prepare publishes."""
kill_point = KillPoints(KILL_AT)


def temporary_path(path: str) -> str:
    """The name this process writes `path` under before renaming it into place."""
    return f"{path}.{os.getpid()}.tmp"


def replace_atomically(temporary: str, path: str) -> None:
    """Rename `temporary` over `path`, then delete temporaries of `path` that killed runs left
    (one process writes a given path at a time, under the output directory's lock)."""
    kill_point()
    os.replace(temporary, path)
    kill_point()
    for leftover in glob.glob(glob.escape(path) + ".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically: a temporary file beside it, fsync, rename."""
    temporary = temporary_path(path)
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    replace_atomically(temporary, path)


def not_a_directory(path: str) -> ConfigError:
    """The error for an output directory `path` that is a file, or lies under one."""
    return ConfigError(
        f"{path}: is not a directory (it, or one above it, is a file); name a directory: a new one for "
        "prepare, or the output of a finished prepare run"
    )


def read_manifest(path: str) -> dict[str, Any] | None:
    """The dataset manifest in ``path`` as checked by ``DatasetManifest`` (its JSON data), or None if absent."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise not_a_directory(os.path.dirname(path) or path) from None
    except OSError as exc:
        raise CorruptStoreError(f"{path}: cannot read it ({exc.strerror}); check its permissions") from None
    remedy = "delete the output directory and run again, or " + _FORCE
    decode(data, DatasetManifest, where=path, remedy=remedy, error=CorruptStoreError)
    return json.loads(data)


class OutputDir:
    """The output directory of one run, held under an exclusive lock from `claim` to `release`."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.work = os.path.join(self.path, WORK_DIR)
        self.manifest_path = os.path.join(self.path, MANIFEST_NAME)
        self._lock: IO[str] | None = None
        self._created = False

    def finished(self, fingerprint: str, files: list[InputFile], *, overwrite: bool = False) -> dict[str, Any] | None:
        """The manifest of a finished run with these settings and unchanged inputs; None if there is
        none (or, with `overwrite`, if it is to be replaced); else ConfigError naming what differs."""
        try:
            manifest = read_manifest(self.manifest_path)
        except CorruptStoreError:
            if overwrite:
                return None
            raise
        if manifest is None:
            return None
        if manifest["fingerprint"] != fingerprint:
            if overwrite:
                return None
            raise ConfigError(
                f"{self.path}: output exists (a finished prepare run with other settings); "
                f"choose another directory or delete it, or {_FORCE}"
            )
        recorded = manifest.get("inputs")
        changed = None if recorded is None else changed_input(_identities(recorded), files)
        if changed is not None:
            if overwrite:
                return None
            raise ConfigError(f"{self.path}: holds a finished prepare run, but {changed}; {_FORCE}")
        shutil.rmtree(self.work, ignore_errors=True)  # a run stopped while cleaning up
        return manifest

    def claim(
        self, settings: dict[str, Any], fingerprint: str, files: list[InputFile], *, overwrite: bool = False
    ) -> OutputDir:
        """Lock the directory and start or resume the run with these settings and inputs (`with`
        releases it); with `overwrite`, the work or output of a run that differs is deleted first."""
        state_path = os.path.join(self.work, "state.json")
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ConfigError(f"{self.path}: output must be a directory, and this is a file; choose another path")
        replacing = overwrite and os.path.exists(self.manifest_path)  # finished() said: replace it
        if not os.path.exists(state_path) and os.path.isdir(self.path) and not replacing:
            others = sorted(set(os.listdir(self.path)) - {WORK_DIR})
            if others:
                raise ConfigError(
                    f"{self.path}: directory is not empty ({', '.join(others[:3])}...) and holds no unfinished "
                    "prepare run; choose a new or empty output directory"
                )
        self._created = not os.path.exists(self.path)
        os.makedirs(self.work, exist_ok=True)
        self._lock = open(os.path.join(self.work, "lock"), "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise ConfigError(
                f"{self.path}: another prepare run is writing this directory; wait for it or use another"
            ) from None
        try:
            self._start(state_path, settings, fingerprint, files, overwrite, replacing)
        except BaseException:
            self.release()
            raise
        return self

    def _start(
        self,
        state_path: str,
        settings: dict[str, Any],
        fingerprint: str,
        files: list[InputFile],
        overwrite: bool,
        replacing: bool,
    ) -> None:
        """Under the lock: resume the recorded run if it is this one; else refuse (ConfigError), or
        with `overwrite` delete its work, record this run, and delete its output, in that order."""
        differs = self._differs(state_path, settings, fingerprint, files, overwrite)
        if differs is not None and not overwrite:
            raise ConfigError(
                f"{self.path}: holds an unfinished prepare run {differs}; rerun it as it was to finish it, "
                f"choose another directory, or {_FORCE}"
            )
        if differs is not None or replacing:
            self._clear_work()  # the earlier run's work, while its state still names it
            kill_point()
        if differs is not None or replacing or not os.path.exists(state_path):
            state = RunState(fingerprint=fingerprint, settings=settings, inputs=identify(files))
            write_json(state_path, to_builtins(state))
        if differs is not None or replacing:
            self._clear_output()  # then the earlier output: a kill from here on leaves this run to resume

    def _differs(
        self,
        state_path: str,
        settings: dict[str, Any],
        fingerprint: str,
        files: list[InputFile],
        overwrite: bool,
    ) -> str | None:
        """How the unfinished run recorded at `state_path` differs from this one, or None (also when
        there is none). A damaged state is a CorruptStoreError, or with `overwrite` a difference."""
        remedy = f"delete {self.work} to start over, or {_FORCE}"
        try:
            state = read_document(state_path, RunState, remedy=remedy, error=CorruptStoreError)
        except FileNotFoundError:
            return None
        except CorruptStoreError:
            if overwrite:
                return "with a damaged state"
            raise
        if state.fingerprint != fingerprint:
            before = state.settings
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
            return f"with other settings (different: {', '.join(changed) or 'the fingerprint'})"
        if state.inputs is not None:
            change = changed_input(state.inputs, files)
            if change is not None:
                return f"whose inputs changed: {change}"
        return None

    def _clear_work(self) -> None:
        """Delete everything under .work/ but the lock and the state (an earlier run's work)."""
        for entry in os.listdir(self.work):
            if entry not in ("lock", "state.json"):
                _remove(os.path.join(self.work, entry))

    def _clear_output(self) -> None:
        """Delete an earlier run's output: its manifest first (then it is no finished run), its parts, rejected/."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.manifest_path)
        kill_point()
        for entry in os.listdir(self.path):
            if _PART_FILE.match(entry) or _PART_TEMPORARY.match(entry) or entry in ("rejected", "provenance.npz"):
                _remove(os.path.join(self.path, entry))
        kill_point()

    def produced(self) -> bool:
        """Whether this run has made anything worth resuming: a file under .work/ other than the
        lock, the state, decompressed input chunks and temporaries."""
        for root, directories, names in os.walk(self.work):
            if root == self.work:
                directories[:] = [d for d in directories if d != "inflated"]
            for name in names:
                if not name.endswith(".tmp") and (root != self.work or name not in ("lock", "state.json")):
                    return True
        return False

    def remove_temporaries(self) -> None:
        """After every writer has stopped (workers ended, under the lock): finish the interrupted
        publications of unit and part stores, then delete every temporary the writers left."""
        if not os.path.isdir(self.work):
            return
        prefixes = {os.path.join(self.work, m.group(1)) for m in map(_UNIT_FILE.match, os.listdir(self.work)) if m}
        for entry in os.listdir(self.path):
            match = _PART_FILE.match(entry)
            if match:
                prefixes.add(os.path.join(self.path, f"part-{match.group(1)}"))
        for prefix in sorted(prefixes):
            recover(prefix, clean=True)
        for root, _, names in os.walk(self.work):
            for name in names:
                if name.endswith(".tmp"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(root, name))
        for entry in os.listdir(self.path):
            if _PART_TEMPORARY.match(entry):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.path, entry))

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def remove_stale_units(self, keep: Iterable[str]) -> None:
        """Delete unit files (and temporaries) under .work/ whose unit is not in `keep`."""
        names = set(keep)
        for entry in os.listdir(self.work):
            unit = entry.lstrip(".").split(".", 1)[0]
            if unit.startswith("unit-") and unit not in names:
                os.unlink(os.path.join(self.work, entry))

    def finish(self, manifest: dict[str, Any], parts: int) -> None:
        """Delete part files beyond the first `parts` and temporaries of killed part writers (every
        writer here has finished), publish the manifest, and drop .work/."""
        for entry in os.listdir(self.path):
            match = _PART_FILE.match(entry)
            if (match and int(match.group(1)) >= parts) or _PART_TEMPORARY.match(entry):
                os.unlink(os.path.join(self.path, entry))
        write_json(self.manifest_path, manifest)
        self.release()
        shutil.rmtree(self.work, ignore_errors=True)

    def abandon(self) -> None:
        """Release the directory and delete this run's work, and the directory if this run made it."""
        self.release()
        shutil.rmtree(self.work, ignore_errors=True)
        if self._created:
            with contextlib.suppress(OSError):  # kept if anything else is in it
                os.rmdir(self.path)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _identities(recorded: list[dict[str, Any]]) -> list[InputIdentity]:
    """The inputs a checked manifest lists, as identities."""
    return [msgspec.convert(entry, InputIdentity) for entry in recorded]


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

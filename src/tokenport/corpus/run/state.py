"""The output directory: its lock, the settings of the run under ``.work/``, and the dataset manifest.

A run records its output settings in ``.work/state.json``; a rerun resumes only with the same
settings, and a finished output (``tokenport.json`` present) is never written into again.
So two different runs are never mixed in one directory.
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
from typing import IO, Any

from ...errors import ConfigError, CorruptStoreError

WORK_DIR = ".work"
MANIFEST_NAME = "tokenport.json"
_PART_FILE = re.compile(r"^part-(\d+)\.(bin|idx|json|tokenport-commit)$")
_PART_TEMPORARY = re.compile(r"^\.part-\d+\..*\.tmp$")  # a part writer's, left if it was killed


KILL_AT = "TOKENPORT_PREPARE_KILL_AT"
"""Directed-kill tests set this to N: the process ends at the N-th rename of a file prepare publishes."""
_renames = 0


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


def kill_point() -> None:
    """End the process here if this is the rename `KILL_AT` names (directed-kill tests)."""
    global _renames
    if KILL_AT in os.environ:
        _renames += 1
        if _renames == int(os.environ[KILL_AT]):
            os._exit(137)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically: a temporary file beside it, fsync, rename."""
    temporary = temporary_path(path)
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    replace_atomically(temporary, path)


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CorruptStoreError(f"{path}: unreadable ({exc}); delete the output directory and run again") from None


class OutputDir:
    """The output directory of one run, held under an exclusive lock from `claim` to `release`."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.work = os.path.join(self.path, WORK_DIR)
        self.manifest_path = os.path.join(self.path, MANIFEST_NAME)
        self._lock: IO[str] | None = None
        self._created = False

    def finished(self, fingerprint: str) -> dict[str, Any] | None:
        """The manifest of a finished run with these settings, None if unfinished; else ConfigError."""
        manifest = read_json(self.manifest_path)
        if manifest is None:
            return None
        if manifest.get("fingerprint") != fingerprint:
            raise ConfigError(
                f"{self.path}: output exists (a finished prepare run with other settings); "
                "choose another directory or delete it"
            )
        shutil.rmtree(self.work, ignore_errors=True)  # a run stopped while cleaning up
        return manifest

    def claim(self, settings: dict[str, Any], fingerprint: str) -> OutputDir:
        """Lock the directory and start or resume the run with these settings (`with` releases it)."""
        state_path = os.path.join(self.work, "state.json")
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ConfigError(f"{self.path}: output must be a directory, and this is a file; choose another path")
        if not os.path.exists(state_path) and os.path.isdir(self.path):
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
        state = read_json(state_path)
        if state is None:
            write_json(state_path, {"fingerprint": fingerprint, "settings": settings})
        elif state.get("fingerprint") != fingerprint:
            self.release()
            before = state.get("settings", {})
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
            raise ConfigError(
                f"{self.path}: holds an unfinished prepare run with other settings (different: {', '.join(changed)}); "
                "rerun it with its settings to finish it, or choose another directory or delete it"
            )
        return self

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

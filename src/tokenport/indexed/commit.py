"""Atomic publication of a store's files (.bin, .idx, .json) under their final names.

A store is several files, and POSIX renames one at a time. So the writer first records the
planned renames in a journal (itself written atomically), then renames, then deletes the
journal. Anyone who opens the prefix and finds a journal rolls it forward first. Either the
old store or the whole new one is visible; never a mix, never a half-written file.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile

from ..errors import CorruptStoreError

JOURNAL_SUFFIX = ".tokenport-commit"


def journal_path(prefix: str) -> str:
    return prefix + JOURNAL_SUFFIX


def temp_path(final_path: str) -> str:
    """A unique temporary name beside `final_path` (same directory, so rename is atomic)."""
    directory, name = os.path.split(os.path.abspath(final_path))
    fd, path = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    os.close(fd)
    return path


def remove_stale_temporaries(final_path: str) -> None:
    """Delete temporaries of `final_path` left by writers that died (their process is gone)."""
    directory, name = os.path.split(os.path.abspath(final_path))
    for leftover in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(name)}.*.tmp")):
        pid_text = leftover[len(os.path.join(directory, f".{name}.")) :].split(".", 1)[0]
        if pid_text.isdigit() and not _process_alive(int(pid_text)):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    try:
        fsync_path(directory or ".")
    except OSError:
        pass  # some file systems cannot fsync a directory; the renames are still atomic


def publish(prefix: str, renames: list[tuple[str, str]]) -> None:
    """Move every (temporary, final) pair into place as one unit, via a journal."""
    for temporary, _ in renames:
        fsync_path(temporary)
    journal = journal_path(prefix)
    staged = temp_path(journal)
    with open(staged, "w", encoding="utf-8") as f:
        json.dump({"renames": renames}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, journal)
    _fsync_dir(os.path.dirname(os.path.abspath(prefix)))
    roll_forward(prefix)


def roll_forward(prefix: str) -> None:
    """Finish a publication that was interrupted; a no-op (one stat) when there is none."""
    journal = journal_path(prefix)
    if not os.path.exists(journal):
        return
    try:
        with open(journal, encoding="utf-8") as f:
            renames = json.load(f)["renames"]
    except (OSError, ValueError, KeyError) as exc:
        raise CorruptStoreError(
            f"{journal}: unreadable commit journal ({exc}); delete it and rebuild the store"
        ) from None
    for temporary, final in renames:
        if os.path.exists(temporary):
            os.replace(temporary, final)
    _fsync_dir(os.path.dirname(os.path.abspath(prefix)))
    try:
        os.unlink(journal)
    except FileNotFoundError:
        pass  # a concurrent reader finished it first

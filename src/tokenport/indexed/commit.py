"""Atomic publication of a store's files (.bin, .idx, .json, a chat store's .mask.*) under their final names.

A store is several files, and POSIX renames one at a time. So the writer first records the
planned renames in a journal (itself written atomically), then renames, then deletes the
journal. A publication may also remove files (a plain store replacing a chat store drops the old
masks); the journal lists them and they go after the renames. Whoever touches the prefix next
(reader, writer, merge, verify) calls `recover`: it rolls the journal forward first, then deletes
what dead writers left. Either the old store or the whole new one is visible; never a mix, never
a half-written file, never a leftover.

Published files take the process umask, as open() would; temporaries stay private until then.
`fault_point` lets tests kill a process at a chosen step (TOKENPORT_FAULT_AT=NAME:N).
"""

from __future__ import annotations

import json
import os
import tempfile

from .._files import process_alive, publish_mode
from .._schema import Document, Text, read_document
from ..errors import CorruptStoreError

JOURNAL_SUFFIX = ".tokenport-commit"
FAULT_ENV = "TOKENPORT_FAULT_AT"
FAULT_EXIT_CODE = 86

_fault_hits: dict[str, int] = {}


def fault_point(step: str) -> None:
    """Exit the process at once (os._exit, as a kill would) at the Nth step named like NAME.

    TOKENPORT_FAULT_AT=NAME:N counts the calls whose `step` starts with NAME ("commit" for every
    step of a publication, "commit.rename" for renames only) and dies at the Nth. Unset: a no-op.
    """
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, count = spec.rpartition(":")
    if not step.startswith(name):
        return
    _fault_hits[spec] = hits = _fault_hits.get(spec, 0) + 1
    if hits == int(count):
        os._exit(FAULT_EXIT_CODE)


def journal_path(prefix: str) -> str:
    return prefix + JOURNAL_SUFFIX


def store_paths(prefix: str) -> tuple[str, ...]:
    """The published files of a store: PREFIX.bin, PREFIX.idx, PREFIX.json, PREFIX.mask.bin, PREFIX.mask.idx."""
    return prefix + ".bin", prefix + ".idx", prefix + ".json", *mask_paths(prefix)


def mask_paths(prefix: str) -> tuple[str, str]:
    """A chat store's loss-mask files: PREFIX.mask.bin, PREFIX.mask.idx."""
    return prefix + ".mask.bin", prefix + ".mask.idx"


def make_parents(prefix: str) -> None:
    """Create the missing directories above `prefix` (with the umask, as mkdir -p would)."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)


def temp_path(final_path: str) -> str:
    """A unique temporary name beside `final_path` (same directory, so rename is atomic)."""
    directory, name = os.path.split(os.path.abspath(final_path))
    fd, path = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    os.close(fd)
    return path


def remove_stale_temporaries(prefix: str) -> None:
    """Delete the temporaries of a store's files and journal left by writers that died.

    One directory scan; a temporary is ``.NAME.PID.XXXX.tmp`` and is stale when PID is gone.
    """
    directory, base = os.path.split(os.path.abspath(prefix))
    heads = tuple(f".{os.path.basename(path)}." for path in (*store_paths(base), journal_path(base)))
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.endswith(".tmp") and name.startswith(heads)):
            continue
        head = next(h for h in heads if name.startswith(h))
        pid_text = name[len(head) :].split(".", 1)[0]
        if pid_text.isdigit() and not process_alive(int(pid_text)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass  # gone already, or a directory we may only read: leave it


def recover(prefix: str, *, clean: bool = False) -> None:
    """Finish an interrupted publication at `prefix`, then delete what dead writers left there.

    Temporaries are deleted only after the journal is rolled forward (they may be the very files
    it still has to rename), and only when a journal was found or `clean` is asked (by writers):
    readers of an intact store do not scan its directory.
    """
    if _replay_journal(prefix) or clean:
        remove_stale_temporaries(prefix)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    fault_point("commit.fsync_dir")
    try:
        fsync_path(directory or ".")
    except OSError:
        pass  # some file systems cannot fsync a directory; the renames are still atomic


def publish(prefix: str, renames: list[tuple[str, str]], removes: tuple[str, ...] | list[str] = ()) -> None:
    """Move every (temporary, final) pair into place and delete `removes`, as one unit, via a journal."""
    for temporary, _ in renames:
        publish_mode(temporary)
        fault_point("commit.fsync")
        fsync_path(temporary)
    journal = journal_path(prefix)
    staged = temp_path(journal)
    with open(staged, "w", encoding="utf-8") as f:
        json.dump({"renames": renames, "removes": list(removes)}, f)
        fault_point("commit.journal")
        f.flush()
        os.fsync(f.fileno())
    fault_point("commit.rename")
    os.replace(staged, journal)
    _fsync_dir(os.path.dirname(os.path.abspath(prefix)))
    roll_forward(prefix)


def roll_forward(prefix: str) -> bool:
    """Finish a publication that was interrupted (True), or do nothing but one stat (False)."""
    return _replay_journal(prefix)


class _Journal(Document, frozen=True):
    """A publication's plan: (temporary, final) renames, then files to remove."""

    renames: list[tuple[Text, Text]]
    removes: list[Text] = []


def _read_journal(prefix: str, journal: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The journal's renames and removes as paths in the journal's directory (where the writer put them,
    whatever the directory it was run from), each a file of this store or its temporary; CorruptStoreError
    naming the journal and the entry otherwise (a journal naming any other file is not followed:
    replaying it could move or delete what is not the store's)."""
    remedy = "delete it and rebuild the store"
    try:
        plan = read_document(journal, _Journal, remedy=remedy, error=CorruptStoreError)
    except FileNotFoundError:  # a concurrent reader finished it first
        return [], []
    directory = os.path.dirname(os.path.abspath(journal))
    names = {os.path.basename(path) for path in store_paths(prefix)}

    def inside(path: str, field: str, temporary: bool) -> str:
        name = os.path.basename(path)
        ok = _is_temporary_of(name, names) if temporary else name in names
        if not ok:
            raise CorruptStoreError(f"{journal}: {field} names {path!r}, not a file of the store {prefix}; {remedy}")
        return os.path.join(directory, name)

    pairs = [
        (inside(tmp, f"renames[{k}][0]", True), inside(final, f"renames[{k}][1]", False))
        for k, (tmp, final) in enumerate(plan.renames)
    ]
    removes = [inside(path, f"removes[{k}]", False) for k, path in enumerate(plan.removes)]
    return pairs, removes


def _is_temporary_of(name: str, finals: set[str]) -> bool:
    """Whether ``name`` is a `temp_path` name (``.FINAL.PID.XXXX.tmp``) of one of ``finals``."""
    return name.endswith(".tmp") and any(name.startswith(f".{final}.") for final in finals)


def _replay_journal(prefix: str) -> bool:
    """roll_forward's work (recover calls it directly, so tests that wrap publish's call see only that)."""
    journal = journal_path(prefix)
    if not os.path.exists(journal):
        return False
    pairs, removes = _read_journal(prefix, journal)
    for temporary, final in pairs:
        if os.path.exists(temporary):
            fault_point("commit.rename")
            os.replace(temporary, final)
    for path in removes:
        if os.path.exists(path):
            fault_point("commit.remove")
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass  # a concurrent reader removed it first
    _fsync_dir(os.path.dirname(os.path.abspath(prefix)))
    fault_point("commit.unlink")
    try:
        os.unlink(journal)
    except FileNotFoundError:
        pass  # a concurrent reader finished it first
    return True

"""The identity of a run's inputs: each file's path, size, version and a digest of its stored bytes.

A run records it (in ``.work/state.json`` while unfinished, in ``tokenport.json`` once finished) and
a rerun compares it with the inputs as they are now, so a changed input is never answered with an
output made from its old bytes. The comparison, per file: the list of files must be the same (a file
added to an input directory, or removed, is a change); a different size is a change; the same size
and version (``size:mtime_ns`` of a local file, the ETag of an object) is the same content, taken
without reading it; the same size with another version is a change only if the digest of the bytes
differs too (so a ``touch``, or a copy that kept the bytes, needs no rebuild). A rewrite that keeps
both the size and the nanosecond modification time is not seen (rerun with ``overwrite=True`` /
``--force`` to rebuild regardless). Object-store inputs carry no digest: their ETag stands for it.

The digests cost one extra read of each local file, done where it is cheap: by the worker that
has just read a whole file (from the page cache), and, for files cut into slices, on a thread of
the caller while the units run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..._schema import Count, Document, Text
from ...storage import is_remote
from ..inputs.sources import InputFile, open_raw

if TYPE_CHECKING:  # units imports inflate, which imports state, which imports this
    from .units import Slice, Unit

_READ = 1 << 20


class InputIdentity(Document, frozen=True):
    """One input file as a run read it: where, how big, its version tag and (local files) a digest."""

    path: Text
    size: Count
    version: str
    digest: str | None = None


def file_digest(path: str, stop: Callable[[], bool] = lambda: False) -> str:
    """The sha256 of the stored (still compressed) bytes of the input file ``path`` ("" once `stop()`)."""
    digest = hashlib.sha256()
    with open_raw(path) as f:
        while block := f.read(_READ):
            if stop():
                return ""
            digest.update(block)
    return digest.hexdigest()


def read_whole(piece: Slice) -> bool:
    """Whether reading ``piece`` reads every stored byte of a local file (its worker then digests it)."""
    return piece.stop is None and piece.inflated is None and not is_remote(piece.path)


def planner_digests(
    files: Sequence[InputFile], units: Sequence[Unit], stop: Callable[[], bool] = lambda: False
) -> dict[str, str]:
    """Digests of the local files that no single slice reads whole (cut into ranges, row groups or
    decompressed chunks): read once more by the caller, as the workers see only parts of them;
    an early `stop()` leaves the rest out."""
    whole = {piece.path for unit in units for piece in unit.slices if read_whole(piece)}
    digests = {}
    for f in files:
        if f.path not in whole and not is_remote(f.path) and not stop():
            digests[f.path] = file_digest(f.path, stop)
    return digests


def identify(files: Sequence[InputFile], digests: Mapping[str, str] | None = None) -> list[InputIdentity]:
    """The identity of each of ``files`` (with its digest where ``digests`` has one)."""
    digests = digests or {}
    return [InputIdentity(path=f.path, size=f.size, version=f.version, digest=digests.get(f.path)) for f in files]


def changed_input(recorded: Iterable[InputIdentity], files: Sequence[InputFile]) -> str | None:
    """How the first input that is not as ``recorded`` differs (naming it), or None when none does."""
    before = {entry.path: entry for entry in recorded}
    now = {f.path: f for f in files}
    for path in now:
        if path not in before:
            return f"{path} is a new input (not read by the earlier run)"
    for path, entry in before.items():
        if path not in now:
            return f"{path} was read by the earlier run and is no longer among the inputs"
        file = now[path]
        if file.size != entry.size:
            return f"{path} changed since the earlier run read it (size {entry.size:,} -> {file.size:,} bytes)"
        if file.version == entry.version:
            continue
        if entry.digest is None or is_remote(path) or file_digest(path) != entry.digest:
            return f"{path} changed since the earlier run read it (same size, other content or version)"
    return None


def changed_while_read(files: Sequence[InputFile]) -> str | None:
    """The first local input whose size or modification time is not what planning saw (it was written
    while the run read it), or None."""
    for f in files:
        if is_remote(f.path):
            continue
        try:
            st = os.stat(f.path)
        except OSError:
            return f"{f.path} was removed while prepare read it"
        if f"{st.st_size}:{st.st_mtime_ns}" != f.version:
            return f"{f.path} was written while prepare read it"
    return None

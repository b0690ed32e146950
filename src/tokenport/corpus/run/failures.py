"""An OS error while prepare writes (disk full, permissions, a file in the way), reported naming the
output the user gave and what to do, with the internal work or staging path second."""

from __future__ import annotations

import errno
import os

from ...errors import StorageError

__all__ = ["output_failure"]

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
_IN_THE_WAY = (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY)


def output_failure(output: str, local: str, exc: OSError) -> StorageError | None:
    """The StorageError to raise for `exc` met while preparing into `output` (written locally under
    `local`: the directory itself, or an object-store output's staging directory); None when `exc`
    names a file outside it (an input's error, reported as it is)."""
    where = os.fspath(exc.filename) if exc.filename is not None else None
    root = os.path.abspath(local)
    if where is not None and not _within(os.path.abspath(where), root):
        return None
    reason = exc.strerror or str(exc) or type(exc).__name__
    at = f" (at {where})" if where is not None and os.path.abspath(where) != os.path.abspath(output) else ""
    if exc.errno in _FULL:
        fix = (
            f"free space on the disk holding {root} (it needs room for the stores and the work files under .work/), "
            "or pass another -o/--output on a larger disk, then run the same command again"
        )
    elif exc.errno in _DENIED:
        fix = f"make {root} writable by this user, or pass another -o/--output"
    elif exc.errno in _IN_THE_WAY:
        fix = f"{where or root} is in the way: remove it, or pass another -o/--output"
    else:
        fix = f"check {root} and the disk holding it, then run the same command again"
    return StorageError(f"{output}: cannot write the prepared output: {reason}{at}; {fix}")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

"""Publishing a checkpoint directory whole: a staged copy swapped in for the old one by two renames.

Both dock checkpoints (``Dock.save`` and the TransferQueue adapter's ``save_checkpoint``) publish
this way: the old ``NAME`` is moved to ``NAME.old``, the staged directory renamed to ``NAME``,
``NAME.old`` removed. A swap cut between its renames leaves ``NAME.old`` without ``NAME``: the old
checkpoint is whole there, and the next swap renames it back first. Each caller passes its own
kill point (directed-kill tests end the process after each step).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

__all__ = ["swap_in"]


def swap_in(staging: str, target: str, kill_point: Callable[[], None]) -> None:
    """Put ``staging`` where ``target`` is, keeping the old one until the new one is in place."""
    old = target + ".old"
    if not os.path.exists(target) and os.path.isdir(old):
        os.rename(old, target)  # an earlier swap was cut between its renames: the old checkpoint is whole
        kill_point()
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(target):
        os.rename(target, old)
        kill_point()
    os.rename(staging, target)
    kill_point()
    shutil.rmtree(old, ignore_errors=True)
    kill_point()

"""Forked worker processes start without a garbage-collection storm.

A child's first full collection walks every object it inherited and so writes to every page that
holds one: copy-on-write copies the parent's heap, ~0.1 s per DataLoader worker of a process that
imported torch, before its first batch. Freezing the collector's objects just before a fork moves
them where the child never scans; the parent takes them back at once. Registered once per process.
"""

from __future__ import annotations

import gc
import os

_registered = False


def keep_forked_heaps_shared() -> None:
    """Freeze the collector's objects across every fork of this process (idempotent)."""
    global _registered
    if not _registered:
        _registered = True
        os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze)

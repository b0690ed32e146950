"""Remote sources across fork: in a forked child every open source drops the parent's client,
threads, locks and in-memory blocks (each is made anew on first use), and the process-wide memory
pool starts empty. The parent's clients are kept, unused, so their finalizers never run in the child."""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol

from .._fork import keep_forked_heaps_shared
from .blocks import MEMORY


class ForkSafe(Protocol):
    """A source that makes its client, threads and caches anew in a forked child."""

    def _after_fork(self) -> None: ...


_FORKED_CLIENTS: list[Any] = []
"""File systems the parent made, kept unused in a forked child so their finalizers never run there."""

_SOURCES: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every open source of this process, made fork-safe in a forked child."""


def track(source: ForkSafe) -> None:
    """Make `source` fork-safe: its `_after_fork` runs in every forked child of this process."""
    _SOURCES.add(source)


def keep_client(client: Any) -> None:
    """Keep a client the parent made alive (and unused) in this forked child."""
    _FORKED_CLIENTS.append(client)


def _after_fork_in_child() -> None:
    MEMORY.after_fork()
    for source in list(_SOURCES):
        source._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
keep_forked_heaps_shared()

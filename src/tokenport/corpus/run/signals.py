"""SIGTERM handled as Ctrl-C, so a `prepare` stopped by a supervisor stops as cleanly as one interrupted."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises KeyboardInterrupt in the main thread (the previous handler comes back
    after); elsewhere than the main thread, nothing changes (only it may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

"""The demo's echo with progress: no stage stays silent longer than a heartbeat interval.

Every line goes through one callback (``print`` for the command, a list's ``append`` in tests), from
the demo's thread or from a heartbeat thread, one whole line per call under a lock, so lines never
interleave. The heartbeat says which stage is running, what it is doing and for how long, only when
nothing was echoed for ``interval`` seconds; work with units (training steps) reports ``step 8/24``
through `step`, at most once per interval. Lines are plain (no carriage-return animation), so the
output reads the same on a terminal, in a pipe and in a log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from ..errors import ConfigError

Echo = Callable[[str], None]

HEARTBEAT_SECONDS = 2.0
"""How long the demo may run without printing before a progress line says what is running."""


class Progress:
    """A callable echo that also reports what a stage is doing; ``with progress:`` runs the heartbeat."""

    def __init__(self, echo: Echo = print, *, interval: float | None = None) -> None:
        """`interval`: seconds of silence before a progress line (default HEARTBEAT_SECONDS; 0 reports every unit)."""
        self._echo = echo
        interval = HEARTBEAT_SECONDS if interval is None else interval
        if not 0 <= interval < float("inf"):
            raise ConfigError(f"interval={interval}: the heartbeat interval must be a number of seconds, 0 or more")
        self.interval = interval
        self._lock = threading.Lock()
        self._stage = "starting"
        self._what = ""
        self._since = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, line: str) -> None:
        """Echo `line`; a stage's heading (``== N. title: ...``) names the stage later progress lines are about."""
        with self._lock:
            heading = line.lstrip("\n")
            if heading.startswith("== "):
                self._stage, self._what = heading[3:].split(":")[0], ""
                self._since = time.monotonic()
            self._emit(line)

    def doing(self, what: str) -> None:
        """Name the work the stage starts now (its elapsed seconds count from here)."""
        with self._lock:
            self._what, self._since = what, time.monotonic()

    def step(self, done: int, total: int, what: str, unit: str = "step") -> None:
        """Report `done` of `total` units of `what`; echoed when the demo has been silent for an interval."""
        with self._lock:
            self._what = f"{what}, {unit} {done}/{total}"
            if time.monotonic() - self._last >= self.interval:
                self._emit(self._line())

    def __enter__(self) -> Progress:
        self._stop.clear()
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="tokenport-demo-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _beat(self) -> None:
        """The heartbeat thread: a progress line whenever nothing was echoed for an interval."""
        while not self._stop.wait(min(max(self.interval / 4, 0.01), 0.5)):
            with self._lock:
                if self._stop.is_set() or time.monotonic() - self._last < self.interval:
                    continue
                try:
                    self._emit(self._line())
                except Exception:  # noqa: BLE001 - e.g. a closed pipe: the demo's own next echo reports it
                    return

    def _line(self) -> str:
        """The progress line: the stage, what it is doing, its elapsed seconds."""
        what = f"{self._what}, " if self._what else ""
        return f"  ... {self._stage}: {what}{time.monotonic() - self._since:.0f} s"

    def _emit(self, line: str) -> None:
        """Echo one line (the lock held) and note when."""
        self._echo(line)
        self._last = time.monotonic()

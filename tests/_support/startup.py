"""Helpers for the start-up tests: a step that holds each process's first document until another
process has one too (so a test knows two workers got work), and a byte tokenizer whose worker
copies start only once a gate file exists (so a test knows a run did not wait for them)."""

from __future__ import annotations

import os
import time

from tokenport.corpus.steps.base import Step
from tokenport.tokenizers.byte import ByteTokenizer

WAIT_SECONDS = 60.0


class Rendezvous(Step):
    """Pass documents on unchanged; the first in each process waits (up to WAIT_SECONDS) until
    `expect` processes have each written their pid under `directory`."""

    def __init__(self, directory: str, expect: int = 2) -> None:
        super().__init__()
        self.directory = directory
        self.expect = expect
        self.met = False

    def transform(self, text: str) -> str:
        if not self.met:
            open(os.path.join(self.directory, str(os.getpid())), "w").close()
            deadline = time.monotonic() + WAIT_SECONDS
            while len(os.listdir(self.directory)) < self.expect and time.monotonic() < deadline:
                time.sleep(0.01)
            self.met = True
        return text


class GatedBytes(ByteTokenizer):
    """The byte tokenizer, under the spec ``gated:DIRECTORY#PID``."""

    def __init__(self, spec: str) -> None:
        super().__init__()
        self.gated = spec

    def spec(self) -> str:
        return self.gated


def gated(spec: str) -> GatedBytes:
    """A GatedBytes; in any process but PID, first wait (up to WAIT_SECONDS) for DIRECTORY/open,
    writing DIRECTORY/timed-out if it never came."""
    directory, _, owner = spec.removeprefix("gated:").partition("#")
    if os.getpid() != int(owner):
        deadline = time.monotonic() + WAIT_SECONDS
        while not os.path.exists(os.path.join(directory, "open")):
            if time.monotonic() > deadline:
                open(os.path.join(directory, "timed-out"), "w").close()
                break
            time.sleep(0.01)
    return GatedBytes(spec)

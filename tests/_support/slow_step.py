"""A cleaning step that changes nothing and takes its time: keeps a prepare run busy long enough to be
interrupted part way (workers import it by this module's name)."""

from __future__ import annotations

import time

from tokenport.corpus.steps.base import Step


class Slow(Step):
    """Pass every document on unchanged after `seconds`."""

    def __init__(self, seconds: float = 0.01) -> None:
        super().__init__()
        self.seconds = seconds

    def transform(self, text: str) -> str:
        time.sleep(self.seconds)
        return text

"""Reopening a blend without reading every manifest: a stat record beside its index cache entry.

A blend's cache key needs each store's content identity, which is in its manifest, and reading
thousands of manifests was most of a reopen. So after a blend's entry is loaded or built, a record
is written beside the cache: the stores' absolute prefixes, for each store the (device, inode, size,
mtime_ns, ctime_ns) of PREFIX.json, .idx and .bin, its StoreFacts, and the entry key. A later
build of the same prefixes and parameters that finds every one of those stats unchanged takes the
key and facts from the record; any difference reads the manifests again (content addressing is
kept: the record only says the files are the ones whose manifests were read). A file whose times
lie within ``RACY_NS`` of the record's writing is not trusted (a write in the same clock tick keeps
its mtime: git's "racily clean" entries), nor is a chat store (its mask files are content too).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from .._files import process_alive
from .._schema import Count, Document, Text, decode
from ..errors import TokenportError
from ..indexed import IndexedDataset, StoreFacts
from ..indexed.commit import fault_point
from ..storage import is_remote
from .cache import canonical_json

logger = logging.getLogger(__name__)

RECORD_FORMAT = "tokenport.stat-record/2"  # /2: facts hold the tokenizer identity, and a digest; /1 is read again
RACY_NS = 2_000_000_000  # files changed this close to the record's writing are read again next time
_SUFFIXES = (".json", ".idx", ".bin")


class StatRecord:
    """The stat record of one blend (its prefixes and cache parameters) in cache directory ``directory``."""

    def __init__(self, directory: str, prefixes: Sequence[str], params: dict[str, Any]) -> None:
        self.prefixes = [os.path.abspath(p) for p in prefixes]
        name = hashlib.sha256(
            canonical_json({"format": RECORD_FORMAT, "prefixes": self.prefixes, "params": params}).encode("utf-8")
        ).hexdigest()
        self.path = os.path.join(directory, f"stat-{name}.json")
        self.usable = not any(is_remote(p) for p in prefixes)
        self._found = b""  # the record's bytes as lookup read them: an equal record is not rewritten

    def stats(self) -> list[list[int] | None]:
        """Each store's stat row now (None for a store with a file missing)."""
        rows: list[list[int] | None] = []
        for prefix in self.prefixes:
            row: list[int] | None = []
            for suffix in _SUFFIXES:
                try:
                    s = os.stat(prefix + suffix)
                except OSError:
                    row = None
                    break
                row += [s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns]  # type: ignore[operator]
            rows.append(row)
        return rows

    def lookup(self) -> tuple[str, list[StoreFacts]] | None:
        """The entry key and every store's facts when the record exists and no store changed since; else None.

        A record that is damaged (not the document `write` makes, or not matching its digest) is
        no shortcut: None, and the manifests are read again (and the record rewritten).
        """
        if not self.usable:
            return None
        try:
            with open(self.path, "rb") as f:
                self._found = f.read()
        except OSError:
            return None
        try:
            record = decode(self._found, _Record, where=self.path, remedy="it is rewritten")
        except TokenportError as exc:
            logger.info("%s", exc)
            return None
        if record.prefixes != self.prefixes or len(record.facts) != len(self.prefixes):
            return None
        if any(row is None for row in record.stats) or [list(row or ()) for row in record.stats] != self.stats():
            return None
        return record.key, [StoreFacts(n, eod, tokenizer) for n, eod, tokenizer in record.facts]

    def write(self, stats: list[list[int] | None], stores: Sequence[IndexedDataset], key: str) -> None:
        """Record ``key`` with ``stats`` (taken before the manifests were read) and the stores' facts;
        a failure to write is ignored (the record is only a shortcut)."""
        if not self.usable:
            return
        now = time.time_ns()
        rows: list[list[int] | None] = []
        facts: list[list[int | str | None]] = []
        for row, store in zip(stats, stores):
            manifest = store.manifest  # the one the key was made from (not facts a store was made with)
            known = None if manifest is None else StoreFacts.of(manifest)
            racy = row is None or max(row[3::5] + row[4::5]) >= now - RACY_NS
            chat = manifest is None or manifest.masks is not None
            rows.append(None if racy or chat or known is None else row)
            facts.append([0, None, None] if known is None else [known.sequences, known.eod_id, known.tokenizer])
        body = {"format": RECORD_FORMAT, "prefixes": self.prefixes, "key": key, "stats": rows, "facts": facts}
        text = json.dumps({**body, "digest": _digest(body)}, separators=(",", ":"))
        if text.encode("utf-8") == self._found:  # e.g. stores too recent to trust, again: nothing to record
            return
        directory = os.path.dirname(self.path)
        base = os.path.basename(self.path)
        try:
            _remove_stale(directory, base)
            fd, temporary = tempfile.mkstemp(prefix=f".{base}.{os.getpid()}.", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                fault_point("stat_record.replace")
                os.replace(temporary, self.path)  # readers see the old record or the new one, never half
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass


def _remove_stale(directory: str, base: str) -> None:
    """Delete temporaries of the record ``base`` (``.BASE.PID.XXXX.tmp``) whose writer is dead (killed mid-write)."""
    head = f".{base}."
    for name in os.listdir(directory):
        if name.startswith(head) and name.endswith(".tmp"):
            pid = name[len(head) :].split(".", 1)[0]
            if pid.isdigit() and not process_alive(int(pid)):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass  # gone already


class _Record(Document, frozen=True):
    """The stat record as `StatRecord.write` writes it; ``digest`` covers the rest (a damaged record is no shortcut)."""

    format: Text
    prefixes: list[str]
    key: Text
    stats: list[tuple[int, ...] | None]
    facts: list[tuple[Count, Count | None, str | None]]
    digest: Text

    def __post_init__(self) -> None:
        if self.format != RECORD_FORMAT:
            raise ValueError(f"expected {RECORD_FORMAT!r} - at `$.format`")
        width = 5 * len(_SUFFIXES)
        if len(self.stats) != len(self.prefixes) or any(row is not None and len(row) != width for row in self.stats):
            raise ValueError("expected one row of stats (or null) per prefix - at `$.stats`")
        body = {
            "format": self.format,
            "prefixes": self.prefixes,
            "key": self.key,
            "stats": [None if row is None else list(row) for row in self.stats],
            "facts": [list(row) for row in self.facts],
        }
        if self.digest != _digest(body):
            raise ValueError("the record does not match its digest - at `$.digest`")


def _digest(body: dict[str, Any]) -> str:
    """sha256 of a record's body as canonical JSON."""
    return hashlib.sha256(canonical_json(body, "stat record").encode("utf-8")).hexdigest()

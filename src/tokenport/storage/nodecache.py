"""A block cache on local disk shared by every process of a machine (DataLoader workers, ranks), so
each block of a remote object is downloaded once per node and a warm restart reads it from disk.

Layout: ``DIR/<object key>/<block>.blk`` (the block's bytes, renamed into place complete) beside an
empty ``<block>.lock`` taken with ``flock`` by the one process fetching it; the others wait on that
lock, then read the file. ``DIR/.usage`` holds the bytes of all blocks, changed under ``DIR/.lock``:
a block is written (its bytes counted before they reach the disk) only if the budget holds after
evicting the least recently used blocks that no live process has pinned (``DIR/.pins/<pid>-<n>``:
the blocks its reads and prefetch window need next); otherwise it is served from memory and not
kept. So one worker never evicts the blocks another fetched for the batch it is about to read.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .._files import process_alive
from ..errors import CorruptStoreError, StorageError

__all__ = ["NodeCache"]


class NodeCache:
    """Blocks of remote objects in `directory`, holding at most `budget_bytes` of block data on disk."""

    def __init__(self, directory: str | os.PathLike, budget_bytes: int) -> None:
        self.directory = Path(directory)
        self.budget_bytes = budget_bytes
        self._root = os.fspath(self.directory)
        self._pins = self.directory / ".pins"
        self._pinning = False  # this object's pin file holds blocks
        try:
            self._pins.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"{self.directory}: cannot create the node block cache ({exc.strerror or exc}); "
                "give RemoteOptions.node_cache_dir a writable directory"
            ) from exc

    @staticmethod
    def key(url: str, size: int, etag: str | None, block_size: int) -> str:
        """The directory name of one version of one object cut in blocks of `block_size`."""
        return hashlib.sha256(f"{url}\n{size}\n{etag}\n{block_size}".encode()).hexdigest()[:32]

    def _block(self, key: str, index: int) -> str:
        return f"{self._root}/{key}/{index}.blk"

    def read(self, key: str, index: int, start: int, length: int) -> bytes | None:
        """`length` bytes at `start` of a cached block, or None when it is not on disk."""
        try:
            fd = os.open(self._block(key, index), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            data = os.pread(fd, length, start)
        finally:
            os.close(fd)
        if len(data) != length:  # blocks are renamed into place whole: a short one was damaged since
            raise CorruptStoreError(
                f"{self._block(key, index)}: the node cache's block holds {start + len(data)} bytes where "
                f"{start + length} were read from it; delete {self._root} (the node block cache) and rerun"
            )
        return data

    def has(self, key: str, index: int) -> bool:
        """True when the block is on disk now."""
        return os.path.exists(self._block(key, index))

    def try_claim(self, key: str, index: int) -> int | None:
        """Take the block's fetch lock if free: its descriptor (give it to `release`), else None."""
        return self._lock(key, index, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def wait_claim(self, key: str, index: int) -> int:
        """Take the block's fetch lock, waiting while another process or thread fetches the block."""
        fd = self._lock(key, index, fcntl.LOCK_EX)
        assert fd is not None
        return fd

    @staticmethod
    def release(fd: int) -> None:
        """Give back a fetch lock."""
        os.close(fd)

    def _lock(self, key: str, index: int, how: int) -> int | None:
        folder = self.directory / key
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def put(self, key: str, blocks: Mapping[int, bytes], keep: Collection[tuple[str, int]] = ()) -> set[int]:
        """Publish blocks of one object (call holding their claims) with one reservation of room; the
        indices published: those that did not fit the budget without evicting a block in `keep` (those
        this process reads soon) were not."""
        sizes = {index: len(data) for index, data in blocks.items() if len(data) <= self.budget_bytes}
        with self._ledger() as ledger:  # room is made and counted before the bytes touch the disk
            used, need = ledger.used, sum(sizes.values())
            if used + need > self.budget_bytes:
                used -= self._evict(used + need - self.budget_bytes, keep)
            chosen = []
            for index, size in sizes.items():
                if used + size <= self.budget_bytes:
                    chosen.append(index)
                    used += size
            ledger.used = used
        published: set[int] = set()
        try:
            for index in chosen:
                self._write(key, index, blocks[index])
                published.add(index)
        finally:
            if refund := sum(sizes[index] for index in chosen if index not in published):
                with self._ledger() as ledger:
                    ledger.used -= refund
        return published

    def _write(self, key: str, index: int, data: bytes) -> None:
        target = self._block(key, index)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{index}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def pin(self, blocks: Collection[tuple[str, int]]) -> None:
        """Protect `blocks` (key, index) from eviction by any process until the next `pin` or `unpin`
        of this cache object: the blocks this process reads next. While the blocks on disk fill less
        than half the budget no put evicts, so nothing is written (a pin per batch was a third of a
        cold run's time); a block evicted all the same is fetched again by its reader."""
        if blocks and not self._crowded():
            blocks = ()
        if not blocks and not self._pinning:
            return
        path = self._pins / f"{os.getpid()}-{id(self)}"
        text = "".join(f"{key} {index}\n" for key, index in blocks)
        with self._ledger():  # an evicting process reads the pins under the same lock
            self._pinning = bool(text)
            if not text:
                path.unlink(missing_ok=True)
                return
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    def _crowded(self) -> bool:
        """True when the ledger says blocks fill half the budget or more (read without its lock)."""
        try:
            with open(f"{self._root}/.usage", "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return False
        try:
            return int(text) * 2 >= self.budget_bytes
        except ValueError:
            return True

    def unpin(self) -> None:
        """Drop this cache object's pins."""
        self.pin(())

    def _pinned(self) -> set[tuple[str, int]]:
        """The blocks pinned by live processes (pins of dead ones are removed)."""
        pinned: set[tuple[str, int]] = set()
        for entry in os.scandir(self._pins):
            pid, _, rest = entry.name.partition("-")
            if not pid.isdigit() or rest.endswith(".tmp"):
                continue
            if not process_alive(int(pid)):
                Path(entry.path).unlink(missing_ok=True)
                continue
            try:
                text = Path(entry.path).read_text()
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                key, _, index = line.partition(" ")
                pinned.add((key, int(index)))
        return pinned

    def used_bytes(self) -> int:
        """Bytes of block data on disk now, by the ledger."""
        with self._ledger() as ledger:
            return ledger.used

    def _evict(self, needed: int, keep: Collection[tuple[str, int]]) -> int:
        """Delete least recently written blocks, neither in `keep` nor pinned by a live process, until
        `needed` bytes are freed; bytes freed."""
        keep = self._pinned().union(keep)
        blocks = []
        for folder in os.scandir(self.directory):
            if not folder.is_dir() or folder.name == ".pins":
                continue
            for entry in os.scandir(folder.path):
                if entry.name.endswith(".blk"):
                    index = int(entry.name[:-4])
                    if (folder.name, index) not in keep:
                        stat = entry.stat()
                        blocks.append((stat.st_mtime_ns, entry.path, stat.st_size))
        blocks.sort()
        freed = 0
        for _, path, size in blocks:
            if freed >= needed:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            freed += size
        return freed

    @contextmanager
    def _ledger(self) -> Iterator[_Ledger]:
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            path = f"{self._root}/.usage"
            try:
                with open(path, "rb") as f:
                    used, known = int(f.read() or 0), True
            except (FileNotFoundError, ValueError):
                used, known = self._scan(), False
            ledger = _Ledger(used)
            yield ledger
            if ledger.used != used or not known:
                tmp = f"{path}.{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(str(ledger.used).encode())
                os.replace(tmp, path)
        finally:
            os.close(fd)

    def _scan(self) -> int:
        """Bytes of all blocks on disk (when the ledger is missing or unreadable)."""
        total = 0
        for folder in os.scandir(self.directory):
            if folder.is_dir() and folder.name != ".pins":
                total += sum(e.stat().st_size for e in os.scandir(folder.path) if e.name.endswith(".blk"))
        return total


class _Ledger:
    __slots__ = ("used",)

    def __init__(self, used: int) -> None:
        self.used = used

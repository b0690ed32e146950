"""A block cache on local disk shared by every process of a machine (DataLoader workers, ranks), so
each block of a remote object is downloaded once per node and a warm restart reads it from disk.

Layout: ``DIR/<object key>/<block>.blk`` (the block's bytes with a checksum per 16 KiB chunk,
`blockfile.py`, renamed into place complete; every read from disk checks the chunks it touches)
beside an empty ``<block>.lock`` taken with ``flock`` by the one process fetching it; the others
wait on that lock, then read the file. ``DIR/.usage`` (the `Ledger`) holds the bytes of all block
files and the reservations of writers, changed under ``DIR/.lock``: a block is written (its bytes
counted before they reach the disk) only if the budget holds after evicting the least recently
used blocks that no live process has pinned (``DIR/.pins/<pid>-<n>``, `Pins`: the blocks its reads
and prefetch window need next); otherwise it is served from memory and not kept. So one worker
never evicts the blocks another fetched for the batch it is about to read. Files in DIR the cache
did not write are neither counted nor deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import msgspec

from .._files import process_alive
from .._schema import Count, Document, decode, encode
from ..errors import CorruptStoreError, StorageError
from . import blockfile

__all__ = ["NodeCache"]

logger = logging.getLogger(__name__)

FAULT_ENV = "TOKENPORT_FAULT_AT"
"""NAME:N ends the process (os._exit, as a kill would) at the Nth node-cache write step named like
NAME (`nodecache.ledger`, `nodecache.evict`, `nodecache.write`, `nodecache.rename`; `nodecache.evict` is
also a damaged block's removal): the kill tests' hook."""
FAULT_EXIT_CODE = 86

_BLOCK = re.compile(r"(0|[1-9][0-9]*)\.blk")
_TEMP = re.compile(r"\.(?:0|[1-9][0-9]*)\.([1-9][0-9]*)\.tmp")
_PIN = re.compile(r"([1-9][0-9]*)-([0-9]+)(\.tmp)?")

BlockKey = Annotated[str, msgspec.Meta(pattern="^[^./\\s][^/\\s]{0,254}$")]
Pid = Annotated[str, msgspec.Meta(pattern="^[1-9][0-9]{0,9}$")]


class Ledger(Document, frozen=True):
    """DIR/.usage: bytes of the block files on disk plus those reserved by writers still writing
    (`writers`: pid -> bytes reserved and not yet published). A dead writer's reservation is
    rolled back by the next process that takes the ledger: it counts the disk again."""

    used: Count
    writers: dict[Pid, Count] = {}

    def __post_init__(self) -> None:
        if sum(self.writers.values()) > self.used:
            raise ValueError("writers reserve more bytes than `used` counts - at `$.writers`")


class Pins(Document, frozen=True):
    """DIR/.pins/PID-N: the blocks (key, index) a live process reads next, kept from eviction."""

    blocks: list[tuple[BlockKey, Count]]


_LEDGER_REMEDY = "the node cache counts its disk again; delete the file if this repeats"
_PINS_REMEDY = "it is skipped; delete it if its process is gone"


def read_ledger(path: str, data: bytes) -> Ledger:
    """The ledger in `data` (read from `path`); a bare count, as earlier versions wrote, is read too."""
    if data.strip().isdigit():
        return Ledger(used=decode(data, Count, where=path, remedy=_LEDGER_REMEDY))
    return decode(data, Ledger, where=path, remedy=_LEDGER_REMEDY)


def read_pins(path: str, data: bytes) -> set[tuple[str, int]]:
    """The blocks a pin file holds; lines of "KEY INDEX", as earlier versions wrote, are read too."""
    if not data.lstrip().startswith(b"{"):
        lines = []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = "\0"
        for line in text.splitlines():
            key, _, index = line.partition(" ")
            lines.append([key, int(index) if index.isascii() and index.isdigit() else index])
        return set(decode({"blocks": lines}, Pins, where=path, remedy=_PINS_REMEDY).blocks)
    return set(decode(data, Pins, where=path, remedy=_PINS_REMEDY).blocks)


_fault_hits: dict[str, int] = {}


def _fault(step: str) -> None:
    """End the process here if FAULT_ENV names this step and count (kill tests)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, count = spec.rpartition(":")
    if step.startswith(name):
        _fault_hits[spec] = hits = _fault_hits.get(spec, 0) + 1
        if hits == int(count):
            os._exit(FAULT_EXIT_CODE)


class DamagedBlock(CorruptStoreError):
    """A block file of the node cache fails its checksums (its reader drops it and fetches it again)."""


class NodeCache:
    """Blocks of remote objects in `directory`, holding at most `budget_bytes` of block files on disk.

    Only what it wrote is counted or evicted: files `KEY/N.blk` beside the `KEY/N.lock` they were
    published under; any other file or folder there is left alone.
    """

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
        layout = f"blocks-v2-{blockfile.ALGORITHM}"
        return hashlib.sha256(f"{url}\n{size}\n{etag}\n{block_size}\n{layout}".encode()).hexdigest()[:32]

    def block_path(self, key: str, index: int) -> str:
        """The file of one block."""
        return f"{self._root}/{key}/{index}.blk"

    def read(self, key: str, index: int, start: int, length: int) -> bytes | memoryview | None:
        """`length` (>= 1) bytes at `start` of a cached block, checked against the checksums written with
        them, or None when the block is not on disk; DamagedBlock when they fail (`drop` it)."""
        path = self.block_path(key, index)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._damaged(path, f"cannot be opened ({exc.strerror or exc})") from None
        try:
            at, size = blockfile.span(start, length)
            raw = os.pread(fd, size, at)
        except OSError as exc:
            raise self._damaged(path, f"cannot be read ({exc.strerror or exc})") from None
        finally:
            os.close(fd)
        data = blockfile.decode(raw, index, start, length)
        if data is None:
            raise self._damaged(path, f"fails its checksums (bytes {start}-{start + length} were read from it)")
        return data

    def _damaged(self, path: str, what: str) -> DamagedBlock:
        return DamagedBlock(
            f"{path}: this block of the node cache {what}; delete {self._root} (the node block cache) "
            "and check its disk"
        )

    def drop(self, key: str, index: int) -> None:
        """Delete a damaged block file (unless another process wrote it again meanwhile) and uncount it."""
        fd = self.wait_claim(key, index)
        try:
            path = self.block_path(key, index)
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                return
            except OSError:
                raw = b""
            if blockfile.intact(raw, index):
                return
            try:
                found = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISREG(found.st_mode):
                raise StorageError(
                    f"{path}: this is not a block the node cache wrote, and it is in the way of one; remove it, "
                    f"or delete {self._root} (the node block cache), or read without it (node_cache_dir=None)"
                )
            with self._ledger() as ledger:  # uncounted first, deleted once that is written, then settled
                ledger.used = max(0, ledger.used - found.st_size)
                ledger.writers[os.getpid()] = ledger.writers.get(os.getpid(), 0)
                ledger.after = lambda: self._delete([(path, found.st_size)])
            with self._ledger() as ledger:
                self._settle(ledger, 0, 0)
        finally:
            self.release(fd)

    def has(self, key: str, index: int) -> bool:
        """True when the block is on disk now."""
        return os.path.exists(self.block_path(key, index))

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

    def _open_lock(self, key: str, index: int) -> int:
        """A descriptor of the block's lock file (made, with its folder, if missing)."""
        folder = self.directory / key
        try:
            folder.mkdir(exist_ok=True)
            return os.open(folder / f"{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(
                f"{folder}: cannot take a block's lock in the node cache ({exc.strerror or exc}); "
                f"remove what is in the way under {self._root}, or give RemoteOptions.node_cache_dir another directory"
            ) from None

    def _lock(self, key: str, index: int, how: int) -> int | None:
        fd = self._open_lock(key, index)
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def put(self, key: str, blocks: Mapping[int, bytes], keep: Collection[tuple[str, int]] = ()) -> set[int]:
        """Publish blocks of one object (call holding their claims) with one reservation of room; the
        indices published: those that did not fit the budget without evicting a block in `keep` (those
        this process reads soon) were not.

        Steps: reserve room in the ledger under this pid; write each block with its checksums to a
        temporary named by the pid; rename them into place and settle the reservation under the
        ledger's lock. A writer killed at any step leaves a reservation of a dead pid, which the next
        process to take the ledger rolls back (its temporaries deleted, the disk counted again)."""
        sizes = {i: blockfile.stored_size(len(d)) for i, d in blocks.items()}
        sizes = {i: size for i, size in sizes.items() if size <= self.budget_bytes}
        chosen, victims = self._reserve(sizes, keep)
        if not chosen:
            if victims:
                with self._ledger() as ledger:
                    self._settle(ledger, 0, 0)
            return set()
        return self._publish(key, {i: blocks[i] for i in chosen}, {i: sizes[i] for i in chosen})

    def _reserve(
        self, sizes: Mapping[int, int], keep: Collection[tuple[str, int]]
    ) -> tuple[list[int], list[tuple[str, int]]]:
        """Under the ledger's lock, make room (choosing victims not in `keep`) and reserve it for the
        blocks that fit, under this pid: the blocks chosen, and the victims (deleted once written)."""
        pid = os.getpid()
        with self._ledger() as ledger:  # room is made and counted before the bytes touch the disk
            used, need = ledger.used, sum(sizes.values())
            victims = self._victims(used + need - self.budget_bytes, keep) if used + need > self.budget_bytes else []
            used -= sum(size for _, size in victims)
            chosen = []
            for index, size in sizes.items():
                if used + size <= self.budget_bytes:
                    chosen.append(index)
                    used += size
            reserved = sum(sizes[index] for index in chosen)
            ledger.used = used
            if reserved or victims:  # the victims are deleted once this is written: a kill then is rolled back
                ledger.writers[pid] = ledger.writers.get(pid, 0) + reserved
                ledger.after = lambda: self._delete(victims)
        return chosen, victims

    def _publish(self, key: str, blocks: Mapping[int, bytes], sizes: Mapping[int, int]) -> set[int]:
        """Write the reserved `blocks` to temporaries, rename them into place and settle the
        reservation (of `sizes`); the indices published. A block not written is not kept."""
        reserved = sum(sizes.values())
        published: set[int] = set()
        temps: dict[int, str] = {}
        settled = False
        try:
            try:
                for index, data in blocks.items():
                    os.close(self._open_lock(key, index))  # a block is ours when its lock file is beside it
                    temps[index] = self._write_temp(key, index, data)
            except (
                OSError,
                StorageError,
            ) as exc:  # a full or failing disk: the blocks not written are served from memory
                logger.warning("%s: cannot write a block of the node cache (%s); not keeping it", self._root, exc)
            with self._ledger() as ledger:
                for index, tmp in temps.items():
                    try:
                        os.replace(tmp, self.block_path(key, index))
                    except OSError as exc:  # something not ours in the way: served from memory, not kept
                        logger.warning("%s: cannot publish a block (%s); not keeping it", self._root, exc)
                        continue
                    published.add(index)
                    _fault("nodecache.rename")
                self._settle(ledger, reserved, sum(sizes[i] for i in sizes if i not in published))
                settled = True
        finally:
            for index, tmp in temps.items():
                if index not in published:
                    Path(tmp).unlink(missing_ok=True)
            if not settled:
                with self._ledger() as ledger:
                    self._settle(ledger, reserved, sum(sizes[i] for i in sizes if i not in published))
        return published

    @staticmethod
    def _settle(ledger: _Ledger, reserved: int, unwritten: int) -> None:
        """End this process's reservation of `reserved` bytes, of which `unwritten` were not published."""
        pid = os.getpid()
        left = ledger.writers.get(pid, 0) - reserved
        if left > 0:
            ledger.writers[pid] = left
        else:
            ledger.writers.pop(pid, None)
        ledger.used = max(0, ledger.used - unwritten)

    def _write_temp(self, key: str, index: int, data: bytes) -> str:
        """Block `index` with its checksums in a temporary beside its place, named by this pid."""
        tmp = f"{self._root}/{key}/.{index}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(blockfile.encode(index, data))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fault("nodecache.write")
        return tmp

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
        with self._ledger():  # an evicting process reads the pins under the same lock
            self._pinning = bool(blocks)
            if not blocks:
                path.unlink(missing_ok=True)
                return
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_bytes(encode(Pins(blocks=sorted(blocks))))
                os.replace(tmp, path)
            except OSError as exc:  # pins only spare refetches: a read of an evicted block fetches it again
                logger.warning("%s: cannot write this process's pins (%s)", path, exc)

    def _crowded(self) -> bool:
        """True when the ledger says blocks fill half the budget or more (read without its lock)."""
        path = f"{self._root}/.usage"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        try:
            return read_ledger(path, data).used * 2 >= self.budget_bytes
        except CorruptStoreError:
            return True

    def unpin(self) -> None:
        """Drop this cache object's pins."""
        self.pin(())

    def _pinned(self) -> set[tuple[str, int]]:
        """The blocks pinned by live processes (pin files of dead ones are removed; a file there the
        cache did not write, or cannot read, is skipped and left alone)."""
        pinned: set[tuple[str, int]] = set()
        for entry in os.scandir(self._pins):
            match = _PIN.fullmatch(entry.name)
            if match is None or not entry.is_file(follow_symlinks=False):
                continue
            if not process_alive(int(match[1])):
                Path(entry.path).unlink(missing_ok=True)
                continue
            if match[3]:
                continue
            try:
                with open(entry.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            try:
                pinned.update(read_pins(entry.path, data))
            except CorruptStoreError as exc:
                logger.warning("%s", exc)
        return pinned

    def used_bytes(self) -> int:
        """Bytes of block files on disk (and reserved by live writers) now, by the ledger."""
        with self._ledger() as ledger:
            return ledger.used

    def _folders(self) -> Iterator[os.DirEntry[str]]:
        """The folders that may hold blocks (not .pins, not links)."""
        for folder in os.scandir(self.directory):
            if not folder.name.startswith(".") and folder.is_dir(follow_symlinks=False):
                yield folder

    def _blocks_on_disk(self) -> Iterator[tuple[str, str, os.stat_result]]:
        """(key, path, stat) of every block file the cache wrote: a regular file `N.blk` beside the
        `N.lock` it was published under. Nothing else is counted or deleted."""
        for folder in self._folders():
            entries = list(os.scandir(folder.path))
            names = {entry.name for entry in entries}
            for entry in entries:
                match = _BLOCK.fullmatch(entry.name)
                if match and f"{match[1]}.lock" in names and entry.is_file(follow_symlinks=False):
                    try:
                        yield folder.name, entry.path, entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue

    def _victims(self, needed: int, keep: Collection[tuple[str, int]]) -> list[tuple[str, int]]:
        """(path, size) of the least recently written blocks, neither in `keep` nor pinned by a live
        process, that free `needed` bytes (fewer when too few may go)."""
        keep = self._pinned().union(keep)
        blocks = []
        for key, path, info in self._blocks_on_disk():
            if (key, int(os.path.basename(path)[:-4])) not in keep:
                blocks.append((info.st_mtime_ns, path, info.st_size))
        blocks.sort()
        victims: list[tuple[str, int]] = []
        freed = 0
        for _, path, size in blocks:
            if freed >= needed:
                break
            victims.append((path, size))
            freed += size
        return victims

    @staticmethod
    def _delete(victims: list[tuple[str, int]]) -> None:
        """Delete evicted block files (under the ledger's lock, after the ledger no longer counts them)."""
        for path, _ in victims:
            try:
                Path(path).unlink(missing_ok=True)
            except OSError as exc:  # counted again by the next process that finds the ledger stale
                logger.warning("%s: cannot delete this block of the node cache (%s)", path, exc)
            _fault("nodecache.evict")

    @contextmanager
    def _ledger(self) -> Iterator[_Ledger]:
        """The ledger under DIR/.lock, written back if changed. Unreadable, or holding a reservation of
        a dead writer, it is rebuilt: the dead writers' temporaries deleted, the disk counted again."""
        path = f"{self._root}/.usage"
        try:
            fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unwritable(f"{self._root}/.lock", exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            document: Ledger | None = None
            try:
                with open(path, "rb") as f:
                    document = read_ledger(path, f.read())
            except FileNotFoundError:
                pass
            except CorruptStoreError as exc:
                logger.warning("%s", exc)
            except OSError as exc:
                logger.warning("%s: cannot read the node cache's ledger (%s); counting the disk", path, exc)
            pid = os.getpid()
            writers = {int(w): n for w, n in document.writers.items()} if document is not None else {}
            live = {w: n for w, n in writers.items() if w == pid or process_alive(w)}
            if document is None or len(live) < len(writers):
                self._sweep()
                used = self._scan() + sum(live.values())
                stale = True
            else:
                used, stale = document.used, False
            ledger = _Ledger(used, dict(live))
            yield ledger
            if stale or ledger.used != used or ledger.writers != live:
                tmp = f"{path}.tmp"  # one writer at a time (under the lock): the next one replaces a leftover
                document = Ledger(used=ledger.used, writers={str(w): n for w, n in ledger.writers.items()})
                try:
                    with open(tmp, "wb") as f:
                        f.write(encode(document))
                    _fault("nodecache.ledger")
                    os.replace(tmp, path)
                except OSError as exc:
                    raise self._unwritable(path, exc) from None
            if ledger.after is not None:
                ledger.after()
        finally:
            os.close(fd)

    def _unwritable(self, path: str, exc: OSError) -> StorageError:
        return StorageError(
            f"{path}: cannot write the node cache's ledger ({exc.strerror or exc}); remove what is in the way, "
            "or give RemoteOptions.node_cache_dir a writable directory of its own"
        )

    def _scan(self) -> int:
        """Bytes of all block files on disk (when the ledger is missing, unreadable or stale)."""
        return sum(info.st_size for _, _, info in self._blocks_on_disk())

    def _sweep(self) -> None:
        """Delete the temporaries of dead writers: block files never renamed, a ledger never published."""
        Path(f"{self._root}/.usage.tmp").unlink(missing_ok=True)
        for folder in self._folders():
            for entry in os.scandir(folder.path):
                match = _TEMP.fullmatch(entry.name)
                if match is not None and not process_alive(int(match[1])):
                    Path(entry.path).unlink(missing_ok=True)


class _Ledger:
    __slots__ = ("after", "used", "writers")

    def __init__(self, used: int, writers: dict[int, int]) -> None:
        self.used = used
        self.writers = writers
        self.after: Callable[[], None] | None = None  # run once the ledger is written, under its lock

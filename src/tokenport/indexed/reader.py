"""IndexedDataset: random access to the sequences of a .bin/.idx store, local or remote.

Opening reads the 34-byte header (by pread: nothing is mapped) and checks file sizes: O(1) work
however many sequences the store holds; ``lazy=True`` defers even that to the first read. The
index arrays are memory-mapped on first use, and both files are opened lazily and closed when idle
(see storage.handles), so thousands of stores can be open at once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError, CorruptStoreError, StorageError
from ..storage import MODES, ByteSource, MmapSource, is_remote, local_path, open_index_source, open_source, read_small
from ..storage.handles import LazyHandle
from .bounds import check_index
from .commit import recover
from .directories import remote_output_error, single_store
from .format import HEADER_SIZE, IndexHeader, parse_header
from .manifest import Manifest, StoreFacts, manifest_path, mask_prefix, read_manifest
from .masks import MASK_DTYPE


def strip_suffix(path: str | os.PathLike) -> str:
    """The store prefix of a path that may end in .bin, .idx or .json."""
    text = os.fspath(path)
    for suffix in (".bin", ".idx", ".json"):
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def store_prefix(value: object, what: str = "prefix", suffixes: tuple[str, ...] = (".bin", ".idx", ".json")) -> str:
    """`value` as a store prefix (see `strip_suffix`); ConfigError unless it is a path or URL whose
    last part is a name, so a store is never read or written as DIR/.bin or ../.idx."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or "\0" in text:
        raise ConfigError(f"{what}={value!r} is invalid: pass a store prefix, a path or URL like data/wiki")
    prefix = next((text[: -len(s)] for s in suffixes if text.endswith(s)), text)
    if os.path.basename(prefix) in ("", ".", ".."):
        raise ConfigError(
            f"{what}={value!r} names no store: its last part must be a name (data/wiki for data/wiki.bin "
            "and data/wiki.idx); add one"
        )
    return prefix


def int64_array(
    values: object, what: str, remedy: str = "pass integers", out_of_range: type[Exception] = IndexError
) -> np.ndarray:
    """`values` as an int64 array of its own shape; ConfigError for anything but integers (numpy would
    cut 1.7 to 1), ``out_of_range`` for a uint64 value no int64 holds (the reader's ids, the writer's lengths)."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}={values!r} is invalid ({exc}): {remedy}") from None
    if array.size and array.dtype.kind not in "iu":
        raise ConfigError(f"{what} must be integers, got dtype {array.dtype}: {remedy}")
    if array.dtype.kind == "u" and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise out_of_range(f"{what}: {int(array.max())} is out of range: {remedy}")
    return array.astype(np.int64)


class _IndexArrays:
    """The three arrays of an .idx file, as views of its mapping (or copies, in pread mode)."""

    __slots__ = ("lengths", "pointers", "documents")

    def __init__(self, source: ByteSource, header: IndexHeader) -> None:
        n = header.sequence_count
        self.lengths = source.read_array(header.lengths_offset, n, np.int32)
        self.pointers = source.read_array(header.pointers_offset, n, np.int64)
        self.documents = source.read_array(header.documents_offset, header.document_count, np.int64)


def _forget(_: object) -> None:
    """Drop a handle's value; its memory goes with the last reference to it."""


class IndexedDataset:
    """The sequences of a Megatron-compatible token store.

    `prefix_or_url` is a local prefix (``data/wiki`` for ``data/wiki.bin`` + ``.idx``) or a URL
    (``s3://bucket/wiki``, or any scheme registered with storage.register_scheme); a local prepare
    output directory of one part opens that part (of several: ConfigError naming the call that reads
    them all; a raw corpus file: ConfigError with the prepare command). `mode` is "auto"
    (mmap locally, ranged reads remotely), "mmap", "pread" or "remote". `remote_options` (for fsspec
    URLs a storage.remote.RemoteOptions) tunes object-store reads; `cache_dir` is where a remote .idx
    is cached. `sources`, an (idx, bin) pair of byte sources, is read instead of opening the prefix.
    `lazy=True` (a local store with a PREFIX.json manifest): only the manifest is read until something
    needs the files (a read, the index arrays, the header); its sequence count is then checked against
    the header's. A blend of thousands of stores so holds no descriptor for a store it has not read.
    `facts` (with ``lazy=True``): the manifest's sequence count and EOD id, known from an earlier read
    its caller checked is still current (an index cache's stat record); the manifest is then not read
    until something asks for it, and the header is checked against ``facts.sequences`` on open.
    """

    def __init__(
        self,
        prefix_or_url: str | os.PathLike,
        mode: str = "auto",
        *,
        remote_options: Any = None,
        cache_dir: str | None = None,
        sources: tuple[ByteSource, ByteSource] | None = None,
        lazy: bool = False,
        facts: StoreFacts | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r} is not one of {', '.join(MODES)}")
        text = os.fspath(prefix_or_url) if isinstance(prefix_or_url, (str, os.PathLike)) else None
        if sources is None and isinstance(text, str):
            prefix_or_url = single_store(text)  # a one-part prepare output: that part; a raw file: refused
        self.prefix = store_prefix(prefix_or_url)
        self.mode = mode
        self._remote_options = remote_options
        self._cache_dir = cache_dir
        self._sources = sources
        self._manifest: Manifest | None | bool = False
        self._masks: IndexedDataset | None | bool = False
        self._num_tokens: int | None = None
        self._lazy = lazy is True
        self._facts = facts
        if lazy not in (True, False):
            raise ConfigError(f"lazy={lazy!r} is invalid: pass True (open on first read) or False")
        if facts is not None and (not isinstance(facts, StoreFacts) or not self._lazy or sources is not None):
            raise ConfigError(
                f"{self.prefix}: facts={facts!r}: pass a StoreFacts, and only with lazy=True and no sources"
            )
        if self._lazy and sources is None and not is_remote(self.prefix):
            recover(local_path(self.prefix))  # finish an interrupted publication before reading its manifest
            if facts is not None:
                self._length = facts.sequences  # checked against the header when the files are opened
                self._deferred = True
                return
            manifest = self.manifest  # read once: the key of an index cache needs it anyway
            if manifest is not None:
                self._length = manifest.sequences  # checked against the header when the files are opened
                self._deferred = True
                return
        self._deferred = False
        self._open()

    # Attributes that exist once the files are opened; reaching one of a deferred store opens it.
    _OPENED = frozenset({"_idx", "_bin", "header", "dtype", "_itemsize", "_index_checked", "_index", "_tokens"})

    def __getattr__(self, name: str) -> Any:
        """Open a lazily constructed store the first time one of its file-backed attributes is reached."""
        if name in IndexedDataset._OPENED and self.__dict__.get("_deferred"):
            recorded = self._length
            self._deferred = False
            try:
                self._open()
                if self.header.sequence_count != recorded:
                    raise CorruptStoreError(
                        f"{self.prefix}.idx: holds {self.header.sequence_count} sequences but "
                        f"{manifest_path(self.prefix)} records {recorded}; the index and its manifest do not "
                        "belong together: rebuild the store"
                    )
            except BaseException:
                self._deferred, self._length = True, recorded
                raise
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def is_open(self) -> bool:
        """False for a store made with ``lazy=True`` that no read has opened yet (no file touched but its manifest)."""
        return not self._deferred

    def _open(self) -> None:
        """Open the .idx/.bin sources, parse the header and check the .bin's size (O(1))."""
        mode, sources = self.mode, self._sources
        remote_options, cache_dir = self._remote_options, self._cache_dir
        if sources is not None:
            if not (
                isinstance(sources, tuple) and len(sources) == 2 and all(isinstance(s, ByteSource) for s in sources)
            ):
                raise ConfigError(
                    f"{self.prefix}: sources must be an (idx, bin) pair of storage.ByteSource, got {sources!r}"
                )
            self._idx, self._bin = sources
        elif is_remote(self.prefix):
            options = {} if remote_options is None else {"options": remote_options}
            try:
                self._idx = open_index_source(self.prefix + ".idx", mode, cache_dir, **options)
            except StorageError:
                hint = remote_output_error(self.prefix, remote_options)  # a prepare output there: name its parts
                if hint is None:
                    raise
                raise hint from None
            self._bin = open_source(self.prefix + ".bin", "remote", **options)
        else:
            recover(local_path(self.prefix))
            base = local_path(self.prefix)
            local_mode = "pread" if mode == "pread" else "mmap"
            self._idx = open_source(base + ".idx", local_mode)
            self._bin = open_source(base + ".bin", local_mode)
        if isinstance(self._idx, MmapSource):  # a few bytes by pread: opening maps nothing, keeps no descriptor
            with open(self._idx.url, "rb") as f:
                self._open_checks(functools.partial(os.pread, f.fileno()))
        else:
            self._open_checks(lambda length, offset: self._idx.read(offset, length))
        self._length = self.header.sequence_count
        self._index_checked = False
        self._index = LazyHandle(self._load_index, _forget)
        self._tokens = LazyHandle(self._map_tokens, _forget) if isinstance(self._bin, MmapSource) else None

    def _open_checks(self, read: Callable[[int, int], Any]) -> None:
        """Parse the header and check the .bin's size, reading the .idx through ``read(length, offset)``."""
        self.header = parse_header(read(min(HEADER_SIZE, self._idx.size), 0), self._idx.url, self._idx.size)
        self.dtype = self.header.dtype
        self._itemsize = self.dtype.itemsize
        self._check_bin_size(read)

    def _check_bin_size(self, read: Callable[[int, int], Any]) -> None:
        """O(1) at open: the last sequence must end exactly at the end of the .bin."""
        n = self.header.sequence_count
        if n == 0:
            needed = 0
        else:
            last_pointer = int(np.frombuffer(read(8, self.header.pointers_offset + 8 * (n - 1)), np.int64, 1)[0])
            last_length = int(np.frombuffer(read(4, self.header.lengths_offset + 4 * (n - 1)), np.int32, 1)[0])
            needed = last_pointer + last_length * self._itemsize
        if self._bin.size != needed:
            raise CorruptStoreError(
                f"{self._bin.url}: has {self._bin.size} bytes but the index needs {needed}; "
                "the .bin is truncated, has junk appended or does not belong to this .idx: rebuild or re-download it"
            )

    def _load_index(self) -> _IndexArrays:
        """The index arrays; the first time, every pointer and length is checked against the .bin
        (one vectorized pass), so no read after it can leave the file or return another's tokens."""
        arrays = _IndexArrays(self._idx, self.header)
        if not self._index_checked:
            check_index(
                arrays.lengths,
                arrays.pointers,
                arrays.documents,
                self._itemsize,
                self._bin.size,
                self._idx.url,
                self._bin.url,
            )
            self._index_checked = True
        return arrays

    def _map_tokens(self) -> np.ndarray:
        buffer = self._bin.buffer()  # type: ignore[attr-defined]
        return np.frombuffer(buffer, dtype=self.dtype, count=len(buffer) // self._itemsize)

    # -- sizes and arrays ---------------------------------------------------------------------

    def __len__(self) -> int:
        return self._length

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32 length of every sequence, in tokens."""
        return self._index.get().lengths

    def read_sequence_lengths(self) -> np.ndarray:
        """The int32 length of every sequence, for building indices. A store made with ``lazy=True`` and
        not opened yet reads them by one positioned read of its .idx and stays unopened (no mapping, no
        descriptor kept): its header is checked here, the .bin and the pointers when a read opens it."""
        if not self._deferred:
            return self.sequence_lengths
        path = local_path(self.prefix) + ".idx"
        count = self._length
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = os.pread(f.fileno(), HEADER_SIZE + 4 * count, 0)
        header = parse_header(data[:HEADER_SIZE], path, size)
        if header.sequence_count != count:
            raise CorruptStoreError(
                f"{path}: holds {header.sequence_count} sequences but {manifest_path(self.prefix)} records "
                f"{count}; the index and its manifest do not belong together: rebuild the store"
            )
        return np.frombuffer(data, np.int32, count=count, offset=HEADER_SIZE)

    @property
    def sequence_pointers(self) -> np.ndarray:
        """int64 byte offset of every sequence in the .bin file."""
        return self._index.get().pointers

    @property
    def document_indices(self) -> np.ndarray:
        """int64 sequence index where each document starts (leading 0, trailing len(self))."""
        return self._index.get().documents

    def token_array(self) -> np.ndarray | None:
        """The whole .bin as one read-only token array when memory-mapped (None in pread and remote
        modes), for kernels that gather many ranges in one call; sequence_pointers // itemsize index it."""
        handle = self._tokens
        if handle is None:
            return None
        tokens = handle.value
        if tokens is None:
            return handle.get()
        handle.referenced = True
        return tokens

    @property
    def bin_size(self) -> int:
        """Size of the .bin file in bytes."""
        return self._bin.size

    @property
    def num_documents(self) -> int:
        """Documents in the store (the document index holds one more boundary than documents)."""
        return max(0, self.header.document_count - 1)

    @property
    def num_tokens(self) -> int:
        """Tokens in the store: the sum of all sequence lengths, computed once."""
        if self._num_tokens is None:
            self._num_tokens = int(self.sequence_lengths.sum(dtype=np.int64))
        return self._num_tokens

    @property
    def manifest(self) -> Manifest | None:
        """The PREFIX.json sidecar, or None when the store has none."""
        if self._manifest is False:
            self._manifest = self._load_manifest()
        return self._manifest  # type: ignore[return-value]

    @property
    def facts(self) -> StoreFacts | None:
        """The manifest's sequence count and EOD id (those given at construction, else the manifest's);
        None when the store has no manifest."""
        if self._facts is None:
            manifest = self.manifest
            self._facts = None if manifest is None else StoreFacts.of(manifest)
        return self._facts

    def _load_manifest(self) -> Manifest | None:
        if not is_remote(self.prefix):
            return read_manifest(local_path(self.prefix))
        options = {} if self._remote_options is None else {"options": self._remote_options}
        text = read_small(manifest_path(self.prefix), **options)
        return None if text is None else Manifest.from_json(text, manifest_path(self.prefix))

    @property
    def masks(self) -> IndexedDataset | None:
        """A chat store's loss masks (PREFIX.mask, uint8 0/1, the same sequences), or None for a plain store.

        The manifest says whether there are masks; opening them checks that their lengths and
        documents are the token store's, so a mask never belongs to another token.
        """
        if self._masks is False:
            manifest = self.manifest
            self._masks = None if manifest is None or manifest.masks is None else self._open_masks()
        return self._masks  # type: ignore[return-value]

    def _open_masks(self) -> IndexedDataset:
        where = mask_prefix(self.prefix)
        try:
            masks = IndexedDataset(where, self.mode, remote_options=self._remote_options, cache_dir=self._cache_dir)
        except (OSError, StorageError) as exc:
            raise CorruptStoreError(
                f"{manifest_path(self.prefix)}: lists a loss-mask store but {where}.bin/.idx cannot be "
                f"opened ({exc}); rebuild the chat store"
            ) from None
        if masks.dtype != MASK_DTYPE:
            raise CorruptStoreError(f"{where}.idx: dtype {masks.dtype}, but a loss-mask store holds uint8")
        if not (
            np.array_equal(masks.sequence_lengths, self.sequence_lengths)
            and np.array_equal(masks.document_indices, self.document_indices)
        ):
            raise CorruptStoreError(
                f"{where}.idx: its sequence lengths or documents differ from {self.prefix}.idx; "
                "the masks belong to another store: rebuild the chat store"
            )
        return masks

    # -- reads ---------------------------------------------------------------------------------

    def __getitem__(self, idx: int | np.integer | slice) -> np.ndarray | list[np.ndarray]:
        """Sequence `idx` as a 1-D array (a zero-copy view locally), or a list for a slice."""
        # The hottest path of the library: LazyHandle.get() is inlined (on a hit it only marks the
        # handle as used, for the pool's CLOCK sweep), and .item() gives Python ints directly.
        handle = self._index
        index = handle.value
        if index is None:
            index = handle.get()
        else:
            handle.referenced = True
        if isinstance(idx, slice):
            return [self.get(i) for i in range(*idx.indices(len(self)))]
        try:
            pointer = index.pointers.item(idx)
        except (TypeError, ValueError, OverflowError):
            raise self._bad_index(idx) from None
        length = index.lengths.item(idx)
        tokens_handle = self._tokens
        if tokens_handle is not None:
            tokens = tokens_handle.value
            if tokens is None:
                tokens = tokens_handle.get()
            else:
                tokens_handle.referenced = True
            start = pointer // self._itemsize
            return tokens[start : start + length]
        return self._bin.read_array(pointer, length, self.dtype)

    def _bad_index(self, idx: object) -> Exception:
        """The error for an index numpy could not take: past any end (IndexError), or not an index."""
        if is_int(idx):
            return IndexError(f"{self.prefix}: sequence {idx} is out of range: the store has {len(self)}")
        return ConfigError(f"{self.prefix}: index {idx!r} is not a sequence number: pass an integer or a slice")

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """`length` tokens of sequence `idx` from token `offset` (default: to its end)."""
        index = self._index.get()
        try:
            total = index.lengths.item(idx)
        except (TypeError, ValueError, OverflowError):
            raise self._bad_index(idx) from None
        if not is_int(offset) or not (length is None or is_int(length)):
            raise ConfigError(f"{self.prefix}: offset={offset!r} length={length!r}: pass integers (length may be None)")
        if length is None:
            length = total - offset
        if offset < 0 or length < 0 or offset + length > total:
            raise IndexError(
                f"{self.prefix}: sequence {idx} has {total} tokens; offset={offset} length={length} is out of range"
            )
        if self._tokens is not None:
            start = index.pointers.item(idx) // self._itemsize + offset
            return self._tokens.get()[start : start + length]
        return self._bin.read_array(index.pointers.item(idx) + offset * self._itemsize, length, self.dtype)

    def get_many(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whole sequences `ids` as (tokens, offsets): sequence k is tokens[offsets[k]:offsets[k+1]].

        Negative ids count from the end; an id out of range raises IndexError."""
        ids = int64_array(ids, f"{self.prefix}: get_many: ids").reshape(-1)
        index = self._index.get()
        if self._tokens is not None:
            return self._gather_mapped(index, ids)
        lengths = index.lengths[ids].astype(np.int64)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not len(ids) or not offsets[-1]:
            return np.zeros(0, self.dtype), offsets
        starts, counts = _runs(index.pointers[ids], lengths * self._itemsize, offsets * self._itemsize)
        chunks = self._bin.read_ranges(list(zip(starts.tolist(), counts.tolist())))
        tokens = np.frombuffer(bytearray().join(chunks), dtype=self.dtype)
        if len(tokens) != offsets[-1]:
            raise CorruptStoreError(
                f"{self._bin.url}: the index points outside the file; run `tokenport verify` on the store"
            )
        return tokens, offsets

    def get_pieces(
        self, ids: Sequence[int] | np.ndarray, offsets: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """Tokens ``[offsets[k], offsets[k] + lengths[k])`` of sequences ``ids[k]``, concatenated: one
        batched read (coalesced GETs remotely) in place of a ``get`` per piece."""
        ids = int64_array(ids, f"{self.prefix}: get_pieces: ids").reshape(-1)
        offsets = int64_array(offsets, f"{self.prefix}: get_pieces: offsets").reshape(-1)
        lengths = int64_array(lengths, f"{self.prefix}: get_pieces: lengths").reshape(-1)
        index = self._index.get()
        if not len(ids) == len(offsets) == len(lengths):
            raise ConfigError(
                f"{self.prefix}: get_pieces: {len(ids)} ids, {len(offsets)} offsets and {len(lengths)} lengths; "
                "give one offset and one length per id"
            )
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(self)):
            raise IndexError(f"{self.prefix}: get_pieces: ids must lie in [0, {len(self)})")
        total = index.lengths[ids].astype(np.int64)
        bad = np.flatnonzero((offsets < 0) | (lengths < 0) | (offsets + lengths > total))
        if len(bad):
            k = int(bad[0])
            raise IndexError(
                f"{self.prefix}: sequence {int(ids[k])} has {int(total[k])} tokens; "
                f"offset={int(offsets[k])} length={int(lengths[k])} is out of range"
            )
        if self._tokens is not None:
            tokens = self._tokens.get()
            starts = index.pointers[ids] // self._itemsize + offsets
            pieces = [tokens[a : a + n] for a, n in zip(starts.tolist(), lengths.tolist())]
            return np.concatenate(pieces) if pieces else tokens[:0].copy()
        sizes = lengths * self._itemsize
        ends = np.cumsum(sizes)
        if not len(ids) or not ends[-1]:
            return np.zeros(0, self.dtype)
        starts, counts = _runs(index.pointers[ids] + offsets * self._itemsize, sizes, np.concatenate(([0], ends)))
        chunks = self._bin.read_ranges(list(zip(starts.tolist(), counts.tolist())))
        out = np.frombuffer(bytearray().join(chunks), dtype=self.dtype)
        if len(out) * self._itemsize != ends[-1]:
            raise CorruptStoreError(
                f"{self._bin.url}: the index points outside the file; run `tokenport verify` on the store"
            )
        return out

    def _gather_mapped(self, index: _IndexArrays, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """get_many from the memory-mapped .bin: one numba pass (the index was checked on first use)."""
        from .gather_kernels import gather_sequences

        tokens_array = self._tokens.get()  # type: ignore[union-attr]  # only called when mapped
        shift = self._itemsize.bit_length() - 1
        tokens, offsets, bad = gather_sequences(tokens_array, index.lengths, index.pointers, ids, shift)
        if bad >= 0:
            raise IndexError(f"{self.prefix}: get_many: id {int(ids[bad])} is out of range for {len(self)} sequences")
        return tokens, offsets

    def prefetch(self, requests: Sequence[tuple[int, int, int | None]]) -> None:
        """Announce reads of (sequence, offset, length) so remote stores fetch them in few GETs."""
        if not requests:
            return
        index = self._index.get()
        ranges = []
        for idx, offset, length in requests:
            if length is None:
                length = int(index.lengths[idx]) - offset
            ranges.append((int(index.pointers[idx]) + offset * self._itemsize, length * self._itemsize))
        self._bin.prefetch(ranges)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Release mappings and descriptors; the dataset reopens them if used again."""
        if self._deferred:
            return
        self._index.close()
        if self._tokens is not None:
            self._tokens.close()
        self._idx.close()
        self._bin.close()
        if isinstance(self._masks, IndexedDataset):
            self._masks.close()

    def __enter__(self) -> IndexedDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "mode": self.mode,
            "remote_options": self._remote_options,
            "cache_dir": self._cache_dir,
            "sources": self._sources,
            "lazy": self._lazy,
            "facts": self._facts if self._deferred else None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["prefix"],
            state["mode"],
            remote_options=state["remote_options"],
            cache_dir=state["cache_dir"],
            sources=state["sources"],
            lazy=state.get("lazy", False),
            facts=state.get("facts"),
        )

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.prefix!r}, sequences={len(self)}, documents={self.num_documents}, "
            f"dtype={self.dtype})"
        )


def _runs(starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each run of ranges that follow one another in the file: sequential ids
    (a scan, a shard copy) become one range, so they cost one copy, not one per sequence."""
    if len(starts) < 2:
        return starts, lengths
    follows = starts[1:] == starts[:-1] + lengths[:-1]
    if not follows.any():
        return starts, lengths
    first = np.flatnonzero(np.concatenate(([True], ~follows)))
    bounds = np.append(offsets[first], offsets[-1])
    return starts[first], np.diff(bounds)

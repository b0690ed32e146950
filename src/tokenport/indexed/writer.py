"""IndexedDatasetWriter: streams documents into a new .bin/.idx store, atomically.

Tokens go straight to a temporary .bin; sequence lengths and document boundaries are buffered
in small chunks and spilled to temporary side files, so memory stays flat however many
documents are written. `finalize()` composes the .idx, writes the manifest and publishes all
three files at once; until then nothing is visible at the prefix. A chat store (`masks=True`)
adds a loss-mask store, PREFIX.mask.bin/.idx, published in the same unit.
"""

from __future__ import annotations

import datetime as _dt
import json
import operator
import os
from array import array as _array
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .._checks import check_int
from ..errors import ConfigError, CorruptStoreError, TokenizerError, TokenportError
from . import commit
from .checksums import DEFAULT_BLOCK_SIZE, BlockHasher, available_algorithm, new_hasher
from .format import IndexHeader, dtype_code, dtype_for_vocab
from .manifest import Checksums, Manifest, check_tokenizer_record, manifest_path, mask_prefix, read_manifest
from .masks import MASK_DTYPE, MaskColumn, as_mask
from .reader import int64_array, store_prefix

_LENGTHS = "pass integer sequence lengths that sum to the tokens"

_SPILL_ITEMS = 1 << 16  # pending index entries (8 bytes each) kept in memory before a spill
_COPY_ITEMS = 1 << 18  # index items per chunk when composing the .idx (a few MiB of temporaries)
_IO_BUFFER = 1 << 20
_STAGE_BYTES = 1 << 20  # small documents are gathered into one write (and one hash update) per MiB

# how IndexedDatasetWriter._as_tokens takes an input dtype
_GENERIC, _AS_IS, _CHECK, _CAST, _CHECK_CAST, _SAFE_CAST = range(6)


def _has_same_value_cast() -> bool:
    """numpy >= 2.4 casts with casting="same_value", raising instead of wrapping."""
    try:
        np.array([70000], dtype=np.int32).astype(np.uint16, casting="same_value")
    except ValueError:
        return True
    except TypeError:
        return False
    return False  # it wrapped: never rely on it


_SAME_VALUE_CAST = _has_same_value_cast()


def _tokenport_version() -> str:
    from .._version import __version__

    return __version__


def _tokenizer_identity(tokenizer: Any) -> Any:
    if tokenizer is None or isinstance(tokenizer, dict) or not callable(getattr(tokenizer, "identity", None)):
        return tokenizer  # a dict, or what the writer refuses naming it
    return tokenizer.identity()


class _Int64Spill:
    """An append-only integer column kept in a small buffer and spilled to a temporary file.

    `pending` is a compact array of int64 (8 bytes an item, not a list of Python ints), spilled
    every `_SPILL_ITEMS` items, so memory stays flat however many documents are written.
    """

    def __init__(self, final_path: str, dtype: DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self.path = commit.temp_path(final_path)
        self._file = open(self.path, "wb", buffering=_IO_BUFFER)
        self.pending = _array("q")
        self.count = 0

    def extend_array(self, values: np.ndarray) -> None:
        self.spill()
        values.astype(self.dtype, copy=False).tofile(self._file)
        self.count += len(values)

    def spill(self) -> None:
        if self.pending:
            values = np.frombuffer(self.pending, dtype=np.int64)
            if self.dtype != values.dtype and len(values):
                info = np.iinfo(self.dtype)
                if int(values.max()) > info.max or int(values.min()) < info.min:
                    raise ConfigError(
                        f"{self.path}: value {int(values.max())} does not fit the .idx's {self.dtype} "
                        "column; split documents into sequences shorter than 2**31 tokens"
                    )
            values.astype(self.dtype, copy=False).tofile(self._file)
            self.count += len(values)
            del values  # release the buffer export before replacing the array
            self.pending = _array("q")

    def close(self) -> None:
        self.spill()
        self._file.close()

    def chunks(self) -> Iterable[np.ndarray]:
        """The column back from disk, a few million items at a time."""
        with open(self.path, "rb") as f:
            while True:
                chunk = np.fromfile(f, dtype=self.dtype, count=_COPY_ITEMS)
                if not len(chunk):
                    return
                yield chunk

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _check_settings(dtype: Any, vocab_size: Any, provenance: Any, checksum: Any, block_size: Any) -> None:
    """Refuse bad writer settings before anything is created (a bad checksum algorithm left a
    temporary .bin; a block size of 0 hung; bad types escaped as TypeError/ValueError)."""
    if dtype is not None:
        try:
            np.dtype(dtype)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"dtype={dtype!r} is invalid ({exc}): pass a numpy dtype such as np.uint16") from None
    if vocab_size is not None:
        check_int("vocab_size", vocab_size, 1, what="the tokenizer's vocabulary size")
    if provenance is not None and not isinstance(provenance, dict):
        raise ConfigError(f"provenance={provenance!r} is invalid: pass a dict (or None)")
    check_int("checksum_block_size", block_size, 1, what="the bytes per .bin checksum block")
    if checksum is not None:
        try:
            new_hasher(checksum, "checksum")
        except CorruptStoreError as exc:
            raise ConfigError(f"{exc}: pass blake2b-128, xxh3-64 or None (the fastest installed)") from None


def _checked_identity(prefix: str, tokenizer: Any) -> Any:
    """The tokenizer's identity record for the manifest (None without one); ConfigError when it is invalid."""
    identity = _tokenizer_identity(tokenizer)
    if identity is not None:
        try:
            if not isinstance(identity, dict):
                raise ValueError("expected a Tokenizer or a dict (its identity)")
            check_tokenizer_record(identity)
        except ValueError as exc:
            raise ConfigError(f"{prefix}: tokenizer={identity!r} is invalid: {exc}") from None
    return identity


def _check_manifest_values(prefix: str, **values: Any) -> None:
    """Refuse a value the manifest's reader (strict JSON) would not read back: NaN, infinity, non-JSON types."""
    for name, value in values.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"{prefix}: {name}={value!r} cannot go into the manifest ({exc}); pass JSON data "
                "(strings, finite numbers, lists, dicts)"
            ) from None


class IndexedDatasetWriter:
    """Writes a token store at `prefix` (PREFIX.bin, PREFIX.idx, PREFIX.json), atomically.

    `dtype` defaults to the tokenizer's (uint16 up to 65,536 ids, int32 above), else int32.
    A token id that does not fit the dtype, or is at or above `vocab_size`, is an error.
    With `masks=True` it writes a chat store: every document comes with a 0/1 loss mask, stored
    in PREFIX.mask.bin/.idx; `chat` (template fingerprint, policy, format) goes in the manifest.
    """

    def __init__(
        self,
        prefix: str | os.PathLike,
        dtype: np.dtype | type | None = None,
        tokenizer: Any = None,
        *,
        vocab_size: int | None = None,
        provenance: dict[str, Any] | None = None,
        checksum: str | None = None,
        checksum_block_size: int = DEFAULT_BLOCK_SIZE,
        masks: bool = False,
        chat: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(masks, bool):
            raise ConfigError(f"masks={masks!r} is invalid: pass True for a chat store (with loss masks) or False")
        _check_settings(dtype, vocab_size, provenance, checksum, checksum_block_size)
        if chat is not None and not (masks and isinstance(chat, dict)):
            raise ConfigError(
                f"chat={chat!r} is invalid: pass a dict (template fingerprint, policy, format) with masks=True"
            )
        self.prefix = store_prefix(prefix, suffixes=(".bin", ".idx"))
        identity = _checked_identity(self.prefix, tokenizer)
        if vocab_size is None and identity is not None and "vocab_size" in identity:
            vocab_size = int(identity["vocab_size"])
        if dtype is None:
            dtype = dtype_for_vocab(vocab_size) if vocab_size else np.int32
        self.dtype = np.dtype(dtype)
        dtype_code(self.dtype)
        self.vocab_size = vocab_size
        self._tokenizer = identity
        self._provenance = dict(provenance or {})
        _check_manifest_values(self.prefix, tokenizer=identity, provenance=self._provenance, chat=chat)
        self._limits = self._id_limits()
        commit.make_parents(self.prefix)
        commit.recover(self.prefix, clean=True)  # finish a dead writer's publication before anything else
        self._bin_path = commit.temp_path(self.prefix + ".bin")
        # writes come staged (>= _STAGE_BYTES) or large: a buffer of that size passes them through
        self._bin = open(self._bin_path, "wb", buffering=_STAGE_BYTES)
        self._bin_hash = BlockHasher(checksum or available_algorithm(), checksum_block_size)
        self._stage = bytearray()
        self._stage_items = _STAGE_BYTES // self.dtype.itemsize
        self._chat = dict(chat) if chat is not None else None
        self._masks = MaskColumn(self.prefix, self._bin_hash.algorithm, checksum_block_size) if masks else None
        self._plan_dtype: np.dtype | None = None  # the last input dtype seen, and how to take it
        self._plan: tuple[int, Any] = (_GENERIC, None)
        self._lengths = _Int64Spill(self.prefix + ".idx", np.int32)
        self._documents = _Int64Spill(self.prefix + ".idx", np.int64)
        self._documents.pending.append(0)
        self._sequences = 0
        self._tokens = 0
        self._state = "open"

    # -- adding -----------------------------------------------------------------------------

    def add_document(
        self,
        tokens: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | None = None,
        *,
        mask: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Append one document: `tokens`, as one sequence or as sequences of `lengths`.

        A chat store's document needs its `mask`: one 0/1 per token, 1 where the token is trained.
        """
        if self._state != "open":
            self._check_open()
        array = self._as_tokens(tokens)
        n = len(array)
        checked_mask = self._check_mask(mask, n, f"{self.prefix}: document {self.num_documents}")
        if lengths is None:
            self._lengths.pending.append(n)
            self._sequences += 1
        else:
            # Megatron's style, add_document(tokens, [len(tokens)]): a short list, checked in
            # Python (numpy's reductions cost microseconds each on a list this small)
            sizes = None
            if isinstance(lengths, (list, tuple)):
                try:
                    sizes = [operator.index(size) for size in lengths]
                except TypeError:
                    pass
            if sizes is None:
                sizes = int64_array(lengths, f"{self.prefix}: lengths", _LENGTHS, ConfigError).reshape(-1).tolist()
            if sum(sizes) != n or (sizes and min(sizes) < 0):
                raise ConfigError(
                    f"{self.prefix}: sequence lengths {sizes[:8]}... sum to "
                    f"{sum(sizes)} but the document has {n} tokens"
                )
            self._lengths.pending.extend(sizes)
            self._sequences += len(sizes)
        self._write(array)
        if checked_mask is not None:
            self._masks.write(checked_mask)  # type: ignore[union-attr]
        self._documents.pending.append(self._sequences)
        if len(self._lengths.pending) >= _SPILL_ITEMS:
            self._lengths.spill()
            self._documents.spill()

    def add_documents(
        self,
        tokens: np.ndarray | Sequence[np.ndarray],
        lengths: Sequence[int] | np.ndarray | None = None,
        sequences_per_document: Sequence[int] | np.ndarray | None = None,
        *,
        masks: np.ndarray | Sequence[np.ndarray] | None = None,
    ) -> None:
        """Append many sequences at once: flat `tokens` cut by `lengths` (or a list of arrays).

        Each sequence is its own document unless `sequences_per_document` groups them. A chat
        store needs `masks`, flat like `tokens` (or a list of arrays like it).
        """
        self._check_open()
        if lengths is None:
            if isinstance(tokens, np.ndarray):
                raise ConfigError("add_documents: pass `lengths` with a flat token array")
            lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
            tokens = np.concatenate(tokens) if len(tokens) else np.zeros(0, self.dtype)
            if masks is not None and not isinstance(masks, np.ndarray):
                masks = np.concatenate(masks) if len(masks) else np.zeros(0, MASK_DTYPE)
        array = self._as_tokens(tokens)
        lengths = int64_array(lengths, "add_documents: `lengths`", _LENGTHS, ConfigError)
        if lengths.ndim != 1 or (len(lengths) and int(lengths.min()) < 0):
            raise ConfigError("add_documents: `lengths` must be a 1-D array of non-negative ints")
        if int(lengths.sum()) != len(array):
            raise ConfigError(f"add_documents: lengths sum to {int(lengths.sum())} but {len(array)} tokens were given")
        if len(lengths) and int(lengths.max()) > np.iinfo(np.int32).max:
            raise ConfigError("add_documents: a sequence longer than 2**31-1 tokens cannot be indexed")
        if sequences_per_document is None:
            ends = self._sequences + np.arange(1, len(lengths) + 1, dtype=np.int64)
        else:
            groups = np.asarray(sequences_per_document, dtype=np.int64)
            if int(groups.sum()) != len(lengths) or (len(groups) and int(groups.min()) < 0):
                raise ConfigError(
                    "add_documents: `sequences_per_document` must be non-negative and sum to len(lengths)"
                )
            ends = self._sequences + np.cumsum(groups)
        checked_masks = self._check_mask(masks, len(array), f"{self.prefix}: add_documents")
        self._write(array)
        if checked_masks is not None:
            self._masks.write(checked_masks)  # type: ignore[union-attr]
        self._lengths.extend_array(lengths)
        self._documents.extend_array(ends)
        self._sequences += len(lengths)

    def _check_mask(self, mask: Any, tokens: int, where: str) -> np.ndarray | None:
        """The document's checked mask in a chat store; refuse a missing one, or one in a plain store."""
        if self._masks is None:
            if mask is not None:
                raise ConfigError(f"{where}: a mask was given but the writer has masks=False; open it with masks=True")
            return None
        if mask is None:
            raise ConfigError(f"{where}: a chat store (masks=True) needs a loss mask with every document")
        return as_mask(mask, tokens, where)

    def _as_tokens(self, tokens: Sequence[int] | Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """`tokens` as a 1-D array of the store's dtype; an id outside 0..limit raises, never wraps.

        The way to take an input dtype (as is, check, cast, check and cast) is worked out once per
        dtype; the check is one pass (argmax of an unsigned view catches negative ids too), because
        numpy's reductions cost a microsecond or more even on a 30-token document.
        """
        array = tokens if type(tokens) is np.ndarray else np.asarray(tokens)
        if array.ndim != 1:
            array = array.reshape(-1)
        dtype = array.dtype
        if dtype is not self._plan_dtype:
            self._plan = self._plan_for(dtype)
            self._plan_dtype = dtype
        mode, check = self._plan
        if mode == _AS_IS:
            return array
        if mode == _SAFE_CAST:
            try:
                return array.astype(self.dtype, casting="same_value")
            except ValueError:
                self._raise_out_of_range(array)
                raise
        if mode == _GENERIC:
            return self._as_tokens_generic(array)
        if check is not None and len(array):
            unsigned, bound = check
            view = array if unsigned is None else array.view(unsigned)
            if view.item(view.argmax()) > bound:
                self._raise_out_of_range(array)
        return array if mode == _CHECK else array.astype(self.dtype)

    def _plan_for(self, dtype: np.dtype) -> tuple[int, Any]:
        """How `_as_tokens` takes an input of `dtype`: (mode, None or (unsigned view dtype, bound))."""
        low, high = self._limits
        if not (dtype.isnative and self.dtype.isnative and dtype.kind in "iu" and self.dtype.kind in "iu") or low:
            return _GENERIC, None
        info = np.iinfo(dtype)
        if dtype == self.dtype:
            if self.vocab_size is None:
                return _AS_IS, None  # every value of the store's own dtype fits it
            mode = _CHECK
        elif info.min >= low and info.max <= high:
            return _CAST, None  # e.g. uint8 into uint16: every value fits
        elif _SAME_VALUE_CAST and high == np.iinfo(self.dtype).max and "u" in (dtype.kind, self.dtype.kind):
            # the range is exactly the store dtype's and no negative id can fit it (or exist):
            # numpy's value-checked cast converts and checks in one step
            return _SAFE_CAST, None
        else:
            mode = _CHECK_CAST
        if dtype.kind == "i":  # negative ids become huge unsigned ones: one bound checks both ends
            return mode, (np.dtype(f"u{dtype.itemsize}"), min(high, int(info.max)))
        return mode, (None, high)

    def _as_tokens_generic(self, array: np.ndarray) -> np.ndarray:
        """Any other input: refuse non-integers, check the range with min/max, cast if needed."""
        if len(array) == 0 or (array.dtype == self.dtype and self.vocab_size is None):
            return array.astype(self.dtype, copy=False)
        if array.dtype.kind not in "iub" and array.dtype != self.dtype:
            raise TokenizerError(f"{self.prefix}: token ids must be integers, got dtype {array.dtype}")
        low, high = self._limits
        if int(array.min()) < low or int(array.max()) > high:
            self._raise_out_of_range(array)
        return array.astype(self.dtype, copy=False)

    def _id_limits(self) -> tuple[int, int]:
        info = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None
        low = 0 if info is None else max(0, int(info.min))
        high = int(info.max) if info is not None else 2**53
        if self.vocab_size is not None:
            high = min(high, self.vocab_size - 1)
        return low, high

    def _raise_out_of_range(self, array: np.ndarray) -> None:
        low, high = self._limits
        bad = array[(array < low) | (array > high)]
        if not len(bad):
            return  # nothing out of range: the caller re-raises its own error
        raise TokenizerError(
            f"{self.prefix}: token id {int(bad[0])} does not fit the store (valid ids {low}..{high} "
            f"for dtype {self.dtype}, vocab_size {self.vocab_size}); use a wider dtype or the "
            "tokenizer the store was made for"
        )

    def _write(self, array: np.ndarray) -> None:
        data = array.data if array.flags.c_contiguous else np.ascontiguousarray(array).data
        if len(array) < self._stage_items:
            self._stage.extend(data)
            if len(self._stage) >= _STAGE_BYTES:
                self._flush_stage()
        else:
            self._flush_stage()
            self._bin.write(data)
            self._bin_hash.update(data)
        self._tokens += len(array)

    def _flush_stage(self) -> None:
        """Write (and hash) the staged bytes of small documents."""
        if self._stage:
            self._bin.write(self._stage)
            self._bin_hash.update(self._stage)
            self._stage = bytearray()

    # -- finishing ---------------------------------------------------------------------------

    @property
    def num_sequences(self) -> int:
        """Sequences written so far."""
        return self._sequences

    @property
    def num_documents(self) -> int:
        """Documents ended so far."""
        return self._documents.count + len(self._documents.pending) - 1

    @property
    def num_tokens(self) -> int:
        """Tokens written so far."""
        return self._tokens

    def finalize(self) -> str:
        """Write the index and manifest, then publish the store; returns the prefix."""
        self._check_open()
        self._state = "finalizing"
        staged: list[str] = []
        try:
            self._flush_stage()
            self._bin.close()
            self._lengths.close()
            self._documents.close()
            idx_path = commit.temp_path(self.prefix + ".idx")
            staged.append(idx_path)
            idx_digest = self._write_index(idx_path, self.dtype)
            renames = [(self._bin_path, self.prefix + ".bin"), (idx_path, self.prefix + ".idx")]
            mask_sums = None
            if self._masks is not None:
                self._masks.close()
                mask_idx_path = commit.temp_path(mask_prefix(self.prefix) + ".idx")
                staged.append(mask_idx_path)
                mask_sums = Checksums(
                    algorithm=self._masks.hasher.algorithm,
                    idx=self._write_index(mask_idx_path, MASK_DTYPE),
                    bin_block_size=self._masks.hasher.block_size,
                    bin_blocks=tuple(self._masks.hasher.finish()),
                )
                renames += [
                    (self._masks.path, mask_prefix(self.prefix) + ".bin"),
                    (mask_idx_path, mask_prefix(self.prefix) + ".idx"),
                ]
            json_path = commit.temp_path(manifest_path(self.prefix))
            staged.append(json_path)
            with open(json_path, "w", encoding="utf-8") as f:
                f.write(self._manifest(idx_digest, mask_sums).to_json())
            self._lengths.discard()  # composed into the .idx: a kill from here on leaves no spill file
            self._documents.discard()
            # the manifest goes last; a plain store replacing a chat store removes the old masks
            commit.publish(self.prefix, [*renames, (json_path, manifest_path(self.prefix))], self._stale_masks())
        except BaseException:
            if os.path.exists(commit.journal_path(self.prefix)):
                raise  # publication began: the journal rolls it forward on the next open
            for path in staged:
                if os.path.exists(path):
                    os.unlink(path)
            self.abort()
            raise
        self._state = "done"
        return self.prefix

    def _stale_masks(self) -> list[str]:
        """The masks a plain store must remove: those of the chat store it replaces, as its manifest lists them
        (never a store of its own that merely happens to be named PREFIX.mask)."""
        if self._masks is not None:
            return []
        try:
            old = read_manifest(self.prefix)
        except CorruptStoreError:
            return []
        if old is None or old.masks is None:
            return []
        return [path for path in commit.mask_paths(self.prefix) if os.path.exists(path)]

    def _write_index(self, path: str, dtype: np.dtype) -> str:
        header = IndexHeader(dtype, self._lengths.count, self._documents.count)
        hasher = new_hasher(self._bin_hash.algorithm)
        itemsize = dtype.itemsize
        with open(path, "wb", buffering=_IO_BUFFER) as f:

            def emit(data: bytes | memoryview) -> None:
                f.write(data)
                hasher.update(data)

            emit(header.pack())
            for chunk in self._lengths.chunks():
                emit(chunk.data)
            position = 0
            for chunk in self._lengths.chunks():
                ends = np.cumsum(chunk, dtype=np.int64) * itemsize + position
                starts = np.empty_like(ends)
                starts[0] = position
                starts[1:] = ends[:-1]
                position = int(ends[-1])
                emit(starts.data)
            for chunk in self._documents.chunks():
                emit(chunk.data)
        return hasher.hexdigest()

    def _manifest(self, idx_digest: str, masks: Checksums | None) -> Manifest:
        provenance = {"tokenport_version": _tokenport_version(), **self._provenance}
        return Manifest(
            dtype=self.dtype.name,
            sequences=self._lengths.count,
            documents=self._documents.count - 1,
            tokens=self._tokens,
            checksums=Checksums(
                algorithm=self._bin_hash.algorithm,
                idx=idx_digest,
                bin_block_size=self._bin_hash.block_size,
                bin_blocks=tuple(self._bin_hash.finish()),
            ),
            tokenizer=self._tokenizer,
            provenance=provenance,
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            masks=masks,
            chat=self._chat,
        )

    def abort(self) -> None:
        """Drop everything written so far; nothing appears at the prefix."""
        if self._state == "done":
            return
        self._state = "aborted"
        self._stage = bytearray()
        if not self._bin.closed:
            self._bin.close()
        for path in (self._bin_path,):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._lengths.discard()
        self._documents.discard()
        if self._masks is not None:
            self._masks.discard()

    def _check_open(self) -> None:
        if self._state != "open":
            raise TokenportError(f"{self.prefix}: writer is {self._state}; open a new writer")

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            if self._state == "open":
                self.finalize()
        else:
            self.abort()

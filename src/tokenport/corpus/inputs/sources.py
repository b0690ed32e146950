"""Input files: expanding paths, directories and globs (local or URLs) and opening their bytes, both
through storage/, so object-store inputs get the retries, backoff and error messages of stores.

Expansion is sorted, so the input order, and with it the output, is the same on every run.
Compression is inferred from the last suffix and decoded here, the same way for local files
and URLs (zstd frames are read across, as `zstd -d` does).
"""

from __future__ import annotations

import bz2
import contextlib
import glob
import gzip
import io
import json
import lzma
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from ...errors import ConfigError, InputDataError, StorageError
from ...storage import GLOB_CHARS, find, is_remote, local_path, open_source

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
ARROW_SUFFIXES = (".arrow",)  # Arrow IPC streams, as HF datasets' save_to_disk writes them
TEXT_SUFFIXES = frozenset(
    ".txt .text .md .markdown .rst .tex .org .adoc .log .py .pyi .c .h .cc .cpp .cxx .hpp .hh .java .js .ts .jsx "
    ".tsx .go .rs .rb .php .pl .sh .bash .lua .swift .kt .scala .cs .m .r .jl .hs .ml .sql .css .yaml .yml .toml "
    ".ini .cfg".split()
)
"""Suffixes of text files (prose, markup, source code, configuration), each read as one document."""
TABLE_SUFFIXES = (".csv", ".tsv")
_SHOWN = (".txt", ".md", ".rst", ".py", ".c", ".js")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
_READ_BUFFER = 1 << 20
_ZSTD_FEED = 1 << 14


@dataclass(frozen=True)
class InputFile:
    """One input file: where it is, how to read it, and a `version` that changes with its content."""

    path: str
    format: str
    compression: str | None
    size: int
    version: str


def detect_format(path: str, as_text: bool = False) -> tuple[str, str | None]:
    """(format, compression) from the name: jsonl, parquet, arrow or text; gzip, zstd, bz2, xz or None.

    A text file has a suffix of TEXT_SUFFIXES (prose, markup, source code, config) or none; any other
    suffix (.csv, .pdf, .html...) is an InputDataError saying what to do, unless `as_text` reads it as text."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    stem, suffix = os.path.splitext(name)
    compression = COMPRESSIONS.get(suffix)
    if compression is not None:
        suffix = os.path.splitext(stem)[1]
    if suffix in JSONL_SUFFIXES:
        return "jsonl", compression
    if suffix in ARROW_SUFFIXES:
        if compression is not None:
            raise ConfigError(
                f"inputs: {path}: read Arrow files uncompressed; decompress the outer {compression} first"
            )
        return "arrow", None
    if suffix in PARQUET_SUFFIXES:
        if compression is not None:
            raise ConfigError(
                f"inputs: {path}: parquet files compress internally; decompress the outer {compression} first"
            )
        return "parquet", None
    if not as_text and suffix and suffix not in TEXT_SUFFIXES:
        raise InputDataError(unknown_format(path, suffix))
    return "text", compression


def unknown_format(path: str, suffix: str, more: int = 0, within: str | None = None) -> str:
    """What to do with an input whose suffix prepare does not read (`more`: other such files found
    in `within`, the directory or glob that named it)."""
    others = f" (and {more} more such file{'s' if more > 1 else ''})" if more else ""
    if suffix in TABLE_SUFFIXES:
        name = os.path.basename(path)
        if os.path.splitext(name)[1].lower() in COMPRESSIONS:  # the one-liner reads the decompressed table
            name = os.path.splitext(name)[0]
            suffix_hint = f"decompress it to {name}, then "
        else:
            suffix_hint = ""
        tabs = ", delimiter=chr(9)" if suffix == ".tsv" else ""
        how = (
            f'{suffix_hint}convert it to jsonl, one JSON object per row, e.g. python -c "import csv, json, sys; '
            f'[print(json.dumps(row)) for row in csv.DictReader(sys.stdin{tabs})]" < {name} > '
            f"{os.path.splitext(name)[0]}.jsonl, then prepare the .jsonl with --text-key COLUMN (the column "
            "holding the text)"
        )
    else:
        how = "extract its text to .txt or .jsonl files first"
    if within is not None and GLOB_CHARS & set(within):
        how += f"; or leave it out with a pattern narrower than {within!r} that names only the files to read"
    elif within is not None:
        how += f"; or leave it out by naming only the files to read, e.g. '{within.rstrip('/')}/**/*.jsonl'"
    return (
        f"inputs: {path}{others}: prepare does not read {suffix} files (it reads jsonl/json/ndjson, parquet, "
        f"Arrow, and text files: no suffix, or {', '.join(_SHOWN)}...); {how}, or pass --as-text "
        "(as_text=True) to read every such file as one text document"
    )


def expand_inputs(inputs: Sequence[str], exclude: str, as_text: bool = False) -> list[InputFile]:
    """The files that `inputs` name, in order (each directory or glob sorted), without repeats.

    Directories are walked recursively; names starting with "." are skipped, and so is
    `exclude` (the output directory), so a rerun never reads its own output. A file of a suffix
    prepare does not read (see `detect_format`), named or found in a directory or glob, is refused
    before any work, naming it and how many more there are, unless `as_text`.
    """
    files: list[InputFile] = []
    seen: set[str] = set()
    for spec in inputs:
        found = _expand_remote(spec, as_text) if is_remote(spec) else _expand_local(spec, exclude, as_text)
        if not found:
            raise ConfigError(f"inputs: {spec!r} names no files; check the path or pattern")
        for item in found:
            if item.path not in seen:
                seen.add(item.path)
                files.append(item)
    return files


def _unread(paths: Sequence[str], as_text: bool, spec: str) -> None:
    """Refuse the first of `paths` (what input `spec` names) whose suffix prepare does not read, counting the others."""
    if as_text:
        return
    unread = []
    for path in paths:
        try:
            detect_format(path)
        except InputDataError:
            unread.append(path)
    if unread:
        name = unread[0].rstrip("/").rsplit("/", 1)[-1].lower()
        stem, suffix = os.path.splitext(name)
        suffix = os.path.splitext(stem)[1] if suffix in COMPRESSIONS else suffix
        within = None if unread[0] in (spec, local_path(spec), os.path.abspath(local_path(spec))) else spec
        raise InputDataError(unknown_format(unread[0], suffix, len(unread) - 1, within))


def _expand_local(spec: str, exclude: str, as_text: bool) -> list[InputFile]:
    path = local_path(spec)
    exclude = os.path.abspath(exclude)
    if GLOB_CHARS & set(path):
        matches = sorted(os.path.abspath(m) for m in glob.glob(path, recursive=True))
    elif os.path.exists(path):
        matches = [os.path.abspath(path)]
    else:
        raise ConfigError(f"inputs: {spec!r} does not exist; check the path")
    names: list[str] = []
    for match in matches:
        if _inside(match, exclude):
            continue
        if os.path.isdir(match):
            names.extend(sorted(_walk(match, exclude)))
        elif os.path.isfile(match):
            names.append(match)
    _unread(names, as_text, spec)
    return [_local_file(name, as_text) for name in names]


def _walk(top: str, exclude: str) -> Iterator[str]:
    for directory, subdirs, names in os.walk(top):
        subdirs.sort()
        saved = _saved_dataset_files(directory, names)
        if saved is not None:  # an HF dataset saved to disk: its Arrow shards, in its own order
            subdirs[:] = []
            yield from saved
            continue
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and not _inside(os.path.join(directory, d), exclude)]
        for name in names:
            if not name.startswith(".") and name != "dataset_dict.json":
                yield os.path.join(directory, name)


def _saved_dataset_files(directory: str, names: list[str]) -> list[str] | None:
    """The Arrow shards of a directory written by HF ``Dataset.save_to_disk`` (state.json lists
    them), or None when the directory is not one."""
    if "state.json" not in names or "dataset_info.json" not in names:
        return None
    try:
        with open(os.path.join(directory, "state.json"), encoding="utf-8") as f:
            files = [entry["filename"] for entry in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputDataError(f"{directory}/state.json: not an HF saved-dataset state ({exc})") from None
    return [os.path.join(directory, name) for name in files]


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _local_file(path: str, as_text: bool) -> InputFile:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read ({exc.strerror})") from None
    return InputFile(path, *detect_format(path, as_text), st.st_size, f"{st.st_size}:{st.st_mtime_ns}")


def _expand_remote(spec: str, as_text: bool) -> list[InputFile]:
    found = find(spec)
    _unread([f.url for f in found], as_text, spec)
    return [InputFile(f.url, *detect_format(f.url, as_text), f.size, f.version) for f in found]


def open_raw(path: str) -> BinaryIO:
    """The stored bytes of an input file (compressed as they are), for reading."""
    try:
        return open_source(path).stream()
    except StorageError as exc:
        if is_remote(path):
            raise  # the store's own message: not found, access denied, or still failing after retries
        raise InputDataError(str(exc)) from None


@contextlib.contextmanager
def open_decoded(path: str, compression: str | None) -> Iterator[BinaryIO]:
    """The bytes of an input file after decompression, as a buffered binary stream."""
    with open_raw(path) as raw:
        if compression is None:
            yield raw
        elif compression == "gzip":
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f  # type: ignore[misc]
        elif compression == "bz2":
            with bz2.BZ2File(raw) as f:
                yield f  # type: ignore[misc]
        elif compression == "xz":
            with lzma.LZMAFile(raw) as f:
                yield f  # type: ignore[misc]
        else:
            with io.BufferedReader(_ZstdFrames(_zstandard(path).ZstdDecompressor(), raw), _READ_BUFFER) as reader:
                yield reader


class _ZstdFrames(io.RawIOBase):
    """The content of zstd frames one after another (as `zstd -d` reads them); input that ends inside
    a frame is an EOFError, where zstandard's stream_reader would end quietly with what it had."""

    def __init__(self, decompressor: Any, raw: BinaryIO) -> None:
        self._decompressor = decompressor
        self._raw = raw
        self._frame: Any = None  # the decompressor of the frame under way; None between frames
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            data = self._raw.read(_ZSTD_FEED)  # small pieces: one piece's output stays small
            if not data:
                if self._frame is not None:
                    raise EOFError("the zstd stream ends inside a frame: the file is truncated")
                return 0
            self._pending = memoryview(self._decompress(data))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                self._frame = self._decompressor.decompressobj()
            out.append(self._frame.decompress(data))
            data = b""
            if self._frame.eof:  # the frame is complete: what follows it starts the next one
                data, self._frame = self._frame.unused_data, None
        return b"".join(out)


def _zstandard(path: str) -> Any:
    try:
        import zstandard
    except ImportError:
        raise ConfigError(
            f"inputs: {path} is zstd-compressed, which needs zstandard: pip install 'tokenport[fast]'"
        ) from None
    return zstandard


def parquet_module(path: str) -> Any:
    """pyarrow.parquet, or a ConfigError naming the extra that provides it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            f"inputs: {path} is a parquet file, which needs pyarrow: pip install 'tokenport[parquet]'"
        ) from None
    return pq


def decode_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean compressed input is corrupt or truncated."""
    errors: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError)
    try:
        import zstandard
    except ImportError:
        return errors
    return errors + (zstandard.ZstdError,)

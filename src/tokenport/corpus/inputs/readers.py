"""Readers: one slice of an input file to documents (jsonl lines, parquet rows, whole text files).

Malformed input goes to `Problems`, which stops with an InputDataError naming the file and
line (1-based) or row (0-based), or skips and counts it. Ids are ``path:line`` for jsonl,
``path:row`` for parquet and ``path`` for text files. With ``text_key=None`` (conversations) a
record's document has no text and the whole record as its metadata. Every reader adds the bytes
it consumed (after decompression) to the unit's `bytes_in`. Given an `id_field`, a record's value of
that field (or column) is the document's `identifier` (text files have none); it stays in the metadata
where the record's other fields are (jsonl, Arrow), and parquet reads that column only for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ...errors import ConfigError
from ..run.stats import Problems
from ..run.units import Slice
from .documents import Document
from .sources import decode_errors, open_decoded, open_raw, parquet_module

_PARQUET_BATCH_ROWS = 4096


def read_slice(
    piece: Slice, text_key: str | None, problems: Problems, id_field: str | None = None
) -> Iterator[Document]:
    """The documents of `piece`, in order (whole records when `text_key` is None), each with its record's
    `id_field` value as its identifier."""
    return _READERS[piece.format](piece, text_key, problems, id_field)


def _jsonl(piece: Slice, text_key: str | None, problems: Problems, id_field: str | None) -> Iterator[Document]:
    """One document per non-blank line; the other fields of the object become its metadata."""
    stats = problems.stats
    path = piece.path
    line = piece.first
    remaining = None if piece.stop is None else piece.stop - piece.start
    try:
        with open_decoded(piece.inflated or path, None if piece.inflated else piece.compression) as f:
            if piece.start:
                f.seek(piece.start)
            for raw in f:
                line += 1
                stats.bytes_in += len(raw)
                if remaining is not None:
                    remaining -= len(raw)
                if not raw.isspace():
                    try:
                        record = _loads(raw)
                    except UnicodeDecodeError as exc:
                        problems.report("bad_encoding", f"{path}: line {line}", f"byte {exc.start} is not valid UTF-8")
                        record = None
                    except ValueError as exc:
                        problems.report("bad_json", f"{path}: line {line}", f"is not valid JSON ({exc})")
                        record = None
                    if record is not None:
                        document = _record(record, text_key, path, line, problems, id_field)
                        if document is not None:
                            yield document
                if remaining is not None and remaining <= 0:
                    return
    except decode_errors() as exc:
        problems.report("corrupt_input", f"{path}: after line {line}", f"cannot be decompressed ({exc})")


def _loads(raw: bytes) -> Any:
    """One jsonl line parsed as ``json.loads`` parses it, by msgspec (twice as fast) where msgspec can: what
    msgspec refuses (NaN, 1e400, lone surrogates, a BOM, UTF-16, deep nesting, malformed JSON) is parsed or refused by
    ``json.loads`` itself, so the values, and the errors, are json's."""
    try:
        return _DECODE(raw)
    except (ValueError, RecursionError, msgspec.MsgspecError):
        return json.loads(raw)


_DECODE = msgspec.json.Decoder().decode


def _record(
    record: object, text_key: str | None, path: str, line: int, problems: Problems, id_field: str | None = None
) -> Document | None:
    """The document of one parsed jsonl line, or None (reported) when it has no string text."""
    if not isinstance(record, dict):
        problems.report("bad_json", f"{path}: line {line}", f"is a JSON {type(record).__name__}, not an object")
        return None
    if text_key is None:
        return Document("", f"{path}:{line}", record)
    text = record.pop(text_key, None)
    if isinstance(text, str):
        return Document(text, f"{path}:{line}", record, record.get(id_field) if id_field is not None else None)
    if text is None:
        fields = ", ".join(map(repr, record)) or "none"
        problems.report(
            "missing_text",
            f"{path}: line {line}",
            f"has no {text_key!r} field (or it is null; fields: "
            f"{fields}); set text_key / --text-key to the field holding the text",
        )
    else:
        problems.report(
            "not_text", f"{path}: line {line}", f"field {text_key!r} is a JSON {type(text).__name__}, not a string"
        )
    return None


def _text(piece: Slice, text_key: str | None, problems: Problems, id_field: str | None) -> Iterator[Document]:
    """The whole file, decoded as UTF-8, is one document."""
    path = piece.path
    try:
        with open_decoded(path, piece.compression) as f:
            data = f.read()
    except decode_errors() as exc:
        problems.report("corrupt_input", path, f"cannot be decompressed ({exc})")
        return
    problems.stats.bytes_in += len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.report("bad_encoding", f"{path}: byte {exc.start}", "is not valid UTF-8")
        return
    yield Document(text, path, {})


def _parquet(piece: Slice, text_key: str | None, problems: Problems, id_field: str | None) -> Iterator[Document]:
    """One document per row of column `text_key`, row groups [start, stop) of the file (with
    `text_key` None: every row as a record); column `id_field`, if the file has it, names each."""
    import pyarrow as pa

    pq = parquet_module(piece.path)
    path = piece.path
    row = piece.first
    with open_raw(path) as f:
        try:
            parquet = pq.ParquetFile(f)
            groups = list(range(parquet.num_row_groups) if piece.stop is None else range(piece.start, piece.stop))
            if text_key is None:
                for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=groups):
                    problems.stats.bytes_in += batch.nbytes
                    for record in batch.to_pylist():
                        yield Document("", f"{path}:{row}", record)
                        row += 1
                return
            if text_key not in parquet.schema_arrow.names:
                rows = sum(parquet.metadata.row_group(g).num_rows for g in groups)
                problems.report(
                    "missing_text",
                    path,
                    f"has no column {text_key!r} (columns: {', '.join(parquet.schema_arrow.names)}); "
                    "set text_key / --text-key",
                    count=rows,
                )
                return
            named = id_field is not None and id_field != text_key and id_field in parquet.schema_arrow.names
            columns = [text_key, id_field] if named else [text_key]
            for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=groups, columns=columns):
                column = batch.column(0)
                if not _text_column(column, text_key, f"{path}: row {row}", problems):
                    row += len(column)
                    continue
                names = batch.column(1).to_pylist() if named else [None] * len(column)
                for text, name in zip(column.to_pylist(), names):
                    if text is None:
                        problems.report("missing_text", f"{path}: row {row}", f"column {text_key!r} is null")
                    else:
                        yield Document(text, f"{path}:{row}", {}, name)
                    row += 1
        except (pa.ArrowException, OSError) as exc:
            problems.report("corrupt_input", f"{path}: row {row}", f"cannot be read as parquet ({exc})")


def _arrow(piece: Slice, text_key: str | None, problems: Problems, id_field: str | None) -> Iterator[Document]:
    """One document per row of column `text_key` of an Arrow IPC stream (HF datasets' shards);
    the row's other columns become the document's metadata (all of them with `text_key` None)."""
    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError(
            f"inputs: {piece.path} is an Arrow file (an HF saved dataset's shard), which needs "
            "pyarrow: pip install 'tokenport[parquet]'"
        ) from None

    path, row = piece.path, 0
    with open_raw(path) as f:
        try:
            reader = pa.ipc.open_stream(f)
            if text_key is None:
                for batch in reader:
                    problems.stats.bytes_in += batch.nbytes
                    for record in batch.to_pylist():
                        yield Document("", f"{path}:{row}", record)
                        row += 1
                return
            if text_key not in reader.schema.names:
                problems.report(
                    "missing_text",
                    path,
                    f"has no column {text_key!r} (columns: "
                    f"{', '.join(reader.schema.names)}); set text_key / --text-key",
                )
                return
            for batch in reader:
                column = batch.column(batch.schema.get_field_index(text_key))
                if not _text_column(column, text_key, f"{path}: row {row}", problems):
                    row += len(column)
                    continue
                for metadata in batch.to_pylist():
                    text = metadata.pop(text_key)
                    if text is None:
                        problems.report("missing_text", f"{path}: row {row}", f"column {text_key!r} is null")
                    else:
                        yield Document(text, f"{path}:{row}", metadata, metadata.get(id_field) if id_field else None)
                    row += 1
        except (pa.ArrowException, OSError) as exc:
            problems.report("corrupt_input", f"{path}: row {row}", f"cannot be read as an Arrow stream ({exc})")


_READERS: dict[str, Callable[[Slice, str | None, Problems, str | None], Iterator[Document]]] = {
    "arrow": _arrow,
    "jsonl": _jsonl,
    "parquet": _parquet,
    "text": _text,
}


def _text_column(column: Any, text_key: str, where: str, problems: Problems) -> bool:
    """Whether an Arrow column of texts holds strings (counting its bytes read); else report it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        problems.report("not_text", where, f"column {text_key!r} has type {column.type}, not string", count=len(column))
        return False
    problems.stats.bytes_in += int(pc.sum(pc.binary_length(column)).as_py() or 0)
    return True

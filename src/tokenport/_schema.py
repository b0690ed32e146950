"""The one typed boundary for every document tokenport persists and reads back.

A persisted document (a store manifest, a loader state or receipt, mixture updates, prepare's
state and lock, the upload journal, the node cache's ledger and pins, a dock checkpoint, an
adapter's configuration) is declared once as a `Document` (a strict msgspec struct) and read only
through `decode` / `read_document`. A wrong type, a missing or unknown key, an integer out of
range, NaN or infinity, text that is not UTF-8 or not JSON, a truncated file: each is one
TokenportError (the caller's class) naming the file and the field's path, with what to do.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

import msgspec

from .errors import CorruptStoreError, TokenportError

T = TypeVar("T")

INT64_MAX = 2**63 - 1

Count = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
"""A non-negative count or position that fits numpy's int64 (2**63 and above is refused)."""
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=INT64_MAX)]
"""Any integer that fits numpy's int64."""
Positive = Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)]
"""A count of at least one that fits int64."""
Seed = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
"""A seed as numpy's legacy generators take it."""
Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]
"""A finite float: the bounds refuse NaN and both infinities."""
NonNegativeFinite = Annotated[float, msgspec.Meta(ge=0.0, le=1.7976931348623157e308)]
"""A finite float of zero or more."""
Text = Annotated[str, msgspec.Meta(min_length=1)]
"""A non-empty string."""


class Document(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every persisted document: immutable, strict, unknown keys refused.

    Subclasses repeat ``frozen=True`` (``class Manifest(Document, frozen=True)``): msgspec inherits
    it, but type checkers read each class's own keywords. They declare fields with the types above;
    ``__post_init__`` may check what a type alone cannot (one field against another) and raise
    ValueError, which `decode` reports like a type error.
    """


def decode(
    data: bytes | bytearray | memoryview | str | Any,
    schema: type[T],
    *,
    where: str,
    remedy: str,
    error: type[TokenportError] = CorruptStoreError,
) -> T:
    """``data`` (JSON text or bytes, or objects already parsed) as ``schema``; ``error`` naming ``where`` if not.

    ``remedy`` says what to do ("delete it and run again"). Strict: a string is never read as a
    list, a float never as an int, a bool never as a number.
    """
    try:
        if isinstance(data, (bytes, bytearray, memoryview, str)):
            if isinstance(data, str):
                data = data.encode("utf-8", "surrogatepass")
            bytes(data).decode("utf-8")  # msgspec passes some invalid UTF-8 through in strings
            return msgspec.json.decode(data, type=schema, strict=True)
        _refuse_non_finite(data, "$")
        return msgspec.convert(data, type=schema, strict=True)
    except UnicodeDecodeError as exc:
        detail = f"not UTF-8 text (byte {exc.start})"
    except msgspec.ValidationError as exc:
        detail = str(exc)
    except msgspec.DecodeError as exc:
        detail = f"not valid JSON ({exc})"
    except _NonFinite as exc:
        detail = str(exc)
    raise error(f"{where}: {detail}; {remedy}")


def read_document(
    path: str,
    schema: type[T],
    *,
    remedy: str,
    error: type[TokenportError] = CorruptStoreError,
) -> T:
    """The document in the file ``path`` as ``schema``; FileNotFoundError passes through (absent is not corrupt)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror}); {remedy}") from None
    return decode(data, schema, where=path, remedy=remedy, error=error)


def encode(document: Any) -> bytes:
    """``document`` as compact JSON with sorted keys (what `decode` reads back equal)."""
    return msgspec.json.encode(document, order="sorted")


def to_builtins(document: Any) -> Any:
    """``document`` as plain dicts, lists and scalars (for callers that embed it in a larger JSON)."""
    return msgspec.to_builtins(document, order="sorted")


class _NonFinite(ValueError):
    pass


def _refuse_non_finite(value: Any, path: str) -> None:
    """Raise _NonFinite naming the path of the first NaN or infinity among parsed objects.

    JSON text cannot carry them (msgspec refuses the literals), but Python's json module writes
    and reads them, so objects parsed elsewhere are checked before conversion.
    """
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NonFinite(f"{value!r} is not a finite number - at `{path}`")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_non_finite(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _refuse_non_finite(item, f"{path}[{index}]")

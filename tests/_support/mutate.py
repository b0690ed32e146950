"""Mutations of a persisted JSON document, for the mutation fuzz tests every document kind gets.

`mutations(text)` yields (label, bytes) pairs: each leaf's type swapped, each key deleted, an
unknown key added to each object, out-of-range numbers (negative, 2**63, 2**64, NaN, infinity,
floats for ints), strings where lists belong, truncations and bytes that are not UTF-8. A reader
under test must refuse each with a TokenportError or read back a value equal to what a valid
document would give; it must never crash with another exception or return other data.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

_SWAPS: tuple[Any, ...] = ("x", 1, -1, 1.5, True, None, [], {}, 2**63, 2**64, -(2**63) - 1)
_NUMBERS: tuple[Any, ...] = (-1, 2**63, 2**64, float("nan"), float("inf"), float("-inf"), 0.5, 1e308 * 10)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):  # the first few elements stand for the rest
            yield from _paths(item, (*path, index))


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(document)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def _delete(document: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(document)
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


def _dump(document: Any) -> bytes:
    return json.dumps(document, allow_nan=True).encode()


def mutations(text: str | bytes, *, limit: int | None = None) -> Iterator[tuple[str, bytes]]:
    """The mutations of the JSON document ``text``, each labelled with where and what changed."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    document = json.loads(raw)
    produced = 0

    def emit(label: str, data: bytes) -> Iterator[tuple[str, bytes]]:
        nonlocal produced
        if limit is None or produced < limit:
            produced += 1
            yield label, data

    for path, value in _paths(document):
        where = "$" + "".join(f"[{key!r}]" for key in path)
        for swap in _SWAPS:
            if type(swap) is not type(value) or swap != value:
                yield from emit(f"{where} = {swap!r}", _dump(_set(document, path, swap)))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for number in _NUMBERS:
                yield from emit(f"{where} = {number!r}", _dump(_set(document, path, number)))
        if isinstance(value, list):
            yield from emit(f"{where} = a string", _dump(_set(document, path, "train")))
        if isinstance(value, dict):
            yield from emit(f"{where} + unknown key", _dump(_set(document, path, {**value, "zz_unknown": 1})))
        if path:
            parent = document
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                yield from emit(f"del {where}", _dump(_delete(document, path)))
    for cut in sorted({1, len(raw) // 3, len(raw) // 2, len(raw) - 2}):
        if 0 < cut < len(raw):
            yield from emit(f"truncated at {cut}", raw[:cut])
    yield from emit("empty", b"")
    yield from emit("not UTF-8", raw[: len(raw) // 2] + b"\xff\xfe" + raw[len(raw) // 2 :])
    yield from emit("not JSON", b"\x00\x01 binary")

"""Python values of object columns in a checkpoint: kept as JSON text, and only values JSON gives back equal.

A checkpoint never pickles (loading a pickle runs code from the file). A value a JSON round trip
returns exactly -- ``None``, bools, ints, finite floats, strings, and lists and string-keyed dicts
of them -- is written as JSON text and read back through the typed schema layer; anything else (a
tuple would come back a list, an arbitrary object not at all) refuses the save, naming the column
and row, instead of changing on the way.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from .._schema import decode
from ..errors import ConfigError, CorruptStoreError

__all__ = ["json_problem", "json_texts", "json_values"]


def json_texts(values: np.ndarray, column: str) -> np.ndarray:
    """Each row's value as JSON text (a unicode array, which ``.npz`` holds without pickling)."""
    texts = []
    for row, value in enumerate(values.tolist()):
        where = _problem(value)
        if where is not None:
            raise ConfigError(
                f"column {column!r} row {row}: {where} is not JSON data (None, bool, int, finite float, str, "
                "list, dict of str keys), and a dock checkpoint keeps Python values only as JSON (it never "
                "pickles): put such values as JSON data, or clear that partition before saving"
            )
        texts.append(msgspec.json.encode(value).decode("utf-8"))
    return np.array(texts, dtype=str)


def json_values(texts: np.ndarray, where: str, remedy: str) -> np.ndarray:
    """The values ``json_texts`` wrote, each read through the typed schema layer (CorruptStoreError if not JSON)."""
    values = np.empty(len(texts), dtype=object)
    for row, text in enumerate(texts.tolist()):
        values[row] = decode(text, Any, where=f"{where}[{row}]", remedy=remedy, error=CorruptStoreError)
    return values


def json_problem(value: Any) -> str | None:
    """Where ``value`` holds something a JSON round trip would not return equal (in words), or None."""
    return _problem(value)


def _problem(value: Any, path: str = "its value") -> str | None:
    """Where ``value`` holds something a JSON round trip would not return equal, or None."""
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} ({value!r})"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path} (a string that is not UTF-8)"
        return None
    if isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _problem(item, f"{path}[{i}]"))), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} (a dict key {key!r:.40} that is not a str)"
            if (p := _problem(item, f"{path}[{key!r:.40}]")) is not None:
                return p
        return None
    return f"{path} (a {type(value).__name__})"

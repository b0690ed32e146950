"""Values into a column's dtype: a cast that refuses any value it would change (never wraps).

numpy's ``same_kind`` casting turns 2**40 into 0 in an int32 column. Here integers of any width
and sign go into any integer column and are range-checked (min/max on the input, skipped when
the input dtype's whole range fits); floats are refused by integer columns; a float column takes
integers and floats, rounding as float casts do, but a value that would overflow to inf is
refused. Bool columns take bools only; strings and Python objects go into object columns only;
bfloat16 columns take bfloat16 bits only (``BFLOAT16`` arrays), never a number to convert.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError
from .schema import BFLOAT16, OBJECT

__all__ = ["as_array", "fitted"]


def as_array(value: Any, what: str) -> np.ndarray:
    """``np.asarray(value)``, or a ConfigError naming ``what`` when it is no regular array (e.g. nested
    lists of unequal lengths), instead of numpy's bare ValueError."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{what}: not a regular array ({error})") from None


def fitted(values: np.ndarray, dtype: np.dtype, what: str, *, lengths: np.ndarray | None = None) -> np.ndarray:
    """``values`` cast to ``dtype``, or a ConfigError naming ``what`` (e.g. "column 'x'"), the value
    that does not fit and the dtype's range. ``lengths``: ``values`` is padded ``(rows, width, ...)``
    and only each row's first ``lengths[i]`` items are data (the padding may hold anything)."""
    source = values.dtype
    if source == dtype or np.can_cast(source, dtype, "safe"):
        return values.astype(dtype, copy=False)
    if dtype == BFLOAT16:
        raise ConfigError(
            f"{what}: dtype {source} is not bfloat16: pass bfloat16 values as their bits, "
            "tensor.view(torch.int16).numpy().view(tokenport.dock.BFLOAT16) (a number is never cast into them)"
        )
    if dtype == OBJECT:
        return values.astype(OBJECT)
    if dtype.kind == "b" or source.kind not in "iuf" or (dtype.kind in "iu" and source.kind == "f"):
        raise ConfigError(
            f"{what}: dtype {source} does not fit {dtype}"
            + (" (integers beyond 64 bits, None or other Python objects?)" if source.kind == "O" else "")
            + f"; pass {_kinds(dtype)}"
        )
    if dtype.kind in "iu":  # integers into a narrower or other-signed integer type: check the range
        info = np.iinfo(dtype)
        if values.size and (int(values.min()) < info.min or int(values.max()) > info.max):
            _refuse(
                values,
                (values < info.min) | (values > info.max),
                lengths,
                what,
                dtype,
                f"its range is {info.min}..{info.max}",
            )
        return values.astype(dtype)
    with np.errstate(over="ignore"):  # into a narrower float: rounding is fine, overflowing to inf is not
        cast = values.astype(dtype)
    if cast.size and not (np.isfinite(cast.min()) and np.isfinite(cast.max())):
        overflowed = np.isinf(cast) & ~np.isinf(values) if source.kind == "f" else np.isinf(cast)
        largest = float(np.finfo(dtype).max)
        _refuse(values, overflowed, lengths, what, dtype, f"it would overflow to inf beyond ±{largest:.6g}")
    return cast


def _refuse(
    values: np.ndarray, bad: np.ndarray, lengths: np.ndarray | None, what: str, dtype: np.dtype, why: str
) -> None:
    """Raise for the first bad item that is data (not padding); return if there is none."""
    if lengths is not None:
        real = np.arange(values.shape[1]) < lengths[:, None]
        bad = bad & real.reshape(real.shape + (1,) * (values.ndim - 2))
    where = np.flatnonzero(bad)
    if len(where):
        value = values.reshape(-1)[where[0]].item()
        raise ConfigError(
            f"{what}: value {value!r} does not fit its dtype {dtype} ({why}; {len(where)} value(s) "
            "do not fit): use a wider dtype or fix the data"
        )


def _kinds(dtype: np.dtype) -> str:
    if dtype.kind == "b":
        return "booleans"
    return "integers" if dtype.kind in "iu" else "integers or floats"

"""The argument checks every room shares, so one value is accepted or refused the same way everywhere.

Integers accept Python and numpy integers and refuse bools; a refusal is a ConfigError naming the
field, the value and what to pass.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any, TypeGuard

import numpy as np

from .errors import ConfigError

SEED_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a Python or numpy integer and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: object, minimum: int = 1, maximum: int | None = None, what: str = "") -> int:
    """Return ``value`` as an int, or raise ConfigError unless it is an integer in [minimum, maximum]
    (without a maximum, one an int64 holds: numpy refuses or wraps a larger one later)."""
    if not is_int(value) or value < minimum or value > (INT64_MAX if maximum is None else maximum):
        wanted = f"an integer of at least {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
        if maximum is None and is_int(value) and value > INT64_MAX:
            wanted += " and at most 2**63 - 1 (the int64 that holds it)"
        raise ConfigError(f"{name}={value!r} is invalid: pass {what + ', ' if what else ''}{wanted}")
    return int(value)


def check_positive(name: str, value: object, what: str = "") -> float:
    """Return ``value`` as a float, or raise ConfigError unless it is a finite real number above zero."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not float(value) > 0
    ):
        raise ConfigError(f"{name}={value!r} is invalid: pass {what + ', ' if what else ''}a finite number above 0")
    return float(value)


def check_seed(name: str, value: object) -> int:
    """Return ``value`` as an int seed, or raise ConfigError; None is refused (it never means global state)."""
    if value is None:
        raise ConfigError(f"{name}=None is invalid: pass an integer seed in [0, 2**32 - 1]; None is not a seed")
    return check_int(name, value, 0, SEED_MAX)


def check_choice(name: str, value: object, choices: Collection[object]) -> object:
    """Return ``value``, or raise ConfigError listing ``choices`` unless it is one of them."""
    if isinstance(value, bool) or value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ConfigError(f"{name}={value!r} is invalid: pass one of {listed}")
    return value


def check_sample_ids(ids: Any, count: int) -> np.ndarray:
    """``ids`` as a 1-D int64 array of sample ids of a dataset of ``count`` samples, or an IndexError."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= count):
        raise IndexError(f"sample ids must lie in [0, {count}): got {ids.min()}..{ids.max()}")
    return ids


def summable(weights: Any) -> np.ndarray:
    """Finite weights >= 0 (float64, rows along the last axis), each row whose sum would overflow scaled
    by a power of two (exact: every ratio kept) so that it sums to a finite value; other rows untouched.

    The one guard of every weight normalizer (``summable(w) / summable(w).sum()``): weights near the
    float maximum (``[1e308, 1e308]``) would otherwise sum to infinity and divide to zeros, and a blend
    would take everything from its first dataset. Rows that sum finitely keep their bits, so blends
    of ordinary weights (and Megatron's normalize) are unchanged.
    """
    raw = np.asarray(weights, dtype=np.float64)
    if raw.size == 0:
        return raw
    with np.errstate(over="ignore"):
        overflows = ~np.isfinite(raw.sum(axis=-1, keepdims=True))
    if not overflows.any():
        return raw
    _, exponent = np.frexp(raw.max(axis=-1, keepdims=True))  # the largest weight becomes < 1: the sum < len(row)
    return np.where(overflows, np.ldexp(raw, -exponent), raw)

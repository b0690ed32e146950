"""The argument checks every room shares, so one value is accepted or refused the same way everywhere.

Integers accept Python and numpy integers and refuse bools; a refusal is a ConfigError naming the
field, the value and what to pass.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import operator
import os
import warnings
from collections.abc import Callable, Collection, Hashable
from typing import Any, TypeGuard, TypeVar, cast

import numpy as np

from .errors import ConfigError, SampleIdError

F = TypeVar("F", bound=Callable[..., Any])

NOT_GIVEN: Any = type("NotGiven", (), {"__repr__": lambda self: "<not given>"})()
"""The default of a deprecated keyword: tells "not passed" from any value a caller may pass (None included)."""

SEED_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a Python or numpy integer and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def holds_numbers(array: np.ndarray) -> bool:
    """Whether ``array`` holds only real numbers: no bools (taken as 1, 0), strings (parsed) or other objects."""
    return array.dtype.kind in "iuf" or (
        array.dtype.kind == "O"
        and all(isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) for value in array.flat)
    )


def check_int(name: str, value: object, minimum: int = 1, maximum: int | None = None, what: str = "") -> int:
    """Return ``value`` as an int, or raise ConfigError unless it is an integer in [minimum, maximum]
    (without a maximum, one an int64 holds: numpy refuses or wraps a larger one later)."""
    if not is_int(value) or value < minimum or value > (INT64_MAX if maximum is None else maximum):
        wanted = f"an integer of at least {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
        if maximum is None and is_int(value) and value > INT64_MAX:
            wanted += " and at most 2**63 - 1 (the int64 that holds it)"
        raise ConfigError(f"{name}={value!r} is invalid: pass {what + ', ' if what else ''}{wanted}")
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` as a bool, or raise ConfigError unless it is one (a string or a number is not a flag)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name}={value!r} is invalid: pass True or False")
    return bool(value)


def memory_bytes() -> int:
    """This machine's physical memory in bytes (what no single in-memory index may exceed)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits_memory(name: str, value: object, nbytes: int, what: str) -> None:
    """Raise ConfigError when ``nbytes`` (what ``name=value`` makes ``what`` take) exceeds physical memory.

    A value such as ``2**63`` samples would otherwise fail deep in numpy (ValueError, MemoryError)
    or get the process killed by the kernel when the pages are touched.
    """
    total = memory_bytes()
    if nbytes > total:
        raise ConfigError(
            f"{name}={value!r} is too large: {what} would take {nbytes / 2**30:.3g} GiB, more than this "
            f"machine's {total / 2**30:.3g} GiB of memory; pass a smaller {name}"
        )


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
    if isinstance(value, bool) or not isinstance(value, Hashable) or value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ConfigError(f"{name}={value!r} is invalid: pass one of {listed}")
    return value


def check_sample_id(idx: Any, count: int) -> int:
    """``idx`` as the int id of a sample of a dataset of ``count`` samples, or a SampleIdError (an IndexError)."""
    try:
        index = None if isinstance(idx, (bool, np.bool_)) else operator.index(idx)
    except TypeError:
        index = None
    if index is None:
        raise SampleIdError(f"sample id {idx!r} is not an integer: pass an int in [0, {count})")
    if not 0 <= index < count:
        raise SampleIdError(f"sample id {index} is outside [0, {count})")
    return index


def check_sample_ids(ids: Any, count: int) -> np.ndarray:
    """``ids`` as a 1-D int64 array of sample ids of a dataset of ``count`` samples, or a SampleIdError.

    Only integers are ids: floats, bools and strings are refused rather than truncated or parsed,
    and a 2-D array rather than flattened; a scalar is a batch of one.
    """
    try:
        array = np.asarray(ids)
    except (TypeError, ValueError):
        array = np.asarray(None, dtype=object)  # ragged or unconvertible: refused below
    if array.ndim > 1:
        raise SampleIdError(f"sample ids must be a 1-D sequence of integers, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    values = array.reshape(-1)
    if array.dtype.kind == "O" and all(is_int(value) for value in values):
        low, high = min(int(value) for value in values), max(int(value) for value in values)
    elif array.dtype.kind in "iu":
        low, high = int(values.min()), int(values.max())
    else:
        raise SampleIdError(f"sample ids must be integers, got {array.dtype} values: pass ints in [0, {count})")
    if low < 0 or high >= count:
        raise SampleIdError(f"sample ids must lie in [0, {count}): got {low}..{high}")
    return values.astype(np.int64)


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


def renamed_keywords(**old_to_new: str) -> Callable[[F], F]:
    """Keep each old keyword of a function as a deprecated alias of its new spelling for one release:
    a DeprecationWarning naming the new one; passing both (by keyword or position) is a ConfigError."""

    def wrap(func: F) -> F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    value = kwargs.pop(old)
                    if new in kwargs or new in signature.bind_partial(*args).arguments:
                        raise ConfigError(
                            f"{func.__qualname__}: {old}= is the old spelling of {new}=; pass {new}= only"
                        )
                    deprecated_keyword(func.__qualname__, old, f"{new}=")
                    kwargs[new] = value
            return func(*args, **kwargs)

        return cast(F, call)

    return wrap


def deprecated_keyword(where: str, old: str, new: str, depth: int = 1) -> None:
    """The DeprecationWarning of an old keyword, naming its new spelling; warned at the line of the caller
    ``depth`` frames above the function that takes the keyword (1: its own caller; more through decorators)."""
    warnings.warn(
        f"{where}: {old}= is deprecated and goes in the next release; pass {new} instead",
        DeprecationWarning,
        stacklevel=2 + depth,
    )


def shuffle_seed(where: str, seed: object, shuffle: object = NOT_GIVEN) -> int | None:
    """A loader's ``seed`` (None: read in id order), or what the deprecated ``shuffle`` flag of ``where`` says
    (``shuffle=False`` is ``seed=None``); ConfigError when the two disagree."""
    if shuffle is not NOT_GIVEN:
        deprecated_keyword(where, "shuffle", "seed=None to read in id order", depth=2)
        if not check_bool("shuffle", shuffle):
            if seed:
                raise ConfigError(
                    f"seed={seed}: shuffle=False reads the samples in id order and draws nothing; drop seed "
                    "(or pass seed=None, the new spelling of shuffle=False)"
                )
            return None
        if seed is None:
            raise ConfigError("seed=None reads the samples in id order but shuffle=True asks for a random order")
    return None if seed is None else check_int("seed", seed, 0)

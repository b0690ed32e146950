"""The argument check the sampling modules share."""

from __future__ import annotations

import numpy as np

from .errors import ConfigError


def check_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise ConfigError naming ``name`` unless it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name}={value!r} is invalid: pass an integer of at least {minimum}")
    return int(value)

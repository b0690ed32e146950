"""How an object-store source reads (`RemoteOptions`: block and cache sizes, coalescing, retries,
the node cache, on by default in a per-user directory) and what it counts (`RemoteStats`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._checks import check_int
from ..errors import ConfigError


@dataclass(frozen=True)
class RemoteOptions:
    """How an object-store source reads: block and cache sizes, request coalescing, retries."""

    block_size: int = 1 << 20  # bytes per cached block; every GET covers whole blocks
    cache_bytes: int = 256 << 20  # bound of the LRU block cache, per source
    max_retries: int = 6  # retries after the first attempt, for transient faults only
    backoff_initial: float = 0.1  # seconds; the n-th retry waits uniform(0, min(max, initial * 2**n))
    backoff_max: float = 10.0
    coalesce_gap: int = 1 << 20  # prefetch merges wanted blocks this many bytes apart or closer
    max_request_bytes: int = 64 << 20  # the largest single ranged GET
    max_concurrency: int = 8  # threads issuing a prefetch's GETs
    retry_deadline: float = 120.0  # seconds one read may spend retrying before it fails with StorageError
    first_exact_bytes: int = 256 << 10  # `prefetch` fetches exactly the bytes of its leading ranges, up to this
    # many, in GETs that bridge gaps of at most as many bytes in all, and returns; the rest comes in whole blocks
    # in the background (0: blocks only)
    first_window_blocks: int = 32  # blocks in the plan's first window of whole blocks; later windows double (to 64)
    node_cache_dir: str | None = field(default_factory=lambda: default_node_cache_dir())
    # a block cache on disk shared by the machine's processes: by default `default_node_cache_dir()`
    # ($TOKENPORT_CACHE_DIR/blocks, else ~/.cache/tokenport/blocks; TOKENPORT_NODE_CACHE=off: none); None: off
    node_cache_bytes: int = 32 << 30  # bound of the block data kept in node_cache_dir (least recently written go)
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec options: endpoint_url, key, ...
    node_cache_defaulted: bool = field(init=False, repr=False, compare=False, default=False)
    # True when node_cache_dir is the per-user default, not one the caller chose: a default cache that
    # cannot be made, or an object with no version tag to key its blocks by, is read through memory instead

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_size", check_int("RemoteOptions.block_size", self.block_size, 1))
        for name, minimum in (
            ("cache_bytes", self.block_size),
            ("max_retries", 0),
            ("coalesce_gap", 0),
            ("max_request_bytes", self.block_size),
            ("max_concurrency", 1),
            ("first_window_blocks", 1),
            ("first_exact_bytes", 0),
            ("node_cache_bytes", self.block_size),
        ):
            what = "at least block_size" if minimum == self.block_size and name not in _COUNTS else ""
            object.__setattr__(self, name, check_int(f"RemoteOptions.{name}", getattr(self, name), minimum, what=what))
        _check_number("backoff_initial", self.backoff_initial, 0.0)
        _check_number("backoff_max", self.backoff_max, self.backoff_initial, "backoff_initial")
        _check_number("retry_deadline", self.retry_deadline, 0.0)
        if self.node_cache_dir is not None:
            if not isinstance(self.node_cache_dir, (str, os.PathLike)):
                raise ConfigError(
                    f"RemoteOptions.node_cache_dir={self.node_cache_dir!r}: give a directory path, "
                    "or None for no disk cache"
                )
            object.__setattr__(self, "node_cache_dir", os.fspath(self.node_cache_dir))
            object.__setattr__(self, "node_cache_defaulted", self.node_cache_dir == default_node_cache_dir())
        if not isinstance(self.storage_options, Mapping):
            raise ConfigError(
                f"RemoteOptions.storage_options must be a mapping of fsspec options, "
                f"got {type(self.storage_options).__name__}"
            )
        object.__setattr__(self, "storage_options", dict(self.storage_options))


_COUNTS = ("max_concurrency", "first_window_blocks")

NODE_CACHE_ENV = "TOKENPORT_NODE_CACHE"
"""Set to "off" (or "0", "none") to read remote stores without the default node cache on disk."""


def default_node_cache_dir() -> str | None:
    """The node cache a `RemoteOptions` gets when none is given: $TOKENPORT_CACHE_DIR/blocks, else
    ~/.cache/tokenport/blocks (where MosaicML streaming and litData keep theirs by default too);
    None when $TOKENPORT_NODE_CACHE says off."""
    if os.environ.get(NODE_CACHE_ENV, "").strip().lower() in ("off", "0", "none", "false", "no"):
        return None
    root = os.environ.get("TOKENPORT_CACHE_DIR")
    home = os.path.expanduser("~")
    if not root and not os.path.isabs(home):  # no home to keep it in: off, rather than a relative folder
        return None
    base = os.path.expanduser(root) if root else os.path.join(home, ".cache", "tokenport")
    return os.path.join(base, "blocks")


def _check_number(name: str, value: object, minimum: float, minimum_name: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        bound = f"{minimum_name} ({minimum})" if minimum_name else str(minimum)
        raise ConfigError(f"RemoteOptions.{name}={value!r}: must be a number >= {bound}")


@dataclass
class RemoteStats:
    """Counters of one source: ranged GETs issued (retries included), bytes received, block lookups."""

    requests: int = 0
    bytes_fetched: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0

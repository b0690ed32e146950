"""The TransferQueue adapter's settings: `TransferQueueConfig`, read from a TransferQueue-style config
through its typed schema, and the adapter's fetch timeout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_int
from .._schema import Count, Document, NonNegativeFinite, Positive, decode, to_builtins
from ..errors import ConfigError, DockTimeout
from .arguments import int64

__all__ = ["TransferQueueConfig", "TransferQueueTimeout"]


class TransferQueueTimeout(DockTimeout, RuntimeError):
    """``get_meta(mode="fetch")`` waited ``get_meta_timeout`` s for too few ready samples (TransferQueue
    raises a RuntimeError there; this is both that and the dock's ``DockTimeout``)."""


@dataclass(frozen=True)
class TransferQueueConfig:
    """How the adapter behaves: TransferQueue's ``controller.polling_mode``, how long a fetch waits
    for enough ready samples (TransferQueue's default waits one 5 s check interval), and the
    samples a partition can hold over its life (slots; ``clear_partition`` frees them)."""

    polling_mode: bool = False
    get_meta_timeout: float = 5.0
    partition_rows: int = 65536
    pre_allocated: int = 1  # TransferQueue's TQ_PRE_ALLOC_SAMPLE_NUM

    def __post_init__(self) -> None:
        if not isinstance(self.polling_mode, bool):
            raise ConfigError(f"polling_mode={self.polling_mode!r} must be True or False")
        timeout = self.get_meta_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf"):
            raise ConfigError(f"get_meta_timeout={timeout!r} must be seconds >= 0")
        int64("partition_rows", self.partition_rows)
        check_int("pre_allocated", self.pre_allocated, 0, self.partition_rows, "at most partition_rows")

    @classmethod
    def from_conf(cls, conf: Any) -> TransferQueueConfig:
        """The settings from a TransferQueue-style config (``{"controller": {"polling_mode": ...}}``,
        plus an optional ``"dock"`` section with this class's fields), read through its typed schema."""
        if conf is not None and not isinstance(conf, Mapping):
            raise ConfigError(f"init(conf={conf!r:.60}): pass a dict of sections (controller, dock, ...) or None")
        settings = decode(_plain(conf or {}), _Conf, where="init(conf)", remedy=_CONF_REMEDY, error=ConfigError)
        options = to_builtins(settings.dock) if settings.dock is not None else {}
        if settings.controller is not None and settings.controller.polling_mode is not None:
            options["polling_mode"] = settings.controller.polling_mode
        return cls(**options)


_CONF_REMEDY = "fix the TransferQueue configuration (the dock speaks only SequentialSampler; it is the storage)"


class _Controller(Document, frozen=True, kw_only=True):
    """``conf.controller``: the settings of TransferQueue's controller the dock speaks."""

    polling_mode: bool | None = None
    sampler: Literal["SequentialSampler"] = "SequentialSampler"  # only it is spoken by the dock
    zmq_info: Any = None  # TransferQueue's transport: nothing to do on a dock


class _DockSection(Document, frozen=True, kw_only=True):
    """``conf.dock``: the adapter's own settings (`TransferQueueConfig`'s fields)."""

    polling_mode: bool = False
    get_meta_timeout: NonNegativeFinite = 5.0
    partition_rows: Positive = 65536
    pre_allocated: Count = 1


class _Conf(Document, frozen=True, kw_only=True):
    """A TransferQueue configuration: the sections the dock reads; storage and metrics are the dock's own."""

    controller: _Controller | None = None
    dock: _DockSection | None = None
    backend: Any = None
    metrics: Any = None


def _plain(value: Any) -> Any:
    """``value`` with mappings (an OmegaConf DictConfig, say) as dicts and sequences as lists."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value

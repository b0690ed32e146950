"""The experience dock: per-row RL data between rollout, scoring and training stages.

``Dock`` (``dock``) holds columns of rows by partition with a readiness bit per cell and a
consumption bit per consumer and row; ``put`` writes, ``get`` waits for ready rows and hands
them out (optionally under a lease). ``samplers`` choose which rows: sequential, per-rank
slices, seeded random, whole prompt groups, balanced across data-parallel ranks, or any
callable. ``ragged``: packed (flat + lengths) and padded forms and the helpers between them.
``state``: the partition table, leases and lock a dock is made of; ``api.DockAPI``: the protocol
every dock meets. ``base.DockBase`` writes the public calls once over a few primitives that take
the frozen, checked ``requests``; ``Dock`` and ``ray.RayDock`` are its backends, and
``register_dock_backend`` adds another for ``open_dock(..., backend=name)``.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .api import DockAPI
    from .backends import open_dock, register_dock_backend
    from .base import DockBase
    from .batch import Batch
    from .dock import Dock
    from .ragged import Packed, Padded, pack, pad, truncate
    from .requests import AppendRequest, GetRequest, PutRequest, StateCall
    from .samplers import Balanced, PromptGroups, RandomRows, RankSlices, SampleRequest, Sequential
    from .schema import BFLOAT16, Column

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "AppendRequest": ".requests",
    "BFLOAT16": ".schema",
    "Balanced": ".samplers",
    "Batch": ".batch",
    "Column": ".schema",
    "Dock": ".dock",
    "DockAPI": ".api",
    "DockBase": ".base",
    "GetRequest": ".requests",
    "Packed": ".ragged",
    "Padded": ".ragged",
    "PromptGroups": ".samplers",
    "PutRequest": ".requests",
    "RandomRows": ".samplers",
    "RankSlices": ".samplers",
    "SampleRequest": ".samplers",
    "Sequential": ".samplers",
    "StateCall": ".requests",
    "open_dock": ".backends",
    "pack": ".ragged",
    "pad": ".ragged",
    "register_dock_backend": ".backends",
    "truncate": ".ragged",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

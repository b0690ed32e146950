"""The experience dock: per-row RL data between rollout, scoring and training stages.

``Dock`` (``dock``) holds columns of rows by partition with a readiness bit per cell and a
consumption bit per consumer and row; ``put`` writes, ``get`` waits for ready rows and hands
them out (optionally under a lease). ``samplers`` choose which rows: sequential, per-rank
slices, seeded random, whole prompt groups, balanced across data-parallel ranks, or any
callable. ``ragged``: packed (flat + lengths) and padded forms and the helpers between them.
``state``: the partition table, leases and lock a dock is made of; ``api.DockAPI``: the protocol
``Dock`` and ``ray.RayDock`` both implement.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .api import DockAPI
    from .batch import Batch
    from .dock import Dock
    from .ragged import Packed, Padded, pack, pad, truncate
    from .samplers import Balanced, PromptGroups, RandomRows, RankSlices, SampleRequest, Sequential
    from .schema import BFLOAT16, Column

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "BFLOAT16": ".schema",
    "Balanced": ".samplers",
    "Batch": ".batch",
    "Column": ".schema",
    "Dock": ".dock",
    "DockAPI": ".api",
    "Packed": ".ragged",
    "Padded": ".ragged",
    "PromptGroups": ".samplers",
    "RandomRows": ".samplers",
    "RankSlices": ".samplers",
    "SampleRequest": ".samplers",
    "Sequential": ".samplers",
    "pack": ".ragged",
    "pad": ".ragged",
    "truncate": ".ragged",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

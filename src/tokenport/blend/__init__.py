"""Many datasets -> one stream: which dataset each blended sample comes from, and which of its samples.

``build_blending_indices(weights, size)`` returns ``dataset_index`` (the dataset of sample ``t``)
and ``dataset_sample_index`` (how many samples of that dataset come before ``t``: the sample to
read from it). Write ``C_i(t)`` for the samples of dataset ``i`` among the first ``t`` and ``w``
for the weights normalized to sum 1; a blend is good when ``|C_i(t) - t * w_i|`` is small for
every dataset at every prefix (``max_prefix_deviation``). Three algorithms:

- ``"tijdeman"`` (default, ``tijdeman.py``): earliest deadline first over per-dataset windows,
  Tijdeman's solution of the chairman assignment problem (Discrete Math 32, 1980). Every
  deviation stays within ``1 - 1/(2n - 2)`` for ``n`` datasets, the best bound that holds for
  all weights, at O(log n) per sample.
- ``"greedy"`` (``greedy.py``): at step ``j`` take the dataset with the largest
  ``(j + 1) * w_i - C_i``. O(n) per sample.
- ``"megatron"``: megatron-core's ``build_blending_indices`` bit for bit, the same greedy with
  ``max(j, 1)`` for ``j + 1`` (its first two steps aim at the same targets).
  Random weights drive the greedy past 1.1 and Megatron's past 1.7. The greedy has no bound,
  but on many weights it happens to stay lower than Tijdeman's schedule, which tends to use
  its whole allowance (0.998 at 256 datasets): the bound is a guarantee, not a typical value.

``size=None`` blends exhaustively: the weights are per-dataset sample counts and every sample
of every dataset is taken exactly once (Megatron's ``build_exhaustive_blending_indices``).
A weight of 0 drops its dataset. ``BlendedDataset`` (``dataset.py``) reads the blended stream.
``MixtureSchedule`` (``schedule.py``) changes the weights over training: constant phases and
linear ramps, each dataset's samples numbered across phases. ``AdaptiveBlend`` (``adaptive.py``)
changes them while training, driven by a ``MixtureController`` (``controller.py``). For very
large blends ``build_dataset_index`` plus ``SampleIndexCheckpoints`` (``checkpoints.py``) stand in
for the int64 ``dataset_sample_index``.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .adaptive import AdaptiveBlend
    from .checkpoints import SampleIndexCheckpoints
    from .controller import (
        ADOController,
        DoReMiController,
        MixtureController,
        MixtureSignals,
        ScheduleController,
        ValidationController,
    )
    from .dataset import BlendedDataset
    from .indices import (
        ALGORITHMS,
        build_blending_indices,
        build_dataset_index,
        max_prefix_deviation,
        prefix_deviations,
    )
    from .schedule import MixtureSchedule, Phase, build_scheduled_indices, samples_per_dataset

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "ADOController": ".controller",
    "ALGORITHMS": ".indices",
    "AdaptiveBlend": ".adaptive",
    "DoReMiController": ".controller",
    "MixtureController": ".controller",
    "MixtureSignals": ".controller",
    "ScheduleController": ".controller",
    "ValidationController": ".controller",
    "BlendedDataset": ".dataset",
    "MixtureSchedule": ".schedule",
    "Phase": ".schedule",
    "SampleIndexCheckpoints": ".checkpoints",
    "build_blending_indices": ".indices",
    "build_dataset_index": ".indices",
    "build_scheduled_indices": ".schedule",
    "max_prefix_deviation": ".indices",
    "prefix_deviations": ".indices",
    "samples_per_dataset": ".schedule",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

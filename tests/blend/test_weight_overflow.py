"""Weights near the float maximum: every normalizer blends by their ratio, never by an overflowed sum.

``[1e308, 1e308]`` sums to infinity in float64; dividing by it gave zeros, and each blend then took
everything from its first dataset. The ratio is what a weight means, so each blend follows it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tokenport._checks import summable
from tokenport.blend import AdaptiveBlend, MixtureSchedule, build_blending_indices, prefix_deviations
from tokenport.blend.adaptive import quantized_shares
from tokenport.blend.controller import ADOController
from tokenport.blend.schedule import Phase, build_scheduled_indices
from tokenport.blend.trajectory import schedule_ideal

HUGE = [2.0**1023, 2.0**1023, 2.0**1022]  # sums past the float maximum; ratio 2 : 2 : 1
SMALL = [2.0, 2.0, 1.0]


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_summable_keeps_ordinary_weights_bit_for_bit_and_scales_overflowing_ones_exactly():
    ordinary = np.array([0.1, 0.7, 1e300, 3.0])
    assert summable(ordinary) is not None and np.array_equal(summable(ordinary), ordinary)
    scaled = summable(HUGE)
    assert np.isfinite(scaled.sum()) and np.array_equal(scaled / scaled.sum(), np.array(SMALL) / sum(SMALL))
    rows = summable(np.array([HUGE, SMALL]))  # rows apart: the ordinary row is untouched
    assert np.array_equal(rows[1], SMALL) and np.isfinite(rows.sum(axis=1)).all()


def test_adaptive_blend_follows_the_ratio_of_huge_weights():
    assert np.array_equal(quantized_shares(np.array(HUGE)), quantized_shares(np.array(SMALL)))
    blend = AdaptiveBlend([_Sized(100)] * 3, [1e308, 1e308, 1e308], num_samples=90)
    assert blend.samples_per_dataset(90).tolist() == [30, 30, 30]
    blend.set_weights(HUGE, 90)
    huge = AdaptiveBlend([_Sized(100)] * 3, HUGE, num_samples=100)
    small = AdaptiveBlend([_Sized(100)] * 3, SMALL, num_samples=100)
    assert np.array_equal(huge.samples_per_dataset(100), small.samples_per_dataset(100))


@pytest.mark.parametrize("algorithm", ["tijdeman", "greedy", "megatron"])
def test_static_blends_follow_the_ratio_of_huge_weights(algorithm):
    huge, _ = build_blending_indices(HUGE, 500, algorithm=algorithm)
    small, _ = build_blending_indices(SMALL, 500, algorithm=algorithm)
    assert np.array_equal(huge, small)
    assert np.bincount(build_blending_indices([1e308, 1e308], 100, algorithm=algorithm)[0]).tolist() == [50, 50]
    assert np.array_equal(prefix_deviations(huge, HUGE), prefix_deviations(small, SMALL))


def test_schedules_trajectories_and_controllers_follow_the_ratio():
    huge = MixtureSchedule((Phase(0, tuple(HUGE)), Phase(100, tuple(HUGE), (1e308, 1e308, 0.0), 200)))
    small = MixtureSchedule((Phase(0, tuple(SMALL)), Phase(100, tuple(SMALL), (1.0, 1.0, 0.0), 200)))
    for got, want in zip(build_scheduled_indices(huge, 300), build_scheduled_indices(small, 300)):
        assert np.array_equal(got, want)
    t = np.arange(0, 300, 7)
    np.testing.assert_allclose(schedule_ideal(huge, t), schedule_ideal(small, t))
    controller = ADOController(3, prior=[1e308, 1e308, 1e308])
    np.testing.assert_allclose(controller.prior, [1 / 3] * 3)


def test_arguments_of_the_wrong_kind_are_config_errors():
    from tokenport.blend import DoReMiController, MixtureSignals
    from tokenport.errors import ConfigError

    with pytest.raises(ConfigError, match="reference_loss"):
        DoReMiController("ab")
    with pytest.raises(ConfigError, match="prior"):
        ADOController(2, prior="ab")
    with pytest.raises(ConfigError, match="from_batch"):
        MixtureSignals.from_batch("ab", [1.0, 1.0], [1, 1], 2)
    with pytest.raises(ConfigError, match="one of each per sample"):
        MixtureSignals.from_batch([0, 1], [1.0], [1, 1], 2)
    for datasets in (None, "ab", 3):
        with pytest.raises(ConfigError, match="datasets"):
            AdaptiveBlend(datasets, [1, 1], num_samples=5)
    with pytest.raises(ConfigError, match="num_samples"):
        AdaptiveBlend([_Sized(5)], [1], num_samples=2**63)


def test_megatron_normalize_of_a_blend_spec_follows_the_ratio():
    from tokenport.builder.specs import megatron_normalize

    assert megatron_normalize([1e308, 1e308]) == [0.5, 0.5]
    assert megatron_normalize(HUGE) == megatron_normalize(SMALL)
    assert megatron_normalize([0.3, 0.7]) == (np.array([0.3, 0.7]) / np.sum([0.3, 0.7])).tolist()  # megatron's bits

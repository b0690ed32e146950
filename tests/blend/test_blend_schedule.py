"""Mixture schedules: exact phases, sample indices continuing across phases, prefix consistency, ramp bounds, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from tokenport.blend import build_blending_indices, max_prefix_deviation
from tokenport.blend.schedule import MixtureSchedule, Phase, build_scheduled_indices, samples_per_dataset
from tokenport.errors import ConfigError

ALGORITHMS = ("tijdeman", "greedy", "megatron")
TOLERANCE = 1e-6  # Tijdeman's schedule is exact for integer weights within ~t / 2**58 of the float ones

EXAMPLE = [
    {"at": 0, "weights": [0.7, 0.3]},
    {"at": 8000, "ramp_to": [0.2, 0.8], "until": 10000},
    {"at": 12000, "weights": [0.5, 0.5]},
]


def _sigma(weights) -> float:
    """Tijdeman's bound for the active datasets of ``weights``."""
    n = int(np.count_nonzero(weights))
    return 0.0 if n < 2 else 1.0 - 1.0 / (2 * n - 2)


def _shares(weights) -> np.ndarray:
    """Weights normalized to sum 1."""
    w = np.asarray(weights, np.float64)
    return w / w.sum()


def _cumulative(dataset_index: np.ndarray, n: int) -> np.ndarray:
    """C[k, i]: samples of dataset i among the first k (k = 0 .. len)."""
    counts = np.zeros((len(dataset_index) + 1, n), np.int64)
    counts[1:] = np.cumsum(np.eye(n, dtype=np.int64)[dataset_index], axis=0)
    return counts


def _ramp_bound_holds(p, q, length: int, stop: int) -> None:
    """Check |C_i(k) - T_i(k)| <= sigma(p) + sigma(q) + |q_i - p_i| / 2 at every prefix k of a ramp's first ``stop``."""
    schedule = MixtureSchedule((Phase(0, tuple(p), tuple(q), length),))
    index, _ = build_scheduled_indices(schedule, stop)
    counts = _cumulative(index, len(p))
    k = np.arange(stop + 1, dtype=np.float64)[:, None]
    late = k * k / (2 * length)  # the integral of the late stream's share (k + 1/2) / L
    ideal = _shares(p) * (k - late) + _shares(q) * late
    bound = _sigma(p) + _sigma(q) + np.abs(_shares(q) - _shares(p)) / 2
    excess = np.abs(counts - ideal) - bound
    assert excess.max() <= TOLERANCE, (p, q, length, float(excess.max()))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("weights", [[0.7, 0.3], [3, 0, 1, 5], [1, 1, 1], [0, 2]])
def test_one_constant_phase_is_build_blending_indices(algorithm, weights):
    schedule = MixtureSchedule((Phase(0, tuple(weights)),))
    got = build_scheduled_indices(schedule, 4321, algorithm=algorithm)
    want = build_blending_indices(np.array(weights, np.float64), 4321, algorithm=algorithm)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        samples_per_dataset(schedule, 4321, algorithm=algorithm), np.bincount(want[0], minlength=len(weights))
    )


MULTI = MixtureSchedule.from_data(
    [
        {"at": 0, "weights": [5, 3, 2, 0]},
        {"at": 3000, "weights": [1, 1, 1, 1]},
        {"at": 4100, "weights": [0, 0.1, 0.6, 0.3]},
        {"at": 4101, "ramp_to": [0.25, 0.25, 0.25, 0.25], "until": 6001},
        {"at": 9000, "weights": [0.9, 0, 0, 0.1]},
    ]
)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sample_indices_continue_across_phases(algorithm):
    index, samples = build_scheduled_indices(MULTI, 12_345, algorithm=algorithm)
    assert samples.dtype == np.int64 and len(index) == len(samples) == 12_345
    for i in range(MULTI.num_datasets):
        mine = samples[index == i]  # dataset i's k-th sample is its k-th, over the whole run
        np.testing.assert_array_equal(mine, np.arange(len(mine)))
    np.testing.assert_array_equal(samples_per_dataset(MULTI, 12_345, algorithm=algorithm), np.bincount(index))


def test_constant_phases_keep_tijdemans_bound_and_zero_weights():
    index, _ = build_scheduled_indices(MULTI, 12_345)
    for start, end, weights in (
        (0, 3000, [5, 3, 2, 0]),
        (3000, 4100, [1, 1, 1, 1]),
        (4100, 4101, [0, 0.1, 0.6, 0.3]),
        (6001, 9000, [0.25] * 4),
        (9000, 12_345, [0.9, 0, 0, 0.1]),
    ):
        part = index[start:end]
        assert max_prefix_deviation(part, np.array(weights)) <= _sigma(weights) + TOLERANCE
        for i in np.flatnonzero(np.array(weights) == 0):
            assert not (part == i).any(), (start, i)  # weight 0: no samples in that phase
    # ... and the whole run is each phase's own blend, offset
    second = build_blending_indices(np.ones(4), 1100)[0]
    np.testing.assert_array_equal(index[3000:4100], second)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_prefix_is_the_smaller_build(algorithm):
    full_index, full_samples = build_scheduled_indices(MULTI, 12_000, algorithm=algorithm)
    for k in (1, 2, 2999, 3000, 3001, 4100, 4101, 4102, 5000, 5001, 6000, 6001, 6002, 8999, 9000, 11_999):
        index, samples = build_scheduled_indices(MULTI, k, algorithm=algorithm)
        np.testing.assert_array_equal(index, full_index[:k])
        np.testing.assert_array_equal(samples, full_samples[:k])
        np.testing.assert_array_equal(
            samples_per_dataset(MULTI, k, algorithm=algorithm), np.bincount(full_index[:k], minlength=4)
        )


def test_prefix_with_many_datasets():
    rng = np.random.default_rng(3)
    a, b = rng.random(300), rng.random(300) * (rng.random(300) < 0.5)
    schedule = MixtureSchedule((Phase(0, tuple(a)), Phase(500, tuple(a), tuple(b), 3500), Phase(4000, tuple(b))))
    full = build_scheduled_indices(schedule, 6000)
    for k in (499, 501, 2000, 3501, 4000, 5999):
        for got, want in zip(build_scheduled_indices(schedule, k), full):
            np.testing.assert_array_equal(got, want[:k])


@pytest.mark.parametrize("n", [2, 3, 7])
@pytest.mark.parametrize("length", [1, 2, 999, 4000])
def test_ramp_stays_near_its_integral(n, length):
    rng = np.random.default_rng(n * 10_000 + length)
    for _ in range(3):
        p = rng.random(n) * (rng.random(n) < 0.7)
        q = rng.random(n) * (rng.random(n) < 0.7)
        p[0] += 0.01 * (not p.any())
        q[-1] += 0.01 * (not q.any())
        _ramp_bound_holds(p, q, length, length)
        _ramp_bound_holds(p, q, length, max(1, length * 2 // 3))  # cut by the run's size


def test_ramp_between_disjoint_datasets():
    _ramp_bound_holds([1, 0, 0], [0, 1, 1], 5001, 5001)
    index, _ = build_scheduled_indices(MixtureSchedule((Phase(0, (1, 0), (0, 1), 1000),)), 1000)
    assert index[:20].tolist() == [0] * 20 and index[-20:].tolist() == [1] * 20
    assert np.bincount(index).tolist() == [500, 500]


def test_ramp_follows_the_interpolated_shares_locally():
    """Every window of the ramp holds its share: the sum of shares_at over the window, within twice the bound."""
    schedule = MixtureSchedule.from_data(
        [
            {"at": 0, "weights": [0.6, 0.3, 0.1]},
            {"at": 2000, "ramp_to": [0.1, 0.1, 0.8], "until": 12_000},
        ]
    )
    for t, s in ((2000, 0.05 / 10_000), (6999, 0.5 - 0.5 / 10_000), (11_999, 1 - 0.5 / 10_000)):
        want = (1 - s) * _shares([0.6, 0.3, 0.1]) + s * _shares([0.1, 0.1, 0.8])
        np.testing.assert_allclose(schedule.shares_at(t), want, atol=1e-4)  # the sample's midpoint
    np.testing.assert_allclose(schedule.shares_at(12_500), _shares([0.1, 0.1, 0.8]))
    np.testing.assert_allclose(schedule.shares_at(1999), _shares([0.6, 0.3, 0.1]))
    index, _ = build_scheduled_indices(schedule, 14_000)
    counts = _cumulative(index, 3)
    expected = np.vstack([np.zeros(3), np.cumsum([schedule.shares_at(t) for t in range(14_000)], axis=0)])
    bound = 2 * (_sigma([1, 1, 1]) * 2 + 0.35)  # |q_i - p_i| / 2 <= 0.35 here
    for width in (100, 1000):
        window = (counts[width:] - counts[:-width]) - (expected[width:] - expected[:-width])
        assert np.abs(window).max() <= bound + TOLERANCE


def test_ramp_does_not_starve_small_shares():
    """Independent per-step blends give a 0.0004 share 0 of every 1,000 samples; the ramp gives it its due."""
    schedule = MixtureSchedule((Phase(0, (0.9996, 0.0004), (0.9990, 0.0010), 400_000),))
    index, _ = build_scheduled_indices(schedule, 400_000)
    due = 400_000 * (0.0004 + 0.0010) / 2
    assert abs(np.count_nonzero(index == 1) - due) <= 2 * 0.5 + 0.0003 + TOLERANCE  # sigma(p) + sigma(q) + |q - p| / 2
    assert samples_per_dataset(schedule, 400_000)[1] == np.count_nonzero(index == 1)


def test_plain_data_round_trip_json_and_yaml():
    schedule = MixtureSchedule.from_data(EXAMPLE)
    assert schedule.phases[1] == Phase(8000, (0.7, 0.3), (0.2, 0.8), 10000)  # a ramp starts where it was
    data = schedule.to_data()
    assert data == [
        {"at": 0, "weights": [0.7, 0.3]},
        {"at": 8000, "weights": [0.7, 0.3], "ramp_to": [0.2, 0.8], "until": 10000},
        {"at": 12000, "weights": [0.5, 0.5]},
    ]
    assert MixtureSchedule.from_data(data) == schedule
    assert MixtureSchedule.from_data(json.loads(json.dumps(data))) == schedule
    text = (
        "- {at: 0, weights: [0.7, 0.3]}\n- {at: 8000, ramp_to: [0.2, 0.8], until: 10000}\n"
        "- {at: 12000, weights: [0.5, 0.5]}\n"
    )
    assert MixtureSchedule.from_data(yaml.safe_load(text)) == schedule
    # a ramp after a ramp starts from the first one's end
    chained = MixtureSchedule.from_data([*EXAMPLE[:2], {"at": 10000, "ramp_to": [1, 0], "until": 11000}])
    assert chained.phases[2].weights == (0.2, 0.8)


def test_token_milestones():
    data = [
        {"at_tokens": 0, "weights": [1, 1]},
        {"at_tokens": 8191 * 1000 + 8190, "ramp_to": [0, 1], "until_tokens": 20_000_000},
    ]
    schedule = MixtureSchedule.from_data(data, seq_length=8191)
    assert [(p.at, p.until) for p in schedule.phases] == [(0, None), (1000, 20_000_000 // 8191)]
    with pytest.raises(ConfigError, match=r"schedule phase 0: field 'at_tokens' needs seq_length"):
        MixtureSchedule.from_data(data)
    with pytest.raises(ConfigError, match=r"seq_length=0"):
        MixtureSchedule.from_data(data, seq_length=0)


BAD = [
    ([{"at": 5, "weights": [1]}], r"phase 0 \(at=5\): field 'at' must be 0"),
    (
        [{"at": 0, "weights": [1, 2]}, {"at": 0, "weights": [1, 2]}],
        r"phase 1 \(at=0\): field 'at' must be greater than phase 0's \(0\)",
    ),
    (
        [{"at": 0, "weights": [1, 2]}, {"at": 9, "weights": [1, 2]}, {"at": 4, "weights": [1, 2]}],
        r"phase 2 \(at=4\): field 'at' must be greater than phase 1's \(9\)",
    ),
    ([{"at": 0, "weights": [1, 2]}, {"at": 9, "weights": [1, 2, 3]}], r"phase 1 \(at=9\): field 'weights' has 3"),
    ([{"at": 0, "weights": [1, 2], "ramp_to": [1], "until": 9}], r"phase 0 \(at=0\): field 'ramp_to' has 1"),
    ([{"at": 0, "weights": [1, -2]}], r"phase 0 \(at=0\): field 'weights'\[1\]=-2 is negative"),
    (
        [{"at": 0, "weights": [1, 2]}, {"at": 3, "weights": [float("nan"), 2]}],
        r"phase 1 \(at=3\): field 'weights'\[0\]=nan is NaN",
    ),
    (
        [{"at": 0, "weights": [1, 2], "ramp_to": [float("inf"), 1], "until": 9}],
        r"phase 0 \(at=0\): field 'ramp_to'\[0\]=inf is infinite",
    ),
    ([{"at": 0, "weights": [0, 0]}], r"phase 0 \(at=0\): field 'weights' is all zero"),
    (
        [{"at": 0, "weights": [1, 1]}, {"at": 7, "ramp_to": [0, 0], "until": 9}],
        r"phase 1 \(at=7\): field 'ramp_to' is all zero",
    ),
    ([{"at": 0, "weights": [1, "x"]}], r"phase 0 \(at=0\): field 'weights'\[1\]='x' is not a number"),
    ([{"at": 0, "weights": [1, 2]}, {"at": 4, "ramp_to": [2, 1]}], r"phase 1 \(at=4\): field 'until' is missing"),
    ([{"at": 0, "weights": [1, 2], "until": 9}], r"phase 0 \(at=0\): field 'until' is given without 'ramp_to'"),
    (
        [{"at": 0, "weights": [1, 2], "ramp_to": [2, 1], "until": 20}, {"at": 10, "weights": [1, 1]}],
        r"phase 0 \(at=0\): field 'until'=20 is past phase 1's start \(10\)",
    ),
    (
        [{"at": 0, "weights": [1, 2], "ramp_to": [2, 1], "until": 0}],
        r"phase 0 \(at=0\): field 'until'=0 must be greater",
    ),
    ([{"at": 0, "weights": [1, 2], "ramp_to": [2, 1], "until": 4_000_000_000}], r"phase 0 .*'until'.*past"),
    ([{"at": 0.5, "weights": [1]}], r"phase 0 \(at=0.5\): field 'at'=0.5 must be a whole number"),
    ([{"at": 0, "weight": [1]}], r"schedule phase 0: unknown field 'weight'"),
    ([{"weights": [1]}], r"schedule phase 0: field 'at' is missing"),
    ([{"at": 0}], r"schedule phase 0: field 'weights' is missing"),
    ([{"at": 0, "ramp_to": [1], "until": 5}], r"schedule phase 0: field 'weights' is missing: the first phase's ramp"),
    ([{"at": 0, "at_tokens": 0, "weights": [1]}], r"schedule phase 0: fields 'at' and 'at_tokens' are both given"),
    ([{"at": 0, "weights": [1]}, "x"], r"schedule phase 1: expected a mapping"),
    ([], r"non-empty list of phases"),
    ({"at": 0, "weights": [1]}, r"non-empty list of phases"),
]


@pytest.mark.parametrize("data, message", BAD)
def test_errors_name_the_phase_and_field(data, message):
    with pytest.raises(ConfigError, match=message):
        MixtureSchedule.from_data(data)


def test_bad_arguments():
    schedule = MixtureSchedule.from_data(EXAMPLE)
    for size in (0, -1, 2.0, True, None):
        with pytest.raises(ConfigError, match="size="):
            build_scheduled_indices(schedule, size)
        with pytest.raises(ConfigError, match="size="):
            samples_per_dataset(schedule, size)
    with pytest.raises(ConfigError, match="algorithm="):
        build_scheduled_indices(schedule, 10, algorithm="best")
    with pytest.raises(ConfigError, match="must be a MixtureSchedule"):
        build_scheduled_indices(EXAMPLE, 10)
    with pytest.raises(ConfigError, match="schedule phase 0: expected a Phase"):
        MixtureSchedule(({"at": 0, "weights": [1]},))
    with pytest.raises(ConfigError, match="non-empty sequence of Phase"):
        MixtureSchedule(())
    with pytest.raises(ConfigError, match="sample=-1"):
        schedule.shares_at(-1)

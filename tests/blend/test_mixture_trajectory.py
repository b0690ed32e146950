"""Target vs realized share over a run: the closed-form integrals equal the sums they stand for."""

import numpy as np

from tokenport.blend import AdaptiveBlend, MixtureSchedule
from tokenport.blend.trajectory import adaptive_trajectory, plot_trajectories, schedule_ideal, scheduled_trajectory


def test_schedule_ideal_is_the_sum_of_shares_at():
    schedule = MixtureSchedule.from_data(
        [
            {"at": 0, "weights": [3, 1, 0]},
            {"at": 50, "ramp_to": [0, 1, 1], "until": 130},
            {"at": 170, "weights": [1, 1, 1]},
        ]
    )
    shares = np.array([schedule.shares_at(u) for u in range(300)])
    expected = np.vstack([np.zeros(3), np.cumsum(shares, axis=0)])
    assert np.allclose(schedule_ideal(schedule, np.arange(301)), expected)


def test_scheduled_trajectory_windows_follow_the_schedule(tmp_path):
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 0]}, {"at": 500, "weights": [1, 3]}])
    trajectory = scheduled_trajectory(schedule, 1000, windows=4, labels=["a", "b"])
    assert trajectory.ends == (250, 500, 750, 1000)
    assert np.allclose(trajectory.target, [[1, 0], [1, 0], [0.25, 0.75], [0.25, 0.75]])
    assert np.allclose(trajectory.realized, trajectory.target, atol=4 / 250)
    assert trajectory.max_deviation < 1
    assert "0.250 -> 0.2" in trajectory.render() and trajectory.to_json()["labels"] == ["a", "b"]
    plot_trajectories([trajectory], tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 1000


def test_adaptive_trajectory_and_rebuilding_from_a_description():
    blend = AdaptiveBlend([range(100)] * 3, [1, 1, 1], num_samples=900)
    for start in range(100, 900, 100):
        blend.realize(start)
        blend.set_weights([start // 100 % 3 + 1, 1, 0], start)
    at = np.array([0, 1, 150, 899, 900])
    assert np.allclose(blend.ideal_counts_at(at), [blend.ideal_counts(int(t)) for t in at])
    rebuilt = AdaptiveBlend.from_description(blend.describe())
    trajectory = adaptive_trajectory(rebuilt, windows=9)
    assert trajectory.updates == 8 and len(trajectory.ends) == 9
    blend.realize(900)
    assert np.array_equal(rebuilt.dataset_index, blend.dataset_index)
    assert trajectory.max_deviation <= 2 * (1 - 1 / 3)
    assert np.allclose(np.array(trajectory.target)[-1], [0.75, 0.25, 0])  # the last update: weights [3, 1, 0]

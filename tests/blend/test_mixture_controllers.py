"""Mixture controllers, each on a synthetic problem whose right direction is known."""

import numpy as np
import pytest

from tokenport.blend import (
    ADOController,
    DoReMiController,
    MixtureController,
    MixtureSchedule,
    MixtureSignals,
    ScheduleController,
    ValidationController,
)
from tokenport.errors import ConfigError


def _signals(mean_loss, tokens=100, validation=None) -> MixtureSignals:
    mean_loss = np.asarray(mean_loss, np.float64)
    return MixtureSignals(mean_loss * tokens, np.full(len(mean_loss), tokens), validation)


def test_signals_from_a_batch_and_refusals():
    signals = MixtureSignals.from_batch(np.array([0, 2, 2]), np.array([1.0, 4.0, 2.0]), np.array([2, 3, 1]), 4)
    assert signals.loss_sums.tolist() == [1.0, 0.0, 6.0, 0.0] and signals.token_counts.tolist() == [2, 0, 4, 0]
    assert np.allclose(signals.mean_loss(), [0.5, np.nan, 1.5, np.nan], equal_nan=True)
    with pytest.raises(ConfigError, match="dataset_id"):
        MixtureSignals.from_batch(np.array([4]), np.array([1.0]), np.array([1]), 4)
    with pytest.raises(ConfigError, match="NaN"):
        MixtureSignals(np.array([np.nan]), np.array([1]))
    with pytest.raises(ConfigError, match="one of each"):
        MixtureSignals(np.array([1.0, 2.0]), np.array([1]))
    with pytest.raises(ConfigError, match="validation_loss"):
        MixtureSignals(np.array([1.0]), np.array([1]), np.array([1.0, 2.0]))


def test_all_are_controllers():
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 1]}])
    for controller in (
        ScheduleController(schedule, 4),
        DoReMiController(np.zeros(2)),
        ValidationController(np.zeros(2)),
        ADOController(2),
    ):
        assert isinstance(controller, MixtureController)


def test_schedule_controller_follows_the_schedule_by_step():
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 0]}, {"at": 40, "weights": [1, 3]}])
    controller = ScheduleController(schedule, global_batch_size=8)
    signals = _signals([1.0, 1.0])
    assert controller.update(0, signals).tolist() == [1.0, 0.0]
    assert controller.update(4, signals) is None  # sample 32: unchanged
    assert controller.update(5, signals).tolist() == [0.25, 0.75]  # sample 40


def test_doremi_raises_the_domain_with_excess_loss_and_keeps_a_floor():
    controller = DoReMiController(np.array([2.0, 2.0, 2.0]), step_size=1.0, smoothing=0.01)
    for step in range(20):
        weights = controller.update(step, _signals([1.5, 2.0, 2.5]))  # only domain 2 is above its reference
    assert weights.argmax() == 2 and weights[2] > 0.9
    assert weights.sum() == pytest.approx(1.0) and weights.min() >= 0.01 / 3
    assert weights[0] == pytest.approx(weights[1])  # no excess: clipped to 0, no preference


def test_doremi_exact_update_rule():
    controller = DoReMiController(np.array([1.0, 1.0]), step_size=0.5, smoothing=0.1)
    weights = controller.update(0, _signals([2.0, 1.0]))  # excess [1, 0]
    alpha = np.array([np.exp(0.5), 1.0]) / (np.exp(0.5) + 1.0)
    assert np.allclose(weights, 0.9 * alpha + 0.05)


def test_validation_controller_favours_the_domain_furthest_above_target():
    controller = ValidationController(np.array([1.0, 1.0, 1.0]), step_size=2.0)
    assert controller.update(0, _signals([1.0, 1.0, 1.0])) is None  # no validation loss: unchanged
    for step in range(5):
        weights = controller.update(step, _signals([1.0, 1.0, 1.0], validation=np.array([1.2, 1.9, 0.5])))
    assert weights.argmax() == 1 and weights[0] > weights[2]


def test_ado_favours_the_domain_still_learning():
    """Domain 0's loss has flattened (alpha small); domain 1 still falls steeply: ADO moves weight to 1."""
    controller = ADOController(2, decay=0.5, smoothing=0.0, min_points=4)
    tokens = 0
    weights = None
    for step in range(30):
        tokens += 1000
        n = tokens
        losses = [1.0 + 0.2 * n**-0.05, 1.0 + 400.0 * n**-0.8]
        out = controller.update(step, _signals(losses, tokens=1000))
        if step < 3:
            assert out is None  # too few points to fit
        weights = out if out is not None else weights
    assert weights[1] > 0.6
    assert weights.sum() == pytest.approx(1.0)


def test_controllers_refuse_bad_arguments():
    with pytest.raises(ConfigError, match="smoothing"):
        DoReMiController(np.zeros(2), smoothing=2.0)
    with pytest.raises(ConfigError, match="reference_loss"):
        DoReMiController([np.nan, 1.0])
    with pytest.raises(ConfigError, match="signals"):
        DoReMiController(np.zeros(3)).update(0, _signals([1.0, 2.0]))
    with pytest.raises(ConfigError, match="prior"):
        ADOController(2, prior=[0.0, 0.0])
    with pytest.raises(ConfigError, match="schedule"):
        ScheduleController([1, 2], 4)

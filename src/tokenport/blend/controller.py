"""Online mixture controllers: per-dataset training signals in, the weights for the next steps out.

A controller is any object with ``update(step, signals) -> weights | None`` (``MixtureController``);
``StatefulLoader(..., controller=...)`` calls it from ``update_mixture`` and applies the weights to an
``AdaptiveBlend`` from the first sample the loader has not yet resolved. Built in: a schedule
(``ScheduleController``), DoReMi's exponentiated gradient on excess loss (``DoReMiController``), ADO's
learning-curve fit (``ADOController``) and an exponentiated gradient on validation loss
(``ValidationController``). All are numpy-only and deterministic: same signals, same weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .._checks import check_int, check_positive, summable
from ..errors import ConfigError
from .schedule import MixtureSchedule

__all__ = [
    "ADOController",
    "DoReMiController",
    "MixtureController",
    "MixtureSignals",
    "ScheduleController",
    "ValidationController",
]


@dataclass(frozen=True)
class MixtureSignals:
    """What the model learnt since the last update, per dataset: ``loss_sums`` (summed token losses),
    ``token_counts`` (tokens those losses cover), optionally ``validation_loss`` (mean per domain).

    Build it from a batch's ``dataset_id`` with ``from_batch``; arrays are float64/int64, one entry per dataset.
    """

    loss_sums: np.ndarray
    token_counts: np.ndarray
    validation_loss: np.ndarray | None = None

    def __post_init__(self) -> None:
        loss = np.asarray(self.loss_sums, dtype=np.float64).reshape(-1)
        tokens = np.asarray(self.token_counts).reshape(-1)
        if loss.shape != tokens.shape or not len(loss):
            raise ConfigError(
                f"MixtureSignals: loss_sums has {loss.shape[0]} entries and token_counts {tokens.shape[0]}: "
                "give one of each per dataset"
            )
        if not np.isfinite(loss).all():
            raise ConfigError("MixtureSignals: loss_sums holds NaN or inf: report finite losses (skip a diverged step)")
        if tokens.dtype.kind not in "iu" or (tokens < 0).any():
            raise ConfigError("MixtureSignals: token_counts must be integers >= 0")
        object.__setattr__(self, "loss_sums", loss)
        object.__setattr__(self, "token_counts", tokens.astype(np.int64))
        if self.validation_loss is not None:
            valid = np.asarray(self.validation_loss, dtype=np.float64).reshape(-1)
            if valid.shape != loss.shape or not np.isfinite(valid).all():
                raise ConfigError(
                    f"MixtureSignals: validation_loss must hold {len(loss)} finite values, one per dataset"
                )
            object.__setattr__(self, "validation_loss", valid)

    @classmethod
    def from_batch(
        cls,
        dataset_id: np.ndarray,
        loss_sums: np.ndarray,
        token_counts: np.ndarray,
        num_datasets: int,
        *,
        validation_loss: np.ndarray | None = None,
    ) -> MixtureSignals:
        """Signals of one batch: per sample its ``dataset_id``, summed token loss and token count, added up
        per dataset."""
        n = check_int("num_datasets", num_datasets, 1)
        try:
            ids = np.asarray(dataset_id).reshape(-1).astype(np.int64)
            sums = np.asarray(loss_sums, np.float64).reshape(-1)
            counts = np.asarray(token_counts, np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"MixtureSignals.from_batch: expected numbers, one per sample ({exc})") from None
        if not len(ids) == len(sums) == len(counts):
            raise ConfigError(
                f"MixtureSignals.from_batch: {len(ids)} dataset ids, {len(sums)} loss sums and {len(counts)} token "
                "counts: pass one of each per sample"
            )
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            raise ConfigError(f"dataset_id: values must lie in [0, {n}), got {ids.min()}..{ids.max()}")
        loss = np.bincount(ids, weights=sums, minlength=n)
        tokens = np.bincount(ids, weights=counts, minlength=n)
        return cls(loss, np.rint(tokens).astype(np.int64), validation_loss)

    @property
    def num_datasets(self) -> int:
        """How many datasets the signals cover."""
        return len(self.loss_sums)

    def mean_loss(self) -> np.ndarray:
        """Mean token loss per dataset; NaN where no tokens were seen."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.token_counts > 0, self.loss_sums / np.maximum(self.token_counts, 1), np.nan)


@runtime_checkable
class MixtureController(Protocol):
    """Decides the mixture: ``update(step, signals)`` returns new relative weights (one per dataset)
    for the steps from now on, or None to keep the current ones."""

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray | None:
        """The weights from ``step`` on given the signals since the last update, or None (unchanged)."""
        ...


def _mixed(log_weights: np.ndarray, smoothing: float) -> np.ndarray:
    """softmax(log_weights) mixed with uniform by ``smoothing``."""
    weights = np.exp(log_weights - log_weights.max())
    weights /= weights.sum()
    return (1.0 - smoothing) * weights + smoothing / len(weights)


def _check_smoothing(smoothing: float) -> float:
    value = float(smoothing)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"smoothing={smoothing!r}: must lie in [0, 1] (the uniform share mixed in)")
    return value


def _check_vector(name: str, values: object) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected finite numbers, one per dataset, got {values!r}") from None
    if not len(array) or not np.isfinite(array).all():
        raise ConfigError(f"{name}: expected finite numbers, one per dataset, got {values!r}")
    return array


def _check_signals(signals: object, n: int) -> MixtureSignals:
    if not isinstance(signals, MixtureSignals) or signals.num_datasets != n:
        raise ConfigError(f"signals: expected MixtureSignals over {n} datasets, got {signals!r}")
    return signals


class ScheduleController:
    """A ``MixtureSchedule`` as a controller: the schedule's shares at a sample, None while they are unchanged;
    ignores the signals. ``StatefulLoader.update_mixture`` asks ``update_at`` at the consumed sample, so the
    shares follow the samples whatever the global batch (a resume may change it); ``update(step, ...)`` asks
    at sample ``step * global_batch_size``."""

    def __init__(self, schedule: MixtureSchedule, global_batch_size: int) -> None:
        if not isinstance(schedule, MixtureSchedule):
            raise ConfigError(f"schedule: expected a MixtureSchedule, got {type(schedule).__name__}")
        self.schedule = schedule
        self.global_batch_size = check_int("global_batch_size", global_batch_size, 1)
        self._last: np.ndarray | None = None

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray | None:
        """The schedule's shares at this step's first sample, or None when they did not change."""
        return self.update_at(check_int("step", step, 0) * self.global_batch_size, signals)

    def update_at(self, sample: int, signals: MixtureSignals) -> np.ndarray | None:
        """The schedule's shares at ``sample``, or None when they did not change."""
        shares = self.schedule.shares_at(check_int("sample", sample, 0))
        if self._last is not None and np.array_equal(shares, self._last):
            return None
        self._last = shares
        return shares


class DoReMiController:
    """DoReMi's domain reweighting (Xie et al. 2023, "DoReMi: Optimizing Data Mixtures Speeds Up Language
    Model Pretraining", Algorithm 1): excess loss ``lambda_i = max(L_i - ref_i, 0)``, exponentiated gradient
    ``alpha_i <- alpha_i * exp(step_size * lambda_i)``, normalized, returned mixed with uniform by ``smoothing``.

    DoReMi scores a small proxy model's per-token loss against a reference model's; here the loss is the
    model being trained, ``reference_loss`` a per-domain mean loss (e.g. a reference model's). A domain
    with no tokens since the last update keeps its weight (excess 0).
    """

    def __init__(self, reference_loss: np.ndarray, step_size: float = 1.0, smoothing: float = 1e-3) -> None:
        self.reference_loss = _check_vector("reference_loss", reference_loss)
        self.step_size = check_positive("step_size", step_size)
        self.smoothing = _check_smoothing(smoothing)
        self.log_alpha = np.zeros(len(self.reference_loss))

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray:
        """The weights after one exponentiated-gradient step on the clipped excess loss."""
        signals = _check_signals(signals, len(self.reference_loss))
        excess = np.nan_to_num(np.maximum(signals.mean_loss() - self.reference_loss, 0.0), nan=0.0)
        self.log_alpha = self.log_alpha + self.step_size * excess
        self.log_alpha -= self.log_alpha.max()  # alpha normalized (in log space: no overflow)
        return _mixed(self.log_alpha, self.smoothing)


class ValidationController:
    """Towards the domains whose validation loss is highest above ``target_loss``: DoReMi's exponentiated
    gradient (see ``DoReMiController``) on ``max(validation_loss_i - target_i, 0)``; None when the
    signals carry no validation loss."""

    def __init__(self, target_loss: np.ndarray, step_size: float = 1.0, smoothing: float = 1e-3) -> None:
        self.target_loss = _check_vector("target_loss", target_loss)
        self.step_size = check_positive("step_size", step_size)
        self.smoothing = _check_smoothing(smoothing)
        self.log_alpha = np.zeros(len(self.target_loss))

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray | None:
        """The weights after one step on the validation excess loss, or None without a validation loss."""
        signals = _check_signals(signals, len(self.target_loss))
        if signals.validation_loss is None:
            return None
        excess = np.maximum(signals.validation_loss - self.target_loss, 0.0)
        self.log_alpha = self.log_alpha + self.step_size * excess
        self.log_alpha -= self.log_alpha.max()
        return _mixed(self.log_alpha, self.smoothing)


class ADOController:
    """ADO (Jiang et al. 2025, "Adaptive Data Optimization: Dynamic Sample Selection with Scaling Laws"):
    per domain, fit ``L_i(n) = eps_i + beta_i * n^(-alpha_i)`` to its mean loss against its tokens seen
    ``n``; weight it by its predicted learning speed ``-n dL_i/dn = alpha_i beta_i n^(-alpha_i)`` times
    ``prior`` (default uniform), normalized, smoothed over time
    (``pi <- decay * pi + (1 - decay) * new``) and mixed with uniform by ``smoothing``.

    Simplified from the paper: no credit assignment (the paper's prior is the domain's recent sampling
    share, which here would compound the controller's own choices); ``eps_i`` is chosen from a small
    grid below the lowest loss seen and ``(log beta_i, alpha_i)`` fitted by least squares in log space
    over the last ``window`` points; a domain with fewer than ``min_points`` points (or a
    non-decreasing fit) counts as still learning at the median speed of the others. None until some
    domain has a fit.
    """

    _EPS_GRID = np.array([0.0, 0.5, 0.9])  # eps as fractions of the lowest loss seen

    def __init__(
        self,
        num_datasets: int,
        *,
        prior: np.ndarray | None = None,
        decay: float = 0.9,
        smoothing: float = 1e-2,
        window: int = 32,
        min_points: int = 4,
    ) -> None:
        self.num_datasets = check_int("num_datasets", num_datasets, 1)
        self.prior = (
            np.full(self.num_datasets, 1.0 / self.num_datasets) if prior is None else _check_vector("prior", prior)
        )
        if len(self.prior) != self.num_datasets or (self.prior < 0).any() or not self.prior.any():
            raise ConfigError(f"prior: expected {self.num_datasets} weights >= 0, not all zero")
        self.prior = summable(self.prior) / summable(self.prior).sum()
        self.decay = _check_smoothing(decay)
        self.smoothing = _check_smoothing(smoothing)
        self.window = check_int("window", window, 2)
        self.min_points = check_int("min_points", min_points, 2, self.window)
        self.weights = self.prior.copy()
        self.tokens_seen = np.zeros(self.num_datasets, np.int64)
        self._log_tokens = np.zeros((self.num_datasets, self.window))  # ring buffers of (log tokens seen, mean loss)
        self._losses = np.zeros((self.num_datasets, self.window))
        self._points = np.zeros(self.num_datasets, np.int64)

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray | None:
        """Record this step's losses, refit the curves and return the smoothed weights (None before any fit)."""
        signals = _check_signals(signals, self.num_datasets)
        seen = signals.token_counts > 0
        self.tokens_seen += signals.token_counts
        rows = np.flatnonzero(seen)
        slots = self._points[rows] % self.window
        self._log_tokens[rows, slots] = np.log(np.maximum(self.tokens_seen[rows], 1))
        self._losses[rows, slots] = signals.mean_loss()[rows]
        self._points[rows] += 1
        speed = self._speeds()
        if speed is None:
            return None
        proposal = speed * self.prior
        proposal = summable(proposal)
        proposal = proposal / proposal.sum() if proposal.sum() > 0 else self.prior
        self.weights = self.decay * self.weights + (1.0 - self.decay) * proposal
        return (1.0 - self.smoothing) * self.weights + self.smoothing / self.num_datasets

    def _speeds(self) -> np.ndarray | None:
        """Each domain's fitted ``alpha beta n^-alpha``, the unfitted at the median of the others; None if none fit."""
        count = np.minimum(self._points, self.window)
        fitted = count >= self.min_points
        if not fitted.any():
            return None
        mask = np.arange(self.window)[None, :] < count[:, None]  # the valid points of each ring buffer
        full = bool(mask.all())
        points = np.maximum(count, 1)
        x = self._log_tokens
        ones = np.ones(self.window)
        mean_x = ((x if full else np.where(mask, x, 0.0)) @ ones) / points
        dx = x - mean_x[:, None]
        if not full:
            dx = np.where(mask, dx, 0.0)
        var = np.einsum("ij,ij->i", dx, dx)
        finite_var = var
        var = np.where(var > 0, var, np.inf)  # constant x: slope 0
        now = np.log(np.maximum(self.tokens_seen, 1)).astype(np.float64)
        lowest = (self._losses if full else np.where(mask, self._losses, np.inf)).min(axis=1)
        lowest = np.where(np.isfinite(lowest), lowest, 0.0)
        best_error = np.full(self.num_datasets, np.inf)
        best_slope = np.zeros(self.num_datasets)
        best_intercept = np.zeros(self.num_datasets)
        y = np.empty_like(self._losses)
        for fraction in self._EPS_GRID:  # a log-space line per candidate eps; keep the best fit
            np.subtract(self._losses, (fraction * lowest)[:, None], out=y)
            np.log(np.maximum(y, 1e-12, out=y), out=y)
            if not full:
                y[~mask] = 0.0
            mean_y = (y @ ones) / points  # a row sum, faster than sum(axis=1) on short rows
            np.subtract(y, mean_y[:, None], out=y)  # centred: sum(dx * y) is unchanged as sum(dx) = 0
            if not full:
                y[~mask] = 0.0
            slope = np.einsum("ij,ij->i", dx, y) / var
            # the residuals' sum of squares: sum (y - mean_y)^2 - slope^2 var, over the valid points
            error = np.einsum("ij,ij->i", y, y) - slope * slope * finite_var
            better = error < best_error
            best_error = np.where(better, error, best_error)
            best_slope = np.where(better, slope, best_slope)
            best_intercept = np.where(better, mean_y - slope * mean_x, best_intercept)
        speed = -best_slope * np.exp(best_intercept + best_slope * now)  # alpha beta n^-alpha
        good = fitted & np.isfinite(speed) & (speed > 0)
        if not good.any():
            return None
        return np.where(good, speed, np.median(speed[good]))

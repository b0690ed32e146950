"""A changing mixture over the run: target against realized share per dataset, window by window.

``scheduled_trajectory`` measures a ``MixtureSchedule`` (its indices built as a run builds them);
``adaptive_trajectory`` an ``AdaptiveBlend`` (e.g. rebuilt from a loader state's updates with
``AdaptiveBlend.from_description``). The target of a window is the integral of the intended shares
over its samples; the deviation is the largest ``|C_i(t) - I_i(t)|`` at any prefix ``t``.
``tokenport blend`` prints these and plots them with ``--plot``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_int, summable
from .._optional import require
from ..errors import ConfigError
from .adaptive import AdaptiveBlend
from .schedule import MixtureSchedule, build_scheduled_indices

_CHUNK = 1 << 16  # prefixes measured per pass


@dataclass(frozen=True)
class MixtureTrajectory:
    """Per window of samples (``ends``), each dataset's target and realized share, and the worst prefix deviation."""

    name: str
    labels: tuple[str, ...]
    ends: tuple[int, ...]
    target: tuple[tuple[float, ...], ...]  # [window][dataset]
    realized: tuple[tuple[float, ...], ...]
    max_deviation: float
    updates: int = 0
    names: tuple[str, ...] = ()  # the spec's name per dataset ("" where none), for plots

    def render(self) -> str:
        """An aligned text table: one line per window, target -> realized per dataset."""
        width = max(12, *(len(label) for label in self.labels))
        head = f"{'samples':>13}  " + "  ".join(f"{label[-width:]:>{width}}" for label in self.labels)
        lines = [
            f"{self.name}: {self.ends[-1]:,} samples, {len(self.labels)} datasets"
            + (f", {self.updates} weight updates" if self.updates else "")
            + "; per window: target -> realized share",
            head,
        ]
        for end, target, realized in zip(self.ends, self.target, self.realized):
            cells = "  ".join(f"{f'{t:.3f} -> {r:.3f}':>{width}}" for t, r in zip(target, realized))
            lines.append(f"{end:>13,}  {cells}")
        lines.append(f"largest prefix deviation |C_i(t) - I_i(t)|: {self.max_deviation:.3f} samples")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The trajectory as JSON-able data."""
        return {
            "name": self.name,
            "labels": list(self.labels),
            "ends": list(self.ends),
            "target": [list(row) for row in self.target],
            "realized": [list(row) for row in self.realized],
            "max_deviation": self.max_deviation,
            "updates": self.updates,
        }


def scheduled_trajectory(
    schedule: MixtureSchedule,
    size: int,
    *,
    labels: Sequence[str] | None = None,
    windows: int = 10,
    algorithm: str = "tijdeman",
    name: str = "schedule",
) -> MixtureTrajectory:
    """The trajectory of ``size`` samples blended by ``schedule``."""
    size = check_int("size", size, 1, what="the number of samples to blend")
    dataset_index, _ = build_scheduled_indices(schedule, size, algorithm=algorithm)
    return _trajectory(
        name, _labels(labels, schedule.num_datasets), dataset_index, lambda t: schedule_ideal(schedule, t), windows
    )


def adaptive_trajectory(
    blend: AdaptiveBlend, *, labels: Sequence[str] | None = None, windows: int = 10, name: str = "adaptive"
) -> MixtureTrajectory:
    """The trajectory of the whole adaptive blend (realized here)."""
    blend.realize(len(blend))
    trajectory = _trajectory(
        name, _labels(labels, len(blend.datasets)), blend.dataset_index, blend.ideal_counts_at, windows
    )
    return MixtureTrajectory(**{**trajectory.__dict__, "updates": len(blend.updates)})


def schedule_ideal(schedule: MixtureSchedule, t: np.ndarray) -> np.ndarray:
    """``I_i(t)``: the sum of ``schedule.shares_at(u)`` over ``u < t``, for each ``t`` (float64, ``len(t) x n``).

    Closed form per phase: a ramp of ``L`` samples from ``p`` to ``q`` gives its first ``r`` samples
    ``r^2 / 2L`` of ``q`` (``shares_at`` takes each sample at its midpoint) and the rest of ``p``.
    """
    t = np.asarray(t, dtype=np.int64).reshape(-1, 1)
    phases = schedule.phases
    total = np.zeros((len(t), schedule.num_datasets))
    for j, phase in enumerate(phases):
        end = phases[j + 1].at if j + 1 < len(phases) else np.iinfo(np.int64).max
        m = np.clip(t - phase.at, 0, end - phase.at).astype(np.float64)
        p = summable(phase.weights) / summable(phase.weights).sum()
        if phase.ramp_to is None or phase.until is None:  # a checked phase has both or neither
            total += m * p
            continue
        q = summable(phase.ramp_to) / summable(phase.ramp_to).sum()
        length = float(phase.until - phase.at)
        r = np.minimum(m, length)
        late = r * r / (2 * length)
        total += (r - late) * p + late * q + (m - r) * q
    return total


def _labels(labels: Sequence[str] | None, n: int) -> tuple[str, ...]:
    if labels is None:
        return tuple(f"dataset {i}" for i in range(n))
    if len(labels) != n:
        raise ConfigError(f"labels: expected {n} labels, one per dataset, got {len(labels)}")
    return tuple(str(label) for label in labels)


def _trajectory(
    name: str, labels: tuple[str, ...], dataset_index: np.ndarray, ideal: Any, windows: int
) -> MixtureTrajectory:
    """Windows' target and realized shares and the worst prefix deviation of ``dataset_index`` against ``ideal(t)``."""
    windows = check_int("windows", windows, 1)
    size, n = len(dataset_index), len(labels)
    ends = np.unique(np.linspace(0, size, windows + 1).round().astype(np.int64))
    counts = np.zeros(n, np.int64)
    worst = 0.0
    boundary_counts = [counts.copy()]
    for begin in range(0, size, _CHUNK):
        chunk = np.asarray(dataset_index[begin : begin + _CHUNK], dtype=np.int64)
        taken = counts + np.cumsum(np.eye(n, dtype=np.int64)[chunk], axis=0)  # C(t) for t = begin+1 ..
        prefixes = np.arange(begin + 1, begin + len(chunk) + 1)
        worst = max(worst, float(np.abs(taken - ideal(prefixes)).max()))
        for end in ends[(ends > begin) & (ends <= begin + len(chunk))]:
            boundary_counts.append(taken[end - begin - 1].copy())
        counts = taken[-1].copy()
    at = ideal(ends)
    target, realized = [], []
    for k in range(1, len(ends)):
        length = float(ends[k] - ends[k - 1])
        target.append(tuple(float(v) for v in (at[k] - at[k - 1]) / length))
        realized.append(tuple(float(v) for v in (boundary_counts[k] - boundary_counts[k - 1]) / length))
    return MixtureTrajectory(name, labels, tuple(int(e) for e in ends[1:]), tuple(target), tuple(realized), worst)


def short_labels(paths: Sequence[str]) -> tuple[str, ...]:
    """Each path's shortest suffix of whole path components that no other path ends with
    (``code/part-00000`` and ``prose/part-00000``)."""
    split = [[part for part in path.replace("://", "/").split("/") if part] or [path] for path in paths]
    labels = []
    for i, parts in enumerate(split):
        others = [other for j, other in enumerate(split) if j != i and other != parts]
        k = 1
        while k < len(parts) and any(other[-k:] == parts[-k:] for other in others):
            k += 1
        labels.append("/".join(parts[-k:]))
    return tuple(labels)


def dataset_labels(paths: Sequence[str], names: Sequence[str] | None = None) -> tuple[str, ...]:
    """A legend label per dataset, never two alike: its spec name where it has one, else the shortest
    distinguishing suffix of its path; a name shared by several stores gets that suffix in brackets,
    and a store listed twice `` #2``, `` #3``."""
    short = short_labels(paths)
    given = [name if name else label for name, label in zip(names or [""] * len(paths), short)]
    labels = [
        f"{label} ({suffix})" if given.count(label) > 1 and label != suffix else label
        for label, suffix in zip(given, short)
    ]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    return tuple(labels)


def trajectories_figure(trajectories: Sequence[MixtureTrajectory]) -> Any:
    """A matplotlib Figure: per trajectory, realized (solid) and target (dotted) share per window over
    the whole run (samples 0 to its end), one legend entry per dataset, outside the axes on the right."""
    require("matplotlib", extra="plot", feature="blend --plot")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.6 * len(trajectories)), layout="constrained")
    for trajectory, axis in zip(trajectories, figure.subplots(len(trajectories), 1, squeeze=False)[:, 0]):
        target, realized = np.array(trajectory.target), np.array(trajectory.realized)
        x = [0, *trajectory.ends]  # each window's share held from its start to its end
        for d, label in enumerate(dataset_labels(trajectory.labels, trajectory.names or None)):
            (line,) = axis.step(x, [*realized[:, d], realized[-1, d]], where="post", label=label)
            axis.step(x, [*target[:, d], target[-1, d]], where="post", color=line.get_color(), linestyle=":")
        axis.set_xlim(0, trajectory.ends[-1])
        axis.set_title(f"{trajectory.name}: realized share (solid) vs target (dotted) per window")
        axis.set_xlabel("samples")
        axis.set_ylabel("share")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return figure


def plot_trajectories(trajectories: Sequence[MixtureTrajectory], path: str | os.PathLike) -> None:
    """Draw ``trajectories_figure(trajectories)`` into ``path`` (PNG)."""
    trajectories_figure(trajectories).savefig(os.fspath(path), dpi=100)

"""Mixture schedules: blend weights that change over training, phase by phase, exact within each phase.

A ``MixtureSchedule`` is a list of phases. Phase ``j`` starts at sample ``at`` (the first at 0)
and runs to the next phase's ``at`` (the last one to the end of the run). It either holds
constant ``weights``, or ramps linearly from ``weights`` to ``ramp_to`` over ``[at, until)`` and
holds ``ramp_to`` from ``until`` to the next phase. Weights are relative, as everywhere in
``tokenport.blend``: each vector is normalized to shares ``w / sum(w)``, and a ramp moves the
*shares* linearly. A weight of 0 means the dataset takes no samples while its share is 0.

Plain data (YAML/JSON), ``MixtureSchedule.from_data`` / ``to_data``::

    - {at: 0, weights: [0.7, 0.3]}                    # 0.7 web / 0.3 code from sample 0
    - {at: 8000, ramp_to: [0.2, 0.8], until: 10000}   # shares move linearly to 0.2 / 0.8 ...
    - {at: 12000, weights: [0.5, 0.5]}                # ... hold 0.2 / 0.8 until 12000, then 0.5 / 0.5

A ramp without ``weights`` starts from where the previous phase ended (its ``ramp_to``, else its
``weights``). ``at_tokens`` / ``until_tokens`` give milestones in tokens instead, converted with
``from_data(..., seq_length=S)`` to ``tokens // S`` samples (``to_data`` writes samples).

The stream is a pure function of (schedule, algorithm): ``build_scheduled_indices(s, N)[:K]``
equals ``build_scheduled_indices(s, K)`` for every K <= N (all three blending algorithms are
online: sample t depends only on samples before it), so a run resumed mid-phase, or extended
to a larger size, sees the same samples. It does not hold across *different* schedules:
moving a milestone, or token milestones converted with another ``seq_length``, changes the
stream from the first phase whose segments change. This is why milestones are absolute sample
counts and never fractions of the run's size.

Constant phases are ``build_blending_indices(weights, length)``: Tijdeman's bound
``1 - 1/(2n - 2)`` (n active datasets) holds at every prefix of the phase. Each phase is
blended on its own, so the deviation from the schedule's integral measured from sample 0 can
add up the phases' end errors (each within its phase's bound: below 1 for a constant phase,
2.5 for a ramp), one per phase, never growing with the phases' lengths.

Ramps. Over a ramp of ``L`` samples with start shares ``p`` and end shares ``q``, sample ``k``
(0-based) should come from dataset ``i`` with probability ``w_i(k) = p_i + (k + 1/2) / L (q_i - p_i)``,
and the ideal count over the first ``k`` samples is ``T_i(k) = p_i (k - k^2/2L) + q_i k^2/2L``.
Write the ramp as a blend of two constant blends: a *late* stream over ``q`` whose share is
``s = (k + 1/2) / L`` and an *early* stream over ``p`` with the rest. The late stream takes
``Q(k) = round(k^2 / 2L)`` (halves up) of the first ``k`` samples: an integer formula, within
1/2 of the ideal ``k^2 / 2L``, nondecreasing by 0 or 1 per sample. The early samples are
``build_blending_indices(p, .)`` in order, the late ones ``build_blending_indices(q, .)``. Then
at every prefix ``k`` of the ramp and for every dataset ``i``:

    |C_i(k) - T_i(k)| <= sigma(p) + sigma(q) + |q_i - p_i| / 2   (< 2.5)

(``sigma`` is the algorithm's bound for those shares, Tijdeman's ``1 - 1/(2n - 2)`` by default)
because ``C_i(k) = Cp_i(k - Q(k)) + Cq_i(Q(k))``, each term within ``sigma`` of its share of its
stream, and the streams' lengths are off their ideal by ``-e`` and ``+e`` with ``|e| <= 1/2``.
The bound does not depend on the ramp's length: there is no step size to choose. (Blending
fixed steps with their midpoint weights independently instead drifts: every step rounds on its
own, and a dataset with share 0.0004 gets 0 of every 1,000-sample step, 0 where 400 are due
per million.)

``samples_per_dataset`` counts the samples each dataset supplies from ``dataset_index`` alone,
one segment at a time (1-2 bytes a sample), without the int64 ``dataset_sample_index``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from .._checks import check_int, is_int, summable
from ..errors import ConfigError
from .indices import build_blending_indices, build_dataset_index

# Q(k) = (k * k + L) // (2 L) in int64 needs L * L + L < 2**63.
_MAX_RAMP = 3_000_000_000
_CHUNK = 1 << 22  # ramp positions handled per vectorized chunk
_FIELDS = ("at", "at_tokens", "weights", "ramp_to", "until", "until_tokens")


@dataclass(frozen=True)
class Phase:
    """One phase: from sample ``at``, constant ``weights``, or a ramp to ``ramp_to`` ending at sample ``until``."""

    at: int
    weights: tuple[float, ...]
    ramp_to: tuple[float, ...] | None = None
    until: int | None = None

    @property
    def end_weights(self) -> tuple[float, ...]:
        """The weights this phase ends with (``ramp_to`` for a ramp)."""
        return self.weights if self.ramp_to is None else self.ramp_to


@dataclass(frozen=True)
class MixtureSchedule:
    """Blend weights over training: ``phases`` in increasing ``at``, the first at 0 (see the module docstring).

    Checked when built: ConfigError names the phase and the field at fault.
    """

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        """Check every phase; keep the weights as tuples of floats."""
        phases = self.phases
        if isinstance(phases, (str, bytes, Mapping)) or not isinstance(phases, Sequence) or not phases:
            raise ConfigError(f"phases={phases!r}: a mixture schedule needs a non-empty sequence of Phase")
        checked: list[Phase] = []
        for j, phase in enumerate(phases):
            checked.append(_checked_phase(j, phase, checked))
        for j, (phase, following) in enumerate(zip(checked, checked[1:])):
            if phase.until is not None and phase.until > following.at:
                raise ConfigError(
                    f"schedule phase {j} (at={phase.at}): field 'until'={phase.until} is past phase {j + 1}'s "
                    f"start ({following.at}): a ramp must end by the next phase"
                )
        object.__setattr__(self, "phases", tuple(checked))

    @property
    def num_datasets(self) -> int:
        """How many datasets the schedule blends (the length of every weight vector)."""
        return len(self.phases[0].weights)

    @classmethod
    def from_data(cls, data: Sequence[Mapping[str, Any]], *, seq_length: int | None = None) -> MixtureSchedule:
        """A schedule from plain data: a list of phase mappings (the format is in the module docstring)."""
        if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Sequence) or not data:
            raise ConfigError(
                f"a mixture schedule is a non-empty list of phases such as {{'at': 0, 'weights': [0.7, 0.3]}}, "
                f"got {type(data).__name__}"
            )
        if seq_length is not None:
            check_int("seq_length", seq_length, 1, what="the tokens per sample")
        phases: list[Phase] = []
        for j, item in enumerate(data):
            where = f"schedule phase {j}"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{where}: expected a mapping such as {{'at': 0, 'weights': [...]}}, got {item!r}")
            unknown = sorted(str(key) for key in item if key not in _FIELDS)
            if unknown:
                raise ConfigError(f"{where}: unknown field {unknown[0]!r}: the fields are {', '.join(_FIELDS)}")
            at = _milestone(item, "at", where, seq_length)
            if at is None:
                raise ConfigError(f"{where}: field 'at' is missing: give the sample (or 'at_tokens') where it starts")
            until = _milestone(item, "until", where, seq_length)
            weights, ramp_to = item.get("weights"), item.get("ramp_to")
            if weights is None:
                if ramp_to is None:
                    raise ConfigError(
                        f"{where}: field 'weights' is missing: give one weight per dataset "
                        "(or 'ramp_to' and 'until' for a ramp)"
                    )
                if not phases:
                    raise ConfigError(
                        f"{where}: field 'weights' is missing: the first phase's ramp needs the weights it starts from"
                    )
                weights = phases[-1].end_weights
            phases.append(Phase(at, weights, ramp_to, until))
        return cls(tuple(phases))

    def to_data(self) -> list[dict[str, Any]]:
        """The schedule as plain data (milestones in samples); ``from_data(to_data())`` gives it back."""
        data: list[dict[str, Any]] = []
        for phase in self.phases:
            item: dict[str, Any] = {"at": phase.at, "weights": list(phase.weights)}
            if phase.ramp_to is not None:
                item.update(ramp_to=list(phase.ramp_to), until=phase.until)
            data.append(item)
        return data

    def shares_at(self, sample: int) -> np.ndarray:
        """The intended shares (summing to 1) of sample ``sample``; within a ramp, at the sample's midpoint."""
        t = check_int("sample", sample, 0, what="a sample number")
        phase = next(p for p in reversed(self.phases) if p.at <= t)
        p = _shares(phase.weights)
        if phase.ramp_to is None or phase.until is None:  # a checked phase has both or neither
            return p
        q = _shares(phase.ramp_to)
        if t >= phase.until:
            return q
        s = (t - phase.at + 0.5) / (phase.until - phase.at)  # the late stream's share at sample t
        return (1.0 - s) * p + s * q


@dataclass(frozen=True)
class _Segment:
    """Samples ``[start, end)`` of the run: constant ``weights``, or a ramp of ``ramp_length`` samples to
    ``ramp_to``."""

    start: int
    end: int
    weights: np.ndarray
    ramp_to: np.ndarray | None = None
    ramp_length: int = 0


def build_scheduled_indices(
    schedule: MixtureSchedule, size: int, *, algorithm: str = "tijdeman"
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(dataset_index, dataset_sample_index)`` of ``size`` samples blended by ``schedule``.

    Same dtypes and meaning as ``build_blending_indices``: ``dataset_sample_index[t]`` counts the
    samples of dataset ``dataset_index[t]`` before ``t`` over the whole run, across phases.
    """
    _check(schedule, size)
    taken = np.zeros(schedule.num_datasets, np.int64)  # samples of each dataset before the segment
    dataset_index: np.ndarray | None = None
    sample_index = np.empty(size, np.int64)
    for segment in _segments(schedule, size):
        if segment.ramp_to is None:
            index, samples = build_blending_indices(segment.weights, segment.end - segment.start, algorithm=algorithm)
            samples += taken[index]  # continue each dataset's count from the earlier phases
        else:
            index = _ramp_dataset_index(segment, algorithm)
            samples = np.empty(len(index), np.int64)
            _continue_counts(index, taken, samples)
        if dataset_index is None:
            dataset_index = np.empty(size, index.dtype)
        dataset_index[segment.start : segment.end] = index
        sample_index[segment.start : segment.end] = samples
        taken += np.bincount(index, minlength=len(taken))
    assert dataset_index is not None  # size >= 1 gives at least one segment
    return dataset_index, sample_index


def samples_per_dataset(schedule: MixtureSchedule, size: int, *, algorithm: str = "tijdeman") -> np.ndarray:
    """Return how many samples each dataset supplies to the first ``size`` samples (int64, one per dataset)."""
    _check(schedule, size)
    counts = np.zeros(schedule.num_datasets, np.int64)
    for segment in _segments(schedule, size):
        length = segment.end - segment.start
        if segment.ramp_to is None:
            counts += _counts(segment.weights, length, algorithm)
        else:
            late = _late_count(segment.ramp_length, length)
            counts += _counts(segment.weights, length - late, algorithm)
            counts += _counts(segment.ramp_to, late, algorithm)
    return counts


def _check(schedule: object, size: object) -> None:
    """Raise ConfigError unless ``schedule`` is a MixtureSchedule and ``size`` an integer >= 1."""
    if not isinstance(schedule, MixtureSchedule):
        raise ConfigError(
            f"schedule must be a MixtureSchedule, got {type(schedule).__name__}: "
            "build one from plain data with MixtureSchedule.from_data"
        )
    check_int("size", size, 1, what="the number of samples to blend")


def _segments(schedule: MixtureSchedule, size: int) -> list[_Segment]:
    """The run's first ``size`` samples cut into constant and ramp segments, in order."""
    segments = []
    phases = schedule.phases
    for j, phase in enumerate(phases):
        if phase.at >= size:
            break
        end = min(phases[j + 1].at if j + 1 < len(phases) else size, size)
        weights = np.asarray(phase.weights, np.float64)
        if phase.ramp_to is None or phase.until is None:  # a checked phase has both or neither
            segments.append(_Segment(phase.at, end, weights))
            continue
        ramp_to = np.asarray(phase.ramp_to, np.float64)
        ramp_end = min(phase.until, end)
        segments.append(_Segment(phase.at, ramp_end, weights, ramp_to, phase.until - phase.at))
        if ramp_end < end:
            segments.append(_Segment(ramp_end, end, ramp_to))
    return segments


def _late_count(length: int, k: int) -> int:
    """Q(k) = round(k^2 / 2L), halves up: the late stream's samples among a ramp's first ``k`` (exact integers)."""
    return (k * k + length) // (2 * length)


def _late_mask(length: int, stop: int) -> np.ndarray:
    """Whether each of the ramp's first ``stop`` samples comes from the late stream: where Q steps up.

    Q(k + 1) - Q(k) is 0 or 1 because (k + 1)^2 - k^2 = 2k + 1 < 2L for k < L.
    """
    mask = np.empty(stop, bool)
    for begin in range(0, stop, _CHUNK):
        k = np.arange(begin, min(begin + _CHUNK, stop) + 1, dtype=np.int64)
        mask[begin : begin + len(k) - 1] = np.diff((k * k + length) // (2 * length)) > 0
    return mask


def _ramp_dataset_index(segment: _Segment, algorithm: str) -> np.ndarray:
    """The ``dataset_index`` of a ramp segment: the early blend over ``weights`` and the late one over
    ``ramp_to``, interleaved."""
    assert segment.ramp_to is not None  # only a ramp segment comes here
    late = _late_mask(segment.ramp_length, segment.end - segment.start)
    late_count = int(np.count_nonzero(late))
    parts = [
        build_dataset_index(weights, count, algorithm=algorithm)
        for weights, count in ((segment.weights, len(late) - late_count), (segment.ramp_to, late_count))
        if count
    ]
    index = np.empty(len(late), parts[0].dtype)
    if late_count < len(late):
        index[~late] = parts[0]
    if late_count:
        index[late] = parts[-1]
    return index


def _counts(weights: np.ndarray, size: int, algorithm: str) -> np.ndarray:
    """How many of ``size`` samples blended by ``weights`` each dataset supplies (zeros for size 0)."""
    if size == 0:
        return np.zeros(len(weights), np.int64)
    index = build_dataset_index(weights, size, algorithm=algorithm)
    return np.bincount(index, minlength=len(weights)).astype(np.int64)


@numba.njit(cache=True)
def _continue_counts(dataset_index, taken, out):
    """Set ``out[t]`` to the samples of ``dataset_index[t]`` before ``t``, counting from ``taken``."""
    counts = taken.copy()
    for t in range(dataset_index.shape[0]):
        d = dataset_index[t]
        out[t] = counts[d]
        counts[d] += 1


def _shares(weights: Sequence[float]) -> np.ndarray:
    """Weights normalized to sum 1 (float64)."""
    raw = summable(weights)  # by ratio when the sum would overflow
    return raw / raw.sum()


def _checked_phase(j: int, phase: object, earlier: list[Phase]) -> Phase:
    """Phase ``j`` checked against the phases before it, its weights as tuples of floats."""
    if not isinstance(phase, Phase):
        raise ConfigError(
            f"schedule phase {j}: expected a Phase, got {type(phase).__name__}: "
            "build schedules from plain data with MixtureSchedule.from_data"
        )
    where = f"schedule phase {j} (at={phase.at!r})"
    at = _whole(phase.at, where, "at")
    if not earlier and at != 0:
        raise ConfigError(f"{where}: field 'at' must be 0: the first phase starts the run")
    if earlier and at <= earlier[-1].at:
        raise ConfigError(
            f"{where}: field 'at' must be greater than phase {j - 1}'s ({earlier[-1].at}): milestones must increase"
        )
    expected = len(earlier[0].weights) if earlier else None
    weights = _checked_weights(phase.weights, where, "weights", expected)
    if phase.ramp_to is None:
        if phase.until is not None:
            raise ConfigError(
                f"{where}: field 'until' is given without 'ramp_to': 'until' ends a ramp; "
                "give 'ramp_to' too, or drop 'until' for constant weights"
            )
        return Phase(at, weights)
    ramp_to = _checked_weights(phase.ramp_to, where, "ramp_to", len(weights))
    if phase.until is None:
        raise ConfigError(
            f"{where}: field 'until' is missing: a ramp needs an end, the sample where it reaches 'ramp_to'"
        )
    until = _whole(phase.until, where, "until")
    if until <= at:
        raise ConfigError(f"{where}: field 'until'={until} must be greater than 'at'={at}")
    if until - at > _MAX_RAMP:
        raise ConfigError(
            f"{where}: field 'until': the ramp spans {until - at:,} samples, past "
            f"{_MAX_RAMP:,}: split it into consecutive ramps"
        )
    return Phase(at, weights, ramp_to, until)


def _whole(value: object, where: str, name: str) -> int:
    """``value`` as an int >= 0, or ConfigError naming the field."""
    if not is_int(value) or value < 0:
        raise ConfigError(f"{where}: field {name!r}={value!r} must be a whole number of samples >= 0")
    return int(value)


def _checked_weights(values: object, where: str, name: str, expected: int | None) -> tuple[float, ...]:
    """One finite weight >= 0 per dataset, not all zero, as floats; ConfigError naming the field and entry."""
    if (
        isinstance(values, (str, bytes, Mapping))
        or not isinstance(values, (Sequence, np.ndarray))
        or (isinstance(values, np.ndarray) and values.ndim != 1)
        or not len(values)
    ):
        raise ConfigError(f"{where}: field {name!r}={values!r} must be a non-empty list of numbers, one per dataset")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{where}: field {name!r}[{i}]={value!r} is not a number")
        if math.isnan(value) or math.isinf(value) or value < 0:
            problem = "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else "negative"
            raise ConfigError(
                f"{where}: field {name!r}[{i}]={value!r} is {problem}: weights must be finite "
                "and >= 0 (0: the dataset takes no samples)"
            )
    if expected is not None and len(values) != expected:
        raise ConfigError(
            f"{where}: field {name!r} has {len(values)} weights but phase 0 has {expected}: "
            "give every phase one weight per dataset"
        )
    if not any(values):
        raise ConfigError(f"{where}: field {name!r} is all zero: give at least one dataset a positive weight")
    return tuple(float(value) for value in values)


def _milestone(item: Mapping[str, Any], name: str, where: str, seq_length: int | None) -> int | None:
    """Field ``name`` in samples, or ``name + '_tokens'`` converted with ``seq_length``; None when neither is given."""
    tokens_name = f"{name}_tokens"
    if name in item and tokens_name in item:
        raise ConfigError(f"{where}: fields {name!r} and {tokens_name!r} are both given: give one")
    if tokens_name not in item:
        return item.get(name)
    if seq_length is None:
        raise ConfigError(
            f"{where}: field {tokens_name!r} needs seq_length to convert tokens to samples: "
            f"pass from_data(..., seq_length=...), or give {name!r} in samples"
        )
    tokens = item[tokens_name]
    if not is_int(tokens) or tokens < 0:
        raise ConfigError(f"{where}: field {tokens_name!r}={tokens!r} must be a whole number of tokens >= 0")
    return int(tokens) // int(seq_length)  # the whole samples in that many tokens

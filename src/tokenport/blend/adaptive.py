"""AdaptiveBlend: a blend whose weights change while it is read, at sample boundaries, without losing data.

Weights are quantized to integer shares ``a_i(t)`` summing to ``Q = 2**40`` (a positive weight keeps
at least 1). The ideal count of dataset ``i`` after ``t`` samples is ``I_i(t) = sum_{u<t} a_i(u) / Q``,
the integral of its share. Sample ``t`` goes to the dataset with the largest deficit after this
sample's share, ``argmax_i I_i(t + 1) - C_i(t)`` (ties to the lowest index), where ``C_i(t)`` counts
its samples among the first ``t``: the largest-deficit rule, in exact integer arithmetic.

Bound (for ``n`` datasets, at every prefix ``t``, under any sequence of weight updates):
``-(1 - 1/n) <= I_i(t) - C_i(t) <= (n - 1) (1 - 1/n)``. Proof: the deficits ``D_i = I_i - C_i``
sum to 0, so the keys ``D_i + a_i/Q`` sum to 1 and the largest is at least ``1/n``; the dataset
taken drops to at least ``1/n - 1``, the others only rise. So every ``D_j >= -(1 - 1/n)`` and
``D_i = -sum_{j != i} D_j <= (n - 1)(1 - 1/n)``. A dataset is never more than one sample ahead of
its integral, and one whose share stays positive is never starved: its deficit grows by ``a_i/Q``
each sample it is not taken, so it is taken within ``((n - 1)(1 - 1/n) + 1) Q / a_i`` samples.
A dataset whose weight drops to 0 may still catch up its remaining deficit (fewer samples than the bound).

Each child's samples are taken in order 0, 1, 2, ...; past its length the count goes on and the
child is read modulo its length (its next epoch repeats its own order), so within an epoch none is
lost or repeated. The stream is realized lazily and in order by a numba kernel, only as far as it is
read; an update applies from a sample not yet realized. The stream is a pure function of
(the children's lengths, the initial weights, the updates): rebuilding with the same updates gives it back.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numba
import numpy as np

from .._checks import check_int, check_sample_id, check_sample_ids, holds_numbers, is_int, summable
from .._schema import INT64_MAX
from ..errors import ConfigError
from ..indexed.same_tokenizer import check_datasets_tokenizer
from ..samples.base import Describer, Rebuilder, SampleDataset, digest, register_dataset_kind
from ..samples.lineage import Occurrences, SampleLineage
from .dataset import gather
from .inverse import BlendInverse, blend_occurrences

__all__ = ["AdaptiveBlend"]

_SCALE_BITS = 40
_SCALE = 1 << _SCALE_BITS  # Q: the integer shares of a weight vector sum to this
_MAX_DATASETS = 1 << 21  # deficits stay below n * Q < 2**62
_LONE_STORE = 512  # the packed kernel takes its keys' drop in the next pass below this many datasets
_FOLD = 256  # slack kept in the packed keys' bound (deficits within (n - 1) Q, a key within n Q)
_NEAR = 1 << 22  # ideal counts this near the frontier come from its running deficits (Q * _NEAR < 2**62)


def quantized_shares(weights: np.ndarray) -> np.ndarray:
    """Integer shares (int64) summing to ``Q`` of each row of finite weights >= 0, not all zero; a positive
    weight gets >= 1. Rows are normalized by their sum taken left to right (``_row_sums``) and the largest
    share absorbs the rounding remainder, so the shares are a pure function of the weights.
    """
    values = np.asarray(weights, dtype=np.float64)
    if values.ndim == 1 and len(values):
        ok, shares = _quantized_row(values, float(_SCALE))
        if ok:  # the row's sum is far from overflowing: the steps below in one kernel, the same bits
            return shares
    rows = np.atleast_2d(values)
    scaled = summable(rows)  # weights near the float maximum: their ratios, not an overflowed sum
    sums = _row_sums(scaled)
    shares = np.floor(scaled / sums[:, None] * _SCALE).astype(np.int64)
    shares[(rows > 0) & (shares == 0)] = 1
    shares[np.arange(len(rows)), np.argmax(shares, axis=1)] += _SCALE - shares.sum(axis=1)
    return shares.reshape(np.shape(weights))


class AdaptiveBlend(SampleDataset):
    """``num_samples`` samples over ``datasets`` whose weights change at sample boundaries (``set_weights``).

    Items are the child's sample dict plus ``dataset_id``, as in ``BlendedDataset``. ``updates`` is a
    sequence of ``(from_sample, weights)`` applied in order, as ``updates`` returns them. The
    realization rule, its bound and how a child wraps are in the module docstring. Children's stores
    made with different tokenizers are refused unless ``allow_mixed_tokenizers`` (`indexed.same_tokenizer`).
    """

    _caches = ("_occurrence_inverse",)
    _occurrence_inverse: tuple[Any, BlendInverse] | None = None  # (the updates it replays, the inverse)

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[float] | np.ndarray,
        *,
        num_samples: int,
        updates: Iterable[tuple[int, Sequence[float]]] = (),
        allow_mixed_tokenizers: bool = False,
    ) -> None:
        if isinstance(datasets, (str, bytes)) or not hasattr(datasets, "__len__"):
            raise ConfigError(f"datasets: expected a list of datasets, got a {type(datasets).__name__}")
        if not len(datasets):
            raise ConfigError("datasets is empty: an adaptive blend needs at least one dataset")
        check_datasets_tokenizer(datasets, allow_mixed_tokenizers=allow_mixed_tokenizers, what="AdaptiveBlend")
        if len(datasets) > _MAX_DATASETS:
            raise ConfigError(f"datasets: {len(datasets):,} datasets, past {_MAX_DATASETS:,}: blend fewer")
        self.datasets = list(datasets)
        self._lengths = np.array([len(d) for d in self.datasets], dtype=np.int64)
        self.num_samples = check_int("num_samples", num_samples, 0, INT64_MAX, what="the samples the blend holds")
        self.initial_weights = tuple(self._checked(weights, "weights").tolist())
        bits = max(1, (len(self.datasets) - 1).bit_length())
        # the packed kernel's keys (deficits within (n + _FOLD + 1) Q) must keep ``bits`` spare bits
        self._bits: int | None = bits if (len(self.datasets) + _FOLD + 1) * _SCALE << bits < 1 << 62 else None
        self.restore_updates(updates)

    # -- weights -------------------------------------------------------------------------------

    def _checked(self, weights: object, name: str) -> np.ndarray:
        """``weights`` as a new float64 array, one finite value >= 0 per dataset, not all zero, no positive
        weight on an empty child; else ConfigError."""
        try:
            given = np.asarray(weights)
            if not holds_numbers(given):  # strings would be parsed and bools taken as 1 and 0
                raise TypeError("not numbers")
            values = np.array(given, dtype=np.float64)  # a copy: the caller's array may change later
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConfigError(f"{name}={weights!r}: expected one number per dataset ({exc})") from None
        if values.shape != (len(self.datasets),):
            raise ConfigError(
                f"{name}: expected {len(self.datasets)} weights, one per dataset, got shape {values.shape}"
            )
        problem, at = _weights_problem(values, self._lengths)
        if problem == _NOT_FINITE:
            raise ConfigError(f"{name}[{at}]={values[at]!r}: weights must be finite and >= 0 (0: take no samples)")
        if problem == _ALL_ZERO:
            raise ConfigError(f"{name} is all zero: give at least one dataset a positive weight")
        if problem == _ON_EMPTY:
            raise ConfigError(f"{name}[{at}]={values[at]!r} but dataset {at} holds no samples: give it 0")
        return values

    @property
    def updates(self) -> tuple[tuple[int, tuple[float, ...]], ...]:
        """The weight updates so far, as ``(from_sample, weights)``, from_sample strictly increasing."""
        return tuple((start, tuple(weights.tolist())) for start, weights in self._updates)

    @property
    def last_update_sample(self) -> int:
        """The sample the last update applies from (0 before any): a new update may start there or later."""
        return self._updates[-1][0] if self._updates else 0

    @property
    def frontier(self) -> int:
        """Samples realized so far: an update may apply from here on, not earlier."""
        return self._frontier

    def set_weights(self, weights: Sequence[float] | np.ndarray, from_sample: int) -> None:
        """Use ``weights`` (relative) from sample ``from_sample`` on; one at the same sample as the last
        update replaces it. ConfigError for bad weights or a sample already realized or before the last update."""
        start = check_int("from_sample", from_sample, 0, self.num_samples, what="the first sample the weights apply to")
        checked = self._checked(weights, "weights")
        if start < self._frontier:
            raise ConfigError(
                f"from_sample={start}: samples up to {self._frontier} are realized already; "
                f"apply the weights from sample {self._frontier} or later"
            )
        last = self._updates[-1][0] if self._updates else 0
        if start < last:
            raise ConfigError(
                f"from_sample={start} is before the last update's ({last}): updates must come in sample order"
            )
        shares = quantized_shares(checked)
        if self._updates and start == last:
            self._updates[-1] = (start, checked)
            self._rows[-1] = shares
        else:
            self._updates.append((start, checked))
            self._starts.append(start)
            self._rows.append(shares)

    def restore_updates(self, updates: Iterable[tuple[int, Sequence[float]]]) -> None:
        """Replace the updates with ``updates`` (as ``updates`` returns them) and forget the realized stream;
        a refusal (ConfigError naming the first bad update) leaves the blend exactly as it was."""
        before = dict(self.__dict__)  # each field below is replaced, never changed in place
        try:
            self._restore(updates)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _restore(self, updates: Iterable[tuple[int, Sequence[float]]]) -> None:
        """Start from the initial weights with nothing realized and apply ``updates`` (``restore_updates``)."""
        self._updates: list[tuple[int, np.ndarray]] = []
        self._starts: list[int] = [0]  # segment j: shares self._rows[j] from sample self._starts[j] on
        self._rows: list[np.ndarray] = [quantized_shares(np.asarray(self.initial_weights))]
        self._frontier = 0
        self._deficit = np.zeros(len(self.datasets), np.int64)
        self._counts = np.zeros(len(self.datasets), np.int64)
        self._dataset_index = np.empty(0, np.int32)
        self._sample_count = np.empty(0, np.int64)
        pairs = []
        try:
            listed = list(updates)
        except TypeError:
            raise ConfigError(f"updates={updates!r}: expected a sequence of (from_sample, weights) pairs") from None
        for j, update in enumerate(listed):
            try:
                from_sample, weights = update
            except (TypeError, ValueError):
                raise ConfigError(f"updates[{j}]={update!r}: expected a pair (from_sample, weights)") from None
            pairs.append((from_sample, weights))
        if not self._restore_valid(pairs):  # one by one: the first bad update is named
            for from_sample, weights in pairs:
                self.set_weights(weights, from_sample)

    def _restore_valid(self, pairs: list[tuple[Any, Any]]) -> bool:
        """Adopt ``pairs`` at once when every one is valid and their samples strictly increase; else False."""
        if not pairs:
            return True
        starts = [start for start, _ in pairs]
        if not all(is_int(start) for start in starts):
            return False
        try:
            matrix = np.asarray([weights for _, weights in pairs], dtype=np.float64)
        except (TypeError, ValueError):
            return False
        lengths_ok = matrix.shape == (len(pairs), len(self.datasets))
        if not lengths_ok or not (np.isfinite(matrix).all() and (matrix >= 0).all() and matrix.any(axis=1).all()):
            return False
        steps = np.diff(np.array([0, *starts, self.num_samples], dtype=np.int64))
        if (
            int(starts[0]) < 0
            or (steps[1:-1] <= 0).any()
            or steps[-1] < 0
            or ((matrix > 0) & (self._lengths == 0)).any()
        ):
            return False
        self._updates = [(int(start), row) for start, row in zip(starts, matrix)]
        self._starts += [int(start) for start in starts]
        self._rows += list(quantized_shares(matrix))
        return True

    # -- realization ---------------------------------------------------------------------------

    def realize(self, upto: int) -> None:
        """Realize the stream's first ``upto`` samples (no-op for those realized already)."""
        stop = check_int("upto", upto, 0, self.num_samples, what="samples to realize")
        if stop <= self._frontier:
            return
        if stop > len(self._dataset_index):
            capacity = min(self.num_samples, max(stop, 2 * len(self._dataset_index), 4096))
            self._dataset_index = np.concatenate(
                (self._dataset_index[: self._frontier], np.empty(capacity - self._frontier, np.int32))
            )
            self._sample_count = np.concatenate(
                (self._sample_count[: self._frontier], np.empty(capacity - self._frontier, np.int64))
            )
        segment = bisect.bisect_right(self._starts, self._frontier) - 1
        rows = np.array(self._rows[segment:])
        ends = np.array(self._starts[segment + 1 :] + [stop], dtype=np.int64)
        arrays = (self._deficit, self._counts, self._dataset_index, self._sample_count, self._frontier, stop)
        if self._bits is None:
            _scan_kernel(rows, ends, _SCALE, *arrays)
        else:
            _packed_kernel(rows, ends, _SCALE, self._bits, *arrays)
        self._frontier = stop

    def __len__(self) -> int:
        return self.num_samples

    @property
    def dataset_index(self) -> np.ndarray:
        """The dataset of each realized sample (int32, ``frontier`` entries)."""
        return self._dataset_index[: self._frontier]

    def _located(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, sample within it) of blended samples ``ids`` (int64 arrays), realizing as needed."""
        if len(ids):
            self.realize(int(ids.max()) + 1)
        datasets = self._dataset_index[ids].astype(np.int64)
        return datasets, self._sample_count[ids] % self._lengths[datasets]

    def locate(self, idx: int) -> tuple[int, int]:
        """(dataset, sample within it) of blended sample ``idx``."""
        datasets, samples = self._located(np.array([check_sample_id(idx, self.num_samples)], np.int64))
        return int(datasets[0]), int(samples[0])

    def locate_many(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(datasets, samples within them) of blended samples ``ids``, as int64 arrays."""
        return self._located(check_sample_ids(ids, self.num_samples))

    def lineage(self, idx: int) -> SampleLineage:
        """Where blended sample ``idx`` comes from: the child's lineage, with (child, its sample) on its path."""
        dataset, sample = self.locate(idx)
        child = self.datasets[dataset]
        if not isinstance(child, SampleDataset):
            raise ConfigError(
                f"dataset {dataset} of the adaptive blend is a {type(child).__name__}, which cannot say where its "
                "samples come from (no lineage()); blend GPT, packed, SFT datasets or blends of them"
            )
        return child.lineage(sample).through(check_sample_id(idx, self.num_samples), dataset)

    def _occurrences(self, store: str, document: int) -> Occurrences:
        """The children's occurrences as blended samples over the whole planned run: the stream replayed from
        the updates given so far on a copy (the blend itself is left as it was; samples past the frontier
        follow those updates, so a later update may move them). Kept until the updates change."""
        key = tuple((start, row.tobytes()) for start, row in zip(self._starts, self._rows))
        cached = self._occurrence_inverse
        if cached is None or cached[0] != key:
            replay = copy.copy(self)
            for name in ("_deficit", "_counts", "_dataset_index", "_sample_count"):
                setattr(replay, name, getattr(self, name).copy())
            replay.realize(self.num_samples)
            counts = replay._sample_count
            cached = (key, BlendInverse(replay.dataset_index, len(self.datasets), lambda at: counts[at]))
            self._occurrence_inverse = cached
        return blend_occurrences(self.datasets, cached[1], self._lengths.tolist(), store, document, "adaptive blend")

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """The child's sample with its ``dataset_id``."""
        dataset, sample = self.locate(idx)
        return {**self.datasets[dataset][sample], "dataset_id": dataset}

    def get_batch(self, ids: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Samples ``ids`` stacked on a leading axis: one ``get_batch`` per child dataset involved."""
        datasets, samples = self.locate_many(ids)
        return gather(self.datasets, datasets, samples, "AdaptiveBlend")

    # -- reports -------------------------------------------------------------------------------

    def _check_upto(self, upto: int) -> int:
        return check_int("upto", upto, 1, self.num_samples, what="the prefix of the stream to report on")

    def samples_per_dataset(self, upto: int) -> np.ndarray:
        """How many of the first ``upto`` samples each dataset supplies (int64, one per dataset): the running
        counts at the frontier less the samples past ``upto`` when those are fewer than ``upto``."""
        stop = check_int("upto", upto, 0, self.num_samples, what="the prefix of the stream to count")
        self.realize(stop)
        n = len(self.datasets)
        if self._frontier - stop < stop:
            return self._counts - np.bincount(self._dataset_index[stop : self._frontier], minlength=n)
        return np.bincount(self._dataset_index[:stop], minlength=n).astype(np.int64)

    def ideal_counts(self, upto: int) -> np.ndarray:
        """``I_i(upto)``: the integral of each dataset's share over the first ``upto`` samples (float64), the
        exact integral rounded once; near the frontier from its running deficits, in time independent of the updates."""
        stop = check_int("upto", upto, 0, self.num_samples, what="the prefix of the stream")
        near = _near_integral(self._starts, self._rows, self._deficit, self._counts, self._frontier, stop)
        if near is not None:
            whole, part = near  # Q * I = whole * Q + part: one correctly rounded addition of exact floats
            return whole.astype(np.float64) + part.astype(np.float64) / _SCALE
        total = np.zeros(len(self.datasets), dtype=object)  # exact integers, then one division
        for start, shares, end in zip(self._starts, self._rows, self._starts[1:] + [stop]):
            length = max(0, min(end, stop) - start)
            total += shares.astype(object) * length
        return np.array([float(value) / _SCALE for value in total], dtype=np.float64)

    def ideal_counts_at(self, t: Sequence[int] | np.ndarray) -> np.ndarray:
        """``I_i(t)`` for each ``t`` (float64, ``len(t) x n``; in floating point, for reports)."""
        at = np.asarray(t, dtype=np.int64).reshape(-1, 1)
        total = np.zeros((len(at), len(self.datasets)))
        ends = self._starts[1:] + [np.iinfo(np.int64).max]
        for start, shares, end in zip(self._starts, self._rows, ends):
            total += np.clip(at - start, 0, end - start).astype(np.float64) * (shares / _SCALE)
        return total

    def target_shares(self, upto: int) -> np.ndarray:
        """Each dataset's intended share of the first ``upto`` samples (the integral of its weights)."""
        return self.ideal_counts(self._check_upto(upto)) / upto

    def realized_shares(self, upto: int) -> np.ndarray:
        """Each dataset's share of the first ``upto`` samples as realized."""
        return self.samples_per_dataset(self._check_upto(upto)) / upto

    @classmethod
    def from_description(
        cls,
        described: Mapping[str, Any],
        datasets: Sequence[Any] | Rebuilder | None = None,
        *,
        allow_mixed_tokenizers: bool = False,
    ) -> AdaptiveBlend:
        """The blend ``describe()`` described (its updates included when present), over ``datasets``, or
        over stand-ins of the recorded lengths that report the stream but hold no samples. Given a
        ``Rebuilder``, ``described`` is a receipt node: its children are rebuilt, its weight updates left
        out (they travel in the loader state's "mixture")."""
        if isinstance(datasets, Rebuilder):
            rebuilt = [datasets.child(k, child) for k, child in enumerate(described["datasets"])]
            return cls.from_description({**described["build"], "updates": []}, rebuilt, allow_mixed_tokenizers=True)
        try:
            lengths = [check_int("dataset_lengths[]", n, 0) for n in described["dataset_lengths"]]
            weights, length = described["initial_weights"], described["length"]
            updates = [tuple(u) for u in described.get("updates", ())]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConfigError(
                "described: expected the dict of AdaptiveBlend.describe() (dataset_lengths, initial_weights, length, "
                "updates as [from_sample, weights] pairs)"
            ) from None
        children: Sequence[Any] = [_StandIn(n) for n in lengths] if datasets is None else datasets
        return cls(
            children, weights, num_samples=length, updates=updates, allow_mixed_tokenizers=allow_mixed_tokenizers
        )

    def describe(self, describer: Describer | None = None, *, updates: bool = True) -> dict[str, Any]:
        """The blend as plain JSON: children's lengths, initial weights and (with ``updates``) the updates.
        Given a ``Describer``: its receipt node (that, without updates, plus its children and recipe)."""
        if describer is not None:
            recipe = self.describe(updates=False)
            children = [describer.child(k, child) for k, child in enumerate(self.datasets)]
            node = {key: value for key, value in recipe.items() if key not in ("type", "length")}
            return {**node, "datasets": children, "order": digest(np.asarray(self.initial_weights)), "build": recipe}
        described: dict[str, Any] = {
            "type": "AdaptiveBlend",
            "length": self.num_samples,
            "dataset_lengths": [int(n) for n in self._lengths],
            "initial_weights": list(self.initial_weights),
        }
        if updates:
            described["updates"] = [[start, weights.tolist()] for start, weights in self._updates]
        return described


register_dataset_kind("AdaptiveBlend", AdaptiveBlend)


def _near_integral(
    starts: list[int], rows: list[np.ndarray], deficit: np.ndarray, counts: np.ndarray, frontier: int, stop: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """``Q * I(stop)`` as int64 ``(whole, part)``, ``whole * Q + part`` with ``0 <= part < Q``, from the deficits
    and counts at the frontier (``Q * I = Q * C + deficit`` there) and the segments between it and ``stop``;
    None when ``stop`` is ``_NEAR`` samples or more away (the shares between might overflow an int64) or the
    counts are past 2**52 (a float64 would not hold them exactly)."""
    low, high = min(stop, frontier), max(stop, frontier)
    if high - low >= _NEAR or (len(counts) and int(counts.max()) >= 1 << 52):
        return None
    between = np.zeros(len(counts), np.int64)  # at most Q per sample: below 2**62
    j = bisect.bisect_right(starts, low) - 1
    while j < len(starts) and starts[j] < high:
        end = min(high, starts[j + 1]) if j + 1 < len(starts) else high
        between += rows[j] * (end - max(low, starts[j]))
        j += 1
    scaled = deficit + between if stop >= frontier else deficit - between  # |deficit| < 2**62 - 2**61
    return counts + (scaled >> _SCALE_BITS), scaled & (_SCALE - 1)


class _StandIn:
    """A child of a known length whose samples are not at hand (a blend rebuilt to report on)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> dict[str, Any]:
        raise ConfigError("this AdaptiveBlend was rebuilt from a description: pass datasets= to read samples")

    def get_batch(self, ids: Any) -> dict[str, np.ndarray]:
        """Refused: the samples are not at hand."""
        raise ConfigError("this AdaptiveBlend was rebuilt from a description: pass datasets= to read samples")


_NOT_FINITE, _ALL_ZERO, _ON_EMPTY = 1, 2, 3  # what _weights_problem finds wrong


@numba.njit(cache=True)
def _weights_problem(values, lengths):
    """(0, 0) for good weights, else (problem, index): the first weight not finite or < 0, else all zero
    (index 0), else the first positive weight on an empty dataset; in that order."""
    for j in range(len(values)):
        if not (np.isfinite(values[j]) and values[j] >= 0):
            return _NOT_FINITE, j
    positive = False
    for j in range(len(values)):
        positive = positive or values[j] > 0
    if not positive:
        return _ALL_ZERO, 0
    for j in range(len(values)):
        if values[j] > 0 and lengths[j] == 0:
            return _ON_EMPTY, j
    return 0, 0


@numba.njit(cache=True)
def _quantized_row(values, scale):
    """(True, ``quantized_shares(values)``) for one row of good weights whose sum, left to right, is below
    1e300 (so numpy's sum does not overflow either and ``summable`` leaves the row as it is); else (False, _)."""
    total = 0.0
    for j in range(len(values)):
        total += values[j]
    shares = np.empty(len(values), np.int64)
    if not total < 1e300:
        return False, shares
    remainder = np.int64(scale)
    best = 0
    for j in range(len(values)):
        shares[j] = np.int64(np.floor(values[j] / total * scale))
        if values[j] > 0 and shares[j] == 0:
            shares[j] = 1
        remainder -= shares[j]
        if shares[j] > shares[best]:
            best = j
    shares[best] += remainder
    return True, shares


@numba.njit(cache=True)
def _row_sums(rows):
    """Each row's sum, left to right: the same bits whatever the other rows (numpy's reductions may block)."""
    sums = np.zeros(rows.shape[0])
    for r in range(rows.shape[0]):
        total = 0.0
        for j in range(rows.shape[1]):
            total += rows[r, j]
        sums[r] = total
    return sums


@numba.njit(cache=True)
def _packed_kernel(rows, ends, scale, bits, deficit, counts, out_dataset, out_count, start, stop):
    """Samples ``[start, stop)`` by the largest deficit after this sample's share (ties to the lowest index),
    with the shares ``rows[s]`` until sample ``ends[s]``.

    Branch-free and without a multiply: a dataset's key is kept packed, its deficit shifted left by
    ``bits`` with ``low - j`` in the low bits, so the largest key is the largest deficit, ties to the
    lowest ``j``; each sample adds the shifted shares to every key (the low bits stay as they are),
    takes the largest and subtracts ``scale`` from the one taken. Below ``_LONE_STORE`` datasets that
    subtraction is made in the next pass over the keys: a lone store into the keys just before the
    vector loads of that pass stalls them, a cost the pass over a few keys does not hide.
    """
    n = rows.shape[1]
    low = (np.int64(1) << bits) - 1
    keys = np.empty(n, np.int64)
    for j in range(n):
        keys[j] = (deficit[j] << bits) | (low - j)
    taken = np.int64(scale) << bits
    shifted = np.empty(n, np.int64)
    t = start
    taken_last = -1  # the dataset taken by the last sample: its key drops in the next pass (no lone store)
    for s in range(rows.shape[0]):
        for j in range(n):
            shifted[j] = rows[s, j] << bits
        last = min(ends[s], stop)
        while t < last:
            best = np.int64(-(2**62)) << 1
            if n < _LONE_STORE:
                for j in range(n):
                    key = keys[j] + shifted[j] - (taken if j == taken_last else 0)
                    keys[j] = key
                    best = max(best, key)
                i = low - (best & low)
                taken_last = i
            else:
                for j in range(n):
                    keys[j] += shifted[j]
                    best = max(best, keys[j])
                i = low - (best & low)
                keys[i] -= taken
            out_dataset[t] = i
            out_count[t] = counts[i]
            counts[i] += 1
            t += 1
    if taken_last >= 0:
        keys[taken_last] -= taken
    for j in range(n):
        deficit[j] = keys[j] >> bits


@numba.njit(cache=True)
def _scan_kernel(rows, ends, scale, deficit, counts, out_dataset, out_count, start, stop):
    """The same choices as ``_packed_kernel`` by a plain scan, for blends whose keys do not pack."""
    n = rows.shape[1]
    t = start
    for s in range(rows.shape[0]):
        shares = rows[s]
        while t < min(ends[s], stop):
            best = 0
            best_key = deficit[0] + shares[0]
            deficit[0] = best_key
            for j in range(1, n):
                key = deficit[j] + shares[j]
                deficit[j] = key
                if key > best_key:
                    best_key = key
                    best = j
            deficit[best] -= scale
            out_dataset[t] = best
            out_count[t] = counts[best]
            counts[best] += 1
            t += 1

"""What a blend does, per dataset: target and achieved share, samples taken, epochs implied, deviation.

``tokenport blend SPEC --size N`` prints this; ``plot_blend`` draws achieved against target share
over the run (matplotlib, the ``plot`` extra). A scheduled blend is reported window by window
(``mixture_report``), an adaptive one from a saved loader state (``adaptive_report``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from msgspec import UnsetType

from .._checks import check_int, summable
from .._optional import require
from ..blend import AdaptiveBlend, MixtureSchedule, build_blending_indices, prefix_deviations
from ..blend.trajectory import MixtureTrajectory, adaptive_trajectory, dataset_labels, scheduled_trajectory
from ..errors import ConfigError
from ..indexed import IndexedDataset
from ..indexed.same_tokenizer import check_same_tokenizer, store_tokenizer
from ..sampling.state import read_loader_state
from .specs import Blend, BlendSpec, spec_from_arguments, store_tokens
from .splits import SPLIT_NAMES


@dataclass(frozen=True)
class BlendRow:
    """One dataset of a blend: its weight, what it got, and how often that reads it whole."""

    prefix: str
    target: float
    achieved: float
    samples: int
    epochs: float
    deviation: float
    label: str = ""  # what the table calls it: its spec name, else its shortest distinguishing path suffix


@dataclass(frozen=True)
class BlendReport:
    """One blend of ``size`` samples, dataset by dataset, with its worst prefix deviation."""

    name: str
    size: int
    seq_length: int
    algorithm: str
    rows: tuple[BlendRow, ...]
    bound: float

    @property
    def max_deviation(self) -> float:
        """The largest ``|C_i(t) - t * w_i|`` of any dataset at any prefix."""
        return max(row.deviation for row in self.rows)

    def render(self, root: str | None = None) -> str:
        """The report as an aligned text table, a dataset per row by its label (a row without one: its
        prefix, relative to ``root`` when given and local)."""
        names = [
            row.label or (row.prefix if root is None or "://" in row.prefix else os.path.relpath(row.prefix, root))
            for row in self.rows
        ]
        width = max(len("dataset"), *(len(name) for name in names))
        lines = [
            f"{self.name}: {self.size:,} samples of {self.seq_length} tokens, algorithm {self.algorithm}",
            f"{'dataset':<{width}}  {'target':>9}  {'achieved':>9}  {'samples':>13}  {'epochs':>9}  {'max dev':>8}",
        ]
        for name, row in zip(names, self.rows):
            lines.append(
                f"{name:<{width}}  {row.target:>9.5f}  {row.achieved:>9.5f}  {row.samples:>13,}  "
                f"{row.epochs:>9.3f}  {row.deviation:>8.3f}"
            )
        bound = f" (Tijdeman's bound {self.bound:.3f})" if self.algorithm == "tijdeman" else ""
        lines.append(f"largest prefix deviation: {self.max_deviation:.3f} samples{bound}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data: its fields, rows as objects, and the largest deviation."""
        data = asdict(self)
        data["rows"] = [asdict(row) for row in self.rows]
        data["max_deviation"] = self.max_deviation
        return data


def blend_report(
    spec: BlendSpec,
    size: int,
    *,
    seq_length: int = 4096,
    algorithm: str = "tijdeman",
    size_of: Callable[[str], int] = store_tokens,
) -> list[BlendReport]:
    """One report per blend of ``spec`` (the shared one, or each split's), each of ``size`` samples.

    Epochs are samples × seq_length over the store's tokens (the whole store; a split reads a
    share of it, so its epochs are that much higher). A blend weighted by size uses token counts.
    """
    check_int("size", size, 1, what="the number of samples to blend")
    check_int("seq_length", seq_length)
    return [
        _report(name, blend.without_zero_weights(), int(size), int(seq_length), algorithm, size_of)
        for name, blend in _named_blends(spec)
    ]


def _named_blends(spec: BlendSpec) -> list[tuple[str, Blend]]:
    """The spec's blends with their names: the shared one, or each split's."""
    if spec.blend is not None:
        return [("blend", spec.blend)]
    return [(name, blend) for name, blend in zip(SPLIT_NAMES, spec.per_split or ()) if blend is not None]


def _weights(blend: Blend, size_of: Callable[[str], int]) -> np.ndarray:
    """The blend's weights, or its stores' token counts when it is weighted by size."""
    if blend.weights is not None:
        return np.array(blend.weights, dtype=np.float64)
    return np.array([size_of(prefix) for prefix in blend.prefixes], dtype=np.float64)


def _report(
    name: str, blend: Blend, size: int, seq_length: int, algorithm: str, size_of: Callable[[str], int]
) -> BlendReport:
    """The report of one blend."""
    if blend.schedule is not None:
        raise ConfigError(
            f"{name}: the blend follows a mixture schedule; this report measures constant weights "
            "only: use mixture_report (tokenport blend does) for target vs realized share over the run"
        )
    tokens = np.array([size_of(prefix) for prefix in blend.prefixes], dtype=np.float64)
    weights = np.array(blend.weights, dtype=np.float64) if blend.weights is not None else tokens
    dataset_index, _ = build_blending_indices(weights, size, algorithm=algorithm)
    counts = np.bincount(dataset_index, minlength=len(weights))
    deviations = prefix_deviations(dataset_index, weights)
    target = summable(weights) / summable(weights).sum()
    labels = dataset_labels(blend.prefixes, blend.names)
    rows = tuple(
        BlendRow(prefix, float(t), float(c) / size, int(c), float(c) * seq_length / max(k, 1.0), float(d), label)
        for prefix, t, c, k, d, label in zip(blend.prefixes, target, counts, tokens, deviations, labels)
    )
    n = len(weights)
    return BlendReport(name, size, seq_length, algorithm, rows, 1 - 1 / (2 * n - 2) if n > 1 else 0.0)


def blend_figure(
    spec: BlendSpec,
    size: int,
    *,
    algorithm: str = "tijdeman",
    size_of: Callable[[str], int] = store_tokens,
    points: int = 400,
) -> Any:
    """A matplotlib Figure: per blend of ``spec``, each dataset's achieved share ``C_i(t) / t`` (solid)
    against its target (dotted) from the first sample to ``size``, labelled by its spec name or else the
    shortest distinguishing suffix of its path (``dataset_labels``), the legend outside the axes on the right."""
    require("matplotlib", extra="plot", feature="blend --plot")
    from matplotlib.figure import Figure

    named = _named_blends(spec)
    figure = Figure(figsize=(10, 3.6 * len(named)), layout="constrained")
    for (name, blend), axis in zip(named, figure.subplots(len(named), 1, squeeze=False)[:, 0]):
        blend = blend.without_zero_weights()
        weights = _weights(blend, size_of)
        dataset_index, _ = build_blending_indices(weights, size, algorithm=algorithm)
        at = np.unique(np.geomspace(1, size, min(points, size)).astype(np.int64))
        for d, (label, share) in enumerate(zip(dataset_labels(blend.prefixes, blend.names), weights / weights.sum())):
            taken = np.cumsum(dataset_index == d)[at - 1]
            (line,) = axis.plot(at, taken / at, label=label)
            axis.axhline(share, color=line.get_color(), linestyle=":", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlim(1, max(size, 2))
        axis.set_title(f"{name}: achieved share (solid) vs target (dotted), {algorithm}")
        axis.set_xlabel("samples (log scale)")
        axis.set_ylabel("share")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return figure


def plot_blend(
    spec: BlendSpec,
    size: int,
    path: str | os.PathLike,
    *,
    algorithm: str = "tijdeman",
    size_of: Callable[[str], int] = store_tokens,
    points: int = 400,
) -> None:
    """Draw ``blend_figure(spec, size, ...)`` into ``path`` (PNG)."""
    blend_figure(spec, size, algorithm=algorithm, size_of=size_of, points=points).savefig(os.fspath(path), dpi=100)


def has_schedule(spec: BlendSpec) -> bool:
    """True when any blend of ``spec`` follows a mixture schedule."""
    return any(blend.schedule is not None for _, blend in _named_blends(spec))


def mixture_report(
    spec: BlendSpec, size: int, *, windows: int = 10, algorithm: str = "tijdeman"
) -> list[MixtureTrajectory]:
    """Per blend of ``spec`` (a schedule, or constant weights), target vs realized share per window of
    ``size`` samples."""
    reports = []
    for name, blend in _named_blends(spec):
        schedule = blend.schedule
        if schedule is None:
            weights = _weights(blend, store_tokens)
            schedule = MixtureSchedule.from_data([{"at": 0, "weights": weights.tolist()}])
        trajectory = scheduled_trajectory(
            schedule, size, labels=blend.prefixes, windows=windows, algorithm=algorithm, name=name
        )
        reports.append(replace(trajectory, names=blend.names or ()))
    return reports


def adaptive_report(state: Any, *, windows: int = 10, where: str = "state") -> MixtureTrajectory:
    """Target vs realized share per window of an adaptive blend, from a ``StatefulLoader.state_dict()``
    (its receipt's blend and its stored updates, read through the state's schema; ConfigError naming
    ``where`` and the field): the stream is rebuilt, no sample is read."""
    if not isinstance(state, Mapping):
        raise ConfigError(f"{where}: expected a StatefulLoader.state_dict(), got a {type(state).__name__}")
    typed = read_loader_state(state, where)
    if isinstance(typed.receipt, UnsetType) or isinstance(typed.mixture, UnsetType):
        raise ConfigError(
            f"{where}: expected a StatefulLoader.state_dict() over an AdaptiveBlend (with 'receipt' and 'mixture')"
        )
    described = dict(state["receipt"]["dataset"])
    if described["type"] != "AdaptiveBlend":
        raise ConfigError(f"{where}: the loader read a {described['type']}, not an AdaptiveBlend")
    described["updates"] = state["mixture"]["updates"]
    try:
        blend = AdaptiveBlend.from_description(described)
    except ConfigError as exc:
        raise ConfigError(f"{where}: the state's adaptive blend cannot be rebuilt: {exc}") from None
    labels = [_child_label(child, k) for k, child in enumerate(described.get("datasets", ()))] or None
    return adaptive_trajectory(blend, labels=labels, windows=windows, name="adaptive")


def _child_label(child: Any, k: int) -> str:
    """A readable name of a receipt's child node: its store's prefix, else its position."""
    store = child.get("store") if isinstance(child, dict) else None
    prefix = store.get("prefix") if isinstance(store, dict) else None
    return str(prefix) if prefix else f"dataset {k}"


def _read_state(path: str) -> Any:
    """The loader state in the JSON file ``path``, checked against its schema; ConfigError naming the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the loader state ({exc.strerror})") from None
    read_loader_state(data, path)  # UTF-8, JSON, every field typed
    return json.loads(data)


def blend_spec_or_state(spec: Sequence[str], state: str | None, size: int | None) -> tuple[BlendSpec | None, Any]:
    """What ``tokenport blend`` reports on: (a spec from its arguments, None) or (None, a loader state
    read from JSON); ConfigError unless exactly one is given, and a spec with ``size``."""
    if state is not None:
        if spec:
            raise ConfigError("blend: give a spec or --state, not both")
        return None, _read_state(state)
    if not spec:
        raise ConfigError("blend: give a spec (a file, or W1 STORE1 W2 STORE2 ...) or --state STATE.json")
    if size is None:
        raise ConfigError("blend: --size is missing: give the number of samples to blend")
    return spec_from_arguments(spec), None


def check_spec_tokenizers(spec: BlendSpec, *, allow_mixed_tokenizers: bool = False) -> None:
    """Every store ``spec`` names (all its blends) made with one tokenizer: the shared check of
    `indexed.same_tokenizer`, for what reports on a spec without building it (``tokenport blend``)."""

    spec = spec.with_parts()  # a prepare output directory: its parts

    def pairs() -> Any:
        blends = [spec.blend] if spec.blend is not None else list(spec.per_split or ())
        seen: set[str] = set()
        for blend in blends:
            for prefix in () if blend is None else blend.without_zero_weights().prefixes:
                if prefix not in seen:
                    seen.add(prefix)
                    with IndexedDataset(prefix, lazy=True) as store:  # reads the manifest, not the index
                        yield prefix, store_tokenizer(store)

    check_same_tokenizer(pairs(), allow_mixed_tokenizers=allow_mixed_tokenizers, what="blend")

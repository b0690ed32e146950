"""How well batching, packing and balancing would do on a dataset's sequence lengths.

``batching_report`` compares on the same lengths:

- padding ratio (padded slots not holding a token / all padded slots) of batches of
  ``batch_size`` consecutive items, each padded to its longest, in three orders: random
  (``numpy.random.default_rng(seed).permutation``), transformers' length grouping
  (``length_grouped_order`` with a ``torch.Generator`` seeded ``seed``: transformers' order
  index for index; None without torch) and tokenport's numpy-seeded grouping (``seed=seed``);
  the last batch may be short;
- best-fit decreasing packing at ``capacity`` (``split_long=True``): ``packing_metrics``;
- Karmarkar-Karp balance across ``data_parallel_size``: the random order is cut into global batches of
  ``data_parallel_size * batch_size`` items (the whole set if it has fewer items; a short last one is
  dropped) and each is split as ``balanced_micro_batches`` splits it (linear workload, group
  sizes free); the figure is ``balance_metrics``' max relative deviation of a rank's tokens from the
  mean, its mean and worst over all global batches, against round robin (rank r takes items
  r, r + data_parallel_size, ... of the global batch) and against the bound no split of whole items can
  beat (a batch whose longest item exceeds the mean rank load deviates by at least the excess).

``render_batching_report`` prints a
report as an aligned text table (for ``tokenport pack-report``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._checks import check_int, check_seed
from ..errors import ConfigError
from ..packing import karmarkar_karp_assignment, pack_best_fit_arrays, packing_metrics
from ..packing.bins import check_lengths
from ..rng.torch_randperm import seeded_randperm
from .length_grouping import grouped_order, length_grouped_order

__all__ = ["BatchingReport", "batching_report", "padding_ratio", "render_batching_report"]


class BatchingReport(dict[str, Any]):
    """The figures of `batching_report` by name (a dict, as before), with render() and to_json()."""

    def render(self) -> str:
        """The aligned text table of `render_batching_report`."""
        return render_batching_report(self)

    def to_json(self) -> dict[str, Any]:
        """The figures as a plain JSON-able dict."""
        return dict(self)


def padding_ratio(lengths: Sequence[int] | np.ndarray, order: np.ndarray, batch_size: int) -> float:
    """Share of padded slots that hold no token, batching ``order`` by ``batch_size`` and padding to the longest."""
    values = check_lengths(lengths)
    walked = values[np.asarray(order, dtype=np.int64)]
    if walked.size == 0:
        return 0.0
    starts = np.arange(0, walked.size, check_int("batch_size", batch_size))
    counts = np.diff(np.append(starts, walked.size))
    slots = int((np.maximum.reduceat(walked, starts) * counts).sum())
    return 1.0 - int(walked.sum()) / slots if slots else 0.0


def batching_report(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    *,
    capacity: int = 4096,
    data_parallel_size: int = 8,
    seed: int = 0,
) -> BatchingReport:
    """Padding of random vs length-grouped batches, BFD packing and KK balance on the same lengths (see module)."""
    values = check_lengths(lengths)
    batch_size = check_int("batch_size", batch_size)
    capacity = check_int("capacity", capacity)
    data_parallel_size = check_int(
        "data_parallel_size", data_parallel_size, 1, what="the number of data-parallel ranks"
    )
    check_seed("seed", seed)
    if values.size == 0:
        raise ConfigError("lengths is empty: a report needs at least one sequence")
    random_order = np.random.default_rng(seed).permutation(values.size)
    report = BatchingReport(
        {
            "num_sequences": int(values.size),
            "tokens": int(values.sum()),
            "mean_length": float(values.mean()),
            "max_length": int(values.max()),
            "batch_size": batch_size,
            "capacity": capacity,
            "data_parallel_size": data_parallel_size,
            "seed": int(seed),
            "random_padding_ratio": padding_ratio(values, random_order, batch_size),
            "hf_grouped_padding_ratio": _hf_padding_ratio(values, batch_size, int(seed)),
            "grouped_padding_ratio": padding_ratio(
                values, length_grouped_order(values, batch_size, seed=int(seed)), batch_size
            ),
        }
    )
    packing = packing_metrics(pack_best_fit_arrays(values, capacity, split_long=True), capacity)
    report.update({f"packing_{key}": value for key, value in packing.items() if key != "tokens"})
    report.update(_balance(values, random_order, data_parallel_size, batch_size))
    return report


def render_batching_report(report: dict[str, Any]) -> str:
    """The report as an aligned two-column text table: labels left, figures right."""
    hf = report["hf_grouped_padding_ratio"]
    rows: list[tuple[str, str]] = [
        ("sequences", f"{report['num_sequences']:,}"),
        ("tokens", f"{report['tokens']:,}"),
        ("mean / max length", f"{report['mean_length']:,.1f} / {report['max_length']:,}"),
        (f"padding, batches of {report['batch_size']}: random order", _percent(report["random_padding_ratio"])),
        ("  length grouped, transformers (torch)", "n/a (no torch)" if hf is None else _percent(hf)),
        ("  length grouped, tokenport (numpy)", _percent(report["grouped_padding_ratio"])),
        (f"packing, best fit decreasing at {report['capacity']:,}: bins", f"{report['packing_num_bins']:,}"),
        ("  efficiency", _percent(report["packing_efficiency"], 3)),
        ("  padding tokens", f"{report['packing_padding_tokens']:,}"),
        (
            f"balance, Karmarkar-Karp over {report['data_parallel_size']} ranks: global batches",
            f"{report['balance_global_batches']:,} x {report['balance_global_batch_size']:,}",
        ),
        ("  max deviation from the mean, first batch", _percent(report["balance_first"])),
        ("  max deviation, mean over batches", _percent(report["balance_mean"])),
        ("  max deviation, worst batch", _percent(report["balance_worst"])),
        ("  lower bound (longest item alone), mean", _percent(report["balance_bound_mean"])),
        ("  round robin, mean over batches", _percent(report["round_robin_mean"])),
    ]
    width = max(len(label) for label, _ in rows)
    value_width = max(len(value) for _, value in rows)
    return "\n".join(f"{label.ljust(width)}  {value.rjust(value_width)}" for label, value in rows)


# -- parts ------------------------------------------------------------------------------------------


def _hf_padding_ratio(values: np.ndarray, batch_size: int, seed: int) -> float | None:
    """Padding ratio of transformers' length grouping with a torch Generator seeded ``seed``: its
    permutation drawn by the MT19937 twin, so torch is not imported (seconds) unless it already is or
    the twin cannot draw it; None then without torch."""
    permutation = None if "torch" in sys.modules or values.size == 0 else seeded_randperm(values.size, seed)
    if permutation is not None:
        return padding_ratio(values, grouped_order(values, batch_size, None, permutation), batch_size)
    try:
        import torch
    except ImportError:
        return None
    generator = torch.Generator()
    generator.manual_seed(seed)
    return padding_ratio(values, length_grouped_order(values, batch_size, generator=generator), batch_size)


def _deviation(totals: np.ndarray) -> float:
    """Max relative deviation of group totals from their mean, as ``balance_metrics`` defines it."""
    mean = float(totals.mean())
    return float(np.abs(totals - mean).max() / mean) if mean > 0 else 0.0


def _balance(values: np.ndarray, order: np.ndarray, data_parallel_size: int, batch_size: int) -> dict[str, Any]:
    """KK and round-robin balance over the full global batches of ``order`` (the whole set if it is smaller)."""
    size = min(data_parallel_size * batch_size, values.size)
    batches = order[: values.size - values.size % size].reshape(-1, size)
    kk = np.empty(len(batches))
    for b, ids in enumerate(batches):
        walked = values[ids]  # what balanced_micro_batches does, without building the groups
        group = karmarkar_karp_assignment(walked.astype(np.float64), data_parallel_size)
        kk[b] = _deviation(np.bincount(group, weights=walked, minlength=data_parallel_size))
    # round robin: rank r takes columns r, r + data_parallel_size, ... of each global batch
    padded = np.zeros((len(batches), -(-size // data_parallel_size) * data_parallel_size), dtype=np.int64)
    padded[:, :size] = values[batches]
    totals = padded.reshape(len(batches), -1, data_parallel_size).sum(axis=1).astype(np.float64)
    means = totals.mean(axis=1, keepdims=True)
    walked = values[batches].astype(np.float64)
    rank_mean = walked.sum(axis=1) / data_parallel_size
    safe_mean = np.where(rank_mean > 0, rank_mean, 1.0)
    bound = np.where(rank_mean > 0, np.maximum(0.0, walked.max(axis=1) / safe_mean - 1), 0.0)
    rr = np.where(means[:, 0] > 0, np.abs(totals - means).max(axis=1) / np.where(means[:, 0] > 0, means[:, 0], 1), 0.0)
    return {
        "balance_global_batch_size": int(size),
        "balance_global_batches": int(len(batches)),
        "balance_first": float(kk[0]),
        "balance_mean": float(kk.mean()),
        "balance_worst": float(kk.max()),
        "balance_bound_mean": float(bound.mean()),
        "round_robin_mean": float(rr.mean()),
    }


def _percent(value: float, decimals: int = 2) -> str:
    """A ratio as a percentage with `decimals` decimals."""
    return f"{100 * value:.{decimals}f}%"

"""Online mixing: a controller's cost per update, and realizing an adaptive stream against a static blend.

    python benchmarks/bench_mixing.py            # the full run (about a minute)
    python benchmarks/bench_mixing.py --quick    # a small run

Sections:
  controller  one ``update(step, signals)`` of each built-in controller at n = 10, 10^2, 10^3
              datasets (signals with random losses, ADO with its default window of 32 points full), the
              best of N calls; goal < 1 ms per update. The baseline column is that 1 ms budget.
  realize     an AdaptiveBlend of 10^6 samples (quick 10^5), the weights changed every 1,000 samples
              (random Dirichlet(1) weights), at n = 10, 10^2, 10^3 datasets, realized in full, against
              ``build_blending_indices``
              (Tijdeman, tokenport's default) and megatron-core's C++ ``build_blending_indices`` of the
              same size over the last weights; goal: no slower than tokenport's static blend. The
              sides are timed in turns; the blend is rebuilt from its updates for every run.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from _harness import Row, best_of_each, print_goals, print_table, scratch_directory
from tokenport.blend import (
    AdaptiveBlend,
    ADOController,
    DoReMiController,
    MixtureSchedule,
    MixtureSignals,
    ScheduleController,
    ValidationController,
    build_blending_indices,
)

DATASETS = (10, 100, 1000)
BUDGET = 1e-3  # seconds per update


def megatron_build(weights: np.ndarray, size: int) -> None:
    """megatron-core's static blend of ``size`` samples (its C++ helper, int16/int64 outputs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import helpers_cpp
    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    helpers_cpp.build_blending_indices(
        dataset_index, dataset_sample_index, (weights / weights.sum()).tolist(), len(weights), size, False
    )


def controllers(n: int, rng: np.random.Generator) -> dict[str, object]:
    """Each built-in controller over ``n`` datasets, ADO warmed up to a full window."""
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1.0] * n, "ramp_to": [2.0] * n, "until": 10**9}])
    ado = ADOController(n)  # its default window, 32 points per domain
    for step in range(64):
        ado.update(step, MixtureSignals(rng.random(n) * 1000 / (step + 1), np.full(n, 1000)))
    return {
        "schedule": ScheduleController(schedule, 1024),
        "doremi": DoReMiController(rng.random(n)),
        "validation": ValidationController(rng.random(n)),
        "ado": ado,
    }


def controller_rows(repeat: int) -> list[Row]:
    rows = []
    rng = np.random.default_rng(0)
    for n in DATASETS:
        signals = MixtureSignals(rng.random(n) * 1000, np.full(n, 1000), rng.random(n) + 1)
        for name, controller in controllers(n, rng).items():
            steps = iter(range(100, 10**9))
            seconds = best_of_each([lambda c=controller: c.update(next(steps), signals)], repeat)[0]
            rows.append(
                Row("controller", f"{name} n={n}", "s/update", seconds, BUDGET, "1 ms budget", 1.0, "<1 ms", True)
            )
    return rows


def realize_rows(size: int, n: int, repeat: int) -> list[Row]:
    rng = np.random.default_rng(n)
    initial = rng.dirichlet(np.ones(n))
    probe = AdaptiveBlend([range(size)] * n, initial, num_samples=size)
    for start in range(1000, size, 1000):
        probe.set_weights(rng.dirichlet(np.ones(n)), start)
    updates = probe.updates
    last = np.asarray(updates[-1][1])
    children = [range(size)] * n

    def adaptive() -> None:
        AdaptiveBlend(children, initial, num_samples=size, updates=updates).realize(size)

    def static() -> None:
        build_blending_indices(last, size)

    def megatron() -> None:
        megatron_build(last, size)

    adaptive(), static(), megatron()  # compile / load the kernels
    ours, theirs, peer = best_of_each([adaptive, static, megatron], repeat)
    realized = AdaptiveBlend(children, initial, num_samples=size, updates=updates)
    deviation = np.abs(realized.ideal_counts(size) - realized.samples_per_dataset(size)).max()
    print(f"realize n={n}: max |I_i - C_i| at the end {deviation:.3f} (bound {(n - 1) * (1 - 1 / n):.3f})")
    case = f"{size:,} samples, n={n}, update every 1000"
    return [
        Row("realize", case, "s", ours, theirs, "static blend", 1.0, ">=1x (no slower)", True),
        Row("realize", case, "s", ours, peer, "megatron static", None, None, True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args()
    size = 10**5 if args.quick else 10**6
    repeat = 3 if args.quick else 7
    with scratch_directory(None, "bench_mixing_", args.quick):
        started = time.perf_counter()
        rows = controller_rows(repeat * 5)
        for n in DATASETS:
            rows += realize_rows(size, n, repeat)
        print_table(rows)
        print_goals(rows)
        print(f"took {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()

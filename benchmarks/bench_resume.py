"""Resume cost vs position: tokenport's StatefulLoader against HF Trainer's skip and torchdata's StatefulDataLoader.

What is timed, for every side: from "restore the checkpoint" to "the first batch after it is in
hand", the loader objects built beforehand (untimed), fresh for every run. All sides read the
same tokenport GPTDataset (seq_length 2048, micro batch 8, one rank) over a synthetic store,
with the store in the page cache. Every figure is the best of N runs timed with
time.perf_counter, the sides timed in turns (A B C A B C ...).

    python benchmarks/bench_resume.py            # dataset of 10^7 samples (about 2 minutes)
    python benchmarks/bench_resume.py --quick    # dataset of 10^6 samples (well under a minute)

Sides:
  tokenport   StatefulLoader(dataset, RandomSampler(len(dataset), ...)).load_state_dict(state at
              position P), then next(iter(loader)). RandomSampler resumes from the epoch and the
              offset (arithmetic, then the epoch's permutation: a cost in the dataset size, not in
              P). Also PretrainingSampler (sequential), over a view that repeats the dataset
              (sample i = dataset[i % len]) so that positions past one epoch exist.
  HF Trainer  what Trainer._inner_training_loop / _run_epoch do on resume_from_checkpoint, on
              the Trainer's own train dataloader (trainer.get_train_dataloader(): a DataLoader
              with its RandomSampler, prepared by accelerate): epochs_trained = global_step //
              steps_per_epoch, then accelerate's skip_first_batches(dataloader, global_step %
              steps_per_epoch), set_epoch(epochs_trained), the first batch. No model is trained.
              Once with the Trainer's default RandomSampler, once with train_sampling_strategy=
              "sequential" (a SequentialSampler: the peer of PretrainingSampler).
  torchdata   StatefulDataLoader(shuffle=True) state at P, load_state_dict into a fresh loader,
              next(iter(loader)). The state at P is constructed, not produced by iterating P
              samples (itself O(P)): the state after one batch with its counters set to P's
              (samples_yielded, yielded, _num_yielded, ...). The script checks first that this
              equals the state a real iteration produces, at a small position.
The "flat" rows time tokenport alone at every position, in turns, best of 5, against P=8.
Before timing, every side is checked to hand the batch an uninterrupted run hands at that point.

The peers skip only within the current epoch (P mod len(dataset) samples), so they are measured
at positions inside the first epoch (the default dataset is sized to 10^7 samples, like a
Megatron-style dataset sized to the run); tokenport also at 10^9 (~100 epochs). One position is
measured again with 2 workers on every side (worker start-up included, the same for all).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import tokenport as tp
from _harness import Row, best_of_each, human, lognormal_lengths, print_table, scratch_directory

EOD = 2
SEQ_LENGTH = 2048
MICRO_BATCH = 8
DOCUMENTS = 20_000  # ~2*10^7 tokens; the GPTDataset repeats the store as often as the sample count needs
MEAN_LENGTH = 1000
VOCAB = 50_000
POSITIONS = (10, 10**3, 10**5, 10**7, 10**9)
CHECK_BATCHES = 37  # position (in batches) of the correctness checks
PEERS = ("torchdata", "HF skip", "HF skip, sequential")
FLAT_REPEAT = 5  # runs per position of tokenport's own flatness rows (cheap: no peer)


def write_store(prefix: str, seed: int) -> tp.IndexedDataset:
    """A uint16 store of DOCUMENTS random documents (lognormal lengths), each ending in EOD."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, DOCUMENTS, MEAN_LENGTH, 1.0)
    tokens = rng.integers(EOD + 1, VOCAB, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    return tp.IndexedDataset(prefix)


class Repeated:
    """The dataset repeated end to end (sample i is dataset[i % len(dataset)]), `length` samples long:
    gives PretrainingSampler, which does not cycle, positions past one epoch."""

    def __init__(self, dataset: Any, length: int) -> None:
        self.dataset = dataset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> Any:
        return self.dataset[idx % len(self.dataset)]


def same_batch(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two collated batches hold the same tokens."""
    return bool(torch.equal(torch.as_tensor(a["tokens"]), torch.as_tensor(b["tokens"])))


# -- tokenport --------------------------------------------------------------------------------------


class Tokenport:
    """tokenport's StatefulLoader with RandomSampler or PretrainingSampler, resumed from a state."""

    def __init__(self, dataset: Any, sequential: bool, seed: int, workers: int, view_length: int) -> None:
        self.view = Repeated(dataset, view_length) if sequential else dataset
        self.sequential, self.seed, self.workers = sequential, seed, workers
        self.loader: Any = None

    def fresh(self, consumed: int = 0) -> Any:
        if self.sequential:
            sampler: Any = tp.PretrainingSampler(len(self.view), consumed, MICRO_BATCH, 0, 1)
        else:
            sampler = tp.RandomSampler(len(self.view), consumed, MICRO_BATCH, 0, 1, seed=self.seed)
        return tp.StatefulLoader(self.view, sampler, num_workers=self.workers)

    def state_at(self, position: int) -> dict[str, Any]:
        return self.fresh(position).state_dict()

    def setup(self) -> None:
        self.loader = self.fresh()

    def resume(self, state: dict[str, Any]) -> Any:
        self.loader.load_state_dict(state)
        return next(iter(self.loader))

    def straight(self, batches: int) -> Any:
        """The batch an uninterrupted run hands after `batches` batches."""
        iterator = iter(self.fresh())
        for _ in range(batches):
            next(iterator)
        return next(iterator)


# -- HF Trainer -------------------------------------------------------------------------------------


class HFTrainer:
    """The HF Trainer's resume path on its own train dataloader (no model is trained)."""

    def __init__(self, dataset: Any, sequential: bool, seed: int, workers: int, directory: str) -> None:
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            train_sampling_strategy="sequential" if sequential else "random",
            output_dir=os.path.join(directory, "hf"),
            per_device_train_batch_size=MICRO_BATCH,
            dataloader_num_workers=workers,
            remove_unused_columns=False,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            seed=seed,
        )
        self.seed = seed
        self.trainer = Trainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=dataset)
        self.dataloader: Any = None

    def setup(self) -> None:
        # The Trainer calls set_seed(args.seed) before building its dataloader; the RandomSampler
        # draws its permutation from torch's global generator when iterated.
        self.dataloader = self.trainer.get_train_dataloader()
        torch.manual_seed(self.seed)

    def resume(self, position: int) -> tuple[Any, int]:
        """Trainer._init_training_state and _run_epoch's resume branch, to the first batch."""
        from accelerate import skip_first_batches

        dataloader = self.dataloader
        global_step = position // MICRO_BATCH  # one process, no gradient accumulation
        epochs_trained, steps_in_epoch = divmod(global_step, len(dataloader))
        if steps_in_epoch > 0:
            dataloader = skip_first_batches(dataloader, steps_in_epoch)
        dataloader.set_epoch(epochs_trained)
        return next(iter(dataloader)), steps_in_epoch

    def straight(self, batches: int) -> Any:
        self.setup()
        self.dataloader.set_epoch(0)
        iterator = iter(self.dataloader)
        for _ in range(batches):
            next(iterator)
        return next(iterator)


# -- torchdata --------------------------------------------------------------------------------------

_BATCH_COUNTERS = ("_num_yielded", "_sampler_iter_yielded", "_snapshot_step")
_SAMPLE_COUNTERS = ("samples_yielded", "yielded")


def advanced_state(state: Any, batches: int, workers: int) -> Any:
    """A StatefulDataLoader state taken after one batch, with its counters set to `batches` batches."""
    if isinstance(state, dict):
        out = {}
        for key, value in state.items():
            if key in _BATCH_COUNTERS:
                out[key] = batches
            elif key in _SAMPLE_COUNTERS:
                out[key] = batches * MICRO_BATCH
            elif key == "_last_yielded_worker_id":
                out[key] = (batches - 1) % workers
            else:
                out[key] = advanced_state(value, batches, workers)
        return out
    return state


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return bool(a == b)


class TorchData:
    """torchdata's StatefulDataLoader (shuffle=True, its stateful RandomSampler), resumed from a state."""

    def __init__(self, dataset: Any, seed: int, workers: int) -> None:
        self.dataset, self.seed, self.workers = dataset, seed, workers
        self.loader: Any = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = self.fresh()
            iterator = iter(first)
            next(iterator)
            self.one_batch = first.state_dict()
            del iterator

    def fresh(self) -> Any:
        from torchdata.stateful_dataloader import StatefulDataLoader

        generator = torch.Generator().manual_seed(self.seed)
        return StatefulDataLoader(
            self.dataset, batch_size=MICRO_BATCH, shuffle=True, generator=generator, num_workers=self.workers
        )

    def state_at(self, position: int) -> Any:
        return advanced_state(self.one_batch, position // MICRO_BATCH, max(1, self.workers))

    def setup(self) -> None:
        self.loader = self.fresh()

    def resume(self, state: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.loader.load_state_dict(state)
            return next(iter(self.loader))

    def check_state(self, batches: int) -> None:
        """Raise SystemExit unless the constructed state equals the one real iteration produces."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = self.fresh()
            iterator = iter(loader)
            for _ in range(batches):
                next(iterator)
            real = loader.state_dict()
            del iterator
        if not same_state(real, self.state_at(batches * MICRO_BATCH)):
            raise SystemExit(f"torchdata: the constructed state differs from the real one after {batches} batches")

    def straight(self, batches: int) -> Any:
        iterator = iter(self.fresh())
        for _ in range(batches):
            next(iterator)
        return next(iterator)


# -- the run ----------------------------------------------------------------------------------------


def check_all(sides: dict[str, Any]) -> None:
    """Every side hands, after resuming at CHECK_BATCHES batches, what an uninterrupted run hands there."""
    position = CHECK_BATCHES * MICRO_BATCH
    for name, side in sides.items():
        side.setup()
        if isinstance(side, HFTrainer):
            resumed = side.resume(position)[0]
        else:
            resumed = side.resume(side.state_at(position))
        if not same_batch(resumed, side.straight(CHECK_BATCHES)):
            raise SystemExit(f"{name}: the batch after resuming differs from an uninterrupted run's")


def timed(side: Any, position: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """(the timed resume, its untimed setup) of a side at `position`: the state is made beforehand."""
    if isinstance(side, HFTrainer):
        return (lambda: side.resume(position)), side.setup
    state = side.state_at(position)
    return (lambda: side.resume(state)), side.setup


def extrapolate(peer_times: dict[str, list[tuple[int, float]]], target: int) -> None:
    """Print each peer's cost extended linearly from its first and last measured positions to `target`
    (their skip is linear in the position within the epoch: a dataset sized to the run)."""
    for name, points in peer_times.items():
        (p0, t0), (p1, t1) = points[0], points[-1]
        slope = (t1 - t0) / (p1 - p0)
        print(
            f"  {name}: {slope * 1e9:,.1f} ns per skipped sample (P={p0:,} to {p1:,}); "
            f"at P={target:,} inside one epoch: ~{human(t1 + slope * (target - p1), 's')} (extrapolated)"
        )


def flat_rows(sides: dict[str, Any], positions: list[int], repeat: int) -> list[Row]:
    """tokenport's resume at every position against its resume at the first, the positions timed in
    turns (P1 P2 ... P1 P2 ...) so that load from elsewhere hits them alike; goal: within 2x."""
    rows = []
    for name in ("RandomSampler", "PretrainingSampler"):
        fns, setups = zip(*(timed(sides[name], position) for position in positions))
        times = best_of_each(list(fns), repeat, list(setups))
        first = f"tokenport at P={positions[0]:,}"
        for position, t in zip(positions, times):
            case = f"P={position:,}, workers 0"
            rows.append(Row(f"flat: {name}", case, "s", t, times[0], first, 0.5, "<=2x", lower_is_better=True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a dataset of 10^6 samples instead of 10^7")
    parser.add_argument("--samples", type=int, default=None, help="GPTDataset samples (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per side and position")
    parser.add_argument("--workers-position", type=int, default=10**5, help="the position measured with 2 workers")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*set_vital")
    num_samples = args.samples or (10**6 if args.quick else 10**7)

    with scratch_directory(args.dir, "tp_bench_resume_", args.quick) as directory:
        t0 = time.perf_counter()
        store = write_store(os.path.join(directory, "store"), args.seed)
        config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
        dataset = tp.GPTDataset(store, np.arange(len(store)), num_samples, config, args.seed)
        length = len(dataset)
        positions = [p - p % MICRO_BATCH for p in POSITIONS]
        print(
            f"store of {len(store):,} documents, GPTDataset of {length:,} samples at seq_length {SEQ_LENGTH}, "
            f"micro batch {MICRO_BATCH} (built in {time.perf_counter() - t0:.1f} s); positions {positions}"
        )
        permutation = best_of_each(
            [lambda: tp.RandomSampler(length, 0, MICRO_BATCH, 0, 1, seed=args.seed).epoch_batches(0)], args.repeat
        )[0]
        print(
            f"RandomSampler's epoch order alone (what a straight run pays at every epoch start): "
            f"{human(permutation, 's')} for {length:,} samples"
        )
        rows: list[Row] = []
        for workers in (0, 2):
            at = positions if workers == 0 else [args.workers_position - args.workers_position % MICRO_BATCH]
            sides: dict[str, Any] = {
                "RandomSampler": Tokenport(dataset, False, args.seed, workers, 0),
                "PretrainingSampler": Tokenport(dataset, True, args.seed, workers, max(at) + 1000 * MICRO_BATCH),
                "torchdata": TorchData(dataset, args.seed, workers),
                "HF skip": HFTrainer(dataset, False, args.seed, workers, directory),
                "HF skip, sequential": HFTrainer(dataset, True, args.seed, workers, directory),
            }
            if workers == 0:
                sides["torchdata"].check_state(CHECK_BATCHES)
                check_all(sides)
                print(f"checked: every side resumes at {CHECK_BATCHES} batches with an uninterrupted run's batch")
            peer_times: dict[str, list[tuple[int, float]]] = {name: [] for name in PEERS}
            for position in at:
                measured = [name for name in sides if name not in PEERS or position < length]
                fns, setups = zip(*(timed(sides[name], position) for name in measured))
                t = dict(zip(measured, best_of_each(list(fns), args.repeat, list(setups))))
                case = f"P={position:,}, workers {workers}"
                print(f"  {case}: " + ", ".join(f"{name} {human(t[name], 's')}" for name in measured))
                for name in PEERS:
                    if name in t:
                        peer_times[name].append((position, t[name]))
                if "HF skip" in t:
                    sides["HF skip"].setup()
                    skipped = sides["HF skip"].resume(position)[1]
                    for ours, peer, shown in (
                        ("RandomSampler", "HF skip", f"HF skip ({skipped:,} batches)"),
                        ("RandomSampler", "torchdata", "torchdata StatefulDataLoader"),
                        ("PretrainingSampler", "HF skip, sequential", "HF skip, SequentialSampler"),
                    ):
                        rows.append(Row(f"resume, {ours}", case, "s", t[ours], t[peer], shown, lower_is_better=True))
            if workers == 0:
                extrapolate(peer_times, positions[-1])
                rows += flat_rows(sides, positions, max(FLAT_REPEAT, args.repeat))
        print_table(rows)


if __name__ == "__main__":
    main()

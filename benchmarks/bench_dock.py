"""tokenport.dock.Dock vs a TransferDock-style store (MindSpeed-RL's design), in one process.

Workload (one GRPO step): 128 prompts x 8 samples per prompt = 1024 rows, 6 columns:
  prompts       int32, ragged, 64..1024 tokens (uniform), one per prompt, repeated for its 8 samples
  responses     int32, ragged, lognormal lengths (mean ~1000, log-space sigma 1.0) cut to 1..4096
  old_log_prob  float32, ragged, the responses' lengths
  ref_log_prob  float32, ragged, the responses' lengths
  advantages    float32, ragged, the responses' lengths
  rewards       float32, one value per row
Payload = the bytes of all values (no padding), about 18 MB for the full run. The producer hands
its rows in 8 chunks of 128 rows, each chunk a padded 2-D array per ragged column plus the
lengths (what rollout produces); the same chunks go to both sides. tokenport gets them as
`Padded` (numpy); the baseline as torch tensors over the same memory (torch.from_numpy) and
un-pads them row by row, as TransferDock's producers do. The consumer ("train") takes all 6
columns in batches of 64 rows; tokenport returns `Packed` columns (flat values + lengths), the
baseline padded tensors (pad_sequence, as TransferDock does).

The baseline is benchmarks/transfer_dock_baseline.py, a re-implementation of TransferDock's
design (list of per-row tensors per column, int32 status tensors, 0.1 s polling, random
sampling with torch.multinomial, pad on get). Before timing, both sides' batches are checked
row by row against the source data (every row served once, contents and padding exact).
Every figure is the best of N runs timed with time.perf_counter (pipelined: the median), the
sides timed in turns (A B A B ...); a fresh dock per run, built untimed.

    python benchmarks/bench_dock.py            # 128 prompts (1024 rows), best of 5
    python benchmarks/bench_dock.py --quick    # 32 prompts (256 rows), best of 2

Rows:
  put+get            single thread: put the 8 chunks, then get everything in batches of 64;
                     rate = (payload put + payload gotten) / time. Goals: tokenport >= 1 GB/s
                     and >= 10x the baseline.
  put+get, sequential  the same with the dock's default sampler (lowest ready rows first) instead
                     of RandomRows (random rows, as the baseline draws them), no goal.
  put+get, padded out  the same with tokenport's consumer calling .padded() on each ragged column
                     (the baseline's output shape), no goal.
  put / get alone    the two halves of the put+get run timed apart (get: on a dock filled untimed),
                     rate = payload / time, no goal.
  pipelined          a producer thread puts the 8 chunks (sleeping --produce-ms before each, to
                     stand for generation; 0 and the given value) while a consumer thread gets
                     batches of 64 as soon as they are ready: wall time until both are done,
                     and the drain time (from the last put to the last get). Medians of N runs
                     (5, full run 9), not best-of: the baseline's wait depends on where its 0.1 s
                     poll falls. No goal; here the baseline's polling shows.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.dock import Column, Dock, Packed, Padded, RandomRows
from transfer_dock_baseline import TransferDockBaseline

SAMPLES_PER_PROMPT = 8
CHUNKS = 8
BATCH = 64
MAX_RESPONSE = 4096
RESPONSE_MEAN = 1000
RESPONSE_SIGMA = 1.0
PARTITION = "step-0"
CONSUMER = "train"
RAGGED = ("prompts", "responses", "old_log_prob", "ref_log_prob", "advantages")
COLUMNS = ("prompts", "responses", "old_log_prob", "ref_log_prob", "rewards", "advantages")
DTYPES = {
    "prompts": np.int32,
    "responses": np.int32,
    "old_log_prob": np.float32,
    "ref_log_prob": np.float32,
    "rewards": np.float32,
    "advantages": np.float32,
}


# -- data ------------------------------------------------------------------------------------------


def make_rows(rng: np.random.Generator, prompts: int) -> dict[str, list[np.ndarray] | np.ndarray]:
    """The source data: per ragged column a list of 1-D arrays (one per row), rewards an array."""
    n = prompts * SAMPLES_PER_PROMPT
    prompt_lengths = rng.integers(64, 1025, prompts)
    prompt_rows = [rng.integers(0, 150_000, int(k), dtype=np.int32) for k in prompt_lengths]
    lengths = np.minimum(lognormal_lengths(rng, n, RESPONSE_MEAN, RESPONSE_SIGMA), MAX_RESPONSE)
    data: dict[str, list[np.ndarray] | np.ndarray] = {
        "prompts": [prompt_rows[i // SAMPLES_PER_PROMPT] for i in range(n)],
        "responses": [rng.integers(0, 150_000, int(k), dtype=np.int32) for k in lengths],
    }
    for name in ("old_log_prob", "ref_log_prob", "advantages"):
        data[name] = [rng.standard_normal(int(k), dtype=np.float32) for k in lengths]
    data["rewards"] = rng.standard_normal(n, dtype=np.float32)
    return data


def payload_bytes(data) -> int:
    return sum(sum(r.nbytes for r in data[c]) if c in RAGGED else data[c].nbytes for c in COLUMNS)


def make_chunks(data, n: int) -> list[tuple[np.ndarray, dict]]:
    """The producer's 8 chunks: (row ids, {column: (padded 2-D array, int64 lengths) or 1-D array})."""
    chunks = []
    for rows in np.array_split(np.arange(n, dtype=np.int64), CHUNKS):
        cols = {}
        for name in COLUMNS:
            if name in RAGGED:
                pieces = [data[name][i] for i in rows]
                lengths = np.array([p.size for p in pieces], dtype=np.int64)
                padded = np.zeros((rows.size, lengths.max()), dtype=DTYPES[name])
                for k, p in enumerate(pieces):
                    padded[k, : p.size] = p
                cols[name] = (padded, lengths)
            else:
                cols[name] = np.ascontiguousarray(data[name][rows])
        chunks.append((rows, cols))
    return chunks


def tokenport_chunks(chunks):
    return [
        (rows, {name: Padded(values=v[0], lengths=v[1]) if isinstance(v, tuple) else v for name, v in cols.items()})
        for rows, cols in chunks
    ]


def baseline_chunks(chunks):
    def conv(v):
        if isinstance(v, tuple):
            return torch.from_numpy(v[0]), torch.from_numpy(v[1])
        return torch.from_numpy(v)

    return [(rows.tolist(), {name: conv(v) for name, v in cols.items()}) for rows, cols in chunks]


# -- the two sides ---------------------------------------------------------------------------------


def new_dock(prompts: int) -> Dock:
    dock = Dock(
        columns=[Column(name, DTYPES[name], ragged=name in RAGGED) for name in COLUMNS],
        consumers=[CONSUMER],
        n_samples_per_prompt=SAMPLES_PER_PROMPT,
    )
    dock.add_partition(PARTITION, num_prompts=prompts)
    return dock


def new_baseline(prompts: int) -> TransferDockBaseline:
    return TransferDockBaseline(COLUMNS, [CONSUMER], prompts, SAMPLES_PER_PROMPT)


def tp_put(dock: Dock, chunks) -> None:
    for rows, cols in chunks:
        dock.put(PARTITION, cols, rows=rows)


def tp_get(dock: Dock, padded: bool = False, sink: list | None = None, random: bool = True) -> int:
    """Get every row in batches of BATCH (rows drawn at random, as the baseline does, unless
    random=False: the dock's default sequential sampler); returns the number of rows gotten."""
    sampler = RandomRows(seed=0) if random else None
    got = 0
    while (
        batch := dock.get(CONSUMER, list(COLUMNS), count=BATCH, partition=PARTITION, timeout=10.0, sampler=sampler)
    ) is not None:
        if padded:
            for name in RAGGED:
                batch[name].padded(pad_value=0)
        got += batch.rows.size
        if sink is not None:
            sink.append(batch)
    return got


def bl_put(td: TransferDockBaseline, chunks) -> None:
    for rows, cols in chunks:
        td.put_padded(cols, rows)


BASELINE_POLLS: list[int] = []  # per baseline get-all, its 0.1 s sleeps (0 expected when single-threaded)


def bl_get(td: TransferDockBaseline, n: int, sink: list | None = None) -> int:
    got = 0
    for _ in range(n // BATCH):
        batch, indexes = td.get(CONSUMER, list(COLUMNS), BATCH)
        got += len(indexes)
        if sink is not None:
            sink.append((batch, indexes))
    BASELINE_POLLS.append(td.polls)
    return got


# -- checks ----------------------------------------------------------------------------------------


def fail(message: str) -> None:
    raise SystemExit(f"check failed: {message}")


def check_rows_once(side: str, ids: list[np.ndarray], n: int) -> None:
    """Every row id 0..n-1 served exactly once."""
    ids = np.concatenate(ids)
    if ids.size != n or not np.array_equal(np.sort(ids), np.arange(n)):
        fail(f"{side}: the rows served are not each row once")


def check_tokenport_batches(side: str, batches: list, data, n: int) -> None:
    """tokenport's batches (Dock or RayDock): each row once, every column equal to the source."""
    check_rows_once(side, [b.rows for b in batches], n)
    for b_no, batch in enumerate(batches):
        rows = np.asarray(batch.rows)
        for name in COLUMNS:
            col = batch[name]
            if name not in RAGGED:
                if not np.array_equal(np.asarray(col), data[name][rows]):
                    fail(f"{side} batch {b_no}: {name} differs")
                continue
            if not isinstance(col, Packed):
                fail(f"{side} batch {b_no}: {name} is a {type(col).__name__}, not Packed")
            got = col.to_list()
            if len(got) != rows.size or any(not np.array_equal(g, data[name][r]) for g, r in zip(got, rows)):
                fail(f"{side} batch {b_no}: {name} rows differ")


def check(data, chunks_tp, chunks_bl, prompts: int) -> None:
    """Both sides, one full put + get: every row once, each row's contents and padding exact."""
    n = prompts * SAMPLES_PER_PROMPT
    dock, td = new_dock(prompts), new_baseline(prompts)
    tp_put(dock, chunks_tp)
    bl_put(td, chunks_bl)
    tp_batches: list = []
    bl_batches: list = []
    tp_get(dock, sink=tp_batches)
    bl_get(td, n, sink=bl_batches)
    if not td.all_consumed(CONSUMER):
        fail("baseline: not every row consumed")
    if not dock.all_consumed(CONSUMER, PARTITION):
        fail("tokenport: not every row consumed")
    check_rows_once("baseline", [np.asarray(ix) for _, ix in bl_batches], n)
    check_tokenport_batches("tokenport", tp_batches, data, n)
    for name in RAGGED:  # the padded form equals what pad_sequence makes of the same rows
        rows = tp_batches[0].rows
        want = pad_sequence([torch.from_numpy(data[name][r]) for r in rows], batch_first=True).numpy()
        if not np.array_equal(np.asarray(tp_batches[0][name].padded(pad_value=0).values), want):
            fail(f"tokenport batch 0: {name}.padded() differs from pad_sequence")
    for b_no, (batch, indexes) in enumerate(bl_batches):
        for name in COLUMNS:
            t = batch[name].numpy()
            if name not in RAGGED:
                if not np.array_equal(t[:, 0], data[name][indexes]):
                    fail(f"baseline batch {b_no}: {name} differs")
                continue
            width = max(data[name][r].size for r in indexes)
            if t.shape != (len(indexes), width):
                fail(f"baseline batch {b_no}: {name} has shape {t.shape}")
            for k, r in enumerate(indexes):
                src = data[name][r]
                if not np.array_equal(t[k, : src.size], src) or np.any(t[k, src.size :] != 0):
                    fail(f"baseline batch {b_no}: {name} row {r} differs")
    print(
        f"  checked: both sides serve each of the {n:,} rows once, all {len(COLUMNS)} columns exact "
        f"({len(tp_batches)} tokenport batches, {len(bl_batches)} baseline batches)",
        flush=True,
    )


# -- pipelined -------------------------------------------------------------------------------------


def pipelined(put_chunk, get_all, chunks, produce_s: float) -> tuple[float, float]:
    """Producer and consumer threads; returns (wall time, drain time after the last put)."""
    marks: dict[str, float] = {}

    def producer() -> None:
        for chunk in chunks:
            if produce_s:
                time.sleep(produce_s)
            put_chunk(chunk)
        marks["put"] = time.perf_counter()

    def consumer() -> None:
        get_all()
        marks["got"] = time.perf_counter()

    threads = [threading.Thread(target=consumer), threading.Thread(target=producer)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, max(marks["got"] - marks["put"], 1e-6)


def bench_pipelined(rows: list[Row], chunks_tp, chunks_bl, prompts: int, args) -> None:
    n = prompts * SAMPLES_PER_PROMPT
    for produce_ms in sorted({0.0, args.produce_ms}):
        results: dict[str, list[tuple[float, float]]] = {"tp": [], "bl": []}
        state: dict = {}

        def setup_tp():
            state["dock"] = new_dock(prompts)

        def setup_bl():
            state["td"] = new_baseline(prompts)

        def run_tp():
            dock = state["dock"]
            results["tp"].append(
                pipelined(
                    lambda c: dock.put(PARTITION, c[1], rows=c[0]), lambda: tp_get(dock), chunks_tp, produce_ms / 1e3
                )
            )

        def run_bl():
            td = state["td"]
            results["bl"].append(
                pipelined(lambda c: td.put_padded(c[1], c[0]), lambda: bl_get(td, n), chunks_bl, produce_ms / 1e3)
            )

        best_of_each([run_tp, run_bl], args.pipeline_repeat, setups=[setup_tp, setup_bl])
        # medians, not minima: the baseline's wait depends on where its 0.1 s poll falls, and the
        # best of N would report its luckiest phase
        tp_wall, tp_drain = np.median(results["tp"], axis=0)
        bl_wall, bl_drain = np.median(results["bl"], axis=0)
        case = f"{n:,} rows, {CHUNKS} chunks, {produce_ms:g} ms/chunk"
        name = "TransferDock-style"
        rows.append(Row("pipelined wall (median)", case, "s", tp_wall, bl_wall, name, lower_is_better=True))
        rows.append(Row("pipelined drain (median)", case, "s", tp_drain, bl_drain, name, lower_is_better=True))


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 prompts (256 rows) instead of 128, fewer repeats")
    parser.add_argument("--prompts", type=int, default=None, help="number of prompts (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per side (default 5, quick 2)")
    parser.add_argument(
        "--produce-ms",
        type=float,
        default=20.0,
        help="pipelined run: producer sleep before each chunk (also run with 0)",
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (unused: all in memory)")
    args = parser.parse_args(argv)
    prompts = args.prompts or (32 if args.quick else 128)
    args.repeat = args.repeat or (2 if args.quick else 5)
    args.pipeline_repeat = max(args.repeat, 5 if args.quick else 9)
    n = prompts * SAMPLES_PER_PROMPT
    if n % BATCH or n % CHUNKS:
        raise SystemExit(f"{n} rows must divide into batches of {BATCH} and {CHUNKS} chunks")

    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_dock_", args.quick):
        print(f"  torch {torch.__version__}, {torch.get_num_threads()} torch threads", flush=True)
        data = make_rows(np.random.default_rng(args.seed), prompts)
        payload = payload_bytes(data)
        lengths = np.array([r.size for r in data["responses"]])
        print(
            f"  {n:,} rows x {len(COLUMNS)} columns, payload {payload / 1e6:,.1f} MB; responses mean "
            f"{lengths.mean():,.0f}, max {lengths.max():,} tokens; {CHUNKS} chunks, batches of {BATCH}",
            flush=True,
        )
        chunks = make_chunks(data, n)
        chunks_tp, chunks_bl = tokenport_chunks(chunks), baseline_chunks(chunks)
        check(data, chunks_tp, chunks_bl, prompts)

        state: dict = {}
        name = "TransferDock-style"
        case = f"{n:,} rows, {len(COLUMNS)} cols, {payload / 1e6:,.1f} MB"

        def fresh_tp():
            state["dock"] = new_dock(prompts)

        def fresh_bl():
            state["td"] = new_baseline(prompts)

        def filled_tp():
            fresh_tp()
            tp_put(state["dock"], chunks_tp)

        def filled_bl():
            fresh_bl()
            bl_put(state["td"], chunks_bl)

        t_tp, t_tp_seq, t_tp_pad, t_bl = best_of_each(
            [
                lambda: (tp_put(state["dock"], chunks_tp), tp_get(state["dock"])),
                lambda: (tp_put(state["dock"], chunks_tp), tp_get(state["dock"], random=False)),
                lambda: (tp_put(state["dock"], chunks_tp), tp_get(state["dock"], padded=True)),
                lambda: (bl_put(state["td"], chunks_bl), bl_get(state["td"], n)),
            ],
            args.repeat,
            setups=[fresh_tp, fresh_tp, fresh_tp, fresh_bl],
        )
        both = 2 * payload
        rows.append(Row("put+get", case, "B/s", both / t_tp, 1e9, "the 1 GB/s budget", 1.0, ">=1 GB/s"))
        rows.append(Row("put+get", case, "B/s", both / t_tp, both / t_bl, name, 10.0))
        rows.append(Row("put+get, sequential", case, "B/s", both / t_tp_seq, both / t_bl, name))
        rows.append(Row("put+get, padded out", case, "B/s", both / t_tp_pad, both / t_bl, name))

        p_tp, p_bl = best_of_each(
            [lambda: tp_put(state["dock"], chunks_tp), lambda: bl_put(state["td"], chunks_bl)],
            args.repeat,
            setups=[fresh_tp, fresh_bl],
        )
        g_tp, g_tp_pad, g_bl = best_of_each(
            [lambda: tp_get(state["dock"]), lambda: tp_get(state["dock"], padded=True), lambda: bl_get(state["td"], n)],
            args.repeat,
            setups=[filled_tp, filled_tp, filled_bl],
        )
        rows.append(Row("put alone", case, "B/s", payload / p_tp, payload / p_bl, name))
        rows.append(Row("get alone", case, "B/s", payload / g_tp, payload / g_bl, name))
        rows.append(Row("get alone, padded out", case, "B/s", payload / g_tp_pad, payload / g_bl, name))

        if any(BASELINE_POLLS):
            print(f"  warning: the baseline slept on its 0.1 s poll in single-thread runs: {BASELINE_POLLS}")
        bench_pipelined(rows, chunks_tp, chunks_bl, prompts, args)
    print()
    print_table(rows)
    print()
    print("ratio: tokenport / baseline (rates) or baseline / tokenport (times); higher is better.")
    print_goals(rows)


if __name__ == "__main__":
    main()

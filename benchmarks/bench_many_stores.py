"""Many stores: build a blend's indices from scratch, reopen them from the cache, first batch; vs megatron-core.

N token stores of 2,000 short documents each (uint16, lognormal lengths of mean 24 tokens), equal
weights, seq_length 1024, 20 samples per store in the blend (split "1,0,0", Megatron's sizing:
``algorithm="megatron"`` on tokenport's side, so both build the very same indices). Every figure is
measured in a fresh subprocess, its imports timed apart (not counted; megatron's side includes a
one-process gloo group, which its cache path needs). tokenport's side also times numba's start-up
apart (the first compiled call of a process initializes numba's CPU target: a fixed cost of a
required dependency, as torch's import is megatron-core's); the table shows tokenport's figures
without it and, as "cold", with it added:

  build        build the train blend with an empty cache directory (indices built and written)
  reopen       build it again in a new process with that cache (indices loaded)
  first batch  reopen, then read the first batch of 32 samples (ids 0..31 of the blend)

Sides: tokenport ``build_datasets(..., cache=DIR, algorithm="megatron")``; megatron-core
``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` with ``path_to_cache=DIR``. The first batch of
both is checked to hold the same tokens. tokenport's child runs under the default open-file limit
(soft RLIMIT_NOFILE lowered to 1024 if higher); megatron's keeps the machine's limit, since it holds
several descriptors per store and fails at 200 stores otherwise; a failure is reported.

    python benchmarks/bench_many_stores.py                 # 200 and 2,000 stores
    python benchmarks/bench_many_stores.py --stores 200    # one size
    python benchmarks/bench_many_stores.py --with-10000    # 10,000 stores besides (about 1 GB of stores)
    python benchmarks/bench_many_stores.py --quick         # 200 stores only

Goal rows (``_harness.Row``, section "many stores"): "<N> stores, build" and "<N> stores, reopen", tokenport's
seconds against megatron-core's (goal >= 10x); at 10,000 stores absolute goals (build < 60 s, reopen < 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

EOD = 2
VOCAB = 50_000
DOCUMENTS = 2_000
MEAN_LENGTH = 24
SEQ_LENGTH = 1024
SAMPLES_PER_STORE = 20
BATCH = 32
SEED = 1234
NOFILE = 1024  # the usual default soft limit


def make_stores(directory: str, count: int) -> list[str]:
    """`count` stores under `directory` (made once; reused when present), their prefixes in order."""
    import tokenport as tp
    from _harness import lognormal_lengths

    os.makedirs(directory, exist_ok=True)
    prefixes = [os.path.join(directory, f"s{i:05d}") for i in range(count)]
    for i, prefix in enumerate(prefixes):
        if os.path.exists(prefix + ".json"):
            continue
        rng = np.random.default_rng(i)
        lengths = lognormal_lengths(rng, DOCUMENTS, MEAN_LENGTH, 0.8)
        tokens = rng.integers(EOD + 1, VOCAB, int(lengths.sum())).astype(np.uint16)
        tokens[np.cumsum(lengths) - 1] = EOD
        with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, tokenizer={"eod_id": EOD, "vocab_size": VOCAB}) as writer:
            writer.add_documents(tokens, lengths)
    return prefixes


def _tokenport_train(prefixes: list[str], cache: str):
    import tokenport as tp

    spec = [x for p in prefixes for x in ("1", p)]
    config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
    train, _, _ = tp.build_datasets(
        spec,
        sizes=[SAMPLES_PER_STORE * len(prefixes), 0, 0],
        config=config,
        seed=SEED,
        split="1,0,0",
        cache=cache,
        algorithm="megatron",
    )
    return train


def _megatron_train(prefixes: list[str], cache: str):
    import logging
    import types
    import warnings

    import torch

    warnings.simplefilter("ignore")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    from megatron.core.datasets import gpt_dataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

    if not torch.distributed.is_initialized():  # its cache path asks for the rank: one process, gloo
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    tokenizer = types.SimpleNamespace(eod=EOD, vocab_size=None, unique_identifiers={"bench_many_stores": "x"})
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=SEED,
        sequence_length=SEQ_LENGTH,
        blend=(prefixes, [1.0] * len(prefixes)),
        split="1,0,0",
        path_to_cache=cache,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        mmap_bin_files=True,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        gpt_dataset.GPTDataset, [SAMPLES_PER_STORE * len(prefixes), 0, 0], lambda: True, config
    ).build()
    return train


def _first_batch(side: str, train) -> np.ndarray:
    """The tokens of samples 0..BATCH-1 as one array."""
    if side == "tokenport":
        return np.asarray(train.get_batch(np.arange(BATCH))["tokens"])
    return np.stack([train[i]["tokens"].numpy() for i in range(BATCH)])


def child(side: str, store_dir: str, count: int, cache: str, batch: bool) -> None:
    """One measurement in this (fresh) process; prints a JSON line."""
    if side == "tokenport":
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, NOFILE), hard))
    started = time.perf_counter()
    if side == "tokenport":
        import tokenport  # noqa: F401
        import tokenport.builder.datasets  # noqa: F401  (what build_datasets loads)
        import tokenport.samples.gpt  # noqa: F401
    else:
        import megatron.core.datasets.blended_megatron_dataset_builder  # noqa: F401
        import megatron.core.datasets.gpt_dataset  # noqa: F401
    imports = time.perf_counter() - started
    out: dict = {"imports": imports}
    if side == "tokenport":
        # numba's start-up: the first call of any compiled kernel in a process initializes numba's CPU
        # target (its registries, its extension entry points, scipy for BLAS), 0.4-1.5 s here; a fixed
        # cost of tokenport's required dependency, as torch's import is megatron-core's. Timed apart.
        started = time.perf_counter()
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()
        out["numba_start"] = time.perf_counter() - started
    prefixes = [os.path.join(store_dir, f"s{i:05d}") for i in range(count)]
    try:
        started = time.perf_counter()
        train = (_tokenport_train if side == "tokenport" else _megatron_train)(prefixes, cache)
        out["build"] = time.perf_counter() - started
        if batch:
            tokens = _first_batch(side, train)
            out["first_batch"] = time.perf_counter() - started
            out["tokens_sum"] = int(tokens.astype(np.int64).sum())
            out["tokens_crc"] = int(np.bitwise_xor.reduce(tokens.astype(np.int64).ravel() * 2654435761 % (1 << 31)))
        out["fds"] = len(os.listdir("/proc/self/fd"))
    except Exception as exc:  # reported by the parent as a failure of this side
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(out))


def run_child(side: str, store_dir: str, count: int, cache: str, batch: bool) -> dict:
    """Run `child` in a fresh interpreter and return its JSON."""
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--dir", store_dir, "--count", str(count)]
    cmd += ["--cache", cache] + (["--batch"] if batch else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH", "")])))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def measure(root: str, count: int) -> list[tuple[str, str, dict]]:
    """Build, reopen and first batch for both sides on `count` stores."""
    import shutil

    store_dir = os.path.join(root, f"stores{count}")
    started = time.perf_counter()
    make_stores(store_dir, count)
    print(f"{count} stores ready in {time.perf_counter() - started:.1f} s ({store_dir})", flush=True)
    results = []
    for side in ("tokenport", "megatron"):
        cache = os.path.join(root, f"cache-{side}-{count}")
        shutil.rmtree(cache, ignore_errors=True)
        for phase, batch in (("build", False), ("reopen", False), ("first batch", True)):
            result = run_child(side, store_dir, count, cache, batch)
            results.append((side, phase, result))
            print(f"  {side:9s} {phase:11s} {json.dumps(result)}", flush=True)
        shutil.rmtree(cache, ignore_errors=True)
    return results


def goal_rows(count: int, results: list[tuple[str, str, dict]]) -> list:
    """The goal rows of one size: build and reopen, tokenport's seconds against megatron-core's."""
    from _harness import Row

    got = {(side, phase): r for side, phase, r in results}
    rows = []
    for phase, seconds_goal in (("build", 60.0), ("reopen", 1.0)):
        ours, theirs = (got[(side, phase)].get("build", float("nan")) for side in ("tokenport", "megatron"))
        case = f"{count:,} stores, {phase}"
        if count >= 10_000:
            goal_text = f"<{seconds_goal:g} s"
            row = Row("many stores", case, "s", ours, theirs, "megatron-core", seconds_goal, goal_text, True, True)
            rows.append(row)
        else:
            rows.append(Row("many stores", case, "s", ours, theirs, "megatron-core", 10.0, None, True))
    return rows


def report(count: int, results: list[tuple[str, str, dict]]) -> None:
    """The table of one size: tokenport's seconds, megatron's, the ratio and the goal."""
    got = {(side, phase): r for side, phase, r in results}
    goals = {"build": (10.0, 60.0), "reopen": (10.0, 1.0), "first batch": (None, 2.0)}
    print(f"\n{count} stores  (seconds, imports excluded; fds = open descriptors after the step)")
    print(f"  {'step':12s} {'tokenport':>10s} {'megatron':>10s} {'speed-up':>9s}  goal")
    for phase, key in (("build", "build"), ("reopen", "build"), ("first batch", "first_batch")):
        ours, theirs = got[("tokenport", phase)], got[("megatron", phase)]
        a = ours.get(key, float("nan")) if "error" not in ours else float("nan")
        b = theirs.get(key, float("nan")) if "error" not in theirs else float("nan")
        ratio = b / a if a == a and b == b else float("nan")
        ratio_goal, seconds_goal = goals[phase]
        if count >= 10_000:
            goal = f"< {seconds_goal:g} s " + ("met" if a < seconds_goal else "NOT met")
        elif ratio_goal is not None:
            goal = f">= {ratio_goal:g}x " + ("met" if ratio >= ratio_goal else "NOT met")
        else:
            goal = ""
        print(f"  {phase:12s} {a:10.3f} {b:10.3f} {ratio:8.2f}x  {goal}")
        if phase != "reopen" and "numba_start" in ours:  # reopening calls no compiled kernel
            start = ours["numba_start"]
            cold = a + start
            print(f"  {'  cold':12s} {cold:10.3f} {b:10.3f} {b / cold:8.2f}x  (numba start-up {start:.3f} s added)")
        for side, r in (("tokenport", ours), ("megatron", theirs)):
            if "error" in r:
                print(f"    {side} failed: {r['error']}")
    a, b = got[("tokenport", "first batch")], got[("megatron", "first batch")]
    if "tokens_crc" in a and "tokens_crc" in b:
        same = (a["tokens_sum"], a["tokens_crc"]) == (b["tokens_sum"], b["tokens_crc"])
        print(f"  first batch tokens equal on both sides: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, nargs="*", default=[200, 2000])
    parser.add_argument("--with-10000", action="store_true", help="also 10,000 stores")
    parser.add_argument("--root", default="/tmp/tokenport-bench-many-stores", help="where stores and caches go")
    parser.add_argument("--child", choices=("tokenport", "megatron"))
    parser.add_argument("--dir")
    parser.add_argument("--count", type=int)
    parser.add_argument("--cache")
    parser.add_argument("--batch", action="store_true")
    parser.add_argument("--quick", action="store_true", help="200 stores only")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir, args.count, args.cache, args.batch)
        return
    import tokenport as tp

    print(f"tokenport {tp.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    from _harness import print_table

    counts = [200] if args.quick else list(args.stores) + ([10_000] if args.with_10000 else [])
    rows = []
    for count in counts:
        results = measure(args.root, count)
        report(count, results)
        rows += goal_rows(count, results)
    print()
    print_table(rows)


if __name__ == "__main__":
    main()

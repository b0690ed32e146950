"""SFTDataset[i] against indexing TRL's packed ``datasets.Dataset`` (pack_dataset, strategy="bfd").

Both sides pack the same tokenized conversations (lognormal lengths, mean ~400 tokens, a prompt
then an answer, a loss mask 1 on the answer) into rows of 2048 tokens, best fit decreasing, in
windows of 1000 conversations (TRL's map batches): the same rows, checked before timing. Every
figure is the best of N runs timed in turns (A B C A B C ...).

    python benchmarks/bench_sft_dataset.py            # 20,000 conversations (~a minute)
    python benchmarks/bench_sft_dataset.py --quick    # 3,000 conversations (seconds)

Rows:
  sample        per-sample cost of ``dataset[i]`` over a fixed random order of rows: SFTDataset
                (Megatron fields: tokens, labels, loss_mask, position_ids, cu_seqlens, ...; and the
                HF fields) against TRL's packed dataset in its default format (Python lists: input_ids,
                assistant_masks, seq_lengths), goal >= 3x; and in numpy format (no goal).
  batch of 8    per-sample cost of ``get_batch`` of 8 rows against TRL's ``dataset[ids]`` (no goal).
  pack          building the packed rows: SFTDataset(...) from the chat store against
                pack_dataset on a ``datasets.Dataset`` held in memory (no goal).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory

SEQ_LENGTH = 2048
WINDOW = 1000


def conversations(count: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids and loss masks: a prompt of 5..60 tokens, then the answer (trained)."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, count, 400, 0.9) + 1
    prompts = np.minimum(rng.integers(5, 60, count), lengths - 1)
    tokens = [rng.integers(1, 32000, n).astype(np.int64) for n in lengths.tolist()]
    masks = [np.r_[np.zeros(p, np.uint8), np.ones(n - p, np.uint8)] for p, n in zip(prompts.tolist(), lengths.tolist())]
    return tokens, masks


def write_store(prefix: str, tokens: list[np.ndarray], masks: list[np.ndarray]) -> tp.IndexedDataset:
    """The chat store: PREFIX and PREFIX.mask."""
    with (
        tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as t,
        tp.IndexedDatasetWriter(prefix + ".mask", np.uint8) as m,
    ):
        for ids, mask in zip(tokens, masks):
            t.add_document(ids)
            m.add_document(mask)
    return tp.IndexedDataset(prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 conversations")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--directory", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    count = args.conversations or (3_000 if args.quick else 20_000)

    import datasets
    from trl.data_utils import pack_dataset

    datasets.disable_progress_bars()
    with scratch_directory(args.directory, "bench_sft_", args.quick) as directory:
        tokens, masks = conversations(count, 0)
        store = write_store(os.path.join(directory, "chat"), tokens, masks)
        table = datasets.Dataset.from_dict(
            {"input_ids": [t.tolist() for t in tokens], "assistant_masks": [m.tolist() for m in masks]}
        )

        def build_trl():
            return pack_dataset(table, SEQ_LENGTH, strategy="bfd", map_kwargs={"batch_size": WINDOW})

        def build_ours():
            return tp.SFTDataset(store, SEQ_LENGTH, window=WINDOW)

        trl, ours = build_trl(), build_ours()
        hf = tp.SFTDataset(store, SEQ_LENGTH, window=WINDOW, shape="hf")
        trl_numpy = trl.with_format("numpy")
        check(ours, trl)
        rows = len(ours)
        order = np.random.default_rng(1).permutation(rows).tolist()
        print(
            f"{count} conversations -> {rows} rows of {SEQ_LENGTH} tokens, efficiency "
            f"{ours.counts.tokens / (rows * SEQ_LENGTH):.3f}"
        )

        def each(dataset):
            return lambda: [dataset[i] for i in order]

        t_ours, t_hf, t_trl, t_trl_np = best_of_each([each(ours), each(hf), each(trl), each(trl_numpy)], args.repeat)
        batches = [order[k : k + 8] for k in range(0, rows - 7, 8)]
        b_ours, b_trl = best_of_each(
            [lambda: [ours.get_batch(b) for b in batches], lambda: [trl[b] for b in batches]], args.repeat
        )
        p_ours, p_trl = best_of_each([build_ours, build_trl], args.repeat)
        table_rows = [
            Row(
                "sample",
                "megatron fields vs lists",
                "s/sample",
                t_ours / rows,
                t_trl / rows,
                "trl",
                goal=3,
                lower_is_better=True,
            ),
            Row("sample", "hf fields vs lists", "s/sample", t_hf / rows, t_trl / rows, "trl", lower_is_better=True),
            Row(
                "sample",
                "megatron fields vs numpy",
                "s/sample",
                t_ours / rows,
                t_trl_np / rows,
                "trl numpy",
                lower_is_better=True,
            ),
            Row(
                "batch of 8",
                "get_batch vs dataset[ids]",
                "s/sample",
                b_ours / (8 * len(batches)),
                b_trl / (8 * len(batches)),
                "trl",
                lower_is_better=True,
            ),
            Row("pack", f"{count} conversations", "s", p_ours, p_trl, "trl", lower_is_better=True),
        ]
        print_table(table_rows)
        print_goals(table_rows)


def check(ours: tp.SFTDataset, trl) -> None:
    """Exit unless both sides hold the same rows (tokens and conversation lengths), in order."""
    if len(ours) != len(trl):
        raise SystemExit(f"{len(ours)} rows against TRL's {len(trl)}")
    batch = ours.get_batch(np.arange(len(ours)))
    for r, row in enumerate(trl):
        total = len(row["input_ids"])
        lengths = np.diff(batch["cu_seqlens"][r][: batch["num_documents"][r] + 1]).tolist()
        if batch["tokens"][r, :total].tolist() != row["input_ids"] or lengths != row["seq_lengths"]:
            raise SystemExit(f"row {r} differs from TRL's")


if __name__ == "__main__":
    main()

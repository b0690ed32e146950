"""Conversations -> tokens + loss masks + packed rows: tokenport vs TRL's SFTTrainer dataset preparation.

The same conversations (built from the standard library's docstrings, as in bench_chat_template.py),
the same BPE tokenizer trained here with ChatML's special tokens, the built-in ChatML template with
generation markers, rows of --seq-length tokens packed best-fit decreasing. One process, one core.

- tokenport: ``encode_chat`` per conversation into a chat store (``IndexedDatasetWriter(masks=True)``),
  then ``SFTDataset(store, seq_length, window=1000)`` (the packing); "+ rows" also reads every packed
  row once (``get_batch`` in chunks), since TRL's result holds its rows written out.
- TRL 1.16: ``SFTTrainer._prepare_dataset`` on a ``datasets.Dataset`` of the messages (in memory,
  ``dataset_num_proc=None``): tokenize with ``apply_chat_template(..., return_assistant_tokens_mask=True)``,
  build labels, ``pack_dataset(..., "bfd")``; the trainer itself is built once, untimed.

Both results are checked equal (every packed row's input_ids, labels and sequence lengths) before timing.
A breakdown of tokenport's time (render, tokenizer with offsets, the rest) is printed after the table.

Scaling with workers: ``prepare(PrepareConfig(format="chat", workers=W))`` end to end, from the same
conversations written once to a jsonl file (untimed, cut into eight units of work) to published chat
stores, for each ``--workers`` count; checked to hold the same tokens and trained-token count as the
in-process path.

    python benchmarks/bench_sft_prepare.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np

import tokenport as tp
from _harness import Row, best_of_each, print_table
from bench_chat_template import SPECIALS, conversations, docstrings
from tokenport.chat import ChatTemplate, encode_chat
from tokenport.chat.template import prepare_messages
from tokenport.samples.sft import SFTDataset
from tokenport.tokenizers import load_tokenizer, train_byte_level_bpe


def _trained(masks: tp.IndexedDataset) -> int:
    """Tokens a chat store's mask store marks trained."""
    return int(np.count_nonzero(masks.get_many(np.arange(len(masks)))[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=4000)
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--workers", default="1,2", help="prepare --format chat worker counts to time")
    args = parser.parse_args()

    import datasets
    import tokenizers as hf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    docs = docstrings()
    tmp = tempfile.mkdtemp(prefix="bench_sft_prepare_")
    path = train_byte_level_bpe([doc for _, doc in docs], args.vocab, os.path.join(tmp, "tokenizer.json"))
    raw = hf.Tokenizer.from_file(path)
    raw.add_special_tokens(SPECIALS)
    raw.save(path)
    tok = load_tokenizer("hf:" + path)
    template = ChatTemplate.chatml()
    peer = PreTrainedTokenizerFast(tokenizer_object=hf.Tokenizer.from_file(path), eos_token="<|im_end|>")
    peer.chat_template = template.source
    chats = conversations(docs, args.conversations, args.seed)
    prefix = os.path.join(tmp, "chat")

    def ours() -> SFTDataset:
        with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, masks=True) as writer:
            for chat in chats:
                ids, mask = encode_chat(tok, template, chat)
                writer.add_document(ids, mask=mask)
        return SFTDataset(tp.IndexedDataset(prefix), args.seq_length, window=1000, shape="hf")

    def ours_rows() -> int:
        ds = ours()
        return sum(len(ds.get_batch(np.arange(s, min(s + 256, len(ds))))["input_ids"]) for s in range(0, len(ds), 256))

    config = SFTConfig(
        output_dir=os.path.join(tmp, "trl"),
        assistant_only_loss=True,
        packing=True,
        packing_strategy="bfd",
        max_length=args.seq_length,
        shuffle_dataset=False,
        dataset_num_proc=None,
        report_to=[],
        use_cpu=True,
        bf16=False,
    )
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(peer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    rows = datasets.Dataset.from_list([{"messages": chat} for chat in chats])
    trainer = SFTTrainer(model=model, args=config, train_dataset=rows.select(range(4)), processing_class=peer)

    def theirs():
        return trainer._prepare_dataset(rows, peer, config, True, None, "train")

    ds, packed = ours(), theirs()[:]
    if len(ds) != len(packed["input_ids"]):
        raise SystemExit(f"tokenport packed {len(ds)} rows, TRL {len(packed['input_ids'])}")
    batch = ds.get_batch(np.arange(len(ds)))
    for r, ids in enumerate(packed["input_ids"]):
        n = len(ids)
        positions = np.concatenate([np.arange(k) for k in packed["seq_lengths"][r]])
        if (
            batch["input_ids"][r, :n].tolist() != ids
            or batch["labels"][r, :n].tolist() != packed["labels"][r]
            or batch["position_ids"][r, :n].tolist() != positions.tolist()
        ):
            raise SystemExit(f"tokenport and TRL disagree on packed row {r}")
    tokens = int(ds.counts.tokens)

    source = os.path.join(tmp, "chats.jsonl")
    with open(source, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"messages": chat}) + "\n" for chat in chats)
    counts = [int(w) for w in args.workers.split(",")]
    trained = _trained(ds.masks)

    def prepared(workers: int):
        def run() -> list[str]:
            output = os.path.join(tmp, f"prepared-{workers}")
            shutil.rmtree(output, ignore_errors=True)
            config = tp.PrepareConfig(
                inputs=[source],
                output=output,
                format="chat",
                tokenizer="hf:" + path,
                chat_template="chatml",
                workers=workers,
                unit_bytes=max(1, os.path.getsize(source) // 8),  # eight units of work to share
            )
            return tp.prepare(config).parts

        return run

    for workers in counts:  # checked once, untimed: the same tokens and trained tokens as in process
        stores = [tp.IndexedDataset(part) for part in prepared(workers)()]
        got = (sum(store.num_tokens for store in stores), sum(_trained(store.masks) for store in stores))
        if got != (tokens, trained):
            raise SystemExit(f"prepare with {workers} workers: {got} tokens/trained, in process {tokens, trained}")

    timed = best_of_each([ours, ours_rows, theirs, *(prepared(w) for w in counts)], args.repeat)
    case = f"{len(chats)} conv, {tokens / len(chats):.0f} tok each, {len(ds)} rows of {args.seq_length}"
    print_table(
        [
            Row(
                "conv -> ids+masks+packed",
                case,
                "conv/s",
                len(chats) / timed[0],
                len(chats) / timed[2],
                "TRL _prepare_dataset",
                goal=10,
            ),
            Row(
                "... + every row read",
                case,
                "conv/s",
                len(chats) / timed[1],
                len(chats) / timed[2],
                "TRL _prepare_dataset",
                goal=10,
            ),
            Row(
                "conv -> ids+masks+packed",
                case,
                "tokens/s",
                tokens / timed[0],
                tokens / timed[2],
                "TRL _prepare_dataset",
            ),
            *(
                Row(
                    f"prepare --format chat, {w} worker{'s' * (w > 1)}",
                    f"{len(chats)} conv from jsonl to chat stores",
                    "conv/s",
                    len(chats) / timed[3 + k],
                    len(chats) / timed[2],
                    "TRL _prepare_dataset (1 process)",
                )
                for k, w in enumerate(counts)
            ),
        ]
    )

    # where tokenport's time goes, per conversation
    prepared = [prepare_messages(chat) for chat in chats]
    t0 = time.perf_counter()
    texts = [template.render_prepared(chat, None)[0] for chat in prepared]
    render = time.perf_counter() - t0
    t0 = time.perf_counter()
    for text in texts:
        tok.encode_offsets(text)
    encode = time.perf_counter() - t0
    per = 1e6 / len(chats)
    try:  # the same ids from gigatoken (it gives no offsets, so encode_chat cannot use it yet)
        giga = load_tokenizer("gigatoken:" + path)
        t0 = time.perf_counter()
        for text in texts:
            giga.encode(text)
        print(f"\ngigatoken ids alone (no offsets): {(time.perf_counter() - t0) * per:.0f} us per conversation")
    except tp.TokenizerError as error:
        print(f"\ngigatoken not measured: {error}")
    print(
        f"\ntokenport per conversation: {timed[0] * per:.0f} us in all; render {render * per:.0f} us, "
        f"tokenizer with offsets {encode * per:.0f} us, "
        f"masks + store + packing {(timed[0] - render - encode) * per:.0f} us; "
        f"TRL {timed[2] * per:.0f} us"
    )


if __name__ == "__main__":
    main()

"""Conversations -> tokens + loss masks + packed rows: tokenport vs TRL's SFTTrainer dataset preparation.

The same conversations (built from the standard library's docstrings, as in bench_chat_template.py),
the same BPE tokenizer trained here with ChatML's special tokens, the built-in ChatML template with
generation markers, rows of --seq-length tokens packed best-fit decreasing. Per core: the process is
pinned to one CPU while both sides run.

- tokenport: ``encode_chats`` over batches of 1000 conversations into a chat store
  (``IndexedDatasetWriter(masks=True).add_documents``), then ``SFTDataset(store, seq_length,
  window=1000)`` (the packing); with the tokenizer run by HF ``tokenizers`` ('hf:', its own offsets) and by
  gigatoken ('gigatoken:', the same ids, offsets derived from them); "+ rows" also reads every packed row
  once (``get_batch`` in chunks), since TRL's result holds its rows written out.
- TRL 1.16: ``SFTTrainer._prepare_dataset`` on a ``datasets.Dataset`` of the messages (in memory,
  ``dataset_num_proc=None``): tokenize with ``apply_chat_template(..., return_assistant_tokens_mask=True)``,
  build labels, ``pack_dataset(..., "bfd")``; the trainer itself is built once, untimed.

Every side's packed rows (input_ids, labels, position ids) are checked equal to TRL's before timing.
A breakdown of tokenport's time (render, tokenizer with offsets, masks, store + packing) follows the table.

Through the CLI, per core (the goal row): ``tokenport prepare --format chat --workers 1`` run as a command
on one CPU (``sched_setaffinity`` before it starts), end to end: interpreter start, imports, tokenizer and
template load, reading and parsing the jsonl, rendering, tokenizing, masking, writing and publishing the
chat store; from the same --scaling-conversations jsonl file, against TRL's conversations per second on
one CPU. The command runs with byte-code caching on (as an installed package has it); its output is
checked once, untimed, to hold the same tokens and trained tokens as the in-process path. A run on a
jsonl of 10 conversations gives the fixed cost (start-up) in that time.

Scaling with workers (both CPUs): ``prepare(PrepareConfig(format="chat", workers=W))`` end to end, from
--scaling-conversations conversations (more, so that worker start-up is amortized) written once to a jsonl
file (untimed, cut into eight units of work) to published chat stores, for each ``--workers`` count and both
tokenizer engines; checked to hold the same tokens and trained-token count as the in-process path.

    python benchmarks/bench_sft_prepare.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np

import tokenport as tp
from _harness import Row, best_of, best_of_each, print_table
from bench_chat_template import SPECIALS, conversations, docstrings
from tokenport.chat import ChatTemplate, encode_chats
from tokenport.chat.masks import encode_plans, plan_chat
from tokenport.samples.sft import SFTDataset
from tokenport.tokenizers import load_tokenizer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests._support.bpe import train_byte_level_bpe  # noqa: E402 (after the repository is on sys.path)

BATCH = 1000  # conversations per encode_chats call


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
    parser.add_argument("--scaling-conversations", type=int, default=40000, help="conversations prepare is timed on")
    parser.add_argument("--quick", action="store_true", help="500 and 20000 conversations, once; 1 worker")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.scaling_conversations, args.repeat, args.workers = 500, 20000, 1, "1"

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
    engines = {"hf": load_tokenizer("hf:" + path), "gigatoken": load_tokenizer("gigatoken:" + path)}
    template = ChatTemplate.chatml()
    peer = PreTrainedTokenizerFast(tokenizer_object=hf.Tokenizer.from_file(path), eos_token="<|im_end|>")
    peer.chat_template = template.source
    chats = conversations(docs, args.conversations, args.seed)
    prefix = os.path.join(tmp, "chat")

    def ours(tok: tp.Tokenizer) -> SFTDataset:
        with tp.IndexedDatasetWriter(prefix, dtype=np.uint16, masks=True) as writer:
            for start in range(0, len(chats), BATCH):
                batch = encode_chats(tok, template, chats[start : start + BATCH])
                writer.add_documents(batch.ids, batch.lengths, masks=batch.masks)
        return SFTDataset(tp.IndexedDataset(prefix), args.seq_length, window=1000, shape="hf")

    def ours_rows(tok: tp.Tokenizer) -> int:
        ds = ours(tok)
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

    packed = theirs()[:]
    for name, tok in engines.items():
        ds = ours(tok)
        if len(ds) != len(packed["input_ids"]):
            raise SystemExit(f"tokenport ({name}) packed {len(ds)} rows, TRL {len(packed['input_ids'])}")
        batch = ds.get_batch(np.arange(len(ds)))
        for r, ids in enumerate(packed["input_ids"]):
            n = len(ids)
            positions = np.concatenate([np.arange(k) for k in packed["seq_lengths"][r]])
            if (
                batch["input_ids"][r, :n].tolist() != ids
                or batch["labels"][r, :n].tolist() != packed["labels"][r]
                or batch["position_ids"][r, :n].tolist() != positions.tolist()
            ):
                raise SystemExit(f"tokenport ({name}) and TRL disagree on packed row {r}")
    tokens = int(ds.counts.tokens)

    source = os.path.join(tmp, "chats.jsonl")
    many = conversations(docs, args.scaling_conversations, args.seed)
    with open(source, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"messages": chat}) + "\n" for chat in many)
    with tp.IndexedDatasetWriter(prefix + "-many", dtype=np.uint16, masks=True) as writer:  # the in-process reference
        for start in range(0, len(many), BATCH):
            batch = encode_chats(engines["hf"], template, many[start : start + BATCH])
            writer.add_documents(batch.ids, batch.lengths, masks=batch.masks)
    reference = tp.IndexedDataset(prefix + "-many")
    counts = [int(w) for w in args.workers.split(",")]
    want = (reference.num_tokens, _trained(reference.masks))

    def prepared(workers: int, engine: str):
        def run() -> list[str]:
            output = os.path.join(tmp, f"prepared-{engine}-{workers}")
            shutil.rmtree(output, ignore_errors=True)
            config = tp.PrepareConfig(
                inputs=[source],
                output=output,
                format="chat",
                tokenizer=f"{engine}:{path}",
                chat_template="chatml",
                workers=workers,
                unit_bytes=max(1, os.path.getsize(source) // 8),  # eight units of work to share
            )
            return tp.prepare(config).parts

        return run

    runs = [(w, engine) for engine in engines for w in counts]
    for workers, engine in runs:  # checked once, untimed: the same tokens and trained tokens as in process
        stores = [tp.IndexedDataset(part) for part in prepared(workers, engine)()]
        got = (sum(store.num_tokens for store in stores), sum(_trained(store.masks) for store in stores))
        if got != want:
            raise SystemExit(f"prepare ({engine}, {workers} workers): {got} tokens/trained, in process {want}")

    cpus = os.sched_getaffinity(0)
    one_cpu = min(cpus)
    tiny = os.path.join(tmp, "tiny.jsonl")
    with open(tiny, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"messages": chat}) + "\n" for chat in many[:10])

    def command(source: str) -> Callable[[], None]:
        def run() -> None:
            output = os.path.join(tmp, "cli")
            shutil.rmtree(output, ignore_errors=True)
            argv = ["prepare", "-q", "--format", "chat", "--chat-template", "chatml", "--workers", "1"]
            argv += ["--tokenizer", f"gigatoken:{path}", "-o", output, source]
            env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
            subprocess.run(
                [sys.executable, "-m", "tokenport", *argv],
                check=True,
                stdout=subprocess.DEVNULL,
                env=env,
                preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}),
            )

        return run

    command(source)()  # checked once, untimed (and byte-code cached): the in-process path's tokens
    with open(os.path.join(tmp, "cli", "tokenport.json"), encoding="utf-8") as f:
        stores = [tp.IndexedDataset(os.path.join(tmp, "cli", part["name"])) for part in json.load(f)["parts"]]
    got = (sum(store.num_tokens for store in stores), sum(_trained(store.masks) for store in stores))
    if got != want:
        raise SystemExit(f"tokenport prepare (CLI): {got} tokens/trained, in process {want}")

    os.sched_setaffinity(0, {one_cpu})  # per core: both sides on one CPU
    hf_tok, giga = engines["hf"], engines["gigatoken"]
    timed = best_of_each(
        [lambda: ours(hf_tok), lambda: ours(giga), lambda: ours_rows(giga), theirs, command(source), command(tiny)],
        args.repeat,
    )
    os.sched_setaffinity(0, cpus)
    scaling = best_of_each([prepared(w, engine) for w, engine in runs], args.repeat)
    case = "stdlib docstring chats, ChatML, packed rows"
    trl = timed[3]
    print(
        f"in process: {len(chats)} conv, {tokens / len(chats):.0f} tok each, {len(ds)} rows of {args.seq_length}; "
        f"CLI and scaling: {len(many)} conv in a {os.path.getsize(source) / 1e6:.1f} MB jsonl"
    )
    print_table(
        [
            Row("CLI, per core", "prepare --format chat, gigatoken, jsonl -> chat store", "conv/s",
                len(many) / timed[4], len(chats) / trl, "TRL _prepare_dataset (1 CPU)", goal=10),
            Row("conv -> ids+masks+packed, hf", case, "conv/s", len(chats) / timed[0], len(chats) / trl,
                "TRL _prepare_dataset", goal=10),
            Row("conv -> ids+masks+packed, gigatoken", case, "conv/s", len(chats) / timed[1], len(chats) / trl,
                "TRL _prepare_dataset", goal=10),
            Row("... + every row read, gigatoken", case, "conv/s", len(chats) / timed[2], len(chats) / trl,
                "TRL _prepare_dataset", goal=10),
            Row("conv -> ids+masks+packed, gigatoken", case, "tokens/s", tokens / timed[1], tokens / trl,
                "TRL _prepare_dataset"),
            *(
                Row(f"prepare --format chat, {engine}, {w} worker{'s' * (w > 1)}",
                    "conv from jsonl to chat stores (2 CPUs)", "conv/s",
                    len(many) / scaling[k], len(chats) / trl, "TRL _prepare_dataset (1 process, 1 CPU)")
                for k, (w, engine) in enumerate(runs)
            ),
        ]
    )  # fmt: skip
    print(
        f"\nCLI (gigatoken, 1 CPU): {timed[4]:.2f} s for {len(many)} conversations, "
        f"{timed[4] / len(many) * 1e6:.1f} us each; a 10-conversation run (the fixed cost: start-up, "
        f"loading, publishing) takes {timed[5]:.2f} s, so {(timed[4] - timed[5]) / len(many) * 1e6:.1f} us each "
        "beyond it"
    )

    # where tokenport's time goes, per conversation, on one CPU
    os.sched_setaffinity(0, {min(cpus)})
    per = 1e6 / len(chats)
    plans = [plan_chat(template, chat) for chat in chats]
    render = best_of(lambda: [plan_chat(template, chat) for chat in chats], args.repeat)
    texts = [plan.text for plan in plans]
    for name, tok in engines.items():
        offsets = best_of(lambda: tok.encode_offsets_batch(texts), args.repeat)
        encoded = best_of(lambda: encode_plans(tok, plans), args.repeat)
        total = timed[0 if name == "hf" else 1]
        print(
            f"\ntokenport ({name}) per conversation: {total * per:.1f} us in all; render {render * per:.1f} us, "
            f"tokenizer with offsets {offsets * per:.1f} us, masks {(encoded - offsets) * per:.1f} us, "
            f"store + packing {(total - render - encoded) * per:.1f} us"
        )
    print(f"TRL per conversation: {trl * per:.1f} us")
    os.sched_setaffinity(0, cpus)


if __name__ == "__main__":
    main()

"""Benchmark: `tokenport.prepare` against Megatron-LM's tools/preprocess_data.py, same input and tokenizer.

The corpus is the Python standard library's source files and their docstrings, one jsonl
document each, repeated to --size-mb. The tokenizer is a HF byte-level BPE trained here on
that text. Megatron's tool is reimplemented from its structure: a multiprocessing.Pool whose
workers json.loads one line and tokenize one document each (pool.imap, chunksize 32), and a
parent that appends each document to megatron.core's IndexedDatasetBuilder. Both outputs
are then compared token for token.

    python benchmarks/bench_prepare.py --size-mb 64 --workers 1,2
    python benchmarks/bench_prepare.py --quick     # 8 MB, one worker
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from _harness import Row, print_table, write_repeated


def stdlib_texts() -> list[str]:
    """Source of every stdlib .py file (sorted by path) followed by its docstrings."""
    texts = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            source = path.read_bytes().decode("utf-8")
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        texts.append(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and doc.strip():
                    texts.append(doc)
    return [t for t in texts if t.strip()]


def build_corpus(workdir: Path, size_mb: int) -> tuple[Path, Path, int]:
    """(corpus.jsonl, tokenizer.json, documents), cached in `workdir`."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests._support.bpe import train_byte_level_bpe

    corpus = workdir / f"stdlib-{size_mb}mb.jsonl"
    tokenizer = workdir / "tokenizer.json"
    texts = stdlib_texts()
    if not tokenizer.exists():
        print(f"training a byte-level BPE (vocab 16000) on {len(texts):,} stdlib texts ...", flush=True)
        train_byte_level_bpe(texts, 16000, str(tokenizer))
    if not corpus.exists():
        write_repeated(corpus, [json.dumps({"text": t}) + "\n" for t in texts], size_mb * 1_000_000)
    with open(corpus, "rb") as f:
        documents = sum(1 for _ in f)
    return corpus, tokenizer, documents


class MegatronEncoder:
    """Megatron-LM preprocess_data.py's Encoder: a tokenizer per worker, one json line per call."""

    def __init__(self, tokenizer_path: str) -> None:
        self.tokenizer_path = tokenizer_path

    def initializer(self) -> None:
        import tokenizers

        MegatronEncoder.tokenizer = tokenizers.Tokenizer.from_file(self.tokenizer_path)
        MegatronEncoder.eod = MegatronEncoder.tokenizer.token_to_id("<|endoftext|>")

    def encode(self, json_line: str):
        data = json.loads(json_line)
        ids, lens = {}, {}
        for key in ("text",):
            doc_ids, sentence_lens = [], []
            sentence_ids = MegatronEncoder.tokenizer.encode(data[key]).ids
            if len(sentence_ids) > 0:
                doc_ids.extend(sentence_ids)
                sentence_lens.append(len(sentence_ids))
            if len(doc_ids) > 0:  # --append-eod
                doc_ids.append(MegatronEncoder.eod)
                sentence_lens[-1] += 1
            ids[key], lens[key] = doc_ids, sentence_lens
        return ids, lens, len(json_line)


def run_megatron(corpus: Path, tokenizer: Path, out_prefix: str, workers: int) -> float:
    """Megatron's process_json_file for one input and the "text" key; returns seconds."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    start = time.perf_counter()
    encoder = MegatronEncoder(str(tokenizer))
    import tokenizers

    vocab_size = tokenizers.Tokenizer.from_file(str(tokenizer)).get_vocab_size(with_added_tokens=True)
    dtype = np.uint16 if vocab_size < 65500 else np.int32  # DType.optimal_dtype
    with open(corpus, encoding="utf-8") as fin:
        pool = multiprocessing.Pool(workers, initializer=encoder.initializer)
        encoded_docs = pool.imap(encoder.encode, fin, 32)
        builder = IndexedDatasetBuilder(out_prefix + ".bin", dtype=dtype)
        total_bytes = 0
        for doc, sentence_lens, bytes_processed in encoded_docs:
            total_bytes += bytes_processed
            builder.add_document(torch.IntTensor(doc["text"]), sentence_lens["text"])
        builder.finalize(out_prefix + ".idx")
        pool.close()
        pool.join()
    return time.perf_counter() - start


def run_tokenport(corpus: Path, tokenizer: Path, engine: str, output: str, workers: int) -> float:
    """Seconds of one `prepare` of `corpus` with the tokenizer.json run by `engine` (its tokenizer_engine)."""
    from tokenport.corpus import PrepareConfig, prepare

    start = time.perf_counter()
    config = PrepareConfig([str(corpus)], output, tokenizer=f"hf:{tokenizer}", tokenizer_engine=engine, workers=workers)
    result = prepare(config)
    assert len(result.parts) == 1
    return time.perf_counter() - start


def same_stores(a: str, b: str) -> tuple[bool, bool]:
    """(same token ids and document boundaries, byte-identical .bin and .idx)."""
    import numpy as np

    from tokenport.indexed import IndexedDataset

    with IndexedDataset(a) as x, IndexedDataset(b) as y:
        ids = (
            np.array_equal(x.sequence_lengths, y.sequence_lengths)
            and np.array_equal(x.document_indices, y.document_indices)
            and np.array_equal(x.get_many(np.arange(len(x)))[0], y.get_many(np.arange(len(y)))[0])
        )
    files = all(Path(a + s).read_bytes() == Path(b + s).read_bytes() for s in (".bin", ".idx"))
    return ids, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=64, help="corpus size in MB (default 64)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument(
        "--workdir",
        default=os.path.join(tempfile.gettempdir(), "tokenport-bench-prepare"),
        help="where the corpus, tokenizer and outputs go (kept, to reuse the corpus)",
    )
    parser.add_argument(
        "--engines",
        default="hf,auto",
        help="prepare's tokenizer_engine values for the same hf: tokenizer.json (default hf,auto: HF "
        "tokenizers forced, and the default, gigatoken where it gives HF's ids)",
    )
    parser.add_argument(
        "--tokenizer-threads",
        action="store_true",
        help="let the tokenizer use its own threads (default: one thread per worker process)",
    )
    parser.add_argument("--quick", action="store_true", help="8 MB and one worker (overrides --size-mb, --workers)")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.workers = 8, "1"
    if not args.tokenizer_threads:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # every worker process gets one core, for both tools
        os.environ["RAYON_NUM_THREADS"] = "1"
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, tokenizer, documents = build_corpus(workdir, args.size_mb)
    size = corpus.stat().st_size
    print(f"corpus {corpus} : {size / 1e6:.1f} MB, {documents:,} documents; tokenizer {tokenizer}")
    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}; "
        f"tokenizer threads: {'tokenizer default' if args.tokenizer_threads else '1 per process'}"
    )
    header = f"{'tool':<28}{'workers':>8}{'seconds':>9}{'docs/s':>10}{'MB/s':>8}{'MB/s/wkr':>10}{'vs megatron':>13}"
    print(header)
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        megatron_prefix = str(workdir / f"megatron-w{workers}")
        seconds = run_megatron(corpus, tokenizer, megatron_prefix, workers)
        base = documents / seconds
        print(
            f"{'megatron preprocess_data':<28}{workers:>8}{seconds:>9.2f}{base:>10,.0f}{size / 1e6 / seconds:>8.2f}"
            f"{size / 1e6 / seconds / workers:>10.2f}{1.0:>12.2f}x",
            flush=True,
        )
        for engine in args.engines.split(","):
            output = workdir / f"tokenport-{engine}-w{workers}"
            if output.exists():
                import shutil

                shutil.rmtree(output)
            seconds = run_tokenport(corpus, tokenizer, engine, str(output), workers)
            rate = documents / seconds
            ids, files = same_stores(megatron_prefix, str(output / "part-00000"))
            print(
                f"{'tokenport prepare (' + engine + ')':<28}{workers:>8}{seconds:>9.2f}{rate:>10,.0f}"
                f"{size / 1e6 / seconds:>8.2f}{size / 1e6 / seconds / workers:>10.2f}{rate / base:>12.2f}x"
                f"   ids {'identical' if ids else 'DIFFER'}, .bin/.idx {'byte-identical' if files else 'differ'}",
                flush=True,
            )
            if not ids:
                raise SystemExit(f"tokenport ({engine}, {workers} workers) and megatron wrote different token ids")
            case = f"{engine} engine, {workers} worker{'s' if workers > 1 else ''}"
            rows.append(Row("prepare vs preprocess_data", case, "docs/s", rate, base, "megatron", goal=2.0))
    print()
    print_table(rows)


if __name__ == "__main__":
    main()

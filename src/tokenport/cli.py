"""The `tokenport` command: one thin function per verb; the work happens in the library."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, Sequence

from ._version import __version__
from ._files import parse_structured, read_text
from .errors import CorruptStoreError, TokenportError


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.workdir, workers=args.workers, limit=args.limit, echo=print)
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from .errors import ConfigError
    from .corpus import PrepareConfig, prepare

    if args.shard_tokens is not None and args.shard_by != "tokens":
        raise ConfigError("--shard-tokens sizes parts only with --shard-by tokens; add --shard-by tokens, "
                          "or drop --shard-tokens to get one part per input file")

    options = {
        "tokenizer": args.tokenizer,
        "text_key": args.text_key,
        "append_eod": not args.no_eod,
        "shard_by": args.shard_by,
        "shard_tokens": args.shard_tokens,
        "on_error": args.on_error,
        "workers": args.workers,
        "max_chars_per_piece": args.max_chars_per_piece,
    }
    given = {name: value for name, value in options.items() if value is not None}
    if args.steps:
        steps = parse_structured(read_text(args.steps, "steps file"), args.steps)
        given["steps"] = steps.get("steps", steps) if isinstance(steps, dict) else steps
    if args.keep_rejected:
        given["keep_rejected"] = True
    if args.allow_empty:
        given["allow_empty"] = True
    if args.executor != "local":
        given["executor"], given["ray_address"] = args.executor, args.address
    config = PrepareConfig(inputs=tuple(args.inputs), output=args.output, **given)
    result = prepare(config, progress=not args.quiet)
    print(result.summary())
    return 0


def _report(args: argparse.Namespace) -> int:
    from .corpus.run.report import load_report

    report = load_report(args.output)
    print(report.render())
    if args.html:
        page = report.html()  # rendered first: a failure leaves no half-written file
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"HTML report written to {args.html}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .indexed import resolve_stores
    from .indexed.inspect import render, summarize

    for prefix in resolve_stores(args.prefixes):
        print(render(summarize(prefix, documents=args.documents)))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .indexed import resolve_stores, verify

    status = 0
    for prefix in resolve_stores(args.prefixes):
        try:
            report = verify(prefix, checksums=not args.no_checksums)
        except CorruptStoreError as exc:
            print(f"FAIL {prefix}: {exc}", file=sys.stderr)
            status = 1
            continue
        print(
            f"ok   {report.prefix}: {report.sequences:,} sequences, {report.documents:,} documents, "
            f"{report.tokens:,} tokens ({report.dtype}); checksums {report.checksums}"
        )
    return status


def _merge(args: argparse.Namespace) -> int:
    from .indexed import IndexedDataset, merge

    from .indexed import resolve_stores

    inputs = resolve_stores(args.inputs, what="merge input")
    prefix = merge(args.output, inputs, overwrite=args.force)
    with IndexedDataset(prefix) as ds:
        print(f"merged {len(inputs)} stores into {prefix}: {len(ds):,} sequences, {ds.num_tokens:,} tokens")
    return 0


def _build_cache(args: argparse.Namespace) -> int:
    from .builder.plan import build_cache, load_cache_plan

    plan = load_cache_plan(args.plan)

    def report(entry) -> None:
        action = "built" if entry.built else "found"
        target = f" -> {entry.key[:16]}" if entry.key else ""
        print(f"{action} {entry.dataset} [{entry.split}] {entry.samples:,} samples "
              f"in {entry.seconds * 1000:,.1f} ms{target}")

    entries = build_cache(plan, report=report)
    built = sum(entry.built for entry in entries)
    print(f"{len(entries)} index sets in {plan.cache_dir}: {built} built, {len(entries) - built} already there")
    return 0


def _blend(args: argparse.Namespace) -> int:
    from .builder import load_blend_spec
    from .builder.report import blend_report, plot_blend
    from .builder.specs import BlendSpec, blend_from_arguments

    if len(args.spec) == 1 and args.spec[0].endswith((".yaml", ".yml", ".json")):
        spec = load_blend_spec(args.spec[0])
    else:
        spec = BlendSpec(blend=blend_from_arguments(args.spec))
    for report in blend_report(spec, args.size, seq_length=args.seq_length, algorithm=args.algorithm):
        print(report.render())
    if args.plot:
        plot_blend(spec, args.size, args.plot, algorithm=args.algorithm)
        print(f"plot written to {args.plot}")
    return 0


def _pack_report(args: argparse.Namespace) -> int:
    from ._jit import announce_compilation
    from .indexed import resolve_stores
    from .indexed.inspect import lengths_of
    from .sampling.report import batching_report, render_batching_report

    announce_compilation(["tokenport.packing.balance", "tokenport.packing.bins", "tokenport.sampling.length_grouping"])

    report = batching_report(lengths_of(resolve_stores(args.prefixes)), args.batch_size, capacity=args.capacity,
                             num_ranks=args.ranks, seed=args.seed)
    print(render_batching_report(report))
    return 0


_STORES_HELP = ("stores: prefixes, URLs, their .bin/.idx/.json files (a glob's files name one store) "
                "or prepare output directories (their parts, in order); each store once")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenport", description="The data layer for LLM training.")
    parser.add_argument("--version", action="version", version=f"tokenport {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, run: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    demo = verb("demo", _demo, "prepare, verify and inspect the standard library's source and docstrings")
    demo.add_argument("--workdir", default="tokenport-demo", help="where the corpus and stores go")
    demo.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    demo.add_argument("--limit", type=int, default=None, help="use only the first N source files")

    prep = verb("prepare", _prepare, "tokenize raw corpora (jsonl[.gz|.zst], parquet, text) into token stores")
    prep.add_argument("inputs", nargs="+", help="files, directories, globs or fsspec URLs")
    prep.add_argument("-o", "--output", required=True, help="output directory")
    prep.add_argument("--tokenizer", default="byte", help="byte | hf:PATH | tiktoken:PATH | sentencepiece:PATH")
    prep.add_argument("--text-key", default="text", help="the JSON/parquet field holding the text")
    prep.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    prep.add_argument("--no-eod", action="store_true", help="do not append the end-of-document token")
    prep.add_argument("--shard-by", choices=("file", "tokens"), default="file", help="one store per input file, or by size")
    prep.add_argument("--shard-tokens", type=int, default=None, help="tokens per output store (--shard-by tokens)")
    prep.add_argument("--max-chars-per-piece", type=int, default=None, help="split longer documents before tokenizing")
    prep.add_argument("--on-error", choices=("stop", "skip"), default="stop", help="what malformed input does")
    prep.add_argument("--steps", default=None,
                      help='cleaning steps file (JSON, or YAML): a list of {"step": KIND, ...}, or {"steps": [...]}')
    prep.add_argument("--executor", choices=("local", "ray"), default="local",
                      help="local worker processes, or one Ray task per unit (the output directory must be shared)")
    prep.add_argument("--address", default=None, help="Ray cluster address for --executor ray (e.g. auto)")
    prep.add_argument("--keep-rejected", action="store_true",
                      help="write documents the steps dropped, with step and reason, to OUTPUT/rejected/")
    prep.add_argument("--allow-empty", action="store_true",
                      help="succeed even when no document is left (by default that is an error)")
    prep.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    rep = verb("report", _report, "what a prepare run did: totals, each step's removals by reason, kept lengths")
    rep.add_argument("output", help="the output directory of a finished prepare run")
    rep.add_argument("--html", default=None, help="also write a self-contained HTML page with charts here")

    insp = verb("inspect", _inspect, "show counts, length percentiles and the first documents of stores")
    insp.add_argument("prefixes", nargs="+", help=_STORES_HELP)
    insp.add_argument("--documents", type=int, default=3, help="how many documents to show")

    ver = verb("verify", _verify, "check stores' structure and checksums; exit 1 on the first fault")
    ver.add_argument("prefixes", nargs="+", help=_STORES_HELP)
    ver.add_argument("--no-checksums", action="store_true", help="structure only (fast)")

    cache = verb("build-cache", _build_cache, "build every GPT index a run needs into the index cache, offline")
    cache.add_argument("plan", help="plan file (JSON, or YAML): cache_dir, datasets or spec, split, samples, seq_length, seed")

    blend = verb("blend", _blend, "show what a blend takes from each dataset: shares, samples, epochs, deviation")
    blend.add_argument("spec", nargs="+", help="a spec file (.yaml/.json), or Megatron's list: W1 STORE1 W2 STORE2 ..., "
                       "or stores weighted by size (" + _STORES_HELP + ")")
    blend.add_argument("--size", type=int, required=True, help="samples to blend")
    blend.add_argument("--seq-length", type=int, default=4096, help="tokens per sample, for the epochs column")
    blend.add_argument("--algorithm", choices=("tijdeman", "greedy", "megatron"), default="tijdeman")
    blend.add_argument("--plot", default=None, help="also draw achieved vs target share into this PNG (matplotlib)")

    pack = verb("pack-report", _pack_report,
                "padding of random vs length-grouped batches, packing efficiency and rank balance of stores")
    pack.add_argument("prefixes", nargs="+", help=_STORES_HELP + ", whose sequence lengths to batch")
    pack.add_argument("--batch-size", type=int, default=8, help="micro-batch size")
    pack.add_argument("--capacity", type=int, default=4096, help="tokens per packed bin")
    pack.add_argument("--ranks", type=int, default=8, help="data-parallel ranks to balance across")
    pack.add_argument("--seed", type=int, default=0)

    mer = verb("merge", _merge, "concatenate stores into one, streaming")
    mer.add_argument("output", help="the output prefix")
    mer.add_argument("inputs", nargs="+", help=_STORES_HELP + ", in order")
    mer.add_argument("--force", action="store_true", help="replace the output store if it exists")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.run(args)
    except TokenportError as exc:
        print(f"tokenport: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path that cannot be read or written: one line, no traceback
        if exc.filename is None:
            print(f"tokenport: error: {exc.strerror or exc}", file=sys.stderr)
        else:
            target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
            print(f"tokenport: error: {exc.filename}{target}: {exc.strerror or exc}; check the path and its "
                  "permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tokenport: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

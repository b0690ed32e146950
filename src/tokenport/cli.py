"""The `tokenport` command: one thin function per verb; the work happens in the library."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import logging
import sys
from collections.abc import Callable, Sequence
from collections.abc import Sequence as SequenceABC
from typing import Any

from ._version import __version__
from .errors import TokenportError


def _emit(args: argparse.Namespace, reports: Sequence[Any], *, many: bool) -> None:
    """Print reports as text (render()), or with --json their to_json() (a list when the verb takes many)."""
    if args.json:
        print(json.dumps([r.to_json() for r in reports] if many else reports[0].to_json(), indent=2))
    else:
        for report in reports:
            print(report.render())


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options the user gave (argparse default None): the rest keep the library's defaults."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.workdir, workers=args.workers, limit=args.limit, echo=print)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from .integrations.tracing import trace_file

    _emit(args, [trace_file(args.state, args.step, args.data_parallel_rank)], many=False)
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from .corpus import prepare
    from .corpus.run import config
    from .corpus.run.signals import terminate_as_interrupt

    options = config.options_from_flags(vars(args))
    with terminate_as_interrupt():
        result = prepare(
            config.config_from_options(args.inputs, args.output, options), progress=not args.quiet, overwrite=args.force
        )
    print(json.dumps(result.to_json(), indent=2) if args.json else result.summary())
    return 0


def _report(args: argparse.Namespace) -> int:
    from .corpus.run.report import load_report

    report = load_report(args.output)
    _emit(args, [report], many=False)
    if args.html is not None:
        report.save_html(args.html)
        print(f"HTML report written to {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .indexed import resolve_stores
    from .indexed.inspect import summarize

    _emit(args, [summarize(prefix, **_given(args, "documents")) for prefix in resolve_stores(args.prefixes)], many=True)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .indexed import resolve_stores
    from .indexed.verify import VerifyFailure, check_store

    reports = []
    for prefix in resolve_stores(args.prefixes):
        report = check_store(prefix, checksums=not args.no_checksums)
        reports.append(report)
        if not args.json:  # each store's line as soon as it is checked
            print(report.render(), file=sys.stderr if isinstance(report, VerifyFailure) else sys.stdout)
    if args.json:
        _emit(args, reports, many=True)
    return 1 if any(isinstance(report, VerifyFailure) for report in reports) else 0


def _merge(args: argparse.Namespace) -> int:
    from .indexed import merge, resolve_stores
    from .indexed.merge import merge_report

    inputs = resolve_stores(args.inputs, what="merge input")
    _emit(args, [merge_report(merge(args.output, inputs, overwrite=args.force), len(inputs))], many=False)
    return 0


def _build_cache(args: argparse.Namespace) -> int:
    from .builder.plan import CacheReport, build_cache, load_cache_plan

    plan = load_cache_plan(args.plan)
    entries = build_cache(plan, report=None if args.json else lambda entry: print(entry.render()), workers=args.workers)
    _emit(args, [CacheReport(plan.cache_dir, tuple(entries))], many=False)
    return 0


def _blend(args: argparse.Namespace) -> int:
    from .blend.trajectory import plot_trajectories
    from .builder.report import (
        adaptive_report,
        blend_report,
        blend_spec_or_state,
        has_schedule,
        mixture_report,
        plot_blend,
    )
    from .builder.specs import check_spec_tokenizers

    spec, state = blend_spec_or_state(args.spec, args.state, args.size)
    if spec is not None:
        check_spec_tokenizers(spec, allow_mixed_tokenizers=args.allow_mixed_tokenizers)
    if spec is None:
        trajectories = [adaptive_report(state, where=args.state, **_given(args, "windows"))]
    elif has_schedule(spec):
        trajectories = mixture_report(spec, args.size, **_given(args, "windows", "algorithm"))
    else:
        _emit(args, blend_report(spec, args.size, **_given(args, "seq_length", "algorithm")), many=True)
        if args.plot:
            plot_blend(spec, args.size, args.plot, **_given(args, "algorithm"))
            print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
        return 0
    _emit(args, trajectories, many=True)
    if args.plot:
        plot_trajectories(trajectories, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _pack_report(args: argparse.Namespace) -> int:
    from ._jit import announce_compilation
    from .indexed import resolve_stores
    from .indexed.inspect import lengths_of
    from .sampling.report import batching_report

    announce_compilation(["tokenport.packing.balance", "tokenport.packing.bins", "tokenport.sampling.length_grouping"])
    lengths = lengths_of(resolve_stores(args.prefixes))
    report = batching_report(lengths, args.batch_size, **_given(args, "capacity", "data_parallel_size", "seed"))
    _emit(args, [report], many=False)
    return 0


class _Constant(SequenceABC):
    """A library constant, imported when argparse first reads it (a value to check, a verb's --help),
    so building the parser loads no room and `tokenport --help` stays fast."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def _values(self) -> Sequence[str]:
        values: Sequence[str] = getattr(importlib.import_module(self.module), self.name)
        return values

    def __getitem__(self, index: Any) -> Any:
        return self._values()[index]

    def __len__(self) -> int:
        return len(self._values())


_ALGORITHMS = _Constant("tokenport.blend.indices", "ALGORITHMS")
_DEFAULT = "{default}"  # in help: filled with the verb's library default of the flag


class _Formatter(argparse.HelpFormatter):
    """Help text completed from the library when a verb's help is shown: in place of {default} the
    default of the same-named parameter of the verb's library call."""

    def __init__(self, prog: str, library: tuple[str, str] | None = None) -> None:
        super().__init__(prog)
        self.library = library

    def _expand_help(self, action: argparse.Action) -> str:
        text = super()._expand_help(action)
        if _DEFAULT in text and self.library is not None:
            defaults = _library_defaults(*self.library)
            if action.dest in defaults:
                text = text.replace(_DEFAULT, repr(defaults[action.dest]))
        return text


def _library_defaults(module: str, name: str) -> dict[str, Any]:
    """The defaults of the parameters of the function or config dataclass ``module.name``."""
    target = getattr(importlib.import_module(module), name)
    if dataclasses.is_dataclass(target):
        return {
            f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(target)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }
    return {name: p.default for name, p in inspect.signature(target).parameters.items() if p.default is not p.empty}


_STORES_HELP = (
    "stores: prefixes, URLs, their .bin/.idx/.json files (a glob's files name one store) "
    "or prepare output directories (their parts, in order); each store once"
)


def _chatter(parser: argparse.ArgumentParser, default: Any) -> None:
    """-v/-q, before or after the verb: the verb's copies default to SUPPRESS so they do not undo the root's."""
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", default=default, help="log progress details")
    loud.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no progress bars (warnings still show)"
    )


# -- each verb's flags -------------------------------------------------------------------------------


def _demo_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--workdir", default="tokenport-demo", help="where the corpus and stores go")
    sub.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    sub.add_argument("--limit", type=int, default=None, help="use only the first N source files")


def _prepare_flags(sub: argparse.ArgumentParser) -> None:
    """The verb's own arguments, then one flag per declared prepare option (plugins' too)."""
    from .corpus.run.config import prepare_options

    sub.add_argument("inputs", nargs="+", help="files, directories, globs or fsspec URLs")
    sub.add_argument("-o", "--output", required=True, help="output directory")
    sub.add_argument(
        "--force",
        action="store_true",
        help="replace an output (finished or not) of other settings or of inputs that changed since",
    )
    for name, option in prepare_options():
        if option.flag is None:
            continue
        if option.switch is not None:
            action = "store_true" if option.switch else "store_false"
            sub.add_argument(option.flag, dest=name, action=action, default=None, help=option.help)
        else:
            sub.add_argument(
                option.flag,
                dest=name,
                type=option.parse or str,
                choices=option.allowed(),
                metavar=option.metavar,
                default=None,
                help=option.help,
            )


def _report_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("output", help="the output directory of a finished prepare run")
    sub.add_argument("--html", default=None, help="also write a self-contained HTML page with charts here")


def _inspect_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("prefixes", nargs="+", help=_STORES_HELP)
    sub.add_argument("--documents", type=int, default=None, help="how many documents to show (default: {default})")


def _verify_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("prefixes", nargs="+", help=_STORES_HELP)
    sub.add_argument("--no-checksums", action="store_true", help="structure only (fast)")


def _build_cache_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "plan", help="plan file (JSON, or YAML): cache_dir, datasets or spec, split, samples, seq_length, seed"
    )
    sub.add_argument(
        "--workers", type=int, default=1, help="processes building indices: stores of a plan, children of a blend"
    )


def _blend_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "spec",
        nargs="*",
        help="a spec file (.yaml/.yml/.json), or Megatron's list: "
        "W1 STORE1 W2 STORE2 ..., or stores weighted by size (" + _STORES_HELP + ")",
    )
    sub.add_argument("--size", type=int, default=None, help="samples to blend (with a spec)")
    sub.add_argument(
        "--state",
        default=None,
        help="a saved StatefulLoader.state_dict() (JSON) over an AdaptiveBlend, in place of a spec",
    )
    sub.add_argument(
        "--windows",
        type=int,
        default=None,
        help="windows of the run a changing mixture is reported in (default: 10)",
    )
    sub.add_argument(
        "--seq-length", type=int, default=None, help="tokens per sample, for the epochs column (default: {default})"
    )
    sub.add_argument(
        "--algorithm", choices=_ALGORITHMS, metavar="ALGORITHM", default=None, help="%(choices)s (default: {default})"
    )
    sub.add_argument("--plot", default=None, help="also draw achieved vs target share into this PNG (matplotlib)")
    sub.add_argument(
        "--allow-mixed-tokenizers",
        action="store_true",
        help="blend stores prepared with different tokenizers (only for tokenizers known to share ids)",
    )


def _pack_report_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("prefixes", nargs="+", help=_STORES_HELP + ", whose sequence lengths to batch")
    sub.add_argument("--batch-size", type=int, default=8, help="micro-batch size (default: %(default)s)")
    sub.add_argument("--capacity", type=int, default=None, help="tokens per packed bin (default: {default})")
    sub.add_argument(
        "--ranks",
        dest="data_parallel_size",
        metavar="RANKS",
        type=int,
        default=None,
        help="data-parallel ranks to balance across (default: {default})",
    )
    sub.add_argument("--seed", type=int, default=None, help="seed of the random order (default: {default})")


def _trace_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "state", metavar="CHECKPOINT_OR_STATE", help="a JSON loader state, or a torch checkpoint holding one"
    )
    sub.add_argument("--step", type=int, required=True, help="the step: 0 is the first batch handed to the trainer")
    sub.add_argument(
        "--data-parallel-rank",
        "--rank",
        action=_Renamed,
        type=int,
        default=None,
        help="one data-parallel rank (default: every rank; --rank is its old spelling)",
    )


class _Renamed(argparse.Action):
    """A flag's value under its new spelling (the first); its old spelling works for one release, with a warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        if option != self.option_strings[0]:
            print(f"tokenport: warning: {option} is deprecated; use {self.option_strings[0]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _merge_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("output", help="the output prefix")
    sub.add_argument("inputs", nargs="+", help=_STORES_HELP + ", in order")
    sub.add_argument("--force", action="store_true", help="replace the output store if it exists")


@dataclasses.dataclass(frozen=True)
class _Verb:
    """A verb: its function, its one-line help, its flags; ``library`` (module, name) is the call whose
    defaults its flags leave to it; ``reports`` adds --json."""

    run: Callable[[argparse.Namespace], int]
    help: str
    flags: Callable[[argparse.ArgumentParser], None]
    reports: bool = True
    library: tuple[str, str] | None = None


_VERBS = {
    "demo": _Verb(
        _demo, "prepare, verify and inspect the standard library's source and docstrings", _demo_flags, reports=False
    ),
    "prepare": _Verb(
        _prepare,
        "tokenize raw corpora (jsonl[.gz|.zst], parquet, text) into token stores",
        _prepare_flags,
        library=("tokenport.corpus.run.config", "PrepareConfig"),
    ),
    "report": _Verb(
        _report, "what a prepare run did: totals, each step's removals by reason, kept lengths", _report_flags
    ),
    "inspect": _Verb(
        _inspect,
        "show counts, length percentiles and the first documents of stores",
        _inspect_flags,
        library=("tokenport.indexed.inspect", "summarize"),
    ),
    "verify": _Verb(_verify, "check stores' structure and checksums; exit 1 if any store fails", _verify_flags),
    "build-cache": _Verb(
        _build_cache, "build every GPT index a run needs into the index cache, offline", _build_cache_flags
    ),
    "blend": _Verb(
        _blend,
        "show what a blend takes from each dataset: shares, samples, epochs, deviation; a scheduled "
        "or adaptive (--state) blend's target vs realized share over the run",
        _blend_flags,
        library=("tokenport.builder.report", "blend_report"),
    ),
    "pack-report": _Verb(
        _pack_report,
        "padding of random vs length-grouped batches, packing efficiency and rank balance of stores",
        _pack_report_flags,
        library=("tokenport.sampling.report", "batching_report"),
    ),
    "trace": _Verb(
        _trace, "which documents made a training step: its samples' stores, documents and tokens", _trace_flags
    ),
    "merge": _Verb(_merge, "concatenate stores into one, streaming", _merge_flags),
}


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with `only`, only the flags of the verb so named (none for "") are built,
    so a verb (or the bare command's --help) loads no room it does not use."""
    parser = argparse.ArgumentParser(
        prog="tokenport", description="The data layer for LLM training.", formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"tokenport {__version__}")
    _chatter(parser, False)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, verb in _VERBS.items():
        sub = verbs.add_parser(
            name,
            help=verb.help,
            description=verb.help,
            formatter_class=functools.partial(_Formatter, library=verb.library),
        )
        sub.set_defaults(run=verb.run, json=False)
        _chatter(sub, argparse.SUPPRESS)
        if verb.reports:
            sub.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
        if only is None or only == name:
            verb.flags(sub)
    return parser


def _verb_in(argv: Sequence[str]) -> str:
    """The verb of a command line: its first word that is not an option (the command's own take no
    value); "" when there is none (``tokenport --help``), so no verb's flags are built."""
    return next((word for word in argv if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: this process's arguments); the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = _parser(_verb_in(argv))  # prepare's flags load the plugins that add options
        args = parser.parse_args(argv)
    except TokenportError as exc:
        return _failed(exc)
    if args.verbose and args.quiet:  # one before the verb, the other after it
        parser.error("-v/--verbose and -q/--quiet contradict each other: give one")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.run(args)
    except (TokenportError, OSError) as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        print("tokenport: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def _failed(exc: TokenportError | OSError) -> int:
    """Exit status 2 with one line, no traceback: a TokenportError's message, or the path an OSError names."""
    if isinstance(exc, TokenportError) or exc.filename is None:
        print(f"tokenport: error: {exc if isinstance(exc, TokenportError) else exc.strerror or exc}", file=sys.stderr)
    else:  # a path that cannot be read or written
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        print(
            f"tokenport: error: {exc.filename}{target}: {exc.strerror or exc}; check the path and its permissions",
            file=sys.stderr,
        )
    return 2


if __name__ == "__main__":
    sys.exit(main())

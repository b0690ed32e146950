"""The `tokenport` command's parser: each verb's flags, help completed from the library, built lazily."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from collections.abc import Sequence as SequenceABC
from typing import Any

from .._version import __version__
from . import verbs


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

    def __init__(self, prog: str, library: tuple[str, str] | None = None, width: int | None = None) -> None:
        super().__init__(prog, width=width)
        self.library = library

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """An epilog of several lines (a list) as written; a one-line description wrapped."""
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

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


_DEMO_STAGES = """\
stages (each prints a "== N. name" header):
   1. corpus: the Python standard library's source files and docstrings
   2. prepare: tokenize with the built-in byte-level tokenizer into .bin/.idx stores
   3. verify: structure of every .idx, sizes, and the manifests' checksums
   4. inspect: what a store holds
   5. merge and read: one store of both datasets, random and batched reads
   6. samples: documents -> fixed-length GPT samples (Megatron's split and indices, cached)
   7. blend: code and prose by weight, exact at every prefix (Tijdeman's schedule)
   8. sampling: length grouping, best-fit packing, rank balance, exact and elastic resume
   9. dock: RL experience between stages (rollout -> reward -> advantages -> 2 training ranks)
  10. clean: quality filters, line corrections, PII scrubbing and fuzzy dedup inside prepare
  11. train: a tiny decoder-only model on the code/prose blend, checkpointed mid-way and resumed
  12. sft: conversations about stdlib functions -> chat store with loss masks -> packed samples
  13. mix: code, docstrings and documentation prose, weighted by what the model is learning (ADO)
  14. grpo: a tiny policy learns small sums from a verifiable reward, its stages meeting in the dock
  15. account: the steps a docstring trained, and taking it down mid-run without reshuffling
"""


def _demo_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "-o",
        "--output",
        "--workdir",
        action=_Renamed,
        default="tokenport-demo",
        metavar="DIR",
        help="where the corpus, stores and checkpoints go (default: %(default)s; --workdir is its old spelling)",
    )
    sub.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    sub.add_argument("--limit", type=int, default=None, help="use only the first N source files")


def _prepare_flags(sub: argparse.ArgumentParser) -> None:
    """The verb's own arguments, then one flag per declared prepare option (plugins' too)."""
    from ..corpus.run.config import prepare_options

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
    sub.add_argument(
        "--html",
        default=None,
        metavar="PAGE.html",
        help="also write a self-contained HTML page with charts here (a side product: the report still prints)",
    )


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
        "-o",
        "--output",
        default=None,
        metavar="DIR",
        help="the index cache to build into (default: the plan's cache_dir)",
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
    sub.add_argument(
        "--size",
        type=int,
        default=None,
        help="samples to blend, with a spec (default: one epoch: the stores' tokens / --seq-length)",
    )
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
    _blend_output_flags(sub)


def _blend_output_flags(sub: argparse.ArgumentParser) -> None:
    """blend's flags on how the blend is drawn and shown."""
    sub.add_argument(
        "--seq-length",
        type=int,
        default=None,
        help="tokens per sample, for the epochs column and the default --size (default: {default})",
    )
    sub.add_argument(
        "--algorithm", choices=_ALGORITHMS, metavar="ALGORITHM", default=None, help="%(choices)s (default: {default})"
    )
    sub.add_argument(
        "--plot",
        default=None,
        metavar="PLOT.png",
        help="also draw achieved vs target share into this PNG (a side product: the table still prints; "
        "needs pip install 'tokenport[plot]')",
    )
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
    _store_path_flag(sub)


def _store_path_flag(sub: argparse.ArgumentParser) -> None:
    """--store-path OLD=NEW, repeatable: where a store the run recorded is now (trace, where, audit)."""
    sub.add_argument(
        "--store-path",
        dest="stores",
        metavar="OLD=NEW",
        action="append",
        type=_store_move,
        default=None,
        help="a store that moved since the run: its recorded prefix OLD is now at NEW (repeat per store)",
    )


def _store_move(text: str) -> tuple[str, str]:
    """``OLD=NEW`` of --store-path, split at its first '='; both sides needed."""
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not OLD=NEW: give the prefix the state records, '=', and where the store is now, "
            "e.g. --store-path /old/stores/prose=/new/stores/prose"
        )
    return old, new


class _Renamed(argparse.Action):
    """A flag's value under its new spellings; its old spelling (the last) works for one release, with a warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        if option == self.option_strings[-1]:
            print(f"tokenport: warning: {option} is deprecated; use {self.option_strings[-2]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _merge_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="the output store's prefix (the old form `merge OUT IN...` works for one release, with a warning)",
    )
    sub.add_argument("inputs", nargs="+", metavar="IN", help=_STORES_HELP + ", in order")
    sub.add_argument("--force", action="store_true", help="replace the output store if it exists")


def _where_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "state", metavar="CHECKPOINT_OR_STATE", help="a JSON loader state, or a torch checkpoint holding one"
    )
    sub.add_argument(
        "--store",
        required=True,
        help="the store the document is in, as the run recorded it (with --id: the prepare output directory)",
    )
    sub.add_argument(
        "--document",
        dest="documents",
        metavar="N",
        action="append",
        type=int,
        default=None,
        help="a document id in the store (repeatable)",
    )
    sub.add_argument(
        "--text", metavar="T", default=None, help="find the store's documents containing this text (scans the store)"
    )
    sub.add_argument(
        "--id",
        dest="identifiers",
        metavar="ID",
        action="append",
        default=None,
        help="the input documents prepare recorded with this identifier (repeatable; --store names the prepare "
        "output directory)",
    )
    sub.add_argument(
        "--up-to-step",
        metavar="K",
        type=int,
        default=None,
        help="the last step to report (default: the whole planned run)",
    )
    _store_path_flag(sub)


def _audit_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "states",
        nargs="+",
        metavar="CHECKPOINT_OR_STATE",
        help="JSON loader states or torch checkpoints holding one, of one run, in step order",
    )
    _store_path_flag(sub)


def _why_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("output", metavar="OUTPUT", help="a prepare output directory")
    asked = sub.add_mutually_exclusive_group(required=True)
    asked.add_argument(
        "--input",
        metavar="FILE:LINE",
        help="the input document at this line of FILE (jsonl from 1, parquet rows from 0)",
    )
    asked.add_argument("--text", metavar="TEXT", help="the input documents with exactly this text")
    asked.add_argument(
        "--id",
        dest="identifiers",
        metavar="ID",
        action="append",
        help="the input documents recorded with this identifier (prepare's --id-field; repeatable)",
    )


def _takedown_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "state", metavar="CHECKPOINT_OR_STATE", help="a JSON loader state, or a torch checkpoint holding one"
    )
    sub.add_argument("--store", default=None, help="the store the documents are in, as the run recorded it")
    sub.add_argument(
        "--document",
        dest="documents",
        metavar="N",
        nargs="+",
        action="extend",
        type=int,
        default=None,
        help="document ids in the store",
    )
    sub.add_argument("--where", metavar="WHERE.json", default=None, help="what `tokenport where --json` printed")
    sub.add_argument("-o", "--output", required=True, metavar="NEW_STATE", help="the new state's JSON file")
    sub.add_argument("--force", action="store_true", help="replace NEW_STATE if it exists (never the state read)")
    _store_path_flag(sub)


@dataclasses.dataclass(frozen=True)
class _Verb:
    """A verb: its function, its one-line help, its flags; ``library`` (module, name) is the call whose
    defaults its flags leave to it; ``reports`` adds --json."""

    run: Callable[[argparse.Namespace], int]
    help: str
    flags: Callable[[argparse.ArgumentParser], None]
    reports: bool = True
    library: tuple[str, str] | None = None
    epilog: str | None = None
    shape: str = "the report"  # what --json prints, named in its help


_VERBS = {
    "demo": _Verb(
        verbs._demo,
        "a tour on the standard library's source and docstrings: prepare, verify, inspect, blend, "
        "sample, clean, train and resume, RL experience",
        _demo_flags,
        reports=False,
        epilog=_DEMO_STAGES,
    ),
    "prepare": _Verb(
        verbs._prepare,
        "tokenize raw corpora (jsonl[.gz|.zst], parquet, text) into token stores",
        _prepare_flags,
        library=("tokenport.corpus.run.config", "PrepareConfig"),
    ),
    "report": _Verb(
        verbs._report, "what a prepare run did: totals, each step's removals by reason, kept lengths", _report_flags
    ),
    "inspect": _Verb(
        verbs._inspect,
        "show counts, length percentiles and the first documents of stores",
        _inspect_flags,
        library=("tokenport.indexed.inspect", "summarize"),
        shape='{"stores": [each store\'s summary], "total": {stores, documents, sequences, tokens}}',
    ),
    "verify": _Verb(
        verbs._verify,
        "check stores' structure and checksums; exit 1 if any store fails",
        _verify_flags,
        shape='{"stores": [each store\'s verdict], "total": {stores, failed}}',
    ),
    "build-cache": _Verb(
        verbs._build_cache, "build every GPT index a run needs into the index cache, offline", _build_cache_flags
    ),
    "blend": _Verb(
        verbs._blend,
        "show what a blend takes from each dataset: shares, samples, epochs, deviation; a scheduled "
        "or adaptive (--state) blend's target vs realized share over the run",
        _blend_flags,
        library=("tokenport.builder.report", "blend_report"),
        shape='{"blends": [each blend\'s rows]}, or {"trajectories": [...]} for a scheduled or adaptive blend',
    ),
    "pack-report": _Verb(
        verbs._pack_report,
        "padding of random vs length-grouped batches, packing efficiency and rank balance of stores",
        _pack_report_flags,
        library=("tokenport.sampling.report", "batching_report"),
    ),
    "trace": _Verb(
        verbs._trace, "which documents made a training step: its samples' stores, documents and tokens", _trace_flags
    ),
    "merge": _Verb(verbs._merge, "concatenate stores into one, streaming", _merge_flags),
    "where": _Verb(
        verbs._where,
        "where a document was trained: every step, rank, slot and token range that held it",
        _where_flags,
        shape='{"source", "store", "documents", "steps_trained", "steps_covered", "replayed", "places": [...], '
        '"removed": [{document, step}]}',
    ),
    "why": _Verb(
        verbs._why,
        "what prepare did with one input document: kept (as which part and document) or dropped (by which "
        "step, why, duplicating what), and how it was changed",
        _why_flags,
        library=("tokenport.corpus.run.why", "why"),
    ),
    "audit": _Verb(
        verbs._audit,
        "check a run's checkpoints against their receipts and each other: skipped or repeated steps, other "
        "data; prints the first divergence, exit 1 if any",
        _audit_flags,
        shape='{"consistent", "states": [{source, steps}], "divergence": {source, step, what} or null}',
    ),
    "takedown": _Verb(
        verbs._takedown,
        "remove documents from a run in progress: a new state whose loader hides their tokens from the next step on",
        _takedown_flags,
        shape='{"source", "output", "removals": [{store, identity, documents, consumed_samples, step}]}',
    ),
}


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with `only`, only the flags of the verb so named (none for "") are built,
    so a verb (or the bare command's --help) loads no room it does not use."""
    parser = argparse.ArgumentParser(
        prog="tokenport", description="The data layer for LLM training.", formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"tokenport {__version__}")
    _chatter(parser, False)
    subparsers = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, verb in _VERBS.items():
        sub = subparsers.add_parser(
            name,
            help=verb.help,
            description=verb.help,
            epilog=verb.epilog,
            formatter_class=functools.partial(_Formatter, library=verb.library),
        )
        sub.set_defaults(run=verb.run, json=False)
        _chatter(sub, argparse.SUPPRESS)
        if verb.reports:
            shape = f"print {verb.shape} as one JSON object instead of text"
            sub.add_argument("--json", action="store_true", help=shape)
        if only is None or only == name:
            verb.flags(sub)
    return parser


def _verb_in(argv: Sequence[str]) -> str:
    """The verb of a command line: its first word that is not an option (the command's own take no
    value); "" when there is none (``tokenport --help``), so no verb's flags are built."""
    return next((word for word in argv if not word.startswith("-")), "")


def verb_parser(parser: argparse.ArgumentParser, verb: str | None) -> argparse.ArgumentParser:
    """The parser of the verb so named (the command's own when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and verb in action.choices:
            chosen: argparse.ArgumentParser = action.choices[verb]
            return chosen
    return parser


def parse(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed command line; an unknown flag is reported with its verb's usage
    (a plain parse_args reports it with the command's), exit status 2."""
    verb = _verb_in(argv)
    parser = _parser(verb)  # prepare's flags load the plugins that add options
    if verb and verb not in _VERBS:
        close = difflib.get_close_matches(verb, _VERBS, n=1)
        hint = f"did you mean `tokenport {close[0]}`? " if close else ""
        parser.error(f"{verb!r} is not a verb: {hint}the verbs are {', '.join(_VERBS)}")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = verb_parser(parser, args.verb)
        sub.error(f"unrecognized arguments: {' '.join(unknown)}; see `{sub.prog} --help`")
    return parser, args

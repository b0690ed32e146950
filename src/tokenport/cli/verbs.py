"""One thin function per verb of the `tokenport` command: read the flags, call the library, print.
Imports here are stdlib or numpy-free ground modules: `tokenport --help` builds the parser from them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._optional import require
from ..errors import ConfigError

_YAML_SUFFIXES = (".yaml", ".yml")


def _emit(args: argparse.Namespace, reports: Sequence[Any], *, key: str | None = None, total: Any = None) -> None:
    """Print reports as text (render()), or with --json ONE object: the report's to_json(), or with
    ``key`` the reports listed under it (and ``total`` beside them when given)."""
    if args.json:
        data = {key: [r.to_json() for r in reports]} if key is not None else reports[0].to_json()
        if total is not None:
            data["total"] = total
        print(json.dumps(data, indent=2))
    else:
        for report in reports:
            print(report.render())


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options the user gave (argparse default None): the rest keep the library's defaults."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _needs_yaml(paths: Sequence[str]) -> None:
    """The pip hint for PyYAML before any work, when a named file is YAML."""
    for path in paths:
        if str(path).endswith(_YAML_SUFFIXES):
            require("yaml", extra="yaml", feature=f"reading {path}")


def _side_note(args: argparse.Namespace, text: str) -> None:
    """A line about a side product (a plot, a page): on stderr under --json, so stdout stays one object."""
    print(text, file=sys.stderr if args.json else sys.stdout)


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    run_demo(args.output, workers=args.workers, limit=args.limit, echo=print)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from ..integrations.tracing import trace_file

    _emit(args, [trace_file(args.state, args.step, args.data_parallel_rank, stores=dict(args.stores or ()))])
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from ..corpus import prepare
    from ..corpus.run import config
    from ..corpus.run.signals import terminate_as_interrupt

    _needs_yaml([args.steps] if isinstance(getattr(args, "steps", None), str) else [])
    options = config.options_from_flags(vars(args))
    with terminate_as_interrupt():
        result = prepare(
            config.config_from_options(args.inputs, args.output, options), progress=not args.quiet, overwrite=args.force
        )
    print(json.dumps(result.to_json(), indent=2) if args.json else result.summary())
    return 0


def _report(args: argparse.Namespace) -> int:
    from ..corpus.run.report import load_report

    report = load_report(args.output)
    _emit(args, [report])
    if args.html is not None:
        report.save_html(args.html)
        _side_note(args, f"HTML report written to {args.html}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from ..indexed.inspect import summarize_stores

    _emit(args, [summarize_stores(args.prefixes, **_given(args, "documents"))])
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ..indexed import resolve_stores
    from ..indexed.verify import VerifyFailure, check_store

    reports = []
    for prefix in resolve_stores(args.prefixes):
        report = check_store(prefix, checksums=not args.no_checksums)
        reports.append(report)
        if not args.json:  # each store's line as soon as it is checked
            print(report.render(), file=sys.stderr if isinstance(report, VerifyFailure) else sys.stdout)
    failed = sum(isinstance(report, VerifyFailure) for report in reports)
    if args.json:
        _emit(args, reports, key="stores", total={"stores": len(reports), "failed": failed})
    return 1 if failed else 0


def _on_disk(path: str) -> bool:
    """Whether a local path names something here: a store's files, or a file or directory."""
    return "://" not in path and any(os.path.exists(path + suffix) for suffix in ("", ".idx", ".bin", ".json"))


def _merge_target(args: argparse.Namespace) -> tuple[str, list[str]]:
    """(output, inputs): ``-o OUT IN...``, or the old ``OUT IN...`` with a deprecation warning."""
    inputs, output = list(args.inputs), args.output
    if output is None:
        return _old_merge_target(args, inputs)
    if len(inputs) > 1 and "://" not in inputs[0] and not _on_disk(inputs[0]):
        raise ConfigError(
            f"merge: {inputs[0]} is not a store (no {inputs[0]}.idx), yet -o {output} names the output: give the "
            f"output once, as -o (tokenport merge -o {output} IN...), and check the input paths"
        )
    return output, inputs


def _old_merge_target(args: argparse.Namespace, inputs: list[str]) -> tuple[str, list[str]]:
    """The deprecated ``merge OUT IN...``; refused where it would replace a store the user may
    have meant as an input (an existing OUT without --force)."""
    if len(inputs) < 2:
        raise ConfigError("merge: give the output store with -o: tokenport merge -o stores/all IN...")
    output = inputs[0]
    if _on_disk(output) and not args.force:
        raise ConfigError(
            f"merge: without -o the first argument, {output}, is the output (the old form), and it already "
            f"exists: to merge every argument name a new output with -o (tokenport merge -o stores/all "
            f"{' '.join(inputs)}); to replace {output}, pass --force"
        )
    print("tokenport: warning: `merge OUT IN...` is deprecated; use `tokenport merge -o OUT IN...`", file=sys.stderr)
    return output, inputs[1:]


def _merge(args: argparse.Namespace) -> int:
    from ..indexed import merge, resolve_stores
    from ..indexed.merge import merge_report

    output, named = _merge_target(args)
    inputs = resolve_stores(named, what="merge input")
    _emit(args, [merge_report(merge(output, inputs, overwrite=args.force), len(inputs))])
    return 0


def _build_cache(args: argparse.Namespace) -> int:
    from ..builder.plan import CacheReport, build_cache, load_cache_plan

    _needs_yaml([args.plan])
    plan = load_cache_plan(args.plan)
    if args.output is not None:
        plan = dataclasses.replace(plan, cache_dir=args.output)
    entries = build_cache(plan, report=None if args.json else lambda entry: print(entry.render()), workers=args.workers)
    _emit(args, [CacheReport(plan.cache_dir, tuple(entries))])
    return 0


def one_epoch(spec: Any, seq_length: int) -> int:
    """blend's default --size: the samples of ``seq_length`` tokens the spec's stores hold (at least 1)."""
    from ..builder.specs import store_tokens

    blends = [spec.blend] if spec.blend is not None else [b for b in spec.per_split if b is not None]
    prefixes = dict.fromkeys(prefix for blend in blends for prefix in blend.prefixes)
    return max(1, sum(store_tokens(prefix) for prefix in prefixes) // seq_length)


def _blend(args: argparse.Namespace) -> int:
    from .._checks import check_int
    from ..builder import report as blends
    from ..builder.report import check_spec_tokenizers

    if args.plot:
        require("matplotlib", extra="plot", feature="blend --plot")
    _needs_yaml(args.spec)
    if args.state is not None and not args.spec and args.size is not None:
        raise ConfigError(
            f"blend: --size sets a spec's samples; the run in {args.state} reports the samples it drew: drop --size"
        )
    spec, state = blends.blend_spec_or_state(args.spec, args.state, 1 if args.size is None else args.size)
    if spec is None:
        trajectories = [blends.adaptive_report(state, where=args.state, **_given(args, "windows"))]
        _emit(args, trajectories, key="trajectories")
        return _plot_trajectories(args, trajectories)
    check_spec_tokenizers(spec, allow_mixed_tokenizers=args.allow_mixed_tokenizers)
    seq_length = _library_seq_length() if args.seq_length is None else args.seq_length
    check_int("seq_length", seq_length, 1, what="tokens per sample (--seq-length)")
    size = args.size if args.size is not None else one_epoch(spec, seq_length)
    if blends.has_schedule(spec):
        trajectories = blends.mixture_report(spec, size, **_given(args, "windows", "algorithm"))
    else:
        _emit(args, blends.blend_report(spec, size, **_given(args, "seq_length", "algorithm")), key="blends")
        if args.plot:
            blends.plot_blend(spec, size, args.plot, **_given(args, "algorithm"))
            _side_note(args, f"plot written to {args.plot}")
        return 0
    _emit(args, trajectories, key="trajectories")
    return _plot_trajectories(args, trajectories)


def _plot_trajectories(args: argparse.Namespace, trajectories: Sequence[Any]) -> int:
    """blend --plot of a scheduled or adaptive blend: its shares over the run."""
    from ..blend.trajectory import plot_trajectories

    if args.plot:
        plot_trajectories(trajectories, args.plot)
        _side_note(args, f"plot written to {args.plot}")
    return 0


def _library_seq_length() -> int:
    """blend_report's default seq_length (the epochs column's, and one epoch's samples)."""
    import inspect

    from ..builder.report import blend_report

    default: int = inspect.signature(blend_report).parameters["seq_length"].default
    return default


def _pack_report(args: argparse.Namespace) -> int:
    from .._jit import announce_compilation
    from ..indexed import resolve_stores
    from ..indexed.inspect import lengths_of
    from ..sampling.report import batching_report

    announce_compilation(["tokenport.packing.balance", "tokenport.packing.bins", "tokenport.sampling.length_grouping"])
    lengths = lengths_of(resolve_stores(args.prefixes))
    report = batching_report(lengths, args.batch_size, **_given(args, "capacity", "data_parallel_size", "seed"))
    _emit(args, [report])
    return 0


def _where(args: argparse.Namespace) -> int:
    from ..integrations.where import where_file

    if args.identifiers is not None:
        return _where_identifiers(args)
    report = where_file(
        args.state,
        store=args.store,
        document=args.documents,
        text=args.text,
        up_to_step=args.up_to_step,
        stores=dict(args.stores or ()),
    )
    _emit(args, [report])
    return 0


def _why(args: argparse.Namespace) -> int:
    from ..corpus.run.why import why

    _emit(args, [why(args.output, input=args.input, text=args.text, identifier=args.identifiers)])
    return 0


def _audit(args: argparse.Namespace) -> int:
    from ..integrations.audit import audit

    report = audit(args.states, stores=dict(args.stores or ()))
    _emit(args, [report])
    return 0 if report.consistent else 1


def _where_identifiers(args: argparse.Namespace) -> int:
    from ..integrations.where import where_identifiers_file

    if args.documents is not None or args.text is not None:
        raise ConfigError("where: name the documents by exactly one of --document, --text or --id")
    report = where_identifiers_file(
        args.state,
        output=args.store,
        identifier=args.identifiers,
        up_to_step=args.up_to_step,
        stores=dict(args.stores or ()),
    )
    _emit(args, [report])
    return 0


def _takedown(args: argparse.Namespace) -> int:
    from ..integrations.takedown import takedown_file

    report = takedown_file(
        args.state,
        args.output,
        store=args.store,
        documents=args.documents,
        where=args.where,
        stores=dict(args.stores or ()),
        force=args.force,
    )
    _emit(args, [report])
    return 0

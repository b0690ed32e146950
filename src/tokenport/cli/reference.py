"""The CLI reference in Markdown, generated from the parser: the docs build writes it to docs/cli.md,
so the page cannot drift from the flags the command takes."""

from __future__ import annotations

import argparse

from .parser import _parser, verb_parser

WIDTH = 88  # usage lines wrapped at a fixed width: the same page on every terminal


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    """The parser's own formatter (its {default}s filled from the library) at the fixed width."""
    formatter: argparse.HelpFormatter = parser.formatter_class(prog=parser.prog, width=WIDTH)  # type: ignore[call-arg]
    return formatter


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _argument(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One bullet: the argument's spellings (with its metavar) and its help, defaults filled in."""
    formatter = _formatter(parser)
    spelled = formatter._format_action_invocation(action)
    text = formatter._expand_help(action) if action.help else ""
    return f"- `{spelled}`" + (f": {' '.join(text.split())}" if text else "")


def _section(parser: argparse.ArgumentParser, title: str) -> list[str]:
    """A verb's (or the command's) heading, description, usage, arguments and epilog."""
    lines = [f"## {title}", ""]
    if parser.description:
        lines += [parser.description, ""]
    lines += ["```text", _usage(parser), "```", ""]
    shown = [
        a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
    ]
    lines += [_argument(parser, action) for action in shown] + [""]
    if parser.epilog:
        lines += ["```text", parser.epilog.rstrip(), "```", ""]
    return lines


def reference_markdown() -> str:
    """Every verb of `tokenport`: usage, description, epilog and each argument with its help and
    defaults, as Markdown (deterministic: the same text on every run and terminal)."""
    parser = _parser()
    lines = [
        "# CLI reference",
        "",
        "Generated from the command's parser (`tokenport.cli.reference_markdown()`); "
        "`tokenport VERB --help` prints the same.",
        "",
        *_section(parser, "tokenport"),
    ]
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in verbs.choices:
        lines += _section(verb_parser(parser, name), f"tokenport {name}")
    return "\n".join(lines).rstrip() + "\n"

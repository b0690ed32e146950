"""mkdocs hooks: the CLI reference page is generated from the command's parser at every build, so it
cannot drift from the code (no committed copy)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

SRC = Path(__file__).resolve().parents[1] / "src"
CLI_PAGE = "reference/cli.md"


def cli_reference_markdown() -> str:
    """The CLI reference as Markdown: the command's help, then every verb's `--help`, in the parser's order."""
    if str(SRC) not in sys.path:  # this checkout's tokenport, as mkdocstrings reads it (paths: [src])
        sys.path.insert(0, str(SRC))
    from tokenport.cli import _parser

    os.environ.setdefault("COLUMNS", "100")  # argparse wraps help to the terminal: one width for every build
    parser = _parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [
        "# CLI reference",
        "",
        "Generated from the parser of the `tokenport` command at each build of this site: it is the",
        "same text `tokenport --help` and `tokenport VERB --help` print.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name, sub in verbs.choices.items():
        lines += ["", f"## {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: Any) -> Files:
    """Add the generated CLI reference page to the site."""
    files.append(File.generated(config, CLI_PAGE, content=cli_reference_markdown()))
    return files

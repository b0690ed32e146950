"""mkdocs hooks: the CLI reference page is generated from the command's parser at every build, so it
cannot drift from the code (no committed copy)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

SRC = Path(__file__).resolve().parents[1] / "src"
CLI_PAGE = "reference/cli.md"


def cli_reference_markdown() -> str:
    """The CLI reference as Markdown, from this checkout's parser (`tokenport.cli.reference_markdown`)."""
    if str(SRC) not in sys.path:  # this checkout's tokenport, as mkdocstrings reads it (paths: [src])
        sys.path.insert(0, str(SRC))
    from tokenport.cli import reference_markdown

    os.environ.setdefault("COLUMNS", "100")  # argparse wraps help to the terminal: one width for every build
    return reference_markdown()


def on_files(files: Files, config: Any) -> Files:
    """Add the generated CLI reference page to the site."""
    files.append(File.generated(config, CLI_PAGE, content=cli_reference_markdown()))
    return files

"""The demo's ending: commands to try next on what it wrote, runnable as printed, and where the docs are."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable

DOCS = (
    "docs: docs/getting-started.md in the tokenport repository, then every page under docs/ "
    "(as a site, from the repository: mkdocs serve, then open http://127.0.0.1:8000)"
)


def next_commands(workdir: str, cwd: str | None = None) -> list[str]:
    """`tokenport` command lines on the demo's outputs under `workdir` (those it wrote: the training
    stages' only when torch ran them), with paths as they read from `cwd` (default: here)."""
    cwd = os.getcwd() if cwd is None else cwd

    def at(*parts: str) -> str:
        path = os.path.join(workdir, *parts)
        relative = os.path.relpath(path, cwd)
        return shlex.quote(os.path.abspath(path) if relative.startswith("..") else relative)

    def present(*parts: str) -> bool:
        return os.path.exists(os.path.join(workdir, *parts))

    straight = os.path.join(workdir, "train", "straight")
    checkpoints = sorted(n for n in os.listdir(straight) if n.endswith(".pt")) if os.path.isdir(straight) else []
    candidates = [
        (present("stores", "prose"), f"tokenport inspect {at('stores', 'prose')}"),
        (present("stores", "prose-clean"), f"tokenport report {at('stores', 'prose-clean')} --html report.html"),
        (
            present("stores", "blend.json"),
            f"tokenport blend {at('stores', 'blend.json')} --size 20000 --plot blend.png",
        ),
        (present("mix", "state.json"), f"tokenport blend --state {at('mix', 'state.json')} --plot mix.png"),
        (bool(checkpoints), f"tokenport trace {at('train', 'straight', *checkpoints[-1:])} --step 3"),
        (
            len(checkpoints) > 1,
            f"tokenport audit {' '.join(at('train', 'straight', name) for name in checkpoints)}",
        ),
        (present("stores", "all.idx"), f"tokenport pack-report {at('stores', 'all')}"),
    ]
    return [command for found, command in candidates if found]


def echo_next_steps(workdir: str, echo: Callable[[str], None]) -> None:
    """Echo what to try next from the directory the demo ran in, then where the docs are."""
    echo("\nwhat to try next (each runs as shown, from this directory):")
    for command in next_commands(workdir):
        echo(f"  {command}")
    echo(DOCS)

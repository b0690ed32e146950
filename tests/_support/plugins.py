"""Out-of-package plugins for tests: a module declared in the ``tokenport.plugins`` entry-point group
by a dist-info beside it, as an installed plugin package declares it. Put the directory on a
subprocess's PYTHONPATH (or on sys.path) and tokenport's registries find the module."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_plugin(directory: Path, module: str, source: str, *, name: str) -> str:
    """``directory/module.py`` holding ``source`` (dedented), declared as the plugin ``name``; the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{module}.py").write_text(textwrap.dedent(source))
    info = directory / f"{module}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tokenport.plugins]\n{name} = {module}\n")
    return str(directory)

"""README.md runs as written: its code blocks, in order, in a fresh directory, so it cannot drift.

Python blocks share one namespace (later blocks use names earlier ones made); bash/sh blocks run
line by line in bash with ``tokenport`` being this checkout's ``python -m tokenport``; YAML and
JSON blocks are files, written to the name the paragraph before them gives. Blocks a named rule
in SKIP matches are not run, each for the reason given there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tokenport

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)
FILE_NAME = re.compile(r"`[^`]*?([\w./-]+\.(?:ya?ml|json))\b[^`]*`")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language tag, its code, the prose before it and its line."""

    language: str
    code: str
    prose: str
    line: int


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order."""
    blocks, end = [], 0
    for match in FENCE.finditer(text):
        prose = text[end : match.start()]
        blocks.append(Block(match.group(1), match.group(2), prose, text.count("\n", 0, match.start()) + 1))
        end = match.end()
    return blocks


# name -> (matches a block, why it is not run)
SKIP = {
    "installs-packages": (
        lambda block: "pip install" in block.code,
        "installs packages (tests run offline in the installed environment); `tokenport demo` is "
        "tests/test_demo.py and `python -m pytest` is the suite this test is part of",
    ),
    "megatron-lm": (
        lambda block: "pretrain_gpt.py" in block.code,
        "runs inside a Megatron-LM checkout (megatron.training), which is not installed; "
        "tests/integrations/test_megatron_provider.py runs the provider on Megatron's arguments",
    ),
}


def _skip_rule(block: Block) -> str | None:
    return next((name for name, (matches, _) in SKIP.items() if matches(block)), None)


def _file_name(block: Block) -> str:
    """The file a YAML/JSON block is: the first such name in backticks in the prose just before it."""
    paragraph = block.prose.strip().split("\n\n")[-1]
    found = FILE_NAME.search(paragraph)
    assert found, f"README.md line {block.line}: name the {block.language} block's file in the paragraph before it"
    return found.group(1)


def _run_shell(code: str, cwd: Path, line: int) -> None:
    """Run a bash/sh block line by line; `tokenport` is this checkout's CLI."""
    src = str(Path(tokenport.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    script = f'set -eu\ntokenport() {{ "{sys.executable}" -m tokenport "$@"; }}\n{code}'
    result = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"README.md line {line}: shell block failed\n{code}\n{result.stdout}\n{result.stderr}"
    )


def test_every_block_is_run_written_or_skipped_by_a_named_rule():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert blocks and all(b.language in ("python", "bash", "sh", "yaml", "json") for b in blocks), [
        b.language for b in blocks
    ]
    for name, (matches, _) in SKIP.items():
        assert any(matches(b) for b in blocks), f"skip rule {name!r} matches no block: remove it"
    names = [_file_name(b) for b in blocks if b.language in ("yaml", "json")]
    assert names == ["steps.yaml", "spec.yaml", "plan.json"]


def test_readme_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    ran = []
    for block in readme_blocks(README.read_text(encoding="utf-8")):
        if _skip_rule(block):
            continue
        if block.language in ("yaml", "json"):
            (tmp_path / _file_name(block)).write_text(block.code, encoding="utf-8")
        elif block.language in ("bash", "sh"):
            _run_shell(block.code, tmp_path, block.line)
        else:
            exec(compile(block.code, f"README.md:{block.line}", "exec"), namespace)
        ran.append(block.language)
    assert ran.count("python") >= 7 and ran.count("bash") + ran.count("sh") >= 3
    assert (tmp_path / "stores" / "all.bin").exists() and (tmp_path / "report.html").exists()

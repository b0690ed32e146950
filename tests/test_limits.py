"""The size limits ARCHITECTURE.md states, and the linters' reach: every module of src/ is checked
by mypy; no module over 600 lines; no function over 60 (numba kernels aside), none of the CLI's over 40."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import tokenport

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project's floor is 3.10
    tomllib = pytest.importorskip("tomli")

SRC = Path(tokenport.__file__).resolve().parent
ROOT = SRC.parents[1]
MODULE_LINES = 60 * 10
FUNCTION_LINES = 60
CLI_FUNCTION_LINES = 40


def _numba_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with numba's njit/jit (or tokenport's lazy wrapper of them)."""
    return any("jit" in ast.unparse(decorator) for decorator in node.decorator_list)


def long_functions(root: Path) -> dict[str, int]:
    """'path:name' -> lines, for each function over its limit under `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        cli = path.relative_to(root).parts[0] in ("cli.py", "cli")  # the module, or the package split from it
        limit = CLI_FUNCTION_LINES if cli else FUNCTION_LINES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _numba_kernel(node):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found[f"{path.relative_to(root)}:{node.name}"] = lines
    return found


def test_no_module_is_over_the_limit():
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MODULE_LINES} == {}


def test_no_function_is_over_the_limit():
    assert long_functions(SRC) == {}


def test_the_limits_see_long_functions_and_spare_numba_kernels(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\n@numba.njit(cache=True)\ndef kernel():\n{body}\n")
    verb = "def verb():\n" + "\n".join(f"    y{i} = {i}" for i in range(40)) + "\n"
    (tmp_path / "cli.py").write_text(verb)
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "verbs.py").write_text(verb)
    assert long_functions(tmp_path) == {"m.py:long": 62, "cli.py:verb": 41, "cli/verbs.py:verb": 41}


def test_mypy_checks_every_module():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    covered = [ROOT / name for name in config["files"]]
    missing = [
        str(path.relative_to(ROOT))
        for path in sorted(SRC.rglob("*.py"))
        if not any(path == c or c in path.parents for c in covered)
    ]
    assert missing == []

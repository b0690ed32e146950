"""The import rule of ARCHITECTURE.md's rooms table: a room imports only rooms below it, and no two
modules import each other. An AST walk over src/tokenport; imports inside functions count too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tokenport

ARCHITECTURE = Path(__file__).resolve().parents[1] / "ARCHITECTURE.md"


def read_rooms(text: str) -> tuple[tuple[frozenset[str], ...], dict[str, frozenset[str]]]:
    """ARCHITECTURE.md's rooms table: the rows top to bottom (a room may import its own row and the
    rows below it), and the rooms held to a narrower "may import" list than every row below."""
    section = text.split("\n## Rooms\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[int, set[str]] = {}
    allowed: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        names = re.findall(r"`([\w.]+)`", cells[1])
        rows.setdefault(int(cells[0]), set()).update(names)
        if cells[2] != "below":
            allowed.update(dict.fromkeys(names, cells[2]))
    ordered = tuple(frozenset(rows[row]) for row in sorted(rows))
    ground = ordered[-1]
    only = {
        room: frozenset(name for part in re.findall(r"`([\w.]+)`|(ground)", spec) for name in part if name) - {"ground"}
        | (ground if "ground" in spec else frozenset())
        for room, spec in allowed.items()
    }
    return ordered, only


ROOMS, ONLY = read_rooms(ARCHITECTURE.read_text(encoding="utf-8"))
GROUND = ROOMS[-1]

SRC = Path(tokenport.__file__).resolve().parent


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under the package directory `root`: dotted name -> (file, is a package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(root: Path) -> set[tuple[str, str]]:
    """(importer, imported) for every import of one module of `root`'s package by another,
    at any depth of the code; ``from P import m`` of a submodule ``m`` imports ``P.m``."""
    found = modules(root)
    top = root.name
    edges = set()
    for name, (path, is_package) in found.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base.split(".")[0] == top:
                    edges |= {(name, f"{base}.{a.name}" if f"{base}.{a.name}" in found else base) for a in node.names}
            elif isinstance(node, ast.Import):
                edges |= {(name, a.name) for a in node.names if a.name.split(".")[0] == top}
    return edges


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def row_of(room: str) -> int | None:
    return next((i for i, row in enumerate(ROOMS) if room in row), None)


def violations(root: Path) -> dict[str, str]:
    """Each import that breaks the rule (a room above, a room outside the table, a room's
    narrower allowance, two modules importing each other) -> what is wrong with it."""
    edges = imports(root)
    found: dict[str, str] = {}
    for importer, imported in sorted(edges):
        mine, theirs = room_of(importer), room_of(imported)
        for room in (mine, theirs):
            if row_of(room) is None:
                found[f"{importer} -> {imported}"] = f"{room} is in no row of ARCHITECTURE.md's rooms table"
        if row_of(mine) is None or row_of(theirs) is None:
            continue
        if row_of(theirs) < row_of(mine):
            found[f"{importer} -> {imported}"] = f"{mine}/ imports {theirs}/, a room above it"
        elif mine in ONLY and theirs not in ONLY[mine]:
            found[f"{importer} -> {imported}"] = f"{mine}/ imports only {', '.join(sorted(ONLY[mine]))}"
        if (imported, importer) in edges and importer < imported:
            found[f"{importer} <-> {imported}"] = "cycle"
    return found


def test_no_module_imports_a_room_above_it_or_a_module_that_imports_it():
    found = violations(SRC)
    listed = "\n".join(f"{k}: {v}" for k, v in found.items())
    assert not found, f"imports breaking ARCHITECTURE.md's rooms rule:\n{listed}"


def test_the_rule_sees_upward_narrower_cyclic_and_unplaced_imports(tmp_path):
    root = tmp_path / "tokenport"
    files = {
        "__init__.py": "",
        "errors.py": "",
        "blend/__init__.py": "from .mix import x\n",
        "blend/mix.py": "def f():\n    from ..builder.specs import Blend\n",  # upward, inside a function
        "builder/__init__.py": "",
        "builder/specs.py": "from ..blend import x\nfrom . import plan\n",
        "builder/plan.py": "from .specs import Blend\n",  # specs <-> plan
        "sampling/__init__.py": "import tokenport.indexed.reader\n",  # below, but sampling/ may not
        "indexed/__init__.py": "",
        "indexed/reader.py": "from ..errors import E\nfrom ..attic import junk\n",
        "attic.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert violations(root) == {
        "tokenport.blend.mix -> tokenport.builder.specs": "blend/ imports builder/, a room above it",
        "tokenport.builder.plan <-> tokenport.builder.specs": "cycle",
        "tokenport.sampling -> tokenport.indexed.reader": (
            "sampling/ imports only _checks, _lazy, _registry, _schema, errors, packing, rng, sampling"
        ),
        "tokenport.indexed.reader -> tokenport.attic": "attic is in no row of ARCHITECTURE.md's rooms table",
    }

"""constraints.txt pins every test peer exactly, inside the ranges pyproject.toml gives users, and the
environment under test is the one it names (a peer's new release cannot change what the tests see)."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")


def pins() -> dict[str, str]:
    """constraints.txt as name -> exact version; every line is a comment or one `name==version`."""
    found: dict[str, str] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt line {number}: {line!r} is not an exact pin (name==version)"
        name = canonicalize_name(match.group(1))
        assert name not in found, f"constraints.txt pins {name} twice"
        found[name] = match.group(2)
    return found


def dev_requirements() -> list[Requirement]:
    """The dev extra and every extra it names, tokenport's own extras expanded."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    seen, todo, out = set(), ["dev"], []
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in extras[extra]:
            requirement = Requirement(text)
            if requirement.name == "tokenport":
                todo.extend(sorted(requirement.extras))  # one order in every process (xdist collects in each)
            else:
                out.append(requirement)
    return out + [Requirement(text) for text in PYPROJECT["project"]["dependencies"]]


def test_every_test_peer_is_pinned_inside_its_range():
    pinned = pins()
    for requirement in dev_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is a test dependency but constraints.txt does not pin it"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject's {requirement}"
        )


@pytest.mark.parametrize("requirement", dev_requirements(), ids=str)
def test_the_installed_peer_is_the_pinned_one(requirement):
    pinned = pins()[canonicalize_name(requirement.name)]
    try:
        installed = version(requirement.name)
    except PackageNotFoundError:
        pytest.fail(f"{requirement.name} is not installed: install with the README's test command")
    assert installed.split("+")[0] == pinned, (
        f"{requirement.name} {installed} is installed, constraints.txt pins {pinned}: "
        "install with the README's test command (pip install ... -c constraints.txt)"
    )

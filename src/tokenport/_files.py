"""Reading the JSON and YAML files users write (plans, blend specs), with errors that name the file;
the mode a published file takes; and the directed kill points of the writers' kill tests."""

from __future__ import annotations

import json
import os
from typing import Any

from ._optional import require
from .errors import ConfigError


def read_text(path: str, what: str) -> str:
    """The text of the file `path`; ConfigError naming it (as `what`) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def parse_structured(text: str, path: str, *, yaml_ok: bool = True) -> Any:
    """JSON, or YAML (PyYAML's safe_load) for .yaml/.yml files; ConfigError with the line at fault."""
    if yaml_ok and path.endswith((".yaml", ".yml")):
        yaml = require("yaml", extra="yaml", feature=f"{path}: reading YAML (or write the file as JSON)")
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None


def umask() -> int:
    """The process umask, read without changing it where Linux allows (else set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish_mode(path: str, directory: bool = False) -> None:
    """Give a private temporary the mode open() (or mkdir) would have given it under the umask."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a leftover lock or staging file of a dead one is stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class KillPoints:
    """A writer's publication steps, counted in this process: calling it ends the process (exit 137) at the
    step the environment variable ``env`` names, so a kill test can interrupt the writer at each one."""

    def __init__(self, env: str) -> None:
        self.env = env
        self.steps = 0

    def __call__(self) -> None:
        if self.env in os.environ:
            self.steps += 1
            if self.steps == int(os.environ[self.env]):
                os._exit(137)

"""Reading the JSON and YAML files users write (plans, blend specs), with errors that name the file."""

from __future__ import annotations

import json
from typing import Any

from .errors import ConfigError


def read_text(path: str, what: str) -> str:
    """The text of the file `path`; ConfigError naming it (as `what`) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror})") from None


def parse_structured(text: str, path: str, *, yaml_ok: bool = True) -> Any:
    """JSON, or YAML (PyYAML's safe_load) for .yaml/.yml files; ConfigError with the line at fault."""
    if yaml_ok and path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path}: reading YAML needs PyYAML: pip install 'tokenport[yaml]', or write JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None

"""Store arguments as people type them -> store prefixes, each once, in order.

A shell glob such as ``stores/web/part-*`` names each store by its files (``.bin``, ``.idx``,
``.json``, and a chat store's ``.mask.bin``/``.mask.idx``); those collapse to one prefix. A
prepare output directory expands to its parts, in the order its ``tokenport.json`` lists them.
A store named twice (the same spelling again, or its bare prefix beside one of its files) is
refused: merging or blending it twice would silently double its documents.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import msgspec

from .._schema import Text, decode
from ..errors import ConfigError, CorruptStoreError
from ..storage import is_remote, local_path
from .manifest import MASK_SUFFIX
from .reader import strip_suffix

RUN_MANIFEST = "tokenport.json"  # a prepare output directory's listing of its parts


def resolve_stores(args: Sequence[str | os.PathLike], *, what: str = "store") -> list[str]:
    """The store prefixes ``args`` name, in order: file names mapped to their prefix, prepare
    output directories expanded to their parts; ConfigError naming any store given twice."""
    if isinstance(args, (str, os.PathLike)) or not isinstance(args, Sequence) or not len(args):
        raise ConfigError(f"give one or more {what}s (prefixes, their .bin/.idx/.json files, or prepare outputs)")
    for arg in args:
        if not isinstance(arg, (str, os.PathLike)) or not isinstance(os.fspath(arg), str) or "\0" in os.fspath(arg):
            raise ConfigError(f"{what} {arg!r} is invalid: pass a store prefix, a path or URL like data/wiki")
    prefixes: list[str] = []
    forms: dict[str, tuple[str, list[str]]] = {}  # key -> (prefix, spellings seen)
    named = {strip_suffix(os.fspath(arg)) for arg in args}
    for arg in args:
        text = os.fspath(arg)
        if _is_mask_file(text, named):
            continue  # a chat store's mask file beside the store's own files: part of that store
        for prefix, spelling in _expand(text):
            key = prefix if is_remote(prefix) else os.path.normpath(os.path.abspath(local_path(prefix)))
            if key not in forms:
                forms[key] = (prefix, [spelling])
                prefixes.append(prefix)
                continue
            first, seen = forms[key]
            suffix = spelling[len(strip_suffix(spelling)) :]
            if spelling in seen or not suffix or any(s == strip_suffix(s) for s in seen):
                raise ConfigError(
                    f"{what} {first} is given twice (as {seen[0]!r} and {spelling!r}); "
                    "name each store once (its prefix, or its .bin/.idx/.json files)"
                )
            seen.append(spelling)
    return prefixes


def _is_mask_file(text: str, named: set[str]) -> bool:
    """Whether `text` is PREFIX.mask.bin/.idx of a store PREFIX also named (as a glob names them)."""
    prefix = strip_suffix(text)
    return text != prefix and prefix.endswith(MASK_SUFFIX) and prefix[: -len(MASK_SUFFIX)] in named


def _expand(text: str) -> list[tuple[str, str]]:
    """(prefix, spelling) pairs of one argument: its parts for a prepare output directory."""
    path = local_path(text)
    if not is_remote(text) and os.path.isdir(path):
        return [(part, part) for part in run_parts(path)]
    return [(strip_suffix(text), text)]


class _Part(msgspec.Struct, frozen=True):
    """One part a run manifest lists: only its name is read here (prepare's own reader reads the rest)."""

    name: Text

    def __post_init__(self) -> None:
        if self.name in (".", "..") or "/" in self.name or os.sep in self.name or "\0" in self.name:
            raise ValueError(f"{self.name!r} is not a part's file name - at `name`")


class _RunParts(msgspec.Struct, frozen=True):
    """The listing of a run manifest (``tokenport.json``): other keys are prepare's, and read by it."""

    parts: list[_Part]


def run_parts(directory: str) -> list[str]:
    """The part prefixes of the prepare output ``directory``, in the order its manifest lists them."""
    path = os.path.join(directory, RUN_MANIFEST)
    remedy = "rerun prepare to rebuild it"
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())  # Python's json: prepare's other keys may hold what it writes (NaN)
    except FileNotFoundError:
        raise ConfigError(
            f"{directory} is a directory without {RUN_MANIFEST}: pass store prefixes, or the output "
            "directory of a finished prepare run"
        ) from None
    except OSError as exc:
        raise CorruptStoreError(f"{path}: cannot read it ({exc.strerror}); {remedy}") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise CorruptStoreError(f"{path}: not valid JSON ({exc}); {remedy}") from None
    listing = {"parts": data.get("parts")} if isinstance(data, dict) and "parts" in data else data
    manifest = decode(listing, _RunParts, where=path, remedy=remedy, error=CorruptStoreError)
    if not manifest.parts:
        raise ConfigError(f"{directory}: the prepare run wrote no parts (no documents kept)")
    return [os.path.join(directory, part.name) for part in manifest.parts]

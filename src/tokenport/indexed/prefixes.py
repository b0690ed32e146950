"""Store arguments as people type them -> store prefixes, each once, in order.

A shell glob such as ``stores/web/part-*`` names each store by its files (``.bin``, ``.idx``,
``.json``, and a chat store's ``.mask.bin``/``.mask.idx``); those collapse to one prefix. A
prepare output directory expands to its parts, in the order its ``tokenport.json`` lists them.
A path that is no store (a raw corpus file, a directory that is not a prepare output) is refused
with what it holds and the command that prepares it (see `directories`). A store named twice
(the same spelling again, or its bare prefix beside one of its files) is refused: merging or
blending it twice would silently double its documents.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import ConfigError
from ..storage import is_remote, local_path
from .directories import RUN_MANIFEST as RUN_MANIFEST  # where it has always been importable from
from .directories import check_not_raw, directory_parts
from .directories import run_parts as run_parts
from .manifest import MASK_SUFFIX
from .reader import strip_suffix


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
    parts = directory_parts(text)
    if parts is not None:
        return [(part, part) for part in parts]
    check_not_raw(text)  # a raw corpus file: prepare it first
    return [(strip_suffix(text), text)]

"""Blend specifications: which token stores feed a run, and with which weights.

A `Blend` is a list of store prefixes (or URLs) with optional weights; a `BlendSpec` is either one
blend shared by train/valid/test (cut later by a Megatron split string) or one blend per split.
They come from Megatron-LM's forms (``--data-path`` lists, ``--data-args-path`` files,
``--per-split-data-args-path`` JSON) or from a YAML/JSON spec with groups (`load_blend_spec`):

    blend:
      - {path: data/wiki, weight: 0.2}
      - {name: en-cc, weight: 0.5, parts: ["data/cc/part-*"]}   # shared by token counts
      - name: code                                              # weights relative in the group
        weight: 0.3
        blend: [{path: data/python, weight: 2}, {path: data/js, weight: 1}]

Zero weights: a `Blend` keeps what it is given (so Megatron's forms round-trip exactly);
`Blend.without_zero_weights()` drops them, and `load_blend_spec` drops zero-weight subtrees
itself. Duplicate prefixes: a `Blend` allows them (as Megatron does); `load_blend_spec` rejects a
store reached twice, naming both entries. Deliberate differences from Megatron: weights must be
finite, >= 0 and not all zero, and a ``--data-path`` list mixing numbers and non-numbers at weight
positions is an error (Megatron silently reads such a list as prefixes only, or fails an assert,
depending on the order), as is a bool weight (Megatron reads True as 1). Weights may be numbers or
strings, as in Megatron.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._checks import is_int
from .._files import parse_structured, read_text
from ..blend.schedule import MixtureSchedule
from ..errors import ConfigError, TokenportError
from ..indexed import resolve_stores, strip_suffix
from ..indexed.directories import directory_parts
from ..storage import GLOB_CHARS, is_remote, local_path
from .parts import expand_parts, megatron_normalize, store_tokens
from .splits import SPLIT_NAMES


def _entry(index: int, prefix: Any) -> str:
    """How an error names one entry of a blend."""
    return f"entry {index} (prefix {prefix!r})"


@dataclass(frozen=True)
class Blend:
    """Store prefixes or URLs with one weight each, or weights None: each dataset by its size.

    Lists are accepted and kept as tuples; weights are kept as floats. Zero weights are kept
    (call `without_zero_weights`); duplicate prefixes are allowed, as in Megatron. `names` are the
    spec entries' ``name`` per store ("" where none), for reports and plots only (not compared).
    """

    prefixes: tuple[str, ...]
    weights: tuple[float, ...] | None = None
    schedule: MixtureSchedule | None = None
    names: tuple[str, ...] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Check the prefixes and weights; ConfigError naming the entry at fault."""
        if isinstance(self.prefixes, str) or not self.prefixes:
            raise ConfigError(f"a blend needs a non-empty list of store prefixes, got {self.prefixes!r}")
        object.__setattr__(self, "prefixes", tuple(self.prefixes))
        for i, prefix in enumerate(self.prefixes):
            if not isinstance(prefix, str) or not prefix.strip():
                raise ConfigError(f"{_entry(i, prefix)}: a prefix must be a non-empty string (a store path or URL)")
        if self.weights is not None:
            object.__setattr__(self, "weights", _checked_weights(self.prefixes, self.weights))
        if self.names is not None:
            names = tuple(self.names) if isinstance(self.names, (tuple, list)) else ()
            if len(names) != len(self.prefixes) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"names={self.names!r}: give one name (a string, '' for none) per prefix")
            object.__setattr__(self, "names", names)
        if self.schedule is not None:
            if not isinstance(self.schedule, MixtureSchedule):
                raise ConfigError(f"schedule: expected a MixtureSchedule, got {type(self.schedule).__name__}")
            if self.schedule.num_datasets != len(self.prefixes):
                raise ConfigError(
                    f"schedule: its phases weigh {self.schedule.num_datasets} datasets but the blend has "
                    f"{len(self.prefixes)}; give one weight per store, in the blend's (flattened) order"
                )

    def without_zero_weights(self) -> Blend:
        """This blend without its zero-weight datasets (itself when there are none, or when scheduled)."""
        if self.weights is None or all(self.weights) or self.schedule is not None:
            return self
        kept = [i for i, w in enumerate(self.weights) if w]
        names = None if self.names is None else tuple(self.names[i] for i in kept)
        return Blend(tuple(self.prefixes[i] for i in kept), tuple(self.weights[i] for i in kept), names=names)

    def normalized(self) -> list[float] | None:
        """The weights divided by their sum exactly as Megatron's `normalize` does (None when by size)."""
        return None if self.weights is None else megatron_normalize(self.weights)

    def with_parts(self, size_of: Callable[[str], int] = store_tokens) -> Blend:
        """This blend with each local prepare output directory replaced by its parts, in order (a weight
        shared by their token counts, see `builder.parts`); itself when it names none."""
        expanded = expand_parts(self.prefixes, self.weights, size_of)
        if expanded is None:
            return self
        if self.schedule is not None:
            raise ConfigError(
                "a scheduled blend names a prepare output directory: its schedule gives one weight per store, "
                "so list the directory's parts (tokenport.indexed.resolve_stores([DIR])) with a weight each"
            )
        return Blend(*expanded)

    def as_megatron(self) -> tuple[list[str], list[float] | None]:
        """The (prefixes, weights) pair of Megatron's BlendedMegatronDatasetConfig.blend."""
        return list(self.prefixes), None if self.weights is None else list(self.weights)


def _checked_weights(prefixes: tuple[str, ...], weights: Any) -> tuple[float, ...]:
    """Weights as floats, one per prefix, finite, >= 0 and not all zero."""
    if isinstance(weights, str) or not hasattr(weights, "__len__") or len(weights) != len(prefixes):
        raise ConfigError(
            f"{len(prefixes)} prefixes but weights={weights!r}: give one weight per prefix, "
            "or no weights to use each dataset by its size"
        )
    for i, (prefix, weight) in enumerate(zip(prefixes, weights)):
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{_entry(i, prefix)}: weight {weight!r} is not a number")
        if not math.isfinite(weight) or weight < 0:
            raise ConfigError(
                f"{_entry(i, prefix)}: weight {weight!r} is invalid: give a finite number >= 0 (0 drops the dataset)"
            )
    if not any(weights):
        raise ConfigError("every weight of the blend is 0: give at least one dataset a positive weight")
    return tuple(float(w) for w in weights)


@dataclass(frozen=True)
class BlendSpec:
    """One `blend` shared by all splits (cut by a split string), or `per_split` blends for train/valid/test.

    `per_split` is a (train, valid, test) tuple, or a mapping with keys among those names; a
    missing or None split has no dataset. Exactly one of `blend` and `per_split` is given.
    """

    blend: Blend | None = None
    per_split: tuple[Blend | None, Blend | None, Blend | None] | None = None
    source: str = field(default="<spec>", compare=False)

    def __post_init__(self) -> None:
        """Check that exactly one form is given and holds Blends; ConfigError naming the source."""
        where = self.source
        if (self.blend is None) == (self.per_split is None):
            raise ConfigError(
                f"{where}: give either one shared blend or per-split blends, not "
                + ("both" if self.blend is not None else "neither")
            )
        if self.blend is not None and not isinstance(self.blend, Blend):
            raise ConfigError(f"{where}: blend must be a Blend, got {type(self.blend).__name__}")
        if self.per_split is not None:
            object.__setattr__(self, "per_split", _split_tuple(self.per_split, where))

    def with_parts(self) -> BlendSpec:
        """This spec with every blend's prepare output directories replaced by their parts (`Blend.with_parts`)."""
        if self.blend is not None:
            return BlendSpec(blend=self.blend.with_parts(), source=self.source)
        blends = tuple(None if blend is None else blend.with_parts() for blend in self.per_split or ())
        return BlendSpec(per_split=blends, source=self.source)  # type: ignore[arg-type]


def _split_tuple(value: Any, where: str) -> tuple[Blend | None, Blend | None, Blend | None]:
    """A (train, valid, test) tuple of Blend or None from a tuple or a mapping of split names."""
    if isinstance(value, Mapping):
        unknown = sorted(map(str, set(value) - set(SPLIT_NAMES)))
        if unknown:
            raise ConfigError(f"{where}: unknown split(s) {', '.join(unknown)}; use {', '.join(SPLIT_NAMES)}")
        value = tuple(value.get(name) for name in SPLIT_NAMES)
    if (
        not isinstance(value, (tuple, list))
        or len(value) != len(SPLIT_NAMES)
        or not all(b is None or isinstance(b, Blend) for b in value)
    ):
        raise ConfigError(f"{where}: per_split must hold a Blend or None for each of {', '.join(SPLIT_NAMES)}")
    if all(b is None for b in value):
        raise ConfigError(f"{where}: no split has a blend; give at least one of {', '.join(SPLIT_NAMES)}")
    train, valid, test = value
    return train, valid, test


# -- Megatron's forms ----------------------------------------------------------------------------


def blend_from_list(items: Sequence[Any]) -> Blend:
    """Megatron's ``--data-path`` list: prefixes, or "weight prefix" pairs, weights as numbers or strings
    (get_blend_from_list semantics)."""
    return _blend_from_items(items, "items")


def blend_from_arguments(items: Sequence[str]) -> Blend:
    """Megatron's list as typed on a command line: each store named once, by prefix, file or directory.

    Bare stores go through `resolve_stores` (a glob's .bin/.idx/.json files are one store, a
    prepare output directory its parts); a weighted prepare output directory's parts share its
    weight by token counts (`Blend.with_parts`); a store named twice is refused
    (`blend_from_list` keeps repeats, as Megatron does).
    """
    prefixes, weights = _parse_items(items, "stores")
    if weights is None:
        return Blend(tuple(resolve_stores(prefixes)))
    stores = [prefix if directory_parts(prefix) is not None else resolve_stores([prefix])[0] for prefix in prefixes]
    resolve_stores(stores)  # refuses a store named twice (a part of a directory too)
    return Blend(tuple(stores), weights).with_parts()


SPEC_FILE_SUFFIXES = (".yaml", ".yml", ".json")
"""A lone argument ending in one of these names a spec file, not a store."""


def spec_from_arguments(items: Sequence[str]) -> BlendSpec:
    """A blend spec from command-line arguments: one spec file (SPEC_FILE_SUFFIXES), or Megatron's list."""
    if len(items) == 1 and str(items[0]).endswith(SPEC_FILE_SUFFIXES):
        return load_blend_spec(items[0])
    return BlendSpec(blend=blend_from_arguments(items))


def _blend_from_items(items: Sequence[Any], name: str) -> Blend:
    """`blend_from_list` naming the list `name` (and its items `name[i]`) in its errors."""
    prefixes, weights = _parse_items(items, name)
    try:
        return Blend(prefixes, weights)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _parse_items(items: Sequence[Any], name: str) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    """Prefixes only (odd count, or no number at any weight position), else (weight, prefix) pairs.

    As get_blend_from_list reads them: a weight is a number (int, float, numpy) or a string ``float``
    parses; prefixes are strings, stripped. Refused, where Megatron fails on them later or not at all:
    a prefix that is not a string, a weight that is neither, a bool, and numbers mixed with non-numbers.
    """
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{name}: expected a non-empty list of prefixes or 'weight prefix' pairs, got {items!r}")
    weights = None if len(items) % 2 == 1 else [_as_weight(items[i], f"{name}[{i}]") for i in range(0, len(items), 2)]
    if weights is None or all(w is None for w in weights):
        return tuple(_as_prefix(item, f"{name}[{i}]") for i, item in enumerate(items)), None
    if any(w is None for w in weights):
        numbers = [f"{name}[{2 * i}]={items[2 * i]!r}" for i, w in enumerate(weights) if w is not None][:3]
        others = [f"{name}[{2 * i}]={items[2 * i]!r}" for i, w in enumerate(weights) if w is None][:3]
        raise ConfigError(
            f"{name}: weight positions mix numbers ({', '.join(numbers)}) and non-numbers ({', '.join(others)}); "
            "write 'weight prefix' pairs throughout, or prefixes only (an odd count of prefixes, or names "
            "that are not numbers)"
        )
    prefixes = tuple(_as_prefix(items[i], f"{name}[{i}]") for i in range(1, len(items), 2))
    return prefixes, tuple(w for w in weights if w is not None)


def _as_weight(item: Any, where: str) -> float | None:
    """A weight position's float (a number, or a string float parses), None for a string that is not one."""
    if isinstance(item, str):
        return _as_float(item)
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
        raise ConfigError(
            f"{where} = {item!r}: a weight must be a number or a string holding one, and a prefix a string"
        )
    return float(item)


def _as_prefix(item: Any, where: str) -> str:
    """A prefix position's string, stripped (Megatron's ``.strip()``); ConfigError for anything else."""
    if not isinstance(item, str):
        raise ConfigError(f"{where} = {item!r}: a prefix must be a string (a store path or URL)")
    return item.strip()


def _as_float(text: str) -> float | None:
    """float(text), or None when it is not a number (as Megatron decides)."""
    try:
        return float(text)
    except ValueError:
        return None


def blend_from_args_file(path: str | os.PathLike) -> Blend:
    """Megatron-LM's ``--data-args-path``: the file's whitespace-separated words in the ``--data-path`` form."""
    where = os.fspath(path)
    try:
        return _blend_from_items(read_text(where, "blend spec").split(), "word")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def blend_per_split_from_json(path: str | os.PathLike) -> BlendSpec:
    """Megatron-LM's ``--per-split-data-args-path``: {"train": [...], "valid": [...], "test": [...]}.

    Each value is a ``--data-path`` list (or one string, split on whitespace as Megatron does);
    a missing or null key means no dataset for that split. Paths are used as written (relative
    to the working directory, as in Megatron).
    """
    where = os.fspath(path)
    data = parse_structured(read_text(where, "blend spec"), where, yaml_ok=False)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object with keys among {', '.join(SPLIT_NAMES)}")
    _reject_unknown(data, SPLIT_NAMES, where)
    blends = {}
    for name, value in data.items():
        if value is not None:
            try:
                blends[name] = _blend_from_items(value.split() if isinstance(value, str) else value, name)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    return BlendSpec(per_split=_split_tuple(blends, where), source=where)


def _reject_unknown(data: Mapping[Any, Any], known: Sequence[str], where: str) -> None:
    """ConfigError naming the keys of `data` that are not `known`."""
    unknown = sorted(map(str, set(data) - set(known)))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")


# -- YAML/JSON specs with groups -----------------------------------------------------------------


def load_blend_spec(path: str | os.PathLike, *, size_of: Callable[[str], int] = store_tokens) -> BlendSpec:
    """Read a blend spec (YAML for .yaml/.yml, else JSON) and flatten its groups into leaf Blends.

    Top level: ``blend: [...]`` (shared) or any of ``train``/``valid``/``test``. A list holds
    entries ``{path, weight}`` (a prepare output directory: as ``parts: [DIR]``),
    ``{weight, parts: [prefix, glob or prepare output directory, ...]}`` (the weight shared by
    the parts' token counts, from `size_of`) or ``{weight, blend: [...]}`` (a nested group),
    each with an optional ``name``; or Megatron's flat form (``["0.3", "a", "0.7", "b"]``, or
    bare prefixes, weighted by size, for a whole split only). Each leaf's weight is the product
    of the normalized weights along its path (Megatron's normalize at every level; parts are
    normalized by tokens), so they sum to 1 up to rounding. Zero weights drop their subtree
    (still checked, but nothing is globbed or read). A prefix reached twice is an error naming
    both entries. Relative local paths resolve against the spec's directory.
    """
    where = os.fspath(path)
    data = parse_structured(read_text(where, "blend spec"), where)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: expected a mapping with 'blend' or any of {', '.join(SPLIT_NAMES)}")
    _reject_unknown(data, ("blend", "schedule") + SPLIT_NAMES, where)
    loader = _Loader(where, os.path.dirname(os.path.abspath(where)), size_of)
    if "blend" in data:
        if set(data) - {"blend", "schedule"}:
            raise ConfigError(f"{where}: give 'blend' (shared by all splits) or per-split keys, not both")
        blend = loader.split_blend(data["blend"], "blend")
        if "schedule" in data:
            blend = _scheduled(blend, data["schedule"], where)
        return BlendSpec(blend=blend, source=where)
    if "schedule" in data:
        raise ConfigError(f"{where}: 'schedule' goes with a shared 'blend' (it orders the training stream)")
    blends = {name: loader.split_blend(value, name) for name, value in data.items() if value is not None}
    return BlendSpec(per_split=_split_tuple(blends, where), source=where)


def _scheduled(blend: Blend, phases: Any, where: str) -> Blend:
    """The blend with a mixture schedule whose weights are per store, in the flattened order."""
    if not isinstance(phases, list):
        raise ConfigError(f"{where}: schedule: expected a list of phases such as {{at: 0, weights: [...]}}")
    try:
        schedule = MixtureSchedule.from_data(phases)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    try:
        return Blend(blend.prefixes, blend.weights, schedule, names=blend.names)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_KINDS = ("path", "parts", "blend")


@dataclass(frozen=True)
class _Leaf:
    """One store reached by flattening: its prefix, its weight and the entry path that named it."""

    prefix: str
    weight: float
    where: str
    name: str = ""  # the spec's name for it: its entry's, under its groups' ("code/python")


@dataclass(frozen=True)
class _Loader:
    """Flattens the lists of one spec file: `source` names it in errors, `base` resolves relative paths."""

    source: str
    base: str
    size_of: Callable[[str], int]

    def fail(self, where: str, what: str) -> ConfigError:
        """An error naming the spec file and the entry path."""
        return ConfigError(f"{self.source}: {where}: {what}")

    def split_blend(self, value: Any, where: str) -> Blend:
        """The flattened Blend of one split's list (or of the shared list)."""
        flat = self.flat(value, where) if _is_flat(value) else None
        if flat is not None and flat.weights is None:
            names = [f"{where}[{i}]" for i in range(len(flat.prefixes))]
            leaves = [_Leaf(self.resolve(p, name), 1.0, name) for p, name in zip(flat.prefixes, names)]
            return Blend(tuple(leaf.prefix for leaf in self.unique(self.with_parts(leaves, by_size=True))))
        leaves = [leaf for leaf in self.entries(value, where, 1.0) if leaf.weight > 0.0]
        leaves = self.unique(leaves)
        named = tuple(leaf.name for leaf in leaves) if any(leaf.name for leaf in leaves) else None
        return Blend(tuple(leaf.prefix for leaf in leaves), tuple(leaf.weight for leaf in leaves), names=named)

    def flat(self, value: list, where: str) -> Blend:
        """Megatron's flat list (numbers allowed as YAML numbers) as a Blend of unresolved prefixes."""
        try:
            return _blend_from_items([item if isinstance(item, str) else repr(item) for item in value], where)
        except ConfigError as exc:
            raise ConfigError(f"{self.source}: {exc}") from None

    def entries(self, value: Any, where: str, scale: float) -> list[_Leaf]:
        """The leaves of a list of entries, each weighted `scale` times its normalized weight."""
        if _is_flat(value):
            flat = self.flat(value, where)
            if flat.weights is None:
                raise self.fail(
                    where,
                    "bare prefixes (weights by size) can only be a whole split's blend; "
                    "use {weight: W, parts: [...]} to share a weight by token counts",
                )
            names = [f"{where}[{2 * i + 1}]" for i in range(len(flat.prefixes))]
            shares = self.shares(list(flat.weights), where, scale)
            leaves = [_Leaf(self.resolve(p, name), share, name) for p, name, share in zip(flat.prefixes, names, shares)]
            return self.with_parts(leaves)
        if not isinstance(value, list) or not value or not all(isinstance(item, dict) for item in value):
            raise self.fail(
                where,
                "expected a non-empty list of entries ({path, weight}, {weight, parts} or "
                "{weight, blend}) or Megatron's flat list of weights and prefixes",
            )
        items, names = value, [f"{where}[{i}]" for i in range(len(value))]
        kinds = [self.kind(item, name) for item, name in zip(items, names)]
        weights = [self.weight(item, name) for item, name in zip(items, names)]
        shares = self.shares(weights, where, scale)
        return [
            leaf
            for item, kind, name, share in zip(items, kinds, names, shares)
            for leaf in self.entry(item, kind, name, share)
        ]

    def shares(self, weights: Sequence[float], where: str, scale: float) -> list[float]:
        """`scale` times each normalized weight; all zeros under a non-zero scale is an error."""
        if scale == 0.0:
            return [0.0] * len(weights)
        if not any(weights):
            raise self.fail(where, "every weight is 0: give one a positive weight, or give the whole group weight 0")
        return [scale * share for share in megatron_normalize(weights)]

    def weight(self, item: dict, where: str) -> float:
        """The finite, non-negative weight of an entry (numeric strings accepted)."""
        if "weight" not in item:
            raise self.fail(where, "missing 'weight'; give a number >= 0 (0 drops the entry)")
        value = item["weight"]
        if isinstance(value, str):
            value = _as_float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(
                f"{where}.weight", f"{item['weight']!r} is invalid: give a finite number >= 0 (0 drops the entry)"
            )
        return float(value)

    def kind(self, item: dict, where: str) -> str:
        """Which of path, parts or blend an entry is; its keys and name checked."""
        _reject_unknown(item, ("name", "weight") + _KINDS, f"{self.source}: {where}")
        kinds = [kind for kind in _KINDS if kind in item]
        if len(kinds) != 1:
            raise self.fail(
                where,
                "give exactly one of 'path' (a store), 'parts' (a store in parts) or "
                f"'blend' (a nested group), got {', '.join(kinds) or 'none'}",
            )
        if "name" in item and not isinstance(item["name"], str):
            raise self.fail(f"{where}.name", f"{item['name']!r} must be a string")
        return kinds[0]

    def entry(self, item: dict, kind: str, where: str, scale: float) -> list[_Leaf]:
        """The leaves of one entry: a store, its parts, or a nested group; named under the entry's name."""
        if kind == "blend":
            leaves = self.entries(item["blend"], f"{where}.blend", scale)
        elif kind == "parts":
            leaves = self.parts(item["parts"], f"{where}.parts", scale)
        else:
            leaves = self.with_parts([_Leaf(self.resolve(item["path"], f"{where}.path"), scale, f"{where}.path")])
        name = item.get("name", "")
        return [replace(leaf, name="/".join(n for n in (name, leaf.name) if n)) for leaf in leaves] if name else leaves

    def with_parts(self, leaves: list[_Leaf], *, by_size: bool = False) -> list[_Leaf]:
        """The leaves, a prepare output directory's replaced by its parts: sharing its weight by token counts
        as a ``parts`` entry does (so naming the directory or its parts is one blend), or each by size."""
        out = []
        for leaf in leaves:
            parts = None if leaf.weight == 0.0 and not by_size else self.directory(leaf.prefix, leaf.where)
            if parts is None:
                out.append(leaf)
            elif by_size:
                out.extend(_Leaf(part, leaf.weight, leaf.where) for part in parts)
            else:
                out.extend(self.parts([leaf.prefix], leaf.where, leaf.weight))
        return out

    def parts(self, value: Any, where: str, scale: float) -> list[_Leaf]:
        """The stores matched by a parts list, sharing `scale` by their token counts."""
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.fail(where, "expected a non-empty list of store prefixes or globs")
        patterns = [self.resolve(p, f"{where}[{i}]", strip=False) for i, p in enumerate(value)]
        if scale == 0.0:
            return []
        prefixes = sorted({p for i, pattern in enumerate(patterns) for p in self.expand(pattern, f"{where}[{i}]")})
        tokens = [self.tokens(prefix, where) for prefix in prefixes]
        if not any(tokens):
            raise self.fail(
                where,
                f"the parts ({', '.join(prefixes)}) hold no tokens: give the entry weight 0 "
                "or point it at stores with data",
            )
        return [_Leaf(p, share, where) for p, share in zip(prefixes, self.shares(tokens, where, scale))]

    def expand(self, pattern: str, where: str) -> list[str]:
        """The store prefixes of one part: itself, or the .bin/.idx files its glob matches, suffix stripped."""
        if not GLOB_CHARS & set(pattern):
            parts = self.directory(pattern, where)  # a prepare output directory: its parts
            return [strip_suffix(pattern)] if parts is None else parts
        if is_remote(pattern):
            raise self.fail(where, f"{pattern!r}: globs expand for local paths only; list remote parts one by one")
        matches = glob.glob(local_path(pattern)) + glob.glob(local_path(pattern) + ".idx")
        found = {strip_suffix(f) for f in matches if f.endswith((".bin", ".idx"))}
        if not found:
            raise self.fail(where, f"{pattern!r} matches no .bin/.idx files; check the path and pattern")
        return sorted(found)

    def directory(self, prefix: str, where: str) -> list[str] | None:
        """The parts of a prepare output directory (`directory_parts`), errors naming the spec file and entry."""
        try:
            return directory_parts(prefix)
        except TokenportError as exc:
            raise type(exc)(f"{self.source}: {where}: {exc}") from None

    def tokens(self, prefix: str, where: str) -> int:
        """size_of(prefix), errors naming the spec file and entry."""
        try:
            tokens = self.size_of(prefix)
        except TokenportError as exc:
            raise type(exc)(f"{self.source}: {where}: {exc}") from exc
        if not is_int(tokens) or tokens < 0:
            raise self.fail(where, f"size of {prefix!r} is {tokens!r}, expected a token count >= 0")
        return int(tokens)

    def resolve(self, path: Any, where: str, *, strip: bool = True) -> str:
        """A path, its store suffix stripped unless told; local relative paths joined to the spec's directory."""
        if not isinstance(path, str) or not path.strip():
            raise self.fail(where, f"{path!r} must be a non-empty store prefix, path or URL")
        path = strip_suffix(path.strip()) if strip else path.strip()
        if "://" in path:
            return path
        return os.path.normpath(os.path.join(self.base, path))

    def unique(self, leaves: list[_Leaf]) -> list[_Leaf]:
        """The leaves, or an error naming both entries when one prefix is reached twice."""
        seen: dict[str, str] = {}
        for leaf in leaves:
            if leaf.prefix in seen:
                raise self.fail(
                    leaf.where,
                    f"{leaf.prefix!r} is already in the blend at {seen[leaf.prefix]}; "
                    "list each store once (give it the combined weight)",
                )
            seen[leaf.prefix] = leaf.where
        return leaves


def _is_flat(value: Any) -> bool:
    """True for a non-empty list of scalars: Megatron's flat ``--data-path`` form."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, (str, int, float)) and not isinstance(item, bool) for item in value)
    )

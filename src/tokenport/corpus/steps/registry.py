"""Cleaning steps between reading and tokenizing, built from plain specs a config file can hold.

A spec is a mapping ``{"step": KIND, **options}`` (JSON/YAML-able); ``PrepareConfig.steps`` holds
them in order. Each worker builds its own steps from the specs for every unit, so a step may
keep state (counters) without sharing it. Every step reports counters — documents in and out,
removals per reason, changes per kind — which add up per unit and then per run in the manifest.

A new step is a ``base.Step`` subclass (or, for a step decided over the whole run such as
deduplication, a ``runwide.RunWideStep`` subclass) in its own module and one entry in ``STEP_KINDS``
(or, for a step that lives outside tokenport, one ``register_step`` call before ``prepare``).
"""

from __future__ import annotations

import difflib
import inspect
import pickle
import time
import types
import typing
from collections import Counter, abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from ..._registry import load_plugins
from ...errors import ConfigError
from ..inputs.documents import Document
from .base import Step
from .decontaminate import Decontaminate
from .dedup import ExactDedup, MinHashDedup, drops_path
from .language import LanguageFilter
from .licenses import LicenseFilter
from .lines import LineCorrections
from .pii import ScrubPII
from .quality import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from .runwide import RunWideStep
from .urls import URLFilter

__all__ = [
    "STEP_KINDS",
    "build_steps",
    "check_steps",
    "register_step",
    "registered_steps",
    "run_steps",
    "run_wide_positions",
    "run_wide_step",
    "step_modules",
    "step_options",
]


STEP_KINDS: dict[str, type[Step]] = {
    "pii": ScrubPII,
    "gopher_quality": GopherQuality,
    "gopher_repetition": GopherRepetition,
    "c4": C4Quality,
    "fineweb": FineWebQuality,
    "decontaminate": Decontaminate,
    "url_filter": URLFilter,
    "line_corrections": LineCorrections,
    "language": LanguageFilter,
    "license_filter": LicenseFilter,
    "exact_dedup": ExactDedup,
    "minhash_dedup": MinHashDedup,
}
"""Step kinds by the name a spec gives in ``"step"``."""

_BUILT_IN = frozenset(STEP_KINDS)


def register_step(kind: str, step: type[Step]) -> None:
    """Make ``{"step": kind, ...}`` specs build ``step(**options)``; ``prepare`` hands the registration to
    its workers (the class must be importable by its module name there). ConfigError for a name
    already taken by another class, or a class that is not a ``Step``."""
    if not isinstance(step, type) or not issubclass(step, Step):
        raise ConfigError(
            f"register_step({kind!r}): {step!r} is not a subclass of tokenport's step base "
            "(tokenport.corpus.steps.base.Step)"
        )
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"register_step: the step name must be a non-empty string, got {kind!r}")
    taken = STEP_KINDS.get(kind)
    if taken is not None and taken is not step:
        raise ConfigError(
            f"register_step({kind!r}): that name is taken by {taken.__module__}.{taken.__qualname__}; pick another name"
        )
    STEP_KINDS[kind] = step


def registered_steps(specs: Sequence[Mapping[str, Any]] | None = None) -> tuple[tuple[str, type[Step]], ...]:
    """The kinds ``register_step`` added to the built-in ones (those ``specs`` use, when given), for
    workers to register too."""
    used = None if specs is None else {spec.get("step") for spec in specs if isinstance(spec, Mapping)}
    return tuple(
        (kind, step) for kind, step in STEP_KINDS.items() if kind not in _BUILT_IN and (used is None or kind in used)
    )


def check_steps_reach_workers(specs: Sequence[Mapping[str, Any]]) -> None:
    """ConfigError, before any work, for a registered step of ``specs`` that worker processes cannot
    import by its module's name (a class defined in a script run as __main__, or in code run by exec()):
    workers are fresh processes that receive each step class by reference."""
    for kind, step in registered_steps(specs):
        try:
            sendable = step.__module__ != "__main__" and pickle.loads(pickle.dumps(step)) is step
        except (pickle.PicklingError, AttributeError, TypeError, ImportError):
            sendable = False
        if not sendable:
            raise ConfigError(
                f"steps: step {kind!r} is {step.__qualname__} defined in {step.__module__}, which worker processes "
                f"cannot import: put it in a module file, e.g. my_steps.py, and import it from there (register_step "
                "there too), or prepare with workers=1 (--workers 1)"
            )


def _build(spec: Mapping[str, Any], position: int, drops: str | None = None) -> Step:
    """The step of ``spec``; a run-wide step reads its decisions from ``drops`` (or is only checked)."""
    if not isinstance(spec, Mapping) or "step" not in spec:
        raise ConfigError(f"steps[{position}]: expected a mapping with a 'step' key, got {spec!r:.80}")
    kind = spec["step"]
    if isinstance(kind, str) and kind not in STEP_KINDS:
        load_plugins()  # a step kind a plugin registers
    if not isinstance(kind, str) or kind not in STEP_KINDS:
        known = ", ".join(STEP_KINDS)
        raise ConfigError(f"steps[{position}]: unknown step {kind!r}; known steps: {known}")
    options = {key: value for key, value in spec.items() if key != "step"}
    valid = step_options(kind)
    unknown = [name for name in options if name not in valid]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"steps[{position}] ({kind}): unexpected option {unknown[0]!r}{hint}; valid options of "
            f"{kind}: {', '.join(valid) or 'none'}"
        )
    missing = [name for name in _required_options(kind) if name not in options]
    if missing:
        raise ConfigError(f"steps[{position}] ({kind}): option {missing[0]!r} is required")
    _check_types(kind, options, position)
    step = _construct(kind, options, position)
    if isinstance(step, RunWideStep):
        step.use_decisions(np.load(drops) if drops else np.zeros(0, dtype=bool))
    return step


def _construct(kind: str, options: Mapping[str, Any], position: int) -> Step:
    """``STEP_KINDS[kind](**options)``, its refusals named by the spec's position."""
    try:
        return STEP_KINDS[kind](**options)
    except TypeError as error:
        raise ConfigError(f"steps[{position}] ({kind}): {error}") from None
    except ConfigError as error:
        raise ConfigError(f"steps[{position}] ({kind}): {error}") from None


def _check_types(kind: str, options: Mapping[str, Any], position: int) -> None:
    """Refuse an option whose value is not of its parameter's annotated type, strictly: a string
    where a list belongs (``kinds: email`` is not five kinds), a bool for a number, a number as text.
    Options annotated with a type the check cannot express are left to the step."""
    build: Any = STEP_KINDS[kind]
    try:
        hints = typing.get_type_hints(build.__init__ if isinstance(build, type) else build)  # type: ignore[misc]
    except Exception:  # an annotation that does not resolve (a registered step's): the step checks
        return
    for name, value in options.items():
        hint = hints.get(name)
        if hint is None:
            continue
        if isinstance(value, str) and wants_collection(hint):
            raise ConfigError(
                f"steps[{position}] ({kind}): option {name!r}={value!r:.60} is a string, but {name!r} takes a "
                f"list (a string would be read one character at a time); write it as a list: {name}: [{value:.60}]"
            )
        try:
            msgspec.convert(value, type=hint, strict=True)
        except msgspec.ValidationError as error:
            raise ConfigError(f"steps[{position}] ({kind}): option {name!r}={value!r:.60}: {error}") from None
        except TypeError:  # a type msgspec does not know: the step checks it
            continue


_COLLECTIONS = (list, tuple, set, frozenset, abc.Sequence, abc.Iterable, abc.Collection, abc.Set, abc.MutableSequence)


def wants_collection(hint: Any) -> bool:
    """Whether an annotation takes a collection (a list, a sequence, an iterable...) and no string."""
    if hint is str:
        return False
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        members = typing.get_args(hint)
        return str not in members and any(wants_collection(member) for member in members)
    return (origin or hint) in _COLLECTIONS


def step_options(kind: str) -> tuple[str, ...]:
    """The option names a step kind takes: the keyword parameters of its constructor, so an option
    a step gains is accepted with no edit here."""
    return tuple(p.name for p in _parameters(kind))


def _required_options(kind: str) -> tuple[str, ...]:
    return tuple(p.name for p in _parameters(kind) if p.default is inspect.Parameter.empty)


def _parameters(kind: str) -> list[inspect.Parameter]:
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in inspect.signature(STEP_KINDS[kind]).parameters.values() if p.kind in named]


def check_steps(specs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The specs as plain dicts, each checked by building its step once (ConfigError naming it)."""
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise ConfigError(f"steps: expected a list of step specs, got {type(specs).__name__}")
    for position, spec in enumerate(specs):
        _build(spec, position)
    return tuple(dict(spec) for spec in specs)


def build_steps(
    specs: Sequence[Mapping[str, Any]], work_dir: str, unit_name: str, upto: int | None = None, start: int = 0
) -> list[tuple[str, Step]]:
    """Fresh steps for one unit (from position ``start``, before position ``upto`` if given), each
    labelled ``"N:kind"``; run-wide steps load the unit's decisions from ``work_dir``."""
    steps = []
    for position, spec in enumerate(specs[:upto]):
        if position < start:
            continue
        drops = drops_path(work_dir, position, unit_name) if _run_wide(spec) else None
        steps.append((f"{position}:{spec['step']}", _build(spec, position, drops)))
    return steps


def step_modules(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of the modules whose code the steps of ``specs`` run (to say when their kernels compile)."""
    modules: list[str] = []
    for spec in specs:
        step = STEP_KINDS[spec["step"]]
        modules += [step.__module__, *(step.code_modules if issubclass(step, RunWideStep) else ())]
    return modules


def run_wide_positions(specs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Positions of the steps that need passes over the whole run first (``RunWideStep``s: deduplication)."""
    return [position for position, spec in enumerate(specs) if _run_wide(spec)]


def run_wide_step(specs: Sequence[Mapping[str, Any]], position: int) -> RunWideStep:
    """The run-wide step at ``position`` of checked ``specs``, for its passes 1 and 2."""
    step = _build(specs[position], position)
    if not isinstance(step, RunWideStep):
        raise ConfigError(f"steps[{position}] ({specs[position]['step']}): not a step decided over the whole run")
    return step


def _run_wide(spec: Mapping[str, Any]) -> bool:
    return issubclass(STEP_KINDS[spec["step"]], RunWideStep)


def run_steps(
    documents: Iterable[Document],
    steps: list[tuple[str, Step]],
    tally: dict[str, Counter],
    costs: dict[str, Counter] | None = None,
) -> Iterator[Document]:
    """``documents`` through every step in order, counting what goes in and out of each into ``tally``,
    and into ``costs`` the characters in and out and each step's own time in milliseconds (the time
    spent pulling from a step, less the time spent pulling from the step before it)."""
    costs = {} if costs is None else costs
    timers = [_Timed(documents)]
    stream: Iterable[Document] = timers[0]
    for label, step in steps:
        counts, cost = tally.setdefault(label, Counter()), costs.setdefault(label, Counter())
        timers.append(_Timed(step(_counting(stream, counts, "documents_in", cost, "chars_in"))))
        stream = _counting(timers[-1], counts, "documents_out", cost, "chars_out")
    try:
        yield from stream
    finally:
        for (label, _), inner, outer in zip(steps, timers, timers[1:]):
            costs[label]["time_ms"] += round((outer.elapsed - inner.elapsed) * 1000)


class _Timed:
    """An iterator that adds up the time spent waiting for each of its items."""

    def __init__(self, documents: Iterable[Document]) -> None:
        self._it = iter(documents)
        self.elapsed = 0.0

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Document:
        start = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self.elapsed += time.perf_counter() - start


def _counting(
    documents: Iterable[Document], counter: Counter, key: str, cost: Counter, chars: str
) -> Iterator[Document]:
    for document in documents:
        counter[key] += 1
        cost[chars] += len(document.text)
        yield document

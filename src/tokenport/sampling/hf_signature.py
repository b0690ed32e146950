"""transformers' constructor form of the length-grouped samplers, beside tokenport's own.

tokenport's samplers take ``(lengths, batch_size, ...)``; transformers' take ``(batch_size,
dataset=None, lengths=None, model_input_name=None, ...)``. Both forms are accepted, so HF code and
HF's tests run unchanged. The form is decided by the call, never guessed from values that could mean
either:

- a first positional argument that is an integer (Python or numpy, not a bool) is ``batch_size``:
  transformers' form;
- any other first positional argument is ``lengths``: tokenport's form (a sequence or array);
- no positional argument: transformers' form, whose keywords are a superset of tokenport's (its
  extras ``mega_batch_mult``, ``seed``, ``rng`` are keyword-only there) with the same meanings.

A call that fits neither (``dataset=`` after positional lengths, a bool, ``None`` or a string
first, lengths given twice) is a ConfigError listing both forms. In transformers' form, as in
transformers, ``lengths`` wins over ``dataset``; without ``lengths`` they are the
``len(row[model_input_name])`` of the dataset's rows (``"input_ids"`` by default), each row a mapping
(a dict, a ``BatchEncoding``); ``num_replicas`` and ``rank`` default to torch.distributed's world
size and rank. Every refusal is a ConfigError, a ValueError too, which is what transformers raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError

__all__ = ["bind_arguments", "lengths_argument", "lengths_of_dataset", "replicas_from_torch"]


def bind_arguments(
    kind: str, args: tuple[Any, ...], kwargs: dict[str, Any], ours: Callable[..., None], theirs: Callable[..., None]
) -> tuple[str, dict[str, Any]]:
    """Return ``("tokenport" | "transformers", arguments by name, defaults filled)`` of a constructor call.

    ``ours`` and ``theirs`` are stubs whose signatures are the two forms.
    """
    form = _form(kind, args, ours, theirs)
    stub = ours if form == "tokenport" else theirs
    try:
        bound = inspect.signature(stub).bind(*args, **kwargs)
    except TypeError as error:
        raise ConfigError(
            f"{kind}: {error} in {form}'s form {_shown(kind, stub)}; the forms are tokenport's "
            f"{_shown(kind, ours)} and transformers' {_shown(kind, theirs)}"
        ) from None
    bound.apply_defaults()
    return form, dict(bound.arguments)


def _form(kind: str, args: tuple[Any, ...], ours: Callable[..., None], theirs: Callable[..., None]) -> str:
    """Which form a call uses, from its first positional argument (see the module doc)."""
    if not args:
        return "transformers"
    first = args[0]
    if is_int(first):
        return "transformers"
    if first is None or isinstance(first, (bool, np.bool_, str, bytes, float, Mapping)):
        raise ConfigError(
            f"{kind}: the first argument {first!r} is neither batch_size (an integer: transformers' form "
            f"{_shown(kind, theirs)}) nor lengths (a sequence of token counts: tokenport's form {_shown(kind, ours)})"
        )
    return "tokenport"


def _shown(kind: str, stub: Callable[..., None]) -> str:
    """``Kind(a, b=None, ...)``: a form as the user would write it (no annotations)."""
    signature = inspect.signature(stub)
    bare = [parameter.replace(annotation=inspect.Parameter.empty) for parameter in signature.parameters.values()]
    return f"{kind}{signature.replace(parameters=bare, return_annotation=inspect.Signature.empty)}"


def lengths_argument(kind: str, form: str, arguments: dict[str, Any]) -> Any:
    """The lengths a call gives: ``lengths``, or in transformers' form those of ``dataset`` when
    ``lengths`` is None (transformers' precedence); a ConfigError when neither is given."""
    lengths = arguments["lengths"]
    if form == "tokenport" or lengths is not None:
        return lengths
    if arguments["dataset"] is None:
        raise ConfigError(
            f"{kind}: one of dataset and lengths must be provided: pass lengths= (token counts) or dataset= "
            "(rows that are dictionaries with a model_input_name key, 'input_ids' by default)"
        )
    return lengths_of_dataset(arguments["dataset"], arguments["model_input_name"])


def lengths_of_dataset(dataset: Any, model_input_name: Any) -> list[int]:
    """``len(row[model_input_name])`` of each row of ``dataset``, as transformers derives lengths, or a ConfigError.

    Rows must be mappings holding ``model_input_name`` (default ``"input_ids"``) whose value has a
    length and is not a string (a string's length counts characters, not tokens).
    """
    name = "input_ids" if model_input_name is None else model_input_name
    if not isinstance(name, str):
        raise ConfigError(f"model_input_name={model_input_name!r}: pass the name of a row's token column, a string")
    where = "pass rows that are dictionaries (or BatchEncodings) with that key, or pass lengths="
    try:
        rows = iter(dataset)
    except TypeError:
        what = type(dataset).__name__
        raise ConfigError(f"dataset: a {what} is not a dataset of rows (not iterable); {where}") from None
    lengths = []
    for number, row in enumerate(rows):
        if not isinstance(row, Mapping) or name not in row:
            hint = " (these look like lengths: pass them as lengths=)" if is_int(row) else ""
            raise ConfigError(
                f"dataset: row {number} (of type {type(row).__name__}) has no {name!r} key{hint}. Can only "
                f"automatically infer lengths for datasets whose items are dictionaries with an {name!r} key; {where}"
            )
        value = row[name]
        if isinstance(value, (str, bytes)):
            raise ConfigError(f"dataset: row {number}'s {name!r} is a string, not token ids: tokenize it first")
        try:
            lengths.append(len(value))
        except TypeError:
            raise ConfigError(
                f"dataset: row {number}'s {name!r} is a {type(value).__name__}, which has no length: "
                "pass token ids (a list, array or tensor), or lengths="
            ) from None
    return lengths


def replicas_from_torch(name: str) -> int:
    """The world size (``name="num_replicas"``) or this process's rank (``"rank"``) of torch.distributed's
    default group, as transformers reads them when they are not given, or a ConfigError."""
    instead = f"pass {name}= explicitly"
    try:
        import torch.distributed as dist
    except ImportError:
        raise ConfigError(f"{name}=None is read from torch.distributed; torch is not installed: {instead}") from None
    if not dist.is_available() or not dist.is_initialized():
        raise ConfigError(
            f"{name}=None is read from torch.distributed, whose default process group is not initialized: "
            f"call torch.distributed.init_process_group first, or {instead}"
        )
    return int(dist.get_world_size() if name == "num_replicas" else dist.get_rank())

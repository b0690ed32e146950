"""TensorDict fields as dock rows and back, laid out as TransferQueue's storage lays them out.

A put's field becomes a `Value`: a dock column spec, its rows and its ``kind`` (layout and torch
dtype): a 1-D tensor a scalar column, a tensor whose samples differ in their first dimension only a
ragged column, other nested tensors and non-tensor data per-sample values (an object column);
bfloat16 is held as its bits. `gathered` packs rows on the way out as TransferQueue packs them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputDataError
from .arguments import python_values
from .ragged import Packed
from .schema import BFLOAT16, OBJECT, Column

__all__ = [
    "MIXED", "TENSOR_KINDS", "Value", "column_value", "describe_kind", "gathered", "mixed_value", "per_sample",
    "renamed", "row_list", "select_rows",
]  # fmt: skip


@dataclass(frozen=True)
class Value:
    """A put's field as the dock holds it: a column spec (named after the field; the client picks the
    dock column per partition), its rows, and its ``kind`` -- layout and torch dtype -- which samples of
    one field in a live partition share."""

    column: Column
    rows: np.ndarray | Packed
    kind: tuple[Any, ...]


def column_value(name: str, value: Any, batch: int) -> Value:
    """A TensorDict field as dock rows: a 1-D tensor a scalar column; a tensor of more dimensions or a
    nested one whose samples differ in their first dimension only a ragged column; other nested
    tensors per-sample tensors (an object column); non-tensor data (lists of strings, NonTensorData,
    NonTensorStack) per-sample Python values. bfloat16 is held as its bits."""
    import torch
    from tensordict.tensorclass import is_non_tensor

    if is_non_tensor(value):
        held = python_values(_copied(_python_samples(value, batch), name), batch, f"field {name!r}")
        return Value(Column(name, OBJECT), held, ("python",))
    if not isinstance(value, torch.Tensor):
        raise InputDataError(
            f"field {name!r} is a {type(value).__name__}: pass tensors, or Python values as a list or "
            "NonTensorStack (one per sample)"
        )
    if value.is_complex() or (value.dtype != torch.bfloat16 and not _numpy_holds(value.dtype)):
        raise InputDataError(f"field {name!r} has dtype {value.dtype}, which the dock cannot hold: cast it first")
    dtype = "bfloat16" if value.dtype == torch.bfloat16 else None
    if value.is_nested:
        if value.layout == torch.jagged and value._ragged_idx == 1:  # type: ignore[attr-defined]
            values = _numpy(value.values())
            lengths = np.diff(value.offsets().cpu().numpy()).astype(np.int64)  # type: ignore[attr-defined]
            column = Column(name, dtype or values.dtype, tuple(values.shape[1:]), ragged=True)
            return Value(column, Packed(values, lengths), ("ragged", value.dtype, column.shape))
        samples = [sample.detach().cpu() for sample in value.unbind()]
        inner = {tuple(sample.shape[1:]) for sample in samples}
        if len(inner) == 1 and all(sample.dim() >= 1 for sample in samples):
            values = _numpy(torch.cat(samples))
            lengths = np.array([len(sample) for sample in samples], dtype=np.int64)
            column = Column(name, dtype or values.dtype, tuple(values.shape[1:]), ragged=True)
            return Value(column, Packed(values, lengths), ("ragged", value.dtype, column.shape))
        rows = python_values([sample.clone() for sample in samples], batch, f"field {name!r}")
        return Value(Column(name, OBJECT), rows, ("tensors", value.dtype))
    array = _numpy(value)
    if array.ndim == 1:
        return Value(Column(name, dtype or array.dtype), array, ("scalar", value.dtype))
    rows_, length = array.shape[:2]
    packed = Packed(array.reshape(rows_ * length, *array.shape[2:]), np.full(rows_, length, dtype=np.int64))
    column = Column(name, dtype or array.dtype, tuple(array.shape[2:]), ragged=True)
    return Value(column, packed, ("ragged", value.dtype, column.shape))


def _python_samples(value: Any, batch: int) -> list[Any]:
    """Each sample's Python value, as TransferQueue's storage splits a non-tensor field: a NonTensorStack
    item by item; a NonTensorData holding a list, tuple or array of one item per sample item by item
    (TransferQueue indexes it per sample), any other one value for every sample (where TransferQueue
    would index into it: a dict fails there, a string gives each sample a character)."""
    from tensordict import NonTensorData

    if isinstance(value, NonTensorData):
        data = value.data
        if isinstance(data, (list, tuple)) or (isinstance(data, np.ndarray) and data.ndim > 0):
            if len(data) == batch:
                return [data[i] for i in range(batch)]
        return [data] * batch
    return list(value.tolist())


def _copied(values: list[Any], name: str) -> list[Any]:
    """Deep copies of Python values: TransferQueue serializes them, so what a put gave and what a get
    returns never share state with what is stored (a later change to either changes neither)."""
    try:
        return copy.deepcopy(list(values))
    except Exception as error:  # any object's own __deepcopy__/__reduce__ may raise anything
        raise InputDataError(
            f"field {name!r}: a value cannot be copied ({type(error).__name__}: {error}); TransferQueue pickles "
            "Python values: put values that can be copied"
        ) from None


def _numpy(tensor: Any) -> np.ndarray:
    """A CPU tensor's values as numpy (bfloat16 as ``BFLOAT16`` bits)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(BFLOAT16)
    return tensor.numpy()


def _torch(array: np.ndarray) -> Any:
    """numpy values as a tensor (``BFLOAT16`` bits as bfloat16), in memory of its own."""
    import torch

    if array.dtype == BFLOAT16:
        return torch.from_numpy(np.array(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _numpy_holds(dtype: Any) -> bool:
    """Whether numpy has the torch ``dtype`` (float8 and other torch-only types it has not)."""
    import torch

    try:
        torch.empty(0, dtype=dtype).numpy()
    except TypeError:
        return False
    return True


def _tensor(value: np.ndarray | Packed) -> Any:
    """A dock column's rows as TransferQueue returns them: dense for scalars, jagged otherwise."""
    import torch

    if isinstance(value, Packed):
        return torch.nested.nested_tensor_from_jagged(_torch(value.values), torch.from_numpy(value.offsets))
    return _torch(value)


def _packed_like_transferqueue(values: list[Any]) -> Any:
    """Per-sample values packed as TransferQueue's storage packs them on the way out: scalar tensors
    stacked, other tensors a jagged nested tensor, else a strided one, else (and for Python values)
    a NonTensorStack."""
    import torch
    from tensordict import NonTensorStack

    if values and all(isinstance(v, torch.Tensor) for v in values):
        if all(v.dim() == 0 for v in values):
            return torch.stack(values)
        for layout in (torch.jagged, torch.strided):
            try:
                return torch.nested.as_nested_tensor(values, layout=layout)
            except (RuntimeError, TypeError):
                continue
    return NonTensorStack(*values)


_ARRAYS = ("scalar", "ragged")  # kinds whose rows the dock holds as numpy arrays
TENSOR_KINDS = ("scalar", "ragged", "tensors")  # kinds of tensor fields (their second item: the torch dtype)
MIXED = ("mixed",)  # a field whose samples in a partition came in several layouts: per-sample values


def mixed_value(name: str) -> Value:
    """The column spec and kind of field ``name`` held as per-sample values of several layouts."""
    return Value(Column(name, OBJECT), np.empty(0, dtype=OBJECT), MIXED)


def per_sample(value: np.ndarray | Packed, kind: tuple[Any, ...]) -> list[Any]:
    """A column's rows as per-sample values: tensors for tensor kinds, the values themselves otherwise."""
    if isinstance(value, Packed):
        return [_torch(row) for row in value.to_list()]
    if kind[0] == "scalar":
        return [_torch(value[i : i + 1])[0] for i in range(len(value))]
    return list(value)


def row_list(value: np.ndarray | Packed, kind: tuple[Any, ...]) -> list[Any]:
    """A column's rows: arrays (views) for tensor kinds, the values themselves for Python ones."""
    if isinstance(value, Packed):
        return value.to_list()
    if kind[0] == "scalar":
        return list(value)
    return value.tolist()


def gathered(rows: list[tuple[str, Any]], kinds: set[tuple[Any, ...]], name: str) -> Any:
    """One field's rows (each with its kind's layout, in the batch's order) as TransferQueue returns them."""
    from tensordict import NonTensorStack

    kind = next(iter(kinds))[0] if len(kinds) == 1 else None
    values = [row for _, row in rows]
    if kind == "scalar":
        return _torch(np.stack(values))
    if kind == "ragged":
        return _tensor(Packed(np.concatenate(values), np.array([len(r) for r in values], dtype=np.int64)))
    if kind == "python":
        return NonTensorStack(*_copied(values, name))
    return _packed_like_transferqueue([_torch(np.asarray(r)) if k in _ARRAYS else copy.deepcopy(r) for k, r in rows])


def renamed(column: Column, name: str) -> Column:
    """``column`` under another name."""
    return Column(name, column.dtype, column.shape, column.ragged, column.segmented)


def describe_kind(kind: tuple[Any, ...]) -> str:
    """A field kind in words: "python values", "float32 scalars", "int64 rows of items of shape (2,)"..."""
    dtype = str(kind[1]).removeprefix("torch.") if len(kind) > 1 else ""
    if kind[0] == "python":
        return "Python values (non-tensor data)"
    if kind[0] == "scalar":
        return f"{dtype} scalars"
    if kind[0] == "tensors":
        return f"{dtype} tensors of varying shapes"
    if kind[0] == "mixed":
        return "samples of several layouts"
    return f"{dtype} tensors of shape {('length', *kind[2])} per sample".replace("'length'", "length")


def select_rows(value: np.ndarray | Packed, positions: np.ndarray) -> np.ndarray | Packed:
    """Rows ``positions`` of a column value."""
    from .ragged import take_rows

    return take_rows(value, positions) if isinstance(value, Packed) else value[positions]

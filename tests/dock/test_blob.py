"""One buffer per put (dock/blob.py): every column kind laid out and read back exactly, aligned, read-only."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.dock.blob import pack_columns, unpack_columns
from tokenport.dock.ragged import Packed, Padded
from tokenport.dock.schema import BFLOAT16


def columns(rng: np.random.Generator, rows: int) -> dict:
    lengths = rng.integers(0, 9, rows)
    padded = np.full((rows, 9, 2), -7, np.float32)
    for i, n in enumerate(lengths):
        padded[i, :n] = rng.random((n, 2))
    return {
        "reward": rng.random(rows).astype(np.float32),
        "flag": rng.random(rows) < 0.5,
        "tokens": Packed(rng.integers(0, 50_000, int(lengths.sum())).astype(np.int32), lengths),
        "logits": Padded(padded, lengths),
        "grid": rng.integers(-5, 5, (rows, 3, 2)).astype(np.int8),
        "half": rng.integers(-(2**15), 2**15, (rows, 2)).astype(np.int16).view(BFLOAT16),
        "text": np.array([f"prompt {i}" for i in range(rows)] + [{"meta": 1}], dtype=object)[:rows],
    }


@pytest.mark.parametrize("rows", [0, 1, 37])
def test_columns_come_back_equal_aligned_and_read_only(rows):
    given = columns(np.random.default_rng(rows), rows)
    layout, buffer, objects = pack_columns(given)
    got = unpack_columns(layout, buffer, objects)
    assert list(got) == list(given)
    for name in ("reward", "flag", "grid", "half"):
        assert got[name].dtype == given[name].dtype and np.array_equal(got[name], given[name])
    assert np.array_equal(got["tokens"].values, given["tokens"].values)
    unpadded = given["logits"].packed()  # Padded rows are stored without their padding
    assert got["logits"].values.shape == unpadded.values.shape and np.array_equal(got["logits"].values, unpadded.values)
    assert got["text"].tolist() == given["text"].tolist()  # Python values travel beside the buffer
    for value in got.values():
        if isinstance(value, np.ndarray) and value.dtype == object:
            continue
        for array in (value.values, value.lengths) if isinstance(value, Packed) else (value,):
            assert not array.flags.writeable
            assert (array.ctypes.data - buffer.ctypes.data) % 64 == 0  # Ray's buffers start aligned
    if rows:
        with pytest.raises(ValueError):
            got["reward"][0] = 1.0

"""TRL's own bfd / bfd_split packing cases: SFTDataset packs them exactly as TRL says and as trl does.

TRL ships no tests in its wheel. The cases of its tests/test_data_utils.py class TestPackDatasetBfd
(all seven: with_dataset, with_iterable_dataset, with_overlong_0, with_overlong_two_coluns,
with_non_power_of_2, default_no_split, with_empty_sequences) are taken here as facts: each case's
examples, seq_length, strategy and expected output. The code is ours. Each case is checked three ways:

- TRL's expected output equals what the installed ``trl.pack_dataset`` gives (the facts still hold);
- tokenport's SFT packing gives exactly that output: ``SFTDataset(store, seq_length, window=1000)``
  with ``too_long="truncate"`` for ``"bfd"`` and ``"split"`` for ``"bfd_split"`` (``seed=None``:
  TRL's order; ``window=1000``: TRL's ``map`` batch). The examples are written as a chat store whose
  loss masks are all ones (TRL's packing knows no masks; with every token trained, truncation never
  drops a conversation). Every column of a packed row is read through ``SFTDataset.lineage`` (the
  conversations and token ranges the row holds), ``seq_lengths`` likewise; the row's own
  ``input_ids`` and ``position_ids`` from ``get_batch`` must agree with them;
- each case under the other strategy too equals the installed ``trl.pack_dataset``: 7 cases x 2
  strategies, 14 comparisons.

Outside the claim, and so not checked: the ``datasets`` formats TRL's cases also assert
(``with_format("numpy", dtype="float32")`` kept on the packed dataset, an IterableDataset's
``_formatting``): tokenport returns arrays from a token store, not a ``datasets`` object. The iterable
case is still checked for its rows (TRL packs an IterableDataset per ``map`` batch, as it packs a
Dataset). The two-column case's columns hold negative numbers, which a token store cannot: its first
column is stored shifted by a constant and shifted back, and both columns are read through the rows'
lineage, which is what packing decides.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.samples.sft import SFTDataset

datasets = pytest.importorskip("datasets")
trl_data_utils = pytest.importorskip("trl.data_utils")

# name: (examples, seq_length, strategy, expected output), from TRL's TestPackDatasetBfd
CASES: dict[str, tuple[dict[str, list[list[int]]], int, str, dict[str, list[list[int]]]]] = {
    "with_dataset": (
        {"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]]},
        4,
        "bfd",
        {"input_ids": [[4, 5, 6, 7], [1, 2, 3, 8]], "seq_lengths": [[4], [3, 1]]},
    ),
    "with_iterable_dataset": (
        {"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]]},
        4,
        "bfd",
        {"input_ids": [[4, 5, 6, 7], [1, 2, 3, 8]], "seq_lengths": [[4], [3, 1]]},
    ),
    "with_overlong_0": (
        {"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11], [12]]},
        4,
        "bfd_split",
        {"input_ids": [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7, 5, 12]], "seq_lengths": [[4], [4], [2, 1, 1]]},
    ),
    "with_overlong_two_coluns": (
        {
            "col1": [[1, -2, 3, -4, 5, -6], [7, -8, 9], [-10, 11, -12], [13, -14, 15, -16]],
            "col2": [[-1, 2, -3, 4, -5, 6], [-7, 8, -9], [10, -11, 12], [-13, 14, -15, 16]],
        },
        4,
        "bfd_split",
        {
            "col1": [[1, -2, 3, -4], [13, -14, 15, -16], [7, -8, 9], [-10, 11, -12], [5, -6]],
            "col2": [[-1, 2, -3, 4], [-13, 14, -15, 16], [-7, 8, -9], [10, -11, 12], [-5, 6]],
            "seq_lengths": [[4], [4], [3], [3], [2]],
        },
    ),
    "with_non_power_of_2": (
        {"input_ids": [[1, 2, 3, 4, 5], [6], [7, 8, 9, 10], [11, 12, 13]]},
        5,
        "bfd_split",
        {"input_ids": [[1, 2, 3, 4, 5], [7, 8, 9, 10, 6], [11, 12, 13]], "seq_lengths": [[5], [4, 1], [3]]},
    ),
    "default_no_split": (
        {"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11], [12]]},
        4,
        "bfd",
        {"input_ids": [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7, 12]], "seq_lengths": [[4], [4], [2, 1]]},
    ),
    "with_empty_sequences": (
        {"input_ids": [[1, 2], [], [3, 4, 5], [], [6]]},
        4,
        "bfd_split",
        {"input_ids": [[3, 4, 5, 6], [1, 2]], "seq_lengths": [[3, 1], [2]]},
    ),
}
TOO_LONG = {"bfd": "truncate", "bfd_split": "split"}


def trl_packed(name: str, examples: dict[str, list[list[int]]], seq_length: int, strategy: str) -> dict[str, Any]:
    """The installed trl.pack_dataset's output, built as TRL's case builds it."""
    dataset = datasets.Dataset.from_dict(examples)
    if name == "with_iterable_dataset":
        packed = trl_data_utils.pack_dataset(
            dataset.to_iterable_dataset().with_format("numpy"), seq_length, strategy=strategy
        )
        return next(iter(packed.with_format(None).batch(batch_size=len(next(iter(examples.values()))))))
    if name == "with_dataset":
        dataset = dataset.with_format("numpy", dtype="float32")
    return trl_data_utils.pack_dataset(dataset, seq_length, strategy=strategy).to_dict()


def as_ints(output: dict[str, Any]) -> dict[str, list[list[int]]]:
    """Every column as lists of Python ints (TRL's float32-formatted case gives floats)."""
    return {key: [[int(v) for v in row] for row in rows] for key, rows in output.items()}


def tokenport_packed(tmp_path, examples: dict[str, list[list[int]]], seq_length: int, strategy: str) -> dict:
    """SFTDataset's rows of the examples, every column read through each row's lineage (see the module doc)."""
    first = next(iter(examples))
    shift = -min([0, *(min(row) for row in examples[first] if row)])  # a token store holds ids >= 0
    prefix = str(tmp_path / "chat")
    documents = (Doc(np.asarray(row, np.int64) + shift, mask=np.ones(len(row), np.uint8)) for row in examples[first])
    build_store(prefix, documents, dtype=np.uint16, masks=True)
    ds = SFTDataset(tp.IndexedDataset(prefix), seq_length, too_long=TOO_LONG[strategy], window=1000, shape="hf")
    out: dict[str, list[list[int]]] = {name: [] for name in examples}
    out["seq_lengths"] = []
    for r in range(len(ds)):
        pieces = ds.lineage(r).pieces
        for name, rows in examples.items():
            out[name].append([value for doc, start, end in pieces for value in rows[doc][start:end]])
        out["seq_lengths"].append([end - start for _, start, end in pieces])
        sample, total = ds[r], sum(out["seq_lengths"][r])
        assert (sample["input_ids"][:total] - shift).tolist() == out[first][r]
        assert sample["position_ids"][:total].tolist() == [j for n in out["seq_lengths"][r] for j in range(n)]
        assert (sample["input_ids"][total:] == 0).all()
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_trl_expected_output_is_what_trl_gives(name):
    examples, seq_length, strategy, expected = CASES[name]
    assert as_ints(trl_packed(name, examples, seq_length, strategy)) == expected


@pytest.mark.parametrize("name", list(CASES))
def test_sft_packing_gives_trl_expected_output(name, tmp_path):
    examples, seq_length, strategy, expected = CASES[name]
    assert tokenport_packed(tmp_path, examples, seq_length, strategy) == expected


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split"])
@pytest.mark.parametrize("name", list(CASES))
def test_sft_packing_equals_installed_trl_under_both_strategies(name, strategy, tmp_path):
    examples, seq_length, _, _ = CASES[name]
    assert tokenport_packed(tmp_path, examples, seq_length, strategy) == as_ints(
        trl_packed(name, examples, seq_length, strategy)
    )


@pytest.mark.parametrize("block", range(2))
def test_sft_packing_equals_installed_trl_on_random_small_cases(block, tmp_path):
    """Beyond TRL's cases: many ties, empty and overlong sequences, seq_length down to 1."""
    rng = np.random.default_rng(2600 + block)
    for case in range(15):
        seq_length = int(rng.choice([1, 2, 3, 5, 8, 16]))
        n = int(rng.integers(1, 40))
        examples = {
            "input_ids": [rng.integers(1, 500, int(rng.integers(0, 2 * seq_length + 2))).tolist() for _ in range(n)]
        }
        for strategy in ("bfd", "bfd_split"):
            where = tmp_path / f"{case}-{strategy}"
            where.mkdir()
            expected = as_ints(trl_packed("random", examples, seq_length, strategy))
            assert tokenport_packed(where, examples, seq_length, strategy) == expected, (case, strategy)

"""HF datasets saved to disk as prepare inputs: written by the real `datasets` library, read with pyarrow."""

from __future__ import annotations

import pytest

from tests.corpus.test_prepare_steps import decoded
from tokenport.corpus import PrepareConfig, prepare

datasets = pytest.importorskip("datasets")


def test_saved_dataset_and_dataset_dict_are_read_in_order_with_metadata(tmp_path):
    rows = {
        "text": [f"document number {i}" for i in range(50)],
        "url": [f"https://{'casino' if i % 10 == 3 else 'news'}.example/{i}" for i in range(50)],
    }
    single = tmp_path / "single"
    datasets.Dataset.from_dict(rows).save_to_disk(str(single), num_shards=3)
    result = prepare(PrepareConfig([str(single)], str(tmp_path / "out"), workers=1))
    assert decoded(result) == rows["text"]  # three shards, in the dataset's order; no json file read as text
    filtered = prepare(
        PrepareConfig([str(single)], str(tmp_path / "filtered"), workers=1, steps=[{"step": "url_filter"}])
    )  # the url column reaches the step
    assert decoded(filtered) == [t for i, t in enumerate(rows["text"]) if i % 10 != 3]
    both = tmp_path / "dict"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["t1", "t2"]}),
            "test": datasets.Dataset.from_dict({"text": ["e1"]}),
        }
    ).save_to_disk(str(both))
    assert decoded(prepare(PrepareConfig([str(both)], str(tmp_path / "out2"), workers=1))) == ["e1", "t1", "t2"]


def test_a_missing_text_column_is_named(tmp_path):
    from tokenport.errors import InputDataError

    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"content": ["a", "b"]}).save_to_disk(str(saved))
    with pytest.raises(InputDataError, match="has no column 'text'"):
        prepare(PrepareConfig([str(saved)], str(tmp_path / "out"), workers=1))

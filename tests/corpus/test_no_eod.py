"""A tokenizer without an end-of-document token: accepted with --no-eod (the store records no EOD id),
refused before any work without it, naming --no-eod and '#eod=TOKEN'."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import TokenizerError
from tokenport.indexed import IndexedDataset

WORDS = ["[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog"]


@pytest.fixture
def no_eod_tokenizer(tmp_path) -> str:
    """A real WordLevel tokenizer.json whose vocabulary has none of the EOD candidates."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return str(path)


def corpus(tmp_path) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": "the cat sat"}) + "\n" + json.dumps({"text": "a dog on the mat"}) + "\n")
    return str(path)


def test_a_tokenizer_without_eod_loads_and_says_so_only_where_an_eod_is_needed(no_eod_tokenizer):
    tok = tp.load_tokenizer(f"hf:{no_eod_tokenizer}")
    assert tok.eod_id_or_none is None and "eod_id" not in tok.identity()
    assert tok.decode(tok.encode("the cat")) == "the cat"
    with pytest.raises(TokenizerError, match=r"has none of the end-of-document tokens.*#eod=TOKEN.*--no-eod"):
        _ = tok.eod_id
    assert tp.load_tokenizer(f"hf:{no_eod_tokenizer}#eod=mat").eod_id == WORDS.index("mat")


def test_no_eod_prepares_with_such_a_tokenizer_and_the_store_records_no_eod(tmp_path, no_eod_tokenizer):
    config = PrepareConfig(corpus(tmp_path), str(tmp_path / "out"), tokenizer=no_eod_tokenizer, append_eod=False)
    result = prepare(config)
    assert result.documents == 2
    with IndexedDataset(result.parts[0]) as store:
        assert [store[i].tolist() for i in range(len(store))] == [[1, 2, 3], [6, 7, 4, 1, 5]]
    part = json.loads((tmp_path / "out" / "part-00000.json").read_text())
    assert "eod_id" not in part["tokenizer"] and part["tokenizer"]["vocab_size"] == len(WORDS)
    assert part["provenance"]["prepare"]["append_eod"] is False
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["config"]["append_eod"] is False and "eod_id" not in manifest["tokenizer"]
    again = prepare(config)  # finished: the same tokenizer identity is recognised
    assert again.resumed_units == -1 or again.documents == 2


def test_without_no_eod_it_is_refused_before_any_work(tmp_path, no_eod_tokenizer):
    config = PrepareConfig(corpus(tmp_path), str(tmp_path / "out"), tokenizer=no_eod_tokenizer)
    with pytest.raises(TokenizerError, match=r"tokenizer.json has none of the end-of-document tokens.*--no-eod"):
        prepare(config)
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_with_an_eod_keeps_its_identity(tmp_path):
    byte = tp.load_tokenizer("byte")
    assert byte.identity()["eod_id"] == byte.eod_id == byte.eod_id_or_none == 256
    assert np.array_equal(byte.encode("ab"), [97, 98])


def test_only_a_no_eod_run_says_so_in_its_stores(tmp_path):
    with_eod = prepare(PrepareConfig(corpus(tmp_path), str(tmp_path / "with"), workers=1))
    without = prepare(PrepareConfig(corpus(tmp_path), str(tmp_path / "without"), workers=1, append_eod=False))
    assert "append_eod" not in json.loads((tmp_path / "with" / "part-00000.json").read_text())["provenance"]["prepare"]
    part = json.loads((tmp_path / "without" / "part-00000.json").read_text())
    assert part["provenance"]["prepare"]["append_eod"] is False and part["tokenizer"]["eod_id"] == 256
    assert with_eod.tokens == without.tokens + 2

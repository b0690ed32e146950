"""summarize_stores: each store's block, then a total over them; a prepare output directory is its parts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests._support.stores import build_store
from tests.indexed.test_prepare_outputs import prepare_output
from tokenport.errors import ConfigError
from tokenport.indexed.inspect import summarize, summarize_stores


def test_a_prepare_output_is_summarized_part_by_part_and_totalled(tmp_path):
    parts = prepare_output(tmp_path / "web", [[[1, 2, 3], [4, 5]], [[6] * 10]])
    lone = build_store(tmp_path / "code", [[7, 8]], dtype=np.uint16)
    report = summarize_stores([str(tmp_path / "web"), lone], documents=1)
    assert [s.prefix for s in report.stores] == [*parts, lone]
    assert report.stores == tuple(summarize(p, documents=1) for p in (*parts, lone))
    data = report.to_json()
    assert list(data) == ["stores", "total"]
    assert data["stores"] == [summarize(p, documents=1).to_json() for p in (*parts, lone)]
    assert data["total"] == {"stores": 3, "documents": 4, "sequences": 4, "tokens": 17, "bin_bytes": 34}
    json.dumps(data)  # JSON-able as it is
    text = report.render()
    blocks = text.split("\n\n")
    assert blocks[:3] == [summarize(p, documents=1).render() for p in (*parts, lone)]
    assert blocks[3] == "total      3 stores  4 documents  4 sequences  17 tokens  (0.0 MiB in .bin)"


def test_one_store_has_no_total_line_but_its_json_has_the_total(tmp_path):
    (part,) = prepare_output(tmp_path / "web", [[[1, 2, 3]]])
    report = summarize_stores([str(tmp_path / "web")])
    assert report.render() == summarize(part).render()
    assert report.to_json()["total"]["tokens"] == 3


def test_bad_arguments_are_refused_before_any_store_is_read(tmp_path):
    with pytest.raises(ConfigError, match="documents"):
        summarize_stores([str(tmp_path / "missing")], documents=-1)
    with pytest.raises(ConfigError, match="give one or more stores"):
        summarize_stores([])

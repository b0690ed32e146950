"""`prepare` on a local Ray: one task per unit, the same output as the local executor."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.indexed import IndexedDataset

pytest.importorskip("ray")


def _store_bytes(result) -> list[bytes]:
    out = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            out += [ds[i].tobytes() for i in range(len(ds))]
    return out


def test_ray_executor_output_equals_local_with_cleaning_and_dedup(ray_session, tmp_path: pathlib.Path):
    paths = []
    rng = np.random.default_rng(0)
    vocabulary = [f"word{k}" for k in range(2000)]
    base = [f"Section {i}. The " + " and the ".join(rng.choice(vocabulary, 20)) + " of the agenda." for i in range(30)]
    for k in range(3):
        path = tmp_path / f"in{k}.jsonl"
        texts = base[k * 10 : (k + 1) * 10] + [base[k].upper(), "Call 555-123-4567 now, it is short."]
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        paths.append(str(path))
    steps = [
        {"step": "gopher_quality", "min_words": 10},
        {"step": "exact_dedup"},
        {"step": "minhash_dedup"},
        {"step": "pii"},
    ]
    local = prepare(PrepareConfig(paths, str(tmp_path / "local"), workers=2, steps=steps, unit_bytes=500))
    on_ray = prepare(PrepareConfig(paths, str(tmp_path / "ray"), steps=steps, unit_bytes=500, executor="ray"))
    assert _store_bytes(on_ray) == _store_bytes(local) and on_ray.documents == local.documents == 30
    assert on_ray.steps == local.steps
    assert on_ray.steps["1:exact_dedup"]["removed:duplicate"] == 3
    assert on_ray.steps["2:minhash_dedup"] == local.steps["2:minhash_dedup"]  # band pairs made by Ray tasks


def test_bad_executor_is_refused(tmp_path):
    with pytest.raises(tp.ConfigError, match="executor='spark'"):
        PrepareConfig(["x.jsonl"], str(tmp_path / "o"), executor="spark")

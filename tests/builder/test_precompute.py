"""`tokenport build-cache`: plans from JSON/YAML, every split's indices built once, then found in the cache."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.builder.plan import CachePlan, build_cache, load_cache_plan
from tokenport.cli import main


@pytest.fixture()
def stores(tmp_path):
    """Two small stores of random documents."""
    rng = np.random.default_rng(0)
    prefixes = []
    for name in ("wiki", "code"):
        documents = random_documents(rng, 300, tokens=(3, 1000), length=(1, 90))
        prefixes.append(build_store(tmp_path / name, documents, dtype=np.uint16))
    return prefixes


def _plan_file(tmp_path, **fields) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(fields))
    return str(path)


def test_cli_builds_then_finds_every_index(tmp_path, stores, capsys):
    plan = _plan_file(
        tmp_path,
        cache_dir="cache",
        datasets=["wiki", "code"],
        split="90,8,2",
        samples={"train": 400, "valid": 30, "test": 5},
        seq_length=32,
        seed=7,
    )
    assert main(["build-cache", plan]) == 0
    first = capsys.readouterr().out
    assert first.count("built ") == 6 and "6 built, 0 already there" in first
    assert main(["build-cache", plan]) == 0
    assert "0 built, 6 already there" in capsys.readouterr().out

    # a training job asking for the same indices maps them from the cache: no build
    store = tp.IndexedDataset(stores[0])
    config = tp.GPTSampleConfig(seq_length=32, eod_id=0)
    cache = tp.IndexCache(tmp_path / "cache")
    entries = len(os.listdir(cache.directory))
    ds = tp.build_gpt_dataset(store, 400, config, 7, split="90,8,2", which="train", cache=cache)
    assert len(os.listdir(cache.directory)) == entries
    assert not ds.sample_index.flags.writeable  # memory-mapped from the entry
    fresh = tp.build_gpt_dataset(store, 400, config, 7, split="90,8,2", which="train")
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(ds, name), getattr(fresh, name)), name


def test_validation_keeps_its_partial_sample_when_asked(tmp_path, stores):
    kept = CachePlan(
        datasets=(stores[0],),
        cache_dir=str(tmp_path / "c"),
        seq_length=16,
        seed=1,
        samples=(0, 10, 0),
        split="50,50",
        drop_last_partial_validation=False,
    )
    dropped = CachePlan(
        datasets=(stores[0],), cache_dir=str(tmp_path / "c"), seq_length=16, seed=1, samples=(0, 10, 0), split="50,50"
    )
    (a,), (b,) = build_cache(kept), build_cache(dropped)
    assert a.key != b.key and a.built and b.built


def test_yaml_plan(tmp_path, stores):
    pytest.importorskip("yaml")
    path = tmp_path / "plan.yaml"
    path.write_text("cache_dir: cache\ndatasets: [wiki]\nsamples: [20, 0, 0]\nseq_length: 8\nseed: 3\nsplit: '1'\n")
    plan = load_cache_plan(path)
    assert plan.samples == (20, 0, 0) and plan.datasets == (str(tmp_path / "wiki"),)
    (entry,) = build_cache(plan)
    assert entry.split == "train" and entry.built


@pytest.mark.parametrize(
    "fields, named",
    [
        (dict(datasets=[], cache_dir="c", seq_length=8, seed=1, samples=[1]), "datasets"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=0, seed=1, samples=[1]), "seq_length"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=8, seed=-2, samples=[1]), "seed"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=8, seed=1, samples={"training": 5}), "training"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=8, seed=1, samples=[1, -1]), "samples"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=8, seed=1, samples=[1], split="a,b"), "split"),
        (dict(datasets=["wiki"], cache_dir="c", seq_length=8, seed=1, samples=[1], colour="red"), "colour"),
        (dict(datasets=["wiki"], seq_length=8, seed=1, samples=[1]), "cache_dir"),
    ],
)
def test_bad_plans_name_the_file_and_field(tmp_path, fields, named):
    path = _plan_file(tmp_path, **fields)
    with pytest.raises(tp.ConfigError, match=named) as error:
        load_cache_plan(path)
    assert path in str(error.value)


def test_unparsable_plan_and_missing_store(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text("{not json")
    assert main(["build-cache", str(path)]) == 2
    assert "plan.json: not valid JSON at line 1" in capsys.readouterr().err
    plan = _plan_file(tmp_path, cache_dir="c", datasets=["nowhere"], samples=[5], seq_length=8, seed=1)
    assert main(["build-cache", plan]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_spec_plan_builds_every_index_a_blend_needs(tmp_path, stores, capsys):
    spec = tmp_path / "blend.json"
    spec.write_text(json.dumps({"blend": [{"path": "wiki", "weight": 0.25}, {"path": "code", "weight": 0.75}]}))
    plan = _plan_file(
        tmp_path,
        cache_dir="cache",
        spec="blend.json",
        split="90,10,0",
        samples={"train": 300, "valid": 20},
        seq_length=16,
        seed=5,
    )
    assert main(["build-cache", plan]) == 0
    assert "2 built, 0 already there" in capsys.readouterr().out
    entries = sorted(os.listdir(tmp_path / "cache"))
    assert main(["build-cache", plan]) == 0
    assert "0 built, 2 already there" in capsys.readouterr().out

    # the run itself finds every index in the cache: nothing new is written
    config = tp.GPTSampleConfig(seq_length=16, eod_id=0)
    train, valid, _ = tp.build_datasets(
        tp.load_blend_spec(spec), sizes=(300, 20, 0), config=config, seed=5, split="90,10,0", cache=tmp_path / "cache"
    )
    assert len(train) == 300 and len(valid) == 20
    assert sorted(os.listdir(tmp_path / "cache")) == entries


def test_plan_with_both_datasets_and_spec_is_refused(tmp_path):
    path = _plan_file(tmp_path, cache_dir="c", datasets=["wiki"], spec="b.json", samples=[1], seq_length=8, seed=1)
    with pytest.raises(tp.ConfigError, match="not both"):
        load_cache_plan(path)


def test_workers_build_the_same_entries_as_one_process(tmp_path, stores):
    fields = dict(split="90,8,2", samples={"train": 400, "valid": 30}, seq_length=32, seed=7)
    one = build_cache(load_cache_plan(_plan_file(tmp_path, cache_dir="one", datasets=stores, **fields)))
    plan = load_cache_plan(_plan_file(tmp_path, cache_dir="two", datasets=stores, **fields))
    seen = []
    two = build_cache(plan, workers=2, report=seen.append)
    assert [(e.dataset, e.split, e.key, e.built) for e in two] == [(e.dataset, e.split, e.key, e.built) for e in one]
    assert seen == two and all(e.built for e in two)
    for entry in two:
        for name in ("arrays.bin", "description.json"):
            assert (tmp_path / "one" / entry.key / name).read_bytes() == (
                tmp_path / "two" / entry.key / name
            ).read_bytes()


def test_cli_workers_builds_a_blend_spec_in_processes(tmp_path, stores, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"blend": [0.4, stores[0], 0.6, stores[1]]}))
    fields = dict(spec=str(spec), split="90,8,2", samples={"train": 400}, seq_length=32, seed=7)
    assert main(["build-cache", _plan_file(tmp_path, cache_dir="two", **fields), "--workers", "2"]) == 0
    assert main(["build-cache", _plan_file(tmp_path, cache_dir="one", **fields)]) == 0
    (entry,) = [n for n in os.listdir(tmp_path / "one") if "." not in n]
    assert (tmp_path / "one" / entry / "arrays.bin").read_bytes() == (
        tmp_path / "two" / entry / "arrays.bin"
    ).read_bytes()
    assert "1 built" in capsys.readouterr().out

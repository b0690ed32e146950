"""A prepare output directory in any store list stands for its parts, in order, its weight shared by size.

Spec ``path:`` and ``parts:`` entries, Megatron's lists, a ``Blend`` and build_datasets' list form all
expand it; a spec naming the directory and one naming its parts build the same blend, cache keys included.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tests.indexed.test_prepare_outputs import prepare_output
from tokenport.blend import MixtureSchedule
from tokenport.builder.parts import megatron_normalize
from tokenport.builder.report import check_spec_tokenizers
from tokenport.builder.specs import (
    Blend,
    BlendSpec,
    blend_from_args_file,
    blend_from_arguments,
    blend_per_split_from_json,
    load_blend_spec,
)
from tokenport.errors import ConfigError

CONFIG = tp.GPTSampleConfig(seq_length=8, eod_id=0)


def _documents(seed: int, count: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 90, int(rng.integers(3, 30))).tolist() + [0] for _ in range(count)]


@pytest.fixture
def run(tmp_path):
    """A prepare output ``web`` of three parts (of different sizes) and a lone store ``code``."""
    parts = prepare_output(tmp_path / "web", [_documents(1, 30), _documents(2, 12), _documents(3, 50)])
    code = build_store(tmp_path / "code", _documents(4, 40), dtype=np.uint16)
    return tmp_path, parts, code


def _tokens(prefix: str) -> int:
    with tp.IndexedDataset(prefix) as store:
        return store.num_tokens


def _samples(dataset) -> list[list[int]] | None:
    return None if dataset is None else [dataset[i]["tokens"].tolist() for i in range(len(dataset))]


def test_a_spec_naming_the_directory_builds_the_blend_of_its_parts(run):
    root, parts, code = run
    (root / "dir.yaml").write_text("blend:\n  - {path: web, weight: 0.4}\n  - {path: code, weight: 0.6}\n")
    (root / "parts.yaml").write_text(
        "blend:\n  - {parts: ['web/part-*'], weight: 0.4}\n  - {path: code, weight: 0.6}\n"
    )
    by_dir, by_parts = load_blend_spec(root / "dir.yaml"), load_blend_spec(root / "parts.yaml")
    assert by_dir.blend == by_parts.blend and by_dir.blend.prefixes == (*parts, code)
    shares = megatron_normalize([_tokens(p) for p in parts])
    assert by_dir.blend.weights == pytest.approx([0.4 * s for s in shares] + [0.6])
    cache = root / "cache"
    first = tp.build_datasets(root / "dir.yaml", sizes=(60, 0, 0), config=CONFIG, seed=5, split="1,0,0", cache=cache)[0]
    entries = sorted(os.listdir(cache))
    second = tp.build_datasets(
        root / "parts.yaml", sizes=(60, 0, 0), config=CONFIG, seed=5, split="1,0,0", cache=cache
    )[0]
    assert sorted(os.listdir(cache)) == entries  # the same cache keys: nothing new was built
    assert _samples(first) == _samples(second)


def test_path_and_parts_entries_and_flat_lists_in_a_spec_take_a_directory(run):
    root, parts, code = run
    (root / "flat.yaml").write_text("blend: [web, code]\n")
    assert load_blend_spec(root / "flat.yaml").blend == Blend((*parts, code))
    (root / "weighted.yaml").write_text("blend: ['0.5', web, '0.5', code]\n")
    (root / "mixed.yaml").write_text("blend:\n  - {parts: [web], weight: 1}\n  - {path: code, weight: 1}\n")
    assert load_blend_spec(root / "weighted.yaml").blend == load_blend_spec(root / "mixed.yaml").blend
    (root / "dropped.yaml").write_text("blend:\n  - {path: web, weight: 0}\n  - {path: code, weight: 1}\n")
    assert load_blend_spec(root / "dropped.yaml").blend == Blend((code,), (1.0,))


def test_build_datasets_lists_and_blends_take_a_directory(run):
    root, parts, code = run
    kwargs = dict(sizes=(None, 0, 0), config=CONFIG, seed=2, split="1,0,0")
    by_dir = tp.build_datasets([str(root / "web")], **kwargs)
    by_parts = tp.build_datasets(list(parts), **kwargs)
    for mine, theirs in zip(by_dir, by_parts):
        assert _samples(mine) == _samples(theirs)
    weighted = tp.build_datasets(
        Blend((str(root / "web"), code), (0.3, 0.7)), sizes=(50, 5, 0), config=CONFIG, seed=2, split="8,2,0"
    )
    shares = megatron_normalize([_tokens(p) for p in parts])
    explicit = Blend((*parts, code), tuple(0.3 * s for s in shares) + (0.7,))
    expected = tp.build_datasets(explicit, sizes=(50, 5, 0), config=CONFIG, seed=2, split="8,2,0")
    for mine, theirs in zip(weighted, expected):
        assert _samples(mine) == _samples(theirs)


def test_a_weighted_directory_on_the_command_line_shares_its_weight_by_size(run):
    root, parts, code = run
    blend = blend_from_arguments(["0.3", str(root / "web"), "0.7", code + ".idx"])
    shares = megatron_normalize([_tokens(p) for p in parts])
    assert blend == Blend((*parts, code), tuple(0.3 * s for s in shares) + (0.7,))
    with pytest.raises(ConfigError, match="given twice"):
        blend_from_arguments(["0.3", str(root / "web"), "0.7", parts[1]])


def test_a_scheduled_blend_naming_a_directory_asks_for_its_parts(run):
    root, _, code = run
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 1]}])
    with pytest.raises(ConfigError, match=r"scheduled blend names a prepare output directory.*resolve_stores"):
        Blend((str(root / "web"), code), (1.0, 1.0), schedule).with_parts()


def test_a_spec_entry_naming_a_folder_of_raw_files_names_the_entry_and_the_prepare_command(run):
    root, _, code = run
    (root / "raw").mkdir()
    (root / "raw" / "a.jsonl").write_text("{}\n")
    (root / "spec.yaml").write_text("blend:\n  - {path: code, weight: 1}\n  - {path: raw, weight: 1}\n")
    with pytest.raises(
        ConfigError,
        match=r"spec.yaml: blend\[1\].path: .*raw is a directory without tokenport.json.*"
        r"tokenport prepare .*raw -o stores/raw$",
    ):
        load_blend_spec(root / "spec.yaml")


def test_megatron_args_files_take_a_directory(run):
    root, parts, code = run
    (root / "args.txt").write_text(f"0.3 {root / 'web'} 0.7 {code}\n")
    (root / "per_split.json").write_text(json.dumps({"train": [str(root / "web")], "valid": None}))
    shares = megatron_normalize([_tokens(p) for p in parts])
    kwargs = dict(sizes=(50, 0, 0), config=CONFIG, seed=4, split="1,0,0")
    by_file = tp.build_datasets(blend_from_args_file(root / "args.txt"), **kwargs)[0]
    explicit = tp.build_datasets(Blend((*parts, code), tuple(0.3 * s for s in shares) + (0.7,)), **kwargs)[0]
    assert _samples(by_file) == _samples(explicit)
    per_split = blend_per_split_from_json(root / "per_split.json")
    kwargs = dict(sizes=(None, 0, 0), config=CONFIG, seed=4)
    assert _samples(tp.build_datasets(per_split, **kwargs)[0]) == _samples(
        tp.build_datasets(BlendSpec(per_split=(Blend(tuple(parts)), None, None)), **kwargs)[0]
    )
    check_spec_tokenizers(BlendSpec(blend=Blend((str(root / "web"), code), (1.0, 1.0))))  # reads the parts

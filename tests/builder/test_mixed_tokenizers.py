"""Everything that combines stores refuses two prepared with different tokenizers (same EOD id or not),
naming both, unless allow_mixed_tokenizers; stores that record no tokenizer are not compared."""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.blend import AdaptiveBlend, BlendedDataset, MixtureSchedule
from tokenport.builder import stat_record
from tokenport.builder.datasets import build_datasets
from tokenport.cli import main
from tokenport.indexed import IndexedDataset, manifest
from tokenport.indexed.same_tokenizer import check_same_tokenizer
from tokenport.integrations.megatron import datasets_provider
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig

EOD = 2
CONFIG = GPTSampleConfig(seq_length=16)
LENGTHS = np.tile([5, 9, 3, 11, 7], 8)


def _identity(fingerprint: str, name: str = "tok", vocab_size: int = 1000, kind: str = "hf") -> dict:
    """A tokenizer record as Tokenizer.identity() writes it."""
    return {
        "kind": kind,
        "name": name,
        "spec": f"hf:/models/{name}",
        "vocab_size": vocab_size,
        "eod_id": EOD,
        "fingerprint": fingerprint,
    }


A = _identity("sha256:aaaa")
B = _identity("sha256:bbbb")  # another vocabulary with the same EOD id


def _write(prefix, tokenizer, seed: int = 0) -> str:
    tokens = np.random.default_rng(seed).integers(3, 1000, int(LENGTHS.sum())).astype(np.uint16)
    tokens[np.cumsum(LENGTHS) - 1] = EOD
    return build_store(prefix, tokens, lengths=LENGTHS, dtype=np.uint16, tokenizer=tokenizer)


@pytest.fixture
def pair(tmp_path):
    return _write(tmp_path / "a", A, 1), _write(tmp_path / "b", B, 2)


def _spec(prefixes):
    return [x for p in prefixes for x in ("1", p)]


def _build(prefixes, cache=None, **options):
    return build_datasets(
        _spec(prefixes), sizes=(60, 0, 0), config=CONFIG, seed=3, split="1,0,0", cache=cache, **options
    )[0]


def _refused(first, second):
    return rf"{second} was prepared with another tokenizer than {first}"


@pytest.mark.parametrize("cached", [False, True])
def test_build_datasets_refuses_stores_of_different_tokenizers_with_one_eod(pair, tmp_path, cached):
    cache = tmp_path / "cache" if cached else None
    with pytest.raises(tp.ConfigError, match=_refused(*pair)):
        _build(pair, cache)
    blend = _build(pair, cache, allow_mixed_tokenizers=True)
    assert len(blend) == 60 and {int(d) for d in blend.dataset_index} == {0, 1}
    with pytest.raises(tp.ConfigError, match="allow_mixed_tokenizers='yes'"):
        _build(pair, cache, allow_mixed_tokenizers="yes")


def test_per_split_blends_and_single_stores_are_checked_across_the_run(pair):
    spec = tp.BlendSpec(per_split=(tp.Blend((pair[0],)), tp.Blend((pair[1],)), None))
    with pytest.raises(tp.ConfigError, match=_refused(*pair)):
        build_datasets(spec, sizes=(10, 10, 0), config=CONFIG, seed=3)


def test_one_tokenizer_at_two_paths_and_stores_without_a_record_are_allowed(tmp_path):
    first = _write(tmp_path / "a", _identity("sha256:aaaa", name="here"), 1)
    # the same tokenizer.json at another path, run by gigatoken (the same ids as HF tokenizers)
    moved = _write(tmp_path / "b", _identity("sha256:aaaa", name="there", kind="gigatoken"), 2)
    plain = _write(tmp_path / "plain", None, 3)  # written without a tokenizer: nothing to compare
    megatron = _write(tmp_path / "megatron", B, 4)
    os.unlink(tmp_path / "megatron.json")  # a Megatron store: no manifest at all
    config = GPTSampleConfig(seq_length=16, eod_id=EOD)
    blend, _, _ = build_datasets(
        _spec([first, moved, plain, megatron]), sizes=(80, 0, 0), config=config, seed=3, split="1,0,0"
    )
    assert sorted({int(d) for d in blend.dataset_index}) == [0, 1, 2, 3]
    tp.merge(tmp_path / "merged", [first, moved, plain])  # merge uses the same check
    assert IndexedDataset(tmp_path / "merged").manifest.tokenizer["fingerprint"] == "sha256:aaaa"


def test_merge_refuses_different_tokenizers_naming_both(pair, tmp_path):
    with pytest.raises(tp.ConfigError, match=r"merge: " + _refused(*pair)):
        tp.merge(tmp_path / "out", list(pair))
    assert not os.path.exists(tmp_path / "out.bin")


def _children(pair):
    return [GPTDataset(IndexedDataset(p), np.arange(len(LENGTHS)), 10, CONFIG, seed=1) for p in pair]


def test_blended_dataset_and_adaptive_blend_refuse_children_of_different_tokenizers(pair):
    children = _children(pair)
    with pytest.raises(tp.ConfigError, match=r"BlendedDataset: " + _refused(*pair)):
        BlendedDataset(children, [1, 1], 20)
    with pytest.raises(tp.ConfigError, match=r"BlendedDataset: " + _refused(*pair)):
        BlendedDataset.from_indices(children, np.zeros(4, dtype=np.int16), np.arange(4))
    with pytest.raises(tp.ConfigError, match=r"AdaptiveBlend: " + _refused(*pair)):
        AdaptiveBlend(children, [1, 1], num_samples=20)
    nested = BlendedDataset(children[:1], [1], 5)  # a blend of a blend: the stores under it are compared
    with pytest.raises(tp.ConfigError, match=_refused(*pair)):
        BlendedDataset([nested, children[1]], [1, 1], 10)
    assert len(BlendedDataset(children, [1, 1], 20, allow_mixed_tokenizers=True)) == 20
    assert len(AdaptiveBlend(children, [1, 1], num_samples=20, allow_mixed_tokenizers=True)) == 20


def test_tokenport_blend_refuses_them_and_the_flag_allows_them(pair, capsys):
    assert main(["blend", *_spec(pair), "--size", "100"]) != 0
    assert "blend: " + f"{pair[1]} was prepared with another tokenizer than {pair[0]}" in capsys.readouterr().err
    assert main(["blend", *_spec(pair), "--size", "100", "--allow-mixed-tokenizers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["blends"][0]["rows"]  # the table shows short labels
    assert pair[1] in [row["prefix"] for row in rows]


def _megatron_args(prefixes, **flags) -> argparse.Namespace:
    return argparse.Namespace(data_path=_spec(prefixes), split="1,0,0", seq_length=16, seed=3, **flags)


def test_the_megatron_provider_refuses_them_unless_allowed(pair):
    with pytest.raises(tp.ConfigError, match=_refused(*pair)):
        datasets_provider(_megatron_args(pair))([40, 0, 0])
    train, _, _ = datasets_provider(_megatron_args(pair), allow_mixed_tokenizers=True)([40, 0, 0])
    assert len(train) >= 40
    with pytest.raises(tp.ConfigError, match="allow_mixed_tokenizers"):
        datasets_provider(_megatron_args(pair), allow_mixed_tokenizers=1)


def test_a_reopen_through_the_stat_record_still_refuses_and_reads_no_manifest(tmp_path, monkeypatch):
    monkeypatch.setattr(stat_record, "RACY_NS", 0)  # trust files however recent
    prefixes = [_write(tmp_path / f"s{k}", A, k) for k in range(4)]
    cache = tmp_path / "cache"
    _build(prefixes, cache)  # writes the stat record
    reads: list[str] = []
    original = manifest.read_manifest
    monkeypatch.setattr("tokenport.indexed.reader.read_manifest", lambda p: reads.append(p) or original(p))
    _build(prefixes, cache)
    assert reads == []  # the record's facts carry each store's tokenizer identity
    # a record that says a store has another tokenizer (as a store's stats unchanged would keep) is believed
    record = next(p for p in os.listdir(cache) if p.startswith("stat-"))
    data = json.loads((cache / record).read_text())
    data["facts"][3][2] = manifest.tokenizer_key(B)
    body = {k: v for k, v in data.items() if k != "digest"}
    data["digest"] = stat_record._digest(body)
    (cache / record).write_text(json.dumps(data, separators=(",", ":")))
    with pytest.raises(tp.ConfigError, match=_refused(prefixes[0], prefixes[3])):
        _build(prefixes, cache)
    assert reads == []


def test_a_stat_record_of_the_first_format_is_read_again_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(stat_record, "RACY_NS", 0)
    prefixes = [_write(tmp_path / "a", A, 1), _write(tmp_path / "b", A, 2)]
    cache = tmp_path / "cache"
    _build(prefixes, cache)
    record = cache / next(p for p in os.listdir(cache) if p.startswith("stat-"))
    data = json.loads(record.read_text())
    old = {**{k: v for k, v in data.items() if k != "digest"}, "format": "tokenport.stat-record/1"}
    old["facts"] = [row[:2] for row in old["facts"]]  # /1 kept (sequences, eod): no tokenizer identity
    record.write_text(json.dumps(old))
    reads: list[str] = []
    original = manifest.read_manifest
    monkeypatch.setattr("tokenport.indexed.reader.read_manifest", lambda p: reads.append(p) or original(p))
    _build(prefixes, cache)
    assert sorted(reads) == sorted(prefixes)  # the manifests were read again
    assert json.loads(record.read_text())["format"] == stat_record.RECORD_FORMAT  # and the record rewritten


def test_the_shared_check_skips_unknown_and_returns_the_first_known():
    assert check_same_tokenizer([("x", None), ("y", "k"), ("z", None), ("w", "k")]) == ("y", "k")
    assert check_same_tokenizer([]) is None
    with pytest.raises(tp.ConfigError, match="merge: w was prepared with another tokenizer than y"):
        check_same_tokenizer([("y", "k"), ("w", "j")], what="merge")
    assert check_same_tokenizer([("y", "k"), ("w", "j")], allow_mixed_tokenizers=True) is None


def test_real_tokenizers_two_bpes_with_one_eod_are_refused_hf_and_gigatoken_of_one_file_are_not(tmp_path):
    import inspect

    from tests._support.bpe import train_byte_level_bpe

    texts = [inspect.getsource(module) for module in (json, os, argparse)]
    paths = [train_byte_level_bpe(texts[k:] + texts[:k], 300 + 50 * k, str(tmp_path / f"tok{k}")) for k in range(2)]
    tokenizers = {
        "one": tp.load_tokenizer(f"hf:{paths[0]}"),
        "other": tp.load_tokenizer(f"hf:{paths[1]}"),
        "one-gigatoken": tp.load_tokenizer(f"gigatoken:{paths[0]}"),
    }
    assert tokenizers["one"].eod_id == tokenizers["other"].eod_id  # the EOD check alone lets them pass
    prefixes = {}
    for name, tokenizer in tokenizers.items():
        documents = ([*tokenizer.encode(line), tokenizer.eod_id] for text in texts for line in text.splitlines()[:300])
        prefixes[name] = build_store(tmp_path / name, documents, tokenizer=tokenizer)
    config = GPTSampleConfig(seq_length=32)
    spec = _spec([prefixes["one"], prefixes["other"]])
    with pytest.raises(tp.ConfigError, match=_refused(prefixes["one"], prefixes["other"])):
        build_datasets(spec, sizes=(50, 0, 0), config=config, seed=1, split="1,0,0")
    same = _spec([prefixes["one"], prefixes["one-gigatoken"]])
    assert len(build_datasets(same, sizes=(50, 0, 0), config=config, seed=1, split="1,0,0")[0]) == 50


@pytest.mark.parametrize("form", ["per-split", "by size", "weighted", "scheduled"])
def test_a_refused_build_leaves_the_cache_as_it_was(pair, tmp_path, form):
    cache = tmp_path / "cache"
    if form == "per-split":
        spec = tp.BlendSpec(per_split=(tp.Blend((pair[0],)), tp.Blend((pair[1],)), None))
        sizes, split = (10, 10, 0), "969,30,1"
    else:
        weights = None if form == "by size" else (1.0, 1.0)
        schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 1]}]) if form == "scheduled" else None
        spec = tp.BlendSpec(blend=tp.Blend(pair, None if schedule else weights, schedule=schedule))
        sizes, split = (40, 0, 0), "1,0,0"
    with pytest.raises(tp.ConfigError, match=_refused(*pair)):
        build_datasets(spec, sizes=sizes, config=CONFIG, seed=3, split=split, cache=cache)
    assert not cache.exists() or not [name for name in os.listdir(cache) if not name.endswith(".lock")]


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_blend_built_with_the_override_rebuilds_from_its_receipt(pair, adaptive):
    from tokenport.integrations import data_receipt
    from tokenport.integrations.rebuild import rebuild_dataset

    children = [GPTDataset(IndexedDataset(p), np.arange(len(LENGTHS)), 20, CONFIG, seed=1) for p in pair]
    if adaptive:
        blend = AdaptiveBlend(children, [0.5, 0.5], num_samples=30, allow_mixed_tokenizers=True)
    else:
        blend = BlendedDataset(children, [0.5, 0.5], 30, allow_mixed_tokenizers=True)
    rebuilt = rebuild_dataset(data_receipt(blend))  # reproduces what was trained: not refused
    assert [np.asarray(rebuilt[i]["tokens"]).tolist() for i in range(30)] == [
        np.asarray(blend[i]["tokens"]).tolist() for i in range(30)
    ]

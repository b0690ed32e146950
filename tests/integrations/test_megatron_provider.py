"""The Megatron-LM datasets provider: from Megatron's own arguments, every sample equal to megatron-core's
(keys, dtypes, values) for the datasets pretrain_gpt.py builds; refusals name the flag."""

from __future__ import annotations

import json
import logging
import os
import types
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.builder.datasets import build_datasets
from tokenport.errors import ConfigError, SampleIdError
from tokenport.integrations.megatron import datasets_provider, read_megatron_args, token_ids

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.datasets.gpt_dataset")

from tests.integrations.megatron_support import (  # noqa: E402  (after the skips: it imports megatron-core)
    EOD,
    SEQ,
    TOKENIZER,
    LegacyNullTokenizer,
    assert_same_samples,
    get_blend_from_list,
    megatron_args,
    megatron_datasets,
    new_null_tokenizer,
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> list[str]:
    """Three stores of random documents ending in EOD (token 7 appears often, for the pad tests)."""
    directory = tmp_path_factory.mktemp("megatron_stores")
    rng = np.random.default_rng(3)
    prefixes = []
    for k, count in enumerate((150, 300, 90)):
        documents = random_documents(rng, count, tokens=(3, 12), length=(2, 90), eod=EOD)
        prefixes.append(build_store(directory / f"store{k}", documents, dtype=np.uint16))
    return prefixes


def test_single_store_every_sample_equals_megatron_cores(stores):
    args = megatron_args(data_path=[stores[1]], split="90,8,2", reset_position_ids=True, eod_mask_loss=True)
    sizes = (400, 40, 12)
    provider = datasets_provider(args, tokenizer=TOKENIZER)
    assert provider.is_distributed is True
    ours = provider(sizes)
    assert_same_samples(ours, megatron_datasets(args, sizes))
    assert isinstance(ours[0].dataset, tp.GPTDataset)


def test_weighted_blend_of_two_stores_equals_megatron_cores(stores):
    args = megatron_args(
        data_path=["0.3", stores[0], "0.7", stores[1]],
        split="85,10,5",
        seed=7,
        reset_attention_mask=True,
        create_attention_mask_in_dataloader=False,
    )
    sizes = (300, 30, 10)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    assert_same_samples(ours, megatron_datasets(args, sizes))
    assert "attention_mask" not in ours[0][0] and "dataset_id" in ours[0][0]


def test_legacy_default_split_and_a_split_with_a_zero_part(stores, tmp_path):
    documents = random_documents(np.random.default_rng(5), 2000, tokens=(3, 12), length=(40, 120), eod=EOD)
    big = build_store(tmp_path / "big", documents, dtype=np.uint16)  # enough documents that 1/1000 hold a sample
    args = megatron_args(data_path=[big])  # no --split: validate_args' legacy 969,30,1
    assert args.split == "969, 30, 1"
    sizes = (200, 10, 2)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))
    del args.split  # a namespace without --split gets the same legacy default
    assert read_megatron_args(args).split == "969, 30, 1"
    args = megatron_args(data_path=["1", stores[1], "2", stores[2]], split="90,10,0")
    sizes = (250, 20, 5)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    assert ours[2] is None
    assert_same_samples(ours, megatron_datasets(args, sizes))


def test_per_split_paths_and_the_per_split_json_file(stores, tmp_path):
    args = megatron_args(
        train_data_path=["0.4", stores[0], "0.6", stores[1]],
        valid_data_path=["3", stores[2]],  # a lone store's weight: megatron-core ignores it
        test_data_path=[stores[2], stores[0]],
    )
    sizes = (300, 25, 15)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))
    path = tmp_path / "per_split.json"
    path.write_text(json.dumps({"train": f"1 {stores[1]} 1 {stores[2]}", "valid": [stores[0]], "test": [stores[2]]}))
    args = megatron_args(per_split_data_args_path=str(path))
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))


def test_data_args_path_file(stores, tmp_path):
    path = tmp_path / "data_args.txt"
    path.write_text(f"0.5 {stores[0]}\n0.5 {stores[2]}\n")
    args = megatron_args(data_args_path=str(path), split="80,15,5")
    sizes = (200, 20, 6)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))


def test_a_cache_dir_shared_with_megatron_is_loaded_on_the_second_call(stores, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    args = megatron_args(data_path=["0.5", stores[0], "0.5", stores[1]], split="90,8,2", data_cache_path=str(cache))
    sizes = (300, 20, 8)
    # megatron-core's cached blends need a process group: one gloo process, as a one-rank run has
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        first = datasets_provider(args, tokenizer=TOKENIZER)(sizes)  # tokenport's cache meets at its barrier
        theirs = megatron_datasets(args, sizes)  # megatron-core writes its own files in the same directory
    finally:
        torch.distributed.destroy_process_group()
    entries = {p: os.stat(p).st_mtime_ns for p in map(str, cache.rglob("*"))}
    assert any(os.path.basename(p) == "description.json" for p in entries)

    def no_building(*args, **kwargs):
        raise AssertionError("an index was built although the cache holds it")

    monkeypatch.setattr("tokenport.builder.gpt_datasets.build_indices", no_building)
    monkeypatch.setattr("tokenport.builder.datasets.build_blending_indices", no_building)
    second = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    assert {p: os.stat(p).st_mtime_ns for p in map(str, cache.rglob("*"))} == entries
    assert_same_samples(second, theirs)
    assert_same_samples(first, theirs)


def test_pad_ids_follow_megatron_core(stores):
    args = megatron_args(data_path=[stores[2]], split="90,8,2", eod_mask_loss=True)
    sizes = (100, 10, 4)
    with_pad = types.SimpleNamespace(eod=EOD, pad=7, vocab_size=None, unique_identifiers={"t": "pad"})
    ours = datasets_provider(args, tokenizer=with_pad)(sizes)
    assert_same_samples(ours, megatron_datasets(args, sizes, with_pad))
    assert any(int(ours[0][i]["labels"].eq(0).sum()) for i in range(len(ours[0])))  # pad 7 became 0, unlearned
    clashing = types.SimpleNamespace(eod=EOD, pad=EOD, vocab_size=None, unique_identifiers={"t": "clash"})
    assert token_ids(clashing) == (EOD, None)  # megatron-core drops a pad equal to a special token
    assert_same_samples(datasets_provider(args, tokenizer=clashing)(sizes), megatron_datasets(args, sizes, clashing))
    with pytest.raises(ConfigError, match="--allow-ambiguous-pad-tokens"):
        token_ids(clashing, allow_ambiguous_pad_tokens=True)


def test_pad_masks_are_per_sample_where_megatron_core_reuses_the_first_ones(stores):
    """megatron-core (0.16 and Megatron-LM main) caches the loss mask of the first sample it serves *after*
    zeroing that sample's pad labels, when no flag resets positions, masks or EOD losses: later samples
    inherit those zeros. Each of our samples equals megatron-core's when it is the first one served."""
    args = megatron_args(data_path=[stores[2]], split="90,8,2")
    sizes = (40, 4, 2)
    with_pad = types.SimpleNamespace(eod=EOD, pad=7, vocab_size=None, unique_identifiers={"t": "pad"})
    ours = datasets_provider(args, tokenizer=with_pad)(sizes)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in (1, 17, 39):
            fresh = megatron_datasets(args, sizes, with_pad)[0][i]
            assert all(torch.equal(ours[i][key], value) for key, value in fresh.items()), i


def test_eod_from_the_store_manifest_without_a_tokenizer(tmp_path):
    documents = [np.array([65 + k % 20] * (5 + k % 37) + [256]) for k in range(120)]
    prefix = build_store(tmp_path / "bytes", documents, tokenizer=tp.load_tokenizer("byte"))
    args = megatron_args(data_path=[prefix], split="90,8,2", eod_mask_loss=True)
    sizes = (120, 10, 3)
    byte_eod = types.SimpleNamespace(eod=256, vocab_size=None, unique_identifiers={"t": "byte"})
    assert_same_samples(datasets_provider(args)(sizes), megatron_datasets(args, sizes, byte_eod))


def test_samples_batch_through_a_torch_loader_as_megatron_cores_do(stores):
    args = megatron_args(data_path=["1", stores[0], "1", stores[1]], split="90,8,2")
    sizes = (64, 8, 4)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)[0]
    theirs = megatron_datasets(args, sizes)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = next(iter(torch.utils.data.DataLoader(ours, batch_size=8, num_workers=2)))  # worker processes
        b = next(iter(torch.utils.data.DataLoader(theirs, batch_size=8)))
    assert list(a) == list(b)
    for key in b:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    padding = ours[None]  # Megatron's batch-padding sample: sample 0 with no loss
    assert torch.equal(padding["tokens"], ours[0]["tokens"]) and float(padding["loss_mask"].sum()) == 0.0


def test_tijdeman_algorithm_gives_tokenports_default_blend(stores):
    args = megatron_args(data_path=["0.2", stores[0], "0.8", stores[1]], split="90,8,2")
    sizes = (500, 30, 10)
    ours = datasets_provider(args, algorithm="tijdeman", tokenizer=TOKENIZER)(sizes)
    expected = build_datasets(
        ["0.2", stores[0], "0.8", stores[1]],
        sizes=sizes,
        config=tp.GPTSampleConfig(seq_length=SEQ, eod_id=EOD, create_attention_mask=True),
        seed=1234,
        split="90,8,2",
    )
    for mine, peer, size in zip(ours, expected, sizes):
        assert len(mine) == size == len(peer)
        assert np.array_equal(mine.dataset.dataset_index, peer.dataset_index)
        for i in (0, size // 2, size - 1):
            assert np.array_equal(mine[i]["tokens"].numpy(), peer[i]["tokens"])


def test_ranks_that_keep_no_data_get_none_and_vp_stage_is_passed(stores):
    args = megatron_args(data_path=[stores[0]], split="90,8,2")
    stages = []
    provider = datasets_provider(args, tokenizer=TOKENIZER, is_built_on_rank=lambda vp: stages.append(vp) or False)
    assert provider((20, 4, 2), vp_stage=1) == (None, None, None) and stages == [1]


def test_a_split_asked_for_no_samples_is_none(stores):
    """Megatron-LM asks 0 samples only when it will not evaluate (--eval-iters 0); megatron-core still
    builds one epoch of a lone store, or an empty blend, which nothing reads. tokenport builds nothing."""
    args = megatron_args(data_path=[stores[1]], split="90,8,2")
    train, valid, test = datasets_provider(args, tokenizer=TOKENIZER)((100, 0, 0))
    assert len(train) >= 100 and valid is None and test is None  # a lone store: at least one epoch, as Megatron


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"mock_data": True}, "--mock-data: tokenport does not make mock data"),
        ({}, "no data path is set"),
        ({"fim_data": True}, "--fim-data"),
        ({"sft": True}, "--sft"),
        ({"dataloader_inter_document_masking": True}, "--dataloader-inter-document-masking"),
        ({"multiple_validation_sets": True}, "--multiple-validation-sets"),
        ({"split": "90,10,0", "train_data_path": ["x"]}, "--split='90,10,0' is set with per-split"),
        ({"data_path": ["x"], "train_data_path": ["y"]}, "both set"),
        ({"data_path": ["x"], "seq_length": None}, "--seq-length is not set"),
        ({"data_path": ["0.5", "x", "y", "z"]}, "--data-path: items: weight positions mix"),
        ({"data_path": ["x"], "reset_position_ids": "yes"}, "--reset-position-ids"),
    ],
)
def test_refusals_name_the_flag(flags, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        datasets_provider(megatron_args(**flags), tokenizer=TOKENIZER)


def test_flags_that_change_no_sample_are_ignored_and_logged(stores, caplog):
    args = megatron_args(data_path=[stores[0]], split="90,8,2", num_dataset_builder_threads=4, mmap_bin_files=False)
    sizes = (50, 5, 2)
    with caplog.at_level(logging.INFO, logger="tokenport.integrations.megatron"):
        ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    assert "ignoring --num-dataset-builder-threads=4" in caplog.text and "--no-mmap-bin-files" in caplog.text
    assert_same_samples(ours, megatron_datasets(args, sizes))


def test_outside_megatron_lm_the_args_must_be_given():
    provider = datasets_provider()
    with pytest.raises(ConfigError, match=r"datasets_provider\(args=namespace\)"):
        provider((10, 1, 1))
    with pytest.raises(ConfigError, match="algorithm"):
        datasets_provider(algorithm="greedy")


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"data_path": 5}, "--data-path=5 is invalid"),
        ({"train_data_path": 7}, "--train-data-path=7 is invalid"),
        ({"data_args_path": 5}, "--data-args-path: args.data_args_path=5 is invalid"),
        ({"per_split_data_args_path": 5}, "--per-split-data-args-path: args.per_split_data_args_path=5"),
        ({"data_path": ["x"], "split": 5}, "--split: args.split=5 is invalid"),
        ({"data_path": ["x"], "split": [90, 8, 2]}, "--split: args.split="),
        ({"data_path": ["x"], "data_cache_path": 5}, "--data-cache-path: args.data_cache_path=5"),
    ],
)
def test_wrong_typed_arguments_are_refused_naming_the_flag(flags, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        datasets_provider(megatron_args(**flags), tokenizer=TOKENIZER)


class _RaisingEod:
    @property
    def eod(self):
        raise NotImplementedError


@pytest.mark.parametrize(
    "tokenizer, message",
    [
        (types.SimpleNamespace(eod="2"), r"tokenizer.eod='2' is invalid"),
        (types.SimpleNamespace(eod=2.5), r"tokenizer.eod=2.5 is invalid"),  # read as 2 before: silently wrong
        (types.SimpleNamespace(eod=True), r"tokenizer.eod=True is invalid"),
        (types.SimpleNamespace(eod=2**70), r"tokenizer.eod=\d+ is invalid"),
        (_RaisingEod(), r"tokenizer.eod: reading it raised NotImplementedError"),
        (types.SimpleNamespace(eod=EOD, pad="x"), r"tokenizer.pad='x' is invalid"),
        (types.SimpleNamespace(eod=EOD, pad=3.5), r"tokenizer.pad=3.5 is invalid"),  # read as 3 before
    ],
)
def test_wrong_typed_tokenizer_attributes_are_refused_naming_them(tokenizer, message):
    with pytest.raises(ConfigError, match=message):
        token_ids(tokenizer)


def test_megatron_cores_null_tokenizer_and_numpy_ids_still_read():
    """megatron-core's NullTokenizer (an .eod, no pad) and numpy integer ids pass the type checks."""
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    null = NullTokenizer(100)
    assert token_ids(null)[0] == null.eod
    assert token_ids(types.SimpleNamespace(eod=np.int64(EOD), pad=np.int32(-1))) == (EOD, None)


@pytest.mark.parametrize("kind", ["legacy", "new", "library"])
def test_megatrons_null_tokenizers_build_through_the_provider_as_through_megatron_core(tmp_path, kind):
    """Megatron's Null tokenizers (legacy megatron.training one, megatron-core's new MegatronTokenizer and its
    library class): eod = vocab size, no pad, and an eos that raises (NotImplementedError in the legacy one,
    AttributeError in the new): megatron-core skips it, so does the provider, and the samples are the same."""
    tokenizer = {"legacy": LegacyNullTokenizer, "new": new_null_tokenizer, "library": _library_null}[kind](300)
    with pytest.raises((NotImplementedError, AttributeError)):
        _ = tokenizer.eos
    documents = random_documents(np.random.default_rng(4), 120, tokens=(0, 301), length=(5, 60))  # 300: the EOD
    prefix = build_store(tmp_path / "null", documents, dtype=np.uint16)
    assert token_ids(tokenizer) == (300, None)
    args = megatron_args(data_path=[prefix], split="90,8,2", eod_mask_loss=True, reset_position_ids=True)
    sizes = (100, 10, 4)
    assert_same_samples(datasets_provider(args, tokenizer=tokenizer)(sizes), megatron_datasets(args, sizes, tokenizer))


def _library_null(vocab_size: int):
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    return NullTokenizer(vocab_size)


def test_numeric_weights_are_read_as_megatron_core_reads_them(stores, tmp_path):
    """ints, floats and numpy numbers at weight positions (megatron's own test passes random ints), shared or
    per split or in the per-split JSON file: the same blend as the strings megatron's command line gives."""
    sizes = (200, 20, 6)
    as_strings = megatron_args(data_path=["30", stores[0], "70", stores[1]], split="80,15,5")
    expected = megatron_datasets(as_strings, sizes)
    for items in ([30, stores[0], 70, stores[1]], [30.0, stores[0], np.int64(70), stores[1]]):
        args = megatron_args(data_path=items, split="80,15,5")
        assert read_megatron_args(args).spec == read_megatron_args(as_strings).spec
        assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), expected)
    args = megatron_args(train_data_path=[40, stores[0], 60.5, stores[1]], valid_data_path=[3, stores[2]])
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))
    path = tmp_path / "per_split.json"
    path.write_text(json.dumps({"train": [1, stores[1], 2.5, stores[2]], "valid": [stores[0]], "test": [stores[2]]}))
    args = megatron_args(per_split_data_args_path=str(path))
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))


@pytest.mark.parametrize(
    "items, message",
    [
        ([30, 5], r"--data-path: items\[1\] = 5: a prefix must be a string"),  # megatron: int has no .strip
        ([5], r"--data-path: items\[0\] = 5: a prefix must be a string"),
        ([None, "x"], r"--data-path: items\[0\] = None: a weight must be a number"),  # megatron: float(None)
        ([[1], "x"], r"--data-path: items\[0\] = \[1\]: a weight must be a number"),
    ],
)
def test_what_megatron_core_cannot_parse_is_a_config_error_naming_the_item(items, message):
    with pytest.raises((AttributeError, TypeError)):
        get_blend_from_list(items)
    with pytest.raises(ConfigError, match=message):
        datasets_provider(megatron_args(data_path=items), tokenizer=TOKENIZER)


@pytest.mark.parametrize(
    "flags",
    [
        {"data_path": ["0", "STORE0", "1", "STORE1"], "split": "1,0,0"},
        {"train_data_path": [1, "STORE0", 0, "STORE1", 2, "STORE2"]},
    ],
)
def test_a_zero_weight_in_a_blend_is_refused_as_megatron_core_refuses_it(stores, flags):
    flags = {
        k: [stores[int(x[-1])] if str(x).startswith("STORE") else x for x in v] if k != "split" else v
        for k, v in flags.items()
    }
    args = megatron_args(**flags)
    sizes = (40, 0, 0)
    with pytest.raises(AssertionError):
        megatron_datasets(args, sizes)
    with pytest.raises(ConfigError, match="blend weighs .* 0: megatron-core refuses a zero weight"):
        datasets_provider(args, tokenizer=TOKENIZER)
    ours = datasets_provider(args, algorithm="tijdeman", tokenizer=TOKENIZER)(sizes)  # tokenport drops the store
    assert len(ours[0]) == 40


def test_one_weighted_store_is_a_blend_of_one_as_in_megatron_core(stores):
    args = megatron_args(data_path=["3", stores[1]], split="90,8,2")
    sizes = (50, 5, 2)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))


def test_bool_weights_are_refused_though_megatron_core_reads_true_as_one():
    assert get_blend_from_list([True, "x"]) == (["x"], [1.0])
    with pytest.raises(ConfigError, match=r"items\[0\] = True: a weight must be a number"):
        datasets_provider(megatron_args(data_path=[True, "x"]), tokenizer=TOKENIZER)


def test_negative_sample_ids_count_from_the_end_as_in_megatron_core(stores):
    args = megatron_args(data_path=["1", stores[0], "2", stores[1]], split="90,8,2")
    sizes = (60, 6, 2)
    ours, theirs = datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes)
    for mine, peer in zip(ours, theirs):
        n = len(peer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for idx in (-1, -2, -n, n - 1):
                a, b = mine[idx], peer[idx]
                assert a["dataset_id"] == b["dataset_id"] and torch.equal(a["tokens"], b["tokens"]), idx
        assert torch.equal(mine[-n]["labels"], mine[0]["labels"])
        for idx in (n, -n - 1):
            with pytest.raises(IndexError):
                peer[idx]
            with pytest.raises(SampleIdError, match=rf"sample id {idx} is outside \[-{n}, {n}\)"):
                mine[idx]
    for bad in (1.0, "0", True):
        with pytest.raises(SampleIdError, match="is not an integer"):
            ours[0][bad]


def test_wrong_typed_provider_arguments_are_refused(stores):
    with pytest.raises(ConfigError, match="is_built_on_rank=3 is invalid"):
        datasets_provider(megatron_args(data_path=[stores[0]]), tokenizer=TOKENIZER, is_built_on_rank=3)
    provider = datasets_provider(megatron_args(data_path=[stores[0]]), tokenizer=TOKENIZER)
    with pytest.raises(ConfigError, match="train_val_test_num_samples=10 is invalid"):
        provider(10)


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> list[str]:
    """Twenty small stores for random blends (20..40 documents of 4..40 tokens ending in EOD)."""
    directory = tmp_path_factory.mktemp("megatron_pool")
    rng = np.random.default_rng(11)
    prefixes = []
    for k in range(20):
        documents = random_documents(rng, int(rng.integers(20, 40)), tokens=(3, 200), length=(4, 40), eod=EOD)
        prefixes.append(build_store(directory / f"pool{k}", documents, dtype=np.uint16))
    return prefixes


def near_tie_weights(rng: np.random.Generator) -> list[float]:
    """3..20 weights, most a few ulps apart around a common value (some doubled): after normalization they
    differ in their last bits, where one normalization more or less flips megatron-core's greedy choices."""
    count = int(rng.integers(3, 21))
    weights = np.full(count, rng.choice([0.1, 1 / 3, 0.7, 3.0, 10.0, 1e-3, 7 / 9]))
    for i in range(count):
        for _ in range(int(rng.integers(0, 3))):
            weights[i] = np.nextafter(weights[i], np.inf if rng.random() < 0.5 else -np.inf)
    if rng.random() < 0.5:
        weights[rng.integers(0, count, size=int(rng.integers(1, count)))] *= 2
    return weights.tolist()


@pytest.mark.parametrize("case", range(50))
def test_near_tie_random_blends_equal_megatron_core_sample_for_sample(pool, case):
    """megatron-core normalizes blend weights twice (its builder, then BlendedDataset) and its C++ greedy
    compares those floats: the provider's indices and samples are its own, blend order included."""
    rng = np.random.default_rng(case)
    weights = near_tie_weights(rng)
    chosen = rng.choice(len(pool), size=len(weights), replace=False)
    # weights as megatron's test gives them (numbers) or as its command line does (strings, repr is exact)
    items = [x for w, d in zip(weights, chosen) for x in ((w if case % 2 else repr(w)), pool[d])]
    args = megatron_args(data_path=items, split="1,0,0", seq_length=8, seed=case, mid_level_dataset_surplus=0)
    sizes = (int(rng.integers(200, 400)), 0, 0)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    theirs = megatron_datasets(args, sizes)
    mine, peer = ours[0].dataset, theirs[0]
    np.testing.assert_array_equal(mine.dataset_index, peer.dataset_index)
    np.testing.assert_array_equal(mine.dataset_sample_index, peer.dataset_sample_index)
    assert_same_samples(ours, theirs)


def test_surplus_zero_builds_where_megatron_core_does(stores):
    """With no surplus megatron-core's greedy takes 7 samples from a store sized for 6 (its target); the store's
    dataset holds a whole epoch, so megatron-core builds, and so does the provider, sample for sample."""
    items = ["1", stores[0], "1", stores[1], "5", stores[2]]
    args = megatron_args(data_path=items, split="1,0,0", mid_level_dataset_surplus=0)
    sizes = (8, 0, 0)
    ours = datasets_provider(args, tokenizer=TOKENIZER)(sizes)
    assert ours[0].dataset.samples_per_dataset().tolist() == [2, 1, 7]  # the last sized 6 = ceil(8 * 5 / 7)
    assert_same_samples(ours, megatron_datasets(args, sizes))
    assert read_megatron_args(megatron_args(data_path=items, mid_level_dataset_surplus=0)).surplus == 0.0


@pytest.mark.parametrize("surplus", [-0.5, -1, -2.5])
def test_negative_surplus_builds_as_megatron_core_builds(stores, surplus):
    """megatron-core takes any finite surplus: each store sized ceil(ceil(size * w) * (1 + surplus)), a size
    <= 0 one epoch; every store here holds more than the blend takes, so it builds, and so does the provider."""
    args = megatron_args(data_path=["1", stores[0], "1", stores[1], "5", stores[2]], split="1,0,0")
    args.mid_level_dataset_surplus = surplus
    sizes = (40, 0, 0)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), megatron_datasets(args, sizes))


@pytest.mark.parametrize("surplus", [float("nan"), float("inf"), "0.005", True])
def test_a_surplus_megatron_core_cannot_use_is_refused_naming_the_flag(surplus):
    with pytest.raises(ConfigError, match="--mid-level-dataset-surplus="):
        datasets_provider(megatron_args(data_path=["x"], mid_level_dataset_surplus=surplus), tokenizer=TOKENIZER)


def test_a_size_weighted_blend_with_an_empty_store_is_refused_as_megatron_core_refuses_it(stores, tmp_path):
    """Blended by size, a store whose split holds no sample weighs 0: megatron-core's BlendedDataset asserts."""
    tiny = build_store(tmp_path / "tiny", [np.array([5, 6, EOD])] * 4, dtype=np.uint16)  # 12 tokens: no sample of 32
    args = megatron_args(data_path=[stores[0], tiny], split="1,0,0")
    sizes = (50, 0, 0)
    with pytest.raises(AssertionError):
        megatron_datasets(args, sizes)
    with pytest.raises(ConfigError, match=r"tiny: its train split holds 12 tokens, less than one sample of 32"):
        datasets_provider(args, tokenizer=TOKENIZER)(sizes)

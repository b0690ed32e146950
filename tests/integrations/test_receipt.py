"""Data receipts: a loader state resumes on the data it was taken on and is refused, naming the change, elsewhere."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.integrations import ALLOWED_CHANGES, DataReceipt, StatefulLoader, check_receipt, data_receipt
from tokenport.sampling import PretrainingSampler, RandomSampler

torch = pytest.importorskip("torch")

CONFIG = tp.GPTSampleConfig(32)  # eod_id from the stores' manifests (the byte tokenizer's 256)


def _write(prefix, seed: int, documents: int = 40, provenance: dict | None = None) -> str:
    """A store of byte-tokenizer documents drawn from ``seed``, written with tokenport's writer."""
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(0, 256), length=(10, 90), append=256)
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), provenance=provenance)


@pytest.fixture()
def stores(tmp_path):
    """Three stores: prose, code and docs."""
    return {name: _write(tmp_path / name, seed) for seed, name in enumerate(("prose", "code", "docs"))}


def _blend(prefixes_and_weights, *, seed: int = 1, config: tp.GPTSampleConfig = CONFIG, size: int = 96):
    """The train split of a weighted blend, built by tokenport's builder."""
    data_path = [str(item) for pair in prefixes_and_weights for item in pair[::-1]]
    train, _, _ = tp.build_datasets(data_path, sizes=(size, 0, 0), config=config, seed=seed, split="1,0,0")
    return train


def _loader(dataset, seed: int = 7):
    return StatefulLoader(dataset, RandomSampler(len(dataset), 0, 4, 0, 1, seed=seed))


def _ids(batch) -> list[int]:
    return batch["tokens"][:, 0].tolist() + batch["dataset_id"].tolist()


def _saved(dataset, steps: int = 3) -> dict:
    loader = _loader(dataset)
    for step, _ in enumerate(loader, 1):
        if step == steps:
            break
    return loader.state_dict()


def _refusal(dataset, state, **options) -> str:
    with pytest.raises(tp.ConfigError) as caught:
        _loader(dataset).load_state_dict(state, **options)
    return str(caught.value)


def test_same_data_resumes_exactly_and_the_state_survives_json_and_torch_save(stores, tmp_path):
    weights = [(stores["prose"], 0.4), (stores["code"], 0.6)]
    straight = [_ids(b) for b in _loader(_blend(weights))]
    first = _loader(_blend(weights))
    seen = []
    for batch in first:
        seen.append(_ids(batch))
        if len(seen) == 5:
            break
    state = first.state_dict()
    receipt = state["receipt"]
    assert receipt["position"] == {"sampler": "RandomSampler", "consumed_samples": 20, "epoch": 0}
    assert receipt["seed"] == 7 and receipt["length"] == 96 and receipt["uncertified"] == []
    children = receipt["dataset"]["datasets"]
    assert [child["store"]["prefix"] for child in children] == [stores["prose"], stores["code"]]
    assert children[0]["store"]["tokenizer"]["kind"] == "byte"
    assert children[0]["sample_config"]["seq_length"] == 32 and children[0]["sample_config"]["eod_id"] == 256
    assert sum(receipt["dataset"]["samples_per_dataset"]) == 96

    torch.save(state, tmp_path / "state.pt")
    for copy in (json.loads(json.dumps(state)), torch.load(tmp_path / "state.pt")):
        resumed = _loader(_blend(weights))  # built afresh: same content, same receipt
        resumed.load_state_dict(copy)
        assert seen + [_ids(b) for b in resumed] == straight
    assert DataReceipt.from_dict(json.loads(json.dumps(receipt))) == first.receipt()


def test_changed_store_content_is_refused_naming_the_store(stores):
    weights = [(stores["prose"], 0.4), (stores["code"], 0.6)]
    state = _saved(_blend(weights))
    _write(stores["code"], seed=99)  # same prefix, other tokens
    message = _refusal(_blend(weights), state, allow_changes=("seed", "sample_config", "provenance"))
    assert f"store '{stores['code']}' changed content (idx digest " in message
    assert "prose" not in message.split("\n", 1)[1].split("Resume")[0]  # the unchanged store is not named


def test_seeds_weights_and_sample_config_are_named_and_only_accepted_ones_pass(stores, caplog):
    weights = [(stores["prose"], 0.4), (stores["code"], 0.6)]
    state = _saved(_blend(weights))

    other_sampler = StatefulLoader(_blend(weights), RandomSampler(96, 0, 4, 0, 1, seed=8))
    with pytest.raises(tp.ConfigError, match=r"sampler seed 7 -> 8"):
        other_sampler.load_state_dict(state)

    message = _refusal(_blend(weights, seed=2), state)  # the datasets' own shuffles
    assert "sample order changed" in message and "[allow_changes: 'seed']" in message
    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.receipt"):
        _loader(_blend(weights, seed=2)).load_state_dict(state, allow_changes=("seed",))
    assert "accepted data change (seed)" in caplog.text

    message = _refusal(_blend([(stores["prose"], 0.5), (stores["code"], 0.5)]), state, allow_changes=("seed",))
    assert "blend weights changed (samples per dataset" in message

    masked = tp.GPTSampleConfig(32, eod_mask_loss=True)
    message = _refusal(_blend(weights, config=masked), state)
    assert "sample config eod_mask_loss False -> True [allow_changes: 'sample_config']" in message
    _loader(_blend(weights, config=masked)).load_state_dict(state, allow_changes=("sample_config",))

    message = _refusal(_blend(weights, config=tp.GPTSampleConfig(48)), state, allow_changes=("sample_config",))
    assert "seq_length 32 -> 48" not in message  # accepted as a field ...
    assert "length" in message  # ... but the samples are others: refused


def test_an_appended_store_is_refused_unless_allowed_and_a_moved_store_is_the_same_store(stores, tmp_path, caplog):
    weights = [(stores["prose"], 0.4), (stores["code"], 0.6)]
    state = _saved(_blend(weights))
    grown = [*weights, (stores["docs"], 0.3)]
    message = _refusal(_blend(grown), state)
    assert "1 dataset(s) appended" in message and stores["docs"] in message
    assert "[allow_changes: 'stores_appended']" in message
    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.receipt"):
        resumed = _loader(_blend(grown))
        resumed.load_state_dict(state, allow_changes=("stores_appended",))
    assert resumed.consumed_samples == 12 and "same sample position of the new blend" in caplog.text

    reordered = [weights[1], weights[0]]  # not an append: the stores at each place changed content
    assert "changed content" in _refusal(_blend(reordered), state, allow_changes=("stores_appended",))

    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for suffix in (".bin", ".idx", ".json"):
        shutil.move(stores["code"] + suffix, moved / ("code" + suffix))
    resumed = _loader(_blend([(stores["prose"], 0.4), (moved / "code", 0.6)]))
    resumed.load_state_dict(state)
    assert resumed.consumed_samples == 12


def test_provenance_packed_datasets_and_unknown_kinds(tmp_path, caplog):
    first = _write(tmp_path / "a", 0, provenance={"prepare": {"fingerprint": "0" * 64, "recipe": "f" * 64}})
    store = tp.IndexedDataset(first)
    packed = tp.PackedDataset(store, 128, seed=0)
    state = StatefulLoader(packed, PretrainingSampler(len(packed), 0, 2, 0, 1)).state_dict()
    assert state["receipt"]["dataset"]["store"]["prepared"] == "f" * 64
    assert state["receipt"]["seed"] is None

    reseeded = tp.PackedDataset(store, 128, seed=1)
    with pytest.raises(tp.ConfigError, match=r"seed 0 -> 1 \[allow_changes: 'seed'\]"):
        StatefulLoader(reseeded, PretrainingSampler(len(reseeded), 0, 2, 0, 1)).load_state_dict(state)

    same_tokens = {"prepare": {"fingerprint": "1" * 64, "recipe": "e" * 64}}
    second = _write(tmp_path / "b", 0, provenance=same_tokens)
    again = tp.PackedDataset(tp.IndexedDataset(second), 128, seed=0)
    loader = StatefulLoader(again, PretrainingSampler(len(again), 0, 2, 0, 1))
    with pytest.raises(tp.ConfigError, match=r"recipe \(cleaning steps, text settings\) ffffffff.. -> eeeeeeee.."):
        loader.load_state_dict(state)
    loader.load_state_dict(state, allow_changes=("provenance",))

    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.receipt"):
        receipt = data_receipt(list(range(10)))
    assert receipt.uncertified == ("dataset",) and receipt.dataset == {"type": "list", "length": 10, "certified": False}
    assert "its content is not certified" in caplog.text


def test_old_states_and_bad_allow_changes_are_refused(stores):
    dataset = _blend([(stores["prose"], 0.4), (stores["code"], 0.6)])
    state = _saved(dataset)
    old = {"version": 1, "sampler": state["sampler"]}
    message = _refusal(dataset, old)
    assert "the state has no data receipt" in message and "[allow_changes: 'no_receipt']" in message
    _loader(dataset).load_state_dict(old, allow_changes=("no_receipt",))
    with pytest.raises(tp.ConfigError, match="valid kinds are " + ", ".join(sorted(ALLOWED_CHANGES))):
        _loader(dataset).load_state_dict(state, allow_changes=("weights",))
    with pytest.raises(tp.ConfigError, match=r"pass a tuple of change kinds, e.g. \('seed',\)"):
        _loader(dataset).load_state_dict(state, allow_changes="seed")
    with pytest.raises(tp.ConfigError, match="has no `receipt`"):
        _loader(dataset).load_state_dict({"version": 2, "sampler": state["sampler"]})
    broken = dict(state, receipt=dict(state["receipt"], format="other"))
    with pytest.raises(tp.ConfigError, match="receipt of another tokenport version"):
        _loader(dataset).load_state_dict(broken)
    assert check_receipt(DataReceipt.from_dict(state["receipt"]), _loader(dataset).receipt()) == ()


def test_the_receipt_leaves_topology_to_the_sampler_and_names_uncertified_children(stores, caplog):
    dataset = _blend([(stores["prose"], 0.4), (stores["code"], 0.6)])
    two_ranks = StatefulLoader(dataset, RandomSampler(96, 0, 2, 1, 2, seed=7))
    next(iter(two_ranks))
    one_rank = _loader(_blend([(stores["prose"], 0.4), (stores["code"], 0.6)]))
    one_rank.load_state_dict(two_ranks.state_dict())  # same global batch of 4 on one rank
    assert one_rank.consumed_samples == 4

    gpt = dataset.datasets[0]
    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.receipt"):
        mixed = tp.BlendedDataset([gpt, [{"tokens": np.zeros(33, np.int64)}] * 50], [0.5, 0.5], 40)
        receipt = data_receipt(mixed)
    assert receipt.uncertified == ("dataset[1]",) and "dataset[1] is a list" in caplog.text
    assert receipt.dataset["datasets"][0]["store"]["prefix"] == stores["prose"]


def test_a_scheduled_blend_is_read_in_order_and_its_schedule_is_certified(stores):
    from tokenport.blend import MixtureSchedule
    from tokenport.builder.specs import Blend

    def scheduled(ramp_end):
        schedule = MixtureSchedule.from_data(
            [{"at": 0, "weights": [0.8, 0.2]}, {"at": 40, "ramp_to": [0.2, 0.8], "until": ramp_end}]
        )
        blend = Blend((stores["prose"], stores["code"]), None, schedule)
        return tp.build_datasets(blend, sizes=(96, 0, 0), config=CONFIG, seed=1, split="1,0,0")[0]

    dataset = scheduled(80)
    with pytest.raises(tp.ConfigError, match="mixture schedule whose weights change with the sample position"):
        StatefulLoader.for_dataset(dataset, micro_batch_size=4, seed=1)
    with pytest.raises(tp.ConfigError, match="mixture schedule"):
        _loader(dataset)
    loader = StatefulLoader.for_dataset(dataset, micro_batch_size=4, shuffle=False)
    for step, _ in enumerate(loader, 1):
        if step == 3:
            break
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["receipt"]["dataset"]["schedule"][1]["until"] == 80
    StatefulLoader.for_dataset(scheduled(80), micro_batch_size=4, shuffle=False).load_state_dict(state)
    with pytest.raises(tp.ConfigError, match=r"mixture schedule changed \(.*until=80.* -> .*until=90"):
        StatefulLoader.for_dataset(scheduled(90), micro_batch_size=4, shuffle=False).load_state_dict(state)


def test_an_sft_dataset_is_certified_with_its_loss_masks(tmp_path):
    """The receipt of an SFTDataset holds its token and mask stores: new masks on the same tokens are named."""
    rng = np.random.default_rng(0)
    conversations = [rng.integers(1, 200, int(rng.integers(5, 40))) for _ in range(30)]

    def chat_store(name, flip):
        documents = []
        for k, conversation in enumerate(conversations):
            mask = (np.arange(len(conversation)) >= len(conversation) // 2).astype(np.uint8)
            documents.append(Doc(conversation, mask=1 - mask if k == flip else mask))
        prefix = build_store(tmp_path / name, documents, dtype=np.uint16, masks=True)
        return tp.SFTDataset(tp.IndexedDataset(prefix), 64, seed=0)

    state = StatefulLoader.for_dataset(chat_store("a", -1), micro_batch_size=2, seed=1).state_dict()
    assert state["receipt"]["dataset"]["type"] == "SFTDataset" and not state["receipt"]["uncertified"]
    StatefulLoader.for_dataset(chat_store("b", -1), micro_batch_size=2, seed=1).load_state_dict(state)
    with pytest.raises(tp.ConfigError, match=r"store '.*a' \(now '.*c'\) changed content \(loss masks bin digest"):
        StatefulLoader.for_dataset(chat_store("c", 3), micro_batch_size=2, seed=1).load_state_dict(state)


def test_a_run_built_for_more_samples_is_refused_naming_the_size_not_the_seed(stores):
    weights = [(stores["prose"], 0.4), (stores["code"], 0.6)]
    before, after = _blend(weights, size=200), _blend(weights, size=210)  # same seed, code's length unchanged
    # why growth is refused: the shuffle follows the number of samples, so the first 200 are other samples
    assert [_ids_of(before, i) for i in range(200)] != [_ids_of(after, i) for i in range(200)]
    state = _saved(before)
    message = _refusal(after, state, allow_changes=("seed",))
    assert (
        "another seed" not in message and "blend weights changed" not in message and "[allow_changes: '" not in message
    )
    assert "same weights, another size (samples per dataset [80, 120] -> [84, 126])" in message
    assert "sample order changed (order digest " in message
    assert "built for 120 -> 126 samples with the same seed, and its shuffle depends on the number" in message
    assert "built for 200 samples and this dataset for 210" in message
    assert "To resume, build the dataset for 200 samples as before" in message


def _ids_of(dataset, i: int) -> list[int]:
    sample = dataset[i]
    return [int(sample["dataset_id"]), *np.asarray(sample["tokens"])[:4].tolist()]

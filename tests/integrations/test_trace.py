"""tokenport trace: the traced documents of random steps of a real run are exactly the tokens the trainer got."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.cli import main
from tokenport.integrations import StatefulLoader, check_receipt, data_receipt, rebuild_dataset
from tokenport.integrations.receipt import DataReceipt
from tokenport.sampling import RandomSampler

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

RANKS = 2
STEPS = 24


def _write(prefix, seed: int, documents: int = 40, masks: bool = False) -> str:
    """A byte-tokenizer store of random documents (with loss masks for a chat store)."""
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(10, 90), append=256)
    if masks:
        drawn = (Doc(t, mask=(np.arange(len(t)) >= len(t) // 2).astype(np.uint8)) for t in drawn)
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), masks=masks)


def _run(make_loader) -> tuple[dict, list[list[dict]]]:
    """STEPS steps on RANKS simulated data-parallel ranks: rank 0's state, and each step's batch per rank."""
    loaders = [make_loader(rank) for rank in range(RANKS)]
    steps = [list(batches) for batches in zip(*(_first(loader, STEPS) for loader in loaders))]
    return loaders[0].state_dict(), steps


def _first(loader, count):
    out = []
    for batch in loader:
        out.append({name: value.numpy() for name, value in batch.items()})
        if len(out) == count:
            return out
    return out


def _expected(batch: dict, slot: int, kind: str) -> np.ndarray:
    """What the trainer received in row ``slot``: a GPT window (tokens, last label), else the non-pad tokens."""
    if kind == "GPTDataset":
        return np.append(batch["tokens"][slot], batch["labels"][slot][-1])
    return batch["tokens"][slot][: int(batch["cu_seqlens"][slot][-1])]


def _check(traced, steps, step):
    assert [(t.rank, t.slot) for t in traced] == [(r, s) for r in range(RANKS) for s in range(2)]
    for item in traced:
        store = tp.IndexedDataset(item.lineage.store)
        tokens = np.concatenate([store.get(d, a, b - a) for d, a, b in item.lineage.pieces])
        np.testing.assert_array_equal(tokens, _expected(steps[step][item.rank], item.slot, item.lineage.kind))
        text = "".join(item.texts)
        assert text == tp.load_tokenizer("byte").decode(tokens)


@pytest.fixture()
def blend_run(tmp_path):
    prefixes = [_write(tmp_path / name, seed) for seed, name in enumerate(("prose", "code", "docs"))]
    data_path = [str(x) for pair in zip((0.5, 0.3, 0.2), prefixes) for x in pair]
    train, _, _ = tp.build_datasets(data_path, sizes=(200, 0, 0), config=tp.GPTSampleConfig(32), seed=5, split="1,0,0")
    state, steps = _run(
        lambda rank: StatefulLoader.for_dataset(
            train, micro_batch_size=2, seed=3, data_parallel_rank=rank, data_parallel_size=RANKS
        )
    )
    return train, state, steps, prefixes


def test_random_steps_of_a_blend_run_trace_to_the_tokens_the_trainer_got(blend_run, tmp_path):
    train, state, steps, _ = blend_run
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    checkpoint = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "data": state}, checkpoint)
    for step in np.random.default_rng(0).choice(STEPS, 6, replace=False).tolist():
        for source in (state, path, checkpoint):
            traced = tp.trace(source, step)
            _check(traced, steps, step)
            assert all(t.lineage.path and t.lineage.kind == "GPTDataset" for t in traced)
        assert tp.trace(state, step, rank=1) == [t for t in traced if t.rank == 1]
        assert tp.trace(state, step, dataset=train, detokenize=False)[0].lineage == traced[0].lineage


def test_random_steps_of_an_sft_run_and_a_cyclic_sampler_trace_exactly(tmp_path):
    chat = tp.SFTDataset(tp.IndexedDataset(_write(tmp_path / "chat", 7, 120, masks=True)), 64, seed=2)
    state, steps = _run(
        lambda rank: StatefulLoader.for_dataset(
            chat, micro_batch_size=2, shuffle=False, data_parallel_rank=rank, data_parallel_size=RANKS
        )
    )
    for step in np.random.default_rng(1).choice(STEPS, 5, replace=False).tolist():
        _check(tp.trace(state, step), steps, step)
    gpt = tp.GPTDataset(
        tp.IndexedDataset(_write(tmp_path / "g", 8)), np.arange(40), 100, tp.GPTSampleConfig(16), seed=1
    )
    state, steps = _run(lambda rank: StatefulLoader(gpt, RandomSampler(len(gpt), 0, 2, rank, RANKS, seed=4)))
    for step in (0, 11, STEPS - 1):
        _check(tp.trace(state, step), steps, step)


def test_the_cli_takes_data_parallel_rank_and_warns_on_the_old_rank_flag(blend_run, tmp_path, capsys):
    _, state, _, _ = blend_run
    path = tmp_path / "ckpt.pt"
    torch.save({"loader": state}, path)
    assert main(["trace", str(path), "--step", "4", "--data-parallel-rank", "1"]) == 0
    new = capsys.readouterr()
    assert main(["trace", str(path), "--step", "4", "--rank", "1"]) == 0
    old = capsys.readouterr()
    assert "rank 1 slot 0: sample" in new.out and "rank 0" not in new.out
    assert old.out == new.out and "deprecated" not in new.err
    assert "tokenport: warning: --rank is deprecated; use --data-parallel-rank" in old.err


def test_the_cli_prints_the_step_and_its_json(blend_run, tmp_path, capsys):
    _, state, steps, prefixes = blend_run
    path = tmp_path / "ckpt.pt"
    torch.save({"loader": state}, path)
    assert main(["trace", str(path), "--step", "4", "--rank", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("step 4 (0-based") and "key 'loader'" in text
    assert "rank 1 slot 0: sample" in text and "rank 0" not in text
    assert "    document " in text and any(f"store {p}" in text for p in prefixes)
    assert main(["trace", str(path), "--step", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["step"] == 4 and len(report["samples"]) == 4
    first = report["samples"][0]
    assert first["lineage"]["pieces"] and first["texts"] and first["lineage"]["path"]


def test_bad_inputs_are_refused_naming_the_fault(blend_run, tmp_path, capsys):
    train, state, _, prefixes = blend_run
    with pytest.raises(tp.ConfigError, match=rf"step={STEPS}: the state was saved after {STEPS} step"):
        tp.trace(state, STEPS)
    with pytest.raises(tp.ConfigError, match="rank=2: the run had 2 data-parallel rank"):
        tp.trace(state, 0, rank=2)
    with pytest.raises(tp.ConfigError, match="has no data receipt"):
        tp.trace({k: v for k, v in state.items() if k != "receipt"}, 0)
    for name, content in (("notes.txt", b"hello"), ("list.json", b"[1, 2]"), ("bad.json", b"{oops")):
        (tmp_path / name).write_bytes(content)
        assert main(["trace", str(tmp_path / name), "--step", "0"]) == 2
        assert f"{name}: " in capsys.readouterr().err
    torch.save({"model": {"w": torch.zeros(1)}}, tmp_path / "weights.pt")
    with pytest.raises(tp.ConfigError, match="holds no StatefulLoader state"):
        tp.trace(tmp_path / "weights.pt", 0)
    _write(prefixes[1], 99)  # the code store rewritten with other documents
    with pytest.raises(tp.ConfigError, match=rf"store '{prefixes[1]}' changed content"):
        tp.trace(state, 0)
    assert tp.trace(state, 0, dataset=train)  # the dataset built before still reads the documents it was run on
    rebuilt, _, _ = tp.build_datasets(
        [str(x) for pair in zip((0.5, 0.3, 0.2), prefixes) for x in pair],
        sizes=(200, 0, 0),
        config=tp.GPTSampleConfig(32),
        seed=5,
        split="1,0,0",
    )
    with pytest.raises(tp.ConfigError, match=rf"store '{prefixes[1]}' changed content"):
        tp.trace(state, 0, dataset=rebuilt)


def test_the_recipe_rebuilds_and_adds_no_difference_to_old_receipts(blend_run):
    train, state, _, _ = blend_run
    saved = DataReceipt.from_dict(state["receipt"])
    rebuilt = rebuild_dataset(saved)
    assert data_receipt(rebuilt).dataset == data_receipt(train).dataset

    def strip(node):
        node.pop("build", None)
        for child in node.get("datasets", []):
            strip(child)
        return node

    old = copy.deepcopy(state["receipt"])
    strip(old["dataset"])
    current = dataclasses.replace(data_receipt(train), seed=old["seed"])
    assert check_receipt(DataReceipt.from_dict(old), current) == ()  # what resuming compares
    assert check_receipt(saved, current) == ()
    with pytest.raises(tp.ConfigError, match=r"dataset \(BlendedDataset\): the receipt records no recipe"):
        rebuild_dataset(old)


def test_packed_datasets_and_scheduled_blends_rebuild_from_their_receipts(tmp_path):
    from tokenport.blend import MixtureSchedule
    from tokenport.builder.specs import Blend

    store = tp.IndexedDataset(_write(tmp_path / "p", 3, 60))
    packed = tp.PackedDataset(store, 96, ids=np.r_[2:20, 30:55], split_long=True, window=8, seed=6)
    state, steps = _run(
        lambda rank: StatefulLoader.for_dataset(
            packed, micro_batch_size=2, seed=2, data_parallel_rank=rank, data_parallel_size=RANKS
        )
    )
    assert state["receipt"]["dataset"]["build"] == {"ids": [[2, 20], [30, 55]], "shuffle": True}
    for step in (0, 4, len(steps) - 1):
        _check(tp.trace(state, step), steps, step)
    prefixes = [_write(tmp_path / name, seed) for seed, name in enumerate(("a", "b"))]
    schedule = MixtureSchedule.from_data(
        [{"at": 0, "weights": [0.8, 0.2]}, {"at": 40, "ramp_to": [0.2, 0.8], "until": 80}]
    )
    blend = Blend(tuple(prefixes), None, schedule)
    train = tp.build_datasets(blend, sizes=(96, 0, 0), config=tp.GPTSampleConfig(32), seed=1, split="1,0,0")[0]
    state, steps = _run(
        lambda rank: StatefulLoader.for_dataset(
            train, micro_batch_size=2, shuffle=False, data_parallel_rank=rank, data_parallel_size=RANKS
        )
    )
    assert rebuild_dataset(state["receipt"]).schedule is not None
    for step in (1, 20):
        _check(tp.trace(state, step), steps, step)


def test_moved_stores_are_named_once_with_the_fix_for_the_cli_and_for_python(blend_run, tmp_path, capsys):
    _, state, steps, prefixes = blend_run
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    moved = tmp_path / "moved"
    moved.mkdir()
    for prefix in prefixes:
        for suffix in (".bin", ".idx", ".json"):
            os.replace(prefix + suffix, str(moved / os.path.basename(prefix)) + suffix)
    news = [str(moved / os.path.basename(p)) for p in prefixes]
    assert main(["trace", str(path), "--step", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("cannot be opened") == 1 and "cannot build the dataset" not in err and "stores=" not in err
    assert f"--step 3 --store-path {prefixes[0]}=NEW_PREFIX" in err
    flags = [f"--store-path={old}={new}" for old, new in zip(prefixes, news)]
    assert main(["trace", str(path), "--step", "3", *flags[:1]]) == 2  # the next store's fix, keeping the first
    assert f"--store-path {prefixes[0]}={news[0]} --store-path {prefixes[1]}=NEW_PREFIX" in capsys.readouterr().err
    assert main(["trace", str(path), "--step", "3", "--json", *flags]) == 0
    assert len(json.loads(capsys.readouterr().out)["samples"]) == 4
    with pytest.raises(SystemExit, match="2"):
        main(["trace", str(path), "--step", "3", "--store-path", "nowhere"])
    assert "'nowhere' is not OLD=NEW" in capsys.readouterr().err
    with pytest.raises(tp.ConfigError, match=r"If it moved, pass stores=\{") as caught:
        tp.trace(state, 3)
    assert "--store-path" not in str(caught.value) and "cannot build the dataset" not in str(caught.value)
    _check(tp.trace(state, 3, stores=dict(zip(prefixes, news))), steps, 3)


def test_a_file_that_is_no_state_is_named_in_one_line(tmp_path):
    """An empty file, text that is neither JSON nor a checkpoint, and a cut-off checkpoint are each refused
    naming the file in one short line, without torch's pages of advice about weights_only."""
    from tokenport.integrations.tracing import load_state

    torch = pytest.importorskip("torch")
    whole = tmp_path / "whole.pt"
    torch.save({"model": torch.zeros(64)}, whole)
    cases = {"empty.json": b"", "notes.txt": b"not a state", "cut.pt": whole.read_bytes()[:300]}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(tp.ConfigError) as refused:
            load_state(path)
        message = str(refused.value)
        assert message.startswith(f"{path}: ") and "\n" not in message and "PyTorch 2.6" not in message, message

"""TokenportTrainer: a real transformers Trainer on tokenport datasets, resumed from a checkpoint exactly.

A straight run and a run stopped at a checkpoint then resumed by a new Trainer feed the same sample
ids and give bitwise the same per-step losses (CPU, attention dropout on, so the restored RNG state
counts too); the resumed run reads only the samples it trains on.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenport.integrations.hf import LOADER_STATE_NAME, TokenportCollator, TokenportTrainer  # noqa: E402

VOCAB, EOD, SEQ = 96, 2, 32


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tp.IndexedDataset:
    """A store of 60 random documents of 5..80 tokens, each ending with EOD."""
    documents = random_documents(np.random.default_rng(0), 60, tokens=(3, VOCAB), length=(5, 80), eod=EOD)
    return tp.IndexedDataset(build_store(tmp_path_factory.mktemp("hf") / "store", documents, dtype=np.uint16))


class Recorder(torch.utils.data.Dataset):
    """A dataset wrapper that records every sample id read (what was read is what was trained on)."""

    def __init__(self, dataset, size: int | None = None) -> None:
        self.dataset = dataset
        self.size = len(dataset) if size is None else size
        self.read: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int):
        self.read.append(int(idx))
        return self.dataset[idx]


class StopAt(transformers.TrainerCallback):
    """Stops training after optimizer step ``step`` (after that step's checkpoint is saved)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def gpt_dataset(store, size: int | None = None) -> Recorder:
    """GPT samples of the store (88: one epoch of its tokens), or the first ``size`` of them."""
    config = tp.GPTSampleConfig(SEQ, eod_id=EOD, eod_mask_loss=True)
    return Recorder(tp.GPTDataset(store, np.arange(len(store)), 16, config, seed=1), size)


def model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_dropout=0.1,
    )
    return transformers.LlamaForCausalLM(config)


def arguments(output_dir, **overrides) -> transformers.TrainingArguments:
    options = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        max_steps=8,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=4,
        report_to=[],
        use_cpu=True,
        seed=7,
        disable_tqdm=True,
        dataloader_pin_memory=False,
    )
    options.update(overrides)
    return transformers.TrainingArguments(**options)


def train(output_dir, dataset, *, resume=None, stop=None, allow_changes=(), **overrides):
    """Run a TokenportTrainer; return (losses by step, epochs by step, the trainer)."""
    trainer = TokenportTrainer(
        model=model(),
        args=arguments(output_dir, **overrides),
        train_dataset=dataset,
        callbacks=[StopAt(stop)] if stop else [],
        allow_changes=allow_changes,
    )
    trainer.train(resume_from_checkpoint=resume)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {e["step"]: e["loss"] for e in logs}, {e["step"]: e["epoch"] for e in logs}, trainer


@pytest.mark.parametrize(
    ("overrides", "stop"),
    [
        ({}, 4),  # mid-epoch: 88 samples / batch 2 = 44 batches an epoch
        ({"gradient_accumulation_steps": 2, "max_steps": 6, "save_steps": 2}, 2),  # 4 batches a step
        ({"dataloader_num_workers": 1, "dataloader_prefetch_factor": 4}, 4),  # a worker fetching ahead
        # 5 batches an epoch with accumulation 2: steps of 2, 2, 1 batches; two epochs
        ({"gradient_accumulation_steps": 2, "max_steps": -1, "num_train_epochs": 2, "save_steps": 2}, 2),
        ({"gradient_accumulation_steps": 2, "max_steps": -1, "num_train_epochs": 2, "save_steps": 3}, 3),  # epoch end
        ({"gradient_accumulation_steps": 2, "max_steps": -1, "num_train_epochs": 2, "save_steps": 2}, 4),
    ],
)
def test_resume_continues_with_the_next_batch_bitwise(store, tmp_path, overrides, stop):
    samples = 10 if overrides.get("num_train_epochs") else None
    straight_data = gpt_dataset(store, samples)
    losses, epochs, _ = train(tmp_path / "straight", straight_data, **overrides)

    first = gpt_dataset(store, samples)
    train(tmp_path / "split", first, stop=stop, **overrides)
    checkpoint = tmp_path / "split" / f"checkpoint-{stop}"
    assert (checkpoint / LOADER_STATE_NAME).is_file()

    resumed_data = gpt_dataset(store, samples)
    resumed_losses, resumed_epochs, trainer = train(
        tmp_path / "split", resumed_data, resume=str(checkpoint), **overrides
    )
    after = {step: loss for step, loss in losses.items() if step > stop}
    assert after and {s: v for s, v in resumed_losses.items() if s > stop} == after  # bitwise: the same floats
    assert resumed_epochs == epochs
    # the skip loop is bypassed: the resumed run read exactly the samples it trained on, nothing before
    assert first.read + resumed_data.read == straight_data.read
    assert trainer.state.global_step == max(losses)


def test_sample_ids_follow_the_tokenport_sampler(store, tmp_path):
    data = gpt_dataset(store)
    _, _, trainer = train(tmp_path / "run", data, max_steps=3, save_strategy="no")
    sampler = tp.RandomSampler(len(data), 0, 2, 0, 1, seed=7)
    assert data.read == [i for batch, _ in zip(sampler, range(3)) for i in batch]
    assert trainer.loader.consumed_samples == 6


def test_collator_aligns_megatron_labels_with_the_causal_lm_loss(store):
    dataset = gpt_dataset(store).dataset
    samples = [dataset[0], dataset[1]]
    batch = TokenportCollator()(samples)
    tokens = np.stack([s["tokens"] for s in samples])
    targets = np.where(np.stack([s["loss_mask"] for s in samples]) == 0, -100, np.stack([s["labels"] for s in samples]))
    assert np.array_equal(batch["input_ids"].numpy(), tokens)
    assert np.array_equal(batch["shift_labels"].numpy(), targets)
    assert np.array_equal(batch["labels"].numpy()[:, 1:], targets[:, :-1])
    assert (batch["labels"][:, 0] == -100).all() and (targets == -100).any()  # eod_mask_loss masks EODs
    # the model's loss from shift_labels is cross-entropy of position t against the sample's label t
    torch_model = model().eval()
    out = torch_model(**batch)
    logits = torch_model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), torch.from_numpy(targets).reshape(-1))
    assert torch.allclose(out.loss, expected)


def test_packed_documents_do_not_attend_to_each_other(store):
    packed = tp.PackedDataset(store, SEQ, split_long=True, seed=0)
    row = next(i for i in range(len(packed)) if packed[i]["num_documents"] >= 2)
    sample = packed[row]
    batch = TokenportCollator()([sample])
    net = model().eval()
    with torch.no_grad():
        # use_cache=False as under the Trainer (args.use_cache): with a cache transformers does not detect packing
        together = net(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        bounds = sample["cu_seqlens"][: sample["num_documents"] + 1]
        for start, end in zip(bounds[:-1], bounds[1:]):
            alone = net(input_ids=batch["input_ids"][:, start:end]).logits[0]
            assert torch.allclose(together[start:end], alone, atol=1e-5)


def test_packed_and_blended_datasets_train(store, tmp_path):
    packed = tp.PackedDataset(store, SEQ, split_long=True, seed=0)
    losses, _, _ = train(tmp_path / "packed", packed, max_steps=2, save_strategy="no")
    assert len(losses) == 2 and all(np.isfinite(list(losses.values())))
    config = tp.GPTSampleConfig(SEQ, eod_id=EOD)
    half = len(store) // 2
    children = [
        tp.GPTDataset(store, np.arange(half), 12, config, 1),
        tp.GPTDataset(store, np.arange(half, 60), 12, config, 2),
    ]
    blended = tp.BlendedDataset(children, [0.5, 0.5], 12)
    losses, _, _ = train(tmp_path / "blend", blended, max_steps=2, save_strategy="no")
    assert len(losses) == 2


def test_evaluation_reads_tokenport_samples(store, tmp_path):
    evaluation = gpt_dataset(store, 8)
    trainer = TokenportTrainer(
        model=model(), args=arguments(tmp_path, per_device_eval_batch_size=4), eval_dataset=evaluation
    )
    metrics = trainer.evaluate()
    assert evaluation.read == list(range(8))
    collate, net = TokenportCollator(), trainer.model.eval()
    with torch.no_grad():
        losses = [net(**collate([evaluation.dataset[i] for i in ids])).loss for ids in (range(4), range(4, 8))]
    assert metrics["eval_loss"] == pytest.approx(float(sum(losses) / 2), rel=1e-6)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"auto_find_batch_size": True}, "auto_find_batch_size"),
        ({"ignore_data_skip": True}, "ignore_data_skip"),
        ({"train_sampling_strategy": "group_by_length"}, "train_sampling_strategy"),
        ({"dataloader_in_order": False, "dataloader_num_workers": 2}, "dataloader_in_order"),
    ],
)
def test_settings_that_cannot_resume_are_refused(tmp_path, overrides, match):
    with pytest.raises(tp.ConfigError, match=match):
        TokenportTrainer(model=model(), args=arguments(tmp_path, **overrides))


def test_a_trainer_without_the_hooked_internals_is_refused(tmp_path, monkeypatch):
    def _run_epoch(self, model, epoch, train_dataloader):  # a Trainer whose internals changed
        raise AssertionError("never called")

    monkeypatch.setattr(transformers.Trainer, "_run_epoch", _run_epoch)
    with pytest.raises(tp.ConfigError, match="_run_epoch"):
        TokenportTrainer(model=model(), args=arguments(tmp_path))


def test_sequential_order_is_one_pass_and_refuses_more(store, tmp_path):
    data = gpt_dataset(store, 16)
    train(tmp_path / "one", data, train_sampling_strategy="sequential", max_steps=8, save_strategy="no")
    assert data.read == list(range(16))  # 8 steps of 2, in id order
    with pytest.raises(tp.ConfigError, match="reads the dataset once"):
        train(tmp_path / "two", gpt_dataset(store, 16), train_sampling_strategy="sequential", max_steps=9)
    with pytest.raises(tp.ConfigError, match="reads the dataset once"):
        train(
            tmp_path / "two",
            gpt_dataset(store, 16),
            train_sampling_strategy="sequential",
            max_steps=-1,
            num_train_epochs=2,
        )


def test_resume_refuses_a_checkpoint_without_loader_state_or_of_another_batch(store, tmp_path):
    train(tmp_path / "run", gpt_dataset(store), stop=4)
    checkpoint = tmp_path / "run" / "checkpoint-4"
    with pytest.raises(tp.ConfigError, match="global_batch_size"):
        train(tmp_path / "run", gpt_dataset(store), resume=str(checkpoint), per_device_train_batch_size=4)
    with pytest.raises(tp.ConfigError, match="the loader consumed 8 samples"):  # 4 steps of 1 batch, not 2
        train(tmp_path / "run", gpt_dataset(store), resume=str(checkpoint), gradient_accumulation_steps=2)
    saved = json.loads((checkpoint / LOADER_STATE_NAME).read_text())
    (checkpoint / LOADER_STATE_NAME).write_text(json.dumps({**saved, "global_step": 3}))
    with pytest.raises(tp.ConfigError, match="mixes two saves"):
        train(tmp_path / "run", gpt_dataset(store), resume=str(checkpoint))
    os.remove(checkpoint / LOADER_STATE_NAME)
    with pytest.raises(tp.ConfigError, match=f"{LOADER_STATE_NAME}: missing"):
        train(tmp_path / "run", gpt_dataset(store), resume=str(checkpoint))


def test_resume_checks_the_data_receipt_and_accepts_named_changes(store, tmp_path):
    def samples(seed):
        config = tp.GPTSampleConfig(SEQ, eod_id=EOD, eod_mask_loss=True)
        return tp.GPTDataset(store, np.arange(len(store)), 16, config, seed=seed)

    train(tmp_path / "run", samples(1), stop=4)
    checkpoint = str(tmp_path / "run" / "checkpoint-4")
    with pytest.raises(tp.ConfigError, match=r"sample order changed .*\[allow_changes: 'seed'\]"):
        train(tmp_path / "run", samples(2), resume=checkpoint)
    losses, _, trainer = train(tmp_path / "run", samples(2), resume=checkpoint, allow_changes=("seed",))
    assert trainer.state.global_step == 8 and max(losses) == 8
    with pytest.raises(tp.ConfigError, match="unknown change kind"):
        TokenportTrainer(model=model(), args=arguments(tmp_path / "x"), train_dataset=samples(1), allow_changes=("x",))


def test_a_mutated_loader_file_is_refused_and_changes_nothing(store, tmp_path):
    """tokenport_loader.json mutated every way: a TokenportError naming the file (or read as the valid file
    it still is), and the trainer's loader left as it was."""
    from tests._support.mutate import mutations

    train(tmp_path / "run", gpt_dataset(store), stop=4)
    checkpoint = tmp_path / "run" / "checkpoint-4"
    text = (checkpoint / LOADER_STATE_NAME).read_text()
    trainer = TokenportTrainer(model=model(), args=arguments(tmp_path / "again"), train_dataset=gpt_dataset(store))
    loader = trainer.get_train_dataloader()
    trainer.state.global_step = 4
    for label, data in mutations(text):
        (checkpoint / LOADER_STATE_NAME).write_bytes(data)
        before = loader.state_dict()
        try:
            trainer._restore_loader(str(checkpoint), 0, 4)
        except tp.TokenportError:
            assert loader.state_dict() == before, label
            continue
        except Exception as exc:
            pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        assert loader.consumed_samples == 8, label
        loader.sampler.consumed_samples = 0

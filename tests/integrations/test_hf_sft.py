"""Training on tokenport's SFT batches: TokenportTrainer on SFTDataset(shape="hf", packing="bfd") trains a tiny
Llama with padding-free attention, step for step as TRL's SFTTrainer on its own packed rows of the same data.

What is aligned between the two runs: the same conversations (those that fit in SEQ, so neither side
truncates), the same tokenizer.json and chat template, the same initial weights (one state dict), the
same TrainingArguments values (TRL's SFTConfig defaults that differ from transformers' set explicitly:
bf16, gradient_checkpointing, learning_rate, logging_steps), a sequential order on both sides
(``train_sampling_strategy="sequential"``, TRL's ``shuffle_dataset=False``; SFTDataset with ``seed=None``
and TRL's window of 1000 rows), and ``max_steps`` within one pass (TokenportTrainer drops no batch then).
The batches differ in shape only: TRL's padding-free collator concatenates a micro-batch into one row,
tokenport pads each row to SEQ; position ids restart per conversation on both, so attention never
crosses two conversations and the padding (after every real token) changes nothing before it.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tests.chat.test_template import bpe as bpe  # the fixture
from tests.chat.test_template import conversation
from tokenport.chat import CHATML_TEMPLATE, ChatTemplate, encode_chat
from tokenport.errors import InputDataError
from tokenport.samples.sft import SFTDataset

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenport.integrations.hf import TokenportCollator, TokenportTrainer  # noqa: E402

SEQ, BATCH, STEPS = 256, 2, 24
ARGS = dict(
    per_device_train_batch_size=BATCH,
    max_steps=STEPS,
    learning_rate=3e-3,
    lr_scheduler_type="constant",
    logging_steps=1,
    seed=0,
    bf16=False,
    gradient_checkpointing=False,
    train_sampling_strategy="sequential",
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    dataloader_num_workers=0,
    disable_tqdm=True,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data(bpe, tmp_path_factory):
    """(conversations that fit in SEQ, the chat store of their ids and masks)."""
    tok, peer = bpe
    template = ChatTemplate(CHATML_TEMPLATE, special_tokens=peer.special_tokens_map)
    rng = random.Random(21)
    kept, encoded = [], []
    while len(kept) < 160:
        messages = conversation(rng, tools=False)
        ids, mask = encode_chat(tok, template, messages)
        if len(ids) <= SEQ:
            kept.append(messages)
            encoded.append((ids, mask))
    documents = (Doc(ids, mask=mask) for ids, mask in encoded)
    prefix = build_store(tmp_path_factory.mktemp("sft") / "chat", documents, dtype=np.uint16, masks=True)
    return kept, tp.IndexedDataset(prefix)


def _model(vocab_size: int):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
        attn_implementation="sdpa",
    )
    return transformers.LlamaForCausalLM(config)


def _losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_trains_step_for_step_as_trl_sft_trainer(bpe, data, tmp_path):
    import datasets
    from trl import SFTConfig, SFTTrainer

    _, peer = bpe
    conversations, store = data
    peer.chat_template = CHATML_TEMPLATE
    initial = _model(len(peer)).state_dict()

    ds = SFTDataset(store, SEQ, packing="bfd", shape="hf")
    ours = _model(len(peer))
    ours.load_state_dict(initial)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "tokenport"), **ARGS)
    trainer = TokenportTrainer(model=ours, args=args, train_dataset=ds)
    trainer.train()

    theirs = _model(len(peer))
    theirs.load_state_dict(initial)
    config = SFTConfig(
        output_dir=str(tmp_path / "trl"),
        assistant_only_loss=True,
        packing=True,
        packing_strategy="bfd",
        max_length=SEQ,
        shuffle_dataset=False,
        **ARGS,
    )
    rows = datasets.Dataset.from_list([{"messages": messages} for messages in conversations])
    trl = SFTTrainer(model=theirs, args=config, train_dataset=rows, processing_class=peer)
    assert len(trl.train_dataset) == len(ds) >= BATCH * STEPS  # the same packed rows (tests/chat/test_trl_parity.py)
    trl.train()

    mine, reference = _losses(trainer), _losses(trl)
    assert len(mine) == len(reference) == STEPS
    np.testing.assert_allclose(mine, reference, rtol=1e-6)  # equal up to float summation order
    assert np.mean(mine[-4:]) < 0.8 * np.mean(mine[:4])  # it learns


def test_collator_takes_hf_shaped_sft_samples(data):
    _, store = data
    ds = SFTDataset(store, SEQ, shape="hf")
    samples = [ds[0], ds[1]]
    batch = TokenportCollator()(samples)
    assert sorted(batch) == ["input_ids", "labels", "position_ids", "shift_labels"]
    for name in ("input_ids", "labels", "position_ids"):
        assert batch[name].tolist() == [s[name].tolist() for s in samples]
    assert (batch["shift_labels"][:, :-1] == batch["labels"][:, 1:]).all()
    assert (batch["shift_labels"][:, -1] == -100).all()
    # the Megatron shape of the same samples gives the same tensors
    megatron = TokenportCollator()([SFTDataset(store, SEQ)[i] for i in (0, 1)])
    for name in batch:
        assert torch.equal(batch[name], megatron[name])

    with pytest.raises(InputDataError, match="label_pad"):
        TokenportCollator()([SFTDataset(store, SEQ, shape="hf", label_pad=-1)[0]])

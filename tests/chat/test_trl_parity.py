"""The same rows through TRL's SFT data path and through tokenport: equal ids, masks and packed rows.

TRL 1.16's ``SFTTrainer`` prepares its dataset when built (``_prepare_dataset``): it tokenizes each row
with the chat template, builds ``labels`` (the token where every applicable mask is 1, else -100) and,
with ``packing=True``, packs them with ``pack_dataset``. The tokenizer is the one trained in
tests/chat/test_template.py, wrapped as ``PreTrainedTokenizerFast`` for TRL and loaded from the same
tokenizer.json for tokenport.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

import tokenport as tp
from tests._support.stores import Doc, build_store
from tests.chat.test_template import LLAMA3_MARKED, TOOLS, conversation
from tests.chat.test_template import bpe as bpe  # the fixture
from tokenport.chat import CHATML_TEMPLATE, ChatTemplate, encode_chat, to_conversation
from tokenport.samples.sft import SFTDataset

SEQ = 1024  # packed row length


def _tiny_model(vocab_size: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    return LlamaForCausalLM(config)


def _trl_prepared(peer, source: str, rows: list[dict], tmp_path, **config) -> list[dict]:
    """The rows as TRL's SFTTrainer prepares its train_dataset (built in __init__, nothing trained)."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(1)
    peer.chat_template = source
    args = SFTConfig(output_dir=str(tmp_path / "trl"), report_to=[], dataset_num_proc=None, use_cpu=True, **config)
    trainer = SFTTrainer(
        model=_tiny_model(len(peer)),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=peer,
    )
    return trainer.train_dataset.to_list()


def _conversations(n: int, seed: int) -> list[tuple[list[dict], list[dict] | None]]:
    """(messages, tools) pairs: multi-turn, tool calls and outputs, reasoning, system prompts, unicode."""
    rng = random.Random(seed)
    return [(conversation(rng), TOOLS if rng.random() < 0.5 else None) for _ in range(n)]


def _rows(conversations) -> list[dict]:
    """The dataset rows TRL reads: ``messages`` and ``tools`` as JSON text (one Arrow type for every row)."""
    return [{"messages": messages, "tools": json.dumps(tools) if tools else None} for messages, tools in conversations]


def _labels(ids: np.ndarray, mask: np.ndarray) -> list[int]:
    return np.where(mask.astype(bool), ids, -100).tolist()


@pytest.mark.parametrize("source", [CHATML_TEMPLATE, LLAMA3_MARKED], ids=["chatml", "llama3-marked"])
def test_assistant_only_loss_equals_encode_chat(bpe, source, tmp_path):
    tok, peer = bpe
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    conversations = _conversations(60, 11)
    trl = _trl_prepared(peer, source, _rows(conversations), tmp_path, assistant_only_loss=True)
    assert len(trl) == len(conversations)
    for (messages, tools), row in zip(conversations, trl):
        ids, mask = encode_chat(tok, template, messages, tools=tools)
        assert ids.tolist() == row["input_ids"]
        assert _labels(ids, mask) == row["labels"]


def _prompt_completion(conversations) -> list[dict]:
    """Conversational prompt-completion rows: everything before the last assistant turn is the prompt."""
    rows = []
    for messages, _ in conversations:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        rows.append({"prompt": messages[:last], "completion": messages[last : last + 1]})
    return rows


@pytest.mark.parametrize(
    ("source", "assistant_only_loss"),
    [(LLAMA3_MARKED, False), (CHATML_TEMPLATE, True), (LLAMA3_MARKED, True)],
    ids=["llama3-completion", "chatml-completion+assistant", "llama3-completion+assistant"],
)
def test_completion_only_loss_equals_last_assistant(bpe, source, assistant_only_loss, tmp_path):
    """completion_only_loss trains what follows the prompt's generation prompt: tokenport's 'last_assistant'
    policy on prompt + completion. Alone, that is equal where the template prints nothing after the last
    generation block (Llama-3 style); ChatML prints a newline after ``<|im_end|>`` that TRL's completion mask
    trains and the generation block does not, so with ChatML the equality needs assistant_only_loss too
    (labels where both masks are 1)."""
    tok, peer = bpe
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    rng = random.Random(5)
    # tools=False: a completion with tool calls and no following tool output is not a prompt-completion pair
    conversations = [(conversation(rng, tools=False), None) for _ in range(60)]
    rows = _prompt_completion(conversations)
    trl = _trl_prepared(
        peer, source, rows, tmp_path, completion_only_loss=True, assistant_only_loss=assistant_only_loss
    )
    for row, prepared in zip(rows, trl):
        messages = tp.chat.to_messages(row, "prompt_completion")
        ids, mask = encode_chat(tok, template, messages, policy="last_assistant")
        assert ids.tolist() == prepared["input_ids"]
        assert _labels(ids, mask) == prepared["labels"]


def test_chatml_completion_mask_also_trains_the_trailing_newline(bpe, tmp_path):
    """Where TRL and the generation markers part: completion_only_loss alone on ChatML trains the ``\\n`` the
    template prints after ``<|im_end|>``; tokenport's mask (transformers' assistant mask) does not."""
    tok, peer = bpe
    template = ChatTemplate(CHATML_TEMPLATE, special_tokens=peer.special_tokens_map)
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "yo"}]}]
    prepared = _trl_prepared(peer, CHATML_TEMPLATE, rows, tmp_path, completion_only_loss=True)[0]
    ids, mask = encode_chat(tok, template, tp.chat.to_messages(rows[0]), policy="last_assistant")
    assert ids.tolist() == prepared["input_ids"]
    trained = np.asarray(prepared["labels"]) != -100
    assert trained[:-1].tolist() == mask[:-1].astype(bool).tolist()
    assert trained[-1] and not mask[-1] and tok.decode([int(ids[-1])]) == "\n"


@pytest.mark.parametrize("source", [CHATML_TEMPLATE, LLAMA3_MARKED], ids=["chatml", "llama3-marked"])
def test_packed_rows_equal_sft_dataset(bpe, source, tmp_path):
    """packing=True, packing_strategy="bfd": TRL's packed rows are SFTDataset's rows (seed=None, window=1000)
    over a chat store of encode_chat's ids and masks, in the same order."""
    tok, peer = bpe
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    # conversations longer than SEQ left out of both: TRL's bfd truncates them, SFTDataset's truncate may drop
    encoded = [(c, encode_chat(tok, template, c[0], tools=c[1])) for c in _conversations(200, 12)]
    encoded = [(c, e) for c, e in encoded if len(e[0]) <= SEQ]
    trl = _trl_prepared(
        peer,
        source,
        _rows([c for c, _ in encoded]),
        tmp_path,
        assistant_only_loss=True,
        packing=True,
        packing_strategy="bfd",
        max_length=SEQ,
    )
    documents = [Doc(ids, mask=mask) for _, (ids, mask) in encoded]
    prefix = build_store(tmp_path / "chat", documents, dtype=np.uint16, masks=True)
    ds = SFTDataset(tp.IndexedDataset(prefix), SEQ, shape="hf", window=1000)
    assert len(ds) == len(trl) and len(trl) < len(encoded) // 3  # several conversations a row
    for r, row in enumerate(trl):
        sample, total = ds[r], len(row["input_ids"])
        assert sample["input_ids"][:total].tolist() == row["input_ids"]
        assert sample["labels"][:total].tolist() == row["labels"]
        positions = np.concatenate([np.arange(n) for n in row["seq_lengths"]])
        assert sample["position_ids"][:total].tolist() == positions.tolist()
        assert (sample["labels"][total:] == -100).all()


def _completions_after_prompts(conversations) -> list[dict]:
    """Prompt-completion rows whose prompt is everything to the last user turn, earlier assistant turns (and
    their tool calls) included, and whose completion is all that answers it: tool calls, tool outputs, the
    final assistant turn."""
    rows = []
    for messages, tools in conversations:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        rows.append(
            {
                "prompt": messages[: last_user + 1],
                "completion": messages[last_user + 1 :],
                "tools": json.dumps(tools) if tools else None,
            }
        )
    return rows


@pytest.mark.parametrize("source", [CHATML_TEMPLATE, LLAMA3_MARKED], ids=["chatml", "llama3-marked"])
def test_prompt_completion_records_equal_trl_default_completion_only_loss(bpe, source, tmp_path):
    """TRL's defaults on prompt-completion data (completion_only_loss on, assistant_only_loss off): the
    completion's tokens are trained, the prompt's (its assistant turns too) are not; tokenport's record
    boundary (`to_conversation`) and `completion_start` give the same ids and labels."""
    tok, peer = bpe
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    rows = _completions_after_prompts(_conversations(60, 13))
    assert sum(any(m["role"] == "assistant" for m in row["prompt"]) for row in rows) > 20  # the case at hand
    trl = _trl_prepared(peer, source, rows, tmp_path)
    assert len(trl) == len(rows)
    for row, prepared in zip(rows, trl):
        messages, start = to_conversation(row)
        tools = json.loads(row["tools"]) if row["tools"] else None
        ids, mask = encode_chat(tok, template, messages, tools=tools, completion_start=start)
        assert ids.tolist() == prepared["input_ids"]
        assert _labels(ids, mask) == prepared["labels"]
        flat_ids, flat_mask = encode_chat(tok, template, messages, tools=tools)  # every assistant turn
        if any(m["role"] == "assistant" for m in row["prompt"]):
            assert (flat_mask[: mask.argmax()] == 1).any()  # what the flattened masks trained in the prompt


def test_string_prompt_completion_records_equal_trl_on_their_one_turn_conversation(bpe, tmp_path):
    """The string form is a one-turn conversation (a user prompt, an assistant completion) rendered by the chat
    template; its masks are TRL's on that conversation."""
    tok, peer = bpe
    template = ChatTemplate(CHATML_TEMPLATE, special_tokens=peer.special_tokens_map)
    rng = random.Random(3)
    strings = [{"prompt": _text_of(rng), "completion": _text_of(rng)} for _ in range(30)]
    rows = [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "completion": [{"role": "assistant", "content": r["completion"]}],
        }
        for r in strings
    ]
    trl = _trl_prepared(peer, CHATML_TEMPLATE, rows, tmp_path)
    for record, prepared in zip(strings, trl):
        messages, start = to_conversation(record)
        ids, mask = encode_chat(tok, template, messages, completion_start=start)
        assert ids.tolist() == prepared["input_ids"]
        assert _labels(ids, mask) == prepared["labels"]


def _text_of(rng: random.Random) -> str:
    return conversation(rng, tools=False, reasoning=False)[-1]["content"]

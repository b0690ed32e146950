"""Prompt-completion records keep their boundary: `to_conversation` says where the completion starts and
`encode_chat(completion_start=...)` trains only the completion (TRL's masks; see test_trl_parity.py)."""

from __future__ import annotations

import pytest

from tokenport.chat import ChatTemplate, encode_chat, encode_chats, to_conversation
from tokenport.errors import ConfigError, InputDataError
from tokenport.tokenizers import load_tokenizer

PROMPT = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "add"},
    {"role": "user", "content": "3+3?"},
]
COMPLETION = [{"role": "assistant", "content": "6", "reasoning_content": "add again"}]


def test_to_conversation_keeps_the_boundary_of_prompt_completion_records_only() -> None:
    assert to_conversation({"prompt": PROMPT, "completion": COMPLETION}) == (PROMPT + COMPLETION, 3)
    assert to_conversation({"prompt": "q", "completion": "a"}) == (
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        1,
    )
    assert to_conversation({"messages": PROMPT}) == (PROMPT, None)


def test_only_the_completion_is_trained_and_reasoning_mask_still_applies() -> None:
    tok, template = load_tokenizer("byte"), ChatTemplate.chatml()
    ids, mask = encode_chat(tok, template, PROMPT + COMPLETION, completion_start=3)
    trained = tok.decode(ids[mask.astype(bool)])
    assert trained.startswith("<think>") and trained.endswith("6<|im_end|>\n") and "4" not in trained
    prompt, _ = template.render(PROMPT, add_generation_prompt=True)
    assert not mask[: len(tok.encode(prompt))].any() and mask[len(tok.encode(prompt)) :].all()
    ids, masked = encode_chat(tok, template, PROMPT + COMPLETION, completion_start=3, reasoning="mask")
    assert "add again" not in tok.decode(ids[masked.astype(bool)]) and masked.sum() < mask.sum()
    batch = encode_chats(tok, template, [PROMPT + COMPLETION, PROMPT[:2]], completion_starts=[3, None])
    assert batch[0][1].tolist() == mask.tolist()
    assert batch[1][1].tolist() == encode_chat(tok, template, PROMPT[:2])[1].tolist()


@pytest.mark.parametrize("start", [0, 4, -1, 1.0, True, "3"])
def test_a_completion_start_outside_the_messages_is_refused(start) -> None:
    with pytest.raises(ConfigError, match=r"completion_start=.*from 1 to 3"):
        encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), PROMPT + COMPLETION, completion_start=start)


def test_a_completion_without_an_assistant_turn_is_refused() -> None:
    with pytest.raises(InputDataError, match=r"messages\[2:\] \(the completion\) has no assistant turn"):
        encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), PROMPT, completion_start=2)
    with pytest.raises(ConfigError, match="completion_starts has 1 entries for 2 conversations"):
        encode_chats(load_tokenizer("byte"), ChatTemplate.chatml(), [PROMPT, PROMPT], completion_starts=[None])

"""Chat template + assistant mask per conversation: tokenport's encode_chat vs transformers' apply_chat_template.

The same conversations (built from the standard library: a user asks what a function does, the
assistant answers with its docstring; some with a system prompt, some multi-turn), the same BPE
tokenizer (trained here on the docstrings, with ChatML's special tokens), the built-in ChatML
template with generation markers. transformers: `apply_chat_template(..., tokenize=True,
return_dict=True, return_assistant_tokens_mask=True)`, the call TRL's SFT preparation makes per row.
Both sides are checked to give the same ids and masks first; one process, one conversation at a time.

    python benchmarks/bench_chat_template.py
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import sys
import tempfile
import types

from _harness import Row, best_of_each, print_table
from tokenport.chat import ChatTemplate, encode_chat
from tokenport.tokenizers import load_tokenizer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests._support.bpe import train_byte_level_bpe  # noqa: E402 (after the repository is on sys.path)

SPECIALS = ["<|im_start|>", "<|im_end|>"]
MODULES = ["json", "textwrap", "string", "difflib", "shlex", "fractions", "statistics", "heapq", "bisect"]


def docstrings() -> list[tuple[str, str]]:
    """(qualified name, docstring) of the public functions and methods of a few standard-library modules."""
    found = []
    for name in MODULES:
        module = __import__(name)
        for attr, value in vars(module).items():
            candidates = [(attr, value)]
            if inspect.isclass(value):
                candidates += [(f"{attr}.{a}", v) for a, v in vars(value).items()]
            for qual, obj in candidates:
                doc = inspect.getdoc(obj) if isinstance(obj, (types.FunctionType, type)) else None
                if doc and not qual.split(".")[-1].startswith("_"):
                    found.append((f"{name}.{qual}", doc))
    return found


def conversations(docs: list[tuple[str, str]], count: int, seed: int) -> list[list[dict]]:
    """`count` conversations: a third with a system prompt, half with two or three exchanges."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        messages = (
            [{"role": "system", "content": "You explain Python's standard library."}] if rng.random() < 1 / 3 else []
        )
        for _ in range(rng.choice([1, 1, 2, 3])):
            name, doc = rng.choice(docs)
            messages += [
                {"role": "user", "content": f"What does {name} do?"},
                {"role": "assistant", "content": doc},
            ]
        out.append(messages)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    import tokenizers as hf
    from transformers import PreTrainedTokenizerFast

    docs = docstrings()
    with tempfile.TemporaryDirectory() as tmp:
        path = train_byte_level_bpe([doc for _, doc in docs], args.vocab, os.path.join(tmp, "tokenizer.json"))
        raw = hf.Tokenizer.from_file(path)
        raw.add_special_tokens(SPECIALS)
        raw.save(path)
        tok = load_tokenizer("hf:" + path)
        peer = PreTrainedTokenizerFast(tokenizer_object=hf.Tokenizer.from_file(path))
    template = ChatTemplate.chatml()
    chats = conversations(docs, args.conversations, args.seed)

    def ours() -> list:
        return [encode_chat(tok, template, chat) for chat in chats]

    def theirs() -> list:
        return [
            peer.apply_chat_template(
                chat, chat_template=template.source, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
            )
            for chat in chats
        ]

    for (ids, mask), out in zip(ours(), theirs()):
        if ids.tolist() != out["input_ids"] or mask.tolist() != out["assistant_masks"]:
            raise SystemExit("tokenport and transformers disagree on a conversation's ids or mask")
    tokens = sum(len(ids) for ids, _ in ours())
    timed = best_of_each([ours, theirs], args.repeat)
    case = f"{len(chats)} conversations, {tokens / len(chats):.0f} tokens each, ChatML"
    print_table(
        [
            Row("ids + assistant mask", case, "conv/s", len(chats) / timed[0], len(chats) / timed[1], "transformers"),
            Row("ids + assistant mask", case, "tokens/s", tokens / timed[0], tokens / timed[1], "transformers"),
        ]
    )


if __name__ == "__main__":
    main()

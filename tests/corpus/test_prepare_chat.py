"""`prepare` with format="chat": conversations in four shapes to chat stores (tokens + loss masks),
with real worker processes, the real byte tokenizer and the built-in ChatML template."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tokenport.chat import ChatTemplate, encode_chat, to_conversation, to_messages
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run.state import KILL_AT
from tokenport.corpus.steps.base import Step
from tokenport.corpus.steps.registry import STEP_KINDS, register_step
from tokenport.errors import ConfigError, InputDataError
from tokenport.indexed import IndexedDataset
from tokenport.samples.sft import SFTDataset
from tokenport.tokenizers import load_tokenizer

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
RECORDS = [
    {
        "messages": [
            {"role": "system", "content": "You answer questions about Python."},
            {"role": "user", "content": "What does len do?"},
            {"role": "assistant", "content": "Return the number of items.", "reasoning_content": "len is builtin"},
            {"role": "user", "content": "Look up os.sep."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {"q": "os.sep"}}}],
            },
            {"role": "tool", "content": "'/'", "tool_call_id": "1"},
            {"role": "assistant", "content": "It is '/' on POSIX."},
        ],
        "tools": TOOLS,
    },
    {"conversations": [{"from": "human", "value": "Hi, Grüße!"}, {"from": "gpt", "value": "Hello 👋"}]},
    {"prompt": "Name a sorting function.", "completion": "sorted"},
    {"instruction": "Reverse the word.", "input": "abc", "output": "cba"},
    {"system": "Be terse.", "conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
    {"instruction": "Say hello.", "output": "hello", "history": [["Hi", "Hey"]]},
]


def write_jsonl(path: pathlib.Path, records: list) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


def stores(output: str) -> list[IndexedDataset]:
    manifest = json.loads(pathlib.Path(output, "tokenport.json").read_text())
    return [IndexedDataset(os.path.join(output, part["name"])) for part in manifest["parts"]]


def tokens_and_masks(output: str) -> list[tuple[list[int], list[int]]]:
    rows = []
    for ds in stores(output):
        assert ds.masks is not None
        for i in range(len(ds)):
            rows.append((ds[i].tolist(), ds.masks[i].tolist()))
    return rows


def store_bytes(output: str) -> dict[str, bytes]:
    return {
        name: pathlib.Path(output, name).read_bytes()
        for name in sorted(os.listdir(output))
        if name.endswith((".bin", ".idx"))
    }


def run(tmp_path: pathlib.Path, inputs: list[str], name: str = "out", **options) -> tuple[str, object]:
    options = {"workers": 1, **options}
    result = prepare(PrepareConfig(inputs=inputs, output=str(tmp_path / name), format="chat", **options))
    return str(tmp_path / name), result


def test_four_shapes_give_encode_chat_ids_and_masks_with_any_worker_count(tmp_path):
    inputs = [write_jsonl(tmp_path / "a.jsonl", RECORDS), write_jsonl(tmp_path / "b.jsonl", RECORDS[::-1])]
    one, result = run(tmp_path, inputs, "one", unit_bytes=400)
    two, _ = run(tmp_path, inputs, "two", unit_bytes=400, workers=2)
    assert result.documents == 2 * len(RECORDS) and result.units > 2
    assert store_bytes(one) == store_bytes(two)
    assert {name for name in store_bytes(one)} >= {"part-00000.mask.bin", "part-00000.mask.idx"}
    tokenizer, template = load_tokenizer("byte"), ChatTemplate.chatml()
    expected = []
    for record in RECORDS + RECORDS[::-1]:
        messages, start = to_conversation(record)
        ids, mask = encode_chat(tokenizer, template, messages, tools=record.get("tools"), completion_start=start)
        expected.append((ids.tolist(), mask.tolist()))
    assert tokens_and_masks(one) == expected
    chat = {
        "format": "detected",
        "template": template.fingerprint,
        "policy": "assistant",
        "reasoning": "train",
        "completion_only_loss": True,
    }
    assert all(ds.manifest.chat == chat for ds in stores(one))
    manifest = json.loads(pathlib.Path(one, "tokenport.json").read_text())
    assert manifest["chat"] == {**chat, "template_origin": "built-in chatml"}


def test_policy_reasoning_and_named_format_reach_the_masks(tmp_path):
    inputs = [write_jsonl(tmp_path / "a.jsonl", RECORDS[:1])]
    out, _ = run(tmp_path, inputs, chat_policy="last_assistant", reasoning="mask", chat_format="messages")
    tokenizer, template = load_tokenizer("byte"), ChatTemplate.chatml()
    ids, mask = encode_chat(
        tokenizer, template, to_messages(RECORDS[0]), policy="last_assistant", reasoning="mask", tools=TOOLS
    )
    assert tokens_and_masks(out) == [(ids.tolist(), mask.tolist())]
    assert stores(out)[0].manifest.chat["format"] == "messages"
    with pytest.raises(InputDataError, match=r"a\.jsonl:1: .*format=|a\.jsonl:1"):
        run(tmp_path, inputs, "sharegpt", chat_format="sharegpt")


PROMPT_COMPLETION = [
    {
        "prompt": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "and 3+3?"},
        ],
        "completion": [{"role": "assistant", "content": "6"}],
    },
    {"prompt": "Name a sorting function.", "completion": "sorted"},
]


def test_prompt_completion_records_train_only_the_completion_unless_asked(tmp_path):
    """TRL trains a prompt-completion record's completion only: the prompt's assistant turn ("4") carries no
    loss, the completion and its end of turn do; completion_only_loss=False is the flattened conversation
    masked by the policy (every assistant turn), another output."""
    path = write_jsonl(tmp_path / "pc.jsonl", PROMPT_COMPLETION)
    out, _ = run(tmp_path, [path])
    tokenizer, template = load_tokenizer("byte"), ChatTemplate.chatml()
    rows = tokens_and_masks(out)
    for record, (ids, mask) in zip(PROMPT_COMPLETION, rows):
        messages = to_messages(record)
        prompt, _ = template.render(messages[:-1], add_generation_prompt=True)
        assert mask == [0] * len(tokenizer.encode(prompt)) + [1] * (len(ids) - len(tokenizer.encode(prompt)))
        assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == messages[-1]["content"] + "<|im_end|>\n"
    with pytest.raises(ConfigError, match="other settings"):
        run(tmp_path, [path], completion_only_loss=False)
    flat, _ = run(tmp_path, [path], "flat", completion_only_loss=False)
    for record, (ids, mask) in zip(PROMPT_COMPLETION, tokens_and_masks(flat)):
        expected_ids, expected_mask = encode_chat(tokenizer, template, to_messages(record))
        assert (ids, mask) == (expected_ids.tolist(), expected_mask.tolist())
    first_ids, first_mask = tokens_and_masks(flat)[0]
    assert "4" in tokenizer.decode([t for t, m in zip(first_ids, first_mask) if m])  # the old, flattened masks
    assert stores(flat)[0].manifest.chat["completion_only_loss"] is False


def test_completion_only_loss_needs_format_chat_and_a_bool(tmp_path):
    with pytest.raises(ConfigError, match=r"completion_only_loss=False \(--no-completion-only-loss\).*--format chat"):
        PrepareConfig(inputs=["x.jsonl"], output=str(tmp_path / "o"), completion_only_loss=False)
    with pytest.raises(ConfigError, match=r"completion_only_loss='no'.*True or False"):
        PrepareConfig(inputs=["x.jsonl"], output=str(tmp_path / "o"), format="chat", completion_only_loss="no")


def test_sft_dataset_reads_the_output_and_inspect_shows_mask_coverage(tmp_path):
    out, _ = run(tmp_path, [write_jsonl(tmp_path / "a.jsonl", RECORDS)])
    ds = stores(out)[0]
    dataset = SFTDataset(ds, 1024)  # every conversation fits: no loss is cut
    sample = dataset[0]
    assert sample["loss_mask"].sum() > 0 and len(sample["tokens"]) == 1024
    trained = sum(int(ds.masks[i].sum()) for i in range(len(ds)))
    assert trained == sum(int(dataset[i]["loss_mask"].sum()) for i in range(len(dataset)))
    shown = subprocess.run(
        [sys.executable, "-m", "tokenport", "inspect", os.path.join(out, "part-00000")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout
    coverage = trained / ds.num_tokens
    assert f"masks      {coverage:.1%} of tokens trained" in shown and "policy assistant" in shown


BAD = [
    RECORDS[2],
    {"messages": [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}]},
    {"conversations": [{"from": "human", "value": "only a question"}]},
    {"prompt": 3, "completion": "x"},
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": "lookup"},
    RECORDS[3],
]


def test_malformed_conversations_are_refused_with_file_and_line_or_skipped_and_counted(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", BAD)
    with pytest.raises(InputDataError, match=r"bad\.jsonl:2: messages\[0\]\.role: 'bot'.*--on-error skip"):
        run(tmp_path, [path])
    assert not (tmp_path / "out" / "tokenport.json").exists()
    out, result = run(tmp_path, [path], "skipped", on_error="skip")
    assert result.documents == 2 and result.skipped == {"bad_conversation": 4}
    assert [ids for ids, _ in tokens_and_masks(out)] == [
        encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), to_messages(r))[0].tolist() for r in BAD[::5]
    ]


class Banned(Step):
    """Drops texts holding a word, upper-cases the rest (a filter and a scrubber at once)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def reject(self, text: str) -> str | None:
        return "banned" if self.word in text else None

    def transform(self, text: str) -> str:
        if text != text.upper():
            self.replaced["upper"] += 1
        return text.upper()


@pytest.fixture
def banned():
    register_step("banned", Banned)
    yield
    del STEP_KINDS["banned"]


def test_a_step_rejecting_one_message_drops_the_conversation_and_scrubbers_rewrite_messages(tmp_path, banned):
    records = [RECORDS[1], {"prompt": "spam please", "completion": "no"}, RECORDS[3]]
    path = write_jsonl(tmp_path / "a.jsonl", records)
    out, result = run(tmp_path, [path], steps=[{"step": "banned", "word": "spam"}], keep_rejected=True)
    counts = result.steps["0:banned"]
    assert counts["documents_in"] == 3 and counts["documents_out"] == 2 and counts["removed:banned"] == 1
    upper = [{**m, "content": m["content"].upper()} for m in to_messages(RECORDS[1])]
    ids, mask = encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), upper)
    assert tokens_and_masks(out)[0] == (ids.tolist(), mask.tolist())
    rejected = pathlib.Path(out, "rejected").glob("*.jsonl")
    assert ["spam please" in line for file in rejected for line in file.read_text().splitlines()] == [True]


def test_exact_dedup_drops_repeated_conversations_across_files(tmp_path):
    inputs = [
        write_jsonl(tmp_path / "a.jsonl", [RECORDS[1], RECORDS[2], RECORDS[1]]),
        write_jsonl(tmp_path / "b.jsonl", [RECORDS[2], RECORDS[3]]),
    ]
    out, result = run(tmp_path, inputs, steps=[{"step": "exact_dedup"}], workers=2, unit_bytes=100)
    assert result.documents == 3 and result.steps["0:exact_dedup"]["removed:duplicate"] == 2
    expected = [encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), to_messages(r))[0] for r in RECORDS[1:4]]
    assert [ids for ids, _ in tokens_and_masks(out)] == [e.tolist() for e in expected]


def test_another_template_or_policy_is_another_output(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", RECORDS[1:3])
    run(tmp_path, [path])
    with pytest.raises(ConfigError):
        run(tmp_path, [path], chat_policy="all")
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    out, _ = run(tmp_path, [path], "other", chat_template=str(template))
    assert stores(out)[0].manifest.chat["template"] == ChatTemplate.from_file(str(template)).fingerprint


def test_chat_settings_need_format_chat_and_text_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"chat_policy='all' \(--chat-policy\).*--format chat"):
        PrepareConfig(inputs=["x.jsonl"], output=str(tmp_path / "o"), chat_policy="all")
    with pytest.raises(ConfigError, match="chat_format='openai'"):
        PrepareConfig(inputs=["x.jsonl"], output=str(tmp_path / "o"), format="chat", chat_format="openai")
    text = tmp_path / "notes.txt"
    text.write_text("just text")
    with pytest.raises(ConfigError, match=r"notes\.txt is read as a text file"):
        run(tmp_path, [str(text)])
    assert not (tmp_path / "out").exists()


def test_cli_prepare_format_chat(tmp_path, capsys):
    from tokenport.cli import main

    path = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    out = str(tmp_path / "out")
    argv = ["prepare", path, "-o", out, "--format", "chat", "--chat-policy", "last_assistant", "--workers", "1", "-q"]
    assert main([*argv, "--reasoning", "mask", "--chat-format", "messages", "--on-error", "skip"]) == 0
    assert stores(out)[0].manifest.chat["policy"] == "last_assistant"
    assert json.loads(pathlib.Path(out, "tokenport.json").read_text())["skipped"] == {"bad_conversation": 5}
    assert main(["prepare", path, "-o", str(tmp_path / "x"), "--chat-policy", "all", "-q"]) != 0
    assert "--chat-policy" in capsys.readouterr().err
    assert main(["prepare", path, "-o", str(tmp_path / "x"), "--format", "chat", "--text-key", "body", "-q"]) != 0
    assert "--text-key applies to text documents" in capsys.readouterr().err
    pc = write_jsonl(tmp_path / "pc.jsonl", PROMPT_COMPLETION)
    flat = str(tmp_path / "flat")
    assert (
        main(["prepare", pc, "-o", flat, "--format", "chat", "--no-completion-only-loss", "-q", "--workers", "1"]) == 0
    )
    assert stores(flat)[0].manifest.chat["completion_only_loss"] is False


def test_parquet_conversations(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [RECORDS[4], RECORDS[1]]  # from_pylist takes its columns from the first row
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    out, result = run(tmp_path, [str(tmp_path / "c.parquet")])
    tokenizer, template = load_tokenizer("byte"), ChatTemplate.chatml()
    assert [ids for ids, _ in tokens_and_masks(out)] == [
        encode_chat(tokenizer, template, to_messages(r))[0].tolist() for r in rows
    ]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([RECORDS[1], {"conversations": [{"from": "robot", "value": "x"}]}]), bad)
    with pytest.raises(InputDataError, match=r"bad\.parquet:1: conversations\[0\]\.from: 'robot'"):
        run(tmp_path, [str(bad)], "bad")


CHILD = "\n".join(
    [
        "import json, sys",
        "from tokenport.corpus import PrepareConfig, prepare",
        "prepare(PrepareConfig(**json.loads(sys.argv[1])))",
    ]
)


def test_a_run_killed_midway_resumes_to_the_same_stores(tmp_path):
    inputs = [write_jsonl(tmp_path / "a.jsonl", RECORDS), write_jsonl(tmp_path / "b.jsonl", RECORDS[1:])]
    config = {"inputs": inputs, "workers": 1, "unit_bytes": 300, "format": "chat", "steps": [{"step": "exact_dedup"}]}
    reference = prepare(PrepareConfig(output=str(tmp_path / "reference"), **config)).output
    out = str(tmp_path / "out")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), KILL_AT: "8"}
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps({**config, "output": out})], env=env)
    assert child.returncode == 137 and os.path.isdir(os.path.join(out, ".work"))
    prepare(PrepareConfig(output=out, **config))
    assert store_bytes(out) == store_bytes(reference)


def test_an_hf_tokenizer_directory_brings_its_own_template(tmp_path):
    import tokenizers as hf

    from tests._support.bpe import train_byte_level_bpe

    texts = [json.dumps(r, ensure_ascii=False) for r in RECORDS] * 20
    path = train_byte_level_bpe(texts, 400, str(tmp_path / "tokenizer.json"))
    raw = hf.Tokenizer.from_file(path)
    raw.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    raw.save(path)
    marked = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    marked += "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    marked += "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
    (tmp_path / "chat_template.jinja").write_text(marked)
    out, _ = run(tmp_path, [write_jsonl(tmp_path / "a.jsonl", RECORDS[1:4])], tokenizer="hf:" + path)
    tokenizer, template = load_tokenizer("hf:" + path), ChatTemplate.from_tokenizer_dir(str(tmp_path))
    conversations = [to_conversation(r) for r in RECORDS[1:4]]  # RECORDS[2] is a prompt-completion pair
    expected = [encode_chat(tokenizer, template, m, completion_start=start) for m, start in conversations]
    assert tokens_and_masks(out) == [(ids.tolist(), mask.tolist()) for ids, mask in expected]
    assert stores(out)[0].manifest.chat["template"] == template.fingerprint


def test_the_ray_executor_writes_the_same_chat_stores(tmp_path, ray_session):
    inputs = [write_jsonl(tmp_path / "a.jsonl", RECORDS)]
    local, _ = run(tmp_path, inputs, "local", unit_bytes=400)
    ray, _ = run(tmp_path, inputs, "ray", unit_bytes=400, executor="ray")
    assert store_bytes(local) == store_bytes(ray)


@pytest.mark.parametrize("batch_size", [1, 256])
def test_a_conversation_the_tokenizer_cannot_encode_is_refused_or_skipped_by_name(tmp_path, batch_size):
    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    bad = {"messages": [{"role": "user", "content": "x\ud800"}, {"role": "assistant", "content": "b"}]}
    path = tmp_path / "surrogate.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")  # "\ud800" escaped
    with pytest.raises(InputDataError, match=r"surrogate\.jsonl:2: the tokenizer failed on this conversation"):
        run(tmp_path, [str(path)], batch_size=batch_size)
    assert not (tmp_path / "out" / "tokenport.json").exists()
    out, result = run(tmp_path, [str(path)], "skipped", on_error="skip", batch_size=batch_size)
    assert result.documents == 1 and result.skipped == {"encode_failed": 1}
    ids, mask = encode_chat(load_tokenizer("byte"), ChatTemplate.chatml(), to_messages(good))
    assert tokens_and_masks(out) == [(ids.tolist(), mask.tolist())]

"""A tokenizer folder saved by transformers, and a model name (gpt2): read as transformers reads them,
found in the local HF cache, or refused saying how to get one. Nothing downloads."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import tokenizers as hf
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from tests._support.bpe import train_byte_level_bpe
from tokenport.chat import ChatTemplate, load_chat_template
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import TokenizerError
from tokenport.indexed import IndexedDataset
from tokenport.tokenizers import load_tokenizer, tokenizer_from_identity

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)
TEXTS = ["def add(a, b):\n    return a + b\n", "Grüße, world 👋", "  spaces\tand\ttabs  ", "end<|im_end|>next"]
CHATS = [
    [{"role": "user", "content": "What does len do?"}, {"role": "assistant", "content": "Counts items."}],
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "6"},
    ],
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> pathlib.Path:
    """A folder written by transformers' save_pretrained: a byte-level BPE trained here, its EOS <|im_end|>
    (not one of tokenport's EOD candidates' first pick) and a chat template."""
    base = tmp_path_factory.mktemp("tok")
    texts = TEXTS * 20 + [json.dumps(c) for c in CHATS] * 20
    path = train_byte_level_bpe(texts, 400, str(base / "raw.json"))
    raw = hf.Tokenizer.from_file(path)
    raw.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    peer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    peer.chat_template = TEMPLATE
    folder = base / "mytok"
    peer.save_pretrained(folder)
    return folder


def test_a_saved_folder_gives_transformers_ids_and_eos(saved):
    peer = AutoTokenizer.from_pretrained(saved)
    for spec in (str(saved), f"hf:{saved}", f"gigatoken:{saved}"):
        tok = load_tokenizer(spec)
        assert tok.eod_id == peer.eos_token_id == peer.convert_tokens_to_ids("<|im_end|>"), spec
        for text in TEXTS:
            assert tok.encode(text).tolist() == peer(text, add_special_tokens=False)["input_ids"], spec
    assert load_tokenizer(f"{saved}/tokenizer.json").eod_id == peer.convert_tokens_to_ids("<|endoftext|>")


def test_a_folder_and_its_tokenizer_json_are_the_same_tokenizer(saved):
    folder = load_tokenizer(str(saved)).identity()
    file = load_tokenizer(f"hf:{saved}/tokenizer.json#eod=<|im_end|>").identity()
    keys = ("kind", "fingerprint", "vocab_size", "eod_id")
    assert {k: folder[k] for k in keys} == {k: file[k] for k in keys}
    assert folder["spec"] == f"hf:{saved}/tokenizer.json#eod=<|im_end|>"  # reloads to the same EOD anywhere
    assert tokenizer_from_identity(folder) is not None


def test_prepare_format_chat_with_a_folder_renders_its_template_as_transformers(saved, tmp_path):
    peer = AutoTokenizer.from_pretrained(saved)
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in CHATS))
    out = tmp_path / "out"
    prepare(PrepareConfig([str(data)], str(out), tokenizer=str(saved), format="chat", workers=1))
    rows = []
    with IndexedDataset(str(out / "part-00000")) as store:
        assert store.masks is not None
        rows = [(store[i].tolist(), store.masks[i].tolist()) for i in range(len(store))]
    for messages, (ids, mask) in zip(CHATS, rows, strict=True):
        want = peer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert ids == want["input_ids"] and mask == want["assistant_masks"]


def test_a_processor_chat_template_json_is_read_last(saved, tmp_path):
    folder = tmp_path / "legacy"
    shutil.copytree(saved, folder)
    (folder / "chat_template.jinja").unlink()
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    assert ChatTemplate.from_tokenizer_dir(str(folder)).source == "{{ messages[0]['content'] }}"
    assert load_chat_template(None, load_tokenizer(str(folder))).source == "{{ messages[0]['content'] }}"


def lay_out_cache(cache: pathlib.Path, name: str, saved: pathlib.Path) -> pathlib.Path:
    """A hub cache entry as huggingface_hub lays it out: refs/main names the snapshot, an older one beside it."""
    model = cache / ("models--" + name.replace("/", "--"))
    (model / "refs").mkdir(parents=True)
    (model / "refs" / "main").write_text("c0ffee")
    old = model / "snapshots" / "0ld"
    old.mkdir(parents=True)
    (old / "tokenizer.json").write_text(json.dumps({"not": "this one"}))
    snapshot = model / "snapshots" / "c0ffee"
    shutil.copytree(saved, snapshot)
    os.utime(old)  # newer than the snapshot refs/main names: refs/main still wins
    return snapshot


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_a_model_name_is_found_in_the_hf_cache(saved, tmp_path, monkeypatch, variable):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv(variable, str(tmp_path / "hf"))
    cache = tmp_path / "hf" if variable == "HF_HUB_CACHE" else tmp_path / "hf" / "hub"
    snapshot = lay_out_cache(cache, "org/tiny-model", saved)
    monkeypatch.chdir(tmp_path)
    tok = load_tokenizer("org/tiny-model")
    assert tok.path == str(snapshot / "tokenizer.json") and tok.name == "org/tiny-model"
    assert tok.identity()["fingerprint"] == load_tokenizer(str(saved)).identity()["fingerprint"]
    assert load_tokenizer("hf:org/tiny-model").path == tok.path


def test_a_model_name_not_here_says_how_to_save_it_to_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    for spec in ("gpt2", "Qwen/Qwen2.5-0.5B", "hf:gpt2"):
        name = spec.removeprefix("hf:")
        with pytest.raises(TokenizerError) as refused:
            load_tokenizer(spec)
        message = str(refused.value)
        assert "tokenport downloads nothing" in message and str(tmp_path / "empty") in message
        short = name.rsplit("/", 1)[-1]
        assert f"AutoTokenizer.from_pretrained('{name}').save_pretrained('tok/{short}')" in message
        assert f"--tokenizer tok/{short} (or --tokenizer hf:tok/{short}/tokenizer.json)" in message


def test_a_local_folder_of_that_name_wins(saved, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(saved, tmp_path / "gpt2")
    assert load_tokenizer("gpt2").path == str(tmp_path / "gpt2" / "tokenizer.json")


def test_a_folder_with_a_broken_config_is_named(saved, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(saved, folder)
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"broken/tokenizer_config.json"):
        load_tokenizer(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|nope|>"}))
    with pytest.raises(TokenizerError, match=r"no token '<\|nope\|>'"):
        load_tokenizer(str(folder))


def test_every_mutation_of_tokenizer_config_is_refused_by_name_or_reads_as_valid(saved, tmp_path):
    from tests._support.mutate import mutations
    from tokenport.errors import TokenportError

    folder = tmp_path / "mutated"
    shutil.copytree(saved, folder)
    config = folder / "tokenizer_config.json"
    original = config.read_text()
    fingerprint = load_tokenizer(str(saved)).identity()["fingerprint"]
    fallback = load_tokenizer(f"{saved}/tokenizer.json").eod_id  # the first EOD candidate: no eos_token set
    refused = 0
    for label, data in mutations(original):
        config.write_bytes(data)
        try:
            tok = load_tokenizer(str(folder))
            template = load_chat_template(None, tok)
        except TokenportError as error:
            assert "tokenizer_config.json" in str(error) or "chat template" in str(error), (label, error)
            refused += 1
            continue
        named = json.loads(data).get("eos_token")  # it loaded: the config is a JSON object
        named = named.get("content") if isinstance(named, dict) else named
        want = fallback if named is None else load_tokenizer(f"{saved}/tokenizer.json#eod={named}").eod_id
        assert tok.identity()["fingerprint"] == fingerprint and tok.eod_id_or_none == want, label
        assert isinstance(template, ChatTemplate), label
    assert refused > 10

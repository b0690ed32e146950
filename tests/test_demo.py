"""`tokenport demo`, the main job, runs end to end on a slice of the stdlib corpus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tokenport.cli import main
from tokenport.demo.run import render_loss_mask


def test_demo_runs_every_stage(tmp_path, capsys):
    assert main(["demo", "--workdir", str(tmp_path), "--limit", "40", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    stages = (
        "1. corpus",
        "2. prepare",
        "3. verify",
        "4. inspect",
        "5. merge and read",
        "6. samples",
        "7. blend",
        "8. sampling",
        "9. dock",
        "10. clean",
        "11. train",
        "12. sft",
        "13. mix",
        "14. grpo",
    )
    for stage in stages:
        assert stage in out
    assert "checksums verified" in out
    assert "(equal to the parts' sum)" in out
    assert "reopened from the cache" in out and "samples/s" in out
    assert "packed:" in out and "the global stream continues with" in out
    assert "largest prefix deviation" in out and "train/valid/test: 20,000 / 200 / 20 samples" in out
    assert "rows served per stage: rollout 128, reward 128, advantage 128, train 128" in out
    assert "all consumed by train: True" in out
    assert "4:minhash_dedup" in out and "rejected documents kept for audit" in out
    assert "(falls)" in out and "all 24 losses, sample ids and token digests bitwise equal" in out
    assert "after 16,000 training samples" in out and " epochs" in out.split("after 16,000 training samples")[1]
    # stage 6's dataset; then one entry per weighted blend, holding its stores' indices too: stage 7's
    # blend of 2 stores per split (3) and stage 11's blend of 2 stores (1); then stage 13's 3 stores, which
    # an adaptive blend reads one by one (one part each at this limit)
    assert len(list((tmp_path / "stores" / "index-cache").glob("*/description.json"))) == 1 + 3 + 1 + 3
    check_sft_stage(tmp_path, out.split("== 12. sft")[1].split("== 13. mix")[0])
    check_mix_stage(tmp_path, out.split("== 13. mix")[1].split("== 14. grpo")[0])
    grpo = out.split("== 14. grpo")[1]
    assert grpo.count("(rises)") == 2 and "policy versions 0, 1, 2, 3" in grpo and "policy versions 0, 0, 1, 2" in grpo
    merged = tp.IndexedDataset(tmp_path / "stores" / "all")
    code = tp.IndexedDataset(tmp_path / "stores" / "code" / "part-00000")
    assert tp.load_tokenizer("byte").decode(code[0].tolist()) in open(sorted_first_source(), encoding="utf-8").read()
    assert len(merged) > 40


def test_demo_training_stage_without_torch_says_it_was_skipped(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None  # as if torch were not installed\n"
        "from tokenport.demo.run import _train\n"
        f"_train('unused', {str(tmp_path)!r}, print)"
    )
    src = str(Path(tp.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert "11. train" in lines[0] and len(lines) == 2
    assert lines[1].startswith("skipped: torch is not installed") and "torch==2.13.0" in lines[1]


def check_mix_stage(workdir, out: str) -> None:
    """Stage 13: the weights moved, the realized shares stay within the blend's bound of the target, and the
    traced samples' documents hold the text the report shows."""
    from tokenport.demo.run import MIX_STEPS

    updates = int(re.search(r"(\d+) weight updates", out).group(1))
    assert 0 < updates < MIX_STEPS
    shares = re.findall(r"(code|docstrings|documentation) ([01]\.\d{3})/([01]\.\d{3})", out)
    assert [name for name, _, _ in shares] == ["code", "docstrings", "documentation"]
    for _, target, realized in shares:  # at most (n - 1)(1 - 1/n) = 4/3 samples apart, printed to 3 digits
        assert abs(float(target) - float(realized)) * MIX_STEPS * 8 <= 4 / 3 + MIX_STEPS * 8 * 0.001
    assert len({target for _, target, _ in shares}) > 1  # the controller moved the mixture off equal shares
    traced = re.findall(r"sample (\d+) <- (\w+): (\S+) doc (\d+) \[(\d+), (\d+)\)", out)
    assert len(traced) == 3
    byte = tp.load_tokenizer("byte")
    for _, _, store, document, start, end in traced:
        text = byte.decode(tp.IndexedDataset(workdir / store).get(int(document), int(start), int(end) - int(start)))
        assert " ".join(text.split())[:40] in out
    assert (workdir / "corpus" / "documentation.jsonl").exists()


def check_sft_stage(workdir, out: str) -> None:
    """Stage 12's report agrees with the files it wrote: conversations, coverage, the mask, the loss."""
    records = [json.loads(line) for line in open(workdir / "corpus" / "conversations.jsonl", encoding="utf-8")]
    assert f"{len(records):,} conversations (messages, ShareGPT and prompt-completion" in out
    assert {next(iter(r)) for r in records} == {"messages", "conversations", "prompt"}
    assert any(m["role"] == "system" for r in records if "messages" in r for m in r["messages"])
    assert any(len(r["conversations"]) == 4 for r in records if "conversations" in r)  # a signature follow-up
    store = tp.IndexedDataset(workdir / "stores" / "chat" / "part-00000")
    masks = np.concatenate([store.masks[i] for i in range(len(store))])
    assert len(store) == len(records) and store.num_tokens == len(masks)
    assert f"{len(records):,} conversations, {store.num_tokens:,} tokens, {masks.mean():.1%} of tokens trained" in out
    assert "packed best-fit into" in out and "position_ids restarting at each" in out
    # the first follow-up conversation (abc.update_abstractmethods): questions untrained, answers bracketed
    assert "  | What is its signature?<|im_end|>\n" in out
    assert "  | [`update_abstractmethods(cls)`<|im_end|>]\n" in out
    assert "  | <|im_start|>assistant\n" in out
    losses = re.search(r"loss on assistant tokens ([0-9.]+) -> ([0-9.]+) \(falls\)", out)
    assert losses and float(losses[2]) < float(losses[1])


def test_render_loss_mask_marks_targets_one_position_after_their_mask():
    tokens = np.array(list(b"ab\ncd"), dtype=np.int64)
    assert render_loss_mask(tokens, np.array([1, 0, 0, 1, 1])) == ["a[b]", "c[d]"]
    assert render_loss_mask(tokens, np.array([0, 0, 0, 0, 1])) == ["ab", "cd"]  # the last mask has no target
    assert render_loss_mask(tokens, np.array([0, 1, 1, 1, 0])) == ["ab[", "cd]"]


def test_demo_sft_stage_without_torch_skips_only_the_training(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None  # as if torch were not installed\n"
        "from tokenport.demo.run import _sft\n"
        f"_sft({str(tmp_path)!r}, 40, print)"
    )
    src = str(Path(tp.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert "12. sft" in lines[0] and "of tokens trained" in done.stdout and "  | [" in done.stdout
    assert lines[-1].startswith("skipped training: torch is not installed") and "torch==2.13.0" in lines[-1]


def test_fit_refuses_a_config_of_another_seq_length(tmp_path):
    from tokenport.demo.corpus import build_sft_conversations
    from tokenport.demo.train import TrainConfig, fit

    path = str(tmp_path / "conversations.jsonl")
    build_sft_conversations(path, limit=40, max_conversations=8)
    result = tp.prepare(tp.PrepareConfig(inputs=(path,), output=str(tmp_path / "chat"), format="chat", workers=1))
    dataset = tp.SFTDataset(tp.IndexedDataset(result.parts[0]), 256)
    with pytest.raises(tp.ConfigError, match="seq_length=64: the dataset's samples hold 256 tokens"):
        fit(dataset, TrainConfig(seq_length=64))


def sorted_first_source() -> str:
    from tokenport.demo.corpus import stdlib_sources

    return stdlib_sources(limit=1)[0]

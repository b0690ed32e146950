"""`tokenport demo`, the main job, runs end to end on a slice of the stdlib corpus."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tokenport.cli import main
from tokenport.corpus import why
from tokenport.demo.run import render_loss_mask


class StampedLines(io.TextIOBase):
    """A stdout that keeps each printed line with the time it was completed."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        *done, self._partial = (self._partial + text).split("\n")
        self.lines.extend((time.monotonic(), line) for line in done)
        return len(text)


@dataclass(frozen=True)
class DemoRun:
    """One `tokenport demo --limit 40` run from `cwd`, its workdir, and its lines with their times."""

    cwd: Path
    workdir: Path
    lines: list[tuple[float, str]]

    @property
    def out(self) -> str:
        return "".join(line + "\n" for _, line in self.lines)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> DemoRun:
    """The demo as a user runs it (the CLI, a relative --workdir), its heartbeat at 0 s: every training
    step reports, and a progress line comes whenever nothing else was printed for a moment."""
    cwd = tmp_path_factory.mktemp("demo-cwd")
    stdout = StampedLines()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout):
        patch.chdir(cwd)
        patch.setattr("tokenport.demo.progress.HEARTBEAT_SECONDS", 0.0)
        assert main(["demo", "--workdir", "tokenport-demo", "--limit", "40", "--workers", "2"]) == 0
    return DemoRun(cwd, cwd / "tokenport-demo", stdout.lines)


def test_demo_runs_every_stage(demo_run):
    tmp_path, out = demo_run.workdir, demo_run.out
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
        "15. account",
    )
    for stage in stages:
        assert stage in out
    assert "checksums verified" in out
    assert "(equal to the parts' sum)" in out
    assert "reopened from the cache" in out and "samples/s" in out
    assert "packed:" in out and "the global stream continues with" in out
    assert "resumed on 3 ranks at global batch 6" in out and "uninterrupted global order: the same" in out
    assert "largest prefix deviation" in out and "train/valid/test: 20,000 / 200 / 20 samples" in out
    assert "rows served per stage: rollout 128, reward 128, advantage 128, train 128" in out
    assert "all consumed by train: True" in out
    assert "4:minhash_dedup" in out and "rejected documents kept for audit" in out
    assert "(falls)" in out and "all 24 losses, sample ids and token digests bitwise equal" in out
    assert "after 16,000 training samples" in out and " epochs" in out.split("after 16,000 training samples")[1]
    # stage 6's dataset; then one entry per weighted blend, holding its stores' indices too: stage 7's
    # blend of 2 stores per split (3) and stage 11's blend of 2 stores (1); then stage 13's 3 stores, which
    # an adaptive blend reads one by one (one part each at this limit); then stage 15's takedown, whose
    # occurrence lookups of stage 11's blend and of its prose child are entries of their own
    assert len(list((tmp_path / "stores" / "index-cache").glob("*/description.json"))) == 1 + 3 + 1 + 3 + 2
    check_sft_stage(tmp_path, out.split("== 12. sft")[1].split("== 13. mix")[0])
    check_mix_stage(tmp_path, out.split("== 13. mix")[1].split("== 14. grpo")[0])
    grpo = out.split("== 14. grpo")[1].split("== 15. account")[0]
    assert grpo.count("(rises)") == 2 and "policy versions 0, 1, 2, 3" in grpo and "policy versions 0, 0, 1, 2" in grpo
    merged = tp.IndexedDataset(tmp_path / "stores" / "all")
    code = tp.IndexedDataset(tmp_path / "stores" / "code" / "part-00000")
    assert tp.load_tokenizer("byte").decode(code[0].tolist()) in open(sorted_first_source(), encoding="utf-8").read()
    assert len(merged) > 40


def stage(out: str, number: int) -> str:
    """The lines stage `number` printed (up to the next stage, or the end)."""
    rest = out.split(f"== {number}. ")[1]
    return rest.split(f"== {number + 1}. ")[0] if number < 15 else rest.split("demo finished")[0]


def test_demo_takes_a_docstring_down(demo_run):
    """Stage 15: the docstring's places, its takedown and resume, and the token-by-token comparison,
    checked against the run's own files."""
    out = stage(demo_run.out, 15)
    found = re.search(r"--store (\S+) --document (\d+) --up-to-step 23: (\d+) place\(s\)", out)
    assert found, out
    store, document, count = found[1], int(found[2]), int(found[3])
    named = re.search(r"the docstring of ([\w.]+) \(", out)
    assert named, out
    story = why(str(demo_run.workdir / "stores" / "prose"), identifier=named[1]).documents
    assert any(s.get("document") == document and s["part"] in store for s in story), story
    train = demo_run.workdir / "train"
    places = tp.occurrences(
        train / "straight" / "step-000024.pt", store=str(demo_run.workdir / store), document=document, up_to_step=23
    ).places
    assert len(places) == count >= 1 and any(p.step >= 12 for p in places)
    resumed = tp.occurrences(
        train / "takedown" / "step-000024.pt", store=str(demo_run.workdir / store), document=document, up_to_step=23
    ).places
    assert [p.trained for p in resumed] == [p.step < 12 for p in places]
    assert re.search(r"position by position: [1-9]\d* of [\d,]+ differ, 0 outside", out), out
    assert re.search(r"; all its [1-9]\d* tokens are padding with no loss", out), out
    assert "sample ids of every step equal: nothing was reshuffled" in out
    assert f": {sum(p.step < 12 for p in places)} of {count} place(s) trained" in out
    assert ": consistent (the takedown run" in out


def test_demo_training_stages_report_every_step(demo_run):
    """With the heartbeat at 0 s every unit reports: each training run's steps, in order, on the echo."""
    out = demo_run.out
    runs = {
        (11, "straight run"): range(1, 25),
        (11, "first half"): range(1, 13),
        (11, "resumed from step 12"): range(13, 25),
        (12, "training"): range(1, 21),
        (13, "training"): range(1, 41),
    }
    for (number, what), steps in runs.items():
        total = steps[-1]
        reported = re.findall(
            rf"^  \.\.\. {number}\. \w+: {what}, step (\d+)/{total}, \d+ s$", stage(out, number), re.M
        )
        assert list(dict.fromkeys(map(int, reported))) == list(steps), (number, what)


def test_demo_heartbeat_names_the_stage_and_stops_with_the_demo(demo_run):
    """Progress lines name the stage they are in and what runs; none comes after the demo's last line."""
    lines = [line for _, line in demo_run.lines]
    beats = [line for line in lines if line.startswith("  ... ")]
    assert beats and all(re.fullmatch(r"  \.\.\. \d+\. [\w ]+: .*\d+ s", line) for line in beats)
    for number in range(1, 16):
        for line in stage(demo_run.out, number).splitlines():
            assert not line.startswith("  ... ") or line.startswith(f"  ... {number}. "), (number, line)
    assert "reading the standard library's sources and docstrings" in stage(demo_run.out, 1)
    assert lines[-1].startswith("docs: docs/getting-started.md")
    times = [stamp for stamp, _ in demo_run.lines]
    assert times == sorted(times)


def try_next(out: str) -> list[str]:
    """The commands the demo's ending suggests, as printed."""
    block = out.split("what to try next (each runs as shown, from this directory):\n")[1]
    return [line.strip() for line in block.splitlines() if line.startswith("  tokenport ")]


def test_demo_ends_with_commands_that_run_as_printed(demo_run, monkeypatch, capsys):
    """Each suggested command runs from the directory the demo ran in and exits 0; its outputs appear."""
    commands = try_next(demo_run.out)
    assert 4 <= len(commands) <= 7
    for verb in ("inspect", "report", "blend", "trace", "audit"):
        assert any(command.split()[1] == verb for command in commands), verb
    assert all("tokenport-demo/" in command for command in commands)  # paths as they read from there
    monkeypatch.chdir(demo_run.cwd)
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "tokenport" and main(argv[1:]) == 0, command
    capsys.readouterr()
    for made in ("report.html", "blend.png", "mix.png"):
        assert (demo_run.cwd / made).stat().st_size > 0
    assert "mkdocs serve" in demo_run.out.split("what to try next")[1]


def test_demo_next_commands_use_absolute_paths_outside_the_current_directory(tmp_path, monkeypatch):
    from tokenport.demo.next_steps import next_commands

    (tmp_path / "run" / "stores" / "prose").mkdir(parents=True)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert next_commands(str(tmp_path / "run")) == [f"tokenport inspect {tmp_path / 'run' / 'stores' / 'prose'}"]
    assert next_commands(str(tmp_path / "run"), cwd=str(tmp_path)) == ["tokenport inspect run/stores/prose"]
    assert next_commands(str(tmp_path / "nothing")) == []


def test_demo_training_stage_without_torch_says_it_was_skipped(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None  # as if torch were not installed\n"
        "from tokenport.demo.progress import Progress\n"
        "from tokenport.demo.run import _train\n"
        f"_train('unused', {str(tmp_path)!r}, Progress(print))"
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
        "from tokenport.demo.progress import Progress\n"
        "from tokenport.demo.run import _sft\n"
        f"_sft({str(tmp_path)!r}, 40, Progress(print))"
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


def test_launch_refuses_a_step_callback_its_rank_processes_could_not_call(tmp_path):
    from tokenport.demo.train import TrainConfig, launch

    with pytest.raises(tp.ConfigError, match="on_step with ranks=2: the ranks train in other processes"):
        launch(str(tmp_path / "blend.json"), str(tmp_path / "run"), TrainConfig(), ranks=2, on_step=print)
    assert list(tmp_path.iterdir()) == []

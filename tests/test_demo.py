"""`tokenport demo`, the main job, runs end to end on a slice of the stdlib corpus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tokenport as tp
from tokenport.cli import main


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
    # stage 6's dataset, then 2 stores x 3 splits and one blend per split, then stage 11's 2 stores and blend
    assert len(list((tmp_path / "stores" / "index-cache").glob("*/description.json"))) == 1 + 2 * 3 + 3 + 3
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


def sorted_first_source() -> str:
    from tokenport.demo.corpus import stdlib_sources

    return stdlib_sources(limit=1)[0]

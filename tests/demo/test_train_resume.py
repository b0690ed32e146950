"""Resume the tiny training run from another run's checkpoint: twice in a row it repeats the run bit for
bit; on another number of ranks the global sample stream goes on unchanged."""

from __future__ import annotations

import os

import pytest

from tests.demo.conftest import CHECKPOINT_EVERY, STEPS, resume_from, run

TrainLog = pytest.importorskip("tokenport.demo.train").TrainLog


def test_resume_on_one_rank_from_a_two_rank_checkpoint_reads_the_same_global_samples(straight, tmp_path):
    step = 2 * CHECKPOINT_EVERY
    workdir = resume_from(straight, step, tmp_path)
    done = run(workdir, "--steps", str(STEPS), "--ranks", "1", "--resume")
    assert done.returncode == 0, done.stderr
    expected, resumed = TrainLog.load(str(straight / "run")), TrainLog.load(str(workdir / "run"))
    assert [s["data_parallel_size"] for s in resumed.steps] == [2] * step + [1] * (STEPS - step)
    assert [s["sample_ids"] for s in resumed.steps] == [s["sample_ids"] for s in expected.steps]
    # the samples' tokens themselves, all ranks' in rank order, are those of the 2-rank run
    assert [s["tokens_digest"] for s in resumed.steps] == [s["tokens_digest"] for s in expected.steps]
    assert resumed.steps[:step] == expected.steps[:step]
    assert len({tuple(s["sample_ids"]) for s in resumed.steps}) == STEPS


def test_two_resumes_in_a_row_repeat_the_uninterrupted_run(straight, tmp_path):
    workdir = resume_from(straight, CHECKPOINT_EVERY, tmp_path)
    for steps in (2 * CHECKPOINT_EVERY + 1, STEPS):  # the second resume starts from the first one's checkpoint
        done = run(workdir, "--steps", str(steps), "--ranks", "2", "--resume")
        assert done.returncode == 0, done.stderr
    assert TrainLog.load(str(workdir / "run")).steps == TrainLog.load(str(straight / "run")).steps
    assert sorted(os.listdir(workdir / "run")) == ["log.json"] + [f"step-{s:06d}.pt" for s in (4, 8, 12, 16)]


def test_resume_after_a_store_changed_is_refused_naming_the_store(straight, tmp_path):
    import tokenport as tp
    from tokenport.demo.train import latest_checkpoint, prepare_training_stores

    workdir = resume_from(straight, CHECKPOINT_EVERY, tmp_path)
    prepare_training_stores(str(workdir))  # the straight run's stores, made afresh
    prefix = workdir / "stores" / "code" / "part-00000"
    store = tp.IndexedDataset(prefix)
    documents = [store[i][::-1].copy() for i in range(len(store))]  # other content, same sizes
    store.close()
    with tp.IndexedDatasetWriter(prefix, tokenizer=tp.load_tokenizer("byte")) as writer:
        for document in documents:
            writer.add_document(document)
    done = run(workdir, "--steps", str(STEPS), "--ranks", "2", "--resume")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "code/part-00000" in done.stderr and "changed" in done.stderr, done.stderr
    assert latest_checkpoint(str(workdir / "run")).endswith(f"step-{CHECKPOINT_EVERY:06d}.pt")
    assert not (workdir / "run" / "log.json").exists()  # no step was trained

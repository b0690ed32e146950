"""Directed kills: a writer or a merge killed at each fsync and rename of its publication.

The child process dies (os._exit, as SIGKILL would) at the Nth publication step, chosen with
TOKENPORT_FAULT_AT=commit:N (see indexed.commit.fault_point). Then a reader opens the prefix,
which must show the old store or the whole new one, and a rerun must leave the directory
exactly (names and bytes) as an uninterrupted run leaves it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tokenport as tp
from tokenport.indexed import commit

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tokenport as tp
    action, out, seed, inputs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    if action in ("write", "chat"):
        chat = action == "chat"
        rng = np.random.default_rng(seed)
        with tp.IndexedDatasetWriter(
            out, dtype=np.uint16, provenance={"seed": seed}, masks=chat, chat={"policy": "all"} if chat else None
        ) as writer:
            for _ in range(30 + seed):
                tokens = rng.integers(0, 5000, int(rng.integers(1, 60)))
                writer.add_document(tokens, mask=tokens % 2 if chat else None)
    else:
        tp.merge(out, inputs, overwrite=True)
    """
)


def _run(action: str, out, seed: int, inputs=(), fault: int | None = None) -> int:
    """Run the child; its exit code (commit.FAULT_EXIT_CODE when the fault point killed it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop(commit.FAULT_ENV, None)
    if fault is not None:
        env[commit.FAULT_ENV] = f"commit:{fault}"
    args = [sys.executable, "-c", CHILD, action, str(out), str(seed), *map(str, inputs)]
    return subprocess.run(args, env=env, timeout=120).returncode


def _write_in_process(out, seed: int, chat: bool = False) -> None:
    """The same write as the child's, in this process (the rerun); `chat` writes a chat store (with masks)."""
    rng = np.random.default_rng(seed)
    with tp.IndexedDatasetWriter(
        out, dtype=np.uint16, provenance={"seed": seed}, masks=chat, chat={"policy": "all"} if chat else None
    ) as writer:
        for _ in range(30 + seed):
            tokens = rng.integers(0, 5000, int(rng.integers(1, 60)))
            writer.add_document(tokens, mask=tokens % 2 if chat else None)


def _snapshot(directory) -> dict[str, object]:
    """Every file of `directory`: its bytes, or for a manifest its content without the timestamp."""
    files: dict[str, object] = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            parsed = json.loads(data)
            parsed.pop("created", None)
            files[name] = parsed
        else:
            files[name] = data
    return files


def _sequences(prefix) -> list[list[int]]:
    """The store's sequences, then its masks' when it is a chat store."""
    with tp.IndexedDataset(prefix) as ds:
        found = [ds[i].tolist() for i in range(len(ds))]
        if ds.masks is not None:
            found += [["mask", *ds.masks[i].tolist()] for i in range(len(ds))]
        return found


def _kill_at_every_step(start, run_killed, rerun, reference, old, new, prefix, directory):
    """For N = 1, 2, ...: fresh start, kill at step N, reopen (old or whole new), rerun, compare."""
    kills = 0
    for step in range(1, 100):
        shutil.rmtree(directory, ignore_errors=True)
        start()
        code = run_killed(step)
        if code == 0:
            break  # the run finished before step N: every step has been tried
        assert code == commit.FAULT_EXIT_CODE, f"child failed at step {step} with code {code}"
        kills += 1
        # a reader that opens the prefix sees the old store or the whole new one, and it is sound
        seen = _sequences(prefix)
        assert seen in (old, new), f"killed at step {step}: the store mixes two writes"
        assert tp.verify(prefix).checksums.startswith("verified")
        if seen == new:  # the reader finished the publication: nothing of it may be left over
            assert sorted(os.listdir(directory)) == sorted(reference), f"leftovers after step {step}"
        rerun()
        assert _snapshot(directory) == reference, f"killed at step {step}, the rerun's output differs"
    assert kills >= 8, f"only {kills} publication steps were tried"


PLAIN = ["s.bin", "s.idx", "s.json"]
CHAT = ["s.bin", "s.idx", "s.json", "s.mask.bin", "s.mask.idx"]


@pytest.mark.parametrize(
    ("old_chat", "new_chat"),
    [(False, False), (True, True), (False, True), (True, False)],
    ids=["plain-over-plain", "chat-over-chat", "chat-over-plain", "plain-over-chat"],
)
def test_killed_writer_then_reopen_and_rerun(tmp_path, old_chat, new_chat):
    """A chat store's masks are published in the same unit as its tokens; a plain store written
    over a chat store removes the old masks in that unit too."""
    directory = tmp_path / "out"
    prefix = directory / "s"

    def start():
        _write_in_process(prefix, 1, old_chat)  # the old store the new write replaces

    start()
    old = _sequences(prefix)
    _write_in_process(prefix, 2, new_chat)
    new = _sequences(prefix)
    reference = _snapshot(directory)
    assert old != new and sorted(reference) == (CHAT if new_chat else PLAIN)
    _kill_at_every_step(
        start,
        lambda step: _run("chat" if new_chat else "write", prefix, 2, fault=step),
        lambda: _write_in_process(prefix, 2, new_chat),
        reference,
        old,
        new,
        prefix,
        directory,
    )


def test_killed_writer_then_restarted_writer(tmp_path):
    """The issue's case: a writer reopened at the prefix must roll forward before it cleans up,
    or the prefix keeps a new .bin with an old .idx even if the restarted writer gives up."""
    directory = tmp_path / "out"
    prefix = directory / "s"
    _write_in_process(prefix, 1)
    old = _sequences(prefix)
    _write_in_process(prefix, 2)
    new = _sequences(prefix)
    reference = _snapshot(directory)
    for step in range(1, 100):
        shutil.rmtree(directory)
        _write_in_process(prefix, 1)
        if _run("write", prefix, 2, fault=step) == 0:
            break
        restarted = tp.IndexedDatasetWriter(prefix, dtype=np.uint16)
        restarted.add_document([1, 2, 3])
        restarted.abort()
        assert _sequences(prefix) in (old, new), f"killed at step {step}: the store mixes two writes"
        tp.verify(prefix)
        _write_in_process(prefix, 2)
        assert _snapshot(directory) == reference, f"killed at step {step}, the rerun's output differs"
    assert step > 8


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat"])
def test_killed_merge_then_reopen_and_rerun(tmp_path, chat):
    inputs = [tmp_path / "in" / "a", tmp_path / "in" / "b"]
    for seed, prefix in enumerate(inputs, start=3):
        _write_in_process(prefix, seed, chat)
    directory = tmp_path / "out"
    prefix = directory / "m"

    def start():
        tp.merge(prefix, inputs[:1], overwrite=True)  # an earlier merge the new one replaces

    start()
    old = _sequences(prefix)
    tp.merge(prefix, inputs, overwrite=True)
    new = _sequences(prefix)
    reference = _snapshot(directory)
    assert old != new
    _kill_at_every_step(
        start,
        lambda step: _run("merge", prefix, 0, inputs, fault=step),
        lambda: tp.merge(prefix, inputs, overwrite=True),
        reference,
        old,
        new,
        prefix,
        directory,
    )


def test_a_rerun_merge_finishes_the_killed_one_before_refusing_to_overwrite(tmp_path):
    """Killed between its renames, a merge leaves a journal; the rerun (without --force) rolls it
    forward first, so it refuses a whole store, not a mixed one, and leaves no journal behind."""
    inputs = [tmp_path / "in" / "a", tmp_path / "in" / "b"]
    for seed, prefix in enumerate(inputs, start=3):
        _write_in_process(prefix, seed)
    reference_prefix = tmp_path / "reference" / "m"
    tp.merge(reference_prefix, inputs)
    prefix = tmp_path / "out" / "m"
    step = 6  # 3 fsyncs, the journal, its rename, then the directory fsync: journal in place, no file renamed
    assert _run("merge", prefix, 0, inputs, fault=step) == commit.FAULT_EXIT_CODE
    assert os.path.exists(commit.journal_path(str(prefix)))
    with pytest.raises(tp.ConfigError, match="already exists"):
        tp.merge(prefix, inputs)
    assert sorted(os.listdir(prefix.parent)) == ["m.bin", "m.idx", "m.json"]
    assert _sequences(prefix) == _sequences(reference_prefix)


def test_fault_point_counts_only_matching_steps(monkeypatch):
    """The hook is inert unless asked, and counts the steps whose names start with NAME."""
    exits = []
    monkeypatch.setattr(commit.os, "_exit", exits.append)
    monkeypatch.delenv(commit.FAULT_ENV, raising=False)
    commit.fault_point("commit.rename")
    monkeypatch.setenv(commit.FAULT_ENV, "commit.rename:2")
    for step in ("commit.fsync", "commit.rename", "prepare.rename", "commit.rename", "commit.rename"):
        commit.fault_point(step)
    assert exits == [commit.FAULT_EXIT_CODE]


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_published_files_follow_the_umask(tmp_path, mask):
    """Temporaries are private (mkstemp), but a published store takes the umask, as open() would."""
    previous = os.umask(mask)
    try:
        _write_in_process(tmp_path / "new" / "dir" / "s", 1)
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(previous)
    expected = os.stat(tmp_path / "plain").st_mode & 0o777
    assert expected == 0o666 & ~mask
    for name in ("s.bin", "s.idx", "s.json"):
        assert os.stat(tmp_path / "new" / "dir" / name).st_mode & 0o777 == expected, name
    for directory in (tmp_path / "new", tmp_path / "new" / "dir"):
        assert os.stat(directory).st_mode & 0o777 == 0o777 & ~mask


def test_writer_creates_missing_directories(tmp_path):
    """README: IndexedDatasetWriter("out/mine") works where out/ does not exist yet."""
    with tp.IndexedDatasetWriter(tmp_path / "out" / "deeper" / "mine", dtype=np.uint16) as writer:
        writer.add_document([1, 2, 3])
    assert tp.IndexedDataset(tmp_path / "out" / "deeper" / "mine")[0].tolist() == [1, 2, 3]


def test_index_cache_entries_follow_the_umask(tmp_path):
    """A cache entry is staged in a private mkdtemp directory but published with the umask."""
    from tokenport.builder import IndexCache, build_gpt_dataset
    from tokenport.samples.gpt import GPTSampleConfig

    _write_in_process(tmp_path / "s", 1)
    previous = os.umask(0o022)
    try:
        cache = IndexCache(tmp_path / "cache")
        build_gpt_dataset(
            tp.IndexedDataset(tmp_path / "s"), 50, GPTSampleConfig(seq_length=16, eod_id=0), 1, cache=cache
        )
    finally:
        os.umask(previous)
    entries = [tmp_path / "cache" / name for name in os.listdir(tmp_path / "cache") if not name.endswith(".lock")]
    assert len(entries) == 1 and os.stat(entries[0]).st_mode & 0o777 == 0o755
    for name in os.listdir(entries[0]):
        assert os.stat(entries[0] / name).st_mode & 0o777 == 0o644, name

"""Directed kills: `prepare` ended at each rename of what it publishes, then rerun, leaves the output
directory exactly as an uninterrupted run leaves it (names and bytes)."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run.state import KILL_AT

TEXTS = [
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "Please read the instructions carefully before you install the software.",
    "A short note.",
    "The river rose overnight and the bridge was closed until morning.",
]

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from tokenport.indexed import commit
    from tokenport.corpus import PrepareConfig, prepare
    from tokenport.corpus.run import state

    original = commit.roll_forward

    def counted(prefix):  # a store's renames are kill points too: after them, before its clean-up
        pending = os.path.exists(commit.journal_path(prefix))
        original(prefix)
        if pending:
            state.kill_point()

    commit.roll_forward = counted
    prepare(PrepareConfig(**json.loads(sys.argv[1])))
    """
)


def settings(tmp_path: pathlib.Path) -> dict:
    """Two input files (a compressed one decompressed into chunks; units, two parts), a filter before a
    dedup step (its keys pass spills what reaches the dedup) and rejected documents kept (by both
    passes, merged in input order): every kind of file prepare publishes. The records carry identifiers
    (a string, an integer, none), so provenance.npz's identifier column is published at each kill point too."""
    inputs = []
    for name, texts in (("a.jsonl", TEXTS[:3]), ("b.jsonl.gz", TEXTS[1:])):  # TEXTS[1:3] repeat across the files
        ids: list[object] = [f"{name}#{k}" if k % 2 else k for k in range(len(texts) - 1)] + [None]
        data = "".join(json.dumps({"text": t, "id": i}) + "\n" for t, i in zip(texts, ids)).encode()
        (tmp_path / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        inputs.append(str(tmp_path / name))
    return {
        "inputs": inputs,
        "output": str(tmp_path / "out"),
        "workers": 1,
        "unit_bytes": 200,
        "steps": [{"step": "gopher_quality", "min_words": 5, "min_stop_words": 1}, {"step": "exact_dedup"}],
        "keep_rejected": True,
    }


def snapshot(directory: pathlib.Path) -> dict[str, object]:
    """Every file under `directory` by relative name: its bytes, or for JSON its data without the
    wall-clock fields (creation times, step and stage timings), which differ between any two runs."""

    def steady(value: object) -> object:
        if isinstance(value, dict):
            return {k: steady(v) for k, v in value.items() if k not in ("created", "time_ms", "stages", "unit_stages")}
        return [steady(v) for v in value] if isinstance(value, list) else value

    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = pathlib.Path(root, name)
            data = path.read_bytes()
            files[str(path.relative_to(directory))] = steady(json.loads(data)) if name.endswith(".json") else data
    return files


def test_a_kill_at_every_rename_then_a_rerun_leaves_the_uninterrupted_output(tmp_path):
    config = settings(tmp_path)
    out = pathlib.Path(config["output"])
    reference = snapshot(pathlib.Path(prepare(PrepareConfig(**config)).output))
    assert {"rejected/unit-000001", "part-00001.bin"} <= {name[:20] for name in reference}
    assert "provenance.npz" in reference  # with the units' and keys passes' records: each rename a kill point
    assert b'"id_field":"id","identified":4' in reference["provenance.npz"]  # type: ignore[operator]
    shutil.rmtree(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    point = 0
    while True:
        point += 1
        child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], env={**env, KILL_AT: str(point)})
        if child.returncode == 0:
            break  # the run passed fewer renames than this: every one has been a kill point
        assert child.returncode == 137 and out.exists(), f"kill point {point}: exit {child.returncode}"
        prepare(PrepareConfig(**config))
        assert snapshot(out) == reference, f"after a kill at rename {point}, the rerun left another output"
        shutil.rmtree(out)
    assert point > 30  # state, chunks, dedup spills, keys, counts and decisions, unit stores and counts, parts,
    # rejected, manifest


def test_a_kill_at_every_step_of_an_overwrite_then_a_rerun_leaves_the_new_output(tmp_path):
    """overwrite=True over a finished output of other settings: the earlier run's work, the new state,
    the earlier manifest and parts are each a kill point; the rerun (with overwrite) ends as a clean run."""
    old = settings(tmp_path)
    new = {**old, "append_eod": False}
    out = pathlib.Path(old["output"])
    reference = snapshot(pathlib.Path(prepare(PrepareConfig(**new)).output))
    shutil.rmtree(out)
    child = CHILD.replace(
        "prepare(PrepareConfig(**json.loads(sys.argv[1])))",
        "prepare(PrepareConfig(**json.loads(sys.argv[1])), overwrite=True)",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for point in range(1, 7):  # clearing the work, the state's two renames, the manifest, the parts, the first chunk
        prepare(PrepareConfig(**old))
        killed = subprocess.run([sys.executable, "-c", child, json.dumps(new)], env={**env, KILL_AT: str(point)})
        assert killed.returncode == 137, f"kill point {point}: exit {killed.returncode}"
        prepare(PrepareConfig(**new), overwrite=True)
        assert snapshot(out) == reference, (
            f"after a kill at step {point} of an overwrite, the rerun left another output"
        )
        shutil.rmtree(out)

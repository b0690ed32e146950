"""A dock restarted from its checkpoint keeps its partial multi-turn rollouts (vime #324 loses them).

One seeded script of multi-turn rollouts (turns appended to rows, a reward put before the last turn,
policy versions advanced, rollout and training gets) runs on a dock that is never restarted and on one
that is saved and loaded at random moments: in process, in a fresh process, on a ``Dock`` and on a
``RayDock``, and after a save killed at every publication step. Every call's result must equal the
uninterrupted run's: the partial rows keep their turns (items and versions), later turns append to
them, they are served once finished, and no finished row is lost or served twice.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.dock._state import dock_state
from tokenport.dock import Column, Dock, DockBase
from tokenport.dock.checkpoint import KILL_AT
from tokenport.errors import ConfigError

COLUMNS = [
    Column("tokens", np.int32, segmented=True),
    Column("mask", np.uint8, segmented=True),
    Column("logp", np.float32, segmented=True),
    Column("reward", np.float32),
]
CONSUMERS = ["rollout", "train", "ref"]
PARTITIONS = {"p": 5, "q": 3}  # prompts per partition
GROUP = 2  # responses per prompt
READ = ["tokens", "mask", "logp", "reward"]
TURNS = ["tokens", "mask", "logp"]
ROOT = pathlib.Path(__file__).resolve().parents[2]


def new_dock(kind: Any = Dock) -> Any:
    """A dock (``Dock``, or ``RayDock``) with the partitions the scripts write."""
    dock = kind(COLUMNS, CONSUMERS, n_samples_per_prompt=GROUP)
    for name, prompts in PARTITIONS.items():
        dock.add_partition(name, num_prompts=prompts)
    return dock


def script(seed: int, restarts: int) -> list[tuple]:
    """The calls of a seeded multi-turn run with ``restarts`` restart points among them, every row
    finished and every consumer's rows drained at its end (the gets ask only for rows the run has
    finished and the consumer has not had, so none waits)."""
    rng = random.Random(seed)
    rows = [(name, row) for name, prompts in PARTITIONS.items() for row in range(prompts * GROUP)]
    open_rows, version, calls = list(rows), 0, []
    finished: dict[str, set] = {name: set() for name in PARTITIONS}
    had = {consumer: {name: set() for name in PARTITIONS} for consumer in ("train", "ref")}

    def turn(partition: str, row: int, last: bool) -> None:
        items = rng.randint(1, 4)
        tokens = [rng.randrange(50_000) for _ in range(items)]
        mask = [rng.randrange(2)] * items  # a model turn (trained) or a tool turn (not)
        logp = [round(-rng.random() * 5, 3) for _ in range(items)]
        if last:
            calls.append(("reward", partition, row, round(rng.random(), 3), version))
        calls.append(("append", partition, row, tokens, mask, logp, version, last))

    while open_rows:
        kind = rng.choices(["turn", "finish", "get", "unfinished", "version"], [6, 2, 3, 1, 1])[0]
        if kind in ("turn", "finish"):
            partition, row = rng.choice(open_rows)
            turn(partition, row, kind == "finish")
            if kind == "finish":
                open_rows.remove((partition, row))
                finished[partition].add(row)
        elif kind == "get":
            consumer, partition = rng.choice(["train", "ref"]), rng.choice(list(PARTITIONS))
            waiting = len(finished[partition] - had[consumer][partition])
            if waiting:
                calls.append(("get", consumer, partition, rng.randint(1, waiting)))
        elif kind == "unfinished":
            calls.append(("unfinished", rng.choice(list(PARTITIONS)), rng.randint(1, 4)))
        else:
            version += 1
            calls.append(("version", version))
        if calls and calls[-1][0] == "get":
            _, consumer, partition, count = calls[-1]
            had[consumer][partition] |= set(sorted(finished[partition] - had[consumer][partition])[:count])
    for consumer in ("train", "ref"):
        for partition in PARTITIONS:
            calls.append(("get", consumer, partition, GROUP * PARTITIONS[partition]))  # the rest; short is fine
            calls.append(("drained", consumer, partition))
    for at in sorted(rng.sample(range(1, len(calls) - 8), restarts), reverse=True):
        calls.insert(at, ("restart",))
    return calls


def seen(batch: Any) -> Any:
    """A get's result as plain data: rows, each column per row, each row's segments and their versions."""
    if batch is None:
        return None
    data = {name: [list(v.tolist()) for v in batch[name].to_list()] for name in TURNS if name in batch.columns}
    if "reward" in batch.columns:
        data["reward"] = batch["reward"].tolist()
    segments = None if batch.segments is None else [s.tolist() for s in batch.segments.to_list()]
    versions = None if batch.segment_versions is None else [v.tolist() for v in batch.segment_versions.to_list()]
    spans = [batch.versions.tolist(), batch.latest_versions.tolist()]
    return [batch.partition, batch.rows.tolist(), data, segments, versions, spans]


def play(dock: DockBase, calls: list[tuple], restart: Callable[[DockBase], DockBase]) -> tuple[list, DockBase]:
    """Run ``calls`` on ``dock`` (``restart`` for each restart point): every call's result, and the dock."""
    results: list = []
    for call in calls:
        kind, args = call[0], call[1:]
        if kind == "append":
            partition, row, tokens, mask, logp, version, last = args
            values = {"tokens": np.array(tokens, np.int32), "mask": np.array(mask, np.uint8)}
            dock.append(partition, row, {**values, "logp": np.array(logp, np.float32)}, version=version, finished=last)
        elif kind == "reward":
            partition, row, reward, version = args
            dock.put(partition, {"reward": [reward]}, rows=[row], completed=False, version=version)
        elif kind == "version":
            dock.set_version(args[0])
        elif kind == "get":
            consumer, partition, count = args
            results.append(seen(dock.get(consumer, READ, count, partition, timeout=5)))
        elif kind == "unfinished":
            partition, count = args
            results.append(seen(dock.get("rollout", TURNS, count, partition, unfinished=True)))
        elif kind == "drained":
            results.append(seen(dock.get(args[0], READ, 1, args[1], timeout=5)))
        else:
            dock = restart(dock)
    return results, dock


def expected_rollouts(calls: list[tuple]) -> dict[tuple[str, int], list]:
    """Each row as the script built it: its items per column, reward, segment lengths and versions."""
    rows: dict[tuple[str, int], list] = {}
    for call in calls:
        if call[0] == "append":
            _, partition, row, tokens, mask, logp, version, _ = call
            entry = rows.setdefault((partition, row), [[], [], [], None, [], []])
            for column, items in zip(entry[:3], (tokens, mask, logp)):
                column.extend(items)
            entry[4].append(len(tokens))
            entry[5].append(version)
        elif call[0] == "reward":  # put before the row's last turn (perhaps its first)
            rows.setdefault((call[1], call[2]), [[], [], [], None, [], []])[3] = call[3]
    return rows


def check_exactly_once(calls: list[tuple], results: list) -> None:
    """Every row reached train and ref once, whole: its turns' items (logp as float32), the reward, the
    segments and their versions as appended; and each consumer was then told its partitions are done."""
    expected = expected_rollouts(calls)
    served: dict[str, list] = {"train": [], "ref": []}
    gets = [call for call in calls if call[0] in ("get", "unfinished", "drained")]
    assert len(gets) == len(results)
    for call, result in zip(gets, results):
        if call[0] == "drained":
            assert result is None, call
        elif call[0] == "get" and result is not None:  # None: a last get with nothing left
            partition, rows, data, segments, versions, _ = result
            for i, row in enumerate(rows):
                tokens, mask, logp, reward, lengths, stamps = expected[partition, row]
                assert data["tokens"][i] == tokens and data["mask"][i] == mask
                assert data["logp"][i] == np.array(logp, np.float32).tolist()
                assert data["reward"][i] == float(np.float32(reward))
                assert segments[i] == lengths and versions[i] == stamps
                served[call[1]].append((partition, row))
    for consumer, rows in served.items():
        assert sorted(rows) == sorted(expected), consumer  # each row once: none lost, none twice


def restarted_in_process(directory: pathlib.Path) -> Callable[[DockBase], DockBase]:
    """Save, drop the dock, load it from the checkpoint; its checkpoint must equal the one saved."""

    def restart(dock: DockBase) -> DockBase:
        dock.save(directory)
        loaded = Dock.load(directory)
        assert saved_state(loaded) == saved_state(dock)
        return loaded

    return restart


def saved_state(dock: Dock) -> dict:
    state = dock_state(dock)
    return {"description": state["description"], "arrays": state["arrays"]}


@pytest.mark.parametrize("seed", range(6))
def test_partial_rollouts_survive_restarts_and_every_result_equals_the_uninterrupted_run(seed, tmp_path):
    calls = script(seed, restarts=4)
    expected, uninterrupted = play(new_dock(), calls, lambda dock: dock)
    got, restarted = play(new_dock(), calls, restarted_in_process(tmp_path / "ckpt"))
    assert got == expected
    assert saved_state(restarted) == saved_state(uninterrupted)
    check_exactly_once(calls, got)


def partial_rows(calls: list[tuple]) -> set[tuple[str, int]]:
    """The rows holding some turns but not finished after ``calls``."""
    started = {(call[1], call[2]) for call in calls if call[0] == "append"}
    return started - {(call[1], call[2]) for call in calls if call[0] == "append" and call[7]}


def test_the_scripts_restart_while_rows_are_partial_and_rows_are_half_consumed():
    """Each script restarts with several rows holding turns but unfinished, and with finished rows one
    consumer has had and another has not (else the tests here would prove little)."""
    for seed in range(6):
        calls = script(seed, restarts=4)
        restarts = [at for at, call in enumerate(calls) if call[0] == "restart"]
        assert max(len(partial_rows(calls[:at])) for at in restarts) >= 3, seed
        gets = [call for at, call in enumerate(calls[: restarts[-1]]) if call[0] == "get"]
        assert {consumer for _, consumer, *_ in gets} == {"train", "ref"}, seed


# -- a fresh process ----------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, pathlib, sys
    sys.path[:0] = [sys.argv[5]]
    from tests.dock.test_dock_restart import play, script
    directory, seed, start, stop = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 6:  # on the cluster at this address, as a RayDock
        import ray
        ray.init(address=sys.argv[6], log_to_driver=False)
        from tokenport.dock.ray import RayDock
        dock = RayDock.load(directory, shards=2)
    else:
        from tokenport.dock import Dock
        dock = Dock.load(directory)
    results, dock = play(dock, script(seed, restarts=0)[start:stop], lambda dock: dock)
    dock.save(directory)
    print(json.dumps(results))
    """
)


def run_child(directory: pathlib.Path, seed: int, span: tuple[int, int], *extra: str, env: dict | None = None) -> Any:
    """Run the script's calls ``span`` (start, stop) in a fresh process that loads the checkpoint in
    ``directory`` and saves its dock there after them."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(directory), str(seed), *map(str, span), str(ROOT), *extra],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def json_plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_a_fresh_process_resumes_the_partial_rollouts_from_the_checkpoint(tmp_path):
    seed = 11
    calls = script(seed, restarts=0)
    expected, uninterrupted = play(new_dock(), calls, lambda dock: dock)
    start = len(calls) // 2
    assert len(partial_rows(calls[:start])) >= 3
    before, dock = play(new_dock(), calls[:start], lambda dock: dock)
    dock.save(tmp_path / "ckpt")
    child = run_child(tmp_path / "ckpt", seed, (start, len(calls)))
    assert child.returncode == 0, child.stderr
    results = json_plain(before) + json.loads(child.stdout)
    assert results == json_plain(expected)
    assert saved_state(Dock.load(tmp_path / "ckpt")) == saved_state(uninterrupted)
    check_exactly_once(calls, results)


# -- a killed save ------------------------------------------------------------------------------------


def test_a_save_killed_at_each_step_leaves_the_old_or_the_new_checkpoint_and_the_run_resumes_exactly(tmp_path):
    """Each step of the save in a fresh process (which ran the script's middle third on the loaded dock)
    is killed in turn: the folder then loads as the old checkpoint or the new one, never a mix, and the
    run resumed from whichever it holds gives the uninterrupted run's results."""
    seed = 5
    calls = script(seed, restarts=0)
    expected, _ = play(new_dock(), calls, lambda dock: dock)
    third = len(calls) // 3
    _, dock = play(new_dock(), calls[:third], lambda dock: dock)
    folder = tmp_path / "ckpt"
    dock.save(folder)
    old = saved_state(Dock.load(folder))
    assert len(partial_rows(calls[:third])) >= 2 and len(partial_rows(calls[: 2 * third])) >= 2
    new = saved_state(play(Dock.load(folder), calls[third : 2 * third], lambda dock: dock)[1])
    step, seen_states = 0, set()
    while True:
        step += 1
        dock.save(folder)  # back to the old checkpoint
        child = run_child(folder, seed, (third, 2 * third), env={KILL_AT: str(step)})
        if child.returncode == 0:
            break
        assert child.returncode == 137, child.stderr
        state = saved_state(Dock.load(folder))
        assert state in (old, new), step
        seen_states.add("old" if state == old else "new")
        assert not [p.name for p in tmp_path.iterdir() if ".saving-" in p.name], step
        start = third if state == old else 2 * third
        rest, _ = play(Dock.load(folder), calls[start:], lambda dock: dock)
        done = len([c for c in calls[:start] if c[0] in ("get", "unfinished", "drained")])
        assert json_plain(rest) == json_plain(expected[done:]), step
    assert step > 4 and seen_states == {"old", "new"}


# -- on Ray -------------------------------------------------------------------------------------------


def test_a_ray_dock_keeps_partial_rollouts_through_restarts_and_a_fresh_process(ray_cluster, tmp_path):
    """A RayDock saved and loaded (onto another shard count) at random moments gives every result an
    uninterrupted Dock gives; then a fresh process loads its checkpoint onto the cluster as a RayDock and
    finishes the run exactly."""
    from tokenport.dock.ray import RayDock

    seed = 3
    calls = script(seed, restarts=3)
    expected, uninterrupted = play(new_dock(), calls, lambda dock: dock)
    shards = iter([2, 1, 3])

    def restart(dock: DockBase) -> DockBase:
        assert isinstance(dock, RayDock)
        dock.save(tmp_path / "ray")
        dock.shutdown()
        return RayDock.load(tmp_path / "ray", shards=next(shards))

    got, last = play(new_dock(RayDock), calls, restart)
    assert isinstance(last, RayDock)
    assert got == expected
    assert saved_state(last.to_dock()) == saved_state(uninterrupted)
    last.shutdown()
    check_exactly_once(calls, got)

    plain = script(seed, restarts=0)
    start = len(plain) // 2
    before, dock = play(new_dock(RayDock), plain[:start], lambda dock: dock)
    dock.save(tmp_path / "fresh")
    dock.shutdown()
    child = run_child(tmp_path / "fresh", seed, (start, len(plain)), ray_cluster.address)
    assert child.returncode == 0, child.stderr
    reference, finished = play(new_dock(), plain, lambda dock: dock)
    assert json_plain(before) + json.loads(child.stdout.splitlines()[-1]) == json_plain(reference)
    assert saved_state(Dock.load(tmp_path / "fresh")) == saved_state(finished)


# -- leases held across a restart ---------------------------------------------------------------------


def state_of(dock: DockBase) -> dict:
    """Everything a dock holds, leases out and consumer counters included (a RayDock's via a copy)."""
    if isinstance(dock, Dock):
        return dock_state(dock)
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    return {**saved_state(dock.to_dock()), "stats": stats}


def leased_partial_rows(dock: DockBase, directory: pathlib.Path, load: Callable[[pathlib.Path], DockBase]) -> None:
    """The rollout stage holds partial rows on lease when the dock restarts: they come back to it with their
    turns, and the lease id it still holds is refused by the restarted dock (before the fix it named a
    new lease of the restarted dock, whose rows an ack of the stale id consumed: lost to their holder)."""
    dock.add_partition("p", num_prompts=2)
    for row in range(4):
        dock.append("p", row, {"tokens": np.arange(row + 1, dtype=np.int32)}, version=0)
    held = dock.get("rollout", ["tokens"], 2, "p", unfinished=True, lease=600)
    assert held.rows.tolist() == [0, 1]
    dock.save(directory)
    restarted = load(directory)
    back = restarted.get("rollout", ["tokens"], 4, "p", unfinished=True, lease=600)
    assert back.rows.tolist() == [0, 1, 2, 3] and back.segments.values.tolist() == [1, 2, 3, 4]
    assert [t.tolist() for t in back["tokens"].to_list()] == [list(range(r + 1)) for r in range(4)]
    assert held.lease_id != back.lease_id
    before = state_of(restarted)
    with pytest.raises(ConfigError, match=f"lease {held.lease_id} is not held"):
        restarted.ack(held.lease_id)
    with pytest.raises(ConfigError, match=f"lease {held.lease_id} is not held"):
        restarted.nack(held.lease_id)
    assert state_of(restarted) == before  # refused: the new holder's lease and every row as they were
    restarted.nack(back.lease_id)  # still the new holder's: it gives them back
    again = restarted.get("rollout", ["tokens"], 4, "p", unfinished=True, lease=600)
    assert again.rows.tolist() == [0, 1, 2, 3]
    restarted.ack(again.lease_id)
    restarted.append("p", 0, {"tokens": np.array([9], np.int32)}, version=0, finished=True)
    batch = restarted.get("train", ["tokens"], 1, "p", timeout=5)
    assert batch.rows.tolist() == [0] and batch["tokens"].values.tolist() == [0, 9]
    assert batch.segments.values.tolist() == [1, 1]


def test_a_dock_restarted_never_takes_a_lease_id_from_before_the_restart(tmp_path):
    columns = [Column("tokens", np.int32, segmented=True)]
    leased_partial_rows(Dock(columns, CONSUMERS, n_samples_per_prompt=GROUP), tmp_path / "ckpt", Dock.load)
    docks = [Dock.load(tmp_path / "ckpt") for _ in range(3)]  # restarted from one checkpoint more than once
    ids = [dock.get("rollout", ["tokens"], 1, "p", unfinished=True, lease=60).lease_id for dock in docks]
    assert len(set(ids)) == 3


def test_a_ray_dock_restarted_never_takes_a_lease_id_from_before_the_restart(ray_session, tmp_path):
    from tokenport.dock.ray import RayDock

    first = RayDock([Column("tokens", np.int32, segmented=True)], CONSUMERS, n_samples_per_prompt=GROUP)
    loaded: list = []
    leased_partial_rows(first, tmp_path / "ckpt", lambda path: loaded.append(RayDock.load(path, shards=2)) or loaded[0])
    first.shutdown()
    loaded[0].shutdown()

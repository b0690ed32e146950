"""Policy versions, bounded staleness, expiry by policy, admission control, segmented multi-turn rows."""

import json
import random
import threading

import numpy as np
import pytest

import tokenport as tp
from tokenport.dock import Column, Dock, SampleRequest


def versioned_dock(rows: int = 8, consumers=("train",), **options) -> Dock:
    dock = Dock([Column("tokens", np.int32, ragged=True), Column("reward", np.float32)], consumers, **options)
    dock.add_partition("p", num_prompts=rows)
    return dock


def put_rows(dock: Dock, rows, version, partition: str = "p") -> None:
    rows = list(rows)
    dock.put(partition, {"tokens": [np.array([r, version], np.int32) for r in rows]}, rows=rows, version=version)


# -- staleness and expiry -----------------------------------------------------------------------------


def test_rows_too_stale_are_never_served_and_are_requeued_exactly_once():
    dock = versioned_dock(max_staleness=1)
    put_rows(dock, range(4), version=0)
    dock.set_version(1)
    put_rows(dock, range(4, 8), version=1)
    first = dock.get("train", ["tokens"], 2, "p", timeout=1)
    assert first.rows.tolist() == [0, 1] and first.versions.tolist() == [0, 0]
    dock.set_version(2)  # rows 2, 3 (version 0) are now 2 behind: too stale for train
    assert dock.version == 2
    assert {k: v.tolist() for k, v in dock.expired().items()} == {"p": [2, 3]}
    assert dock.expired() == {} and dock.expired("p") == {}  # handed back once
    stats = dock.stats()
    assert stats["expired"] == {"requeued": 2, "dropped": 0, "pending": 0} and stats["version"] == 2
    assert stats["partitions"]["p"]["versions"] == {0: 2, 1: 4}  # rows 0, 1 stay (train consumed them)
    served = dock.get("train", ["tokens"], 4, "p", timeout=1)
    assert served.rows.tolist() == [4, 5, 6, 7] and served.versions.tolist() == [1] * 4
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["tokens"], 2, "p", timeout=0.05)  # 2 and 3 wait for their regeneration
    put_rows(dock, [2, 3], version=2)  # the rollout stage regenerates the requeued prompts
    again = dock.get("train", ["tokens"], 2, "p", timeout=1)
    assert [t.tolist() for t in again["tokens"].to_list()] == [[2, 2], [3, 2]] and dock.all_consumed("train", "p")
    assert dock.stats()["consumers"]["train"]["staleness"] == {1: 6, 0: 2}  # served 1 behind, or current


def test_a_stale_row_one_stage_still_needs_is_requeued_for_every_stage():
    dock = versioned_dock(max_staleness=1, consumers=("reward", "train"))
    put_rows(dock, range(2), version=0)
    dock.get("reward", ["tokens"], 2, "p")
    dock.get("train", ["tokens"], 1, "p")
    dock.set_version(2)  # row 1 reached reward but not train: it goes back whole
    assert dock.expired()["p"].tolist() == [1]
    put_rows(dock, [1], version=2)
    assert dock.get("reward", ["tokens"], 1, "p", timeout=1).rows.tolist() == [1]
    assert dock.get("train", ["tokens"], 1, "p", timeout=1).versions.tolist() == [2]


def test_drop_policy_counts_stale_rows_and_never_serves_them():
    dock = versioned_dock(max_staleness=0, on_stale="drop", consumers=("reward", "train"))
    put_rows(dock, range(8), version=0)
    assert dock.get("train", ["tokens"], 3, "p").rows.tolist() == [0, 1, 2]
    dock.set_version(1)
    assert dock.stats()["expired"] == {"requeued": 0, "dropped": 8, "pending": 0}  # reward consumed none
    assert dock.expired() == {} and dock.all_consumed("train", "p") and dock.all_consumed("reward", "p")
    assert dock.get("train", ["tokens"], 3, "p", timeout=1) is None


def test_per_consumer_and_per_get_limits():
    dock = Dock([Column("tokens", np.int32, ragged=True)], ["train"])
    dock.add_consumer("critic", max_staleness=0)
    dock.add_partition("p", num_prompts=4)
    put_rows(dock, range(2), version=0)
    dock.set_version(1)
    put_rows(dock, range(2, 4), version=1)
    # the critic's own limit expired rows 0, 1 (requeued): train has no limit of its own
    assert dock.expired()["p"].tolist() == [0, 1]
    put_rows(dock, range(2), version=1)
    assert dock.get("critic", ["tokens"], 4, "p").versions.tolist() == [1] * 4
    dock.set_version(3)
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["tokens"], 1, "p", timeout=0.05, max_staleness=1)  # per get: filters, never expires
    assert dock.get("train", ["tokens"], 4, "p", timeout=1).versions.tolist() == [1] * 4  # no limit: served


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d: d.set_version(0), "older than the current version 1"),
        (lambda d: d.set_version(-1), "version"),
        (lambda d: put_rows(d, [5], version=2), "newer than the dock's current version 1"),
        (lambda d: d.put("p", {"tokens": [np.ones(2, np.int32)]}, rows=[6]), "row 6 has no version"),
        (lambda d: d.put("p", {"tokens": [np.ones(2, np.int32)]}, rows=[6], version=[0, 1]), "one per row"),
        (lambda d: d.put("p", {"tokens": [np.ones(2, np.int32)]}, rows=[6], version=-1), "negative"),
        (lambda d: d.get("train", ["tokens"], 1, "p", max_staleness=-1), "max_staleness"),
        (lambda d: Dock([Column("t", np.int32)], ["c"], on_stale="keep"), "on_stale"),
        (lambda d: Dock([Column("t", np.int32)], ["c"], max_inflight_versions=0), "max_inflight_versions"),
    ],
)
def test_bad_version_calls_are_refused_and_change_nothing(call, match):
    dock = versioned_dock(max_staleness=1)
    dock.set_version(1)
    put_rows(dock, [0], version=1)
    before = dock.stats()
    with pytest.raises(tp.ConfigError, match=match):
        call(dock)
    after = dock.stats()
    for stats in (before, after):
        for consumer in stats["consumers"].values():
            consumer.pop("wait_seconds")
    assert after == before and dock.version == 1


def test_a_put_without_version_keeps_the_rows_versions():
    dock = versioned_dock(max_staleness=2)
    put_rows(dock, range(2), version=0)
    dock.set_version(1)
    dock.put("p", {"reward": np.ones(2)}, rows=[0, 1])  # the reward stage: no version of its own
    batch = dock.get("train", ["tokens", "reward"], 2, "p", timeout=1)
    assert batch.versions.tolist() == [0, 0] and batch.latest_versions.tolist() == [0, 0]


def test_samplers_see_each_rows_versions():
    dock = versioned_dock(max_staleness=3)
    for version in range(3):
        dock.set_version(version)
        put_rows(dock, [7 - 2 * version, 6 - 2 * version], version=version)

    def oldest_first(request: SampleRequest):
        eligible = request.eligible
        assert request.current_version == 2 and request.latest_versions[eligible].tolist() == sorted(
            request.versions[eligible].tolist(), reverse=True
        )
        order = eligible[np.argsort(request.versions[eligible], kind="stable")][: request.count]
        return order, order

    assert dock.get("train", ["tokens"], 3, "p", sampler=oldest_first).rows.tolist() == [6, 7, 4]


# -- admission ------------------------------------------------------------------------------------------


def test_admission_holds_rollouts_back_until_old_rows_are_consumed():
    dock = versioned_dock(max_inflight_versions=2, consumers=("reward", "train"))
    assert dock.can_admit()
    put_rows(dock, range(2), version=0)
    dock.set_version(1)
    assert dock.can_admit()  # versions 0 and 1 in flight
    dock.set_version(2)
    assert not dock.can_admit()  # version 0 rows would make 3
    with pytest.raises(tp.DockTimeout, match="rows of version 0 are still unconsumed"):
        dock.admit(timeout=0.05)
    admitted = threading.Event()
    waiter = threading.Thread(target=lambda: (dock.admit(timeout=10), admitted.set()))
    waiter.start()
    dock.get("train", ["tokens"], 2, "p")
    assert not admitted.wait(0.05)  # the reward stage still holds them
    dock.get("reward", ["tokens"], 2, "p")
    waiter.join(10)
    assert admitted.is_set() and dock.can_admit()


@pytest.mark.parametrize("policy", ["requeue", "drop"])
def test_concurrent_producers_never_serve_stale_rows_and_account_for_every_expiry(policy):
    """4 rollout threads (admitted, regenerating requeued rows) against a trainer that steps its version
    after every batch: nothing stale is trained, every expiry is counted or handed back once, and
    admission never lets more than N versions be in flight."""
    rows, limit, inflight = 96, 1, 2
    dock = Dock(
        [Column("tokens", np.int32, ragged=True)],
        ["train"],
        max_staleness=limit,
        on_stale=policy,
        max_inflight_versions=inflight,
    )
    dock.add_partition("p", num_prompts=rows)
    todo = list(range(rows))
    guard = threading.Lock()
    handed_back: list[int] = []
    spans: list[int] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def rollout(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                with guard:
                    if not todo:
                        back = dock.expired("p").get("p", np.zeros(0, np.int64)).tolist()
                        handed_back.extend(back)
                        todo.extend(back)
                    row = todo.pop() if todo else None
                if row is None:
                    threading.Event().wait(0.001)
                    continue
                with dock.state.lock:
                    dock.admit(timeout=10)
                    version = dock.version
                    oldest = dock.state.oldest_in_flight()
                    spans.append(version - (version if oldest is None else oldest) + 1)
                threading.Event().wait(rng.random() * 0.002)  # generating
                dock.put("p", {"tokens": [np.array([row, version], np.int32)]}, rows=[row], version=version)
        except BaseException as error:  # reported by the test thread
            errors.append(error)

    workers = [threading.Thread(target=rollout, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    trained: list[tuple[int, int]] = []
    try:
        while (batch := dock.get("train", ["tokens"], 4, "p", timeout=20)) is not None:
            current = dock.version  # only this thread moves it
            assert (current - batch.versions <= limit).all(), (current, batch.versions)
            pairs = batch["tokens"].values.reshape(-1, 2)
            assert pairs[:, 0].tolist() == batch.rows.tolist() and pairs[:, 1].tolist() == batch.versions.tolist()
            trained.extend(map(tuple, pairs.tolist()))
            dock.set_version(current + 1)
    finally:
        done.set()
        for worker in workers:
            worker.join(10)
    assert not errors, errors
    expired = dock.stats()["expired"]
    assert expired["requeued"] + expired["dropped"] > 0  # the workload did make rows stale
    trained_rows = [row for row, _ in trained]
    assert len(trained_rows) == len(set(trained_rows))  # no row trained twice
    if policy == "requeue":
        assert sorted(trained_rows) == list(range(rows))  # every prompt trained, regenerated where needed
        assert expired["requeued"] == len(handed_back) + expired["pending"] and expired["dropped"] == 0
    else:
        assert len(trained_rows) + expired["dropped"] == rows and expired["requeued"] == 0 and not handed_back
    assert spans and max(spans) <= inflight


# -- segmented rows: a scripted multi-turn agent rollout ------------------------------------------------


def segmented_dock() -> Dock:
    columns = [
        Column("tokens", np.int32, segmented=True),
        Column("loss_mask", np.uint8, segmented=True),
        Column("logprobs", np.float32, segmented=True),
        Column("reward", np.float32),
    ]
    dock = Dock(columns, ["rollout", "train"], max_staleness=1)
    dock.add_partition("p", num_prompts=2)
    return dock


def turn(tokens, model: bool, seed: int) -> dict:
    tokens = np.array(tokens, np.int32)
    logprobs = -np.random.default_rng(seed).random(len(tokens)).astype(np.float32) if model else np.zeros(len(tokens))
    return {"tokens": tokens, "loss_mask": np.full(len(tokens), int(model), np.uint8), "logprobs": logprobs}


def test_multi_turn_rollout_appended_turn_by_turn_across_versions_matches_a_hand_built_reference():
    dock = segmented_dock()
    script = {  # row -> (turns under version 0, turns under version 1 after resuming)
        0: (
            [turn([1, 2, 3], False, 0), turn([10, 11], True, 1), turn([50, 51, 52, 53], False, 2)],
            [turn([12], True, 3)],
        ),
        1: ([turn([4, 5], False, 4), turn([20, 21, 22], True, 5)], [turn([60], False, 6), turn([23, 24], True, 7)]),
    }
    for row, (early, _) in script.items():
        for segment in early:
            dock.append("p", row, segment, version=0)
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["tokens"], 1, "p", timeout=0.05)  # unfinished rows are not trained
    dock.set_version(1)  # new weights: the rollout resumes the unfinished rows, it does not regenerate them
    resumed = dock.get("rollout", ["tokens"], 2, "p", unfinished=True)
    assert resumed.rows.tolist() == [0, 1] and resumed.versions.tolist() == [0, 0]
    assert resumed.segments.lengths.tolist() == [3, 2] and resumed.segments.values.tolist() == [3, 2, 4, 2, 3]
    for row, (_, late) in script.items():
        for k, segment in enumerate(late):
            dock.append("p", row, segment, version=1, finished=k == len(late) - 1)
    dock.put("p", {"reward": np.array([1.0, 0.0])}, rows=[0, 1])
    batch = dock.get("train", ["tokens", "loss_mask", "logprobs", "reward"], 2, "p", timeout=1)

    for i, (early, late) in enumerate(script.values()):  # the reference, by hand
        segments = early + late
        for name in ("tokens", "loss_mask", "logprobs"):
            expected = np.concatenate([s[name] for s in segments]).astype(dock.columns[name].dtype)
            got = batch[name].row(i)
            assert got.dtype == expected.dtype and got.tolist() == expected.tolist(), name
        assert batch.segments.row(i).tolist() == [len(s["tokens"]) for s in segments]
        assert batch.segment_versions.row(i).tolist() == [0] * len(early) + [1] * len(late)
    assert batch.versions.tolist() == [0, 0] and batch.latest_versions.tolist() == [1, 1]
    assert batch["loss_mask"].row(0).tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0, 1]
    assert batch.select(np.array([1])).segments.row(0).tolist() == [2, 3, 1, 2]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d: d.append("p", 0, turn([1], True, 0), version=0), "row 0 is finished"),
        (lambda d: d.append("p", 1, {"tokens": np.ones(2, np.int32)}, version=0), "every segment of a row"),
        (lambda d: d.append("p", 1, {**turn([1, 2], True, 0), "tokens": np.ones(3, np.int32)}, version=0), "same"),
        (lambda d: d.append("p", 1, turn([1], True, 0), version=5), "newer than the dock's current version"),
        (lambda d: d.append("p", 1, turn([1], True, 0)), "pass version="),
        (lambda d: d.append("p", 1, {"reward": np.ones(1)}, version=0), "not segmented"),
        (lambda d: d.append("p", 9, turn([1], True, 0), version=0), "out of range"),
        (lambda d: d.append("p", 1, {"tokens": np.array([2**40])}, version=0), "tokens"),
        (lambda d: d.put("p", {"tokens": [np.ones(2, np.int32)]}, rows=[1], version=0), "segmented: write it with"),
    ],
)
def test_bad_appends_are_refused_and_change_nothing(call, match):
    dock = segmented_dock()
    dock.append("p", 0, turn([7, 8], True, 0), version=0, finished=True)
    dock.append("p", 1, turn([9], False, 0), version=0)
    with pytest.raises(tp.ConfigError, match=match):
        call(dock)
    both = dock.get("rollout", ["tokens", "loss_mask", "logprobs"], 1, "p", timeout=1)
    assert both["tokens"].values.tolist() == [7, 8] and both.segments.values.tolist() == [2]
    rest = dock.get("rollout", ["tokens", "loss_mask"], 2, "p", unfinished=True)
    assert rest["tokens"].values.tolist() == [9] and rest.segments.values.tolist() == [1]


def test_a_stale_partial_rollout_expires_with_its_segments():
    dock = segmented_dock()
    dock.append("p", 0, turn([1, 2], False, 0), version=0)
    dock.set_version(2)
    assert dock.expired()["p"].tolist() == [0]
    dock.append("p", 0, turn([3], False, 0), version=2, finished=True)  # regenerated from its prompt
    batch = dock.get("train", ["tokens"], 1, "p", timeout=1)
    assert batch["tokens"].values.tolist() == [3] and batch.segment_versions.values.tolist() == [2]


# -- checkpoints ----------------------------------------------------------------------------------------


def test_checkpoint_keeps_versions_segments_policy_counters_and_pending_requeues(tmp_path):
    dock = segmented_dock()
    dock.add_consumer("critic", max_staleness=0)
    dock.append("p", 0, turn([1, 2], False, 0), version=0)
    dock.append("p", 0, turn([3], True, 1), version=0, finished=True)
    dock.append("p", 1, turn([4], False, 2), version=0)
    dock.get("critic", ["tokens"], 1, "p")
    dock.set_version(1)  # row 1 (unfinished, version 0) is too stale for the critic: requeued
    dock.append("p", 1, turn([5, 6], True, 3), version=1)
    dock.save(tmp_path / "ckpt")
    restored = Dock.load(tmp_path / "ckpt")
    assert restored.version == 1 and restored.stats()["expired"] == {"requeued": 1, "dropped": 0, "pending": 1}
    assert restored.expired()["p"].tolist() == [1] and restored.expired() == {}
    with pytest.raises(tp.ConfigError, match="older than"):
        restored.set_version(0)
    resumed = restored.get("rollout", ["tokens", "loss_mask", "logprobs"], 2, "p", unfinished=True)
    assert resumed.rows.tolist() == [1] and resumed.segment_versions.values.tolist() == [1]
    restored.append("p", 1, turn([7], False, 4), version=1, finished=True)
    batch = restored.get("train", ["tokens", "logprobs"], 2, "p", timeout=1)
    assert batch["tokens"].values.tolist() == [1, 2, 3, 5, 6, 7]
    assert batch.segments.values.tolist() == [2, 1, 2, 1] and batch.segment_versions.values.tolist() == [0, 0, 1, 1]
    assert batch["logprobs"].row(0).tolist() == np.concatenate([np.zeros(2), turn([3], True, 1)["logprobs"]]).tolist()
    with pytest.raises(tp.ConfigError, match="row 0 is finished"):  # the row's columns survived too
        restored.append("p", 0, turn([1], True, 0), version=1)
    restored.get("rollout", ["tokens"], 1, "p", rows=[0])  # every stage has consumed row 0 now
    restored.set_version(2)  # row 0 (version 0) is consumed by all: it stays; row 1 (version 1) is not
    assert restored.expired()["p"].tolist() == [1]  # consumed by the critic, whose limit (0) survived


def test_a_format_1_checkpoint_loads_with_written_rows_at_version_0(tmp_path):
    dock = versioned_dock()
    put_rows(dock, range(3), version=0)
    dock.save(tmp_path / "ckpt")
    description = json.loads((tmp_path / "ckpt" / "dock.json").read_text())
    description["format"] = "tokenport.dock-checkpoint/1"
    for key in ("consumer_limits", "version", "max_staleness", "on_stale", "max_inflight_versions", "expired"):
        del description[key]
    for column in description["columns"]:
        del column["segmented"]
    (tmp_path / "ckpt" / "dock.json").write_text(json.dumps(description))
    file = tmp_path / "ckpt" / description["partitions"][0]["file"]
    with np.load(file) as arrays:
        old = {k: v for k, v in arrays.items() if not k.startswith(("version_", "segments/"))}
    np.savez(file, **old)
    restored = Dock.load(tmp_path / "ckpt")
    assert restored.version == 0 and restored.stats()["partitions"]["p"]["versions"] == {0: 3}
    assert restored.get("train", ["tokens"], 3, "p", timeout=1).versions.tolist() == [0, 0, 0]
    description["format"] = "tokenport.dock-checkpoint/9"
    (tmp_path / "ckpt" / "dock.json").write_text(json.dumps(description))
    with pytest.raises(tp.CorruptStoreError, match="checkpoint/9"):
        Dock.load(tmp_path / "ckpt")


def test_a_dropped_row_is_settled_a_put_cannot_reopen_it_and_count_it_twice(tmp_path):
    """A row dropped as stale is refused a put of an unwritten column (which reopened it: served again,
    dropped and counted again), also after a checkpoint; rewriting it with overwrite and a version makes
    it a new row."""
    dock = versioned_dock(max_staleness=0, on_stale="drop")
    put_rows(dock, [0, 1], version=0)
    dock.set_version(1)
    assert dock.stats()["expired"]["dropped"] == 2
    dock.save(tmp_path / "ck")
    for target in (dock, Dock.load(tmp_path / "ck")):
        before = target.stats()
        with pytest.raises(tp.ConfigError, match="row 0 was dropped as stale"):
            target.put("p", {"reward": np.zeros(1, np.float32)}, rows=[0], completed=False, version=1)
        with pytest.raises(tp.ConfigError, match="row 1 was dropped as stale"):
            target.put("p", {"reward": np.zeros(1, np.float32)}, rows=[1], overwrite=True)  # no version
        assert target.stats() == before
        assert target.get("train", ["tokens"], 1, "p", unfinished=True) is None
        target.put("p", {"tokens": [np.array([0, 1], np.int32)]}, rows=[0], overwrite=True, completed=False, version=1)
        target.put("p", {"tokens": [np.array([0, 1], np.int32)]}, rows=[0], overwrite=True, version=1)
        assert target.get("train", ["tokens"], 1, "p", timeout=1).versions.tolist() == [1]
        target.set_version(2)
        assert target.stats()["expired"]["dropped"] == 2  # row 0 (the new one) was trained, row 1 stays dropped

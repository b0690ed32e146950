"""Dock values that do not fit int64 (versions, rows, counts, limits) are refused, never wrapped, and
a refused call changes nothing; a row dropped as stale stays dropped."""

import numpy as np
import pytest

import tokenport as tp
from tokenport.dock import Column, Dock


def dock_with_rows(**options) -> Dock:
    dock = Dock([Column("x", np.int64), Column("turns", np.int32, segmented=True)], ["train"], **options)
    dock.add_partition("p", num_prompts=4)
    dock.set_version(3)
    dock.put("p", {"x": np.arange(2)}, rows=[0, 1], version=2)
    return dock


def snapshot(dock: Dock) -> dict:
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    return {"version": dock.version, "stats": stats, "partitions": dock.partitions, "consumers": dock.consumers}


BIG = [2**63, 2**64, np.uint64(2**63), np.uint64(2**64 - 1)]


def u64(value) -> np.ndarray:
    """``value`` (clipped to uint64) as a one-element uint64 array."""
    return np.array([min(int(value), 2**64 - 1)], np.uint64)


@pytest.mark.parametrize("big", BIG, ids=str)
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda d, v: d.put("p", {"x": np.arange(1)}, rows=[2], version=v), "version"),
        (lambda d, v: d.put("p", {"x": np.arange(2)}, rows=[2, 3], version=np.r_[u64(1), u64(v)]), "version"),
        (lambda d, v: d.append("p", 2, {"turns": [1, 2]}, version=v), "version"),
        (lambda d, v: d.set_version(v), "version"),
        (lambda d, v: d.append("p", v, {"turns": [1]}, version=0), "row"),
        (lambda d, v: d.put("p", {"x": np.arange(1)}, rows=u64(v)), "row"),
        (lambda d, v: d.add_partition("q", v), "num_prompts"),
        (lambda d, v: d.get("train", ["x"], v, "p", timeout=0), "count"),
        (lambda d, v: d.get("train", ["x"], 1, "p", timeout=0, max_staleness=v), "max_staleness"),
        (lambda d, v: d.add_consumer("eval", max_staleness=v), "max_staleness"),
    ],
)
def test_values_past_int64_are_refused_naming_the_argument_and_change_nothing(call, name, big):
    dock = dock_with_rows(max_staleness=4)
    before = snapshot(dock)
    with pytest.raises(tp.ConfigError, match=name):
        call(dock, big)
    assert snapshot(dock) == before
    batch = dock.get("train", ["x"], 2, "p", timeout=1)  # nothing lost: both rows are still served
    assert batch.rows.tolist() == [0, 1] and batch.versions.tolist() == [2, 2]


@pytest.mark.parametrize("option", ["max_age", "max_staleness", "max_inflight_versions", "n_samples_per_prompt"])
def test_dock_options_past_int64_are_refused(option):
    value = {"n_samples_per_prompt": 2**63}.get(option, 2**64)
    with pytest.raises(tp.ConfigError, match=option):
        Dock([Column("x", np.int64)], ["train"], **{option: value})


def test_rows_times_samples_per_prompt_past_int64_are_refused():
    dock = Dock([Column("x", np.int64)], ["train"], n_samples_per_prompt=2**32)
    with pytest.raises(tp.ConfigError, match="num_prompts=.*more rows than int64"):
        dock.add_partition("p", 2**32)
    assert dock.partitions == {}


def test_the_largest_int64_version_is_kept_exactly():
    dock = dock_with_rows(max_staleness=2**63 - 1)
    dock.set_version(2**63 - 1)
    dock.put("p", {"x": np.arange(1)}, rows=[2], version=np.uint64(2**63 - 1))
    batch = dock.get("train", ["x"], 3, "p", timeout=1)
    assert batch.versions.tolist() == [2, 2, 2**63 - 1] and dock.version == 2**63 - 1


def test_a_row_dropped_as_stale_is_not_revived_by_an_append_nor_counted_twice():
    dock = Dock([Column("turns", np.int32, segmented=True)], ["train"], max_staleness=0, on_stale="drop")
    dock.add_partition("p", num_prompts=2)
    dock.append("p", 0, {"turns": [1, 2]}, version=0)
    dock.set_version(1)
    assert dock.stats()["expired"]["dropped"] == 1
    before = snapshot(dock)
    with pytest.raises(tp.ConfigError, match="dropped as stale"):
        dock.append("p", 0, {"turns": [3]}, version=1)
    assert snapshot(dock) == before
    dock.set_version(2)
    assert dock.stats()["expired"]["dropped"] == 1
    assert dock.get("train", ["turns"], 1, "p", timeout=0.05, unfinished=True) is None


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda p: tp.dock.truncate(p, 2**63), "max_length"),
        (lambda p: tp.dock.truncate(p, np.uint64(2**64 - 1)), "max_length"),
        (lambda p: tp.dock.pad(p, multiple_of=2**64), "multiple_of"),
        (lambda p: tp.dock.pad(p, length=2**64), "length"),
        (lambda p: tp.dock.pad(p, length=2**62), "too large"),
        (lambda p: tp.dock.pad(p, multiple_of=2**62), "too large"),
    ],
)
def test_row_helpers_refuse_lengths_past_what_numpy_holds(call, match):
    packed = tp.dock.pack([np.arange(3), np.arange(2)])
    with pytest.raises(tp.ConfigError, match=match):
        call(packed)


# -- bfloat16 and Python values ----------------------------------------------------------------------------


def typed_dock() -> Dock:
    dock = Dock(
        [Column("logit", "bfloat16", shape=(2,)), Column("lp", "bfloat16", ragged=True), Column("prompt", object)],
        ["train"],
    )
    dock.add_partition("p", num_prompts=3)
    return dock


BITS = np.array([[0x3FC0, 0xFF80], [0x7FC1, 0x8000], [0x0001, 0x7F7F]], np.uint16)


def test_bfloat16_columns_hold_bits_and_refuse_numbers_unchanged():
    """Numbers are never cast into a bfloat16 column (float32 to bfloat16 would round): only bits go in."""
    dock = typed_dock()
    before = snapshot(dock)
    for values in (np.ones((3, 2), np.float32), BITS, BITS.astype(np.int16)):
        with pytest.raises(tp.ConfigError, match="column 'logit': dtype .* is not bfloat16: pass bfloat16 values as"):
            dock.put("p", {"logit": values}, rows=range(3))
    with pytest.raises(tp.ConfigError, match="column 'lp': dtype float64 is not bfloat16"):
        dock.put("p", {"lp": [np.ones(2), np.ones(1), np.ones(0)]}, rows=range(3))
    assert snapshot(dock) == before
    bits = BITS.view(tp.dock.BFLOAT16)
    dock.put(
        "p", {"logit": bits, "lp": [bits[0], bits[1, :1], bits[2, :0]], "prompt": ["a", {"b": 1}, None]}, [0, 1, 2]
    )
    batch = dock.get("train", ["logit", "lp", "prompt"], 3, "p")
    assert np.array_equal(batch["logit"].view(np.uint16), BITS)
    assert batch.padded("lp").values.view(np.uint16).tolist() == [[0x3FC0, 0xFF80], [0x7FC1, 0], [0, 0]]
    torch = pytest.importorskip("torch")
    tensors = batch.to_torch()
    assert tensors["logit"].dtype == torch.bfloat16 and tensors["logit"].view(torch.int16).tolist() == BITS.astype(
        np.int16).tolist()  # fmt: skip
    assert tensors["lp"].dtype == torch.bfloat16 and tensors["lp_lengths"].tolist() == [2, 1, 0]
    assert tensors["prompt"] == ["a", {"b": 1}, None]


@pytest.mark.parametrize(
    "value, match",
    [
        ("abc", "holds Python values: pass a list of 3 values, one per row, not str"),
        (["a", "b"], "pass a list of 3 values"),
        (np.array(["a", "b", "c"]), "not ndarray"),
    ],
)
def test_a_python_value_column_takes_one_value_per_row(value, match):
    dock = typed_dock()
    before = snapshot(dock)
    with pytest.raises(tp.ConfigError, match=match):
        dock.put("p", {"prompt": value}, rows=range(3))
    assert snapshot(dock) == before


@pytest.mark.parametrize(
    "column, match",
    [
        (lambda: Column("x", object, ragged=True), "holds one value per row"),
        (lambda: Column("x", object, shape=(2,)), "holds one value per row"),
        (lambda: Column("x", "V2"), "is not a bool, integer or float type"),
        (lambda: Column("x", "U5"), "is not a bool, integer or float type"),
    ],
)
def test_columns_of_other_kinds_are_refused(column, match):
    with pytest.raises(tp.ConfigError, match=match):
        column()

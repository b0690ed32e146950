"""A Python build that reads a store more than OVERSAMPLING_EPOCHS times warns once per store, naming it and the fix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.blend.oversampling import OVERSAMPLING_EPOCHS

CONFIG = tp.GPTSampleConfig(seq_length=8, eod_id=0)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("oversampling")
    rng = np.random.default_rng(5)
    small = build_store(root / "small", [rng.integers(1, 50, 20).tolist() + [0] for _ in range(6)], dtype=np.uint16)
    big = build_store(root / "big", [rng.integers(1, 50, 40).tolist() + [0] for _ in range(200)], dtype=np.uint16)
    return small, big


def _per_epoch(prefix: str) -> int:
    with tp.IndexedDataset(prefix) as store:
        dataset = tp.GPTDataset(store, np.arange(len(store)), 1, CONFIG, seed=1)
        return dataset.samples_per_epoch


def _caught(build) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    return [w for w in caught if issubclass(w.category, tp.OversamplingWarning)]


def test_a_single_store_warns_above_the_threshold_and_not_at_it(stores):
    small, _ = stores
    per_epoch = _per_epoch(small)
    at = int(OVERSAMPLING_EPOCHS) * per_epoch

    def build(n):
        return lambda: tp.build_datasets([small], sizes=(n, 0, 0), config=CONFIG, seed=1, split="1,0,0")

    assert _caught(build(at)) == []
    (warned,) = _caught(build(at + 1))
    message = str(warned.message)
    assert message.startswith(f"{small}: the train split reads it {(at + 1) / per_epoch:,.1f} times over")
    assert f"one epoch of its split holds {per_epoch:,}" in message
    assert "Lower its weight, add data to it" in message and "category=tokenport.OversamplingWarning" in message
    assert warned.filename == __file__  # it points at the caller's line


def test_a_blend_warns_once_for_the_oversampled_store_only(stores, tmp_path):
    small, big = stores
    blend = tp.Blend((small, big), (0.5, 0.5))
    for cache in (None, tmp_path / "cache"):  # the cached one-entry path too
        caught = _caught(
            lambda cache=cache: tp.build_datasets(
                blend, sizes=(600, 200, 0), config=CONFIG, seed=1, split="8,2,0", cache=cache
            )
        )
        assert len(caught) == 1, [str(w.message) for w in caught]  # the valid blend's repeats are not flagged
        assert str(caught[0].message).startswith(f"{small}: the train split's blend reads it")
    assert _caught(lambda: tp.build_datasets(blend, sizes=(40, 0, 0), config=CONFIG, seed=1, split="1,0,0")) == []


def test_a_blended_dataset_made_directly_warns(stores):
    small, big = stores
    children = []
    for prefix, n in ((small, 300), (big, 300)):
        store = tp.IndexedDataset(prefix)
        children.append(tp.GPTDataset(store, np.arange(len(store)), n, CONFIG, seed=1))
    (warned,) = _caught(lambda: tp.BlendedDataset(children, [0.5, 0.5], 600))
    assert str(warned.message).startswith(f"{small}: the blend reads it") and warned.filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=tp.OversamplingWarning)  # the silencing the message gives
        tp.BlendedDataset(children, [0.5, 0.5], 600)

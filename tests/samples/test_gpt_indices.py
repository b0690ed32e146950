"""GPT indices equal to the real peer's: megatron-core GPTDataset's document, sample and shuffle indices."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.samples.gpt import build_indices

pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gpt_dataset = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    from megatron.core.datasets.utils import Split

GPTDataset = gpt_dataset.GPTDataset

REGIMES = ("below_one_epoch", "one_epoch", "final_epoch_apart", "final_epoch_joined")
CASES_PER_REGIME = 60


class _Peer:
    """Exactly the attributes and methods GPTDataset's own index builder reads, with no cache."""

    build = GPTDataset._build_document_sample_shuffle_indices
    _get_num_tokens_per_epoch = GPTDataset._get_num_tokens_per_epoch
    _get_num_epochs = GPTDataset._get_num_epochs

    def __init__(
        self,
        lengths: np.ndarray,
        num_samples: int,
        seq_length: int,
        seed: int,
        add_extra: bool,
        drop_last: bool,
        split: Split,
    ) -> None:
        self.dataset = types.SimpleNamespace(sequence_lengths=lengths.astype(np.int32))
        self.indices = np.arange(len(lengths), dtype=np.int32)
        self.num_samples = num_samples
        self.index_split = split
        self.config = types.SimpleNamespace(
            defer_npy_index_mmap=False,
            path_to_cache=None,
            mock=True,
            fast_cache_load=False,
            sequence_length=seq_length,
            random_seed=seed,
            add_extra_token_to_sequence=add_extra,
            drop_last_partial_validation_sequence=drop_last,
        )


def _megatron_indices(lengths, num_samples, seq_length, seed, add_extra, drop_last, split):
    """Run megatron's GPTDataset index builder on the given split lengths."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Peer(lengths, num_samples, seq_length, seed, add_extra, drop_last, split).build()


def _assert_same(ours, theirs) -> None:
    """Assert the three index arrays are equal in values, shapes and dtypes."""
    for name, a, b in zip(("document_index", "sample_index", "shuffle_index"), ours, theirs):
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b), name


def _lengths(rng: np.random.Generator, shape: str, count: int, allow_empty: bool) -> np.ndarray:
    """Document lengths of one of several distributions."""
    if shape == "constant":
        lengths = np.full(count, int(rng.integers(1, 300)))
    elif shape == "lognormal":
        lengths = np.maximum(1, rng.lognormal(4.0, 1.2, count).astype(np.int64))
    else:
        lengths = np.where(rng.random(count) < 0.6, 1, rng.integers(1, 80, count))
    if allow_empty and rng.random() < 0.3:
        lengths[rng.random(count) < 0.05] = 0
        lengths[0] = max(lengths[0], 1)
    return lengths.astype(np.int32)


def _seq_length(rng: np.random.Generator, lengths: np.ndarray) -> int:
    """A sequence length from 1 to beyond the longest document."""
    choice = int(rng.integers(4))
    if choice == 0:
        return 1
    if choice == 1:
        return int(rng.integers(2, 9))
    if choice == 2:
        return int(rng.integers(9, 300))
    return int(lengths.max()) + int(rng.integers(1, 100))


def _num_samples(rng: np.random.Generator, regime: str, tokens: int, seq_length: int, extra: int) -> int:
    """A sample count that lands in the regime (below, at, or across epochs; final epoch apart or not)."""
    per_epoch = (tokens - extra) // seq_length
    if regime == "below_one_epoch":
        return max(1, int(per_epoch * rng.uniform(0.05, 0.95)))
    if regime == "one_epoch":
        return max(1, per_epoch)
    epochs = int(rng.integers(1, 5))
    fraction = rng.uniform(0.02, 0.6) if regime == "final_epoch_apart" else rng.uniform(0.85, 0.99)
    return max(1, int((epochs + fraction) * per_epoch))


def _case(index: int, regime: str) -> dict:
    """One random configuration, reproducible from its index."""
    rng = np.random.default_rng([index, REGIMES.index(regime)])
    drop_last = bool(rng.random() < 0.6)
    shape = ("constant", "lognormal", "many_single_tokens")[index % 3]
    lengths = _lengths(rng, shape, int(rng.integers(1, 1500)), allow_empty=drop_last)
    seq_length = _seq_length(rng, lengths)
    if seq_length == 1:
        lengths = lengths[:200]
    add_extra = bool(rng.random() < 0.5)
    tokens = int(lengths.sum())
    return dict(
        lengths=lengths,
        num_samples=_num_samples(rng, regime, tokens, seq_length, int(add_extra)),
        seq_length=seq_length,
        seed=int(rng.integers(0, 2**32)),
        add_extra=add_extra,
        drop_last=drop_last,
        split=Split.valid if not drop_last or rng.random() < 0.5 else Split.train,
    )


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("index", range(CASES_PER_REGIME))
def test_indices_equal_megatron(index: int, regime: str) -> None:
    case = _case(index, regime)
    drop_last = case["drop_last"] or case["split"] != Split.valid
    ours = build_indices(
        case["lengths"],
        case["num_samples"],
        case["seq_length"],
        case["seed"],
        add_extra_token=case["add_extra"],
        drop_last_partial=drop_last,
    )
    _assert_same(ours, _megatron_indices(**case))


@pytest.mark.parametrize(
    "lengths, num_samples, seq_length",
    [
        ([1], 1, 1),
        ([1], 7, 1),
        ([2], 9, 1),
        ([5], 3, 2),
        ([1, 1], 40, 3),
        ([100], 1, 1000),
        ([3, 0, 4], 5, 2),
        ([7], 1, 7),
        ([7], 1, 6),
        ([1] * 50, 49, 1),
        ([1] * 50, 50, 1),
    ],
)
@pytest.mark.parametrize("add_extra", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_tiny_splits_equal_megatron(lengths, num_samples, seq_length, add_extra, drop_last) -> None:
    lengths = np.array(lengths, dtype=np.int32)
    ours = build_indices(lengths, num_samples, seq_length, 5, add_extra_token=add_extra, drop_last_partial=drop_last)
    _assert_same(ours, _megatron_indices(lengths, num_samples, seq_length, 5, add_extra, drop_last, Split.valid))


def test_partial_sample_count_uses_single_precision_like_megatron() -> None:
    lengths = np.array([1024] * 20000 + [2], dtype=np.int32)  # 20,480,002 tokens: beyond float32's exact range
    ours = build_indices(lengths, 4000, 4096, 7, add_extra_token=True, drop_last_partial=False)
    _assert_same(ours, _megatron_indices(lengths, 4000, 4096, 7, True, False, Split.valid))
    assert ours[1].shape[0] - 1 == 5000  # exact arithmetic would give 5001


def _write_store(prefix, lengths: np.ndarray, rng: np.random.Generator) -> None:
    """Write a token store whose sequences have the given lengths."""
    build_store(prefix, rng.integers(1, 1000, int(lengths.sum())), lengths=lengths, dtype=np.uint16)


@pytest.mark.parametrize(
    "seed, add_extra, drop_last, epochs",
    [
        (0, True, True, 0.5),
        (1, False, True, 3.3),
        (2, True, False, 2.9),
        (3, False, False, 1.0),
        (4, True, True, 5.1),
    ],
)
def test_indices_equal_a_real_gpt_dataset_over_a_tokenport_store(tmp_path, seed, add_extra, drop_last, epochs) -> None:
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(3.5, 1.0, 900)).astype(np.int32)
    _write_store(tmp_path / "store", lengths, rng)
    start, stop, seq_length = 300, 750, 64
    num_samples = max(1, int(epochs * int(lengths[start:stop].sum()) / seq_length))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = gpt_dataset.GPTDatasetConfig(
            random_seed=seed,
            sequence_length=seq_length,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            add_extra_token_to_sequence=add_extra,
            drop_last_partial_validation_sequence=drop_last,
            tokenizer=types.SimpleNamespace(vocab_size=1000, eod=0, pad=-1, unique_identifiers={}),
        )
        theirs = GPTDataset(
            MegatronIndexedDataset(str(tmp_path / "store")),
            str(tmp_path / "store"),
            np.arange(start, stop, dtype=np.int32),
            num_samples,
            Split.valid,
            config,
        )
    document_index, sample_index, shuffle_index = build_indices(
        tp.IndexedDataset(tmp_path / "store").sequence_lengths[start:stop],
        num_samples,
        seq_length,
        seed,
        add_extra_token=add_extra,
        drop_last_partial=drop_last,
    )
    _assert_same(
        (document_index + start, sample_index, shuffle_index),
        (theirs.document_index, theirs.sample_index, theirs.shuffle_index),
    )


@pytest.mark.parametrize(
    "arguments, named",
    [
        (([], 10, 8, 0), "sequence_lengths"),
        (([0, 0], 10, 8, 0), "sequence_lengths"),
        (([3, -1], 10, 8, 0), "sequence_lengths"),
        (([1.5, 2.0], 10, 8, 0), "sequence_lengths"),
        (([[1, 2]], 10, 8, 0), "sequence_lengths"),
        (([5], 0, 8, 0), "num_samples"),
        (([5], -3, 8, 0), "num_samples"),
        (([5], 2.0, 8, 0), "num_samples"),
        (([5], 10, 0, 0), "seq_length"),
        (([5], 10, -8, 0), "seq_length"),
        (([5], 10, True, 0), "seq_length"),
        (([5], 10, 8, 1.5), "seed"),
        (([5], 10, 8, "1"), "seed"),
        (([5], 10, 8, -1), "seed"),
        (([5], 10, 8, 2**32), "seed"),
    ],
)
def test_bad_input_raises_config_error_naming_the_argument(arguments, named) -> None:
    lengths, *rest = arguments
    with pytest.raises(tp.ConfigError, match=named):
        build_indices(np.array(lengths), *rest)


def test_bad_threshold_raises_config_error() -> None:
    with pytest.raises(tp.ConfigError, match="separate_final_epoch_threshold"):
        build_indices(np.array([5, 6]), 10, 2, 0, separate_final_epoch_threshold=1.5)


def test_partial_sample_ending_in_an_empty_document_raises_a_clear_error() -> None:
    lengths = np.array([3, 0, 4], dtype=np.int32)  # seed 1 shuffles the empty document last
    with pytest.raises(AssertionError):  # Megatron's walk writes offset -1, then a bare assert trips
        _megatron_indices(lengths, 1, 4, 1, True, False, Split.valid)
    with pytest.raises(tp.InputDataError, match="empty"):
        build_indices(lengths, 1, 4, 1, add_extra_token=True, drop_last_partial=False)

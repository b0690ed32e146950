"""GPT samples equal to the real peer's: megatron-core GPTDataset.__getitem__ over the same token store."""

from __future__ import annotations

import itertools
import types
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.errors import InputDataError
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig

pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gpt_dataset = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    from megatron.core.datasets.utils import Split

EOD = 2
PAD = 1  # also a real token of the store: Megatron masks and zeroes it there too
NUM_SEQUENCES = 160
TRAIN = np.arange(0, 120)
VALID = np.arange(120, NUM_SEQUENCES)
SAMPLES_COMPARED = 60
FLAGS = list(itertools.product((False, True), repeat=3))  # reset_position_ids, reset_attention_mask, eod_mask_loss


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A uint16 store of random documents ending in EOD; some documents span several sequences."""
    rng = np.random.default_rng(7)

    def documents():
        written = 0
        while written < NUM_SEQUENCES:
            length = int(rng.integers(1, 200))
            tokens = rng.integers(0, 60000, length)
            tokens[tokens == EOD] = 3
            tokens[rng.random(length) < 0.02] = PAD
            tokens[-1] = EOD
            if length > 1 and written < NUM_SEQUENCES - 1 and rng.random() < 0.2:
                cut = int(rng.integers(1, length))
                yield Doc(tokens, lengths=[cut, length - cut])
                written += 2
            else:
                yield tokens
                written += 1

    prefix = build_store(tmp_path_factory.mktemp("gpt_samples") / "store", documents(), dtype=np.uint16)
    assert len(tp.IndexedDataset(prefix)) == NUM_SEQUENCES
    return prefix


def _pair(store, indices, num_samples, config: GPTSampleConfig, seed, split):
    """Our GPTDataset and megatron's real GPTDataset over the same store, split and config."""
    drop_last = split != Split.valid
    case = dict(vars(config), seed=seed, split=split.name, num_samples=num_samples)
    tokenizer = types.SimpleNamespace(eod=config.eod_id, vocab_size=None, unique_identifiers=case)
    if config.pad_id is not None:
        tokenizer.pad = config.pad_id
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        megatron_config = gpt_dataset.GPTDatasetConfig(
            random_seed=seed,
            sequence_length=config.seq_length,
            blend=([store], None),
            split="1,1,1",
            path_to_cache=None,
            tokenizer=tokenizer,
            reset_position_ids=config.reset_position_ids,
            reset_attention_mask=config.reset_attention_mask,
            eod_mask_loss=config.eod_mask_loss,
            create_attention_mask=config.create_attention_mask,
            add_extra_token_to_sequence=config.add_extra_token,
            drop_last_partial_validation_sequence=drop_last,
        )
        assert not megatron_config.mock
        theirs = gpt_dataset.GPTDataset(
            MegatronIndexedDataset(store), store, indices.copy(), num_samples, split, megatron_config
        )
    ours = GPTDataset(tp.IndexedDataset(store), indices, num_samples, config, seed, drop_last_partial=drop_last)
    return ours, theirs


def _assert_samples_equal(ours: GPTDataset, theirs) -> None:
    """Every sample's Megatron fields are equal in values, dtypes and shapes.

    Up to SAMPLES_COMPARED samples are compared, always the last sample of the stream (the
    short one when kept). Megatron's mask cache (no reset flags) keeps the first sample's
    pad-label loss zeros, as its in-place write reaches the cached loss mask; each sample is
    compared uncached.
    """
    assert len(ours) == len(theirs)
    assert np.array_equal(ours.document_index, theirs.document_index)
    chosen = np.random.default_rng(len(ours)).choice(len(ours), min(len(ours), SAMPLES_COMPARED), replace=False)
    for i in np.union1d(chosen, [int(np.argmax(ours.shuffle_index))]).tolist():
        mine = ours[i]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs.masks_and_position_ids_are_cached = False
            peer = {name: tensor.numpy() for name, tensor in theirs[i].items()}
        assert set(mine) == set(peer) | {"cu_seqlens", "max_seqlen"}, i
        for name, value in peer.items():
            assert mine[name].dtype == value.dtype, (i, name)
            assert np.array_equal(mine[name], value), (i, name)


def _config(seq_length, flags, add_extra, pad, create_mask=False) -> GPTSampleConfig:
    """A sample config from the three reset/mask flags and the rest."""
    reset_position_ids, reset_attention_mask, eod_mask_loss = flags
    return GPTSampleConfig(
        seq_length=seq_length,
        eod_id=EOD,
        pad_id=pad,
        add_extra_token=add_extra,
        reset_position_ids=reset_position_ids,
        reset_attention_mask=reset_attention_mask,
        eod_mask_loss=eod_mask_loss,
        create_attention_mask=create_mask,
    )


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("add_extra", (True, False))
@pytest.mark.parametrize("pad", (PAD, None))
def test_train_samples_equal_megatron(store, flags, add_extra, pad):
    """Training split, several epochs' worth of samples, seeds and lengths (1 to beyond any document)."""
    for seed, seq_length, num_samples in ((0, 1, 40), (5, 37, 300), (11, 256, 60), (123, 900, 25)):
        ours, theirs = _pair(store, TRAIN, num_samples, _config(seq_length, flags, add_extra, pad), seed, Split.train)
        _assert_samples_equal(ours, theirs)


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("add_extra", (True, False))
@pytest.mark.parametrize("pad", (PAD, None))
def test_padded_validation_samples_equal_megatron(store, flags, add_extra, pad):
    """Validation split keeping its short last sample, which Megatron fills with pad tokens."""
    lengths = tp.IndexedDataset(store).sequence_lengths[VALID]
    for seed, seq_length in ((1, 13), (9, 250), (3, 5000)):
        ours, theirs = _pair(store, VALID, 1, _config(seq_length, flags, add_extra, pad), seed, Split.valid)
        assert len(ours) * seq_length + add_extra > int(lengths.sum()), "the last sample must be short"
        _assert_samples_equal(ours, theirs)


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("add_extra", (True, False))
def test_attention_masks_equal_megatron(store, flags, add_extra):
    """The dense (1, S, S) mask, True = masked, with and without document resets."""
    for seed, seq_length, split, indices in ((2, 48, Split.train, TRAIN), (4, 300, Split.valid, VALID)):
        config = _config(seq_length, flags, add_extra, PAD, create_mask=True)
        ours, theirs = _pair(store, indices, 20, config, seed, split)
        _assert_samples_equal(ours, theirs)


def _reference_cu_seqlens(tokens: np.ndarray, width: int) -> np.ndarray:
    """Boundaries after each EOD inside the window, then its end, padded with its end."""
    bounds = [0] + [k + 1 for k, token in enumerate(tokens[:-1]) if token == EOD] + [len(tokens)]
    return np.array(bounds + [len(tokens)] * (width - len(bounds)), dtype=np.int32)


@pytest.mark.parametrize("seq_length", (1, 2, 64, 700))
def test_cu_seqlens_match_reference(store, seq_length):
    """cu_seqlens and max_seqlen equal a slow walk over each sample's tokens."""
    config = _config(seq_length, (False, False, False), True, PAD)
    ours = GPTDataset(tp.IndexedDataset(store), VALID, 200, config, 3, drop_last_partial=False)
    for i in range(len(ours)):
        sample = ours[i]
        expected = _reference_cu_seqlens(sample["tokens"], seq_length + 1)
        assert sample["cu_seqlens"].dtype == np.int32
        assert np.array_equal(sample["cu_seqlens"], expected), i
        assert sample["max_seqlen"] == np.diff(expected).max()


def test_short_cu_seqlens_length(store):
    """A smaller cu_seqlens_length keeps the boundaries when they fit and refuses when they do not."""
    dataset = tp.IndexedDataset(store)
    full = GPTDataset(dataset, TRAIN, 50, _config(64, (False, False, False), True, PAD), 0)
    counts = np.array([int((full[i]["tokens"][:-1] == EOD).sum()) for i in range(len(full))])
    width = int(counts.max()) + 2
    fitted = GPTDataset(dataset, TRAIN, 50, GPTSampleConfig(64, EOD, PAD, cu_seqlens_length=width), 0)
    for i in range(len(full)):
        assert np.array_equal(fitted[i]["cu_seqlens"], full[i]["cu_seqlens"][:width])
    short = GPTDataset(dataset, TRAIN, 50, GPTSampleConfig(64, EOD, PAD, cu_seqlens_length=width - 1), 0)
    with pytest.raises(InputDataError, match="cu_seqlens_length"):
        short.get_batch(np.arange(len(short)))


@pytest.mark.parametrize("create_mask", (False, True))
def test_get_batch_equals_stacked_samples(store, create_mask):
    """get_batch equals stacking ds[i], for every field, in any order with repeats."""
    config = _config(40, (True, True, True), True, PAD, create_mask)
    ours = GPTDataset(tp.IndexedDataset(store), VALID, 1, config, 8, drop_last_partial=False)
    ids = np.random.default_rng(0).integers(0, len(ours), 32)
    batch = ours.get_batch(ids)
    for name, stacked in batch.items():
        expected = np.stack([ours[int(i)][name] for i in ids])
        assert stacked.dtype == expected.dtype, name
        assert np.array_equal(stacked, expected), name
    with pytest.raises(IndexError):
        ours.get_batch([len(ours)])


@pytest.mark.parametrize("flags", [(False, False, False), (True, True, True), (True, False, True)])
@pytest.mark.parametrize("add_extra", (True, False))
@pytest.mark.parametrize("create_mask", (False, True))
def test_pread_stores_give_the_memory_mapped_samples(store, flags, add_extra, create_mask):
    """Without a memory map the windows are read piece by piece; every field is the same."""
    config = _config(48, flags, add_extra, PAD, create_mask)
    mapped = GPTDataset(tp.IndexedDataset(store), VALID, 30, config, 3, drop_last_partial=False)
    read = GPTDataset(tp.IndexedDataset(store, mode="pread"), VALID, 30, config, 3, drop_last_partial=False)
    assert read.dataset.token_array() is None and mapped.dataset.token_array() is not None
    ids = np.arange(len(mapped))
    expected, batch = mapped.get_batch(ids), read.get_batch(ids)
    assert set(batch) == set(expected)
    for name, value in expected.items():
        assert batch[name].dtype == value.dtype and np.array_equal(batch[name], value), name
    for i in (0, len(read) - 1):
        for name, value in read[i].items():
            assert np.array_equal(value, expected[name][i]), (i, name)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("seq_length", dict(seq_length=0)),
        ("eod_id", dict(eod_id=-1)),
        ("pad_id", dict(pad_id=EOD)),
        ("pad_id", dict(pad_id=1.5)),
        ("reset_position_ids", dict(reset_position_ids=1)),
        ("create_attention_mask", dict(create_attention_mask="yes")),
        ("cu_seqlens_length", dict(cu_seqlens_length=1)),
        ("cu_seqlens_length", dict(cu_seqlens_length=66)),
    ],
)
def test_config_errors_name_the_field(field, kwargs):
    """A bad field raises ConfigError naming it."""
    with pytest.raises(tp.ConfigError, match=field):
        GPTSampleConfig(**{"seq_length": 64, "eod_id": EOD, **kwargs})


def test_config_default_cu_seqlens_length():
    """cu_seqlens_length defaults to seq_length + 1, the most boundaries a window can hold."""
    assert GPTSampleConfig(seq_length=64, eod_id=EOD).cu_seqlens_length == 65


def test_bad_indices_raise(store):
    """Split ids outside the store raise ConfigError."""
    with pytest.raises(tp.ConfigError, match="indices"):
        GPTDataset(tp.IndexedDataset(store), np.array([0, NUM_SEQUENCES]), 10, GPTSampleConfig(8, EOD), 0)

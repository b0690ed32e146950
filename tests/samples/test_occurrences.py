"""occurrences(store, document): the inverse of lineage, equal to a brute-force forward scan, for every kind."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.errors import ConfigError, CorruptStoreError
from tokenport.samples.lineage import Occurrences


def scan(dataset, store: str, document: int) -> Occurrences:
    """The forward answer: every piece of every sample's lineage that holds ``document`` of ``store``."""
    rows = []
    for i in range(len(dataset)):
        lineage = dataset.lineage(i)
        if lineage.store != store:
            continue
        offset = 0
        for k, (doc, start, end) in enumerate(lineage.pieces):
            if doc == document:
                rows.append((i, k, offset, start, end))
            offset += end - start
    if not rows:
        return Occurrences.empty()
    return Occurrences(*(np.array(column, dtype=np.int64) for column in zip(*rows)))


def check_all(dataset, store: str, documents) -> int:
    """Compare occurrences with the scan for each document; return how many places were found in all."""
    found = 0
    for document in documents:
        got = dataset.occurrences(store, int(document))
        want = scan(dataset, store, int(document))
        assert got == want, (document, got.rows()[:5], want.rows()[:5])
        found += len(got)
    return found


def random_store(prefix, rng: np.random.Generator, *, documents: int, longest: int, empty: bool = False, masks=False):
    """A byte-tokenizer store of random documents (some empty when ``empty``; with loss masks when ``masks``)."""
    drawn = list(random_documents(rng, documents, tokens=(0, 256), length=(1, longest), append=256))
    if empty:
        for k in rng.choice(documents, max(1, documents // 8), replace=False).tolist():
            drawn[k] = np.zeros(0, dtype=np.int64)
    if masks:
        drawn = [Doc(d, mask=(np.arange(len(d)) >= len(d) // 3).astype(np.uint8)) for d in drawn]
    return tp.IndexedDataset(build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), masks=masks))


@pytest.mark.parametrize("seed", range(8))
def test_gpt_occurrences_equal_the_forward_scan(tmp_path, seed):
    rng = np.random.default_rng(seed)
    store = random_store(tmp_path / "s", rng, documents=40, longest=int(rng.choice([8, 60, 300])), empty=seed % 2 == 1)
    n = len(store)
    split = int(rng.integers(n // 2, n))
    indices = np.arange(0, split) if seed % 3 else np.arange(n - split, n)
    extra = bool(rng.integers(2))
    seq_length = int(rng.choice([4, 16, 33, 128]))
    tokens = int(store.sequence_lengths[indices].sum())
    epochs = float(rng.choice([0.3, 1.0, 2.5, 4.2]))
    num_samples = max(1, int(epochs * tokens / seq_length))
    config = tp.GPTSampleConfig(seq_length, add_extra_token=extra)
    dataset = tp.GPTDataset(store, indices, num_samples, config, seed=seed, drop_last_partial=bool(seed % 4))
    prefix = str(store.prefix)
    assert check_all(dataset, prefix, range(n)) > 0  # every document: sampled ones, never-sampled ones (empty)
    outside = [d for d in range(n) if d not in set(indices.tolist())]
    for document in outside:  # a document of the other split is never in these samples
        assert len(dataset.occurrences(prefix, document)) == 0


def test_gpt_separate_final_epoch_and_sample_spanning_documents(tmp_path):
    store = random_store(tmp_path / "s", np.random.default_rng(5), documents=30, longest=200)
    tokens = int(store.sequence_lengths.sum())
    config = tp.GPTSampleConfig(24)
    per_epoch = (tokens - 1) // 24
    dataset = tp.GPTDataset(store, np.arange(30), 2 * per_epoch + 3, config, seed=9)  # a small final epoch
    assert len(dataset.document_index) == 90  # three epochs, the last shuffled apart
    prefix = str(store.prefix)
    longest = int(np.argmax(store.sequence_lengths))
    assert len(dataset.occurrences(prefix, longest)) >= 3 * (int(store.sequence_lengths[longest]) // 24)
    check_all(dataset, prefix, range(30))


def test_gpt_occurrences_survive_from_indices(tmp_path):
    store = random_store(tmp_path / "s", np.random.default_rng(2), documents=20, longest=50)
    config = tp.GPTSampleConfig(16)
    built = tp.GPTDataset(store, np.arange(20), 100, config, seed=1)
    again = tp.GPTDataset.from_indices(
        store, np.arange(20), built.document_index, built.sample_index, built.shuffle_index, config
    )
    for document in range(20):
        assert again.occurrences(str(store.prefix), document) == built.occurrences(str(store.prefix), document)


def test_gpt_a_damaged_shuffle_is_refused(tmp_path):
    store = random_store(tmp_path / "s", np.random.default_rng(2), documents=20, longest=50)
    config = tp.GPTSampleConfig(16)
    built = tp.GPTDataset(store, np.arange(20), 100, config, seed=1)
    shuffle = built.shuffle_index.copy()
    shuffle[1] = shuffle[0]  # a row read twice, another never: lineage would not say so
    damaged = tp.GPTDataset.from_indices(
        store, np.arange(20), built.document_index, built.sample_index, shuffle, config
    )
    with pytest.raises(CorruptStoreError, match="shuffle_index"):
        damaged.occurrences(str(store.prefix), 0)


@pytest.mark.parametrize("seed", range(6))
def test_packed_occurrences_equal_the_forward_scan(tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    store = random_store(tmp_path / "s", rng, documents=50, longest=int(rng.choice([30, 150])))
    n = len(store)
    ids = None if seed % 2 else rng.choice(n, n // 2, replace=False)
    dataset = tp.PackedDataset(
        store,
        int(rng.choice([64, 100])),
        ids=ids,
        too_long="split",
        seed=None if seed == 3 else seed,
        window=None if seed % 3 else 16,
    )
    assert check_all(dataset, str(store.prefix), range(n)) > 0


@pytest.mark.parametrize("seed", range(6))
def test_sft_occurrences_equal_the_forward_scan(tmp_path, seed):
    rng = np.random.default_rng(200 + seed)
    store = random_store(tmp_path / "c", rng, documents=40, longest=int(rng.choice([40, 160])), masks=True)
    n = len(store)
    dataset = tp.SFTDataset(
        store,
        int(rng.choice([48, 96])),
        seed=None if seed == 3 else seed,
        too_long=["truncate", "drop", "split"][seed % 3],
        packing="none" if seed == 4 else "bfd",
        num_samples=None if seed % 2 else int(rng.integers(10, 120)),  # several epochs of bins
    )
    check_all(dataset, str(store.prefix), range(n))


@pytest.mark.parametrize(
    ("store", "document", "match"),
    [
        ("nowhere", 0, "store='nowhere'"),
        (None, 0, "store=None"),
        ("STORE", 10**6, "document=1000000"),
        ("STORE", -1, "document=-1"),
        ("STORE", True, "document=True"),
        ("STORE", 1.0, "document=1.0"),
        ("STORE", "3", "document='3'"),
    ],
)
def test_hostile_arguments_are_refused_naming_them(tmp_path, store, document, match):
    tokens = random_store(tmp_path / "s", np.random.default_rng(0), documents=10, longest=20)
    prefix = str(tokens.prefix)
    datasets = [
        tp.GPTDataset(tokens, np.arange(10), 20, tp.GPTSampleConfig(8), seed=0),
        tp.PackedDataset(tokens, 64, too_long="split", seed=0),
    ]
    for dataset in datasets:
        with pytest.raises(ConfigError, match=match.replace("STORE", prefix)):
            dataset.occurrences(prefix if store == "STORE" else store, document)


def test_the_inverse_is_not_pickled(tmp_path):
    import pickle

    store = random_store(tmp_path / "s", np.random.default_rng(3), documents=20, longest=50)
    datasets = [
        tp.GPTDataset(store, np.arange(20), 200, tp.GPTSampleConfig(16), seed=1),
        tp.PackedDataset(store, 64, too_long="split", seed=0),
    ]
    for dataset in datasets:
        before = len(pickle.dumps(dataset))
        answer = dataset.occurrences(str(store.prefix), 4)
        assert dataset._inverse is not None
        assert len(pickle.dumps(dataset)) == before  # a loader worker's copy stays as small as it was
        again = pickle.loads(pickle.dumps(dataset))
        assert again.occurrences(str(again.store.prefix), 4) == answer


def test_train_and_valid_splits_of_built_datasets(tmp_path):
    # documents of the valid split are never in the train samples, and the other way round
    rng = np.random.default_rng(11)
    first = random_store(tmp_path / "a", rng, documents=40, longest=80)
    second = random_store(tmp_path / "b", rng, documents=30, longest=80)
    train, valid, _ = tp.build_datasets(
        ["0.6", str(first.prefix), "0.4", str(second.prefix)],
        sizes=(300, 40, 0),
        config=tp.GPTSampleConfig(32),
        seed=5,
        split="8,2,0",
        cache=str(tmp_path / "cache"),
    )
    for store in (first, second):
        prefix = str(store.prefix)
        in_train = in_valid = 0
        for document in range(len(store)):
            a, b = train.occurrences(prefix, document), valid.occurrences(prefix, document)
            assert a == scan(train, prefix, document) and b == scan(valid, prefix, document)
            assert not (len(a) and len(b))  # a document belongs to one split
            in_train, in_valid = in_train + bool(len(a)), in_valid + bool(len(b))
        assert in_train and in_valid


@pytest.mark.parametrize("field", ["position", "offset", "document"])
def test_gpt_damaged_indices_are_refused(tmp_path, field):
    store = random_store(tmp_path / "s", np.random.default_rng(2), documents=20, longest=50)
    config = tp.GPTSampleConfig(16)
    built = tp.GPTDataset(store, np.arange(20), 100, config, seed=1)
    document_index, sample_index = built.document_index.copy(), built.sample_index.copy()
    if field == "position":
        sample_index[5, 0] = len(document_index) + 3
    elif field == "offset":
        sample_index[5, 1] = 10**6  # past the end of its document
    else:
        document_index[3] = len(store) + 1
    shuffle_index = built.shuffle_index
    damaged = tp.GPTDataset.from_indices(store, np.arange(20), document_index, sample_index, shuffle_index, config)
    with pytest.raises(CorruptStoreError, match="delete their cache entry"):
        damaged.occurrences(str(store.prefix), 0)
    assert damaged._inverse is None  # nothing kept from a refused build


def test_a_kind_that_cannot_say_is_refused(tmp_path):
    store = random_store(tmp_path / "s", np.random.default_rng(1), documents=5, longest=20)

    class Plain(tp.SampleDataset):
        def __len__(self):
            return 3

        def stores(self):
            return (store,)

    with pytest.raises(ConfigError, match="cannot say which samples hold a document"):
        Plain().occurrences(str(store.prefix), 0)
    with pytest.raises(ConfigError, match="store="):
        Plain().occurrences("elsewhere", 0)


def test_gpt_inverse_in_int64_equals_int32(tmp_path, monkeypatch):
    # past 2**31 positions or samples the lookups are int64; forced here on a small dataset
    from tokenport.samples import inverse

    store = random_store(tmp_path / "s", np.random.default_rng(8), documents=30, longest=90, empty=True)
    config = tp.GPTSampleConfig(20, add_extra_token=False)
    narrow = tp.GPTDataset(store, np.arange(30), 400, config, seed=2)
    wide = tp.GPTDataset(store, np.arange(30), 400, config, seed=2)
    monkeypatch.setattr(inverse, "_index_dtype", lambda counts: np.int64)
    prefix = str(store.prefix)
    assert check_all(wide, prefix, range(30)) > 0
    assert wide._inverse.by_document.dtype == wide._inverse.sample_of_row.dtype == np.int64
    monkeypatch.undo()
    for document in range(30):
        assert narrow.occurrences(prefix, document) == wide.occurrences(prefix, document)
    assert narrow._inverse.by_document.dtype == np.int32

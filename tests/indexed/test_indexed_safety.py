"""Corrupt files are rejected clearly; a writer that dies leaves nothing and damages nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.indexed import commit


@pytest.fixture
def store(tmp_path):
    prefix = tmp_path / "s"
    documents = [Doc(np.arange(k + 1), lengths=[k // 2 + 1, k - k // 2] if k else None) for k in range(50)]
    build_store(prefix, documents, dtype=np.uint16)
    return prefix


def _patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _open_and_read(prefix, mode="mmap"):
    ds = tp.IndexedDataset(prefix, mode=mode)
    return [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_flipped_magic(store, mode):
    _patch(f"{store}.idx", 0, b"XX")
    with pytest.raises(tp.CorruptStoreError, match=r"s\.idx: bad magic"):
        _open_and_read(store, mode)


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_truncated_idx(store, mode):
    os.truncate(f"{store}.idx", os.path.getsize(f"{store}.idx") - 5)
    with pytest.raises(tp.CorruptStoreError, match="truncated"):
        _open_and_read(store, mode)
    os.truncate(f"{store}.idx", 10)
    with pytest.raises(tp.CorruptStoreError, match="shorter than the 34-byte"):
        _open_and_read(store, mode)


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_short_bin(store, mode):
    os.truncate(f"{store}.bin", os.path.getsize(f"{store}.bin") - 2)
    with pytest.raises(tp.CorruptStoreError, match=r"s\.bin: has .* truncated"):
        _open_and_read(store, mode)


def test_wrong_dtype_code(store):
    _patch(f"{store}.idx", 17, bytes([9]))
    with pytest.raises(tp.CorruptStoreError, match="unknown dtype code 9"):
        _open_and_read(store)


def test_wrong_version(store):
    _patch(f"{store}.idx", 9, (2).to_bytes(8, "little"))
    with pytest.raises(tp.CorruptStoreError, match="version 2"):
        _open_and_read(store)


def test_missing_files(tmp_path, store):
    with pytest.raises(tp.StorageError, match="nope.idx: file not found"):
        tp.IndexedDataset(tmp_path / "nope")
    os.unlink(f"{store}.bin")
    with pytest.raises(tp.StorageError, match=r"s\.bin: file not found"):
        tp.IndexedDataset(store)


def _offsets(store):
    with tp.IndexedDataset(store) as ds:
        return ds.header.lengths_offset, ds.header.pointers_offset, ds.header.documents_offset


@pytest.mark.parametrize("numba_pass", [False, True])
@pytest.mark.parametrize("mode", ["mmap", "pread"])
@pytest.mark.parametrize(
    "field, index, value, message",
    [
        ("lengths", 3, -2, "sequence_lengths: sequence 3 has negative length -2"),
        ("lengths", 7, 2**31 - 1, "sequence_pointers: sequence 8 points at byte"),
        ("pointers", 5, 10**12, "sequence_pointers: sequence 5 points at byte 1000000000000"),
        ("pointers", 0, -4, "sequence_pointers: sequence 0 points at byte -4"),
        ("documents", 4, 10**6, "document_indices: document index 5 .* below"),
        ("documents", 0, 1, "document_indices must start with 0"),
    ],
)
def test_a_bad_pointer_or_length_is_refused_on_first_use(
    store, mode, field, index, value, message, numba_pass, monkeypatch
):
    """Every read path (ds[i], get, get_many, GPT samples) refuses an index whose pointers and
    lengths disagree; before, a negative length returned other tokens and 2**31-1 crashed the kernel.
    Small indexes are checked with numpy, large ones with numba: both passes are tried here."""
    from tokenport.indexed import bounds

    if numba_pass:
        monkeypatch.setattr(bounds, "KERNEL_FROM", 0)
    lengths_at, pointers_at, documents_at = _offsets(store)
    at, size = {"lengths": (lengths_at, 4), "pointers": (pointers_at, 8), "documents": (documents_at, 8)}[field]
    _patch(f"{store}.idx", at + size * index, int(value).to_bytes(size, "little", signed=True))
    reads = [
        lambda ds: ds[index],
        lambda ds: ds.get(index),
        lambda ds: ds.get_many([index, 1]),
        lambda ds: tp.GPTDataset(ds, np.arange(len(ds)), 20, tp.GPTSampleConfig(seq_length=8, eod_id=0), 1)[0],
        lambda ds: tp.verify(ds.prefix),
    ]
    for read in reads:
        with pytest.raises(tp.CorruptStoreError, match=rf"s\.idx: {message}"):
            read(tp.IndexedDataset(store, mode=mode))


def test_numpy_and_numba_index_checks_agree(monkeypatch):
    """The two passes of bounds.check_index find the same first fault (or none) on random damage,
    with chunks small enough that faults fall on and across chunk boundaries."""
    from tokenport.indexed import bounds
    from tokenport.indexed.bounds_kernels import first_bad_sequence

    monkeypatch.setattr(bounds, "_CHUNK", 64)
    rng = np.random.default_rng(5)
    for trial in range(300):
        lengths = rng.integers(0, 50, int(rng.integers(1, 3000))).astype(np.int32)
        pointers = np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64) * 2))
        for _ in range(int(rng.integers(0, 3))):
            target = lengths if rng.random() < 0.5 else pointers
            target[int(rng.integers(0, len(target)))] = int(rng.integers(-5, 100))
        expected = first_bad_sequence(lengths, pointers, 2)
        assert bounds._first_bad_sequence(lengths, pointers, 2) == tuple(map(int, expected)), trial


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_gpt_samples_refuse_sample_indices_of_another_store(store, mode):
    """Cached sample indices that point past the store's documents are refused, not read out of
    bounds: by the memory-map kernel and by the windowed path of pread and remote stores alike."""
    ds = tp.IndexedDataset(store, mode=mode)
    config = tp.GPTSampleConfig(seq_length=8, eod_id=0)
    good = tp.GPTDataset(ds, np.arange(len(ds)), 20, config, 1)
    bad_documents = good.document_index.copy()
    bad_documents[:] = len(ds) + 1000
    bad_samples = good.sample_index.copy()
    bad_samples[1, 1] = 10**6
    backwards = good.sample_index.copy()
    backwards[2, 0] = -1
    for document_index, sample_index, shuffle_index in [
        (bad_documents, good.sample_index, good.shuffle_index),
        (good.document_index, bad_samples, good.shuffle_index),
        (good.document_index, backwards, good.shuffle_index),
        (good.document_index, good.sample_index, good.shuffle_index + 10**6),
    ]:
        gpt = tp.GPTDataset.from_indices(ds, good.indices, document_index, sample_index, shuffle_index, config)
        with pytest.raises(tp.CorruptStoreError, match="outside the documents of the store"):
            gpt.get_batch(np.arange(len(gpt)))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["checksums"].update(bin_block_size=0), r"`int` >= 1 - at `\$.checksums.bin_block_size`"),
        (lambda m: m["checksums"].update(algorithm=["x"]), r"`str`, got `array` - at `\$.checksums.algorithm`"),
        (lambda m: m.update(tokens="12"), r"`int`, got `str` - at `\$.tokens`"),
        (lambda m: m.update(sequences=-1), r"`int` >= 0 - at `\$.sequences`"),
        (lambda m: m["checksums"].update(bin_blocks=None), r"`array`, got `null` - at `\$.checksums.bin_blocks`"),
        (lambda m: m.clear() or m.update(checksums=[]), r"`object`, got `array` - at `\$.checksums`"),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_refused(store, edit, message):
    """Before, these raised ZeroDivisionError, TypeError or AttributeError from verify or the parser."""
    import json

    with open(f"{store}.json") as f:
        manifest = json.load(f)
    edit(manifest)
    with open(f"{store}.json", "w") as f:
        json.dump(manifest, f)
    with pytest.raises(tp.CorruptStoreError, match=r"s\.json: not a valid tokenport manifest: .*" + message):
        tp.verify(store)


def test_manifest_that_is_not_utf8_or_not_an_object_is_refused(store):
    for content in (b'{"a": "\xff\xfe"}', b"[1, 2]", b"null"):
        with open(f"{store}.json", "wb") as f:
            f.write(content)
        with pytest.raises(tp.CorruptStoreError, match=r"s\.json: not a valid tokenport manifest"):
            _ = tp.IndexedDataset(store).manifest


def test_verify_finds_pointer_document_and_checksum_faults(store):
    assert tp.verify(store).checksums.startswith("verified")
    ds = tp.IndexedDataset(store)
    pointers_at = ds.header.pointers_offset
    documents_at = ds.header.documents_offset
    ds.close()
    original = open(f"{store}.idx", "rb").read()

    _patch(f"{store}.idx", pointers_at + 8 * 3, (999).to_bytes(8, "little"))
    with pytest.raises(tp.CorruptStoreError, match="sequence 3 points at byte 999"):
        tp.verify(store)

    open(f"{store}.idx", "wb").write(original)
    _patch(f"{store}.idx", documents_at + 8 * 5, (1).to_bytes(8, "little"))
    with pytest.raises(tp.CorruptStoreError, match="document index 5 .* below"):
        tp.verify(store)

    open(f"{store}.idx", "wb").write(original)
    _patch(f"{store}.bin", 10, b"\xff")
    with pytest.raises(tp.CorruptStoreError, match="block 0 .* fails its checksum"):
        tp.verify(store)
    assert "skipped" in tp.verify(store, checksums=False).checksums


def test_verify_rejects_a_longer_bin(store):
    with open(f"{store}.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(tp.CorruptStoreError, match="does not belong to this .idx"):
        tp.verify(store)


def test_bad_manifest_is_reported(store):
    with open(f"{store}.json", "w") as f:
        f.write("{not json")
    with pytest.raises(tp.CorruptStoreError, match=r"s\.json: not a valid tokenport manifest"):
        _ = tp.IndexedDataset(store).manifest


def test_aborted_writer_leaves_nothing_and_keeps_the_old_store(store):
    before = {s: open(f"{store}{s}", "rb").read() for s in (".bin", ".idx", ".json")}
    with pytest.raises(RuntimeError):
        with tp.IndexedDatasetWriter(store, dtype=np.uint16) as writer:
            writer.add_document([1, 2, 3])
            raise RuntimeError("boom")
    after = {s: open(f"{store}{s}", "rb").read() for s in (".bin", ".idx", ".json")}
    assert before == after
    assert sorted(os.listdir(store.parent)) == ["s.bin", "s.idx", "s.json"]


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, numpy as np, tokenport as tp
    writer = tp.IndexedDatasetWriter(sys.argv[1], dtype=np.uint16)
    rng = np.random.default_rng(0)
    for k in range(10**9):
        writer.add_document(rng.integers(0, 60000, 1000))
        if k == 2000:
            print("writing", flush=True)
    """
)


def test_killed_writer_leaves_nothing_and_a_rerun_cleans_up(tmp_path, store):
    before = {s: open(f"{store}{s}", "rb").read() for s in (".bin", ".idx", ".json")}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(store)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    assert leftovers, "the killed writer should have left hidden temporaries"
    assert {s: open(f"{store}{s}", "rb").read() for s in (".bin", ".idx", ".json")} == before
    assert len(tp.IndexedDataset(store)) == 50 + 49
    with tp.IndexedDatasetWriter(store, dtype=np.uint16) as writer:
        writer.add_document([7])
    assert sorted(os.listdir(tmp_path)) == ["s.bin", "s.idx", "s.json"]
    assert tp.IndexedDataset(store)[0].tolist() == [7]


def test_interrupted_publication_rolls_forward(tmp_path, store, monkeypatch):
    """A crash between the renames of a publication is finished by the next open."""
    real_replace = os.replace
    calls = []

    def crash_after_first_rename(src, dst):
        real_replace(src, dst)
        calls.append(dst)
        if len(calls) == 2:  # the journal, then the .bin
            raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(commit.os, "replace", crash_after_first_rename)
    writer = tp.IndexedDatasetWriter(store, dtype=np.uint16)
    writer.add_document([4, 5, 6])
    with pytest.raises(KeyboardInterrupt):
        writer.finalize()
    monkeypatch.setattr(commit.os, "replace", real_replace)
    assert os.path.exists(commit.journal_path(str(store)))
    ds = tp.IndexedDataset(store)
    assert len(ds) == 1 and ds[0].tolist() == [4, 5, 6]
    assert not os.path.exists(commit.journal_path(str(store)))
    assert tp.verify(store).checksums.startswith("verified")


HOSTILE_PREFIXES = [None, 5, b"data", "a\0b", "", ".", "..", "sub/", "sub/..", "sub/.bin"]


@pytest.mark.parametrize("prefix", HOSTILE_PREFIXES, ids=repr)
def test_a_prefix_that_names_no_store_is_refused_and_nothing_is_written(tmp_path, monkeypatch, prefix):
    """'' and DIR/ used to publish hidden .bin/.idx/.json files (in the working directory, or DIR);
    None, bytes and NUL escaped as TypeError/ValueError."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with tp.IndexedDatasetWriter("src", np.uint16) as w:
        w.add_document([1, 2, 3])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(tp.ConfigError, match="prefix"):
        tp.IndexedDatasetWriter(prefix, np.uint16)
    with pytest.raises(tp.ConfigError, match="prefix"):
        tp.merge(prefix, ["src"])
    with pytest.raises(tp.ConfigError):
        tp.IndexedDataset(prefix)
    with pytest.raises(tp.ConfigError):
        tp.merge("out", ["src", prefix])
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("lengths", [[1.7, 1.3], np.array([2.5, 0.5]), "ab", [[1], [1, 2]]], ids=repr)
def test_sequence_lengths_that_are_not_integers_are_refused_and_change_nothing(tmp_path, lengths):
    """[1.7, 1.3] used to be cut to [1, 1] (they then summed to the tokens: silently wrong sequences);
    "ab" escaped as a ValueError."""
    with tp.IndexedDatasetWriter(tmp_path / "s", np.uint16) as writer:
        writer.add_document([7, 8, 9])
        with pytest.raises(tp.ConfigError, match="lengths"):
            writer.add_document([1, 2], lengths)
        with pytest.raises(tp.ConfigError, match="lengths"):
            writer.add_documents(np.array([1, 2]), lengths)
        assert (writer.num_documents, writer.num_sequences, writer.num_tokens) == (1, 1, 3)
        writer.add_document([4, 5], [1, 1])
    with tp.IndexedDataset(tmp_path / "s") as ds:
        assert [ds[i].tolist() for i in range(len(ds))] == [[7, 8, 9], [4], [5]]


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_an_index_that_is_not_a_sequence_number_is_refused(store, mode):
    """ds['a'], ds[None], ds[1.5] escaped as TypeError, ds[2**70] as OverflowError (not IndexError);
    get_many([0.7, 1.2]) read sequences 0 and 1 (numpy cut the floats)."""
    with tp.IndexedDataset(store, mode) as ds:
        for idx in ("a", None, 1.5, True, (0, 1), np.array([0, 1])):
            with pytest.raises(tp.ConfigError, match="is not a sequence number"):
                ds[idx]
            with pytest.raises(tp.ConfigError, match="is not a sequence number"):
                ds.get(idx)
        for idx in (2**70, -(2**70), len(ds)):
            with pytest.raises(IndexError):
                ds[idx]
            with pytest.raises(IndexError):
                ds.get(idx)
        with pytest.raises(tp.ConfigError, match="offset='x'"):
            ds.get(0, "x")
        with pytest.raises(tp.ConfigError, match="get_many: ids must be integers, got dtype float64"):
            ds.get_many([0.7, 1.2])
        with pytest.raises(tp.ConfigError, match="get_pieces: offsets must be integers"):
            ds.get_pieces([1], [0.5], [1])
        assert ds.get_many(np.array([1, 0], np.uint32))[1].tolist() == [0, len(ds[1]), len(ds[1]) + len(ds[0])]


@pytest.mark.parametrize(
    "settings",
    [
        {"dtype": "bogus"},
        {"vocab_size": "x"},
        {"checksum": "md5"},
        {"checksum_block_size": 0},
        {"checksum_block_size": "x"},
        {"provenance": "x"},
    ],
    ids=repr,
)
def test_bad_writer_settings_are_refused_before_anything_is_written(tmp_path, settings):
    """checksum_block_size=0 hung; checksum='md5' left a temporary .bin (as a CorruptStoreError);
    the others escaped as TypeError/ValueError."""
    with pytest.raises(tp.ConfigError):
        tp.IndexedDatasetWriter(tmp_path / "s", **{"dtype": np.uint16, **settings})
    if "provenance" in settings:
        with pytest.raises(tp.ConfigError, match="provenance"):
            tp.merge(tmp_path / "m", [tmp_path / "s"], provenance=settings["provenance"])
    assert list(tmp_path.iterdir()) == []

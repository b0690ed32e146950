"""The GPT occurrences lookups kept as an index-cache entry beside the indices: built once, memory-mapped after,
finished or rolled back by the next call when a writer is killed at any publication step, and refused (never
answered wrongly) when their description or their bytes are damaged."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tokenport as tp
from tests.samples.test_occurrences import random_store, scan
from tokenport.builder.cache import ARRAYS_FILE, DESCRIPTION
from tokenport.errors import CorruptStoreError, TokenportError

SEQ = 16


def _built(prefix: str, cache) -> tp.GPTDataset:
    """The train split of ``prefix`` (a few epochs), its indices from ``cache``."""
    return tp.build_datasets([prefix], sizes=(150, 0, 0), config=tp.GPTSampleConfig(SEQ), seed=4, split="1,0,0",
                             cache=str(cache))[0]  # fmt: skip


def _lookup_entries(cache) -> list[str]:
    """The published cache entries holding occurrences lookups."""
    found = []
    for path in glob.glob(os.path.join(str(cache), "*", DESCRIPTION)):
        with open(path) as f:
            if '"occurrences"' in f.read():
                found.append(os.path.dirname(path))
    return found


@pytest.fixture
def store(tmp_path) -> str:
    return str(random_store(tmp_path / "s", np.random.default_rng(6), documents=30, longest=60, empty=True).prefix)


def test_the_lookups_are_built_once_and_memory_mapped_afterwards(tmp_path, store):
    cache = tmp_path / "cache"
    first = _built(store, cache)
    answers = [first.occurrences(store, d) for d in range(30)]
    assert answers == [scan(first, store, d) for d in range(30)] and sum(map(len, answers)) > 0
    (entry,) = _lookup_entries(cache)
    again = _built(store, cache)
    assert [again.occurrences(store, d) for d in range(30)] == answers
    mapped = again._inverse.by_document
    assert not mapped.flags.owndata and not mapped.flags.writeable  # a read-only view of the entry's memory map
    assert _lookup_entries(cache) == [entry]  # not built twice
    plain = tp.GPTDataset(tp.IndexedDataset(store), np.arange(30), 150, tp.GPTSampleConfig(SEQ), seed=4)
    assert plain.lookups is None and [plain.occurrences(store, d) for d in range(30)] == answers  # in memory


CHILD = textwrap.dedent(
    """
    import os, sys
    import tokenport as tp
    from tokenport.builder import cache as module
    prefix, cache, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dataset = tp.build_datasets([prefix], sizes=(150, 0, 0), config=tp.GPTSampleConfig(16), seed=4, split="1,0,0",
                                cache=cache)[0]
    count = [0]

    def kill_point():  # the publication steps of the lookups' entry, in order
        count[0] += 1
        if count[0] == step:
            os._exit(77)

    def wrap(function):
        def wrapped(*args, **kwargs):
            kill_point()
            result = function(*args, **kwargs)
            kill_point()
            return result
        return wrapped

    module._write_synced = wrap(module._write_synced)
    module._fsync_directory = wrap(module._fsync_directory)
    module.os.rename = wrap(os.rename)
    dataset.occurrences(prefix, 0)
    """
)


@pytest.mark.parametrize("step", range(1, 9))
def test_a_writer_killed_at_each_publication_step_is_rolled_back_or_finished(tmp_path, store, step):
    # steps 1-8: before and after the description's write, the staging fsync, the rename, the directory fsync
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    code = subprocess.run([sys.executable, "-c", CHILD, store, str(cache), str(step)], env=env, timeout=300).returncode
    assert code == 77
    published = _lookup_entries(cache)
    assert len(published) == (1 if step >= 6 else 0)  # published once renamed, complete
    dataset = _built(store, cache)
    for document in range(30):
        assert dataset.occurrences(store, document) == scan(dataset, store, document)
    assert len(_lookup_entries(cache)) == 1
    assert not glob.glob(os.path.join(str(cache), ".*.tmp"))  # the dead writer's staging directory is gone


def test_every_mutation_of_the_lookups_description_is_refused_or_read(tmp_path, store):
    from tests._support.mutate import mutations

    cache = tmp_path / "cache"
    truth = [scan(_built(store, cache), store, d) for d in range(30)]
    _built(store, cache).occurrences(store, 0)
    (entry,) = _lookup_entries(cache)
    path = os.path.join(entry, DESCRIPTION)
    with open(path, "rb") as f:
        original = f.read()
    for label, data in mutations(original.decode()):
        with open(path, "wb") as f:
            f.write(data)
        dataset = _built(store, cache)
        try:
            answers = [dataset.occurrences(store, d) for d in range(30)]
        except TokenportError:
            assert dataset._inverse is None, label  # nothing kept from a refused load
            continue
        except Exception as exc:  # pragma: no cover - the failure names the mutation
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
        assert answers == truth, label


def test_damaged_lookup_bytes_are_refused_never_answered(tmp_path, store):
    cache = tmp_path / "cache"
    dataset = _built(store, cache)
    truth = [scan(dataset, store, d) for d in range(30)]
    dataset.occurrences(store, 0)
    (entry,) = _lookup_entries(cache)
    path = os.path.join(entry, ARRAYS_FILE)
    with open(path, "rb") as f:
        original = f.read()
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(40):  # one lookup value moved (a position, a run bound, a sample): what it touches is refused
        damaged = bytearray(original)
        at = int(rng.integers(0, len(damaged) // 4)) * 4
        value = int.from_bytes(damaged[at : at + 4], "little", signed=True)
        damaged[at : at + 4] = (value + int(rng.choice([-2, -1, 1, 3]))).to_bytes(4, "little", signed=True)
        with open(path, "wb") as f:
            f.write(damaged)
        fresh = _built(store, cache)
        for document in range(30):
            try:
                got = fresh.occurrences(store, document)
            except CorruptStoreError:
                refused += 1
                continue
            assert got == truth[document], (at, document)
    assert refused


def _blend(prefixes: list[str], cache) -> tp.BlendedDataset:
    """A weighted GPT blend of ``prefixes`` (one cache entry for its indices and its children's)."""
    spec = [x for k, p in enumerate(prefixes) for x in (str(0.3 + 0.4 * k), p)]
    return tp.build_datasets(spec, sizes=(200, 0, 0), config=tp.GPTSampleConfig(SEQ), seed=2, split="1,0,0",
                             cache=str(cache))[0]  # fmt: skip


def test_a_cached_blend_keeps_its_and_its_childrens_lookups_as_entries(tmp_path, store):
    other = str(random_store(tmp_path / "o", np.random.default_rng(9), documents=25, longest=70).prefix)
    cache = tmp_path / "cache"
    blend = _blend([store, other], cache)
    counts = {store: 30, other: 25}
    truth = {p: [scan(blend, p, d) for d in range(n)] for p, n in counts.items()}
    assert {p: [blend.occurrences(p, d) for d in range(n)] for p, n in counts.items()} == truth
    assert len(_lookup_entries(cache)) == 3  # the blend's and each child's
    again = _blend([store, other], cache)
    assert {p: [again.occurrences(p, d) for d in range(n)] for p, n in counts.items()} == truth
    assert not again._inverse.order.flags.writeable and len(_lookup_entries(cache)) == 3
    # damaged bytes of the blend's own lookups: refused or the true answer, never another
    (entry,) = [e for e in _lookup_entries(cache) if '"child"' not in open(os.path.join(e, DESCRIPTION)).read()]
    path = os.path.join(entry, ARRAYS_FILE)
    with open(path, "rb") as f:
        original = f.read()
    rng = np.random.default_rng(1)
    refused = 0
    for _ in range(25):
        damaged = bytearray(original)
        at = int(rng.integers(0, len(damaged) // 4)) * 4
        value = int.from_bytes(damaged[at : at + 4], "little", signed=True)
        damaged[at : at + 4] = (value + int(rng.choice([-1, 1, 2]))).to_bytes(4, "little", signed=True)
        with open(path, "wb") as f:
            f.write(damaged)
        fresh = _blend([store, other], cache)
        for prefix, count in counts.items():
            for document in range(count):
                try:
                    got = fresh.occurrences(prefix, document)
                except CorruptStoreError:
                    refused += 1
                    continue
                assert got == truth[prefix][document], (at, prefix, document)
    assert refused

"""The ``Executor`` protocol: the local and Ray executors both implement run, map_bands and close, and
give the same band pairs, so ``prepare`` calls them alike without probing for methods."""

from __future__ import annotations

import numpy as np

from tokenport.corpus.run.executor import Executor, LocalExecutor
from tokenport.corpus.steps.dedup import band_edges, decide
from tokenport.tokenizers import load_tokenizer


def _key_files(tmp_path) -> list[str]:
    keys = np.random.default_rng(5).integers(0, 30, (200, 4)).astype(np.uint64)  # many shared band keys
    files = []
    for i, (start, stop) in enumerate(((0, 70), (70, 70), (70, 200))):  # one unit holds no document
        np.save(tmp_path / f"keys{i}.npy", keys[start:stop])
        files.append(str(tmp_path / f"keys{i}.npy"))
    return files


def _same_pairs(ours, expected) -> bool:
    return len(ours) == len(expected) and all(
        np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(ours, expected)
    )


def test_the_local_executor_is_an_executor_and_maps_bands_here(tmp_path) -> None:
    files = _key_files(tmp_path)
    with LocalExecutor(load_tokenizer("byte"), 1) as executor:
        assert isinstance(executor, Executor)
        pairs = executor.map_bands(files, [0, 1, 2, 3], None)
        assert _same_pairs(pairs, [band_edges(files, band) for band in range(4)])
        assert sum(len(left) for left, _ in pairs) > 0
        drops = decide("minhash_dedup", files, None, lambda bands: executor.map_bands(files, bands, None))
    assert [d.tolist() for d in drops] == [d.tolist() for d in decide("minhash_dedup", files)]


def test_the_ray_executor_is_an_executor_with_the_same_band_pairs(tmp_path, ray_session) -> None:
    from tokenport.corpus.run.ray_executor import RayExecutor

    files = _key_files(tmp_path)
    with RayExecutor(load_tokenizer("byte")) as executor:
        assert isinstance(executor, Executor)
        assert _same_pairs(executor.map_bands(files, [0, 1, 2, 3], None), [band_edges(files, b) for b in range(4)])
        executor.close()  # nothing to stop; the caller's Ray connection stays
    assert ray_session.is_initialized()


def test_an_object_without_map_bands_is_not_an_executor() -> None:
    class RunsOnly:
        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None: ...

        def run(self, job, units, on_done, on_progress=None) -> None: ...

        def close(self) -> None: ...

    assert not isinstance(RunsOnly(), Executor)

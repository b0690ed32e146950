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


def test_a_unit_that_cannot_reach_its_worker_fails_the_run_instead_of_hanging(tmp_path, monkeypatch) -> None:
    """A driver thread whose hand-over raises (here: pickling) reports a failure; before, the thread
    died and the run waited forever for its unit."""
    import pickle
    import threading

    from tokenport.corpus import PrepareConfig, prepare
    from tokenport.corpus.run import executor as executor_module
    from tokenport.errors import TokenportError

    send = executor_module._Worker._send

    def unpicklable(self, value) -> None:
        if isinstance(value, tuple) and isinstance(value[0], executor_module.UnitJob):  # a unit, not the start
            raise pickle.PicklingError("a step class defined where workers cannot import it")
        send(self, value)

    monkeypatch.setattr(executor_module._Worker, "_send", unpicklable)
    (tmp_path / "in.jsonl").write_text("".join(f'{{"text": "document {i} " }}\n' for i in range(20000)))
    config = PrepareConfig(inputs=[str(tmp_path / "in.jsonl")], output=str(tmp_path / "out"), workers=2, unit_bytes=400)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            prepare(config)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert outcome, "prepare hung after a unit could not be handed to its worker"
    assert isinstance(outcome[0], TokenportError), outcome
    assert "could not hand" in str(outcome[0]) and "--workers 1" in str(outcome[0])

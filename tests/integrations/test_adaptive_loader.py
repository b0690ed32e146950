"""StatefulLoader over an AdaptiveBlend: updates resolved in the main process, stored, resumed on another DP size."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.blend import AdaptiveBlend, DoReMiController, MixtureSignals
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, StreamSampler

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

SEQ = 8


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Three GPT datasets over three stores, each token naming its store (store k holds tokens 1000 k + ...)."""
    root = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(0)
    datasets = []
    for k in range(3):
        documents = (1000 * k + tokens for tokens in random_documents(rng, 30, tokens=(3, 999), length=(5, 40)))
        store = tp.IndexedDataset(build_store(root / f"s{k}", documents, dtype=np.uint16))
        datasets.append(tp.GPTDataset(store, np.arange(30), 60, tp.GPTSampleConfig(SEQ, 2), 1))
    return datasets


class StepController:
    """A controller the user wrote: weights a pure function of the step."""

    def update(self, step: int, signals: MixtureSignals) -> np.ndarray | None:
        return None if step % 3 == 2 else np.array([1.0, 1.0 + step % 4, float(step % 2)])


def _signals(batch) -> MixtureSignals:
    """Signals as a trainer reports them: here a loss per token that is the store's number."""
    ids = batch["dataset_id"].numpy()
    return MixtureSignals.from_batch(ids, ids * float(SEQ), np.full(len(ids), SEQ), 3)


def _run(children, steps, *, size=1, rank=0, mbs=4, consumed=0, state=None, workers=0, stop=None):
    """Batches of one rank, updating the mixture after each; (batches, loader)."""
    blend = AdaptiveBlend(children, [1, 1, 1], num_samples=240)
    sampler = PretrainingSampler(240, consumed, mbs, rank, size)
    options = dict(num_workers=workers, prefetch_factor=2) if workers else {}
    loader = StatefulLoader(blend, sampler, controller=StepController(), **options)
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)))
    batches = []
    for batch in loader:
        batches.append(batch)
        loader.update_mixture(_signals(batch))
        if len(batches) == stop:
            break
    return batches, loader


def test_trainer_receives_the_stream_the_updates_define(children):
    batches, loader = _run(children, None, workers=2)
    updates = loader.dataset.updates
    assert len(updates) > 10  # most steps changed the weights
    rebuilt = AdaptiveBlend(children, [1, 1, 1], num_samples=240, updates=updates)
    tokens = torch.cat([b["tokens"] for b in batches]).numpy()
    owners = torch.cat([b["dataset_id"] for b in batches]).numpy()
    expected = rebuilt.get_batch(np.arange(240))
    assert np.array_equal(tokens, expected["tokens"]) and np.array_equal(owners, expected["dataset_id"])
    assert np.array_equal(tokens[:, 0] // 1000, owners)  # each sample from the store the blend names
    # updates land at the first sample not yet resolved: with 2 workers x prefetch 2, batches ahead of the loop
    assert all(start % 4 == 0 for start, _ in updates)


def test_per_sample_path_equals_the_batch_path(children):
    blend = AdaptiveBlend(children, [3, 1, 1], num_samples=240)
    sampler = PretrainingSampler(240, 0, 4, 0, 1)
    loader = StatefulLoader(blend, sampler, collate_fn=torch.utils.data.default_collate)
    batched = StatefulLoader(
        AdaptiveBlend(children, [3, 1, 1], num_samples=240), PretrainingSampler(240, 0, 4, 0, 1), fields=("tokens",)
    )
    for one, other in zip(loader, batched):
        assert list(other) == ["tokens"] and torch.equal(one["tokens"], other["tokens"])


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_continues_exactly_without_the_controller_history(children, workers):
    whole, _ = _run(children, None, workers=workers)
    first, loader = _run(children, None, workers=workers, stop=9)
    state = loader.state_dict()
    assert state["mixture"]["updates"] == [[s, list(w)] for s, w in loader.dataset.updates]
    rest, _ = _run(children, None, workers=workers, state=state)
    for one, other in zip(first + rest, whole, strict=True):
        assert torch.equal(one["tokens"], other["tokens"])


def test_resume_on_another_data_parallel_size_continues_the_global_stream(children):
    whole, _ = _run(children, None, mbs=8)  # one rank, global batch 8
    ranks = [_run(children, None, size=2, rank=r, mbs=4, stop=6) for r in range(2)]
    for step in range(6):  # two ranks make the same global batches as one
        both = torch.cat([ranks[0][0][step]["tokens"], ranks[1][0][step]["tokens"]])
        assert torch.equal(both, whole[step]["tokens"])
    assert ranks[0][1].dataset.updates == ranks[1][1].dataset.updates
    rest, _ = _run(children, None, mbs=8, state=ranks[0][1].state_dict())
    for one, other in zip(rest, whole[6:], strict=True):
        assert torch.equal(one["tokens"], other["tokens"])


def test_doremi_steers_towards_the_high_excess_loss_store(children):
    blend = AdaptiveBlend(children, [1, 1, 1], num_samples=240)
    controller = DoReMiController(np.zeros(3), step_size=0.05)
    loader = StatefulLoader(blend, PretrainingSampler(240, 0, 4, 0, 1), controller=controller)
    for batch in loader:
        loader.update_mixture(_signals(batch))  # store k's loss is k: store 2 is furthest above its reference
    early, late = blend.samples_per_dataset(60), blend.samples_per_dataset(240) - blend.samples_per_dataset(180)
    assert late[2] > early[2] and late[0] < early[0]
    epochs = loader.dataset_epochs()  # per child, from the realized stream
    assert [e.samples for e in epochs] == blend.samples_per_dataset(240).tolist()


def test_set_mixture_and_refusals(children):
    blend = AdaptiveBlend(children, [1, 1, 1], num_samples=240)
    loader = StatefulLoader(blend, PretrainingSampler(240, 0, 4, 0, 1))
    iterator = iter(loader)
    next(iterator)
    assert loader.set_mixture([0, 0, 1]) == 4  # num_workers=0: only the batch handed over is resolved
    assert (next(iterator)["dataset_id"] == 2).all()
    with pytest.raises(tp.ConfigError, match="no controller"):
        loader.update_mixture(_signals({"dataset_id": torch.zeros(1, dtype=torch.int64)}))
    with pytest.raises(tp.ConfigError, match="shuffles"):
        StatefulLoader(blend, StreamSampler(240, 0, 4, 0, 1, order="feistel"))
    with pytest.raises(tp.ConfigError, match="AdaptiveBlend"):
        StatefulLoader(children[0], PretrainingSampler(60, 0, 4, 0, 1), controller=StepController())
    with pytest.raises(tp.ConfigError, match="update"):
        StatefulLoader(blend, PretrainingSampler(240, 0, 4, 0, 1), controller=object())
    plain = StatefulLoader(children[0], PretrainingSampler(60, 0, 4, 0, 1))
    with pytest.raises(tp.ConfigError, match="AdaptiveBlend"):
        plain.set_mixture([1])
    state = loader.state_dict()
    del state["mixture"]
    with pytest.raises(tp.ConfigError, match="mixture"):
        StatefulLoader(
            AdaptiveBlend(children, [1, 1, 1], num_samples=240), PretrainingSampler(240, 0, 4, 0, 1)
        ).load_state_dict(state)
    other = StatefulLoader(AdaptiveBlend(children, [1, 2, 1], num_samples=240), PretrainingSampler(240, 0, 4, 0, 1))
    with pytest.raises(tp.ConfigError, match="order"):  # other initial weights: the receipt differs
        other.load_state_dict(loader.state_dict())


def test_lineage_of_an_adaptive_sample_names_the_child_and_its_documents(children):
    blend = AdaptiveBlend(children, [1, 2, 3], num_samples=240)
    blend.set_weights([0, 0, 1], 100)
    for idx in (0, 57, 150):
        dataset, sample = blend.locate(idx)
        traced = blend.lineage(idx)
        assert traced == children[dataset].lineage(sample).through(idx, dataset)
        assert traced.sample == idx and traced.path[0] == (dataset, sample)


def test_trace_of_an_adaptive_run_replays_the_stored_updates(children, tmp_path):
    """tokenport.trace rebuilds the blend from the receipt, restores the state's updates, and every traced
    sample's documents are the tokens the trainer got (on 2 data-parallel ranks, with 2 workers prefetching)."""
    ranks = [_run(children, None, size=2, rank=r, mbs=2, workers=2, stop=20) for r in range(2)]
    state = ranks[0][1].state_dict()
    assert len(state["mixture"]["updates"]) > 5
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    for step in (0, 7, 13, 19):
        traced = tp.trace(str(path), step, detokenize=False)
        assert [(t.rank, t.slot) for t in traced] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        for item in traced:
            store = tp.IndexedDataset(item.lineage.store)
            tokens = np.concatenate([store.get(d, a, b - a) for d, a, b in item.lineage.pieces])
            batch = ranks[item.rank][0][step]
            got = np.append(batch["tokens"][item.slot].numpy(), batch["labels"][item.slot][-1].item())
            np.testing.assert_array_equal(tokens, got)
            assert item.lineage.path[0][0] == int(batch["dataset_id"][item.slot])  # (child, its sample) in the blend
    del state["mixture"]
    with pytest.raises(tp.ConfigError, match="no 'mixture' updates"):
        tp.trace(state, 0)


@pytest.mark.parametrize("size,mbs,workers", [(3, 4, 0), (2, 5, 0), (4, 3, 0), (2, 3, 2)])
def test_ranks_store_the_same_updates_when_a_batch_runs_past_the_epoch(children, tmp_path, size, mbs, workers):
    """StreamSampler('sequential') over an adaptive blend whose length is no multiple of the global batch: the
    batch at the epoch's end holds next-epoch ids on some ranks only. Every rank realizes the same samples, so
    each update lands at the same global sample on every rank, each rank's state describes every rank's stream,
    and trace names the child each rank read."""
    total = 50  # not a multiple of any global batch above
    ranks = []
    for rank in range(size):
        blend = AdaptiveBlend(children, [1, 1, 1], num_samples=total)
        sampler = StreamSampler(total, 0, mbs, rank, size, order="sequential")
        options = dict(num_workers=workers, prefetch_factor=2) if workers else {}
        ranks.append(StatefulLoader(blend, sampler, **options))
    got: list[list] = [[] for _ in range(size)]
    for _epoch in range(3):
        for step_batches in zip(*ranks, strict=True):  # the ranks in lockstep, one step at a time
            step = len(got[0])
            for rank, (loader, batch) in enumerate(zip(ranks, step_batches)):
                got[rank].append(batch)
                loader.set_mixture([1.0, 1.0 + step % 3, float(step % 2)])
    states = [loader.state_dict() for loader in ranks]
    assert all(state["mixture"] == states[0]["mixture"] for state in states)
    assert all(loader.dataset.frontier == ranks[0].dataset.frontier for loader in ranks)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(states[-1]))  # the last rank's state traces every rank's batches
    for step in range(len(got[0])):
        traced = tp.trace(str(path), step, detokenize=False)
        for item in traced:
            assert item.lineage.path[0][0] == int(got[item.rank][step]["dataset_id"][item.slot])

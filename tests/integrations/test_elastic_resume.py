"""Elastic resume: a run saved on one layout resumes on another global batch, data-parallel size or worker
count, for every stream kind, and the trainer reads the one global sample order of the uninterrupted run.

The model: a stream kind has one global order (sample ids at stream positions 0, 1, 2, ... from the
sampler's ``global_stream``; over an ``AdaptiveBlend`` the blend its weight updates define). Global batch
``k`` of any layout is the next ``micro_batch_size * data_parallel_size`` positions from where the run
stands, cut over the ranks in rank order; so the concatenation of every global batch handed over, before
and after any number of resumes on any layouts, is a prefix of that order. Ranks are simulated in one
process here (one loader per rank); ``test_elastic_gloo.py`` runs them as real gloo processes.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.blend import AdaptiveBlend, BlendedDataset, MixtureSchedule, ScheduleController
from tokenport.blend.controller import MixtureSignals
from tokenport.integrations import StatefulLoader
from tokenport.integrations.audit import audit
from tokenport.sampling import PretrainingSampler, StreamSampler

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

KINDS = ("gpt", "packed", "sft", "blend", "schedule", "adaptive")
ORDERED = {"schedule", "adaptive"}  # blends whose weights follow the sample position: read in order
# planned weight updates of the adaptive blend: (from_sample, weights), set ahead of the frontier
PLAN = ((0, (1.0, 1.0)), (10, (1.0, 4.0)), (29, (3.0, 1.0)), (47, (1.0, 1.0)), (70, (0.0, 1.0)), (101, (2.0, 1.0)))
HORIZON = 64  # a planned update is set this many samples ahead (past any prefetch: 2 workers x 2 x 12)
CHANGES = {  # (micro_batch_size, data_parallel_size, num_workers) before -> after, saved after `steps`
    "gbs8-12": ((8, 1, 0), (12, 1, 0), 5),  # consumed 40: not a multiple of 12
    "gbs12-8": ((12, 1, 0), (8, 1, 0), 3),  # consumed 36: not a multiple of 8
    "dp2-3": ((4, 2, 0), (4, 3, 0), 5),
    "dp3-2": ((4, 3, 0), (4, 2, 0), 3),
    "workers0-2": ((8, 1, 0), (8, 1, 2), 5),
    "workers2-0": ((8, 1, 2), (8, 1, 0), 5),
}


def _store(prefix, seed: int, masks: bool = False, documents: int = 24) -> str:
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(5, 40), append=256)
    if masks:
        drawn = [Doc(t, mask=(np.arange(len(t)) >= len(t) // 2).astype(np.uint8)) for t in drawn]
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), masks=masks)


def _gpt(prefix, seed: int) -> tp.GPTDataset:
    return tp.GPTDataset(tp.IndexedDataset(prefix), np.arange(24), 64, tp.GPTSampleConfig(8, 256), seed)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """One dataset of each kind over small byte-token stores."""
    from tokenport.builder.specs import Blend

    root = tmp_path_factory.mktemp("elastic")
    prefixes = [_store(root / f"b{k}", 10 + k) for k in range(2)]
    children = [_gpt(prefix, k + 1) for k, prefix in enumerate(prefixes)]
    schedule = MixtureSchedule.from_data(
        [{"at": 0, "weights": [0.8, 0.2]}, {"at": 20, "ramp_to": [0.1, 0.9], "until": 50}]
    )
    return {
        "gpt": _gpt(_store(root / "g", 1), 1),
        "packed": tp.PackedDataset(
            tp.IndexedDataset(_store(root / "p", 2, documents=80)), 48, too_long="split", seed=6
        ),
        "sft": tp.SFTDataset(tp.IndexedDataset(_store(root / "c", 3, masks=True, documents=80)), 32, seed=2),
        "blend": BlendedDataset(children, [0.6, 0.4], 64),
        "schedule": tp.build_datasets(
            Blend(tuple(prefixes), None, schedule),
            sizes=(64, 0, 0),
            config=tp.GPTSampleConfig(8),
            seed=1,
            split="1,0,0",
        )[0],
        "adaptive": AdaptiveBlend(children, [1, 1], num_samples=128),
    }


def _fresh(dataset):
    """The dataset a rank's loader reads: an AdaptiveBlend afresh (a run's weight updates live in its blend)."""
    if isinstance(dataset, AdaptiveBlend):
        return AdaptiveBlend(dataset.datasets, dataset.initial_weights, num_samples=len(dataset))
    return dataset


def _sampler(kind: str, total: int, mbs: int, rank: int, size: int, name: str = "stream"):
    if name == "pretraining":  # one pass in id order
        return PretrainingSampler(total, 0, mbs, rank, size)
    if kind in ORDERED:
        return StreamSampler(total, 0, mbs, rank, size, order="sequential")
    return StreamSampler(total, 0, mbs, rank, size, seed=7, order="feistel")


def _plan_ahead(loader: StatefulLoader) -> None:
    """Set the planned updates due within HORIZON samples of the position (each once, at its own sample)."""
    blend = loader.dataset
    if not isinstance(blend, AdaptiveBlend):
        return
    for start, weights in PLAN:
        due = start < loader.consumed_samples + HORIZON and start <= len(blend)
        if due and (start > blend.last_update_sample or (start == 0 and not blend.updates)):
            loader.set_mixture(weights, from_sample=start)


def _expected(kind: str, dataset, count: int, name: str = "stream") -> np.ndarray:
    """The model: the tokens of the first ``count`` positions of the kind's one global order."""
    ids = _sampler(kind, len(dataset), 1, 0, 1, name).global_stream(0, count)
    if isinstance(dataset, AdaptiveBlend):
        dataset = AdaptiveBlend(dataset.datasets, dataset.initial_weights, num_samples=len(dataset), updates=PLAN)
    return dataset.get_batch(ids)["tokens"]


class Run:
    """One segment of a run: a loader per rank of a layout, resumed from ``state`` (None: a fresh run)."""

    def __init__(self, kind: str, dataset, layout: tuple[int, int, int], state=None, name: str = "stream") -> None:
        mbs, size, workers = layout
        options = dict(num_workers=workers, prefetch_factor=2) if workers else {}
        self.loaders = []
        for rank in range(size):
            data = _fresh(dataset)
            loader = StatefulLoader(data, _sampler(kind, len(data), mbs, rank, size, name), **options)
            if state is not None:
                loader.load_state_dict(json.loads(json.dumps(state)))
            _plan_ahead(loader)
            self.loaders.append(loader)
        self.iterators = [self._endless(loader) for loader in self.loaders]

    @staticmethod
    def _endless(loader: StatefulLoader):
        while True:  # one `for` walks one epoch: loop again for the next
            yield from loader

    def steps(self, count: int) -> list[np.ndarray]:
        """The next ``count`` global batches (every rank's micro-batch, in rank order)."""
        out = []
        for _ in range(count):
            out.append(torch.cat([next(iterator)["tokens"] for iterator in self.iterators]).numpy())
            for loader in self.loaders:
                _plan_ahead(loader)
        return out

    def state(self) -> dict:
        """The state every rank would save: the same document on each."""
        states = [json.loads(json.dumps(loader.state_dict())) for loader in self.loaders]
        assert all(state == states[0] for state in states)
        return states[0]


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("kind", KINDS)
def test_resume_on_another_layout_continues_the_one_global_order(datasets, kind, change):
    before, after, steps = CHANGES[change]
    dataset = datasets[kind]
    first = Run(kind, dataset, before)
    handed = first.steps(steps)
    state = first.state()
    assert state["sampler"]["consumed_samples"] == steps * before[0] * before[1]
    resumed = Run(kind, dataset, after, state)
    samples = 2 * len(dataset) + 5  # across two epoch boundaries
    rest = resumed.steps(-(-(samples - state["sampler"]["consumed_samples"]) // (after[0] * after[1])))
    got = np.concatenate(handed + rest)
    assert np.array_equal(got, _expected(kind, dataset, len(got)))
    assert resumed.loaders[0].consumed_samples == len(got)
    assert audit([state, resumed.state()]).consistent  # the certificate goes on in a segment of the new layout


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("kind", KINDS)
def test_a_pretraining_sampler_resumed_on_another_layout_goes_on_in_id_order(datasets, kind, change):
    before, after, steps = CHANGES[change]
    dataset = datasets[kind]
    first = Run(kind, dataset, before, name="pretraining")
    handed = first.steps(steps)
    resumed = Run(kind, dataset, after, first.state(), name="pretraining")
    rest = []
    for batches in zip(*resumed.loaders):
        rest.append(np.concatenate([batch["tokens"].numpy() for batch in batches]))
        for loader in resumed.loaders:
            _plan_ahead(loader)
    got = np.concatenate(handed + rest)  # one pass; a last global batch that does not fill is dropped
    assert len(dataset) - after[0] * after[1] < len(got) <= len(dataset)
    assert np.array_equal(got, _expected(kind, dataset, len(got), "pretraining"))


def test_random_resumes_on_random_layouts_follow_the_one_global_order(datasets):
    """Shadow model: seeded random series of resumes (random micro-batch, ranks, workers, steps), each state
    checked against the model's prefix; a refused resume (an edited state) changes no loader."""
    rng = random.Random(31)
    for trial in range(12):
        kind = KINDS[trial % len(KINDS)]
        dataset = datasets[kind]
        handed: list[np.ndarray] = []
        state, states = None, []
        for _ in range(rng.randint(2, 4)):
            layout = (rng.randint(1, 5), rng.randint(1, 3), rng.choice((0, 0, 0, 1)))
            run = Run(kind, dataset, layout, state)
            if state is not None and rng.random() < 0.5:
                _refused_resume_changes_nothing(run.loaders[-1], state)
            handed += run.steps(rng.randint(1, 9))
            state = run.state()
            states.append(state)
            got = np.concatenate(handed)
            assert state["sampler"]["consumed_samples"] == len(got)
            assert np.array_equal(got, _expected(kind, dataset, len(got))), (trial, layout)
        assert audit(states).consistent, trial


def _refused_resume_changes_nothing(loader: StatefulLoader, state: dict) -> None:
    """A state whose position was moved is refused, and the loader keeps its own state exactly."""
    before = loader.state_dict()
    edited = json.loads(json.dumps(state))
    edited["sampler"]["consumed_samples"] += 1
    edited["sampler"]["epoch"] = edited["sampler"]["consumed_samples"] // edited["sampler"]["total_samples"]
    with pytest.raises(tp.ConfigError):
        loader.load_state_dict(edited)
    assert loader.state_dict() == before


def test_an_adaptive_blend_resumed_on_fewer_workers_keeps_its_updates_and_takes_new_ones(datasets):
    """Weights set at the frontier of a run with workers (past the consumed position) travel in the state; a
    resume without workers lands its next update at the last restored update's sample, never refusing it."""
    children = datasets["adaptive"].datasets

    def loader(workers: int, state=None) -> StatefulLoader:
        blend = AdaptiveBlend(children, [1, 1], num_samples=128)
        options = dict(num_workers=workers, prefetch_factor=2) if workers else {}
        made = StatefulLoader(blend, StreamSampler(128, 0, 8, 0, 1, order="sequential"), **options)
        if state is not None:
            made.load_state_dict(state)
        return made

    first, handed = loader(2), []
    for batch in first:
        handed.append(batch["tokens"].numpy())
        first.set_mixture([1.0, 1.0 + len(handed) % 3])
        if len(handed) == 5:
            break
    state = json.loads(json.dumps(first.state_dict()))
    saved = first.dataset.updates
    assert saved[-1][0] > first.consumed_samples  # updates past the position it saved at
    second = loader(0, state)
    for batch in second:
        handed.append(batch["tokens"].numpy())
        start = second.set_mixture([2.0, 1.0 + len(handed) % 3])
        assert start == max(second.consumed_samples, saved[-1][0])
    updates = second.dataset.updates
    assert updates[: len(saved) - 1] == saved[:-1]  # the restored updates kept; the last replaced at its sample
    rebuilt = AdaptiveBlend(children, [1, 1], num_samples=128, updates=updates)
    assert np.array_equal(np.concatenate(handed), rebuilt.get_batch(np.arange(128))["tokens"])


def test_a_schedule_controller_follows_the_sample_across_a_global_batch_change(datasets):
    """Resumed on global batch 12 at sample 40, the controller is asked at sample 40, not at step 40 // 12 = 3
    times its own global batch (sample 36 of a controller built for 12, 24 of one built for 8)."""
    schedule = MixtureSchedule.from_data([{"at": 0, "weights": [1, 0]}, {"at": 37, "weights": [0, 1]}])
    children = datasets["adaptive"].datasets
    signals = MixtureSignals(np.zeros(2), np.zeros(2, np.int64))

    def loader(mbs: int, controller_gbs: int) -> StatefulLoader:
        blend = AdaptiveBlend(children, [1, 1], num_samples=128)
        sampler = StreamSampler(128, 0, mbs, 0, 1, order="sequential")
        return StatefulLoader(blend, sampler, controller=ScheduleController(schedule, controller_gbs))

    first = loader(8, 8)
    for _ in zip(range(5), first):
        first.update_mixture(signals)
    state = json.loads(json.dumps(first.state_dict()))
    for controller_gbs in (8, 12):
        resumed = loader(12, controller_gbs)
        resumed.load_state_dict(state)
        assert resumed.update_mixture(signals) == 40
        assert resumed.dataset.updates[-1] == (40, (0.0, 1.0))  # the schedule's shares at sample 40


class _NoGlobalStream:
    """A sampler of the protocol without ``global_stream``: a PretrainingSampler's ids, taken as positions."""

    def __init__(self, inner: PretrainingSampler) -> None:
        self.inner = inner
        self.micro_batch_size, self.data_parallel_size = inner.micro_batch_size, inner.data_parallel_size

    def __getattr__(self, name: str):
        if name in ("global_stream", "global_batch_size"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:
        if name == "auto_advance":
            self.inner.auto_advance = value
        else:
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)


def test_ranks_realize_an_adaptive_blend_to_the_same_sample_off_a_global_batch_boundary(datasets):
    """A sampler without a global stream, resumed at sample 40 with a global batch of 12 on two ranks: both
    ranks realize through the end of the batch (52), so an update lands on the same sample on both."""
    children = datasets["adaptive"].datasets
    starts = []
    for rank in range(2):
        sampler = _NoGlobalStream(PretrainingSampler(128, 40, 6, rank, 2))
        loader = StatefulLoader(AdaptiveBlend(children, [1, 1], num_samples=128), sampler)
        next(iter(loader))
        starts.append(loader.set_mixture([1.0, 2.0]))
    assert starts == [52, 52]


def test_weights_set_right_after_a_resume_never_reach_the_samples_handed_over(datasets):
    """A resumed blend has resolved nothing yet (its frontier is 0): weights set before its first batch apply
    from the position, not from sample 0, which would rewrite the mixture of the samples already trained on."""
    children = datasets["adaptive"].datasets
    first = StatefulLoader(
        AdaptiveBlend(children, [1, 1], num_samples=128), StreamSampler(128, 0, 12, 0, 1, order="sequential")
    )
    for _ in zip(range(3), first):
        pass
    resumed = StatefulLoader(
        AdaptiveBlend(children, [1, 1], num_samples=128), StreamSampler(128, 0, 8, 0, 1, order="sequential")
    )
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    with pytest.raises(tp.ConfigError, match="from_sample=10: the loader has handed samples up to 36 over already"):
        resumed.set_mixture([0.0, 1.0], from_sample=10)
    assert resumed.dataset.updates == ()
    assert resumed.set_mixture([0.0, 1.0]) == 36
    assert resumed.dataset.updates == ((36, (0.0, 1.0)),)


def test_trace_reads_a_step_where_the_resumed_run_handed_it_over(datasets):
    """Saved at sample 40 with global batches of 8, resumed with 12: step 5 is samples 40..51 (not 60..71, five
    batches of 12), and a state of the resumed run refuses to trace step 2, cut from batches of 8."""
    from tokenport.integrations.tracing import trace

    dataset = datasets["gpt"]
    first = Run("gpt", dataset, (8, 1, 0))
    first.steps(5)
    resumed = Run("gpt", dataset, (12, 1, 0), first.state())
    resumed.steps(3)
    later = resumed.state()
    ids = _sampler("gpt", len(dataset), 1, 0, 1).global_stream(0, 76)
    for step, start in ((5, 40), (7, 64)):
        traced = trace(later, step, dataset=dataset, detokenize=False)
        assert [sample.sample for sample in traced] == ids[start : start + 12].tolist()
    with pytest.raises(tp.ConfigError, match="step=2: .* begins its segment at step 5"):
        trace(later, 2, dataset=dataset, detokenize=False)
    assert [s.sample for s in trace(first.state(), 2, dataset=dataset, detokenize=False)] == ids[16:24].tolist()


def test_where_names_the_steps_a_resumed_run_read_a_document_at(datasets):
    """After a resume from global batches of 8 to 12 at sample 8, `where` on a later state puts each place at
    the step trace finds it at, and refuses a document read before the resume (another layout's steps)."""
    from tokenport.integrations.tracing import trace
    from tokenport.integrations.where import occurrences

    dataset = datasets["gpt"]
    first = Run("gpt", dataset, (8, 1, 0))
    first.steps(1)
    before = first.state()
    resumed = Run("gpt", dataset, (12, 1, 0), before)
    resumed.steps(3)
    later = resumed.state()
    store = trace(later, 1, dataset=dataset, detokenize=False)[0].lineage.store
    found = refused = 0
    for document in range(24):
        early = [p.step for p in occurrences(before, store=store, document=document, dataset=dataset).places]
        try:
            report = occurrences(later, store=store, document=document, dataset=dataset)
        except tp.ConfigError as error:
            assert "before step 1 (consumed_samples=8)" in str(error)
            assert min(early) < 1  # read before the resume, on the old layout
            refused += 1
            continue
        assert all(step >= 1 for step in early)
        for place in report.places:
            assert place.step >= 1 and place.trained == (place.step < 4)
            if place.trained:
                traced = trace(later, place.step, dataset=dataset, detokenize=False)[place.slot]
                assert traced.sample == place.sample
        found += 1
    assert found and refused, (found, refused)

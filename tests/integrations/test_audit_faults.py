"""tokenport.audit over series of states from real StatefulLoader runs of every stream kind, with injected faults.

For each stream kind (GPT, packed, SFT, blend, schedule, AdaptiveBlend with weight updates) and the
samplers it allows, a seeded random draw picks where each fault lands: a skipped step, a repeated
step, two batches handed in swapped order, a store prepared again with other content, another seed,
a hand-edited certificate field, a state of another run spliced in, states out of order. Audit must
name the first divergence (the step and its kind); clean series, including real resumes on the same
and on another topology or global batch, must audit consistent.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.errors import ConfigError
from tokenport.integrations import StatefulLoader
from tokenport.integrations.audit import audit
from tokenport.integrations.certificate import GlobalBatches
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

MBS, RANKS = 2, 2
GBS = MBS * RANKS
STEPS, EVERY = 12, 3  # a run hands 12 batches over, saving a state every 3


def _store(prefix, seed: int, masks: bool = False, documents: int = 24) -> str:
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(5, 40), append=256)
    if masks:
        drawn = [Doc(t, mask=(np.arange(len(t)) >= len(t) // 2).astype(np.uint8)) for t in drawn]
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), masks=masks)


def _gpt(prefix, seed: int = 1) -> tp.GPTDataset:
    return tp.GPTDataset(tp.IndexedDataset(prefix), np.arange(24), 64, tp.GPTSampleConfig(8, 256), seed)


def _dataset(kind: str, root, content: int):
    """A dataset of ``kind`` over stores under ``root`` whose documents are drawn with seed ``content``."""
    from tokenport.blend import AdaptiveBlend, BlendedDataset, MixtureSchedule

    if kind == "gpt":
        return _gpt(_store(root / "g", content))
    if kind == "packed":
        store = tp.IndexedDataset(_store(root / "p", content, documents=80))
        return tp.PackedDataset(store, 48, too_long="split", seed=6)
    if kind == "sft":
        return tp.SFTDataset(tp.IndexedDataset(_store(root / "c", content, masks=True, documents=80)), 32, seed=2)
    prefixes = [_store(root / f"b{k}", content + k) for k in range(2)]
    children = [_gpt(prefix, seed=k + 1) for k, prefix in enumerate(prefixes)]
    if kind == "blend":
        return BlendedDataset(children, [0.6, 0.4], 64)
    if kind == "schedule":
        from tokenport.builder.specs import Blend

        schedule = MixtureSchedule.from_data([{"at": 0, "weights": [0.8, 0.2]}, {"at": 24, "weights": [0.2, 0.8]}])
        spec = Blend(tuple(prefixes), None, schedule)
        return tp.build_datasets(spec, sizes=(64, 0, 0), config=tp.GPTSampleConfig(8), seed=1, split="1,0,0")[0]
    return AdaptiveBlend(children, [1, 1], num_samples=64)


def _sampler(name: str, dataset, mbs: int = MBS, ranks: int = RANKS, seed: int = 5, rank: int = 0):
    total = len(dataset)
    if name == "pretraining":
        return PretrainingSampler(total, 0, mbs, rank, ranks)
    if name == "random":
        return RandomSampler(total, 0, mbs, rank, ranks, seed=seed)
    if name == "random-sharded":
        return RandomSampler(total, 0, mbs, rank, ranks, seed=seed, data_sharding=True)
    if name == "megatron":
        return RandomSampler(total, 0, mbs, rank, ranks, megatron_compat=True, data_sharding=True)
    if name == "length_grouped":
        lengths = dataset.lengths
        return StreamSampler(total, 0, mbs, rank, ranks, seed=seed, order=name, lengths=lengths, group_size=GBS)
    return StreamSampler(total, 0, mbs, rank, ranks, seed=seed, order=name.removeprefix("stream-"))


CASES = [
    *(("gpt", s) for s in ("pretraining", "random", "random-sharded", "megatron", "feistel", "stream-random")),
    ("gpt", "sequential"),
    ("packed", "random"),
    ("packed", "feistel"),
    ("sft", "length_grouped"),
    ("sft", "pretraining"),
    ("blend", "random-sharded"),
    ("blend", "feistel"),
    ("schedule", "pretraining"),
    ("schedule", "sequential"),
    ("adaptive", "pretraining"),
    ("adaptive", "sequential"),
]
SEEDED = {"random", "random-sharded", "feistel", "stream-random", "length_grouped"}  # samplers with a seed of their own


def _loader(dataset, sampler) -> StatefulLoader:
    """A loader over ``dataset``; an AdaptiveBlend afresh (a run's weight updates live in its blend)."""
    from tokenport.blend import AdaptiveBlend

    if isinstance(dataset, AdaptiveBlend):
        dataset = AdaptiveBlend(dataset.datasets, [1, 1], num_samples=len(dataset))
    return StatefulLoader(dataset, sampler)


def _run(loader, steps: int = STEPS, hooks=None, start: int = 0) -> list[dict]:
    """Hand batches over up to ``steps`` handovers in all (``start`` already made), saving a state every EVERY;
    ``hooks[handed]`` runs after that many handovers (a fault moving the position outside the loader); over an
    AdaptiveBlend the weights change after every other batch (real weight updates)."""
    from tokenport.blend import AdaptiveBlend

    states, handed, hooks = [], start, hooks or {}
    while handed < steps:
        assert len(loader), "the data ends before the run does"
        for _ in loader:
            handed += 1
            if isinstance(loader.dataset, AdaptiveBlend) and handed % 2:
                loader.set_mixture([1.0, 1.0 + handed % 5])
            if handed in hooks:
                hooks[handed](loader)
            if handed % EVERY == 0:
                states.append(json.loads(json.dumps(loader.state_dict())))
            if handed == steps:
                break
    return states


def _skip(loader) -> None:
    loader.sampler.consumed_samples += GBS  # the next batch is never handed over


def _back(loader) -> None:
    loader.sampler.consumed_samples -= GBS  # the last batch is handed over again


def _back_two(loader) -> None:
    loader.sampler.consumed_samples -= 2 * GBS


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """Per stream kind, its dataset (content 0) and a cache of honest runs per sampler."""
    root = tmp_path_factory.mktemp("audit-faults")
    out = {}
    for kind in dict.fromkeys(k for k, _ in CASES):
        (root / kind).mkdir()
        out[kind] = _dataset(kind, root / kind, 0)
    return root, out


def _steps_of(states) -> list[int]:
    return [s["certificate"]["steps"] for s in states]


def _first_differing_step(before: dict, after: dict, dataset) -> int:
    """Brute force: the first step whose global batch (sample ids) differs between the two states' streams."""
    a, b = (GlobalBatches(s["sampler"], dataset) for s in (before, after))
    step = 0
    while step < STEPS and np.array_equal(a.ids(step * GBS), b.ids(step * GBS)):
        step += 1
    return step


@pytest.mark.parametrize(("kind", "name"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_faults_are_found_at_their_first_step_and_clean_series_are_consistent(worlds, kind, name):
    root, datasets = worlds
    dataset = datasets[kind]
    rng = np.random.default_rng(CASES.index((kind, name)))
    honest = _run(_loader(dataset, _sampler(name, dataset)))
    assert _steps_of(honest) == [3, 6, 9, 12]
    assert audit(honest).consistent

    # a real resume on the same topology, and (where the sampler resumes elastically) on another one
    at = int(rng.integers(0, 3))
    resumed = _loader(dataset, _sampler(name, dataset))
    resumed.load_state_dict(honest[at])
    again = _run(resumed, start=(at + 1) * EVERY)
    assert again == honest[at + 1 :]
    assert audit(honest[: at + 1] + again).consistent
    for mbs, ranks in ((1, 4), (1, 3)):  # the same global batch on other ranks; another global batch
        other = _loader(dataset, _sampler(name, dataset, mbs=mbs, ranks=ranks))
        try:
            other.load_state_dict(honest[at])
        except ConfigError:  # Megatron's order, or a global batch change inside an epoch: refused, not audited
            continue
        wider = _run(other, steps=(at + 1) * EVERY + 3, start=(at + 1) * EVERY)
        assert audit([*honest[: at + 1], *wider]).consistent, (mbs, ranks)

    # a skipped step, a repeated step, two batches swapped: the first moved handover is the divergence
    f = int(rng.integers(1, STEPS - 3))
    for hooks, expected in (
        ({f: _skip}, "skipped"),
        ({f: _back}, "repeated"),
        ({f: _skip, f + 1: _back_two, f + 2: _skip}, "skipped"),
    ):
        faulty = _run(_loader(dataset, _sampler(name, dataset)), hooks=hooks)
        report = audit(faulty)
        assert report.divergence is not None, (f, expected)
        assert (report.divergence.step, expected in report.divergence.what) == (f, True), report.render()
        first = next(k for k, s in enumerate(faulty) if s["certificate"]["steps"] >= f)
        assert report.divergence.source == f"state {first}"

    # another seed spliced in from state k: the first step whose sample ids differ
    k = int(rng.integers(1, 4))
    if name in SEEDED:
        other = _run(_loader(dataset, _sampler(name, dataset, seed=9)))
        report = audit(honest[:k] + other[k:])
        step = _first_differing_step(honest[0], other[0], dataset)
        assert report.divergence is not None and report.divergence.step == step, report.render()
        assert report.divergence.source == f"state {k}"

    # a state of a run on another global batch (not a resume) spliced in at k: other batches from step 0
    other = _run(_loader(dataset, _sampler(name, dataset, mbs=1, ranks=3)))
    report = audit(honest[:k] + other[k:])
    assert report.divergence is not None and report.divergence.step == 0, report.render()

    # a state of another run (a repeat at step g) spliced in at k: its first moved step
    g = int(rng.integers(1, k * EVERY))
    other = _run(_loader(dataset, _sampler(name, dataset)), hooks={g: _back})
    report = audit(honest[:k] + other[k:])
    assert report.divergence is not None and report.divergence.step == g, (g, k, report.render())

    # states out of order
    k = int(rng.integers(0, 3))
    swapped = list(honest)
    swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
    report = audit(swapped)
    assert report.divergence is not None and report.divergence.step == (k + 1) * EVERY
    assert "out of order" in report.divergence.what and report.divergence.source == f"state {k + 1}"


@pytest.mark.parametrize("field", ["digest", "previous", "base", "data", "order", "runs"])
@pytest.mark.parametrize(("kind", "name"), [("gpt", "feistel"), ("adaptive", "pretraining"), ("blend", "random")])
def test_a_hand_edited_certificate_field_is_reported_in_the_edited_state(worlds, kind, name, field):
    _, datasets = worlds
    dataset = datasets[kind]
    honest = _run(_loader(dataset, _sampler(name, dataset)))
    k = ["digest", "previous", "base", "data", "order", "runs"].index(field) % 4
    edited = copy.deepcopy(honest)
    certificate = edited[k]["certificate"]
    if field == "runs":
        certificate["runs"] = [[0, 0], [1, 2 * GBS]]  # a jump that was never made
    else:
        certificate[field] = "5" * 32
    report = audit(edited)
    assert report.divergence is not None, field
    assert report.divergence.source == f"state {k}", report.render()
    assert "edited" in report.divergence.what or field == "runs", report.render()
    assert 0 <= report.divergence.step < certificate["steps"]


@pytest.mark.parametrize(("kind", "name"), [("gpt", "random"), ("packed", "feistel"), ("blend", "feistel")])
def test_a_store_prepared_again_with_other_content_is_the_divergence_from_step_0(tmp_path, kind, name):
    first = _dataset(kind, tmp_path, 0)
    before = _run(StatefulLoader(first, _sampler(name, first)))
    second = _dataset(kind, tmp_path, 7)  # the same prefixes, other documents
    after = _run(StatefulLoader(second, _sampler(name, second)))
    k = 2
    report = audit(before[:k] + after[k:])
    assert report.divergence is not None and report.divergence.step == 0, report.render()
    assert "other data" in report.divergence.what or "not the data here" in report.divergence.what
    assert audit(after).consistent


def test_a_last_state_whose_position_was_moved_is_a_divergence(worlds):
    """A state saved right after its position was moved would skip (or repeat) its next step if resumed."""
    _, datasets = worlds
    dataset = datasets["gpt"]
    for hook, kind in ((_skip, "skipped"), (_back, "repeated")):
        states = _run(_loader(dataset, _sampler("feistel", dataset)), hooks={STEPS: hook})
        report = audit(states)
        assert report.divergence is not None, kind
        assert report.divergence.step == STEPS and kind in report.divergence.what, report.render()
        assert report.divergence.source == f"state {len(states) - 1}"

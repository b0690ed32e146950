"""The certificate of a stream: a hash chain in every loader state, checked on resume, and `tokenport audit`.

A training loop saves loader states every few steps; a resumed run certifies the same chain as an
uninterrupted one on every rank; audit passes on an honest series and reports the first divergence
of a run that skipped or repeated a step, trained on a changed store or another seed; a resume
refuses a state whose digest or position was edited; the certificate field is mutation-fuzzed, and
random call sequences are compared with a model of the handed-over positions.
"""

from __future__ import annotations

import copy
import json
import logging
import random

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import build_store, random_documents
from tokenport.cli import main
from tokenport.errors import TokenportError
from tokenport.integrations import StatefulLoader
from tokenport.integrations.audit import audit
from tokenport.integrations.certificate import LINK, GlobalBatches, data_digest, extend, genesis, link, order_digest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

MBS, RANKS = 2, 2
GBS = MBS * RANKS


def _dataset(prefix, seed: int = 0) -> tp.GPTDataset:
    documents = random_documents(np.random.default_rng(seed), 40, tokens=(32, 127), length=(5, 40), append=256)
    store = tp.IndexedDataset(build_store(prefix, documents, tokenizer=tp.load_tokenizer("byte")))
    return tp.GPTDataset(store, np.arange(40), 60, tp.GPTSampleConfig(8, 256), 1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return _dataset(tmp_path_factory.mktemp("store") / "s")


def _loader(dataset, seed: int = 3, rank: int = 0) -> StatefulLoader:
    return StatefulLoader.for_dataset(
        dataset, micro_batch_size=MBS, seed=seed, data_parallel_rank=rank, data_parallel_size=RANKS
    )


def _train(loader, steps: int, every: int = 3, hook=None) -> list[dict]:
    """Hand ``steps`` batches to a 'trainer', saving the state every ``every`` steps; ``hook(loader, step)``
    runs after each batch (to inject a skip or a repeat)."""
    states = []
    handed = 0
    while handed < steps:
        for _ in loader:
            handed += 1
            if hook is not None:
                hook(loader, handed)
            if handed % every == 0:
                states.append(json.loads(json.dumps(loader.state_dict())))
            if handed == steps:
                break
    return states


def _save(tmp_path, states, name="run") -> list[str]:
    paths = []
    for k, state in enumerate(states):
        path = tmp_path / f"{name}{k}.json"
        path.write_text(json.dumps(state))
        paths.append(str(path))
    return paths


def _chain(dataset, state, positions) -> str:
    """The model's digest: the chain over the handed-over positions, from the certificate's definition (/2)."""
    data, order = data_digest(state["receipt"]["dataset"]), order_digest(state["sampler"])
    digest = genesis()
    if not positions:
        return digest.hex()
    blocks = (len(positions) - 1) // LINK  # full blocks before the last (partial or full) one
    for i in range(blocks):
        digest = link(digest, data, order, np.array(positions[i * LINK : (i + 1) * LINK]))
    return link(digest, data, order, np.array(positions[blocks * LINK :])).hex()


def _ids_chain(dataset, state, positions) -> str:
    """The /1 chain over the global batches' sample ids at the handed-over positions."""
    batches = GlobalBatches(state["sampler"], dataset)
    data = data_digest(state["receipt"]["dataset"])
    digest = genesis()
    for consumed in positions:
        digest = extend(digest, data, consumed, batches.ids(consumed))
    return digest.hex()


def test_every_rank_and_a_resumed_run_certify_the_uninterrupted_chain(dataset):
    whole = _train(_loader(dataset), 12)
    other_rank = _train(_loader(dataset, rank=1), 12)
    assert [s["certificate"] for s in whole] == [s["certificate"] for s in other_rank]
    assert whole[-1]["certificate"]["digest"] == _chain(dataset, whole[-1], [k * GBS for k in range(12)])
    resumed = _loader(dataset)
    resumed.load_state_dict(whole[1])  # after 6 steps
    later = _train(resumed, 6)
    assert later[-1]["certificate"] == whole[-1]["certificate"]
    assert later[-1]["certificate"]["runs"] == [[0, 0]]


def test_audit_passes_on_an_honest_series_and_the_cli_prints_one_json_object(dataset, tmp_path, capsys):
    states = _train(_loader(dataset), 12)
    paths = _save(tmp_path, states)
    torch.save({"model": {}, "loader": states[1]}, tmp_path / "ckpt.pt")
    report = audit([paths[0], str(tmp_path / "ckpt.pt"), *paths[2:]])
    assert report.consistent and report.steps == (3, 6, 9, 12)
    capsys.readouterr()
    assert main(["audit", *paths, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["consistent"] is True and out["divergence"] is None and len(out["states"]) == 4
    assert main(["audit", *paths]) == 0
    assert "consistent" in capsys.readouterr().out


def _skip_at(step):
    def hook(loader, handed):
        if handed == step:
            loader.sampler.advance()  # the next batch is never handed over

    return hook


def _repeat_at(step):
    def hook(loader, handed):
        if handed == step:
            loader.sampler.consumed_samples -= GBS  # the last batch is handed over again

    return hook


@pytest.mark.parametrize(("hook", "kind"), [(_skip_at(5), "skipped"), (_repeat_at(5), "repeated")])
def test_audit_reports_a_step_skipped_or_repeated_within_the_run(dataset, tmp_path, capsys, hook, kind):
    states = _train(_loader(dataset), 12, hook=hook)
    report = audit(states)
    assert not report.consistent
    assert report.divergence.step == 5 and kind in report.divergence.what
    assert report.divergence.source == "state 1"  # the first state that covers step 5
    honest = _train(_loader(dataset), 3)
    mixed = audit([honest[0], *states[1:]])
    assert mixed.divergence.step == 5
    capsys.readouterr()
    assert main(["audit", *_save(tmp_path, states), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["consistent"] is False and out["divergence"]["step"] == 5


def test_audit_reports_states_out_of_order(dataset):
    states = _train(_loader(dataset), 9)
    report = audit([states[1], states[0], states[2]])
    assert report.divergence.step == 3 and "repeated" in report.divergence.what


def test_audit_reports_another_seed_at_its_first_step(dataset):
    honest = _train(_loader(dataset), 6)
    other = _train(_loader(dataset, seed=4), 6)
    report = audit([honest[0], other[1]])
    assert report.divergence.step == 0 and "other sample ids" in report.divergence.what
    assert report.divergence.source == "state 1"


def test_audit_reports_a_store_prepared_again_with_other_content(tmp_path):
    first = _dataset(tmp_path / "s", seed=0)
    before = _train(_loader(first), 6)
    second = _dataset(tmp_path / "s", seed=1)  # the same prefix, other documents
    after = _train(_loader(second), 6)
    report = audit([before[0], after[1]])
    assert report.divergence.step == 0
    assert "other data" in report.divergence.what and "content" in report.divergence.what
    alone = audit([before[1]])  # its receipt's store is no longer the store here
    assert alone.divergence.step == 0 and "not the data here" in alone.divergence.what


def test_a_resume_refuses_an_edited_digest_or_position_changing_nothing(dataset):
    states = _train(_loader(dataset), 9)
    loader = _loader(dataset)
    _train(loader, 2)
    before = loader.state_dict()
    edits = {
        "digest": lambda s: s["certificate"].update(digest="0" * 32),
        "previous": lambda s: s["certificate"].update(previous="1" * 32),
        "data": lambda s: s["certificate"].update(data="2" * 32),
        "runs": lambda s: s["certificate"].update(runs=[[0, GBS]]),
    }
    for name, edit in edits.items():
        bad = copy.deepcopy(states[1])
        edit(bad)
        with pytest.raises(tp.ConfigError, match=r"state\['certificate'\]"):
            loader.load_state_dict(bad)
        assert loader.state_dict() == before, name
    skipped = copy.deepcopy(states[1])  # a position moved on by a step: resuming would skip a batch
    for key in ("sampler", "receipt"):
        section = skipped[key] if key == "sampler" else skipped[key]["position"]
        section["consumed_samples"] += GBS
    with pytest.raises(tp.ConfigError, match="skipped or repeated"):
        loader.load_state_dict(skipped)
    assert loader.state_dict() == before


def test_a_state_without_a_certificate_resumes_and_starts_a_chain(dataset, caplog):
    state = _train(_loader(dataset), 6)[0]
    del state["certificate"]
    loader = _loader(dataset)
    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.torch"):
        loader.load_state_dict(state)
    assert "no certificate" in caplog.text
    cert = _train(loader, 3)[0]["certificate"]
    assert (cert["since"], cert["steps"], cert["runs"]) == (3, 6, [[3, 3 * GBS]])
    with pytest.raises(tp.ConfigError, match="no certificate"):
        audit([state])


@pytest.mark.parametrize("ids_format", [False, True], ids=["format-2", "format-1"])
def test_mutated_certificates_are_refused_or_resume_as_saved(dataset, ids_format):
    state = _train(_loader(dataset), 6)[1]
    if ids_format:
        state = _as_ids_format(dataset, state)
    loader = _loader(dataset)
    before = loader.state_dict()
    refused = 0
    for label, data in mutations(json.dumps(state["certificate"])):
        try:
            certificate = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            continue  # not JSON: the state's reader sees the dict, the file readers are fuzzed elsewhere
        mutated = {**state, "certificate": certificate}
        try:
            loader.load_state_dict(mutated)
        except TokenportError:
            refused += 1
            assert loader.state_dict() == before, label
            continue
        resumed = loader.state_dict()["certificate"]
        if ids_format:  # a /1 certificate is carried on by a /2 segment from its digest
            assert (resumed["since"], resumed["base"]) == (6, state["certificate"]["digest"]), label
        else:
            assert resumed == state["certificate"], label
        loader = _loader(dataset)
    assert refused > 100


@pytest.mark.parametrize("seed", range(3))
def test_random_call_sequences_match_a_model_of_the_handed_positions(dataset, seed):
    rng = random.Random(seed)
    loader = _loader(dataset)
    positions: list[int] = []  # the model: the position of every batch handed over
    saved: list[tuple[dict, list[int]]] = []
    for _ in range(25):
        call = rng.choice(["hand", "hand", "state", "load", "bad", "skip"])
        if call == "hand":
            batches = iter(loader)
            for _ in range(rng.randint(1, 4)):
                if loader.consumed_samples >= len(dataset) * (loader.epoch + 1) - GBS:
                    break
                at = loader.consumed_samples
                next(batches)
                positions.append(at)
        elif call == "state":
            saved.append((json.loads(json.dumps(loader.state_dict())), list(positions)))
        elif call == "load" and saved:
            state, handed = rng.choice(saved)
            loader.load_state_dict(state)
            positions = list(handed)
        elif call == "bad" and saved:
            state = copy.deepcopy(rng.choice(saved)[0])
            state["certificate"]["digest"] = "f" * 32
            before = loader.state_dict()
            if state["certificate"]["steps"]:
                with pytest.raises(tp.ConfigError):
                    loader.load_state_dict(state)
                assert loader.state_dict() == before
        elif call == "skip":
            loader.sampler.advance()
        state = loader.state_dict()
        assert state["certificate"]["steps"] == len(positions)
        if not state["certificate"]["since"]:
            assert state["certificate"]["digest"] == _chain(dataset, state, positions)


@pytest.mark.parametrize("kind", ["pretraining", "random", "stream-feistel", "stream-random", "stream-sequential"])
def test_each_samplers_chain_is_its_global_batches_in_rank_order(dataset, kind):
    """The loader's hashing (a StreamSampler's global stream at once) equals every rank's micro-batch, in rank order."""
    from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

    total = len(dataset)
    make = {
        "pretraining": lambda rank: PretrainingSampler(total, 0, MBS, rank, RANKS),
        "random": lambda rank: RandomSampler(total, 0, MBS, rank, RANKS, seed=7),
        "stream-feistel": lambda rank: StreamSampler(total, 0, MBS, rank, RANKS, seed=7, order="feistel"),
        "stream-random": lambda rank: StreamSampler(total, 0, MBS, rank, RANKS, seed=7, order="random"),
        "stream-sequential": lambda rank: StreamSampler(total, 0, MBS, rank, RANKS, order="sequential"),
    }[kind]
    loaders = [StatefulLoader(dataset, make(rank)) for rank in range(RANKS)]
    handed = {rank: [] for rank in range(RANKS)}
    positions = []
    for rank, loader in enumerate(loaders):
        for step, batch in zip(range(20), loader):  # past one epoch of 15 global batches where the sampler cycles
            if rank == 0:
                positions.append(step * GBS)
            handed[rank].append(batch["tokens"])
    states = [json.loads(json.dumps(loader.state_dict())) for loader in loaders]
    assert states[0]["certificate"] == states[1]["certificate"]
    assert states[0]["certificate"]["steps"] == len(positions)
    assert states[0]["certificate"]["digest"] == _chain(dataset, states[0], positions)
    batches = GlobalBatches(states[0]["sampler"], dataset)
    for step, consumed in enumerate(positions):  # the ids hashed are the samples each rank was handed
        ids = batches.ids(consumed)
        for rank in range(RANKS):
            want = np.stack([dataset[int(i)]["tokens"] for i in ids[rank * MBS : (rank + 1) * MBS]])
            np.testing.assert_array_equal(handed[rank][step].numpy(), want)


def test_a_resume_on_another_global_batch_starts_a_segment_that_audit_links_to_the_last(dataset):
    before = _train(_loader(dataset), 6)
    wider = StatefulLoader.for_dataset(
        dataset, micro_batch_size=MBS, seed=3, data_parallel_rank=0, data_parallel_size=3
    )
    wider.load_state_dict(before[1])
    after = _train(wider, 3)
    cert = after[0]["certificate"]
    assert (cert["since"], cert["steps"], cert["base"]) == (6, 9, before[1]["certificate"]["digest"])
    assert audit([before[0], before[1], after[0]]).consistent
    forged = copy.deepcopy(after[0])
    forged["certificate"]["base"] = before[0]["certificate"]["digest"]
    report = audit([before[1], forged])
    assert report.divergence.step == 6 and "another digest" in report.divergence.what


def test_a_run_recorded_at_or_past_the_certified_steps_is_refused(dataset):
    """A jump is recorded when a batch is handed over: one at the step the state resumes from never was."""
    state = _train(_loader(dataset), 6)[1]
    state["certificate"]["runs"] = [[0, 0], [6, 10 * GBS]]
    loader = _loader(dataset)
    with pytest.raises(tp.ConfigError, match="runs"):
        loader.load_state_dict(state)
    with pytest.raises(tp.ConfigError, match="runs"):
        audit([state])


def test_audit_of_an_adaptive_blend_checks_the_weight_updates_of_the_steps_trained(dataset, tmp_path):
    from tokenport.blend import AdaptiveBlend
    from tokenport.sampling import StreamSampler

    children = [dataset, _dataset(tmp_path / "t", seed=2)]
    blend = AdaptiveBlend(children, [1, 1], num_samples=40)
    loader = StatefulLoader(blend, StreamSampler(40, 0, MBS, 0, RANKS, order="sequential"))
    states = []
    batches = iter(loader)
    for step in range(6):
        next(batches)
        loader.set_mixture([1.0, 1.0 + step])
        if step % 3 == 2:
            states.append(json.loads(json.dumps(loader.state_dict())))
    assert audit(states).consistent
    other = copy.deepcopy(states[1])
    first = other["mixture"]["updates"][0]
    first[1] = [5.0, 1.0]  # the first update's weights, otherwise
    report = audit([states[0], other])
    assert not report.consistent and "weight updates" in report.divergence.what
    assert report.divergence.step == first[0] // GBS


class _Ids:
    """A map-style dataset of ``len(lengths)`` samples, each its id; ``lengths`` only when ``with_lengths``."""

    def __init__(self, lengths, with_lengths: bool) -> None:
        self.size = len(lengths)
        if with_lengths:
            self.lengths = lengths

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        return {"id": np.int64(i)}


@pytest.mark.parametrize("with_lengths", [True, False])
def test_a_length_grouped_stream_is_certified_when_its_dataset_holds_the_lengths(with_lengths, caplog):
    from tokenport.sampling import StreamSampler

    lengths = np.random.default_rng(0).integers(1, 100, 40)

    def make():
        sampler = StreamSampler(40, 0, 2, 0, 1, seed=1, order="length_grouped", lengths=lengths, group_size=2)
        return StatefulLoader(_Ids(lengths, with_lengths), sampler)

    loader = make()
    batches = iter(loader)
    handed = [next(batches)["id"].tolist() for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="tokenport.integrations.torch"):
        state = json.loads(json.dumps(loader.state_dict()))
    assert ("certificate" in state) is with_lengths
    assert ("cannot be replayed" in caplog.text) is not with_lengths
    if with_lengths:
        batches_of = GlobalBatches(state["sampler"], loader.dataset)
        assert [batches_of.ids(k * 2).tolist() for k in range(3)] == handed
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.consumed_samples == 6


def _as_ids_format(dataset, state) -> dict:
    """``state`` with the /1 certificate an older tokenport wrote for the same run (the chain over sample ids)."""
    old = copy.deepcopy(state)
    cert = old["certificate"]
    positions = [k * GBS for k in range(cert["steps"])]  # an honest run from step 0
    del cert["order"], cert["batch"]
    cert.update(
        format="tokenport.certificate/1",
        digest=_ids_chain(dataset, state, positions),
        previous=_ids_chain(dataset, state, positions[:-1]),
    )
    return old


def test_a_format_1_state_is_read_checked_resumed_and_audited(dataset):
    states = _train(_loader(dataset), 9)
    assert states[0]["certificate"]["format"] == "tokenport.certificate/2"
    old = [_as_ids_format(dataset, s) for s in states[:2]]
    assert audit(old).consistent
    loader = _loader(dataset)
    loader.load_state_dict(old[1])  # its last step recomputed from the sample ids
    later = _train(loader, 3)[0]
    cert = later["certificate"]
    assert (cert["format"], cert["since"], cert["base"], cert["steps"]) == (
        "tokenport.certificate/2",
        6,
        old[1]["certificate"]["digest"],
        9,
    )
    assert audit([*old, later]).consistent
    edited = copy.deepcopy(old[1])
    edited["certificate"]["digest"] = "3" * 32
    fresh = _loader(dataset)
    before = fresh.state_dict()
    with pytest.raises(tp.ConfigError, match="step 5"):
        fresh.load_state_dict(edited)
    assert fresh.state_dict() == before
    report = audit([old[0], edited])
    assert report.divergence.step == 5 and report.divergence.source == "state 1"
    with_order = copy.deepcopy(old[1])
    with_order["certificate"]["order"] = states[1]["certificate"]["order"]
    with pytest.raises(tp.ConfigError, match="order"):
        fresh.load_state_dict(with_order)


def test_a_sampler_that_orders_samples_otherwise_is_caught_by_resume_and_audit(dataset, monkeypatch):
    """Positions and the order's digest agree, but the code at hand gives other ids (another version's order):
    the certificate's `batch` (the last step's ids) catches it on resume and in audit; nothing changes."""
    from tokenport.sampling.stream import StreamSampler

    states = _train(_loader(dataset), 6)
    assert audit(states).consistent
    ids_at = StreamSampler._ids_at
    monkeypatch.setattr(StreamSampler, "_ids_at", lambda self, positions: (ids_at(self, positions) + 1) % len(dataset))
    loader = _loader(dataset)
    before = loader.state_dict()
    with pytest.raises(tp.ConfigError, match="step 2's global batch.*other sample ids"):
        loader.load_state_dict(states[0])
    assert loader.state_dict() == before
    report = audit(states)
    assert report.divergence.step == 2 and report.divergence.source == "state 0", report.render()
    assert "other sample ids" in report.divergence.what


def test_a_resume_recomputes_the_whole_segment_not_only_its_last_step(dataset):
    """A certificate whose last step extends `previous` to `digest` but whose earlier steps do not reach
    `previous` is refused, naming the steps it spans; nothing changes."""
    state = _train(_loader(dataset), 6)[1]
    loader = _loader(dataset)
    before = loader.state_dict()
    for field, match in (("previous", r"a step in 0\.\.4 diverges"), ("digest", "step 5"), ("base", "a step in")):
        forged = copy.deepcopy(state)
        forged["certificate"][field] = "4" * 32
        with pytest.raises(tp.ConfigError, match=match):
            loader.load_state_dict(forged)
        assert loader.state_dict() == before
        assert audit([forged]).divergence.step == 5


def test_long_runs_with_jumps_and_resumes_certify_the_model_chain_at_every_block_edge(dataset):
    """Blocks of LINK handovers: states at, just before and just past block edges, across a jump and a resume."""
    loader = _loader(dataset)
    positions: list[int] = []
    for handed in range(1, 3 * LINK + 3):
        if handed == LINK + 5:
            loader.sampler.advance()  # a skipped step: a jump in runs
        positions.append(loader.consumed_samples)
        loader._hand_over()
        if handed in (1, LINK - 1, LINK, LINK + 1, 2 * LINK, 2 * LINK + 1, 3 * LINK + 2):
            state = json.loads(json.dumps(loader.state_dict()))
            assert state["certificate"]["digest"] == _chain(dataset, state, positions), handed
            assert state["certificate"]["previous"] == _chain(dataset, state, positions[:-1]), handed
            if handed == 2 * LINK:
                loader = _loader(dataset)
                loader.load_state_dict(state)  # the block boundary is recomputed from `base`


def test_the_order_digest_names_the_global_order_not_the_layout_or_position(dataset):
    from tokenport.sampling import RandomSampler, StreamSampler

    total = len(dataset)

    def digest(make, **changes):
        sampler = make()
        for name, value in changes.items():
            setattr(sampler, name, value)
        return order_digest(sampler.state_dict())

    stream = lambda mbs=2, ranks=2, seed=1, rank=0: StreamSampler(total, 0, mbs, rank, ranks, seed=seed)  # noqa: E731
    base = digest(stream)
    assert digest(lambda: stream(rank=1)) == base
    assert digest(lambda: stream(mbs=1, ranks=4)) == base  # the same global batch on other ranks
    assert digest(stream, consumed_samples=8) == base
    assert digest(lambda: stream(seed=2)) != base
    assert digest(lambda: stream(mbs=3)) != base  # another global batch
    megatron = [RandomSampler(total, 0, mbs, 0, ranks, megatron_compat=True) for mbs, ranks in ((2, 2), (1, 4))]
    assert order_digest(megatron[0].state_dict()) != order_digest(megatron[1].state_dict())


class _Reversed:
    """A sampler registered from outside tokenport (ids in reverse order): tokenport cannot name its order."""

    def __init__(self, total: int, rank: int = 0) -> None:
        self.total_samples, self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size = (
            total,
            MBS,
            rank,
            2,
        )
        self.global_batch_size, self.consumed_samples, self.auto_advance = GBS, 0, False

    def __len__(self) -> int:
        return (self.total_samples - self.consumed_samples) // GBS

    def __iter__(self):
        for start in range(self.consumed_samples, self.total_samples - GBS + 1, GBS):
            lo = start + self.data_parallel_rank * MBS
            yield [self.total_samples - 1 - p for p in range(lo, lo + MBS)]

    def advance(self, num_samples: int | None = None) -> None:
        self.consumed_samples += GBS if num_samples is None else num_samples

    def consumed_stream(self):
        yield np.arange(self.total_samples - 1, self.total_samples - 1 - self.consumed_samples, -1, dtype=np.int64)

    def state_dict(self) -> dict:
        keys = ("consumed_samples", "total_samples", "micro_batch_size", "data_parallel_size")
        return {"sampler": "certificate-test-reversed", **{key: getattr(self, key) for key in keys}}

    def load_state_dict(self, state) -> None:
        self.consumed_samples = int(state["consumed_samples"])


def test_a_registered_samplers_chain_hashes_its_sample_ids_format_1(dataset):
    from tokenport.integrations import register_sampler

    register_sampler("certificate-test-reversed", lambda state, rank, data: _Reversed(state["total_samples"], rank))
    states = _train(StatefulLoader(dataset, _Reversed(len(dataset))), 9)
    cert = states[-1]["certificate"]
    assert cert["format"] == "tokenport.certificate/1" and "order" not in cert
    assert cert["digest"] == _ids_chain(dataset, states[-1], [k * GBS for k in range(9)])
    assert audit(states).consistent
    resumed = StatefulLoader(dataset, _Reversed(len(dataset)))
    resumed.load_state_dict(states[1])
    assert _train(resumed, 3)[0]["certificate"] == cert

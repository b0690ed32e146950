"""Takedown: removed documents' tokens are hidden from the step of the removal on, every other token unchanged.

Each run is compared token by token with the same run without a removal; the expectation is computed from
``dataset.lineage(sample)``'s pieces (not from ``occurrences``, which the loader uses).
"""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.errors import ConfigError
from tokenport.integrations import StatefulLoader
from tokenport.integrations.tracing import step_sample_ids
from tokenport.samples.gpt import GPTDataset
from tokenport.samples.packed import PackedDataset
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler


def _write(prefix, seed: int, documents: int = 30) -> str:
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(10, 90), append=256)
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"))


def _take(loader: StatefulLoader, steps: int, remove_at: int | None = None, documents=()) -> list[dict]:
    """``steps`` batches (epoch after epoch) as numpy arrays; ``remove_at``: remove ``documents`` after that many."""
    out: list[dict] = []
    while len(out) < steps:
        before = len(out)
        for batch in loader:
            if len(out) == remove_at:
                loader.remove_documents(documents)
            out.append({name: np.asarray(value).copy() for name, value in batch.items()})
            if len(out) == remove_at:
                loader.remove_documents(documents)
            if len(out) == steps:
                break
        if len(out) == before:
            break
    return out


def _leaf(dataset, sample: int):
    """The dataset that assembled ``sample`` (through blends) and its sample id there."""
    lineage = dataset.lineage(sample)
    node = dataset
    for child, _ in lineage.path:
        node = node.datasets[child]
    return node, lineage


def _hidden(dataset, sample: int, removed: set) -> tuple[object, np.ndarray]:
    """(the leaf dataset, positions of ``sample`` its removed documents' pieces hold), from lineage."""
    leaf, lineage = _leaf(dataset, sample)
    positions, offset = [], 0
    for document, start, end in lineage.pieces:
        if (lineage.store, document) in removed:
            positions.extend(range(offset, offset + end - start))
        offset += end - start
    return leaf, np.asarray(positions, dtype=np.int64)


def _expected(batch: dict, row: int, leaf, hidden: np.ndarray) -> dict:
    """``batch`` with the rule of the module docstring applied to ``row``, position by position."""
    out = {name: value.copy() for name, value in batch.items()}
    held = set(hidden.tolist())
    if isinstance(leaf, GPTDataset):
        tokens, labels, loss = "tokens", "labels", "loss_mask"
        pad, label_pad, shifted = 0, 0, True
    elif isinstance(leaf, PackedDataset):
        tokens, labels, loss = "tokens", "labels", None
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, True
    elif leaf.shape == "megatron":
        tokens, labels, loss = "tokens", "labels", "loss_mask"
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, True
    else:
        tokens, labels, loss = "input_ids", "labels", None
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, False
    for j in range(out[tokens].shape[1]):
        near = j in held or (shifted and j + 1 in held)
        if j in held:
            out[tokens][row, j] = pad
        if j + 1 in held if isinstance(leaf, GPTDataset) else near:
            out[labels][row, j] = label_pad
        if loss is not None and near:
            out[loss][row, j] = 0
    return out


def _check_run(dataset, sampler_of, steps: int, at: int, removed: list[tuple[str, int]]) -> None:
    """Run A (no removal) and B (``removed`` at step ``at``, live; and by takedown + resume): token by token."""
    plain = _take(StatefulLoader(dataset, sampler_of()), steps)
    live_loader = StatefulLoader(dataset, sampler_of())
    live = _take(live_loader, steps, remove_at=at, documents=removed)
    first = StatefulLoader(dataset, sampler_of())
    head = _take(first, at)
    resumed_loader = StatefulLoader(dataset, sampler_of())
    resumed_loader.load_state_dict(tp.takedown(first.state_dict(), removed))
    resumed = head + _take(resumed_loader, steps - at)
    state = live_loader.state_dict()
    sampler = sampler_of()
    rank = sampler.data_parallel_rank
    gbs = sampler.micro_batch_size * sampler.data_parallel_size
    gone = set(removed)
    hits = 0
    for step, (a, b, c) in enumerate(zip(plain, live, resumed, strict=True)):
        expected = {name: value.copy() for name, value in a.items()}
        if step >= at:
            state["sampler"]["consumed_samples"] = max(state["sampler"]["consumed_samples"], (step + 1) * gbs)
            ids = step_sample_ids(state["sampler"], step, rank, dataset)[rank]
            for row, sample in enumerate(ids):
                leaf, hidden = _hidden(dataset, sample, gone)
                if len(hidden):
                    hits += 1
                    expected = _expected(expected, row, leaf, hidden)
        for name in a:
            assert np.array_equal(b[name], expected[name]), (step, name)
            assert np.array_equal(c[name], expected[name]), (step, name, "resumed")
    assert hits, "the removed documents were in no batch after the removal: pick others"


@pytest.mark.parametrize("kind", ["pretraining", "random", "feistel"])
def test_a_gpt_run_hides_removed_documents_token_by_token(tmp_path, kind):
    prefix = _write(tmp_path / "g", 1)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 90, tp.GPTSampleConfig(16), seed=1)  # several epochs

    def sampler_of():
        if kind == "pretraining":
            return PretrainingSampler(len(gpt), 0, 2, 1, 2, auto_advance=False)
        if kind == "random":
            return RandomSampler(len(gpt), 0, 2, 1, 2, seed=3)
        return StreamSampler(len(gpt), 0, 2, 1, 2, seed=4, order="feistel")

    rng = np.random.default_rng(7)
    documents = rng.choice(len(store), 4, replace=False).tolist()
    _check_run(gpt, sampler_of, 40, 6, [(prefix, int(d)) for d in documents])


def _kinds(tmp_path):
    """(name, dataset, sampler factory, store prefix to remove from) for every stream kind."""
    from tests._support.stores import Doc
    from tokenport.blend import AdaptiveBlend, MixtureSchedule
    from tokenport.builder.specs import Blend

    rng = np.random.default_rng(11)
    drawn = random_documents(rng, 60, tokens=(32, 127), length=(10, 90), append=256)
    masked = [Doc(t, mask=(np.arange(len(t)) >= len(t) // 3).astype(np.uint8)) for t in drawn]
    chat = build_store(tmp_path / "chat", masked, tokenizer=tp.load_tokenizer("byte"), masks=True)
    chat_store = tp.IndexedDataset(chat)
    megatron = tp.SFTDataset(chat_store, 48, too_long="split", seed=2)
    hf = tp.SFTDataset(chat_store, 48, too_long="split", seed=2, shape="hf", pad_id=3, label_pad=-7)
    padded = tp.SFTDataset(chat_store, 64, packing="none", too_long="split", seed=2, shape="hf")
    packed_prefix = _write(tmp_path / "p", 3, 50)
    packed = tp.PackedDataset(tp.IndexedDataset(packed_prefix), 96, too_long="split", window=8, seed=6, pad_id=5)
    prefixes = [_write(tmp_path / name, seed, 20) for seed, name in enumerate(("a", "b"))]
    schedule = MixtureSchedule.from_data(
        [{"at": 0, "weights": [0.8, 0.2]}, {"at": 20, "ramp_to": [0.2, 0.8], "until": 40}]
    )
    scheduled = tp.build_datasets(
        Blend(tuple(prefixes), None, schedule), sizes=(60, 0, 0), config=tp.GPTSampleConfig(16), seed=1, split="1,0,0"
    )[0]
    blend = tp.build_datasets(
        Blend(tuple(prefixes), (0.4, 0.6), None),
        sizes=(60, 0, 0),
        config=tp.GPTSampleConfig(16, pad_id=300),
        seed=1,
        split="1,0,0",
    )[0]
    children = [
        tp.GPTDataset(tp.IndexedDataset(p), np.arange(20), 40, tp.GPTSampleConfig(16), seed=3) for p in prefixes
    ]
    adaptive = AdaptiveBlend(children, [1, 1], num_samples=60, updates=[[0, [1.0, 1.0]], [24, [0.1, 0.9]]])

    def stream(dataset, order="feistel"):
        return lambda: StreamSampler(len(dataset), 0, 2, 1, 2, seed=5, order=order)

    def ordered(dataset):
        return lambda: PretrainingSampler(len(dataset), 0, 3, 0, 2, auto_advance=False)

    return [
        ("sft-megatron", megatron, stream(megatron), chat),
        ("sft-hf", hf, lambda: RandomSampler(len(hf), 0, 2, 0, 2, seed=2), chat),
        ("sft-hf-unpacked", padded, stream(padded), chat),
        ("packed", packed, lambda: RandomSampler(len(packed), 0, 1, 0, 3, seed=2), packed_prefix),
        ("blend", blend, stream(blend), prefixes[1]),
        ("schedule", scheduled, ordered(scheduled), prefixes[1]),
        ("adaptive", adaptive, ordered(adaptive), prefixes[0]),
    ]


@pytest.mark.parametrize(
    "name", ["sft-megatron", "sft-hf", "sft-hf-unpacked", "packed", "blend", "schedule", "adaptive"]
)
def test_every_stream_kind_hides_removed_documents_token_by_token(tmp_path, name):
    _, dataset, sampler_of, prefix = next(kind for kind in _kinds(tmp_path) if kind[0] == name)
    rng = np.random.default_rng(len(name))
    count = len(tp.IndexedDataset(prefix))
    documents = [(str(prefix), int(d)) for d in rng.choice(count, max(3, count // 3), replace=False)]
    sampler = sampler_of()
    steps = min(24, len(dataset) // (sampler.micro_batch_size * sampler.data_parallel_size))
    _check_run(dataset, sampler_of, steps, 3, documents)


def _masked(dataset, sampler_state, rank: int, consumed: int, batch: dict, removals: list[tuple[int, set]]) -> dict:
    """``batch`` (handed over at ``consumed``) as the rule hides the removals made at or before ``consumed``."""
    gone = set().union(*(docs for since, docs in removals if since <= consumed))
    gbs = sampler_state["micro_batch_size"] * sampler_state["data_parallel_size"]
    state = {**sampler_state, "consumed_samples": consumed + gbs}
    expected = {name: value.copy() for name, value in batch.items()}
    for row, sample in enumerate(step_sample_ids(state, consumed // gbs, rank, dataset)[rank]):
        leaf, hidden = _hidden(dataset, sample, gone)
        if len(hidden):
            expected = _expected(expected, row, leaf, hidden)
    return expected


def test_remove_documents_follows_a_shadow_model_and_a_refused_call_changes_nothing(tmp_path):
    prefix = _write(tmp_path / "g", 2)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 120, tp.GPTSampleConfig(16), seed=1)

    def fresh():
        return StatefulLoader(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=4, order="feistel"))

    reference = fresh()
    rng = np.random.default_rng(5)
    loader = fresh()
    model: list[tuple[int, set]] = []  # (consumed_samples it applies from, the (store, document) pairs)
    saved: list[tuple[dict, list]] = []
    bad = [[("nowhere/store", 0)], [(prefix, len(store))], [(prefix, True)], [(prefix, "3")], [(prefix, -1)], "x"]
    for _ in range(40):
        op = rng.integers(5)
        before = loader.state_dict()
        if op == 0:  # a valid removal
            documents = [(prefix, int(d)) for d in rng.choice(len(store), int(rng.integers(1, 4)))]
            step = loader.remove_documents(documents)
            assert step == -(-loader.consumed_samples // 4)
            new = set(documents) - set().union(*(docs for _, docs in model))
            if new:
                model.append((loader.consumed_samples, new))
        elif op == 1:  # a refused one
            with pytest.raises(ConfigError):
                loader.remove_documents(bad[int(rng.integers(len(bad)))])
            assert loader.state_dict() == before
        elif op == 2:  # some steps, each checked against the plain stream
            position = loader.consumed_samples
            reference.load_state_dict(_plain(before))
            for a, b in zip(_take(reference, 3), _take(loader, 3), strict=True):
                expected = _masked(gpt, before["sampler"], 0, position, a, model)
                assert all(np.array_equal(b[name], value) for name, value in expected.items())
                position += 4
        elif op == 3:
            saved.append((before, [(since, set(docs)) for since, docs in model]))
        elif saved:  # back to a saved state: its removals, not the later ones
            state, removals = saved[int(rng.integers(len(saved)))]
            loader.load_state_dict(state)
            model = [(since, set(docs)) for since, docs in removals]
        records = loader.state_dict()["receipt"].get("removed_documents", [])
        assert [(r["consumed_samples"], {(r["store"], d) for d in r["documents"]}) for r in records] == model


def _plain(state: dict) -> dict:
    """``state`` without its removals and with a certificate for the plain stream (for the reference loader)."""
    receipt = {key: value for key, value in state["receipt"].items() if key != "removed_documents"}
    return {key: value for key, value in state.items() if key != "certificate"} | {"receipt": receipt}


def test_every_mutation_of_a_removal_in_a_state_is_refused_or_read_and_a_refusal_changes_nothing(tmp_path):
    import json

    from tests._support.mutate import mutations

    prefix = _write(tmp_path / "m", 4, 12)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 20, tp.GPTSampleConfig(16), seed=1)

    def fresh():
        return StatefulLoader(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel"))

    source = fresh()
    _take(source, 2)
    source.remove_documents([(prefix, 1), (prefix, 4)])
    _take(source, 1)
    state = source.state_dict()
    kept = state["receipt"]["removed_documents"]
    loader = fresh()
    _take(loader, 1)
    before = loader.state_dict()
    read = 0
    for label, data in mutations(json.dumps(state)):
        if "removed_documents" not in label:
            continue
        mutated = json.loads(data)
        try:
            loader.load_state_dict(mutated)
        except tp.TokenportError:
            assert loader.state_dict() == before, label
            continue
        except Exception as exc:  # pragma: no cover - the failure names the mutation
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
        read += 1  # a mutation the schema still reads: only the prefix, which is for people, may differ
        got = loader.state_dict()["receipt"]["removed_documents"]
        assert [{**r, "store": None} for r in got] == [{**r, "store": None} for r in kept], label
        loader.load_state_dict(before)
    assert read


def _series(tmp_path):
    """A run with a removal at step 4: states after 4 steps, after 8 (the removal made at 4) and after 10."""
    prefix = _write(tmp_path / "s", 6)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)

    def fresh():
        return StatefulLoader(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=3, order="feistel"))

    loader = fresh()
    _take(loader, 4)
    first = loader.state_dict()
    documents = [(prefix, 2), (prefix, 5), (prefix, 9)]
    assert loader.remove_documents(documents) == 4
    _take(loader, 4)
    second = loader.state_dict()
    _take(loader, 2)
    return gpt, prefix, fresh, documents, [first, second, loader.state_dict()]


def test_trace_and_where_know_the_removal(tmp_path):
    from tokenport.integrations.where import occurrences

    gpt, prefix, _, documents, states = _series(tmp_path)
    last = states[-1]
    removed = {d for _, d in documents}
    flagged = set()
    for step in range(10):
        for item in tp.trace(last, step, dataset=gpt, detokenize=False):
            flags = item.to_dict()["removed"]
            for (document, _, _), flag in zip(item.lineage.pieces, flags, strict=True):
                assert flag == (document in removed and step >= 4), (step, document)
                if flag:
                    flagged.add(step)
    assert flagged
    report = occurrences(last, store=prefix, document=sorted(removed), dataset=gpt)
    assert report.removed == tuple((d, 4) for d in sorted(removed))
    assert report.places and all(p.trained == (p.step < 4) for p in report.places if p.step < 10)
    assert "removed from the run from step 4" in report.render()
    assert report.to_json()["removed"] == [{"document": d, "step": 4} for d in sorted(removed)]
    before = occurrences(states[0], store=prefix, document=sorted(removed), dataset=gpt)
    assert before.removed == () and not any(p.step >= 4 and p.trained for p in before.places)


def test_audit_is_consistent_across_a_removal_and_finds_a_lost_or_moved_one(tmp_path):
    gpt, prefix, fresh, documents, states = _series(tmp_path)
    assert tp.audit(states).consistent
    resumed = fresh()
    resumed.load_state_dict(tp.takedown(states[0], documents))  # the offline takedown is the same removal
    _take(resumed, 6)
    assert tp.audit([states[0], resumed.state_dict()]).consistent
    assert tp.audit([*states[:2], resumed.state_dict()]).consistent
    lost = fresh()
    lost.load_state_dict(states[0])  # resumed from before the removal: the removal is lost
    _take(lost, 6)
    report = tp.audit([*states[:2], lost.state_dict()])
    assert not report.consistent and report.divergence.step == 4 and "lost the removal" in report.divergence.what
    late = fresh()
    late.load_state_dict(states[1])
    _take(late, 2)
    moved = late.state_dict()
    moved["receipt"]["removed_documents"][0].update(consumed_samples=8, step=2)  # claims an earlier step
    report = tp.audit([states[0], moved])
    assert not report.consistent and report.divergence.step == 2, report.render()


def test_num_workers_and_prefetch_do_not_change_the_masked_batches(tmp_path):
    prefix = _write(tmp_path / "w", 8)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)
    documents = [(prefix, d) for d in (1, 4, 7, 11)]
    runs = []
    for options in ({}, {"num_workers": 2, "prefetch_factor": 4}):
        loader = StatefulLoader(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=3, order="feistel"), **options)
        runs.append(_take(loader, 14, remove_at=3, documents=documents))
    for a, b in zip(*runs, strict=True):
        assert all(np.array_equal(a[name], b[name]) for name in a)


def test_a_mixture_update_after_the_removal_moves_the_masks_with_the_samples(tmp_path):
    from tokenport.blend import AdaptiveBlend

    prefixes = [_write(tmp_path / name, seed, 20) for seed, name in enumerate(("a", "b"))]
    children = [
        tp.GPTDataset(tp.IndexedDataset(p), np.arange(20), 40, tp.GPTSampleConfig(16), seed=3) for p in prefixes
    ]
    adaptive = AdaptiveBlend(children, [1, 1], num_samples=60)
    loader = StatefulLoader(adaptive, PretrainingSampler(60, 0, 3, 0, 2, auto_advance=False))
    _take(loader, 2)
    documents = [(prefixes[0], d) for d in range(0, 20, 2)]
    loader.remove_documents(documents)
    state = loader.state_dict()
    _take(loader, 1)
    loader.set_mixture([0.9, 0.1])
    got = _take(loader, 5)
    plain = StatefulLoader(adaptive.__class__(children, [1, 1], num_samples=60), PretrainingSampler(60, 0, 3, 0, 2))
    plain.load_state_dict(_plain(state))
    _take(plain, 1)
    plain.set_mixture([0.9, 0.1])
    for step, batch in enumerate(_take(plain, 5), start=3):
        expected = _masked(plain.dataset, state["sampler"], 0, step * 6, batch, [(12, set(documents))])
        assert all(np.array_equal(got[step - 3][name], value) for name, value in expected.items()), step


def test_batches_the_loader_cannot_mask_are_refused_changing_nothing(tmp_path):
    prefix = _write(tmp_path / "r", 9)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 30, tp.GPTSampleConfig(16), seed=1)
    sampler = StreamSampler(len(gpt), 0, 2, 0, 1, seed=3, order="feistel")
    for options in ({"fields": ("tokens", "labels")}, {"collate_fn": lambda samples: samples}):
        loader = StatefulLoader(gpt, sampler, **options)
        before = loader.state_dict()
        with pytest.raises(ConfigError, match="loss_mask|collate_fn"):
            loader.remove_documents([(prefix, 1)])
        assert loader.state_dict() == before
    loader = StatefulLoader(gpt, sampler, fields=("tokens", "labels", "loss_mask"))
    assert loader.remove_documents([(prefix, 1)]) == 0
    assert loader.remove_documents({"store": prefix, "documents": [1]}) == 0  # removed already: no-op
    assert len(loader.state_dict()["receipt"]["removed_documents"]) == 1


def test_the_cli_writes_the_new_state_and_prints_one_json_object(tmp_path, capsys):
    import json

    from tokenport.cli import main

    gpt, prefix, fresh, documents, states = _series(tmp_path)
    path, where, out = tmp_path / "state.json", tmp_path / "where.json", tmp_path / "new.json"
    path.write_text(json.dumps(states[0]))
    argv = ["takedown", str(path), "--store", prefix, "--document", "2", "5", "9", "-o", str(out), "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["output"] == str(out) and [r["documents"] for r in printed["removals"]] == [[2, 5, 9]]
    assert json.loads(out.read_text()) == json.loads(json.dumps(tp.takedown(states[0], documents)))
    assert main(["where", str(path), "--store", prefix, "--document", "2", "--document", "9", "--json"]) == 0
    where.write_text(capsys.readouterr().out)
    again = tmp_path / "again.json"
    assert main(["takedown", str(path), "--where", str(where), "-o", str(again)]) == 0
    assert "removed from step 4" in capsys.readouterr().out
    assert json.loads(again.read_text())["receipt"]["removed_documents"][0]["documents"] == [2, 9]
    for argv in (
        ["takedown", str(path), "--store", prefix, "--document", "2", "-o", str(path)],  # the state read
        ["takedown", str(path), "--store", prefix, "--document", "2", "-o", str(out)],  # exists, no --force
        ["takedown", str(path), "--store", prefix, "--document", "999", "-o", str(tmp_path / "x.json")],
        ["takedown", str(path), "--store", "elsewhere", "--document", "2", "-o", str(tmp_path / "x.json")],
        ["takedown", str(path), "-o", str(tmp_path / "x.json")],  # nothing named
    ):
        before = path.read_bytes(), out.read_bytes()
        assert main(argv) != 0, argv
        assert (path.read_bytes(), out.read_bytes()) == before and not (tmp_path / "x.json").exists()
    capsys.readouterr()


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_takedown_killed_at_each_publication_step_leaves_the_old_file_or_the_whole_new_one(tmp_path, kill_at):
    import json
    import os
    import subprocess
    import sys

    gpt, prefix, fresh, documents, states = _series(tmp_path)
    path, out = tmp_path / "state.json", tmp_path / "new.json"
    path.write_text(json.dumps(states[0]))
    out.write_text("{}")  # an older output, replaced with --force
    argv = ["takedown", str(path), "--store", prefix, "--document", "2", "-o", str(out), "--force"]
    env = {**os.environ, "TOKENPORT_TAKEDOWN_KILL_AT": str(kill_at)}
    code = "import sys; from tokenport.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, check=False)
    assert done.returncode == 137, done.stderr.decode()[-2000:]
    text = out.read_text()
    assert text == "{}" or json.loads(text) == json.loads(json.dumps(tp.takedown(states[0], [(prefix, 2)])))
    assert json.loads(path.read_text()) == json.loads(json.dumps(states[0]))
    from tokenport.cli import main

    assert main(argv[:-1] + ["--force"]) == 0  # the next writer finishes it and removes the leftovers
    assert json.loads(out.read_text()) == json.loads(json.dumps(tp.takedown(states[0], [(prefix, 2)])))
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_a_grain_loader_hides_the_removed_documents_as_the_stateful_loader_does(tmp_path):
    pytest.importorskip("grain")
    from tokenport.integrations.grain import GrainLoader

    prefix = _write(tmp_path / "gr", 10)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)
    documents = [(prefix, d) for d in (0, 3, 6, 9, 12)]
    expected = _take(
        StatefulLoader(gpt, StreamSampler(len(gpt), 0, 4, 0, 1, seed=5, order="feistel")), 10, 2, documents
    )
    loader = GrainLoader(gpt, global_batch_size=4, seed=5)
    got = []
    for inputs, labels in loader:
        got.append((np.asarray(inputs["input"]), np.asarray(labels)))
        if len(got) == 2:
            assert loader.remove_documents(documents) == 2
        if len(got) == 10:
            break
    assert any(not np.array_equal(b["loss_mask"], 1) for b in expected[2:])
    for batch, (tokens, labels) in zip(expected, got, strict=True):
        assert np.array_equal(tokens, batch["tokens"])
        assert np.array_equal(labels, np.where(batch["loss_mask"] == 0, -100, batch["labels"]))
    resumed = GrainLoader(gpt, global_batch_size=4, seed=5)
    resumed.load_state_dict(loader.state_dict())
    assert resumed._loader.state_dict()["receipt"]["removed_documents"] == [
        {**r} for r in loader._loader.state_dict()["receipt"]["removed_documents"]
    ]


@pytest.mark.parametrize("name", ["gpt", "packed", "sft-hf", "sft-megatron"])
def test_the_hf_trainers_collated_batches_hide_the_removed_documents(tmp_path, name):
    pytest.importorskip("transformers")
    from tokenport.integrations.hf import TokenportCollator

    if name == "gpt":
        prefix = _write(tmp_path / "g", 12)
        store = tp.IndexedDataset(prefix)
        dataset = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)
    else:
        _, dataset, _, prefix = next(kind for kind in _kinds(tmp_path) if kind[0] == name)
    collator = TokenportCollator(ignore_index=getattr(dataset, "label_pad", -100))
    count = len(tp.IndexedDataset(prefix))
    documents = [(str(prefix), d) for d in range(0, count, 3)]

    def sampler_of():
        return StreamSampler(len(dataset), 0, 2, 1, 2, seed=4, order="feistel")

    loader = StatefulLoader(dataset, sampler_of(), collate_fn=collator)
    got = _take(loader, 8, remove_at=2, documents=documents)
    state = loader.state_dict()
    hits = 0
    for step, batch in enumerate(got):
        state["sampler"]["consumed_samples"] = max(state["sampler"]["consumed_samples"], (step + 1) * 4)
        samples = []
        for sample in step_sample_ids(state["sampler"], step, 1, dataset)[1]:
            one = {key: np.asarray(value)[None] for key, value in dataset[sample].items()}
            leaf, hidden = _hidden(dataset, sample, set(documents))
            if step >= 2 and len(hidden):
                hits += 1
                one = _expected(one, 0, leaf, hidden)
            samples.append({key: value[0] for key, value in one.items()})
        expected = collator(samples)
        assert all(np.array_equal(batch[key], np.asarray(value)) for key, value in expected.items()), step
    assert hits
    resumed = StatefulLoader(dataset, sampler_of(), collate_fn=collator)  # the HF Trainer's resume path
    resumed.load_state_dict(loader.state_dict())
    assert resumed.state_dict()["receipt"]["removed_documents"] == state["receipt"]["removed_documents"]


def test_a_moved_store_keeps_its_removal_and_another_store_is_refused(tmp_path):
    import glob
    import shutil

    gpt, prefix, fresh, documents, states = _series(tmp_path)
    moved = tmp_path / "moved" / "s"
    moved.parent.mkdir()
    for name in glob.glob(prefix + ".*"):
        shutil.copy(name, str(moved) + name[len(prefix) :])
    store = tp.IndexedDataset(str(moved))
    there = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)

    def sampler():
        return StreamSampler(len(there), 0, 2, 0, 2, seed=3, order="feistel")

    here = StatefulLoader(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=3, order="feistel"))
    here.load_state_dict(states[1])
    elsewhere = StatefulLoader(there, sampler())
    elsewhere.load_state_dict(states[1])  # found by its content: the removal applies to the moved store
    for a, b in zip(_take(here, 6), _take(elsewhere, 6), strict=True):
        assert all(np.array_equal(a[name], b[name]) for name in a)
    edited = json_copy(states[1])
    edited["receipt"]["removed_documents"][0]["identity"]["idx"] = "0" * 16  # a store this run does not read
    loader = StatefulLoader(there, sampler())
    before = loader.state_dict()
    with pytest.raises(ConfigError, match="removed_documents"):
        loader.load_state_dict(edited)
    assert loader.state_dict() == before
    with pytest.raises(ConfigError, match="not read by this dataset"):
        loader.remove_documents([(prefix + "-nowhere", 1)])


def json_copy(value):
    import json

    return json.loads(json.dumps(value))


def test_an_elastic_resume_masks_the_micro_batches_of_the_new_layout(tmp_path):
    gpt, prefix, fresh, documents, states = _series(tmp_path)

    def sampler(rank, size):
        return StreamSampler(len(gpt), 0, 4 // size, rank, size, seed=3, order="feistel")

    for rank, size in ((0, 1), (1, 4)):
        resumed = StatefulLoader(gpt, sampler(rank, size))
        resumed.load_state_dict(states[1])  # saved on 2 ranks of 2
        direct = StatefulLoader(gpt, sampler(rank, size))
        direct.load_state_dict(_plain(states[0]))
        _take(direct, 4)
        direct.remove_documents(documents)
        assert direct.consumed_samples == resumed.consumed_samples
        for a, b in zip(_take(resumed, 6), _take(direct, 6), strict=True):
            assert all(np.array_equal(a[name], b[name]) for name in a)


def test_takedown_of_a_state_whose_store_moved_names_it_either_way(tmp_path):
    import glob
    import shutil

    gpt, prefix, fresh, documents, states = _series(tmp_path)
    moved = str(tmp_path / "elsewhere")
    for name in glob.glob(prefix + ".*"):
        shutil.copy(name, moved + name[len(prefix) :])
    for name in glob.glob(prefix + ".*"):
        shutil.move(name, name + ".gone")  # the recorded prefix no longer exists
    for spelled in (prefix, moved):
        new = tp.takedown(states[0], [(spelled, 2), (spelled, 5), (spelled, 9)], stores={prefix: moved})
        assert new == tp.takedown(states[0], documents, stores={prefix: moved})
        assert new["receipt"]["removed_documents"][0]["store"] == prefix  # as the receipt records it
    with pytest.raises(ConfigError, match="moved|store-path|stores="):
        tp.takedown(states[0], documents)

"""Loader states as documents: typed on the way in, consistent with their receipt, and a refusal changes nothing.

Each persisted kind here (a loader state with its receipt and mixture updates, a sampler state, the
receipt trace and rebuild read, a ``blend --state`` file) is mutated every way ``tests._support.mutate``
knows; each mutation is refused with a TokenportError, or read as the valid document it still is,
and a refused ``load_state_dict`` leaves the loader, its sampler and its AdaptiveBlend as they were.
"""

from __future__ import annotations

import copy
import json
import math
import random

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import build_store, random_documents
from tokenport.blend import AdaptiveBlend
from tokenport.builder.report import adaptive_report, blend_spec_or_state
from tokenport.errors import TokenportError
from tokenport.integrations import StatefulLoader, rebuild_dataset
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

TOTAL = 60


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Three GPT datasets over three byte-tokenizer stores."""
    root = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(0)
    datasets = []
    for k in range(3):
        documents = random_documents(rng, 20, tokens=(32, 127), length=(5, 40), append=256)
        store = tp.IndexedDataset(build_store(root / f"s{k}", documents, tokenizer=tp.load_tokenizer("byte")))
        datasets.append(tp.GPTDataset(store, np.arange(20), 20, tp.GPTSampleConfig(8, 256), 1))
    return datasets


def _adaptive(children, rank=0, size=2):
    blend = AdaptiveBlend(children, [1, 1, 1], num_samples=TOTAL)
    return StatefulLoader(blend, StreamSampler(TOTAL, 0, 2, rank, size, order="sequential"))


def _blended(children, seed=3):
    blend = tp.BlendedDataset(children, [0.5, 0.3, 0.2], TOTAL)
    return StatefulLoader(blend, StreamSampler(TOTAL, 0, 2, 0, 2, seed=seed, order="feistel"))


def _steps(loader, count, weights=None):
    """``count`` batches through one iterator, with a weight update after each when ``weights`` is given."""
    batches = iter(loader)
    for step in range(count):
        next(batches)
        if weights is not None:
            loader.set_mixture(weights(step))


def _snapshot(loader):
    """Everything a refused call must leave as it was: the sampler's state, the blend's updates and frontier."""
    blend = loader.dataset
    return (
        loader.sampler.state_dict(),
        getattr(blend, "updates", None),
        getattr(blend, "frontier", None),
        loader.consumed_samples,
    )


def _plain(value):
    return json.loads(json.dumps(value))


# -- item 6: a receipt that contradicts the state it certifies -------------------------------------


@pytest.mark.parametrize(
    "field,edit",
    [
        ("consumed_samples", lambda r: r["position"].update(consumed_samples=r["position"]["consumed_samples"] + 4)),
        ("epoch", lambda r: r["position"].update(epoch=1)),
        ("sampler", lambda r: r["position"].update(sampler="RandomSampler")),
        ("seed", lambda r: r.update(seed=4)),
    ],
)
def test_load_state_dict_refuses_a_receipt_that_contradicts_its_sampler_state(children, field, edit):
    saved = _blended(children)
    _steps(saved, 5)
    state = _plain(saved.state_dict())
    edit(state["receipt"])
    loader = _blended(children)
    _steps(loader, 2)
    before = _snapshot(loader)
    with pytest.raises(tp.ConfigError, match=rf"\['{field}'\].*contradicts|contradicts.*\['{field}'\]"):
        loader.load_state_dict(state)
    assert _snapshot(loader) == before


def test_trace_refuses_a_sampler_section_whose_kind_or_seed_contradicts_the_receipt(children):
    loader = _blended(children)
    _steps(loader, 6)
    state = _plain(loader.state_dict())
    assert tp.trace(state, 2, dataset=loader.dataset, detokenize=False)
    reseeded = copy.deepcopy(state)  # a sampler section of another seed, itself valid (fingerprint and all)
    reseeded["sampler"] = StreamSampler(TOTAL, 12, 2, 0, 2, seed=9, order="feistel").state_dict()
    with pytest.raises(tp.ConfigError, match=r"\['seed'\]=3 but state\['sampler'\]\['seed'\] is 9"):
        tp.trace(reseeded, 2, dataset=loader.dataset)
    rekinded = copy.deepcopy(state)
    rekinded["sampler"] = PretrainingSampler(TOTAL, 12, 2, 0, 2).state_dict()
    with pytest.raises(tp.ConfigError, match="'StreamSampler' but the sampler state's kind is 'PretrainingSampler'"):
        tp.trace(rekinded, 2, dataset=loader.dataset)
    moved = copy.deepcopy(state)
    moved["receipt"]["position"]["consumed_samples"] = 4
    with pytest.raises(tp.ConfigError, match="consumed_samples"):
        tp.trace(moved, 0, dataset=loader.dataset)


# -- item 5: a refused load_state_dict changes nothing --------------------------------------------


def test_a_refused_load_state_dict_keeps_the_adaptive_blends_updates(children):
    saved = _adaptive(children)
    _steps(saved, 4, lambda step: [1.0, 2.0 + step, 0.5])
    state = _plain(saved.state_dict())
    loader = _adaptive(children)
    _steps(loader, 3, lambda step: [3.0, 1.0, 1.0 + step])
    before = _snapshot(loader)
    assert before[1]  # updates to keep
    bad_sampler = copy.deepcopy(state)
    bad_sampler["sampler"]["micro_batch_size"] = 0
    bad_updates = copy.deepcopy(state)
    bad_updates["mixture"]["updates"].append([2, [1.0, 1.0, 1.0]])  # before the last update: out of order
    other = copy.deepcopy(state)
    other["sampler"] = StreamSampler(TOTAL, 8, 2, 0, 2, seed=5, order="sequential").state_dict()
    other["receipt"]["seed"] = 5
    for refused in (bad_sampler, bad_updates, other):
        with pytest.raises(tp.ConfigError):
            loader.load_state_dict(refused)
        assert _snapshot(loader) == before
    loader.load_state_dict(state)
    assert loader.dataset.updates == saved.dataset.updates and loader.consumed_samples == saved.consumed_samples


def test_trace_leaves_the_given_adaptive_blend_alone(children):
    saved = _adaptive(children)
    _steps(saved, 4, lambda step: [1.0, 2.0 + step, 0.5])
    state = _plain(saved.state_dict())
    blend = AdaptiveBlend(children, [1, 1, 1], num_samples=TOTAL)
    blend.set_weights([0, 0, 1], 30)
    tp.trace(state, 1, dataset=blend, detokenize=False)
    with pytest.raises(tp.ConfigError, match="not trained yet"):
        tp.trace(state, 50, dataset=blend)
    assert blend.updates == ((30, (0.0, 0.0, 1.0)),)


# -- item 4: mutation fuzz of every document kind --------------------------------------------------


def _loaded(loader):
    return _plain({"sampler": loader.sampler.state_dict(), "mixture": loader.state_dict().get("mixture")})


@pytest.mark.parametrize("make", [_adaptive, _blended], ids=["adaptive", "blended"])
def test_mutated_loader_states_are_refused_or_read_as_what_they_say(children, make):
    saved = make(children)
    weights = (lambda step: [1.0, 2.0 + step, 0.5]) if make is _adaptive else None
    _steps(saved, 4, weights)
    text = json.dumps(saved.state_dict())
    loader = make(children)
    _steps(loader, 2, weights)
    original = json.loads(text)
    refused = 0
    for label, data in mutations(text):
        before = _snapshot(loader)
        try:
            state = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            continue  # not JSON: the torch and file readers refuse it (below); load_state_dict takes dicts
        try:
            loader.load_state_dict(state)
        except TokenportError:
            refused += 1
            assert _snapshot(loader) == before, label
            continue
        except Exception as exc:  # pragma: no cover - the failure message names the mutation
            pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        # accepted: a valid state, loaded as it says (the sampler's position, the stored updates)
        got = _loaded(loader)
        assert got["sampler"]["consumed_samples"] == state["sampler"]["consumed_samples"], label
        if make is _adaptive:
            want = [[start, [float(w) for w in weights]] for start, weights in state["mixture"]["updates"]]
            assert got["mixture"]["updates"] == want, label
        loader.load_state_dict(original)
    assert refused > 100


def test_mutated_states_given_to_trace_and_blend_state_are_refused_or_read(children, tmp_path):
    saved = _adaptive(children)
    _steps(saved, 4, lambda step: [1.0, 2.0 + step, 0.5])
    text = json.dumps(saved.state_dict())
    blend = saved.dataset
    path = tmp_path / "state.json"
    for label, data in mutations(text):
        path.write_bytes(data)
        for call in (
            lambda: tp.trace(str(path), 1, dataset=blend, detokenize=False),
            lambda: adaptive_report(blend_spec_or_state([], str(path), None)[1], where=str(path)),
        ):
            try:
                call()
            except TokenportError:
                pass
            except Exception as exc:
                pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
    assert blend.updates == saved.dataset.updates  # trace never changed the dataset it was given


def test_mutated_receipts_given_to_rebuild_are_refused_or_rebuild_the_same_data(children):
    loader = _blended(children)
    receipt = loader.receipt().to_dict()
    text = json.dumps(receipt)
    for label, data in mutations(text, limit=600):
        try:
            mutated = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            continue
        try:
            rebuilt = rebuild_dataset(mutated)
        except TokenportError:
            continue
        except Exception as exc:
            pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        assert len(rebuilt) == len(loader.dataset), label


@pytest.mark.parametrize(
    "make",
    [
        lambda: PretrainingSampler(TOTAL, 8, 2, 0, 2),
        lambda: RandomSampler(TOTAL, 8, 2, 0, 2, seed=4),
        lambda: StreamSampler(TOTAL, 8, 2, 0, 2, seed=4, order="random"),
    ],
    ids=["pretraining", "random", "stream"],
)
def test_mutated_sampler_states_are_refused_or_read_as_what_they_say(make):
    text = json.dumps(make().state_dict())
    sampler = make()
    for label, data in mutations(text):
        try:
            state = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            continue
        before = sampler.state_dict()
        try:
            sampler.load_state_dict(state)
        except TokenportError:
            assert sampler.state_dict() == before, label
            continue
        except Exception as exc:
            pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        assert sampler.consumed_samples == state["consumed_samples"], label


# -- item 5: random call sequences against a shadow model ------------------------------------------


def _corrupt(state, rng):
    """A copy of ``state`` broken one random way (or taken from another configuration)."""
    broken = copy.deepcopy(state)
    how = rng.randrange(6)
    if how == 0:
        broken["sampler"]["consumed_samples"] = -1
    elif how == 1:
        broken["receipt"]["position"]["consumed_samples"] += 2
    elif how == 2:
        broken["mixture"] = {"updates": [[0, [math.nan, 1.0, 1.0]]]}
    elif how == 3:
        broken["mixture"] = {"updates": [[5, [1.0, 1.0, 1.0]], [3, [1.0, 0.0, 1.0]]]}
    elif how == 4:
        broken["version"] = 7
    else:
        broken["sampler"]["fingerprint"] ^= 1
    return broken


@pytest.mark.parametrize("seed", range(3))
def test_random_call_sequences_match_a_shadow_model(children, seed):
    """Steps, weight updates (valid or not), state_dict and load_state_dict (saved, corrupted) on one loader,
    compared after each call with a model of (consumed samples, updates); a refused call changes nothing."""
    rng = random.Random(seed)
    loader = _adaptive(children)
    model = {"consumed": 0, "updates": ()}
    saved = []
    batches = iter(loader)
    for _ in range(60):
        action = rng.choice(("step", "step", "weights", "bad_weights", "save", "load", "load_bad"))
        before = _snapshot(loader)
        try:
            if action == "step":
                try:
                    next(batches)
                except StopIteration:
                    batches = iter(loader)
                    next(batches)
                model["consumed"] += 4
            elif action == "weights":
                weights = tuple(float(w) for w in rng.choices([0.0, 0.5, 1.0, 3.0, 1e308], k=3))
                if not any(weights):
                    weights = (1.0, 0.0, 0.0)
                blend = loader.dataset  # the first sample not handed over, resolved nor given weights yet
                start = max(blend.frontier, blend.last_update_sample, min(loader.consumed_samples, len(blend)))
                loader.set_mixture(weights)
                kept = [u for u in model["updates"] if u[0] != start]
                model["updates"] = (*kept, (start, weights))
            elif action == "bad_weights":
                loader.set_mixture(rng.choice(([1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [1.0, math.inf, 0.0], [1.0, 1.0])))
                pytest.fail("bad weights were accepted")
            elif action == "save":
                saved.append((_plain(loader.state_dict()), dict(model)))
            elif action == "load" and saved:
                state, at = rng.choice(saved)
                loader.load_state_dict(copy.deepcopy(state))
                model = dict(at)
                batches = iter(loader)
            elif action == "load_bad" and saved:
                state, _ = rng.choice(saved)
                loader.load_state_dict(_corrupt(state, rng))
                pytest.fail("a corrupted state was accepted")
        except TokenportError:
            assert _snapshot(loader) == before, action
        assert loader.consumed_samples == model["consumed"], action
        assert loader.dataset.updates == tuple(model["updates"]), action


@pytest.mark.parametrize("seed", range(3))
def test_random_adaptive_blend_calls_match_a_shadow_model(seed):
    """set_weights, restore_updates (valid or not) and realize on an AdaptiveBlend against a model of its updates;
    the stream always equals a blend rebuilt from the model's updates, and a refused call changes nothing."""

    class Sized:
        def __len__(self):
            return 50

    rng = random.Random(seed)
    blend = AdaptiveBlend([Sized(), Sized(), Sized()], [1, 2, 3], num_samples=200)
    model: list = []
    for _ in range(80):
        before = (blend.updates, blend.frontier, blend.dataset_index.copy())
        action = rng.choice(("set", "set_bad", "restore", "restore_bad", "realize"))
        try:
            if action == "set":
                start = rng.randrange(blend.frontier, 201)
                last = model[-1][0] if model else 0
                weights = tuple(float(rng.choice([0, 1, 2, 1e308])) for _ in range(3))
                blend.set_weights(weights, start)
                if not any(weights) or start < last:
                    pytest.fail("a refused update was accepted")
                model = [u for u in model if u[0] != start] + [(start, weights)]
            elif action == "set_bad":
                blend.set_weights(rng.choice(([1, -1, 0], [0, 0, 0], [math.nan, 1, 1], [1, 1])), blend.frontier)
                pytest.fail("bad weights were accepted")
            elif action == "restore":
                starts = sorted(rng.sample(range(200), rng.randrange(4)))
                updates = [(s, tuple(float(rng.choice([1, 2, 5])) for _ in range(3))) for s in starts]
                blend.restore_updates(updates)
                model = list(updates)
            elif action == "restore_bad":
                good = [(10, (1.0, 1.0, 1.0))]
                bad = rng.choice(
                    ([(5, (1.0, -1.0, 1.0))], [(20, (1.0, 1.0, 1.0)), (10, (1.0, 1.0, 1.0))], [(300, (1, 1, 1))])
                )
                blend.restore_updates(good + bad)
                pytest.fail("bad updates were accepted")
            else:
                blend.realize(rng.randrange(blend.frontier, 201))
        except TokenportError:
            assert (blend.updates, blend.frontier) == before[:2], action
            assert np.array_equal(blend.dataset_index, before[2]), action
        assert blend.updates == tuple(model), action
        rebuilt = AdaptiveBlend([Sized(), Sized(), Sized()], [1, 2, 3], num_samples=200, updates=model)
        rebuilt.realize(blend.frontier)
        assert np.array_equal(rebuilt.dataset_index, blend.dataset_index), action


def test_trace_of_a_missing_or_unreadable_file_names_it(tmp_path):
    for path in (tmp_path / "absent.json", tmp_path):
        with pytest.raises(tp.ConfigError, match="cannot read the loader state"):
            tp.trace(str(path), 0)


def test_a_state_that_is_no_dict_is_refused_naming_what_it_is(children):
    loader = _adaptive(children)
    _steps(loader, 2, lambda step: [1.0, 1.0, 2.0])
    text = json.dumps(loader.state_dict())
    before = _snapshot(loader)
    for given in (text, text.encode(), [text], None, 3):
        with pytest.raises(tp.ConfigError, match="expected"):
            loader.load_state_dict(given)
        with pytest.raises(tp.ConfigError, match="expected"):
            loader.sampler.load_state_dict(given)
        with pytest.raises(tp.ConfigError, match="expected"):
            adaptive_report(given)
        assert _snapshot(loader) == before


def test_a_subclassed_sampler_resumes_its_own_state(children):
    class Mine(StreamSampler):
        pass

    def make():
        return StatefulLoader(tp.BlendedDataset(children, [0.5, 0.3, 0.2], TOTAL), Mine(TOTAL, 0, 2, 0, 2, seed=3))

    saved = make()
    _steps(saved, 3)
    state = _plain(saved.state_dict())
    assert state["receipt"]["position"]["sampler"] == "Mine"
    loader = make()
    loader.load_state_dict(state)
    assert loader.consumed_samples == 12
    assert tp.trace(state, 1, dataset=loader.dataset, detokenize=False)


def test_arguments_of_the_wrong_kind_are_config_errors(children):
    loader = _adaptive(children)
    _steps(loader, 2, lambda step: [1.0, 1.0, 2.0])
    state = _plain(loader.state_dict())
    before = _snapshot(loader)
    for allow in (None, 5):
        with pytest.raises(tp.ConfigError, match="allow_changes"):
            loader.load_state_dict(state, allow_changes=allow)
    with pytest.raises(tp.ConfigError, match="updates"):
        loader.dataset.restore_updates(5)
    assert _snapshot(loader) == before
    for stores in ("x", [1], {"a": 1}):
        with pytest.raises(tp.ConfigError, match="stores="):
            rebuild_dataset(state["receipt"], stores=stores)
    for sampler in (RandomSampler(TOTAL, 0, 2, 0, 2), StreamSampler(TOTAL, 0, 2, 0, 2, order="sequential")):
        with pytest.raises(tp.ConfigError, match="consumed_samples|num_samples="):
            sampler.advance(2**63)
        assert sampler.consumed_samples == 0

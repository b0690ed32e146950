"""tokenport.occurrences / tokenport where: every place of random documents equals a forward scan with trace."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.cli import main
from tokenport.integrations import StatefulLoader, register_sampler
from tokenport.integrations.where import occurrences
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler


def _write(prefix, seed: int, documents: int = 30) -> str:
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(10, 90), append=256)
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"))


def _state(dataset, sampler, steps: int | None = None) -> dict:
    """The loader state after ``steps`` steps (default: the whole planned pass)."""
    gbs = sampler.global_batch_size
    one_pass = getattr(sampler, "active_samples", sampler.total_samples)
    taken = -(-one_pass // gbs) if steps is None else steps
    sampler.consumed_samples = (
        min(taken * gbs, sampler.total_samples) if isinstance(sampler, PretrainingSampler) else taken * gbs
    )
    return StatefulLoader(dataset, sampler).state_dict()


def _forward(state, dataset, prefix, documents) -> list[tuple]:
    """Every place of ``documents`` found by tracing every step the state took, forward."""
    sampler = state["sampler"]
    gbs = sampler["micro_batch_size"] * sampler["data_parallel_size"]
    out = []
    for step in range(-(-sampler["consumed_samples"] // gbs)):
        for t in tp.trace(state, step, dataset=dataset, detokenize=False):
            offset = 0
            for d, start, end in t.lineage.pieces:
                if t.lineage.store == prefix and d in documents:
                    out.append((d, step, t.rank, t.slot, t.sample, offset, start, end))
                offset += end - start
    return sorted(out, key=lambda p: (p[1], p[2], p[3], p[5], p[0]))


def _places(report) -> list[tuple]:
    fields = ("document", "step", "data_parallel_rank", "slot", "sample", "offset", "start", "end")
    return [tuple(getattr(p, name) for name in fields) for p in report.places]


def _samplers(total: int, rng):
    mbs, dp = int(rng.integers(1, 4)), int(rng.integers(2, 5))
    yield PretrainingSampler(total, 0, mbs, 0, dp, auto_advance=False)
    yield RandomSampler(total, 0, mbs, 0, dp, seed=3, data_sharding=True)
    yield RandomSampler(total, 0, mbs, 0, dp, seed=3, data_sharding=False)
    for order in ("feistel", "random", "sequential"):
        yield StreamSampler(total, 0, mbs, 0, dp, seed=4, order=order)
    for sharding in (True, False):  # Megatron-LM's own cyclic order
        yield RandomSampler(total, 0, mbs, 0, dp, data_sharding=sharding, megatron_compat=True)


@pytest.mark.parametrize("seed", range(2))
def test_random_documents_of_a_gpt_run_are_where_a_forward_trace_finds_them(tmp_path, seed):
    rng = np.random.default_rng(seed)
    prefix = _write(tmp_path / "g", seed)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 90, tp.GPTSampleConfig(16), seed=1)  # several epochs
    for sampler in _samplers(len(gpt), rng):
        state = _state(gpt, sampler)
        documents = sorted(rng.choice(len(store), 3, replace=False).tolist())
        report = occurrences(state, store=prefix, document=documents, dataset=gpt)
        expected = _forward(state, gpt, prefix, documents)
        assert expected and _places(report) == expected, type(sampler).__name__
        assert all(p.trained for p in report.places) and not report.replayed


def test_a_blended_run_and_a_partial_state_invert_exactly(tmp_path):
    prefixes = [_write(tmp_path / name, seed, 25) for seed, name in enumerate(("prose", "code"))]
    train, _, _ = tp.build_datasets(
        [str(x) for pair in zip((0.6, 0.4), prefixes) for x in pair],
        sizes=(120, 0, 0),
        config=tp.GPTSampleConfig(16),
        seed=5,
        split="1,0,0",
    )
    state = _state(train, StreamSampler(len(train), 0, 2, 0, 3, seed=1, order="feistel"), steps=12)
    rng = np.random.default_rng(7)
    for prefix in prefixes:
        documents = sorted(rng.choice(25, 2, replace=False).tolist())
        report = occurrences(state, store=prefix, document=documents)  # the dataset rebuilt from the receipt
        trained = [p for p in _places(report) if p[1] < 12]
        assert trained == _forward(state, train, prefix, documents)
        assert report.steps_trained == 12 and report.steps_covered == 20
        assert [p.trained for p in report.places] == [p.step < 12 for p in report.places]
        upto = occurrences(state, store=prefix, document=documents, up_to_step=5)
        assert upto.places == tuple(p for p in report.places if p.step <= 5) and upto.steps_covered == 6


def test_a_text_finds_its_documents_and_a_registered_sampler_is_replayed(tmp_path):
    prefix = _write(tmp_path / "t", 3)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 60, tp.GPTSampleConfig(16), seed=1)
    byte = tp.load_tokenizer("byte")
    needle = byte.decode(store.get(4))[3:15]
    by_text = occurrences(
        _state(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel")), store=prefix, text=needle
    )
    assert 4 in by_text.documents
    assert all(needle in byte.decode(store.get(d)) for d in by_text.documents)

    def factory(state, rank, dataset):
        return _Registered(state["total_samples"], state["micro_batch_size"], rank, state["data_parallel_size"])

    register_sampler("where-test-reversed", factory)
    state = _state(gpt, _Registered(len(gpt), 2, 0, 2), steps=len(gpt) // 4)
    report = occurrences(state, store=prefix, document=[4, 9])
    assert report.replayed and _places(report) == _forward(state, gpt, prefix, [4, 9])


class _Registered:
    """A sampler registered from outside tokenport (ids in reverse order, one pass): its steps are replayed."""

    def __init__(self, total: int, micro: int, rank: int, size: int) -> None:
        self.total_samples, self.micro_batch_size = total, micro
        self.data_parallel_rank, self.data_parallel_size = rank, size
        self.global_batch_size = micro * size
        self.consumed_samples, self.auto_advance = 0, False

    def __len__(self) -> int:
        return (self.total_samples - self.consumed_samples) // self.global_batch_size

    def __iter__(self):
        for start in range(
            self.consumed_samples, self.total_samples - self.global_batch_size + 1, self.global_batch_size
        ):
            lo = start + self.data_parallel_rank * self.micro_batch_size
            yield [self.total_samples - 1 - p for p in range(lo, lo + self.micro_batch_size)]

    def advance(self, num_samples: int | None = None) -> None:
        self.consumed_samples += self.global_batch_size if num_samples is None else num_samples

    def consumed_stream(self):
        yield np.arange(self.total_samples - 1, self.total_samples - 1 - self.consumed_samples, -1, dtype=np.int64)

    def state_dict(self) -> dict:
        return {
            "sampler": "where-test-reversed",
            "consumed_samples": self.consumed_samples,
            "total_samples": self.total_samples,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
        }

    def load_state_dict(self, state) -> None:
        self.consumed_samples = int(state["consumed_samples"])


def test_hostile_arguments_are_config_errors(tmp_path):
    prefix = _write(tmp_path / "h", 1)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 40, tp.GPTSampleConfig(16), seed=1)
    state = _state(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel"), steps=4)
    planned = -(-len(gpt) // 4)
    for kwargs, message in (
        ({"store": "/nowhere", "document": 1}, "the run read no such store"),
        ({"store": prefix, "document": 1, "text": "x"}, "exactly one"),
        ({"store": prefix}, "exactly one"),
        ({"store": prefix, "document": len(store)}, f"holds {len(store)} documents"),
        ({"store": prefix, "document": -1}, "document"),
        ({"store": prefix, "document": 1, "up_to_step": planned}, f"the planned run has {planned} step"),
        ({"store": prefix, "document": 1, "up_to_step": "3"}, "up_to_step"),
        ({"store": prefix, "document": "1"}, "document"),
        ({"store": prefix, "text": ""}, "non-empty"),
    ):
        with pytest.raises(tp.ConfigError, match=message):
            occurrences(state, **kwargs)


def test_the_cli_prints_the_places_and_one_json_object(tmp_path, capsys):
    prefix = _write(tmp_path / "c", 2)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 40, tp.GPTSampleConfig(16), seed=1)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_state(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel"))))
    assert main(["where", str(path), "--store", prefix, "--document", "3"]) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith(f"store {prefix} document(s) 3 in steps [0, {-(-len(gpt) // 4)})")
        and "hold document 3 tokens" in text
    )
    assert main(["where", str(path), "--store", prefix, "--document", "3", "--up-to-step", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == [3] and all(p["step"] <= 4 for p in report["places"])
    assert main(["where", str(path), "--store", prefix, "--document", "3", "--text", "a"]) == 2
    assert "exactly one" in capsys.readouterr().err


def test_every_mutation_of_a_saved_state_is_refused_or_read(tmp_path):
    from tests._support.mutate import mutations

    prefix = _write(tmp_path / "m", 4, 12)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 20, tp.GPTSampleConfig(16), seed=1)
    state = _state(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel"), steps=3)
    path = tmp_path / "state.json"
    text = json.dumps(state)
    before = occurrences(state, store=prefix, document=1, dataset=gpt)
    count = 0  # mutations read back
    for label, data in mutations(text):
        path.write_bytes(data)
        try:
            report = occurrences(path, store=prefix, document=1, dataset=gpt)
        except tp.TokenportError:
            continue
        except Exception as exc:  # pragma: no cover - the failure names the mutation
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
        count += 1
        if "micro_batch_size" in label or "data_parallel_size" in label:  # an elastic state of another layout
            assert {p.sample for p in report.places} == {p.sample for p in before.places}, label
        else:  # a mutation the schema still reads (a recipe detail, an unchecked key): the same answer
            assert report.places == before.places and report.steps_trained == before.steps_trained, label
    assert count and before == occurrences(state, store=prefix, document=1, dataset=gpt)


def test_sft_packed_scheduled_and_adaptive_runs_invert_exactly(tmp_path):
    from tests._support.stores import Doc
    from tokenport.blend import AdaptiveBlend, MixtureSchedule
    from tokenport.builder.specs import Blend

    rng = np.random.default_rng(11)
    drawn = random_documents(rng, 60, tokens=(32, 127), length=(10, 90), append=256)
    masked = (Doc(t, mask=(np.arange(len(t)) >= len(t) // 2).astype(np.uint8)) for t in drawn)
    chat = build_store(tmp_path / "chat", masked, tokenizer=tp.load_tokenizer("byte"), masks=True)
    sft = tp.SFTDataset(tp.IndexedDataset(chat), 64, seed=2)
    packed = tp.PackedDataset(tp.IndexedDataset(_write(tmp_path / "p", 3, 50)), 96, too_long="split", window=8, seed=6)
    prefixes = [_write(tmp_path / name, seed, 20) for seed, name in enumerate(("a", "b"))]
    schedule = MixtureSchedule.from_data(
        [{"at": 0, "weights": [0.8, 0.2]}, {"at": 20, "ramp_to": [0.2, 0.8], "until": 40}]
    )
    scheduled = tp.build_datasets(
        Blend(tuple(prefixes), None, schedule), sizes=(60, 0, 0), config=tp.GPTSampleConfig(16), seed=1, split="1,0,0"
    )[0]
    children = [
        tp.GPTDataset(tp.IndexedDataset(p), np.arange(20), 40, tp.GPTSampleConfig(16), seed=3) for p in prefixes
    ]
    adaptive = AdaptiveBlend(children, [1, 1], num_samples=60, updates=[[0, [1.0, 1.0]], [24, [0.1, 0.9]]])
    grouping = {"lengths": sft.lengths, "group_size": 2}
    runs = (
        (sft, StreamSampler(len(sft), 0, 2, 0, 2, seed=5, order="feistel"), chat),
        (
            sft,
            StreamSampler(len(sft), 0, 2, 0, 2, seed=5, order="length_grouped", **grouping),
            chat,
        ),
        (packed, RandomSampler(len(packed), 0, 1, 0, 3, seed=2), packed.stores()[0].prefix),
        (scheduled, PretrainingSampler(len(scheduled), 0, 2, 0, 2, auto_advance=False), prefixes[1]),
        (adaptive, PretrainingSampler(len(adaptive), 0, 3, 0, 2, auto_advance=False), prefixes[0]),
    )
    for dataset, sampler, prefix in runs:
        state = _state(dataset, sampler)
        documents = sorted(rng.choice(len(tp.IndexedDataset(prefix)), 3, replace=False).tolist())
        report = occurrences(state, store=prefix, document=documents)
        expected = _forward(state, None, str(prefix), documents)
        assert expected and _places(report) == expected, type(dataset).__name__


def test_a_moved_store_is_named_with_the_flag_that_finds_it(tmp_path, capsys):
    prefix = _write(tmp_path / "old", 5)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 40, tp.GPTSampleConfig(16), seed=1)
    state = _state(gpt, StreamSampler(len(gpt), 0, 2, 0, 2, seed=1, order="feistel"), steps=5)
    before = occurrences(state, store=prefix, document=np.array([2, 7]))
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    moved = str(tmp_path / "new")
    for suffix in (".bin", ".idx", ".json"):
        os.replace(prefix + suffix, moved + suffix)
    assert main(["where", str(path), "--store", prefix, "--document", "2", "--document", "7"]) == 2
    err = capsys.readouterr().err
    assert f"--document 2 --document 7 --store-path {prefix}=NEW_PREFIX" in err
    flags = ["--store-path", f"{prefix}={moved}", "--json"]
    for name in (prefix, moved):  # the store named as recorded or where it is now
        assert main(["where", str(path), "--store", name, "--document", "2", "--document", "7", *flags]) == 0
        assert json.loads(capsys.readouterr().out)["places"] == before.to_json()["places"]
    after = occurrences(state, store=moved, document=[7, 2, 2], stores={prefix: moved})
    assert after.places == before.places and after.documents == (2, 7)

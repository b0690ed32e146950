"""Grain: tokenport datasets through the real grain package, and a torchtitan-style loop that resumes
elastically through torch.distributed.checkpoint (DCP), single process, dp ranks simulated in it."""

from __future__ import annotations

import json
import pickle
import random
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import Doc, build_store, random_documents
from tokenport.integrations.grain import GrainLoader, GrainSource, grain_dataset, torchtitan_batch
from tokenport.sampling import StreamSampler

grain = pytest.importorskip("grain")
torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
Stateful = pytest.importorskip("torch.distributed.checkpoint.stateful").Stateful

GBS = 6  # divides among 1, 2, 3 and 6 ranks


def _store(path, seed: int, count: int = 40):
    documents = random_documents(np.random.default_rng(seed), count, tokens=(3, 200), length=(5, 60), eod=2)
    return tp.IndexedDataset(build_store(path, documents, dtype=np.uint16))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain")
    return [_store(root / name, seed) for seed, name in enumerate(("a", "b"))]


def _blend(stores, eod_mask_loss: bool = False, seed: int = 1):
    config = tp.GPTSampleConfig(16, 2, eod_mask_loss=eod_mask_loss)
    children = [tp.GPTDataset(store, np.arange(40), 60, config, seed + k) for k, store in enumerate(stores)]
    return tp.BlendedDataset(children, [0.4, 0.6], 100)


@pytest.fixture(scope="module")
def blend(stores):
    return _blend(stores)


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


# -- the source and MapDataset ------------------------------------------------------------------


def test_source_is_grains_protocol_with_negative_ids_and_pickles(blend):
    source = GrainSource(blend)
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    assert len(source) == len(blend) == 100
    for i in (0, 1, 57, 99):
        assert _equal(source[i], blend[i])
        assert _equal(source[i - 100], blend[i])  # -len <= i < 0 counts from the end
    for bad in (100, -101, 1.0, True, "1", None):
        with pytest.raises(IndexError):  # a SampleIdError: a TokenportError and the IndexError sequences need
            source[bad]
    with pytest.raises(tp.ConfigError, match="no len"):
        GrainSource(object())
    again = pickle.loads(pickle.dumps(source))  # its stores reopen their memory maps
    assert repr(again) == repr(source) and repr(source).startswith("GrainSource(BlendedDataset, samples=100, data=")
    assert all(_equal(again[i], blend[i]) for i in range(0, 100, 9))
    other = GrainSource(tp.BlendedDataset(blend.datasets, [0.5, 0.5], 100))
    assert repr(other) != repr(source)  # Grain's checkpoint compares the repr: other data is told apart


def test_grain_dataloader_with_a_worker_reads_the_samples_in_grains_order(blend):
    index = grain.samplers.IndexSampler(
        num_records=len(blend), shard_options=grain.sharding.NoSharding(), shuffle=True, num_epochs=1, seed=7
    )
    keys = [index[i].record_key for i in range(len(blend))]
    assert sorted(keys) == list(range(100)) and keys != sorted(keys)
    loader = grain.DataLoader(
        data_source=GrainSource(blend), sampler=index, operations=[grain.transforms.Batch(10)], worker_count=1
    )
    batches = list(loader)
    assert len(batches) == 10
    for k, batch in enumerate(batches):
        assert _equal(batch, blend.get_batch(keys[10 * k : 10 * k + 10]) | {"dataset_id": batch["dataset_id"]})
        assert batch["dataset_id"].tolist() == [blend[i]["dataset_id"] for i in keys[10 * k : 10 * k + 10]]


def test_grain_dataloader_checkpoint_resumes_through_the_sources_repr(blend):
    def loader():
        index = grain.samplers.IndexSampler(
            num_records=len(blend), shard_options=grain.sharding.NoSharding(), shuffle=True, num_epochs=1, seed=3
        )
        return grain.DataLoader(data_source=GrainSource(blend), sampler=index, worker_count=0)

    whole = [sample["tokens"].tolist() for sample in loader()]
    first = iter(loader())
    seen = [next(first)["tokens"].tolist() for _ in range(37)]
    state = first.get_state()
    resumed = iter(loader())
    resumed.set_state(state)
    assert seen + [sample["tokens"].tolist() for sample in resumed] == whole


def test_map_dataset_composes_grains_shuffle_map_and_batch(blend):
    permutation = list(grain.MapDataset.range(len(blend)).shuffle(seed=11))
    pipeline = grain_dataset(blend).shuffle(seed=11).map(lambda s: s["tokens"][:4]).batch(8)
    assert len(pipeline) == 13  # 100 samples in batches of 8, the last one short
    for k in (0, 5, 12):
        ids = permutation[8 * k : 8 * k + 8]
        assert np.array_equal(pipeline[k], blend.get_batch(ids)["tokens"][:, :4])
    streamed = list(grain_dataset(blend).to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)))
    assert len(streamed) == 100 and all(_equal(streamed[i], blend[i]) for i in range(0, 100, 7))
    assert _equal(grain_dataset(blend)[-1], blend[99])


# -- GrainLoader: one global stream, any dp size --------------------------------------------------


def _loaders(dataset, size: int, **options):
    return [
        GrainLoader(dataset, global_batch_size=GBS, seed=5, data_parallel_rank=r, data_parallel_size=size, **options)
        for r in range(size)
    ]


def _global_steps(iterators, steps: int):
    """``steps`` global batches: each rank's next batch, concatenated in rank order."""
    out = []
    for _ in range(steps):
        parts = [next(it) for it in iterators]
        inputs = {key: torch.cat([p[0][key] for p in parts]) for key in parts[0][0]}
        out.append((inputs, torch.cat([p[1] for p in parts])))
    return out


def _same_batches(a, b) -> bool:
    return len(a) == len(b) and all(
        x[0].keys() == y[0].keys() and all(torch.equal(x[0][k], y[0][k]) for k in x[0]) and torch.equal(x[1], y[1])
        for x, y in zip(a, b)
    )


def test_global_batches_are_the_stream_on_every_data_parallel_size(blend):
    steps = 20  # 120 samples: the stream runs into the second epoch
    stream = StreamSampler(100, 0, GBS, 0, 1, seed=5, order="feistel").global_stream(0, steps * GBS)
    expected = []
    for k in range(steps):
        ids = stream[k * GBS : (k + 1) * GBS]
        batch = blend.get_batch(ids)
        inputs = {"input": torch.from_numpy(batch["tokens"]), "positions": torch.from_numpy(batch["position_ids"])}
        expected.append((inputs, torch.from_numpy(batch["labels"])))
    for size in (1, 2, 3, 6):
        loaders = _loaders(blend, size)
        assert _same_batches(_global_steps([iter(loader) for loader in loaders], steps), expected), size
        assert all(loader.consumed_samples == steps * GBS and loader.step == steps for loader in loaders)
        assert loaders[0].global_batch_ids(3) == stream[18:24].tolist()
        assert len({loader.state_dict()[GrainLoaderKey] for loader in loaders}) == 1  # one state on every rank


GrainLoaderKey = "tokenport"


def test_worker_processes_give_the_same_stream_and_count_only_what_was_handed_over(blend):
    expected = _global_steps([iter(GrainLoader(blend, global_batch_size=GBS, seed=5))], 7)
    loader = GrainLoader(blend, global_batch_size=GBS, seed=5, worker_count=1)  # the dataset pickled to a process
    batches = iter(loader)
    seen = _global_steps([batches], 4)
    batches.close()  # the worker had made batches ahead: only the four handed over count
    assert loader.step == 4
    resumed = GrainLoader(blend, global_batch_size=GBS, seed=5)
    resumed.load_state_dict(loader.state_dict())
    assert _same_batches(seen + _global_steps([iter(resumed)], 3), expected)


def test_sequential_order_and_torchtitans_ignore_index_where_the_loss_mask_is_zero(stores):
    masked = _blend(stores, eod_mask_loss=True)
    loader = GrainLoader(masked, global_batch_size=4, shuffle=False)
    (inputs, labels), _ = _global_steps([iter(loader)], 2)
    batch = masked.get_batch([0, 1, 2, 3])
    assert torch.equal(inputs["input"], torch.from_numpy(batch["tokens"]))
    want = np.where(batch["loss_mask"] == 0, -100, batch["labels"])
    assert (batch["loss_mask"] == 0).any() and torch.equal(labels, torch.from_numpy(want))


def test_samples_without_get_batch_are_collated(stores):
    rows = [{"tokens": np.arange(k, k + 8), "labels": np.arange(k + 1, k + 9)} for k in range(10)]
    inputs, labels = next(iter(GrainLoader(rows, global_batch_size=3, shuffle=False)))
    assert inputs.keys() == {"input"} and inputs["input"].tolist() == [list(range(k, k + 8)) for k in range(3)]
    assert labels[2].tolist() == list(range(3, 11))
    with pytest.raises(tp.ConfigError, match="no labels"):
        next(iter(GrainLoader([{"tokens": np.zeros(4)}] * 3, global_batch_size=3)))


def test_refuses_bad_arguments(blend):
    with pytest.raises(tp.ConfigError, match="does not divide"):
        GrainLoader(blend, global_batch_size=GBS, data_parallel_rank=0, data_parallel_size=4)
    with pytest.raises(tp.ConfigError, match="drop seed"):
        GrainLoader(blend, global_batch_size=GBS, shuffle=False, seed=3)
    with pytest.raises(tp.ConfigError, match="data_parallel_rank"):
        GrainLoader(blend, global_batch_size=GBS, data_parallel_rank=2, data_parallel_size=2)
    with pytest.raises(tp.ConfigError, match="global_batch_size"):
        GrainLoader(blend, global_batch_size=0)
    with pytest.raises(tp.ConfigError, match="empty"):
        GrainLoader([], global_batch_size=1)


# -- a torchtitan-style loop: train, checkpoint through DCP, resume on another dp size -------------


class _TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, 8)
        self.out = torch.nn.Linear(8, 256)

    def forward(self, tokens, positions=None):
        return self.out(self.embed(tokens))


def _model():
    torch.manual_seed(0)
    return _TinyLM()


def _train(model, iterators, steps: int):
    """torchtitan's train_step on the global batch (what DDP's averaged gradient is); the batches seen."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = _global_steps(iterators, steps)
    for inputs, labels in seen:
        optimizer.zero_grad()
        logits = model(inputs["input"], positions=inputs["positions"])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), ignore_index=-100)
        loss.backward()
        optimizer.step()
    return seen


def _save(path, model, loaders) -> None:
    """Each rank's ``dcp.save({"model": ..., "dataloader": its loader})``, as torchtitan's CheckpointManager."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
        for loader in loaders:  # every rank writes the one key; DCP keeps one copy
            dcp.save({"model": model.state_dict(), "dataloader": loader}, checkpoint_id=str(path))


def _load(path, model, loaders) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for loader in loaders:
            state = {"model": model.state_dict(), "dataloader": loader}
            dcp.load(state, checkpoint_id=str(path))
            model.load_state_dict(state["model"])


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (2, 2)])
def test_torchtitan_loop_resumes_through_dcp_on_another_dp_size(blend, tmp_path, before, after):
    uninterrupted_model = _model()
    uninterrupted = _train(uninterrupted_model, [iter(loader) for loader in _loaders(blend, 2)], 8)

    model = _model()
    loaders = _loaders(blend, before)
    assert isinstance(loaders[0], Stateful)  # what DCP calls state_dict/load_state_dict on
    seen = _train(model, [iter(loader) for loader in loaders], 5)
    _save(tmp_path / "step5", model, loaders)

    resumed_model = _model()  # a fresh job: other weights until the checkpoint loads
    resumed = _loaders(blend, after)
    _load(tmp_path / "step5", resumed_model, resumed)
    assert all(loader.step == 5 for loader in resumed)
    seen += _train(resumed_model, [iter(loader) for loader in resumed], 3)

    assert _same_batches(seen, uninterrupted)  # the identical global stream: global batch b is the same samples
    for name, value in uninterrupted_model.state_dict().items():
        assert torch.equal(resumed_model.state_dict()[name], value), name


# -- refusals, mutations, a shadow model -----------------------------------------------------------


def _state(loader) -> tuple:
    return loader.consumed_samples, loader.state_dict()[GrainLoaderKey]


def test_refuses_states_of_other_data_seed_global_batch_changing_nothing(blend, stores):
    saved = _loaders(blend, 2)[0]
    _global_steps([iter(saved)], 2)
    state = saved.state_dict()
    cases = {
        "seed": (GrainLoader(blend, global_batch_size=GBS, seed=6), "seed"),
        "global batch": (GrainLoader(blend, global_batch_size=8, seed=5), "global_batch_size=8 does not divide 12"),
        "data": (GrainLoader(_blend(stores, seed=9), global_batch_size=GBS, seed=5), "differs|changed|seed"),
        "order": (GrainLoader(blend, global_batch_size=GBS, shuffle=False), "order|seed"),
    }
    for name, (loader, match) in cases.items():
        _global_steps([iter(loader)], 1)
        before = _state(loader)
        with pytest.raises(tp.ConfigError, match=match):
            loader.load_state_dict(state)
        assert _state(loader) == before, name
    loader = _loaders(blend, 3)[1]
    for bad in (
        {"tokenport": "not bytes", "world_size": 2},
        {"world_size": 2},
        [1],
        {"tokenport": b"{", "world_size": 2},
    ):
        with pytest.raises(tp.ConfigError):
            loader.load_state_dict(bad)
    with pytest.raises(tp.ConfigError):
        loader.set_state([1])
    assert loader.step == 0
    loader.load_state_dict({})  # torchtitan: an empty state is a fresh start
    loader.set_state(saved.get_state())
    assert loader.step == 2 and loader.get_state()["loader"]["sampler"]["consumed_samples"] == 12


# Fields a valid state may hold other values in, none of which moves the position: the receipt's rebuild recipe
# (``build``) and a store's prefix, tokenizer and preparation (not compared, or only with allow_changes), a sample
# config's entries that compare equal (True == 1, a pad_id absent or None), the layout the state was saved on
# (any dp size and micro batch resume, and any global batch dividing the position), and the loader state's
# version (1 or 2, both read).
UNCOMPARED = re.compile(
    r"\['build'\]|\['store'\]\['(prefix|tokenizer|prepared)'\]|\['sample_config'\]|"
    r"^del \$\['loader'\]\['certificate'\]$|"  # a state saved before certificates: resumes, starting a chain
    r"\['sampler'\]\['(micro_batch_size|data_parallel_size)'\]|^\$\['(data_parallel|global_batch)_size'\]|\['version'\]"
)


@pytest.mark.parametrize("size", [4, 12, 3])
def test_another_global_batch_dividing_the_position_goes_on_with_the_stream(blend, size):
    """Saved after 2 global batches of 6 (12 samples), resumed with global batches of 4, 12 or 3: step 12 // size
    reads the stream's next positions, and the state saved after it counts them."""
    saved = GrainLoader(blend, global_batch_size=GBS, seed=5)
    _global_steps([iter(saved)], 2)
    resumed = GrainLoader(blend, global_batch_size=size, seed=5)
    resumed.load_state_dict(saved.state_dict())
    assert resumed.step == 12 // size
    after = _global_steps([iter(resumed)], 1)
    uninterrupted = _global_steps([iter(GrainLoader(blend, global_batch_size=size, seed=5))], 12 // size + 1)
    assert _same_batches(after, uninterrupted[-1:])
    stream = StreamSampler(len(blend), 0, 1, 0, 1, seed=5, order="feistel").global_stream(12, 12 + size)
    assert resumed.global_batch_ids(12 // size) == stream.tolist()
    assert resumed.consumed_samples == 12 + size


def test_a_position_inside_a_global_batch_is_refused(blend):
    """Edited consistently (sampler and receipt agree), consumed 13 would start at global batch 2 while counting
    13: every later state off by one sample. The document refuses a count that is no multiple of the batch."""
    saved = GrainLoader(blend, global_batch_size=GBS, seed=5)
    _global_steps([iter(saved)], 2)
    document = json.loads(saved.state_dict()[GrainLoaderKey])
    document["loader"]["sampler"]["consumed_samples"] = 13
    document["loader"]["receipt"]["position"]["consumed_samples"] = 13
    loader = GrainLoader(blend, global_batch_size=GBS, seed=5)
    with pytest.raises(tp.ConfigError, match="not a multiple of `global_batch_size`=6"):
        loader.load_state_dict({"tokenport": json.dumps(document).encode(), "world_size": 1})
    assert loader.consumed_samples == 0


def test_state_document_mutations_are_refused_or_read_back_equal(blend):
    saved = _loaders(blend, 2)[1]
    _global_steps([iter(saved)], 3)
    text = saved.state_dict()[GrainLoaderKey]
    loader = _loaders(blend, 3)[2]
    refused = 0
    for label, data in mutations(text):
        before = _state(loader)
        try:
            loader.load_state_dict({"tokenport": data, "world_size": 2})
        except tp.TokenportError:
            assert _state(loader) == before, label  # a refusal changes nothing
            refused += 1
            continue
        assert loader.consumed_samples == 18, label  # read back: the position the writer saved
        assert UNCOMPARED.search(label), label  # only in fields no resume reads: still a valid document
    assert refused > 300


def test_shadow_model_of_steps_saves_and_loads(blend, stores):
    """Random calls against a model (the step count; saved states by step): a refused call changes nothing."""
    rng = random.Random(4)
    stream = StreamSampler(100, 0, GBS, 0, 1, seed=5, order="feistel")
    other = GrainLoader(blend, global_batch_size=4, seed=5)
    _global_steps([iter(other)], 1)
    foreign = other.state_dict()  # at sample 4: off the boundaries of global batches of 6
    for size in (2, 3):
        loader = _loaders(blend, size)[size - 1]
        model_step, saved = 0, {}
        for _ in range(25):
            action = rng.choice(["next", "next", "save", "load", "refused"])
            if action == "next":
                inputs, _ = next(iter(loader))
                ids = stream.global_stream(model_step * GBS, (model_step + 1) * GBS)[-(GBS // size) :]
                assert torch.equal(inputs["input"], torch.from_numpy(blend.get_batch(ids)["tokens"]))
                model_step += 1
            elif action == "save":
                saved[model_step] = loader.state_dict() if rng.random() < 0.5 else loader.get_state()
            elif action == "load" and saved:
                model_step = rng.choice(sorted(saved))
                state = saved[model_step]
                loader.load_state_dict(state) if GrainLoaderKey in state else loader.set_state(state)
            else:
                with pytest.raises(tp.ConfigError):
                    loader.load_state_dict(foreign)
            assert loader.step == model_step and loader.consumed_samples == model_step * GBS


def test_without_grain_tokenport_imports_and_names_the_extra():
    code = (
        "import sys; sys.modules['grain'] = None\n"
        "import tokenport as tp\n"
        "from tokenport.integrations.grain import GrainLoader, grain_dataset\n"
        "try:\n    grain_dataset([1, 2])\nexcept tp.ConfigError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'tokenport[grain]'" in done.stdout


def test_without_torch_the_loader_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(tp.ConfigError, match=r"pip install 'tokenport\[torch\]'"):
        torchtitan_batch({"tokens": np.zeros((1, 4)), "labels": np.zeros((1, 4))})


def _chat_store(prefix, seed: int) -> str:
    """A byte-tokenizer store of random conversations, the second half of each trained (loss mask 1)."""
    drawn = random_documents(np.random.default_rng(seed), 30, tokens=(32, 127), length=(10, 50), append=256)
    documents = (Doc(t, mask=(np.arange(len(t)) >= len(t) // 2).astype(np.uint8)) for t in drawn)
    return build_store(prefix, documents, tokenizer=tp.load_tokenizer("byte"), masks=True)


def test_sft_samples_train_on_their_shifted_targets_and_hf_shaped_ones_are_refused(tmp_path):
    store = tp.IndexedDataset(_chat_store(tmp_path / "chat", 3))
    sft = tp.SFTDataset(store, 64, seed=0)
    hf = tp.SFTDataset(store, 64, seed=0, shape="hf")
    assert _equal(GrainSource(sft)[0], sft[0]) and _equal(GrainSource(sft)[-1], sft[len(sft) - 1])
    loader = GrainLoader(sft, global_batch_size=4, seed=2)
    inputs, labels = next(iter(loader))
    ids = loader.global_batch_ids(0)
    # the same targets as the HF shape's labels, shifted as the HF model shifts them
    want = np.full((4, 64), -100)
    want[:, :-1] = hf.get_batch(ids)["labels"][:, 1:]
    assert (want != -100).any() and torch.equal(labels, torch.from_numpy(want))
    assert torch.equal(inputs["input"], torch.from_numpy(hf.get_batch(ids)["input_ids"]))
    # unshifted labels would train each token to predict itself: refused, not read
    with pytest.raises(tp.ConfigError, match="shape='megatron'"):
        next(iter(GrainLoader(hf, global_batch_size=4, seed=2)))

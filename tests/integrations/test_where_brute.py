"""tokenport.occurrences against a brute-force forward scan: random small runs of every stream kind under every
sampler, random documents (sampled, never sampled, of another split), random trained steps and up_to_step.

The forward scan knows nothing of the inverses: each rank's sampler is walked batch by batch from step 0 and
every sample's ``dataset.lineage`` pieces are read; a place is (document, step, rank, slot, sample, offset in the
sample, start, end). The run is also rebuilt from the receipt alone in some cases (no ``dataset=``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.blend import AdaptiveBlend, MixtureSchedule
from tokenport.builder.specs import Blend
from tokenport.integrations import StatefulLoader
from tokenport.integrations.where import occurrences
from tokenport.samples.base import store_documents
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

KINDS = ("gpt", "packed", "sft", "blend", "schedule", "adaptive", "nested", "cached")
SAMPLERS = (
    "pretraining",
    "pretraining_partial",  # drop_last=False: the final partial global batch, sliced per rank
    "random_sharded",
    "random_unsharded",
    "megatron_sharded",
    "megatron_unsharded",
    "feistel",
    "stream_random",
    "sequential",
    "length_grouped",
)
ORDERED = ("pretraining", "pretraining_partial", "sequential")


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    """Three plain stores (some empty documents, lengths from 1 to 120), one chat store with loss masks, and the
    index cache's directory."""
    root = tmp_path_factory.mktemp("brute")
    rng = np.random.default_rng(30)
    byte = tp.load_tokenizer("byte")
    out = {}
    for name in ("a", "b", "c"):
        drawn = list(random_documents(rng, 36, tokens=(32, 127), length=(1, 120), append=256))
        for k in rng.choice(len(drawn), 4, replace=False).tolist():
            drawn[k] = np.zeros(0, dtype=np.int64)
        out[name] = build_store(root / name, drawn, tokenizer=byte)
    drawn = list(random_documents(rng, 40, tokens=(32, 127), length=(2, 150), append=256))
    masked = (Doc(t, mask=(np.arange(len(t)) >= len(t) // 3).astype(np.uint8)) for t in drawn)
    out["chat"] = build_store(root / "chat", masked, tokenizer=byte, masks=True)
    out["cache"] = str(root / "cache")
    return out


def _gpt(prefix: str, rng: np.random.Generator, lo: int = 0, hi: int = 36) -> tp.GPTDataset:
    """A GPT dataset over documents [lo, hi) of ``prefix``: samples of 4 to 40 tokens, 0.4 to 4 epochs."""
    store = tp.IndexedDataset(prefix)
    indices = np.arange(lo, hi)
    seq_length = int(rng.choice([4, 9, 16, 40]))
    extra = bool(rng.integers(2))
    tokens = int(store.sequence_lengths[indices].sum())
    num_samples = max(1, int(float(rng.choice([0.4, 1.0, 2.3, 4.0])) * tokens / seq_length))
    config = tp.GPTSampleConfig(seq_length, add_extra_token=extra)
    seed, partial = int(rng.integers(100)), bool(rng.integers(2))
    try:
        return tp.GPTDataset(store, indices, num_samples, config, seed=seed, drop_last_partial=partial)
    except tp.InputDataError:  # a kept partial last sample would end in an empty document: refused
        return tp.GPTDataset(store, indices, num_samples, config, seed=seed)


def _dataset(kind: str, stores: dict[str, str], rng: np.random.Generator):
    """A random small dataset of ``kind``."""
    if kind == "gpt":
        return _gpt(stores["a"], rng)
    if kind == "packed":
        window = None if rng.integers(2) else int(rng.integers(2, 9))
        return tp.PackedDataset(tp.IndexedDataset(stores["b"]), 64, too_long="split", window=window, seed=2)
    if kind == "sft":
        samples = None if rng.integers(2) else int(rng.integers(10, 60))
        chat = tp.IndexedDataset(stores["chat"])
        return tp.SFTDataset(chat, 48, seed=int(rng.integers(10)), too_long="split", num_samples=samples)
    if kind == "blend":
        children = [_gpt(stores["a"], rng, 0, 20), _gpt(stores["a"], rng, 20, 36), _dataset("packed", stores, rng)]
        weights = (rng.random(3) + 0.1).tolist()
        algorithm = str(rng.choice(["tijdeman", "greedy", "megatron"]))
        total = int(sum(len(c) for c in children) * float(rng.choice([0.5, 1.4])))
        return tp.BlendedDataset(children, weights, max(total, 8), algorithm=algorithm)
    if kind == "schedule":
        schedule = MixtureSchedule.from_data(
            [{"at": 0, "weights": [0.8, 0.2]}, {"at": 15, "ramp_to": [0.2, 0.8], "until": 45}]
        )
        config = tp.GPTSampleConfig(int(rng.choice([8, 16])))
        spec = Blend((stores["b"], stores["c"]), None, schedule)
        return tp.build_datasets(spec, sizes=(70, 0, 0), config=config, seed=int(rng.integers(10)), split="1,0,0")[0]
    if kind == "adaptive":
        children = [_gpt(stores["b"], rng), _gpt(stores["c"], rng)]
        total = int(rng.integers(30, 80))
        updates = [[0, [1.0, 1.0]], [int(rng.integers(1, total)), (rng.random(2) + 0.05).round(2).tolist()]]
        return AdaptiveBlend(children, [1, 1], num_samples=total, updates=updates)
    if kind == "cached":  # indices and occurrences lookups from an index cache, memory-mapped
        spec = ["0.5", stores["a"], "0.3", stores["b"], "0.2", stores["c"]]
        config = tp.GPTSampleConfig(int(rng.choice([8, 16, 24])))
        size = int(rng.integers(60, 200))
        seed = int(rng.integers(3))
        return tp.build_datasets(
            spec, sizes=(size, 0, 0), config=config, seed=seed, split="1,0,0", cache=stores["cache"]
        )[0]
    inner = tp.BlendedDataset([_gpt(stores["a"], rng), _dataset("sft", stores, rng)], [0.6, 0.4], 50)
    return tp.BlendedDataset([inner, _gpt(stores["c"], rng)], [0.7, 0.3], 70)


def _sampler(name: str, dataset, rng: np.random.Generator, rank: int, mbs: int, dp: int):
    """Sampler ``name`` of rank ``rank`` over ``dataset``, at step 0 (seed fixed per name)."""
    total = len(dataset)
    if name.startswith("pretraining"):
        return PretrainingSampler(total, 0, mbs, rank, dp, drop_last=name == "pretraining")
    if name.startswith("random") or name.startswith("megatron"):
        megatron = name.startswith("megatron")  # Megatron-LM's own order: seeded with the epoch only
        sharding = name.endswith("_sharded")
        return RandomSampler(
            total, 0, mbs, rank, dp, seed=0 if megatron else 3, data_sharding=sharding, megatron_compat=megatron
        )
    if name == "length_grouped" and hasattr(dataset, "lengths"):  # kinds that know their samples' lengths
        lengths = dataset.lengths
        return StreamSampler(total, 0, mbs, rank, dp, seed=4, order="length_grouped", lengths=lengths, group_size=2)
    order = {"stream_random": "random", "sequential": "sequential"}.get(name, "feistel")
    return StreamSampler(total, 0, mbs, rank, dp, seed=4, order=order)


def _forward(samplers, dataset, prefix: str, documents: set[int]) -> tuple[list[tuple], int]:
    """(every place of ``documents``, in where's order; the pass's steps): each rank's sampler walked from step 0,
    in lockstep up to the step where the first rank runs out (Megatron's unsharded order leaves some ranks one
    micro-batch of leftovers that no full step reads)."""
    batches = [[np.asarray(batch).tolist() for batch in sampler] for sampler in samplers]
    steps = min(len(walked) for walked in batches)
    lineages: dict[int, tuple] = {}
    places = []
    for rank, walked in enumerate(batches):
        for step, batch in enumerate(walked[:steps]):
            for slot, sample in enumerate(batch):
                if sample not in lineages:
                    lineage = dataset.lineage(sample)
                    lineages[sample] = (lineage.store, lineage.pieces)
                store, pieces = lineages[sample]
                offset = 0
                for d, start, end in pieces:
                    if store == prefix and d in documents:
                        places.append((d, step, rank, slot, sample, offset, start, end))
                    offset += end - start
    return sorted(places, key=lambda p: (p[1], p[2], p[3], p[5], p[0])), steps


def _places(report) -> list[tuple]:
    fields = ("document", "step", "data_parallel_rank", "slot", "sample", "offset", "start", "end")
    return [tuple(getattr(p, name) for name in fields) for p in report.places]


@pytest.mark.parametrize("kind", KINDS)
def test_where_equals_a_forward_scan_for_every_sampler(stores, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    checked = found = 0
    for case in range(4 * len(SAMPLERS)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # small stores read for many epochs: that is the point here
            dataset = _dataset(kind, stores, rng)
        names = ORDERED if kind in ("schedule", "adaptive") else SAMPLERS  # weights by position: read in order
        name = names[case % len(names)]
        mbs, dp = int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 4]))
        if len(dataset) < mbs * dp:
            continue
        samplers = [_sampler(name, dataset, rng, rank, mbs, dp) for rank in range(dp)]
        prefixes = sorted(store_documents(dataset).items())
        prefix, count = prefixes[int(rng.integers(len(prefixes)))]
        documents = sorted(set(rng.integers(0, count, int(rng.integers(1, 5))).tolist()))
        expected, walked = _forward(samplers, dataset, prefix, set(documents))
        taken = int(rng.integers(0, walked + 1))
        head = _sampler(name, dataset, rng, 0, mbs, dp)
        pretraining = name.startswith("pretraining")
        head.consumed_samples = min(taken * mbs * dp, head.total_samples) if pretraining else taken * mbs * dp
        state = StatefulLoader(dataset, head).state_dict()
        rebuilt = case % 4 == 0  # the dataset rebuilt from the receipt alone
        report = occurrences(state, store=prefix, document=documents, dataset=None if rebuilt else dataset)
        assert (report.steps_covered, report.steps_trained) == (max(walked, taken), taken), (name, mbs, dp)
        assert _places(report) == expected, (name, mbs, dp, documents)
        assert [p.trained for p in report.places] == [p[1] < taken for p in expected]
        if walked > 1:
            up_to = int(rng.integers(0, walked - 1))
            upto = occurrences(state, store=prefix, document=documents, up_to_step=up_to, dataset=dataset)
            assert _places(upto) == [p for p in expected if p[1] <= up_to], (name, up_to)
        checked, found = checked + 1, found + len(expected)
    assert checked >= 3 * len(SAMPLERS) and found > 0

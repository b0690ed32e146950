"""transformers' own length-grouped sampler cases, run against transformers' classes and ours alike.

transformers ships no tests in its wheel; the four cases of its tests/trainer/test_trainer_utils.py
(test_group_by_length, test_group_by_length_with_dict, test_group_by_length_with_batch_encoding,
test_distributed_length_grouped) are taken here as facts: their inputs, constructor calls and expected
outputs. The code is ours. Then: equal orders under transformers' signature (keywords, positional,
dataset rows, torch.distributed defaults), and the refusals, which are ValueErrors as transformers' are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tokenport
from tokenport.errors import ConfigError
from tokenport.sampling import DistributedLengthGroupedSampler, LengthGroupedSampler

torch = pytest.importorskip("torch")
hf = pytest.importorskip("transformers.trainer_pt_utils")
from transformers.tokenization_utils_base import BatchEncoding  # noqa: E402

IMPLEMENTATIONS = {
    "transformers": (hf.LengthGroupedSampler, hf.DistributedLengthGroupedSampler),
    "tokenport": (LengthGroupedSampler, DistributedLengthGroupedSampler),
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def samplers(request):
    """(LengthGroupedSampler, DistributedLengthGroupedSampler) of one implementation."""
    return IMPLEMENTATIONS[request.param]


def hf_lengths(seed: int = 0) -> list[int]:
    """transformers' case: 100 lengths in [0, 25) and one of 50 at index 32."""
    torch.manual_seed(seed)
    lengths = torch.randint(0, 25, (100,)).tolist()
    lengths[32] = 50
    return lengths


# -- transformers' four cases ----------------------------------------------------------------------


def test_group_by_length(samplers):
    single, _ = samplers
    lengths = hf_lengths()
    indices = list(single(4, lengths=lengths))
    assert lengths[indices[0]] == 50  # the longest comes first
    assert sorted(indices) == list(range(100))


def test_group_by_length_with_dict(samplers):
    single, _ = samplers
    data = [{"input_ids": torch.randint(0, 25, (100,)).tolist()} for _ in range(6)]
    data[3]["input_ids"] = torch.randint(0, 25, (105,)).tolist()
    indices = list(single(4, dataset=data))
    assert len(data[indices[0]]["input_ids"]) == 105
    assert sorted(indices) == list(range(6))


def test_group_by_length_with_batch_encoding(samplers):
    single, _ = samplers
    data = [BatchEncoding({"input_ids": torch.randint(0, 25, (100,)).tolist()}) for _ in range(6)]
    data[3]["input_ids"] = torch.randint(0, 25, (105,)).tolist()
    indices = list(single(4, dataset=data))
    assert len(data[indices[0]]["input_ids"]) == 105
    assert sorted(indices) == list(range(6))


def test_distributed_length_grouped(samplers):
    _, distributed = samplers
    lengths = hf_lengths()
    indices_process_0 = list(distributed(4, num_replicas=2, rank=0, lengths=lengths))
    indices_process_1 = list(distributed(4, num_replicas=2, rank=1, lengths=lengths))
    assert lengths[indices_process_0[0]] == 50
    assert sorted(indices_process_0 + indices_process_1) == list(range(100))


# -- equal orders under transformers' signature ----------------------------------------------------


def generator(seed: int):
    return torch.Generator().manual_seed(seed)


def random_lengths(rng: np.random.Generator) -> list[int]:
    n = int(rng.choice([1, 2, 5, int(rng.integers(1, 300)), int(rng.integers(300, 3000))]))
    return rng.integers(0, int(rng.choice([1, 3, 50, 4096])) + 1, n).tolist()


@pytest.mark.parametrize("block", range(3))
def test_orders_equal_transformers_under_its_signature(block):
    rng = np.random.default_rng(2600 + block)
    for _ in range(40):
        lengths = random_lengths(rng)
        batch_size = int(rng.integers(1, 40))
        seed = int(rng.integers(0, 2**31))
        theirs = hf.LengthGroupedSampler(batch_size, lengths=lengths, generator=generator(seed))
        calls = [
            LengthGroupedSampler(batch_size, lengths=lengths, generator=generator(seed)),
            LengthGroupedSampler(batch_size, None, lengths, None, generator(seed)),  # all positional
            LengthGroupedSampler(batch_size=batch_size, lengths=np.asarray(lengths), generator=generator(seed)),
            LengthGroupedSampler(batch_size, lengths=torch.tensor(lengths), generator=generator(seed)),
            LengthGroupedSampler(lengths, batch_size, generator=generator(seed)),  # tokenport's form
        ]
        for _ in range(2):  # the generators advance alike
            expected = list(theirs)
            for ours in calls:
                assert len(ours) == len(theirs) and list(ours) == expected


@pytest.mark.parametrize("block", range(3))
def test_orders_from_dataset_rows_equal_transformers(block):
    rng = np.random.default_rng(2700 + block)
    for case in range(20):
        lengths = random_lengths(rng)
        name = None if case % 2 else "tokens"
        key = name or "input_ids"
        rows = [{key: list(range(n)), "labels": [0]} for n in lengths]
        if case % 3 == 0:
            rows = [BatchEncoding(row) for row in rows]
        seed = int(rng.integers(0, 2**31))
        theirs = list(hf.LengthGroupedSampler(3, dataset=rows, model_input_name=name, generator=generator(seed)))
        assert list(LengthGroupedSampler(3, dataset=rows, model_input_name=name, generator=generator(seed))) == theirs
        assert list(LengthGroupedSampler(3, rows, None, name, generator(seed))) == theirs
        replicas = int(rng.integers(1, 5))
        for rank in range(replicas):
            drop_last = case % 2 == 0
            theirs_d = hf.DistributedLengthGroupedSampler(3, rows, replicas, rank, seed, drop_last, None, name)
            ours_d = DistributedLengthGroupedSampler(3, rows, replicas, rank, seed, drop_last, model_input_name=name)
            if not theirs_d.drop_last and len(lengths) < replicas - 1:
                continue  # transformers cannot pad this few (see test_length_grouping.py)
            assert len(ours_d) == len(theirs_d) and list(ours_d) == list(theirs_d)


@pytest.mark.parametrize("block", range(3))
def test_distributed_orders_equal_transformers_under_its_signature(block):
    rng = np.random.default_rng(2800 + block)
    for _ in range(15):
        lengths = random_lengths(rng)
        batch_size = int(rng.integers(1, 40))
        replicas = int(rng.choice([1, 2, 3, 8]))
        seed = int(rng.integers(0, 2**31))
        drop_last = bool(rng.integers(0, 2))
        if not drop_last and len(lengths) < replicas - 1:
            continue  # transformers cannot pad this few
        for rank in range(replicas):
            theirs = hf.DistributedLengthGroupedSampler(
                batch_size, num_replicas=replicas, rank=rank, seed=seed, drop_last=drop_last, lengths=lengths
            )
            calls = [
                DistributedLengthGroupedSampler(
                    batch_size, num_replicas=replicas, rank=rank, seed=seed, drop_last=drop_last, lengths=lengths
                ),
                DistributedLengthGroupedSampler(batch_size, None, replicas, rank, seed, drop_last, lengths),
                DistributedLengthGroupedSampler(lengths, batch_size, replicas, rank, seed, drop_last),  # ours
            ]
            for epoch in (0, 3):
                theirs.set_epoch(epoch)
                expected = list(theirs)
                for ours in calls:
                    ours.set_epoch(epoch)
                    assert len(ours) == len(theirs) and list(ours) == expected


RANK_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
from transformers.trainer_pt_utils import DistributedLengthGroupedSampler as Theirs
from tokenport.sampling import DistributedLengthGroupedSampler as Ours

rank, group = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + group, rank=rank, world_size=2)
lengths = [int(x) for x in torch.randint(0, 50, (101,), generator=torch.Generator().manual_seed(5))]
ours, theirs = Ours(4, lengths=lengths, seed=7), Theirs(4, lengths=lengths, seed=7)
print(json.dumps([ours.num_replicas, ours.rank, list(ours), list(theirs)]))
dist.destroy_process_group()
"""


def test_replicas_and_rank_default_to_torch_distributed(tmp_path):
    """Two real gloo processes: num_replicas and rank read from the default group, as transformers reads them."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tokenport.__file__)))
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(tmp_path / "group")], stdout=subprocess.PIPE, text=True, env=env
        )
        for r in (0, 1)
    ]
    outputs = [json.loads(p.communicate(timeout=300)[0]) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0]
    for rank, (replicas, seen_rank, ours, theirs) in enumerate(outputs):
        assert (replicas, seen_rank) == (2, rank)
        assert ours == theirs and len(ours) == 51
    both = outputs[0][2] + outputs[1][2]
    assert sorted(set(both)) == list(range(101)) and len(both) == 102  # the order's head is repeated once


# -- refusals ---------------------------------------------------------------------------------------


def test_refusals_are_value_errors_where_transformers_raises_them(samplers):
    """Neither lengths nor dataset, or rows that are not dictionaries with the input name: transformers
    raises ValueError, ours a ConfigError, which is one; code catching ValueError catches both."""
    single, distributed = samplers
    for call in (
        lambda: single(4),
        lambda: single(4, dataset=[[1, 2, 3]]),
        lambda: single(4, dataset=[{"labels": [1]}]),
        lambda: single(4, dataset=[{"tokens": [1]}], model_input_name="input_ids"),
        lambda: distributed(4, num_replicas=1, rank=0),
        lambda: distributed(4, dataset=[(1, 2)], num_replicas=1, rank=0),
    ):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: LengthGroupedSampler(4), "one of dataset and lengths"),
        (lambda: LengthGroupedSampler([3, 1], 4, dataset=[{"input_ids": [1]}]), "unexpected keyword argument"),
        (lambda: LengthGroupedSampler([3, 1], 4, lengths=[3, 1]), "multiple values for argument 'lengths'"),
        (lambda: LengthGroupedSampler(True, lengths=[1]), "neither batch_size"),
        (lambda: LengthGroupedSampler(None, 4), "neither batch_size"),
        (lambda: LengthGroupedSampler("4", lengths=[1]), "neither batch_size"),
        (lambda: LengthGroupedSampler(4.0, lengths=[1]), "neither batch_size"),
        (lambda: LengthGroupedSampler(4, [3, 1, 2]), "look like lengths: pass them as lengths="),
        (lambda: LengthGroupedSampler(4, dataset=[{"input_ids": [1]}, {"x": [1]}]), "row 1"),
        (lambda: LengthGroupedSampler(4, dataset=[{"input_ids": "some text"}]), "a string, not token ids"),
        (lambda: LengthGroupedSampler(4, dataset=[{"input_ids": 7}]), "has no length"),
        (lambda: LengthGroupedSampler(4, dataset=7), "not iterable"),
        (lambda: LengthGroupedSampler(4, dataset=[{"input_ids": [1]}], model_input_name=3), "model_input_name"),
        (lambda: LengthGroupedSampler(0, lengths=[1, 2], seed=0), "batch_size"),
        (lambda: LengthGroupedSampler(4, lengths=[1, -2], seed=0), "lengths"),
        (lambda: LengthGroupedSampler(4, lengths=[1, 2], nonsense=1), "unexpected keyword argument 'nonsense'"),
        (lambda: DistributedLengthGroupedSampler(4, lengths=[1, 2]), "init_process_group"),
        (lambda: DistributedLengthGroupedSampler(4, lengths=[1, 2], num_replicas=2), "rank=None"),
        (lambda: DistributedLengthGroupedSampler(4, lengths=[1, 2], num_replicas=2, rank=2), "rank"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 4, 2), "missing a required argument: 'rank'"),
        (lambda: DistributedLengthGroupedSampler([1, 2], 4, 2, 0, dataset=[]), "unexpected keyword argument"),
        (lambda: DistributedLengthGroupedSampler(4, num_replicas=2, rank=0), "one of dataset and lengths"),
    ],
)
def test_calls_that_fit_neither_form_are_config_errors(call, words):
    with pytest.raises(ConfigError, match=words):
        call()


def test_lengths_win_over_dataset_and_extras_are_keyword_only():
    """As in transformers (whose Trainer passes both), given lengths the dataset is not read; tokenport's
    extras (seed, mega_batch_mult, rng) are keywords in transformers' form."""
    lengths = [5, 1, 9, 3, 7, 2, 8]
    expected = list(LengthGroupedSampler(lengths, 2, 2, seed=4))
    assert list(LengthGroupedSampler(2, dataset=object(), lengths=lengths, mega_batch_mult=2, seed=4)) == expected
    numpy_order = list(DistributedLengthGroupedSampler(lengths, 2, 2, 1, seed=3, rng="numpy"))
    assert list(DistributedLengthGroupedSampler(2, None, 2, 1, 3, lengths=lengths, rng="numpy")) == numpy_order
    with pytest.raises(ConfigError, match="positional"):
        LengthGroupedSampler(2, None, lengths, None, None, 2)


def test_empty_dataset_gives_an_empty_sampler():
    """transformers raises IndexError on an empty dataset; ours is empty, as empty lengths are."""
    assert list(LengthGroupedSampler(4, dataset=[], seed=0)) == []
    assert len(DistributedLengthGroupedSampler(4, dataset=[], num_replicas=2, rank=1)) == 0

"""The Megatron provider takes a prepare output directory in --data-path and the per-split paths: its parts,
in order, sharing its weight by token counts; every sample equals megatron-core's given those parts."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tests.indexed.test_prepare_outputs import prepare_output
from tokenport.builder.parts import megatron_normalize
from tokenport.integrations.megatron import datasets_provider

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.datasets.gpt_dataset")

from tests.integrations.megatron_support import (  # noqa: E402  (after the skips: it imports megatron-core)
    EOD,
    TOKENIZER,
    assert_same_samples,
    megatron_args,
    megatron_datasets,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A prepare output of two parts and a lone store, of random documents ending in EOD."""
    root = tmp_path_factory.mktemp("megatron_run")
    rng = np.random.default_rng(11)
    parts = [list(random_documents(rng, count, tokens=(3, 12), length=(2, 60), eod=EOD)) for count in (80, 140)]
    prefixes = prepare_output(root / "web", parts)
    lone = build_store(root / "code", random_documents(rng, 120, tokens=(3, 12), length=(2, 60), eod=EOD))
    return root, prefixes, lone


def test_a_weighted_directory_in_data_path_equals_megatron_core_given_its_parts(run):
    root, parts, lone = run
    torch.set_num_threads(1)
    tokens = []
    for prefix in parts:
        with tp.IndexedDataset(prefix) as store:
            tokens.append(store.num_tokens)
    shares = [0.4 * s for s in megatron_normalize(tokens)]
    sizes = (200, 20, 4)
    explicit = [item for share, prefix in zip(shares, parts) for item in (repr(share), prefix)] + ["0.6", lone]
    theirs = megatron_datasets(megatron_args(data_path=explicit, split="90,8,2"), sizes)
    args = megatron_args(data_path=["0.4", str(root / "web"), "0.6", lone], split="90,8,2")
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), theirs)


def test_a_directory_as_a_split_path_is_its_parts_by_size(run):
    root, parts, _ = run
    sizes = (150, 0, 0)
    args = megatron_args(train_data_path=[str(root / "web")])
    theirs = megatron_datasets(megatron_args(train_data_path=list(parts)), sizes)
    assert_same_samples(datasets_provider(args, tokenizer=TOKENIZER)(sizes), theirs)

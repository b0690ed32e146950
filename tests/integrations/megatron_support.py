"""Shared by the Megatron provider tests: Megatron-LM's argument namespace, megatron-core's own build of
it (as pretrain_gpt.py does it), the sample-for-sample comparison, and megatron's Null tokenizers."""

from __future__ import annotations

import argparse
import json
import logging
import types
import warnings
from typing import Any

import numpy as np
import torch

from tokenport.integrations.megatron import MegatronSamples

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.datasets import gpt_dataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer
    from megatron.core.datasets.utils import get_blend_from_list

EOD = 2
SEQ = 32
TOKENIZER = types.SimpleNamespace(eod=EOD, vocab_size=None, unique_identifiers={"test": "provider"})


class LegacyNullTokenizer(MegatronLegacyTokenizer):
    """The facts of Megatron-LM's legacy ``_NullTokenizer`` (megatron.training, not installed here): EOD is
    ``vocab_size``, the vocabulary one larger, cls/sep/mask -1; pad, eos and bos raise NotImplementedError
    (megatron-core's MegatronLegacyTokenizer base)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(None, vocab_size=vocab_size)
        self._eod_id = int(vocab_size)

    def tokenize(self, text: str) -> list[int]:
        return [int(x) for x in text.split(" ")]

    @property
    def vocab_size(self) -> int:
        return self._eod_id + 1

    @property
    def vocab(self) -> Any:
        raise NotImplementedError

    @property
    def inv_vocab(self) -> Any:
        raise NotImplementedError

    @property
    def cls(self) -> int:
        return -1

    @property
    def sep(self) -> int:
        return -1

    @property
    def mask(self) -> int:
        return -1

    @property
    def eod(self) -> int:
        return self._eod_id


def new_null_tokenizer(vocab_size: int) -> Any:
    """megatron-core's new-system Null tokenizer, as ``--tokenizer-type NullTokenizer`` builds it."""
    from megatron.core.tokenizers import MegatronTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=vocab_size)


def megatron_args(**flags) -> argparse.Namespace:
    """Megatron-LM's data arguments with its defaults, as parse_and_validate_args leaves them."""
    defaults = dict(
        data_path=None,
        data_args_path=None,
        train_data_path=None,
        valid_data_path=None,
        test_data_path=None,
        per_split_data_args_path=None,
        split=None,
        seq_length=SEQ,
        seed=1234,
        data_cache_path=None,
        mmap_bin_files=True,
        mock_data=False,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask_in_dataloader=True,
        num_dataset_builder_threads=1,
        mid_level_dataset_surplus=0.005,
        allow_ambiguous_pad_tokens=False,
    )
    defaults.update(flags)
    if defaults["data_path"] is not None and defaults["split"] is None:
        defaults["split"] = "969, 30, 1"  # validate_args' legacy default
    return argparse.Namespace(**defaults)


def megatron_datasets(args, sizes, tokenizer=TOKENIZER):
    """megatron-core's datasets as pretrain_gpt.py builds them (core_gpt_dataset_config_from_args, then the builder)."""
    blend, blend_per_split = None, None
    if args.data_path is not None or args.data_args_path is not None:
        if args.data_args_path is not None:
            with open(args.data_args_path) as f:
                blend = get_blend_from_list(f.read().split())
        else:
            blend = get_blend_from_list(args.data_path)
    elif args.per_split_data_args_path is not None:
        with open(args.per_split_data_args_path) as f:
            per_split = json.load(f)
        split_strings = {k: v.split() if isinstance(v, str) else v for k, v in per_split.items()}  # as Megatron does
        blend_per_split = [get_blend_from_list(split_strings[which]) for which in ("train", "valid", "test")]
    else:
        blend_per_split = [
            get_blend_from_list(p) for p in (args.train_data_path, args.valid_data_path, args.test_data_path)
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("megatron").setLevel(logging.ERROR)
        config = gpt_dataset.GPTDatasetConfig(
            random_seed=args.seed,
            sequence_length=args.seq_length,
            blend=blend,
            blend_per_split=blend_per_split,
            split=args.split,
            num_dataset_builder_threads=args.num_dataset_builder_threads,
            path_to_cache=args.data_cache_path,
            mmap_bin_files=args.mmap_bin_files,
            tokenizer=tokenizer,
            reset_position_ids=args.reset_position_ids,
            reset_attention_mask=args.reset_attention_mask,
            eod_mask_loss=args.eod_mask_loss,
            create_attention_mask=args.create_attention_mask_in_dataloader,
            mid_level_dataset_surplus=args.mid_level_dataset_surplus,
            allow_ambiguous_pad_tokens=args.allow_ambiguous_pad_tokens,
        )
        return BlendedMegatronDatasetBuilder(gpt_dataset.GPTDataset, list(sizes), lambda: True, config).build()


def assert_same_samples(ours, theirs) -> None:
    """Every split: both None, or the same length and every sample with the same keys, dtypes and values."""
    for which, mine, peer in zip(("train", "valid", "test"), ours, theirs):
        if peer is None:
            assert mine is None, which
            continue
        assert isinstance(mine, MegatronSamples) and len(mine) == len(peer), which
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(len(peer)):
                a, b = mine[i], peer[i]
                assert list(a) == list(b), (which, i)
                for key, value in b.items():
                    if isinstance(value, torch.Tensor):
                        assert a[key].dtype == value.dtype and a[key].shape == value.shape, (which, i, key)
                        assert torch.equal(a[key], value), (which, i, key)
                    else:
                        assert np.asarray(a[key]).dtype == np.asarray(value).dtype and a[key] == value, (which, i, key)

"""Megatron-LM's ``train_valid_test_datasets_provider`` over tokenport, read from Megatron's own arguments.

``datasets_provider()`` returns the function ``pretrain_gpt.py`` hands to ``pretrain``: it takes
``train_val_test_num_samples`` (and ``vp_stage``), reads ``--data-path`` and the other data flags
from Megatron's ``args`` (``get_args()`` inside Megatron-LM, or an ``args`` namespace given here),
and builds the datasets with `tokenport.build_datasets`. With ``algorithm="megatron"`` (the
default) every sample equals megatron-core's ``BlendedMegatronDatasetBuilder`` output for the
same arguments, as the dict of torch tensors ``pretrain_gpt``'s ``get_batch`` reads; with
``algorithm="tijdeman"`` blends follow tokenport's default schedule and size each store exactly.
A flag that changes the data and that tokenport does not reproduce is refused with a ConfigError
naming it; flags that only change how megatron-core builds or loads its files are ignored.

One difference is deliberate: with a pad id that occurs in the data and no reset or EOD-mask
flag, megatron-core caches the first served sample's loss mask after zeroing its pad labels and
hands those zeros to every later sample; here each sample masks only its own pad labels.
"""

from __future__ import annotations

import logging
import operator
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_choice, check_int, check_sample_id, check_seed, is_int
from ..builder import Blend, BlendSpec, IndexCache, blend_from_args_file, blend_from_list, blend_per_split_from_json
from ..builder.datasets import build_datasets
from ..errors import ConfigError, SampleIdError
from ..indexed.same_tokenizer import check_same_tokenizer
from ..samples.gpt import GPTSampleConfig

logger = logging.getLogger(__name__)

ALGORITHMS = ("megatron", "tijdeman")
"""``"megatron"``: megatron-core's samples and blends exactly; ``"tijdeman"``: tokenport's defaults."""

LEGACY_SPLIT = "969, 30, 1"
"""The split Megatron-LM's validate_args gives ``--data-path`` when ``--split`` is not set."""

# Flags that change the samples in ways tokenport does not reproduce: refused when set.
_REFUSED = {
    "fim_data": ("--fim-data", "fill-in-the-middle samples are megatron-core's GPTFIMDataset; train them with it"),
    "sft": ("--sft", "Megatron's SFT datasets pack conversations; use Megatron's SFTDataset"),
    "multiple_validation_sets": (
        "--multiple-validation-sets",
        "the provider returns one validation dataset per run; blend the validation stores instead",
    ),
    "dataloader_inter_document_masking": (
        "--dataloader-inter-document-masking",
        "its cu_seqlens layout is not reproduced; tokenport's own GPTDataset gives cu_seqlens outside Megatron",
    ),
    "hybrid_context_parallel": (
        "--hybrid-context-parallel",
        "its per-sample padding for context parallelism is not reproduced",
    ),
}

# Flags that do not change any sample: ignored, with the reason logged when they are set.
_IGNORED = {
    "num_dataset_builder_threads": (
        "--num-dataset-builder-threads",
        1,
        "tokenport builds each index in one compiled pass and caches it; threads change no sample",
    ),
    "mmap_bin_files": (
        "--no-mmap-bin-files",
        True,
        "tokenport opens local stores by memory map itself; the samples are the same bytes either way",
    ),
    "dataloader_fast_cache_load": (
        "--dataloader-fast-cache-load",
        False,
        "tokenport's index cache always memory-maps a hit without parsing it",
    ),
    "dataloader_defer_npy_index_mmap": (
        "--dataloader-defer-npy-index-mmap",
        False,
        "tokenport maps its cached indices lazily already",
    ),
    "object_storage_cache_path": (
        "--object-storage-cache-path",
        None,
        "tokenport reads s3:// stores through its own storage layer and index cache",
    ),
    "per_dataset_sequences_path": (
        "--per-dataset-sequences-path",
        None,
        "tokenport reads each store's sequence count from its .idx",
    ),
}


@dataclass(frozen=True)
class MegatronDataArgs:
    """The data arguments of a Megatron-LM run, as tokenport builds them (see `read_megatron_args`)."""

    spec: BlendSpec
    split: str
    seq_length: int
    seed: int
    cache_dir: str | None
    surplus: float
    reset_position_ids: bool
    reset_attention_mask: bool
    eod_mask_loss: bool
    create_attention_mask: bool
    allow_ambiguous_pad_tokens: bool


def read_megatron_args(args: Any) -> MegatronDataArgs:
    """Megatron-LM's data flags from its ``args`` namespace; ConfigError naming a flag that cannot be honoured.

    A missing attribute takes Megatron-LM's default, so a namespace with only the flags a run
    sets (``data_path``, ``split``, ``seq_length``, ...) is enough. A prepare output directory in a
    data path (or a data args file) stands for its parts, its weight shared by their token counts,
    when the datasets are built (see `tokenport.build_datasets`).
    """
    if getattr(args, "mock_data", False):
        raise ConfigError(
            "--mock-data: tokenport does not make mock data; drop the tokenport provider and use Megatron's "
            "own (pretrain_gpt.py's train_valid_test_datasets_provider builds MockGPTDataset), or give --data-path"
        )
    for name, (flag, why) in _REFUSED.items():
        if getattr(args, name, None):
            raise ConfigError(f"{flag} is set but the tokenport provider does not support it: {why}")
    for name, (flag, default, why) in _IGNORED.items():
        value = getattr(args, name, default)
        if value != default:
            logger.info("ignoring %s=%r: %s", flag, value, why)
    spec, split = _spec_and_split(args)
    seq_length = getattr(args, "seq_length", None)
    if seq_length is None:
        raise ConfigError("--seq-length is not set: give the sequence length of the samples")
    surplus = getattr(args, "mid_level_dataset_surplus", 0.005)
    if isinstance(surplus, bool) or not isinstance(surplus, (int, float)) or not -1e6 < surplus < 1e6:
        raise ConfigError(
            f"--mid-level-dataset-surplus={surplus!r} is invalid: give a finite fraction such as 0.005 "
            "(megatron-core fails on NaN and infinity too)"
        )
    cache_dir = getattr(args, "data_cache_path", None)
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise ConfigError(f"--data-cache-path: args.data_cache_path={cache_dir!r} is invalid: expected a directory")
    return MegatronDataArgs(
        spec=spec,
        split=split,
        seq_length=check_int("--seq-length", seq_length),
        seed=check_seed("--seed", getattr(args, "seed", 1234)),
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        surplus=float(surplus),
        reset_position_ids=_flag(args, "reset_position_ids", "--reset-position-ids", False),
        reset_attention_mask=_flag(args, "reset_attention_mask", "--reset-attention-mask", False),
        eod_mask_loss=_flag(args, "eod_mask_loss", "--eod-mask-loss", False),
        create_attention_mask=_flag(
            args, "create_attention_mask_in_dataloader", "--no-create-attention-mask-in-dataloader", True
        ),
        allow_ambiguous_pad_tokens=_flag(args, "allow_ambiguous_pad_tokens", "--allow-ambiguous-pad-tokens", False),
    )


def _flag(args: Any, name: str, flag: str, default: bool) -> bool:
    """A boolean flag of ``args`` (its default when absent); ConfigError for anything but True/False."""
    value = getattr(args, name, default)
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{flag}: args.{name}={value!r} is invalid: expected True or False")
    return bool(value)


def _spec_and_split(args: Any) -> tuple[BlendSpec, str]:
    """The blend spec and split string of Megatron's data path flags (get_blend_and_blend_per_split's rules)."""
    data_path = getattr(args, "data_path", None)
    data_args_path = getattr(args, "data_args_path", None)
    per_split_paths = [getattr(args, f"{which}_data_path", None) for which in ("train", "valid", "test")]
    per_split_args_path = getattr(args, "per_split_data_args_path", None)
    split = getattr(args, "split", None)
    if split is not None and not isinstance(split, str):
        raise ConfigError(f"--split: args.split={split!r} is invalid: expected a string such as '969,30,1'")
    for name, value in (("data_args_path", data_args_path), ("per_split_data_args_path", per_split_args_path)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag}: args.{name}={value!r} is invalid: expected a file path")
    shared = data_path is not None or data_args_path is not None
    per_split = any(p is not None for p in per_split_paths) or per_split_args_path is not None
    if shared and per_split:
        raise ConfigError(
            "--data-path/--data-args-path and --train/valid/test-data-path/--per-split-data-args-path are both set: "
            "give one shared blend cut by --split, or one blend per split"
        )
    if data_path is not None and data_args_path is not None:
        raise ConfigError("--data-path and --data-args-path are both set: give the blend one way")
    if per_split_args_path is not None and any(p is not None for p in per_split_paths):
        raise ConfigError(
            "--per-split-data-args-path and --train/valid/test-data-path are both set: give the blends one way"
        )
    if shared:
        blend = blend_from_args_file(data_args_path) if data_args_path is not None else _blend(data_path, "--data-path")
        if split is None:
            if data_path is None:
                raise ConfigError("--split is not set: give the train,valid,test split of the --data-args-path blend")
            split = LEGACY_SPLIT  # what Megatron-LM's validate_args sets for --data-path
        return BlendSpec(blend=blend), str(split)
    if per_split:
        if split is not None:
            raise ConfigError(
                f"--split={split!r} is set with per-split data paths: each split's stores are used whole "
                "(megatron-core refuses both); drop --split"
            )
        if per_split_args_path is not None:
            spec = blend_per_split_from_json(per_split_args_path)
            assert spec.per_split is not None  # a per-split spec holds one
            blends = list(spec.per_split)
        else:
            blends = [
                None if p is None else _blend(p, f"--{which}-data-path")
                for p, which in zip(per_split_paths, ("train", "valid", "test"))
            ]
        # megatron-core builds a lone store of a split alone, whatever its weight
        train, valid, test = (b if b is None or len(b.prefixes) > 1 else Blend(b.prefixes) for b in blends)
        return BlendSpec(per_split=(train, valid, test)), "1"
    raise ConfigError(
        "no data path is set: give --data-path (or --data-args-path), or --train/valid/test-data-path "
        "(or --per-split-data-args-path); without them Megatron uses mock data, which tokenport does not make"
    )


def _blend(items: Any, flag: str) -> Blend:
    """Megatron's list form of ``flag`` as a Blend, errors naming the flag."""
    if isinstance(items, str):
        items = items.split()
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{flag}={items!r} is invalid: expected a list of weights and prefixes (strings)")
    try:
        return blend_from_list(list(items))
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def _megatron_tokenizer() -> Any:
    """Megatron-LM's global tokenizer when running inside Megatron-LM, else None."""
    try:
        from megatron.training import get_tokenizer
    except ImportError:
        return None
    try:
        return get_tokenizer()
    except AssertionError:  # imported but not initialized
        return None


def _megatron_get_args() -> Any:
    """Megatron-LM's parsed arguments; ConfigError outside Megatron-LM."""
    try:
        from megatron.training import get_args
    except ImportError:
        raise ConfigError(
            "args: megatron.training is not importable (only megatron-core is installed), so Megatron-LM's "
            "arguments cannot be read; pass them as datasets_provider(args=namespace)"
        ) from None
    return get_args()


def token_ids(tokenizer: Any, allow_ambiguous_pad_tokens: bool = False) -> tuple[int | None, int | None]:
    """(eod_id, pad_id) of a Megatron tokenizer, pad chosen as megatron-core's MegatronDataset does.

    A pad id equal to another special token is dropped (no pad, Megatron's -1) unless
    ``allow_ambiguous_pad_tokens``; a tokenizer of None gives (None, None): the EOD id then
    comes from each store's manifest.
    """
    if tokenizer is None:
        return None, None
    try:
        eod = getattr(tokenizer, "eod", None)
    except Exception as exc:  # a property that fails (NotImplementedError, ...): no eod id to end documents with
        raise ConfigError(
            f"tokenizer.eod: reading it raised {type(exc).__name__}: {exc}; pass Megatron's tokenizer "
            "(its .eod ends documents)"
        ) from None
    if eod is None:
        raise ConfigError("tokenizer: it has no eod id; pass Megatron's tokenizer (its .eod ends documents)")
    eod = _token_id("eod", eod)
    try:
        pad = tokenizer.pad
    except Exception:  # megatron-core reads it the same way: any failure means no pad
        pad = None
    if pad is not None and not (is_int(pad) and pad < 0):  # a negative id is megatron's own "no pad"
        pad = _token_id("pad", pad)
    specials = _special_ids(tokenizer)
    if pad is not None and pad < 0:
        pad = None  # megatron's own "no pad" value
    if pad is not None and pad in specials:
        if not allow_ambiguous_pad_tokens:
            pad = None
        elif pad == eod:
            raise ConfigError(
                f"--allow-ambiguous-pad-tokens: the tokenizer's pad id {pad} is its EOD id, so every document end "
                "would be masked as padding; tokenport refuses that, drop the flag or fix the tokenizer's pad"
            )
    return int(eod), None if pad is None else int(pad)


def _special_ids(tokenizer: Any) -> list[Any]:
    """The ids a pad must not equal, read as MegatronDataset reads them: ``special_tokens_dict`` less its pad,
    else ``eos`` and ``eod``, each skipped when it raises AttributeError or NotImplementedError (as
    Megatron's Null tokenizers' ``eos`` does); ConfigError naming the attribute for any other failure."""
    try:
        specials = [v for k, v in tokenizer.special_tokens_dict.items() if k != "pad_token"]
    except (AttributeError, IndexError, ValueError):
        specials = []
    except Exception as exc:
        raise ConfigError(
            f"tokenizer.special_tokens_dict: reading it raised {type(exc).__name__}: {exc}; pass Megatron's "
            "tokenizer, whose special_tokens_dict maps token names to ids"
        ) from None
    return specials or _eos_eod(tokenizer)


def _eos_eod(tokenizer: Any) -> list[Any]:
    """``[tokenizer.eos, tokenizer.eod]``, without those that raise AttributeError or NotImplementedError."""
    ids = []
    for name in ("eos", "eod"):
        try:
            ids.append(getattr(tokenizer, name))
        except (AttributeError, NotImplementedError):
            continue
        except Exception as exc:
            raise ConfigError(
                f"tokenizer.{name}: reading it raised {type(exc).__name__}: {exc}; pass Megatron's tokenizer"
            ) from None
    return ids


def _token_id(name: str, value: Any) -> int:
    """A tokenizer's ``name`` id as an int; ConfigError naming ``tokenizer.NAME`` unless an integer in [0, 2**63)."""
    if not is_int(value) or not 0 <= value < 2**63:
        raise ConfigError(
            f"tokenizer.{name}={value!r} is invalid: expected a token id (an integer of at least 0); "
            "pass Megatron's tokenizer, whose ids are integers"
        )
    return int(value)


class MegatronSamples:
    """A tokenport dataset whose items are megatron-core's: torch tensors under ``get_batch``'s keys.

    ``tokens``, ``labels`` and ``position_ids`` are int64, ``loss_mask`` float32 and
    ``attention_mask`` (only with ``create_attention_mask``) a (1, seq_length, seq_length) bool
    tensor, True where masked; a blend adds ``dataset_id`` as megatron-core's BlendedDataset
    does. ``samples[None]`` is sample 0 with no loss (Megatron's batch-padding sample); ``samples[-1]`` is
    the last, negative ids counting from the end as in megatron-core.
    ``dataset`` is the tokenport dataset, for its other fields (``cu_seqlens``) and samplers.
    """

    def __init__(self, dataset: Any, create_attention_mask: bool) -> None:
        self.dataset = dataset
        self.create_attention_mask = create_attention_mask
        index = getattr(dataset, "dataset_index", None)
        self._dataset_id_dtype = None if index is None else index.dtype

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int | None) -> dict[str, Any]:
        import torch

        sample = self.dataset[0 if idx is None else _megatron_index(idx, len(self))]
        tokens = torch.from_numpy(np.asarray(sample["tokens"], dtype=np.int64))
        labels = torch.from_numpy(np.asarray(sample["labels"], dtype=np.int64))
        loss_mask = torch.from_numpy(np.asarray(sample["loss_mask"], dtype=np.float32))
        if idx is None:
            loss_mask = torch.zeros_like(loss_mask)
        position_ids = torch.from_numpy(np.asarray(sample["position_ids"], dtype=np.int64))
        item: dict[str, Any] = {}  # megatron-core's key order
        if self._dataset_id_dtype is not None:
            item["dataset_id"] = np.asarray(sample["dataset_id"], dtype=self._dataset_id_dtype)[()]
        item["tokens"], item["labels"] = tokens, labels
        if self.create_attention_mask:
            item["attention_mask"] = torch.from_numpy(np.asarray(sample["attention_mask"], dtype=bool))
        item["loss_mask"], item["position_ids"] = loss_mask, position_ids
        return item


def _megatron_index(idx: Any, count: int) -> int:
    """``idx`` as a sample id in [0, count), a negative one counted from the end as megatron-core's datasets
    count it (``ds[-1]`` is the last); SampleIdError (an IndexError) outside [-count, count) or for a non-integer."""
    index = idx if isinstance(idx, (bool, np.bool_)) else _as_index(idx)
    if isinstance(index, int) and -count <= index < 0:
        index += count
    if isinstance(index, int) and not 0 <= index < count:
        raise SampleIdError(f"sample id {index} is outside [-{count}, {count}): the dataset has {count} samples")
    return check_sample_id(index, count)


def _as_index(idx: Any) -> Any:
    """``operator.index(idx)``, or ``idx`` itself when it is not an integer (check_sample_id refuses it)."""
    try:
        return operator.index(idx)
    except TypeError:
        return idx


Provider = Callable[..., tuple[MegatronSamples | None, MegatronSamples | None, MegatronSamples | None]]


def datasets_provider(
    args: Any = None,
    *,
    algorithm: str = "megatron",
    tokenizer: Any = None,
    is_built_on_rank: Callable[[int | None], bool] | None = None,
    allow_mixed_tokenizers: bool = False,
) -> Provider:
    """Megatron-LM's ``train_valid_test_datasets_provider``, building tokenport datasets from its arguments.

    ``args`` is Megatron's namespace (None: ``megatron.training.get_args()`` when called);
    ``tokenizer`` gives the EOD and pad ids (None: Megatron's global tokenizer inside Megatron-LM,
    else each store's manifest). ``is_built_on_rank(vp_stage)`` says whether this rank keeps
    the datasets (pass pretrain_gpt's ``is_dataset_built_on_rank``; None: tensor-parallel rank 0
    of the first and last pipeline stages once megatron-core's parallel state is set up, else
    every rank). Every rank builds (the index cache meets at barriers); the rest get None.
    Stores prepared with different tokenizers are refused unless ``allow_mixed_tokenizers``
    (see `tokenport.build_datasets`).
    """
    check_choice("algorithm", algorithm, ALGORITHMS)
    check_same_tokenizer((), allow_mixed_tokenizers=allow_mixed_tokenizers)
    if is_built_on_rank is not None and not callable(is_built_on_rank):
        raise ConfigError(
            f"is_built_on_rank={is_built_on_rank!r} is invalid: pass a function of vp_stage "
            "(pretrain_gpt's is_dataset_built_on_rank) or None"
        )
    if args is not None:  # refuse bad flags now, not at the first training step
        _check_algorithm_takes(read_megatron_args(args), algorithm)

    def train_valid_test_datasets_provider(
        train_val_test_num_samples: Sequence[int | None], vp_stage: int | None = None
    ) -> tuple[MegatronSamples | None, MegatronSamples | None, MegatronSamples | None]:
        """The (train, valid, test) datasets of ``train_val_test_num_samples`` samples, None where a split has none.

        A split asked for 0 samples is None (megatron-core builds one epoch of a lone store or an
        empty blend there, which Megatron-LM never reads: it asks 0 only when it does not evaluate).
        """
        if isinstance(train_val_test_num_samples, (str, bytes)) or not isinstance(
            train_val_test_num_samples, (list, tuple, np.ndarray)
        ):
            raise ConfigError(
                f"train_val_test_num_samples={train_val_test_num_samples!r} is invalid: expected the "
                "(train, valid, test) sample counts Megatron-LM passes"
            )
        data = read_megatron_args(args if args is not None else _megatron_get_args())
        datasets = _built(data, list(train_val_test_num_samples), algorithm, tokenizer, allow_mixed_tokenizers)
        keep = (is_built_on_rank or _built_on_rank)(vp_stage)
        return tuple(  # type: ignore[return-value]
            MegatronSamples(d, data.create_attention_mask) if keep and d is not None else None for d in datasets
        )

    train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]
    return train_valid_test_datasets_provider


def _built(
    data: MegatronDataArgs, sizes: list[int | None], algorithm: str, tokenizer: Any, allow_mixed_tokenizers: bool
) -> tuple[Any, ...]:
    """The (train, valid, test) tokenport datasets Megatron-LM's arguments ``data`` ask for (every rank builds)."""
    _check_algorithm_takes(data, algorithm)
    chosen = tokenizer if tokenizer is not None else _megatron_tokenizer()
    eod_id, pad_id = token_ids(chosen, data.allow_ambiguous_pad_tokens)
    config = GPTSampleConfig(
        seq_length=data.seq_length,
        eod_id=eod_id,
        pad_id=pad_id,
        reset_position_ids=data.reset_position_ids,
        reset_attention_mask=data.reset_attention_mask,
        eod_mask_loss=data.eod_mask_loss,
        create_attention_mask=data.create_attention_mask,
    )
    return tuple(
        build_datasets(
            data.spec,
            sizes=sizes,
            config=config,
            seed=data.seed,
            split=data.split,
            cache=None if data.cache_dir is None else IndexCache(data.cache_dir),
            algorithm=algorithm,
            surplus=data.surplus,
            allow_mixed_tokenizers=allow_mixed_tokenizers,
        )
    )


def _check_algorithm_takes(data: MegatronDataArgs, algorithm: str) -> None:
    """With ``algorithm="megatron"``, refuse a zero weight in a blend of several stores, as megatron-core's
    BlendedDataset does (it asserts every weight > 0); tokenport's own algorithm drops such a store."""
    if algorithm != "megatron":
        return
    spec = data.spec
    for which, blend in zip(("shared", "train", "valid", "test"), (spec.blend, *(spec.per_split or (None,) * 3))):
        if blend is None or blend.weights is None or len(blend.prefixes) == 1:
            continue
        for prefix, weight in zip(blend.prefixes, blend.weights):
            if weight == 0:
                raise ConfigError(
                    f"the {which} blend weighs {prefix} 0: megatron-core refuses a zero weight in a blend (its "
                    "BlendedDataset asserts every weight > 0); drop the store, or pass algorithm='tijdeman', "
                    "which drops it"
                )


def _built_on_rank(vp_stage: int | None) -> bool:
    """pretrain_gpt's rule without multi-token prediction: tensor-parallel rank 0 of the first or last stage."""
    parallel_state = sys.modules.get("megatron.core.parallel_state")  # never imported here: not set up if absent
    if parallel_state is None or not parallel_state.model_parallel_is_initialized():
        return True
    if parallel_state.get_tensor_model_parallel_rank() != 0:
        return False
    return bool(
        parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        or parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    )

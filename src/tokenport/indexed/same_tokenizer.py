"""The one check of everything that combines stores: one tokenizer, or a refusal naming two stores that differ.

A store's tokenizer identity is its manifest's record (`tokenizer_key`: fingerprint, vocab size
and EOD id). Stores whose identities differ hold ids of different vocabularies even when their
EOD ids agree, and a blend of them would mix two vocabularies in one batch; merge, build_datasets,
BlendedDataset, AdaptiveBlend, ``tokenport blend`` and the Megatron provider all refuse them here.
A store without a manifest, or whose manifest records no tokenizer (a Megatron store, a store
written without one), has nothing to compare and is allowed beside any other (a dataset still
checks its EOD id). ``allow_mixed_tokenizers=True`` (``--allow-mixed-tokenizers``) skips the check,
for tokenizers known to share ids. The identity comes from ``store.facts``, which an index cache's
stat record supplies on reopen, so a blend of thousands of stores reads no manifest again for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .reader import IndexedDataset


def store_tokenizer(store: IndexedDataset) -> str | None:
    """The tokenizer identity ``store``'s manifest records (from facts known earlier when given); None: unknown."""
    facts = store.facts
    return None if facts is None else facts.tokenizer


def stores_of(dataset: Any) -> list[IndexedDataset]:
    """The token stores under ``dataset``: a store itself, a sample dataset's store, every child of a blend."""
    found: list[IndexedDataset] = []
    pending = [dataset]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, IndexedDataset):
            found.append(item)
            continue
        children = getattr(item, "datasets", None)
        if isinstance(children, (list, tuple)):
            pending.extend(reversed(children))
        for name in ("store", "dataset"):  # GPTDataset.store (.dataset: Megatron's name, the same); SFT, packed
            store = getattr(item, name, None)
            if isinstance(store, IndexedDataset):
                found.append(store)
                break
    return found


def check_same_tokenizer(
    stores: Iterable[tuple[str, str | None]], *, allow_mixed_tokenizers: bool = False, what: str = "blend"
) -> tuple[str, str] | None:
    """Refuse (ConfigError naming both stores) two ``(name, tokenizer identity)`` pairs whose identities differ.

    Pairs whose identity is None (unknown) are skipped. Returns the first known pair (so a caller
    that meets stores one at a time passes it back with the next), or None when none is known.
    """
    if not isinstance(allow_mixed_tokenizers, bool):
        raise ConfigError(
            f"allow_mixed_tokenizers={allow_mixed_tokenizers!r} is invalid: pass True (stores made with "
            "different tokenizers that share ids may be combined) or False"
        )
    if allow_mixed_tokenizers:
        return None  # nothing to compare: no manifest is read for it
    first: tuple[str, str] | None = None
    for name, key in stores:
        if key is None:
            continue
        if first is None:
            first = (name, key)
        elif key != first[1]:
            raise ConfigError(
                f"{what}: {name} was prepared with another tokenizer than {first[0]} ({key} vs {first[1]}); "
                "their ids do not mean the same tokens, so combining them mixes two vocabularies. Combine "
                "stores made with one tokenizer, or pass allow_mixed_tokenizers=True (--allow-mixed-tokenizers) "
                "if these tokenizers are known to share ids"
            )
    return first


def check_datasets_tokenizer(datasets: Iterable[Any], *, allow_mixed_tokenizers: bool = False, what: str) -> None:
    """`check_same_tokenizer` over the stores under ``datasets`` (the children of a blend)."""
    pairs = ((store.prefix, store_tokenizer(store)) for dataset in datasets for store in stores_of(dataset))
    check_same_tokenizer(pairs, allow_mixed_tokenizers=allow_mixed_tokenizers, what=what)

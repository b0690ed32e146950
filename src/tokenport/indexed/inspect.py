"""What a store holds, for people: counts, length percentiles, a histogram, the first documents;
for several stores (a prepare output's parts), each store's block and then their total."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._checks import check_int
from ..errors import ConfigError
from . import IndexedDataset
from .prefixes import resolve_stores

PERCENTILES = (0, 10, 50, 90, 99, 100)
_MASK_CHUNK = 16 << 20


@dataclass(frozen=True)
class StoreSummary:
    """The facts `tokenport inspect` shows about one store."""

    prefix: str
    dtype: str
    sequences: int
    documents: int
    tokens: int
    bin_bytes: int
    length_percentiles: dict[int, int]
    mean_length: float
    histogram_edges: tuple[int, ...]
    histogram_counts: tuple[int, ...]
    tokenizer: dict | None
    first_documents: tuple[str, ...]
    mask_coverage: float | None = None  # a chat store's share of tokens trained (mask 1); None for a plain store
    chat: dict | None = None  # how a chat store was made (manifest `chat`)

    def render(self, width: int = 40) -> str:
        """A terminal report of a summary, with a bar histogram of sequence lengths."""
        lines = [
            f"store      {self.prefix}",
            f"dtype      {self.dtype}",
            f"documents  {self.documents:,}",
            f"sequences  {self.sequences:,}",
            f"tokens     {self.tokens:,}  ({self.bin_bytes / 2**20:,.1f} MiB in .bin)",
        ]
        if self.tokenizer:
            t = self.tokenizer
            name = str(t.get("name"))  # the spec as given ('byte', 'hf:tokenizer.json'): kind first, unless it lacks it
            name = name if name.split(":")[0] == t.get("kind") else f"{t.get('kind')}:{name}"
            lines.append(f"tokenizer  {name}  vocab {t.get('vocab_size'):,}  eod {t.get('eod_id')}")
        if self.length_percentiles:
            cells = "  ".join(f"p{p}={v:,}" for p, v in self.length_percentiles.items())
            lines.append(f"lengths    {cells}  mean={self.mean_length:,.1f}")
            peak = max(self.histogram_counts) or 1
            for low, high, count in zip(self.histogram_edges, self.histogram_edges[1:], self.histogram_counts):
                if count:
                    bar = "#" * max(1, round(width * count / peak))
                    lines.append(f"  [{low:>9,}, {high:>9,})  {count:>10,}  {bar}")
        if self.mask_coverage is not None:
            made = ", ".join(f"{key} {value}" for key, value in sorted((self.chat or {}).items()))
            lines.append(f"masks      {self.mask_coverage:.1%} of tokens trained" + (f"  ({made})" if made else ""))
        for k, text in enumerate(self.first_documents):
            flat = " ".join(text.split())
            lines.append(f"document {k}: {flat}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-able data (percentile keys as strings, as JSON objects need)."""
        data = asdict(self)
        data["length_percentiles"] = {str(p): v for p, v in self.length_percentiles.items()}
        data["histogram_edges"], data["histogram_counts"] = list(self.histogram_edges), list(self.histogram_counts)
        data["first_documents"] = list(self.first_documents)
        return data


def summarize(prefix: str | os.PathLike, *, documents: int = 3, preview_chars: int = 240) -> StoreSummary:
    """Summarize a store; detokenize its first documents when its tokenizer is available here."""
    check_int("documents", documents, 0, what="how many documents to show (--documents)")
    check_int("preview_chars", preview_chars, 0, what="how many characters of each document to show")
    ds = IndexedDataset(prefix)
    lengths = ds.sequence_lengths
    if len(lengths):
        values = np.percentile(lengths, PERCENTILES, method="nearest")
        percentiles = {p: int(v) for p, v in zip(PERCENTILES, values)}
        edges, counts = _log2_histogram(lengths)
        mean = float(lengths.mean())
    else:
        percentiles, edges, counts, mean = {}, (), (), 0.0
    manifest = ds.manifest
    identity = manifest.tokenizer if manifest is not None else None
    summary = StoreSummary(
        prefix=ds.prefix,
        dtype=ds.dtype.name,
        sequences=len(ds),
        documents=ds.num_documents,
        tokens=ds.num_tokens,
        bin_bytes=ds.bin_size,
        length_percentiles=percentiles,
        mean_length=mean,
        histogram_edges=edges,
        histogram_counts=counts,
        tokenizer=identity,
        first_documents=tuple(_previews(ds, identity, documents, preview_chars)),
        mask_coverage=_mask_coverage(ds),
        chat=manifest.chat if manifest is not None else None,
    )
    ds.close()
    return summary


@dataclass(frozen=True)
class StoresTotal:
    """What sums over the stores of a `StoresSummary`."""

    stores: int
    documents: int
    sequences: int
    tokens: int
    bin_bytes: int

    def render(self) -> str:
        """The total line of a report."""
        return (
            f"total      {self.stores:,} stores  {self.documents:,} documents  {self.sequences:,} sequences  "
            f"{self.tokens:,} tokens  ({self.bin_bytes / 2**20:,.1f} MiB in .bin)"
        )


@dataclass(frozen=True)
class StoresSummary:
    """`tokenport inspect` of several stores: each store's summary, then their total."""

    stores: tuple[StoreSummary, ...]
    total: StoresTotal

    def render(self, width: int = 40) -> str:
        """Each store's block, a blank line between them, then the total line (for two stores or more)."""
        blocks = [summary.render(width) for summary in self.stores]
        if len(self.stores) > 1:
            blocks.append(self.total.render())
        return "\n\n".join(blocks)

    def to_json(self) -> dict[str, Any]:
        """``{"stores": [each store's summary], "total": {stores, documents, sequences, tokens, bin_bytes}}``."""
        return {"stores": [summary.to_json() for summary in self.stores], "total": asdict(self.total)}


def summarize_stores(
    prefixes: Sequence[str | os.PathLike], *, documents: int = 3, preview_chars: int = 240
) -> StoresSummary:
    """Summarize the stores ``prefixes`` name (a prepare output directory: its parts, see `resolve_stores`)
    and total them."""
    check_int("documents", documents, 0, what="how many documents to show (--documents)")
    summaries = tuple(
        summarize(prefix, documents=documents, preview_chars=preview_chars) for prefix in resolve_stores(prefixes)
    )
    total = StoresTotal(
        stores=len(summaries),
        documents=sum(s.documents for s in summaries),
        sequences=sum(s.sequences for s in summaries),
        tokens=sum(s.tokens for s in summaries),
        bin_bytes=sum(s.bin_bytes for s in summaries),
    )
    return StoresSummary(summaries, total)


def _mask_coverage(ds: IndexedDataset) -> float | None:
    """The share of a chat store's tokens whose mask is 1, read from its mask store in 16 MiB chunks."""
    masks = ds.masks
    if masks is None:
        return None
    total = masks.bin_size
    if not total:
        return 0.0
    trained = 0
    for start in range(0, total, _MASK_CHUNK):
        trained += int(np.count_nonzero(masks._bin.read_array(start, min(_MASK_CHUNK, total - start), np.uint8)))
    return trained / total


def _log2_histogram(lengths: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Counts of lengths in power-of-two buckets [0,1), [1,2), [2,4), ... up to the maximum."""
    top = int(lengths.max())
    edges = [0, 1]
    while edges[-1] <= top:
        edges.append(edges[-1] * 2)
    counts, _ = np.histogram(lengths, bins=edges)
    return tuple(edges), tuple(int(c) for c in counts)


def _previews(ds: IndexedDataset, identity: dict | None, count: int, chars: int) -> list[str]:
    from ..tokenizers import tokenizer_from_identity

    tokenizer = tokenizer_from_identity(identity) if identity else None
    documents = ds.document_indices
    previews = []
    for doc in range(min(count, ds.num_documents)):
        first, stop = int(documents[doc]), int(documents[doc + 1])
        tokens = np.concatenate([ds[i] for i in range(first, stop)]) if stop > first else np.zeros(0, ds.dtype)
        if tokenizer is not None:
            text = tokenizer.decode(tokens[: chars * 4].tolist())
        else:
            text = "token ids: " + " ".join(str(t) for t in tokens[:48].tolist())
        previews.append(text[:chars])
    return previews


def lengths_of(prefixes: Sequence[str]) -> np.ndarray:
    """The sequence lengths of the token stores at ``prefixes``, concatenated in order, as int64."""
    if isinstance(prefixes, str) or not len(prefixes):
        raise ConfigError(f"prefixes={prefixes!r}: give a list of one or more token store prefixes")
    parts = []
    for prefix in prefixes:
        with IndexedDataset(prefix) as dataset:
            parts.append(np.asarray(dataset.sequence_lengths, dtype=np.int64).copy())
    return np.concatenate(parts)

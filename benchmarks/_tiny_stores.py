"""Many tiny token stores, fast: the files IndexedDatasetWriter would write, without its per-store fsyncs.

The writer publishes each store durably (fsync of three files and a directory, a journal): ~10-60 ms
a store here, hours for 10^5 stores. ``write_tiny_store`` writes the same ``.bin``, ``.idx`` and
``.json`` bytes (tests/builder/test_scale_blend.py checks them against the writer's, the manifest's
creation time aside) straight to their names: for benchmarks and tests that need many stores, never
for data a run keeps.
"""

from __future__ import annotations

import datetime as _dt
import os

import numpy as np

from tokenport._version import __version__
from tokenport.indexed.checksums import BlockHasher, available_algorithm, new_hasher
from tokenport.indexed.format import IndexHeader
from tokenport.indexed.manifest import Checksums, Manifest

EOD = 2
VOCAB = 1_000


def tiny_documents(seed: int, documents: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint16 tokens, lengths) of ``documents`` short documents (4..39 tokens), each ending with EOD."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 40, documents)
    tokens = rng.integers(EOD + 1, VOCAB, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    return tokens, lengths


def write_tiny_store(prefix: str, tokens: np.ndarray, lengths: np.ndarray) -> str:
    """Write a uint16 store of one sequence per document at ``prefix``, as the writer would; return it."""
    algorithm = available_algorithm()
    body = np.ascontiguousarray(tokens, dtype=np.uint16).tobytes()
    bin_hash = BlockHasher(algorithm)
    bin_hash.update(body)
    ends = np.cumsum(lengths, dtype=np.int64) * 2
    index = b"".join(
        (
            IndexHeader(np.dtype(np.uint16), len(lengths), len(lengths) + 1).pack(),
            np.asarray(lengths, dtype=np.int32).tobytes(),
            (ends - np.asarray(lengths, dtype=np.int64) * 2).tobytes(),
            np.arange(len(lengths) + 1, dtype=np.int64).tobytes(),
        )
    )
    idx_hash = new_hasher(algorithm)
    idx_hash.update(index)
    manifest = Manifest(
        dtype="uint16",
        sequences=len(lengths),
        documents=len(lengths),
        tokens=len(tokens),
        checksums=Checksums(algorithm, idx_hash.hexdigest(), bin_hash.block_size, tuple(bin_hash.finish())),
        tokenizer={"eod_id": EOD, "vocab_size": VOCAB},
        provenance={"tokenport_version": __version__},
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    for suffix, data in ((".bin", body), (".idx", index), (".json", manifest.to_json().encode())):
        with open(prefix + suffix, "wb") as f:
            f.write(data)
    return prefix


def write_tiny_stores(directory: str, count: int, documents: int = 20) -> list[str]:
    """``count`` tiny stores ``directory/sNNNNNN`` (store k from seed k), their prefixes in order."""
    os.makedirs(directory, exist_ok=True)
    prefixes = []
    for k in range(count):
        prefix = os.path.join(directory, f"s{k:06d}")
        if not os.path.exists(prefix + ".json"):
            write_tiny_store(prefix, *tiny_documents(k, documents))
        prefixes.append(prefix)
    return prefixes

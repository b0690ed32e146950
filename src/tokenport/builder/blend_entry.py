"""A weighted GPT blend's indices as one cache entry: its children's index arrays packed into a few
arrays and unpacked as views, and built in spawned worker processes when there are many children."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..indexed import IndexedDataset
from .gpt_datasets import gpt_index_request

_CHILD_ARRAYS = ("document_index", "sample_index", "shuffle_index")


def pack_children(built: dict[int, dict[str, np.ndarray]], count: int) -> dict[str, np.ndarray]:
    """The children's index arrays, ``built[d]`` for child ``d`` of ``count``, as a few arrays: per
    kind, one concatenation per dtype (children keep Megatron's dtypes, which vary with their size)
    and a ``KIND.where`` table of (dtype group, start, stop) rows, (-1, 0, 0) for a child with none."""
    packed: dict[str, np.ndarray] = {}
    order = sorted(built)
    for kind in _CHILD_ARRAYS:
        names: dict[np.dtype, str] = {}  # str(dtype) is slow: made once per distinct dtype, not per child
        groups: dict[str, list[int]] = {}
        for d in order:
            dtype = built[d][kind].dtype
            name = names.get(dtype) or names.setdefault(dtype, str(dtype))
            groups.setdefault(name, []).append(d)
        where = np.zeros((count, 3), dtype=np.int64)
        where[:, 0] = -1
        for code, (name, members) in enumerate(sorted(groups.items())):
            lengths = np.array([len(built[d][kind]) for d in members], dtype=np.int64)
            stops = np.cumsum(lengths)
            where[members, 0] = code
            where[members, 1] = stops - lengths
            where[members, 2] = stops
            packed[f"{kind}.{name}"] = np.concatenate([built[d][kind] for d in members])
        packed[f"{kind}.where"] = where
    return packed


def unpacker(arrays: dict[str, np.ndarray]) -> Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Child ``d``'s (document, sample, shuffle) indices as views of an entry ``pack_children`` made."""
    tables = []
    for kind in _CHILD_ARRAYS:
        # the dtype groups in the order pack_children numbered them (their dtype names sorted)
        groups = sorted(name for name in arrays if name.startswith(kind + ".") and name != kind + ".where")
        tables.append(([arrays[name] for name in groups], arrays[kind + ".where"].ravel().tolist()))  # flat: ints

    (documents, document_rows), (samples, sample_rows), (shuffles, shuffle_rows) = tables

    def unpack(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (_view(documents, document_rows, d), _view(samples, sample_rows, d), _view(shuffles, shuffle_rows, d))

    return unpack


def _view(groups: list[np.ndarray], rows: list[int], d: int) -> np.ndarray:
    """Child ``d``'s array: rows ``start:stop`` of dtype group ``code``, its ``(code, start, stop)`` in the
    flattened where table ``rows``."""
    code, start, stop = rows[3 * d : 3 * d + 3]
    return groups[code][start:stop]


@dataclass(frozen=True)
class ChildJob:
    """What a worker process needs to build one blend's children's GPT indices."""

    seq_length: int
    seed: int
    split: str
    which: str
    add_extra_token: bool
    drop_last_partial: bool

    def __call__(self, children: list[tuple[int, str, int]]) -> dict[int, dict[str, np.ndarray]]:
        """The indices of ``children`` ((position in the blend, store prefix, samples) each), by position."""
        arrays: dict[int, dict[str, np.ndarray]] = {}
        for d, prefix, n in children:
            with IndexedDataset(prefix) as store:
                try:
                    request = gpt_index_request(
                        store,
                        n,
                        self.seq_length,
                        self.seed,
                        split=self.split,
                        which=self.which,
                        add_extra_token=self.add_extra_token,
                        drop_last_partial=self.drop_last_partial,
                    )
                except ConfigError as exc:
                    raise ConfigError(f"{prefix}, {self.which} split of {self.split!r}: {exc}") from None
                assert request is not None  # a nonzero-weight split
                arrays[d] = request.build()
        return arrays


def build_children_in_processes(
    job: ChildJob, prefixes: Sequence[str], wanted: list[tuple[int, int]], workers: int
) -> dict[int, dict[str, np.ndarray]]:
    """``job`` over the ``wanted`` (child, samples) pairs in ``workers`` spawned processes, in chunks;
    spawned, not forked, so a parent holding threads (torch, a loader) cannot deadlock them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    items = [(d, prefixes[d], n) for d, n in wanted]
    chunks = [items[k : k + 64] for k in range(0, len(items), 64)]
    arrays: dict[int, dict[str, np.ndarray]] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=context) as pool:
        for part in pool.map(job, chunks):
            arrays.update(part)
    return arrays

"""Length grouping: a random order in which each batch holds samples of similar length.

The algorithm is that of ``transformers.trainer_pt_utils.get_length_grouped_indices``:
permute the indices at random, cut the permutation into megabatches of
``mega_batch_mult * batch_size`` indices, sort each megabatch by length, longest first (ties
keep their permuted order, as Python's stable ``sorted(..., reverse=True)`` does), then swap
the single longest sample to the very front, so that an out-of-memory error shows at the first
step rather than hours in.

Given a ``torch.Generator`` (or neither a generator nor a seed: torch's global RNG, as in
transformers) the permutation is ``torch.randperm(n, generator=generator)``, drawn exactly as
transformers draws it (by a numba twin of torch's draws that advances the generator the same
way, see ``torch_randperm``), and the result equals transformers' index for index. Given
``seed=`` the permutation is ``numpy.random.default_rng(seed).permutation(n)`` and torch is
never imported; that stream differs from torch's, so the order is a valid length grouping but
not transformers' order. The megabatch sorts are one numba pass of small radix sorts.

Lengths are token counts, e.g. ``IndexedDataset.sequence_lengths``: no tokens are read.

The samplers here are transformers' and keep no resume state; they take tokenport's arguments
``(lengths, batch_size, ...)`` or transformers' ``(batch_size, dataset=None, lengths=None, ...)``.
For a length-grouped order that resumes exactly on another number of ranks or another batch size, use
``StreamSampler(order="length_grouped")`` (``stream.py``): this grouping, seeded with numpy.
"""

from __future__ import annotations

import array as pyarray
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numba
import numpy as np

from .._checks import check_bool, check_int, is_int
from .._schema import INT64_MAX
from ..errors import ConfigError
from ..rng.prefetch import prefetch
from ..rng.torch_randperm import randperm
from .hf_signature import bind_arguments, lengths_argument, replicas_from_torch

__all__ = [
    "DistributedLengthGroupedSampler",
    "LengthGroupedSampler",
    "get_length_grouped_indices",
    "length_grouped_order",
]

_RNGS = ("torch", "numpy")
_AHEAD = 32  # gathers between prefetching a length and reading it


def get_length_grouped_indices(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    mega_batch_mult: int | None = None,
    generator: Any = None,
    seed: int | Sequence[int] | None = None,
) -> list[int]:
    """Return indices such that each run of ``batch_size`` consecutive ones has similar lengths.

    Same signature and meaning as transformers' ``get_length_grouped_indices``, plus ``seed``.
    ``mega_batch_mult`` defaults to ``min(len(lengths) // (4 * batch_size), 50)``, at least 1.
    With ``generator`` (a ``torch.Generator``), or with neither ``generator`` nor ``seed``
    (torch's global RNG), the list equals transformers' for the same generator state.
    With ``seed`` (an integer >= 0, or a sequence of them, as ``numpy.random.default_rng``
    takes) torch is not needed and the order is not transformers'. Empty ``lengths`` give
    ``[]`` (transformers raises). Bad arguments raise ConfigError naming the field.
    See ``length_grouped_order`` for the same order as a numpy array.
    """
    return length_grouped_order(lengths, batch_size, mega_batch_mult, generator=generator, seed=seed).tolist()


def length_grouped_order(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    mega_batch_mult: int | None = None,
    generator: Any = None,
    seed: int | Sequence[int] | None = None,
) -> np.ndarray:
    """Return ``get_length_grouped_indices``' order as an int64 numpy array.

    For large datasets (10^8 lengths) this skips building a list of Python ints.
    """
    array = _check_lengths(lengths)
    _check_grouping(
        batch_size,
        mega_batch_mult,
        generator,
        seed,
        sequence_seed=True,
        global_rng="generator=None and seed=None draw from torch's global RNG, as transformers does",
    )
    return _group(array, int(batch_size), mega_batch_mult, generator, seed)


def _check_grouping(
    batch_size: object, mega_batch_mult: object, generator: Any, seed: object, *, sequence_seed: bool, global_rng: str
) -> None:
    """Check the grouping arguments; torch must import when neither generator nor seed is given."""
    check_int("batch_size", batch_size)
    if mega_batch_mult is not None:
        check_int("mega_batch_mult", mega_batch_mult)
    if generator is not None and seed is not None:
        raise ConfigError(
            "generator and seed are both given: pass a torch generator for transformers' exact order, "
            "or a seed for numpy's (no torch), not both"
        )
    if seed is not None:
        _check_seed("seed", seed, sequence_allowed=sequence_seed)
    elif generator is None:
        _import_torch(global_rng)


class LengthGroupedSampler:
    """Indices grouped by length, one pass per iteration, like transformers' LengthGroupedSampler.

    ``lengths`` (1-D non-negative integers, e.g. a token store's ``sequence_lengths``) are
    kept as given, without copying. Each ``iter()`` yields ``len(lengths)`` Python ints:

    - ``generator`` given: drawn from the generator, which advances with every pass, exactly as
      transformers' sampler does (equal output for equal generator state); ``set_epoch`` has no
      effect on the order.
    - ``seed`` given: pass ``e`` (``e`` set with ``set_epoch``, 0 by default) is
      ``get_length_grouped_indices(lengths, batch_size, mega_batch_mult, seed=(seed, e))``,
      i.e. numpy's ``default_rng((seed, e))``: reproducible, a fresh order each epoch, no torch,
      not transformers' order.
    - neither: torch's global RNG, as transformers does when it gets no generator.

    Constructed as ``LengthGroupedSampler(lengths, batch_size, ...)`` or, as transformers' is,
    ``LengthGroupedSampler(batch_size, dataset=None, lengths=None, model_input_name=None,
    generator=None)`` (lengths from the dataset's rows when not given; see ``hf_signature``).
    Usable as a ``torch.utils.data.DataLoader`` ``sampler``.
    """

    @overload
    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int,
        mega_batch_mult: int | None = None,
        generator: Any = None,
        seed: int | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        batch_size: int,
        dataset: Any = None,
        lengths: Sequence[int] | np.ndarray | None = None,
        model_input_name: str | None = None,
        generator: Any = None,
        *,
        mega_batch_mult: int | None = None,
        seed: int | None = None,
    ) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """tokenport's form ``(lengths, batch_size, ...)`` or transformers' ``(batch_size, dataset=None,
        lengths=None, model_input_name=None, generator=None)`` (see ``hf_signature``)."""
        form, arguments = bind_arguments("LengthGroupedSampler", args, kwargs, _single_ours, _single_theirs)
        lengths = lengths_argument("LengthGroupedSampler", form, arguments)
        batch_size, mega_batch_mult, generator, seed = (
            arguments[name] for name in ("batch_size", "mega_batch_mult", "generator", "seed")
        )
        self.lengths = _check_lengths(lengths)
        _check_grouping(
            batch_size,
            mega_batch_mult,
            generator,
            seed,
            sequence_seed=False,
            global_rng="LengthGroupedSampler without generator or seed draws from torch's global RNG",
        )
        self.batch_size = int(batch_size)
        self.mega_batch_mult = mega_batch_mult
        self.generator = generator
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that, with ``seed``, picks the order of the next pass."""
        _check_seed("epoch", epoch, sequence_allowed=False)
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        seed = None if self.seed is None else (int(self.seed), self.epoch)
        order = _group(self.lengths, self.batch_size, self.mega_batch_mult, self.generator, seed)
        return iter(order.tolist())


class DistributedLengthGroupedSampler:
    """This rank's share of one length-grouped order, like transformers' DistributedLengthGroupedSampler.

    Every rank computes the same global order for the epoch, pads it by repeating its head until
    it divides by ``num_replicas`` (or, with ``drop_last``, cuts its tail), and keeps positions
    ``rank, rank + num_replicas, ...``: ``len(self)`` indices per pass.

    ``rng="torch"`` (default): the order is drawn with a ``torch.Generator`` seeded with
    ``seed + epoch``, and equals transformers' sampler for the same arguments and epoch.
    ``rng="numpy"``: drawn with numpy's ``default_rng((seed, epoch))``; no torch needed, not
    transformers' order. ``mega_batch_mult`` defaults as in ``get_length_grouped_indices``
    (transformers' sampler always uses that default). Where transformers fails (fewer lengths
    than ``num_replicas - 1`` padding needs) the head is repeated as often as needed.

    Constructed as ``DistributedLengthGroupedSampler(lengths, batch_size, num_replicas, rank, ...)`` or,
    as transformers' is, ``(batch_size, dataset=None, num_replicas=None, rank=None, seed=0,
    drop_last=False, lengths=None, model_input_name=None)``: lengths from the dataset's rows when not
    given, replicas and rank from torch.distributed when None (see ``hf_signature``).
    """

    @overload
    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int,
        num_replicas: int,
        rank: int,
        seed: int = 0,
        drop_last: bool = False,
        mega_batch_mult: int | None = None,
        rng: str = "torch",
    ) -> None: ...

    @overload
    def __init__(
        self,
        batch_size: int,
        dataset: Any = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        lengths: Sequence[int] | np.ndarray | None = None,
        model_input_name: str | None = None,
        *,
        mega_batch_mult: int | None = None,
        rng: str = "torch",
    ) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """tokenport's form ``(lengths, batch_size, num_replicas, rank, ...)`` or transformers'
        ``(batch_size, dataset=None, num_replicas=None, rank=None, seed=0, drop_last=False, lengths=None,
        model_input_name=None)``; None replicas and rank are torch.distributed's (see ``hf_signature``)."""
        kind = "DistributedLengthGroupedSampler"
        form, arguments = bind_arguments(kind, args, kwargs, _distributed_ours, _distributed_theirs)
        lengths = lengths_argument(kind, form, arguments)
        num_replicas, rank = (
            replicas_from_torch(name) if arguments[name] is None else arguments[name]
            for name in ("num_replicas", "rank")
        )
        batch_size, seed, drop_last, mega_batch_mult, rng = (
            arguments[name] for name in ("batch_size", "seed", "drop_last", "mega_batch_mult", "rng")
        )
        self.lengths = _check_lengths(lengths)
        check_int("batch_size", batch_size)
        check_int("num_replicas", num_replicas, 1, INT64_MAX)
        check_int("rank", rank, 0, int(num_replicas) - 1)
        if mega_batch_mult is not None:
            check_int("mega_batch_mult", mega_batch_mult)
        _check_seed("seed", seed, sequence_allowed=False)
        if not isinstance(rng, str) or rng not in _RNGS:
            raise ConfigError(f"rng={rng!r} is invalid: pass 'torch' (transformers' order) or 'numpy' (no torch)")
        if rng == "torch":
            _import_torch("rng='torch' seeds a torch.Generator", "pass rng='numpy' to draw with numpy instead")
        self.batch_size = int(batch_size)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.seed = int(seed)
        self.drop_last = check_bool("drop_last", drop_last)
        self.mega_batch_mult = mega_batch_mult
        self.rng = rng
        self.epoch = 0
        n = len(self.lengths)
        self.num_samples = n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch; the next pass's order is drawn from ``seed`` and ``epoch``."""
        _check_seed("epoch", epoch, sequence_allowed=False)
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if self.rng == "torch":
            torch = _import_torch("rng='torch'")
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = _group(self.lengths, self.batch_size, self.mega_batch_mult, generator, None)
        else:
            order = _group(self.lengths, self.batch_size, self.mega_batch_mult, None, (self.seed, self.epoch))
        if not len(order):
            return iter([])
        # this rank's entries of the order padded to total_size by repeating its head (or cut to it),
        # taken without building the padded order, which num_replicas >> len(lengths) makes huge
        positions = self.rank + self.num_replicas * np.arange(self.num_samples, dtype=np.int64)
        return iter(order[positions % len(order)].tolist())


# -- the two constructor forms (signatures only, read by ``hf_signature.bind_arguments``) ---------------


def _single_ours(
    lengths: Any, batch_size: Any, mega_batch_mult: Any = None, generator: Any = None, seed: Any = None
) -> None:
    """LengthGroupedSampler, tokenport's form."""


def _single_theirs(
    batch_size: Any,
    dataset: Any = None,
    lengths: Any = None,
    model_input_name: Any = None,
    generator: Any = None,
    *,
    mega_batch_mult: Any = None,
    seed: Any = None,
) -> None:
    """LengthGroupedSampler, transformers' form plus tokenport's keyword-only extras."""


def _distributed_ours(
    lengths: Any,
    batch_size: Any,
    num_replicas: Any,
    rank: Any,
    seed: Any = 0,
    drop_last: Any = False,
    mega_batch_mult: Any = None,
    rng: Any = "torch",
) -> None:
    """DistributedLengthGroupedSampler, tokenport's form."""


def _distributed_theirs(
    batch_size: Any,
    dataset: Any = None,
    num_replicas: Any = None,
    rank: Any = None,
    seed: Any = 0,
    drop_last: Any = False,
    lengths: Any = None,
    model_input_name: Any = None,
    *,
    mega_batch_mult: Any = None,
    rng: Any = "torch",
) -> None:
    """DistributedLengthGroupedSampler, transformers' form plus tokenport's keyword-only extras."""


# -- the core ---------------------------------------------------------------------------------------


def _group(lengths: np.ndarray, batch_size: int, mega_batch_mult: int | None, generator: Any, seed: Any) -> np.ndarray:
    """The length-grouped order of checked arguments (see the module docstring)."""
    n = len(lengths)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if seed is not None:
        permutation = np.random.default_rng(seed).permutation(n)
    else:
        _import_torch("drawing the permutation")
        permutation = randperm(n, generator)
    return grouped_order(lengths, batch_size, mega_batch_mult, permutation)


def grouped_order(lengths: np.ndarray, batch_size: int, mega_batch_mult: int | None, permutation: Any) -> np.ndarray:
    """The length-grouped order of checked non-empty ``lengths`` from the permutation drawn for them."""
    n = len(lengths)
    if mega_batch_mult is None:
        mega_batch_mult = max(1, min(n // (batch_size * 4), 50))
    size = min(int(mega_batch_mult) * batch_size, n)  # a megabatch past the end is the whole order: the same
    order = np.empty(n, dtype=np.int64)
    _sort_megabatches(_narrowest(lengths), permutation, size, order)
    # The longest element of each megabatch is its first; the first megabatch holding the
    # overall longest (np.argmax, like torch.argmax, takes the first maximum) gives it to the front.
    starts = np.arange(0, n, size)
    longest = int(starts[int(np.argmax(lengths[order[starts]]))])
    order[0], order[longest] = order[longest], order[0]
    return order


def _narrowest(lengths: np.ndarray) -> np.ndarray:
    """``lengths`` in the narrowest unsigned type that holds them: the sort's random reads then
    touch less memory (a 10^7 int64 -> uint16 copy costs ~10 ms and saves ~70)."""
    top = int(lengths.max())
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return lengths.astype(dtype) if lengths.dtype.itemsize > np.dtype(dtype).itemsize else lengths
    return lengths


@numba.njit(cache=True)
def _sort_megabatches(lengths: np.ndarray, permutation: np.ndarray, size: int, order: np.ndarray) -> None:
    """Write ``permutation`` to ``order`` with each megabatch of ``size`` sorted longest first.

    Each megabatch is sorted by ``top - length`` ascending with a least-significant-digit radix
    sort (8-bit digits, only as many as its span of lengths needs); being stable, it keeps ties
    in permuted order, as ``sorted(megabatch, key=..., reverse=True)`` does. The lengths are
    gathered in one prefetched pass first: random reads overlap better without the sort between.
    """
    n = permutation.shape[0]
    values = np.empty(n, dtype=lengths.dtype)
    for k in range(min(_AHEAD, n)):
        prefetch(lengths, permutation[k])  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
    for k in range(n):
        if k + _AHEAD < n:
            prefetch(lengths, permutation[k + _AHEAD])  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
        values[k] = lengths[permutation[k]]
    keys = np.empty((2, size), dtype=np.uint64)
    ids = np.empty((2, size), dtype=np.int64)
    counts = np.empty(256, dtype=np.int64)
    for start in range(0, n, size):
        count = min(n, start + size) - start
        top = values[start]
        low = top
        for k in range(start, start + count):
            top = max(top, values[k])
            low = min(low, values[k])
        for k in range(count):
            keys[0, k] = np.uint64(top - values[start + k])
            ids[0, k] = permutation[start + k]
        span = np.uint64(top - low)
        source = 0
        shift = np.uint64(0)
        while span > 0:
            counts[:] = 0
            for k in range(count):
                counts[np.int64((keys[source, k] >> shift) & np.uint64(255))] += 1
            total = 0
            for digit in range(256):
                total, counts[digit] = total + counts[digit], total
            target = 1 - source
            for k in range(count):
                key = keys[source, k]
                digit = np.int64((key >> shift) & np.uint64(255))
                slot = counts[digit]
                counts[digit] = slot + 1
                keys[target, slot] = key
                ids[target, slot] = ids[source, k]
            source = target
            span >>= np.uint64(8)
            shift += np.uint64(8)
        order[start : start + count] = ids[source, :count]


# -- checks -----------------------------------------------------------------------------------------


def _check_lengths(lengths: Any) -> np.ndarray:
    """Return the lengths as a 1-D non-negative integer array (no copy when already one), or raise."""
    array = _list_as_int64(lengths) if type(lengths) is list else None
    if array is None:
        array = np.asarray(lengths)
    if array.ndim == 1 and array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ConfigError(
            f"lengths must be a 1-D array of integer token counts, got shape {array.shape} dtype {array.dtype}: "
            "pass e.g. IndexedDataset.sequence_lengths"
        )
    if array.dtype.kind == "i" and int(array.min()) < 0:
        raise ConfigError(f"lengths holds a negative length ({int(array.min())}): lengths are token counts, >= 0")
    return array


def _list_as_int64(lengths: list[Any]) -> np.ndarray | None:
    """A list of Python ints as int64 through array.array, which reads them about twice as fast as
    np.asarray (no dtype discovery pass) and refuses floats; None when it cannot (other items, too
    large, or bools, which np.asarray's path refuses), so that path reports what is wrong."""
    if not lengths or type(lengths[0]) is not int:
        return None
    try:
        return np.frombuffer(pyarray.array("q", lengths), dtype=np.int64)
    except (TypeError, OverflowError):
        return None


def _check_seed(name: str, value: object, sequence_allowed: bool = True) -> None:
    """Raise ConfigError unless ``value`` is an integer >= 0 (or, if allowed, a non-empty sequence of them)."""

    def ok(item: object) -> bool:
        return is_int(item) and bool(item >= 0)

    if ok(value):
        return
    if sequence_allowed and isinstance(value, (tuple, list)) and len(value) > 0 and all(ok(item) for item in value):
        return
    what = "an integer >= 0" + (" or a sequence of them" if sequence_allowed else "")
    raise ConfigError(f"{name}={value!r} is invalid: pass {what}")


def _import_torch(why: str, instead: str = "pass seed= to draw with numpy instead") -> Any:
    """Return the torch module, or raise ConfigError saying why it was needed and how to do without."""
    try:
        import torch
    except ImportError:
        raise ConfigError(f"torch is not installed, and {why}: install torch, or {instead}") from None
    return torch

"""How a loader worker hands a batch to the training loop: one reused shared-memory slot per batch.

torch passes a tensor's shared memory from a worker to the loop through a file descriptor: a socket
connection to the worker, two authentication challenges and a new mapping on each side, per tensor.
A ``SharedBatch`` puts a batch's tensors in one buffer; here that buffer is a slot of the worker's
``SlotPool``, made once and mapped once by the loop (its descriptor crosses with the first batch
written to it), then reused: the loop copies each batch out of its slot as it arrives and marks the
slot free (its first byte), and the worker writes a later batch only into a slot marked free. A
batch the caller keeps is its own memory, never overwritten. When every slot is busy (the loop
holds many batches not yet unpickled), the worker sends a fresh buffer, as it did before slots.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

ALIGN = 64  # each field starts at a multiple of this many bytes; the first ALIGN bytes are the slot's flag
SLOTS = 8  # slots per worker process: more than the batches torch keeps in flight per worker (prefetch_factor)
_FREE, _BUSY = 0, 1

# (worker pid, slot) -> (the slot's buffer, a numpy view of it), in the loop's process: mapped once per slot
_MAPPED: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}
Layout = tuple[tuple[str, Any, tuple[int, ...], int, int], ...]  # (name, torch dtype, shape, byte offset, bytes)


class SharedBatch:
    """A batch's tensors in one byte buffer; ``unpack()`` gives the tensors (views of the buffer)."""

    def __init__(self, buffer: Any, layout: Layout) -> None:
        self.buffer = buffer
        self.layout = layout

    @classmethod
    def pack(cls, tensors: dict[str, Any]) -> Parcel:
        """``tensors`` copied into a free slot of this process's pool (a fresh shared buffer when none is
        free), as a Parcel to send to the loop's process."""
        import torch

        layout = []
        size = ALIGN
        for name, tensor in tensors.items():
            nbytes = tensor.numel() * tensor.element_size()
            layout.append((name, tensor.dtype, tuple(tensor.shape), size, nbytes))
            size += -(-nbytes // ALIGN) * ALIGN
        taken = pool().take(size)
        if taken is None:  # every slot busy: a fresh buffer
            fresh = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
            key, buffer, first = None, fresh, True
        else:
            key, buffer, first = taken
        for view, tensor in zip(SharedBatch(buffer, tuple(layout)).unpack().values(), tensors.values()):
            view.copy_(tensor)
        return Parcel(key, buffer if first else None, tuple(layout), size)

    def unpack(self) -> dict[str, Any]:
        """The tensors, as views of the buffer."""
        buffer = self.buffer
        return {name: buffer[at : at + size].view(dtype).view(shape) for name, dtype, shape, at, size in self.layout}

    def pin_memory(self) -> SharedBatch:
        """The batch with its buffer in pinned memory (what DataLoader's ``pin_memory=True`` calls)."""
        return SharedBatch(self.buffer.pin_memory(), self.layout)


class Parcel:
    """A batch on its way from a worker: its slot (None: a fresh buffer), the slot's buffer when the loop
    has not mapped it yet, the layout and the bytes used. Unpickled in the loop's process as a SharedBatch."""

    def __init__(self, key: tuple[int, int] | None, buffer: Any, layout: Layout, size: int) -> None:
        self.key, self.buffer, self.layout, self.size = key, buffer, layout, size

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return receive, (self.key, self.buffer, self.layout, self.size)


def receive(key: tuple[int, int] | None, buffer: Any, layout: Layout, size: int) -> SharedBatch:
    """The loop's side of a Parcel: a fresh buffer as it is; a slot's bytes copied out, then the slot freed."""
    if key is None:
        return SharedBatch(buffer, layout)
    if buffer is not None:  # the first batch through this slot: map it for good
        _MAPPED[key] = (buffer, buffer.numpy())
    slot, flag = _MAPPED[key]
    batch = SharedBatch(slot[:size].clone(), layout)
    flag[0] = _FREE  # after the copy: the worker may write the slot again
    return batch


def forget(pids: set[int]) -> None:
    """Unmap the slots of worker processes ``pids`` (they have exited: no batch of theirs is still to come)."""
    for key in [key for key in _MAPPED if key[0] in pids]:
        del _MAPPED[key]


class SlotPool:
    """One worker process's slots: shared buffers, each with a flag byte the loop clears once it has copied."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.slots: list[tuple[Any, np.ndarray]] = []  # (buffer, numpy view of it) per slot

    def take(self, size: int) -> tuple[tuple[int, int], Any, bool] | None:
        """(key, buffer, whether the loop has yet to map it) of a free slot of at least ``size`` bytes,
        marked busy; a new slot while there are fewer than SLOTS; None when all are busy."""
        free = [k for k, (buffer, flag) in enumerate(self.slots) if flag[0] == _FREE]
        fits = [k for k in free if len(self.slots[k][0]) >= size]
        first = not fits
        if fits:
            index = fits[0]
        elif len(self.slots) < SLOTS:
            index = len(self.slots)
            self.slots.append(_new_slot(size))
        elif free:  # a free slot too small for this batch: replaced by a bigger one (the loop maps it anew)
            index = free[0]
            self.slots[index] = _new_slot(size)
        else:
            return None
        buffer, flag = self.slots[index]
        flag[0] = _BUSY
        return (self.pid, index), buffer, first


def _new_slot(size: int) -> tuple[Any, np.ndarray]:
    """A shared buffer of ``size`` bytes (rounded up to a page) and a numpy view of it."""
    import torch

    buffer = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(-(-size // 4096) * 4096))
    return buffer, buffer.numpy()


_POOL: SlotPool | None = None


def pool() -> SlotPool:
    """This process's SlotPool (a forked child starts its own)."""
    global _POOL
    if _POOL is None or _POOL.pid != os.getpid():
        _POOL = SlotPool()
    return _POOL

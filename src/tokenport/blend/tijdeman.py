"""Tijdeman's blend: earliest deadline first, every dataset within ``1 - 1/(2n - 2)`` of its share.

Let n >= 2 active datasets have integer weights a_i, A = sum(a_i), w_i = a_i / A, and
M = 2n - 2, sigma = 1 - 1/M. Time t = 1, 2, ... counts the samples taken (sample t sits at
out[t - 1]). Job k of dataset i (its k-th sample) may sit at time t only if
    C_i(t) = k <= t * w_i + sigma    ->  release  r_k = ceil((k - sigma) / w_i)
                                                   = ceil(((k - 1) M + 1) A / (a_i M)),
and must sit no later than the first t with t * w_i - sigma > k - 1, or C_i(t) would fall
more than sigma below t * w_i      ->  deadline d_k = floor((k - 1 + sigma) / w_i) + 1
                                                   = floor((k M - 1) A / (a_i M)) + 1.
So |C_i(t) - t * w_i| <= sigma at every t exactly when every job sits in its window
[r_k, d_k]. Tijdeman proved that with this sigma the windows admit such an assignment (Hall's
condition holds on every interval of time); for unit jobs with integer windows, earliest
deadline first among the released jobs finds one whenever one exists, whatever the order
among equal deadlines (here: lowest dataset first). A dataset's deadlines strictly increase
(by at least A / a_i >= 1 per job), so only its next job competes. A job is always released:
by time t, sum_i floor(t * w_i + sigma) > t - n / M >= t - 1 jobs are, and t - 1 are taken.

The arithmetic is exact integer arithmetic, so no rounding can move a window and every machine
makes the same choices. The numerators R_k = ((k-1) M + 1) A and E_k = R_k + (M - 2) A grow by
M A per job; R_k is kept as quotient and remainder of a_i M, and E_k's are derived from them.
Every number formed stays below 2 A M < 2**63 (``_LIMIT``). Float weights are first rounded to
integers over about 2**61 / M (``integer_weights``); the schedule is exact for those.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..errors import ConfigError

_LIMIT = 2**62  # A * M must stay below this
_SCAN_MAX = 96  # up to this many datasets a linear scan beats the heap
_INT64_MAX = np.iinfo(np.int64).max


def integer_weights(normalized: np.ndarray) -> tuple[np.ndarray, int]:
    """Return integer weights ``a_i = rint(w_i * Q)`` (at least 1) of positive float weights, and their sum.

    ``Q = 2**(61 - ceil(log2 M))``, so ``Q * M <= 2**61`` and the sum ``A`` (within ``n / 2``
    of ``Q``, as each rounding moves at most 1/2) keeps ``A * M`` under ``_LIMIT``. The schedule
    is exact for ``a_i / A``; against ``w`` its deviation can exceed the bound by
    ``t * max_i |a_i / A - w_i|``: typically about ``t / Q`` (1e-5 at 10^9 samples of 10^4
    datasets, where ``Q = 2**46``), at worst ``t * (n + 1) / (2 Q)``. Equal weights give equal
    integers, hence the round robin.
    """
    multiplier = 2 * len(normalized) - 2
    scale = 2.0 ** (61 - math.ceil(math.log2(multiplier)))
    return exact_weights(np.maximum(np.rint(normalized * scale), 1.0).astype(np.int64))


def exact_weights(weights: np.ndarray) -> tuple[np.ndarray, int]:
    """Return positive integer weights divided by their gcd, and their sum; ConfigError if too large."""
    weights = weights // np.gcd.reduce(weights)
    total = int(weights.sum())
    if total * (2 * len(weights) - 2) >= _LIMIT:
        raise ConfigError(
            f"weights (sample counts, size=None) sum to {total:,} over {len(weights)} datasets, past the "
            "exact schedule's reach (sum * (2n - 2) < 2**62): blend by weights with a size instead"
        )
    return weights, total


def fill(weights: np.ndarray, total: int, ids: np.ndarray, out: np.ndarray, samples: np.ndarray) -> None:
    """Fill ``out`` (and ``samples`` unless empty) with the schedule of integer ``weights`` over datasets ``ids``.

    Every kernel below makes the same choices; they differ in speed only. Equal weights give
    every dataset the windows ``[(k - 1) n + 1, k n]``, so earliest deadline first with ties to
    the lowest index is the round robin, filled directly. Two datasets keep their state in
    registers. Up to ``_SCAN_MAX`` datasets a step scans them all; beyond, a heap of the
    released datasets and a calendar of the others keep a step at O(log n). Both need a
    deadline and a dataset packed in one int64; when they do not fit, pairs are compared.
    """
    ids = ids.astype(np.int64)
    n = len(weights)
    bits = max(1, (n - 1).bit_length())
    cap = (2 * n - 3) * (len(out) + 1) + 1  # no released deadline exceeds (M - 1) * t + 1
    packs = (cap + 1) << bits <= _INT64_MAX
    if (weights == weights[0]).all():
        _round_robin_kernel(ids, out, samples)
    elif n == 2:
        _two_kernel(weights, total, ids, out, samples)
    elif n <= _SCAN_MAX and packs:
        _scan_kernel(weights, total, ids, bits, cap, out, samples)
    elif packs:
        _packed_heap_kernel(weights, total, ids, bits, cap, out, samples)
    else:
        _heap_kernel(weights, total, ids, out, samples)


@numba.njit(cache=True)
def _round_robin_kernel(ids, out, samples):
    """Fill the round robin over ``ids``: sample ``t`` is sample ``t // n`` of dataset ``ids[t % n]``."""
    n = ids.shape[0]
    write_samples = samples.shape[0] > 0
    dataset = 0
    rounds = 0
    for t in range(out.shape[0]):
        out[t] = ids[dataset]
        if write_samples:
            samples[t] = rounds
        dataset += 1
        if dataset == n:
            dataset = 0
            rounds += 1


# Per-dataset state, one row of 8 int64 (one cache line) per dataset:
_Q, _R, _DIVISOR, _STEP_Q, _STEP_R, _OFFSET_Q, _OFFSET_R, _COUNT = range(8)


@numba.njit(cache=True)
def _initial_state(weights, total):
    """Return the state rows at job 1: R_1 = A as quotient and remainder of a_i M, and the constants."""
    n = weights.shape[0]
    m = 2 * n - 2
    state = np.empty((n, 8), np.int64)
    for i in range(n):
        divisor = weights[i] * m
        state[i, _Q] = total // divisor
        state[i, _R] = total % divisor
        state[i, _DIVISOR] = divisor
        state[i, _STEP_Q] = total // weights[i]  # M A = (A // a_i) * a_i M + (A % a_i) * M
        state[i, _STEP_R] = (total % weights[i]) * m
        state[i, _OFFSET_Q] = ((m - 2) * total) // divisor  # E_k - R_k = (M - 2) A
        state[i, _OFFSET_R] = ((m - 2) * total) % divisor
        state[i, _COUNT] = 0
    return state


@numba.njit(cache=True, inline="always")
def _windows(state, i):
    """Return the release time and deadline of the next job of dataset ``i``."""
    quotient = state[i, _Q]
    remainder = state[i, _R]
    release = quotient + (remainder > 0)
    deadline = quotient + state[i, _OFFSET_Q] + (remainder + state[i, _OFFSET_R] >= state[i, _DIVISOR]) + 1
    return release, deadline


@numba.njit(cache=True, inline="always")
def _record(state, i, t, ids, out, samples, write_samples):
    """Record dataset ``i`` as sample ``t`` (1-based), with its sample number when asked."""
    out[t - 1] = ids[i]
    count = state[i, _COUNT]
    if write_samples:
        samples[t - 1] = count
    state[i, _COUNT] = count + 1


@numba.njit(cache=True, inline="always")
def _advance(state, i):
    """Move dataset ``i`` on to its next job; return that job's release time and deadline.

    R_{k+1} = R_k + M A: add the step's quotient and remainder, carrying once (both
    remainders are below a_i M). The windows come from the new values in registers.
    """
    divisor = state[i, _DIVISOR]
    remainder = state[i, _R] + state[i, _STEP_R]
    carry = remainder >= divisor
    remainder -= carry * divisor
    quotient = state[i, _Q] + state[i, _STEP_Q] + carry
    state[i, _R] = remainder
    state[i, _Q] = quotient
    release = quotient + (remainder > 0)
    deadline = quotient + state[i, _OFFSET_Q] + (remainder + state[i, _OFFSET_R] >= divisor) + 1
    return release, deadline


@numba.njit(cache=True)
def _two_kernel(weights, total, ids, out, samples):
    """Earliest deadline first over two datasets, their state in local variables (no memory round trips)."""
    state = _initial_state(weights, total)
    q0, r0, divisor0, step_q0 = state[0, _Q], state[0, _R], state[0, _DIVISOR], state[0, _STEP_Q]
    step_r0, offset_q0, offset_r0, count0 = state[0, _STEP_R], state[0, _OFFSET_Q], state[0, _OFFSET_R], 0
    q1, r1, divisor1, step_q1 = state[1, _Q], state[1, _R], state[1, _DIVISOR], state[1, _STEP_Q]
    step_r1, offset_q1, offset_r1, count1 = state[1, _STEP_R], state[1, _OFFSET_Q], state[1, _OFFSET_R], 0
    write_samples = samples.shape[0] > 0
    for t in range(1, out.shape[0] + 1):
        release0 = q0 + (r0 > 0)
        release1 = q1 + (r1 > 0)
        deadline0 = q0 + offset_q0 + (r0 + offset_r0 >= divisor0)  # deadlines less one
        deadline1 = q1 + offset_q1 + (r1 + offset_r1 >= divisor1)
        # dataset 1 when 0 is not released, or 1 is, with a strictly earlier deadline
        if (release0 > t) | ((release1 <= t) & (deadline1 < deadline0)):
            out[t - 1] = ids[1]
            if write_samples:
                samples[t - 1] = count1
            count1 += 1
            r1 += step_r1
            carry = r1 >= divisor1
            r1 -= carry * divisor1
            q1 += step_q1 + carry
        else:
            out[t - 1] = ids[0]
            if write_samples:
                samples[t - 1] = count0
            count0 += 1
            r0 += step_r0
            carry = r0 >= divisor0
            r0 -= carry * divisor0
            q0 += step_q0 + carry


@numba.njit(cache=True)
def _scan_kernel(weights, total, ids, bits, cap, out, samples):
    """Earliest deadline first by a branch-free scan of all datasets each step.

    A dataset's key is its deadline (capped at ``cap``, which no released deadline exceeds)
    shifted left by ``bits`` plus its index, so the smallest key among the released datasets
    is the earliest deadline, ties to the lowest index; unreleased keys read as int64 max.
    The dataset taken last keeps its new key in registers for one step, its array entry
    masked, so the scan never waits on the store just made.
    """
    n = weights.shape[0]
    state = _initial_state(weights, total)
    release = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    for i in range(n):
        release[i], deadline = _windows(state, i)
        key[i] = (min(deadline, cap) << bits) | i
    low = (np.int64(1) << bits) - 1
    write_samples = samples.shape[0] > 0
    pending = 0  # the dataset taken last; at the start its entry is current anyway
    pending_release = release[0]
    pending_key = key[0]
    for t in range(1, out.shape[0] + 1):
        best = pending_key | (-np.int64(pending_release > t) & _INT64_MAX)
        for j in range(n):
            best = min(best, key[j] | (-np.int64((release[j] > t) | (j == pending)) & _INT64_MAX))
        i = best & low
        key[pending] = pending_key
        release[pending] = pending_release
        _record(state, i, t, ids, out, samples, write_samples)
        pending_release, deadline = _advance(state, i)
        pending_key = (min(deadline, cap) << bits) | i
        pending = i


@numba.njit(cache=True, inline="always")
def _before(key_a, id_a, key_b, id_b):
    """Heap order: the smaller key first, ties to the lower dataset (branch-free)."""
    return (key_a < key_b) | ((key_a == key_b) & (id_a < id_b))


@numba.njit(cache=True, inline="always")
def _sift_down(keys, ids, size, position):
    """Move the entry at ``position`` down a binary min-heap of ``size`` entries to its place."""
    key = keys[position]
    item = ids[position]
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        if child + 1 < size:
            child += _before(keys[child + 1], ids[child + 1], keys[child], ids[child])
        if not _before(keys[child], ids[child], key, item):
            break
        keys[position] = keys[child]
        ids[position] = ids[child]
        position = child
    keys[position] = key
    ids[position] = item


@numba.njit(cache=True, inline="always")
def _push(keys, ids, size, key, item):
    """Add ``(key, item)`` to a binary min-heap of ``size`` entries; return the new size."""
    position = size
    while position > 0:
        parent = (position - 1) >> 1
        if not _before(key, item, keys[parent], ids[parent]):
            break
        keys[position] = keys[parent]
        ids[position] = ids[parent]
        position = parent
    keys[position] = key
    ids[position] = item
    return size + 1


@numba.njit(cache=True, inline="always")
def _pop(keys, ids, size):
    """Remove the top of a binary min-heap of ``size`` entries; return the new size."""
    size -= 1
    keys[0] = keys[size]
    ids[0] = ids[size]
    _sift_down(keys, ids, size, 0)
    return size


@numba.njit(cache=True, inline="always")
def _make_ready(keys, ids, size, vacant, key, item):
    """Put ``(key, item)`` in the ready heap, into its top if that is vacant; return the new size."""
    if vacant:
        keys[0] = key
        ids[0] = item
        _sift_down(keys, ids, size, 0)
        return size
    return _push(keys, ids, size, key, item)


@numba.njit(cache=True, inline="always")
def _wait(head, following, far_keys, far_ids, far, i, release, t, horizon):
    """File dataset ``i``, released at ``release > t + 1``, to wait; return the size of the far heap.

    Releases within ``len(head)`` steps go to a calendar slot (a linked list through
    ``following``): every dataset in slot ``release % len(head)`` is due exactly then. Later
    ones go to the far heap, and releases after the last step are dropped.
    """
    if release > horizon:
        return far
    if release - (t + 1) < head.shape[0]:
        slot = release & (head.shape[0] - 1)
        following[i] = head[slot]
        head[slot] = i
        return far
    return _push(far_keys, far_ids, far, release, i)


@numba.njit(cache=True)
def _heap_kernel(weights, total, ids, out, samples):
    """Earliest deadline first with the released datasets in a binary heap of (deadline, dataset) pairs.

    The general path, for blends whose deadline and dataset do not pack in an int64. Each step takes
    the top of the ready heap; the datasets due at the next step (the one just taken, if released
    again at once, and those in the calendar slot or far heap) replace the top and are pushed, so a
    step costs about one sift of the ready heap.
    """
    n = weights.shape[0]
    horizon = out.shape[0]
    state = _initial_state(weights, total)
    slots = 1
    while slots < 16 * n and slots < horizon + 2:
        slots *= 2
    head = np.full(slots, -1, np.int64)
    following = np.empty(n, np.int64)
    ready_keys = np.empty(n, np.int64)
    ready_ids = np.empty(n, np.int64)
    far_keys = np.empty(n, np.int64)
    far_ids = np.empty(n, np.int64)
    ready = 0
    far = 0
    for i in range(n):
        release, deadline = _windows(state, i)
        if release <= 1:
            ready = _push(ready_keys, ready_ids, ready, deadline, i)
        else:
            far = _wait(head, following, far_keys, far_ids, far, i, release, 0, horizon)
    write_samples = samples.shape[0] > 0
    for t in range(1, horizon + 1):
        i = ready_ids[0]
        _record(state, i, t, ids, out, samples, write_samples)
        release, deadline = _advance(state, i)
        vacant = True  # the top still holds i
        if release <= t + 1:
            ready = _make_ready(ready_keys, ready_ids, ready, vacant, deadline, i)
            vacant = False
        else:
            far = _wait(head, following, far_keys, far_ids, far, i, release, t, horizon)
        slot = (t + 1) & (slots - 1)
        j = head[slot]
        head[slot] = -1
        while j >= 0:
            ready = _make_ready(ready_keys, ready_ids, ready, vacant, _windows(state, j)[1], j)
            vacant = False
            j = following[j]
        while far > 0 and far_keys[0] <= t + 1:
            j = far_ids[0]
            far = _pop(far_keys, far_ids, far)
            ready = _make_ready(ready_keys, ready_ids, ready, vacant, _windows(state, j)[1], j)
            vacant = False
        if vacant:
            ready = _pop(ready_keys, ready_ids, ready)


# The packed heap: a 4-ary min-heap of int64 keys (deadline << bits | dataset), padded with
# int64 max past its end so that a node's four children can always be read.


@numba.njit(cache=True, inline="always")
def _sift_down_packed(keys, size, position):
    """Move the key at ``position`` of a padded 4-ary min-heap of ``size`` keys down to its place."""
    key = keys[position]
    while True:
        child = 4 * position + 1
        if child >= size:
            break
        k0, k1, k2, k3 = keys[child], keys[child + 1], keys[child + 2], keys[child + 3]
        right01 = k1 < k0
        low01 = k1 if right01 else k0
        right23 = k3 < k2
        low23 = k3 if right23 else k2
        upper = low23 < low01
        smallest = low23 if upper else low01
        if smallest >= key:
            break
        child += (2 + right23) if upper else right01
        keys[position] = smallest
        position = child
    keys[position] = key


@numba.njit(cache=True, inline="always")
def _push_packed(keys, size, key):
    """Add ``key`` to a padded 4-ary min-heap of ``size`` keys; return the new size."""
    position = size
    while position > 0:
        parent = (position - 1) >> 2
        if key >= keys[parent]:
            break
        keys[position] = keys[parent]
        position = parent
    keys[position] = key
    return size + 1


@numba.njit(cache=True, inline="always")
def _ready_packed(keys, size, vacant, key):
    """Put ``key`` in the ready heap, into its top if that is vacant; return the new size."""
    if vacant:
        keys[0] = key
        _sift_down_packed(keys, size, 0)
        return size
    return _push_packed(keys, size, key)


@numba.njit(cache=True)
def _packed_heap_kernel(weights, total, ids, bits, cap, out, samples):
    """``_heap_kernel`` with the ready heap 4-ary over packed keys (as in ``_scan_kernel``): faster."""
    n = weights.shape[0]
    horizon = out.shape[0]
    state = _initial_state(weights, total)
    slots = 1
    while slots < 16 * n and slots < horizon + 2:
        slots *= 2
    head = np.full(slots, -1, np.int64)
    following = np.empty(n, np.int64)
    waiting_key = np.empty(n, np.int64)  # the ready key of a waiting dataset
    ready_keys = np.full(4 * n + 4, _INT64_MAX, np.int64)
    far_keys = np.empty(n, np.int64)
    far_ids = np.empty(n, np.int64)
    ready = 0
    far = 0
    low = (np.int64(1) << bits) - 1
    for i in range(n):
        release, deadline = _windows(state, i)
        waiting_key[i] = (min(deadline, cap) << bits) | i
        if release <= 1:
            ready = _push_packed(ready_keys, ready, waiting_key[i])
        else:
            far = _wait(head, following, far_keys, far_ids, far, i, release, 0, horizon)
    write_samples = samples.shape[0] > 0
    for t in range(1, horizon + 1):
        i = ready_keys[0] & low
        _record(state, i, t, ids, out, samples, write_samples)
        release, deadline = _advance(state, i)
        key = (min(deadline, cap) << bits) | i
        vacant = True  # the top still holds i
        if release <= t + 1:
            ready = _ready_packed(ready_keys, ready, vacant, key)
            vacant = False
        else:
            waiting_key[i] = key
            far = _wait(head, following, far_keys, far_ids, far, i, release, t, horizon)
        slot = (t + 1) & (slots - 1)
        j = head[slot]
        head[slot] = -1
        while j >= 0:
            ready = _ready_packed(ready_keys, ready, vacant, waiting_key[j])
            vacant = False
            j = following[j]
        while far > 0 and far_keys[0] <= t + 1:
            j = far_ids[0]
            far = _pop(far_keys, far_ids, far)
            ready = _ready_packed(ready_keys, ready, vacant, waiting_key[j])
            vacant = False
        if vacant:
            ready -= 1
            ready_keys[0] = ready_keys[ready]
            ready_keys[ready] = _INT64_MAX
            _sift_down_packed(ready_keys, ready, 0)

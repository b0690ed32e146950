"""Forked workers inherit the parent's objects frozen (their collector never walks them), the parent not."""

from __future__ import annotations

import gc
import multiprocessing

from tokenport._fork import keep_forked_heaps_shared


def _frozen_in_child(queue: multiprocessing.Queue) -> None:
    queue.put(gc.get_freeze_count())


def test_a_forked_child_starts_with_the_inherited_objects_frozen_and_the_parent_keeps_none():
    keep_forked_heaps_shared()
    keep_forked_heaps_shared()  # idempotent: one pair of hooks
    gc.unfreeze()
    before = len(gc.get_objects())
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_frozen_in_child, args=(queue,))
    child.start()
    frozen = queue.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert frozen >= before // 2  # the child's collector will not touch (and copy) what it inherited
    assert gc.get_freeze_count() == 0  # the parent took its objects back at once

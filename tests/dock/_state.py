"""A dock's whole state as plain data, for tests that compare it before and after a call."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from tokenport.dock import Dock


def dock_state(dock: Dock) -> dict:
    """Everything a checkpoint keeps (schema, policy, version, expiry, every array of every partition),
    plus the leases out and the per-consumer counters of ``stats()`` that a checkpoint does not keep."""
    with tempfile.TemporaryDirectory() as directory:
        dock.save(os.path.join(directory, "ckpt"))
        folder = os.path.join(directory, "ckpt")
        with open(os.path.join(folder, "dock.json"), encoding="utf-8") as f:
            description = json.load(f)
        arrays = {}
        for entry in description["partitions"]:
            with np.load(os.path.join(folder, entry["file"])) as saved:
                arrays[entry["name"]] = {key: saved[key].tolist() for key in sorted(saved.files)}
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    return {"description": description, "arrays": arrays, "stats": stats}

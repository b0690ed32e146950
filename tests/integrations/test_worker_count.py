"""integrations/ tells storage how many loader workers share a node cache: a worker's ReadAhead sets
it from torch's worker info before its first plan (storage itself never reads torch)."""

from __future__ import annotations

from types import SimpleNamespace

import torch.utils.data

from tokenport.integrations._readahead import ReadAhead
from tokenport.storage import set_loader_workers
from tokenport.storage.fetchers import loader_workers


class NoReads:
    """A dataset whose batches read no remote store."""

    def read_plan(self, ids):
        return []


def test_a_workers_read_ahead_sets_the_loader_worker_count(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: SimpleNamespace(num_workers=3, id=0))
    batches = [[i, i + 1] for i in range(0, 40, 2)]
    ahead = ReadAhead(batches, NoReads())
    try:
        ahead.before(batches[0])
        assert loader_workers() == 3 and list(ahead._mine)[0] == batches[3]
    finally:
        set_loader_workers(1)

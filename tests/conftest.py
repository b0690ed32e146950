"""Shared fixtures: the moto S3 server and the fault-injecting proxy (see _support/s3_server.py), a local Ray;
and every test's own cache directory, so remote stores' default node cache never writes into the home cache."""

import os
import tempfile

import pytest

from tests._support.ray_cluster import ray_cluster, ray_nodes, ray_session  # noqa: F401  (fixtures, registered by import)
from tests._support.s3_server import fault_proxy, s3  # noqa: F401

# collection and session fixtures (and processes they start) see a session-wide temporary cache;
# each test then gets one of its own (below), so no test is served blocks another test cached
os.environ["TOKENPORT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tokenport-test-cache-")
os.environ.pop("TOKENPORT_NODE_CACHE", None)


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """TOKENPORT_CACHE_DIR (the default node cache and object cache) in a fresh temporary directory."""
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))

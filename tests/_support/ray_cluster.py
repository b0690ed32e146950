"""A local Ray for the whole test session: started once (about 5-10 s), shut down at the end."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster needs no token
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()

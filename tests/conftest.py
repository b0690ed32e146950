"""Shared fixtures: the moto S3 server and the fault-injecting proxy (see s3_server.py), a local Ray."""

from ray_cluster import ray_session  # noqa: F401  (fixtures, registered by import)
from s3_server import fault_proxy, s3  # noqa: F401

"""Shared fixtures: the moto S3 server and the fault-injecting proxy (see _support/s3_server.py), a local Ray."""

from tests._support.ray_cluster import ray_session  # noqa: F401  (fixtures, registered by import)
from tests._support.s3_server import fault_proxy, s3  # noqa: F401

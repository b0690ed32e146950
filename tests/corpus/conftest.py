"""Fixtures of the corpus tests: an object-store output on the session's moto server."""

import pytest


@pytest.fixture
def s3_env(s3, monkeypatch, tmp_path):
    """s3:// goes to the session's moto server; the staging (cache) directory is tmp_path/cache."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3
    s3fs.S3FileSystem.clear_instance_cache()

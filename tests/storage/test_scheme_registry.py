"""The scheme registry against a shadow model: random register_scheme / unregister sequences, a
refused call changing nothing; and the loader-worker count storage plans a node cache's share by."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tokenport.errors import ConfigError
from tokenport.storage import ByteSource, FileInfo, Scheme, register_scheme, schemes, set_loader_workers
from tokenport.storage.access import scheme_for
from tokenport.storage.fetchers import NodeFetcher, loader_workers
from tokenport.storage.nodecache import NodeCache
from tokenport.storage.options import RemoteOptions
from tokenport.storage.remote import FSSPEC


class NoScheme(Scheme):
    """A backend that holds nothing: only its identity matters here."""

    def open(self, url: str, **options: Any) -> ByteSource:
        raise AssertionError("not opened in these tests")

    def find(self, url: str, **options: Any) -> list[FileInfo]:
        return []


NAMES = ["alpha", "beta", "gamma_2", "file", "", "s3://", "no way", "9lives"]


def test_register_scheme_matches_a_shadow_model_and_a_refusal_changes_nothing():
    rng = random.Random(27)
    before = dict(schemes.SCHEMES.items())
    model: dict[str, Scheme] = dict(before)
    pool = [NoScheme() for _ in range(3)]
    added: set[str] = set()
    try:
        for _ in range(400):
            name = rng.choice(NAMES)
            if rng.random() < 0.3 and name in added:
                del schemes.SCHEMES[name]
                del model[name]
                added.discard(name)
            else:
                scheme: Any = rng.choice([*pool, object(), "s3"])
                valid = name.isidentifier() and name != "file" and isinstance(scheme, Scheme)
                if valid and name not in model:
                    register_scheme(name, scheme)
                    model[name] = scheme
                    added.add(name)
                else:
                    with pytest.raises(ConfigError, match="register_scheme"):
                        register_scheme(name, scheme)
            assert dict(schemes.SCHEMES.items()) == model
            for key in NAMES[:3]:
                assert scheme_for(f"{key}://bucket/x") is model.get(key, FSSPEC)
    finally:
        for name in added:
            del schemes.SCHEMES[name]
    assert dict(schemes.SCHEMES.items()) == before


def test_the_loader_worker_count_shares_the_node_cache_budget_and_is_checked(tmp_path):
    fetcher = NodeFetcher(NodeCache(tmp_path, 1 << 20), "key")
    options = RemoteOptions(block_size=4096)
    try:
        assert loader_workers() == 1 and fetcher.ahead_bytes(options) == 1 << 20
        set_loader_workers(4)
        assert fetcher.ahead_bytes(options) == 1 << 18
        for bad in (0, -1, 2.5, True, "4"):
            with pytest.raises(ConfigError, match="loader workers"):
                set_loader_workers(bad)  # type: ignore[arg-type]
            assert loader_workers() == 4
    finally:
        set_loader_workers(1)


def test_storage_reads_no_worker_info_of_torch():
    import ast
    from pathlib import Path

    import tokenport.storage

    for path in Path(tokenport.storage.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        names = [n.module or "" for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names]
        assert "get_worker_info" not in text and '"torch' not in text, path.name
        assert not [name for name in names if name.split(".")[0] == "torch"], path.name

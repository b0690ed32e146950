"""`prepare` on a local Ray: one task per unit, the same output as the local executor."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.indexed import IndexedDataset

pytest.importorskip("ray")


def _store_bytes(result) -> list[bytes]:
    out = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            out += [ds[i].tobytes() for i in range(len(ds))]
    return out


def test_ray_executor_output_equals_local_with_cleaning_and_dedup(ray_session, tmp_path: pathlib.Path):
    paths = []
    rng = np.random.default_rng(0)
    vocabulary = [f"word{k}" for k in range(2000)]
    base = [f"Section {i}. The " + " and the ".join(rng.choice(vocabulary, 20)) + " of the agenda." for i in range(30)]
    for k in range(3):
        path = tmp_path / f"in{k}.jsonl"
        texts = base[k * 10 : (k + 1) * 10] + [base[k].upper(), "Call 555-123-4567 now, it is short."]
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        paths.append(str(path))
    steps = [
        {"step": "gopher_quality", "min_words": 10},
        {"step": "exact_dedup"},
        {"step": "minhash_dedup"},
        {"step": "pii"},
    ]
    local = prepare(PrepareConfig(paths, str(tmp_path / "local"), workers=2, steps=steps, unit_bytes=500))
    on_ray = prepare(PrepareConfig(paths, str(tmp_path / "ray"), steps=steps, unit_bytes=500, executor="ray"))
    assert _store_bytes(on_ray) == _store_bytes(local) and on_ray.documents == local.documents == 30
    assert on_ray.steps == local.steps
    assert on_ray.steps["1:exact_dedup"]["removed:duplicate"] == 3
    assert on_ray.steps["2:minhash_dedup"] == local.steps["2:minhash_dedup"]  # band pairs made by Ray tasks
    assert (tmp_path / "ray" / "provenance.npz").read_bytes() == (tmp_path / "local" / "provenance.npz").read_bytes()


def test_bad_executor_is_refused(tmp_path):
    with pytest.raises(tp.ConfigError, match="executor='spark'"):
        PrepareConfig(["x.jsonl"], str(tmp_path / "o"), executor="spark")


# -- an object-store output: no shared filesystem -----------------------------------------------


def _inputs(tmp_path: pathlib.Path) -> list[str]:
    """A gzip jsonl big enough to be cut into chunks and a plain one, with duplicates across them."""
    import gzip

    rng = np.random.default_rng(1)
    words = [f"w{k}" for k in range(500)]
    texts = [" ".join(rng.choice(words, 30)) for _ in range(400)]
    packed = tmp_path / "a.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode()))
    plain = tmp_path / "b.jsonl"
    plain.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:50] + ["a new one", "and another"]))
    return [str(packed), str(plain)]


def test_ray_prepares_into_an_object_store_without_a_shared_filesystem(ray_session, s3_env, tmp_path):
    inputs = _inputs(tmp_path)
    options = {"steps": [{"step": "exact_dedup"}], "unit_bytes": 8_000}
    local = prepare(PrepareConfig(inputs, str(tmp_path / "local"), workers=1, **options))
    url = f"s3://{s3_env.bucket}/ray-out"
    remote = prepare(PrepareConfig(inputs, url, executor="ray", **options))
    assert remote.units == local.units > 4 and remote.documents == local.documents == 402
    assert remote.parts == tuple(f"{url}/{p.rsplit('/', 1)[1]}" for p in local.parts)
    for prefix, local_prefix in zip(remote.parts, local.parts):
        key = prefix.split("/", 3)[3]
        for suffix in (".bin", ".idx", ".json"):
            body = s3_env.client.get_object(Bucket=s3_env.bucket, Key=key + suffix)["Body"].read()
            if suffix != ".json":
                assert body == pathlib.Path(local_prefix + suffix).read_bytes()
        with IndexedDataset(prefix) as ds, IndexedDataset(local_prefix) as expected:  # tokenport's remote reader
            assert [ds[i].tobytes() for i in range(len(ds))] == [expected[i].tobytes() for i in range(len(expected))]
    listed = s3_env.client.list_objects_v2(Bucket=s3_env.bucket, Prefix="ray-out/")["Contents"]
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed) == sorted(
        [f"part-{k:05d}{s}" for k in range(len(local.parts)) for s in (".bin", ".idx", ".json")]
        + ["provenance.npz", "tokenport.json"]
    )  # no journal left, no work files
    provenance = pathlib.Path(local.output, "provenance.npz").read_bytes()
    assert s3_env.client.get_object(Bucket=s3_env.bucket, Key="ray-out/provenance.npz")["Body"].read() == provenance
    assert not (tmp_path / "cache" / "prepare").exists() or not any((tmp_path / "cache" / "prepare").iterdir())
    again = prepare(PrepareConfig(inputs, url, executor="ray", **options))
    assert again.resumed_units == again.units and again.parts == remote.parts

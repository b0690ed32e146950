"""`prepare` into an object store (moto on 127.0.0.1): a reader never finds a half-uploaded output,
and a rerun finishes an interrupted upload or rolls back one of other settings."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests._support.s3_server import FaultProxy, MotoS3
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run import upload
from tokenport.errors import ConfigError, StorageError

pytest.importorskip("s3fs")


@pytest.fixture
def through_proxy(s3: MotoS3, fault_proxy: FaultProxy, monkeypatch, tmp_path) -> FaultProxy:
    """s3:// goes through the fault proxy; the staging directory is under tmp_path."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.endpoint_url)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    yield fault_proxy
    s3fs.S3FileSystem.clear_instance_cache()


def _inputs(tmp_path: pathlib.Path) -> list[str]:
    paths = []
    for k in range(3):
        path = tmp_path / f"in{k}.jsonl"
        path.write_text("".join(json.dumps({"text": f"document {i} of file {k}, " * 5}) + "\n" for i in range(40)))
        paths.append(str(path))
    return paths


def _keys(s3: MotoS3, prefix: str) -> list[str]:
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/").get("Contents", [])
    return sorted(o["Key"][len(prefix) + 1 :] for o in listed)


def _object(s3: MotoS3, key: str) -> bytes:
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def test_an_interrupted_upload_shows_no_manifest_and_a_rerun_finishes_it(s3, through_proxy, tmp_path):
    inputs = _inputs(tmp_path)
    local = prepare(PrepareConfig(inputs, str(tmp_path / "local"), workers=1))
    url = f"s3://{s3.bucket}/interrupted"
    through_proxy.inject("403", every=4, methods=("PUT",))  # the 4th PUT (a part's file) is refused
    with pytest.raises(StorageError, match="access denied"):
        prepare(PrepareConfig(inputs, url, workers=1))
    uploaded = _keys(s3, "interrupted")
    assert ".tokenport-upload.json" in uploaded and "tokenport.json" not in uploaded  # nothing names a part yet
    through_proxy.clear()
    finished = prepare(PrepareConfig(inputs, url, workers=1))
    assert finished.resumed_units == finished.units  # the work was kept; only the upload was finished
    # the rest, provenance.npz, the journal, the manifest
    assert through_proxy.count("PUT") == len(local.parts) * 3 + 3 - (len(uploaded) - 1)
    assert _keys(s3, "interrupted") == sorted(
        [f"part-{k:05d}.{s}" for k in range(len(local.parts)) for s in ("bin", "idx", "json")]
        + ["provenance.npz", "tokenport.json"]
    )
    for prefix in local.parts:
        name = prefix.rsplit("/", 1)[1]
        for suffix in (".bin", ".idx"):
            assert _object(s3, f"interrupted/{name}{suffix}") == pathlib.Path(prefix + suffix).read_bytes()


def test_an_upload_of_other_settings_is_rolled_back_and_a_finished_one_refused(s3, through_proxy, tmp_path):
    inputs = _inputs(tmp_path)
    s3.put(
        json.dumps({"fingerprint": "other", "files": {"part-00007.bin": [3, "0" * 32]}}).encode(),
        "rolled/.tokenport-upload.json",
    )
    s3.put(b"old", "rolled/part-00007.bin")
    url = f"s3://{s3.bucket}/rolled"
    result = prepare(PrepareConfig(inputs, url, workers=1))
    assert "part-00007.bin" not in _keys(s3, "rolled") and "tokenport.json" in _keys(s3, "rolled")
    assert result.documents == 120 and result.output == url
    with pytest.raises(ConfigError, match="rolled: output exists .*other settings"):
        prepare(PrepareConfig(inputs, url, workers=1, append_eod=False))


def test_a_prefix_holding_other_objects_is_refused_before_any_work(s3, through_proxy, tmp_path):
    s3.put(b"someone else's", "taken/notes.txt")
    with pytest.raises(ConfigError, match=r"taken: holds objects \(notes.txt\.\.\.\) and no prepare run"):
        prepare(PrepareConfig(_inputs(tmp_path), f"s3://{s3.bucket}/taken", workers=1))
    assert not (tmp_path / "cache").exists()


@pytest.fixture
def direct(s3: MotoS3, monkeypatch, tmp_path) -> MotoS3:
    """s3:// straight to moto; the staging directory is under tmp_path."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3
    s3fs.S3FileSystem.clear_instance_cache()


def _bucket(s3: MotoS3, prefix: str) -> dict[str, object]:
    """Every object under `prefix` by name: its bytes, or for JSON its data without the wall-clock fields
    (the creation time, the run's time by stage)."""
    objects: dict[str, object] = {}
    for name in _keys(s3, prefix):
        data = _object(s3, f"{prefix}/{name}")
        objects[name] = data
        if name.endswith(".json") and not name.startswith("."):
            objects[name] = {k: v for k, v in json.loads(data).items() if k not in ("created", "stages", "unit_stages")}
    return objects


def _journal(tmp_path: pathlib.Path) -> bytes:
    """An upload journal as the writer writes it, for a real prepared output."""
    local = prepare(PrepareConfig(_inputs(tmp_path)[:1], str(tmp_path / "journaled"), workers=1))
    return upload._dumps({"fingerprint": "f" * 64, "files": upload._listing(local.output)})


def test_a_corrupt_journal_is_refused_before_any_work(s3, direct, tmp_path):
    s3.put(b'{"fingerprint": "abc", "files": "train"}', "corrupt/.tokenport-upload.json")
    before = _bucket(s3, "corrupt")
    with pytest.raises(StorageError, match=r"corrupt/\.tokenport-upload\.json: .*`\$\.files`.*delete the prefix"):
        prepare(PrepareConfig(_inputs(tmp_path), f"s3://{s3.bucket}/corrupt", workers=1))
    assert not (tmp_path / "cache").exists()  # refused before the local prepare began
    assert _bucket(s3, "corrupt") == before


def test_mutated_journals_are_refused_or_read_as_written_and_change_nothing(s3, direct, tmp_path):
    import msgspec

    from tests._support.mutate import mutations
    from tokenport.errors import TokenportError

    url = f"s3://{s3.bucket}/fuzzed"
    refused = 0
    for label, data in mutations(_journal(tmp_path)):
        s3.put(data, "fuzzed/.tokenport-upload.json")
        before = _bucket(s3, "fuzzed")
        try:
            journal = upload.read_journal(url)
            assert upload.check_remote_output(url, "f" * 64) is None, label
        except TokenportError as error:
            refused += 1
            assert "fuzzed/.tokenport-upload.json: " in str(error), label
        else:  # still a journal the writer could have written: read back exactly
            assert journal is not None and json.loads(msgspec.json.encode(journal)) == json.loads(data), label
        assert _bucket(s3, "fuzzed") == before, label
        assert not (tmp_path / "cache").exists(), label
    assert refused > 50


def test_a_remote_manifest_that_is_not_one_is_refused_naming_its_field(s3, direct, tmp_path):
    s3.put(json.dumps({"fingerprint": "abc", "parts": [], "skipped": {}}).encode(), "nototals/tokenport.json")
    with pytest.raises(StorageError, match=r"nototals/tokenport\.json: .*`totals`.*delete it and run again"):
        prepare(PrepareConfig(_inputs(tmp_path), f"s3://{s3.bucket}/nototals", workers=1))


KILLED_CHILD = """
import json, sys
from tokenport.corpus import PrepareConfig, prepare
prepare(PrepareConfig(**json.loads(sys.argv[1])))
"""


def test_a_kill_at_every_upload_step_then_any_rerun_leaves_the_finished_upload_and_nothing_else(s3, direct, tmp_path):
    """Each iteration starts from a half upload of other settings (rolled back first) and kills the run
    after its N-th publication step (a deletion, the journal, each file, the manifest, the journal's
    removal); the next run, whatever its settings, finishes the upload's clean-up: the bucket holds what an
    uninterrupted run leaves and no journal, and the staging directory is gone."""
    import os
    import shutil
    import subprocess
    import sys

    stale = json.dumps({"fingerprint": "other", "files": {"part-00007.bin": [3, "0" * 32]}}).encode()
    config = {"inputs": _inputs(tmp_path)[:1], "output": f"s3://{s3.bucket}/killed", "workers": 1}
    staging = pathlib.Path(upload.staging_dir(config["output"]))

    def start() -> None:
        for name in _keys(s3, "killed"):
            s3.client.delete_object(Bucket=s3.bucket, Key=f"killed/{name}")
        s3.put(stale, "killed/.tokenport-upload.json")
        s3.put(b"old", "killed/part-00007.bin")

    start()
    prepare(PrepareConfig(**config))
    reference = _bucket(s3, "killed")
    assert sorted(reference) == [
        "part-00000.bin",
        "part-00000.idx",
        "part-00000.json",
        "provenance.npz",
        "tokenport.json",
    ]
    assert not staging.exists()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    point = 0
    while True:
        point += 1
        start()
        child = subprocess.run(
            [sys.executable, "-c", KILLED_CHILD, json.dumps(config)], env={**env, upload.KILL_AT: str(point)}
        )
        if child.returncode == 0:
            break  # the upload passed fewer steps than this: every one has been a kill point
        assert child.returncode == 137, f"kill point {point}: exit {child.returncode}"
        left = _keys(s3, "killed")
        if "tokenport.json" in left:  # published: whole, whatever the clean-up left
            assert set(reference) <= set(left), f"kill point {point}"
            with pytest.raises(ConfigError, match="other settings"):  # a refused toucher cleans up too
                prepare(PrepareConfig(**config, append_eod=False))
            assert _bucket(s3, "killed") == reference and not staging.exists(), f"kill point {point}"
        assert staging.exists() or "tokenport.json" in left, f"kill point {point}: the staged work was lost"
        prepare(PrepareConfig(**config))
        assert _bucket(s3, "killed") == reference, f"after a kill at upload step {point}, the rerun left another bucket"
        assert not staging.exists(), f"after a kill at upload step {point}, the staging directory was left"
        shutil.rmtree(staging, ignore_errors=True)
    # the stale file's deletion, journal, 4 files (a part's 3, provenance.npz), manifest, journal removal
    assert point == 1 + 1 + 4 + 1 + 1 + 1


def test_a_rerun_of_a_finished_upload_removes_a_staging_directory_left_behind(s3, direct, tmp_path):
    config = PrepareConfig(_inputs(tmp_path)[:1], f"s3://{s3.bucket}/done", workers=1)
    prepare(config)
    staging = pathlib.Path(upload.staging_dir(config.output))
    (staging / ".work").mkdir(parents=True)  # as a kill after the journal's removal leaves it
    (staging / "part-00000.bin").write_bytes(b"staged")
    assert prepare(config).documents == 40
    assert not staging.exists()


def test_mutated_remote_manifests_are_refused_or_read_and_change_nothing(s3, direct, tmp_path):
    """A rerun reads a finished upload's tokenport.json for its result: every mutation of it is a
    TokenportError naming it (a ConfigError when the fingerprint no longer matches) or a result whose
    totals are the (still valid) manifest's; never another exception, never a change to the bucket."""
    from tests._support.mutate import mutations
    from tokenport.corpus.run.pipeline import _result
    from tokenport.errors import TokenportError

    config = PrepareConfig(_inputs(tmp_path)[:1], f"s3://{s3.bucket}/manifested", workers=1)
    prepare(config)
    original = _object(s3, "manifested/tokenport.json")
    fingerprint = json.loads(original)["fingerprint"]
    refused = 0
    passed_through = ("$['config']", "$['tokenizer']", "$['step_costs']")  # the dataset's own: a sample of them
    chosen = list(mutations(original))
    chosen = [
        (label, data) for k, (label, data) in enumerate(chosen) if not label.startswith(passed_through) or k % 10 == 0
    ]
    for label, data in chosen:
        s3.put(data, "manifested/tokenport.json")
        before = _bucket_bytes(s3, "manifested")
        try:  # what prepare does with a finished upload, without loading the tokenizer each time
            manifest = upload.check_remote_output(config.output, fingerprint)
            assert manifest is not None, label
            result = _result(config.output, manifest, 1, 0.0, -1)
        except TokenportError as error:
            refused += 1
            assert "manifested" in str(error), label
        else:
            totals = json.loads(data)["totals"]
            assert (result.documents, result.tokens, result.units) == (
                totals["documents"],
                totals["tokens"],
                totals["units"],
            ), label
        assert _bucket_bytes(s3, "manifested") == before, label
        assert not pathlib.Path(upload.staging_dir(config.output)).exists(), label
    assert refused > 50


def _bucket_bytes(s3: MotoS3, prefix: str) -> dict[str, str]:
    """Every object under `prefix` by name: its ETag (the MD5 of its bytes), from one listing."""
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/").get("Contents", [])
    return {o["Key"]: o["ETag"] for o in listed}


def test_random_upload_sequences_match_a_model_and_refusals_change_nothing(s3, through_proxy, tmp_path):
    """Seeded random calls on one prefix (finished runs, interrupted uploads, runs of other settings, a
    corrupt journal, a killed run's leftovers) against a model: finished (the bucket is the uninterrupted
    upload, no journal, no staging directory) or pending (a journal, no manifest, the staged output kept);
    every refused call leaves the bucket and the staging directory as they were."""
    import random
    import shutil

    from tokenport.errors import TokenportError

    inputs = _inputs(tmp_path)[:1]
    url = f"s3://{s3.bucket}/modelled"
    settings = PrepareConfig(inputs, url, workers=1)
    other = PrepareConfig(inputs, url, workers=1, append_eod=False)
    staging = pathlib.Path(upload.staging_dir(url))
    prepare(settings)
    reference = _bucket(s3, "modelled")
    for name in _keys(s3, "modelled"):
        s3.client.delete_object(Bucket=s3.bucket, Key=f"modelled/{name}")

    def staged() -> dict[str, bytes]:
        return {str(p.relative_to(staging)): p.read_bytes() for p in staging.rglob("*") if p.is_file()}

    rng = random.Random(7)
    finished = pending = False
    seen = []
    for step in range(30):
        ops = ["run", "interrupt"] + (["other", "corrupt"] * pending) + (["other", "leftover", "reset"] * finished)
        op = rng.choice(ops)
        seen.append((op, finished, pending))
        before, before_staged = _bucket_bytes(s3, "modelled"), staged()
        refused: type[TokenportError] | None = None
        if op == "run":
            prepare(settings)
            finished, pending = True, False
        elif op == "interrupt":
            through_proxy.inject("403", every=rng.randint(2, 3), methods=("PUT",))
            try:
                prepare(settings)
                assert finished, f"step {step}: an upload with refused PUTs finished"
            except StorageError:
                assert not finished, f"step {step}"
                pending = True
            finally:
                through_proxy.clear()
        elif op == "other":
            with pytest.raises(ConfigError, match="other settings"):
                prepare(other)
            refused = ConfigError
        elif op == "corrupt":
            journal = _object(s3, "modelled/.tokenport-upload.json")
            s3.put(journal[:-5], "modelled/.tokenport-upload.json")
            before = _bucket_bytes(s3, "modelled")
            with pytest.raises(StorageError, match=r"modelled/\.tokenport-upload\.json: not valid JSON"):
                prepare(settings)
            refused = StorageError
            assert _bucket_bytes(s3, "modelled") == before and staged() == before_staged, f"step {step}"
            s3.put(journal, "modelled/.tokenport-upload.json")
            before = _bucket_bytes(s3, "modelled")
        elif op == "reset":  # the user deletes the output
            for name in _keys(s3, "modelled"):
                s3.client.delete_object(Bucket=s3.bucket, Key=f"modelled/{name}")
            finished = False
            continue
        else:  # leftover: a run killed after publishing the manifest, before its clean-up
            s3.put(
                json.dumps({"fingerprint": reference["tokenport.json"]["fingerprint"], "files": {}}).encode(),
                "modelled/.tokenport-upload.json",
            )
            (staging / ".work").mkdir(parents=True, exist_ok=True)
            continue  # the next call, whatever it is, finishes the clean-up
        if refused is not None and pending:
            assert _bucket_bytes(s3, "modelled") == before, f"step {step}: refused {op} changed the bucket"
            assert staged() == before_staged, f"step {step}: refused {op} changed the staging directory"
        if finished:
            assert _bucket(s3, "modelled") == reference, f"step {step} ({op})"
            assert not staging.exists(), f"step {step} ({op}): the staging directory was left"
        elif pending:
            left = _keys(s3, "modelled")
            assert ".tokenport-upload.json" in left and "tokenport.json" not in left, f"step {step} ({op})"
            assert (staging / "tokenport.json").exists(), f"step {step} ({op}): the staged output was lost"
    assert {op for op, _, _ in seen} == {"run", "interrupt", "other", "corrupt", "leftover", "reset"}
    assert {("other", True, False), ("other", False, True), ("interrupt", False, False)} <= set(seen)
    shutil.rmtree(staging, ignore_errors=True)


def test_a_kill_at_every_publication_step_of_a_run_into_s3_then_a_rerun_leaves_the_finished_upload(
    s3, direct, tmp_path
):
    """prepare's own kill points (state.KILL_AT) count the staging directory's renames, then the upload's steps."""
    import os
    import subprocess
    import sys

    from tokenport.corpus.run.state import KILL_AT

    config = {"inputs": _inputs(tmp_path)[:1], "output": f"s3://{s3.bucket}/allkills", "workers": 1}
    staging = pathlib.Path(upload.staging_dir(config["output"]))
    prepare(PrepareConfig(**config))
    reference = _bucket(s3, "allkills")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    point = 0
    while True:
        point += 1
        for name in _keys(s3, "allkills"):
            s3.client.delete_object(Bucket=s3.bucket, Key=f"allkills/{name}")
        child = subprocess.run(
            [sys.executable, "-c", KILLED_CHILD, json.dumps(config)], env={**env, KILL_AT: str(point)}
        )
        if child.returncode == 0:
            break
        assert child.returncode == 137, f"kill point {point}: exit {child.returncode}"
        prepare(PrepareConfig(**config))
        assert _bucket(s3, "allkills") == reference, f"after a kill at step {point}, the rerun left another bucket"
        assert not staging.exists(), f"after a kill at step {point}, the staging directory was left"
    assert point > 6 + 5  # the upload's 5 steps after the staging directory's renames


def test_overwrite_replaces_a_finished_remote_output_of_other_inputs_or_settings(tmp_path, monkeypatch):
    import fsspec

    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / "cache"))
    inputs, url = _inputs(tmp_path), "memory://overwritten/x"
    fs = fsspec.filesystem("memory")

    def names() -> list[str]:
        return sorted(path.rsplit("/", 1)[1] for path in fs.find("/overwritten/x"))

    try:
        assert len(prepare(PrepareConfig(inputs, url, workers=1)).parts) == 3
        pathlib.Path(inputs[0]).write_text(json.dumps({"text": "another document"}) + "\n")
        with pytest.raises(ConfigError, match=r"holds a finished prepare run, but .*; pass overwrite=True \(--force\)"):
            prepare(PrepareConfig(inputs, url, workers=1))
        assert prepare(PrepareConfig(inputs, url, workers=1), overwrite=True).documents == 81
        assert prepare(PrepareConfig(inputs, url, workers=1)).documents == 81  # finished, with the new input
        with pytest.raises(ConfigError, match=r"other settings\); choose another URL, or pass overwrite=True"):
            prepare(PrepareConfig(inputs[1:2], url, workers=1, append_eod=False))
        local = prepare(PrepareConfig(inputs[1:2], str(tmp_path / "local"), workers=1, append_eod=False))
        replaced = prepare(PrepareConfig(inputs[1:2], url, workers=1, append_eod=False), overwrite=True)
        assert replaced.documents == 40 and replaced.parts == (f"{url}/part-00000",)
        assert names() == [  # 2 parts gone
            "part-00000.bin",
            "part-00000.idx",
            "part-00000.json",
            "provenance.npz",
            "tokenport.json",
        ]
        assert fs.cat("/overwritten/x/part-00000.bin") == pathlib.Path(local.parts[0] + ".bin").read_bytes()
    finally:
        fs.rm("/overwritten", recursive=True)


def test_a_kill_at_every_step_of_an_overwrite_leaves_the_old_run_or_one_the_rerun_replaces(s3, direct, tmp_path):
    """The old finished run is withdrawn (journal, manifest, objects, journal), then the new one uploaded:
    killed after any step, the prefix shows the old run whole or no manifest, and a rerun with overwrite
    leaves exactly what an uninterrupted one does."""
    import os
    import subprocess
    import sys

    old_inputs, new_inputs = _inputs(tmp_path)[:1], _inputs(tmp_path)[1:2]
    config = {"inputs": new_inputs, "output": f"s3://{s3.bucket}/over", "workers": 1}

    def start() -> None:
        for name in _keys(s3, "over"):
            s3.client.delete_object(Bucket=s3.bucket, Key=f"over/{name}")
        for name, data in old.items():
            s3.put(data, f"over/{name}")

    prepare(PrepareConfig(old_inputs, config["output"], workers=1))
    old = {name: _object(s3, f"over/{name}") for name in _keys(s3, "over")}
    prepare(PrepareConfig(**config), overwrite=True)
    reference = _bucket(s3, "over")
    assert reference != _bucket_of(old) and sorted(reference) == sorted(old)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    point = 0
    while True:
        point += 1
        start()
        child = subprocess.run(
            [sys.executable, "-c", OVERWRITING_CHILD, json.dumps(config)], env={**env, upload.KILL_AT: str(point)}
        )
        if child.returncode == 0:
            break
        assert child.returncode == 137, f"kill point {point}: exit {child.returncode}"
        left = _keys(s3, "over")
        if "tokenport.json" in left:  # published: the old run whole, or the new one
            shown = {name: _object(s3, f"over/{name}") for name in left if name != ".tokenport-upload.json"}
            assert shown == old or _bucket(s3, "over").items() >= reference.items(), f"kill point {point}"
        prepare(PrepareConfig(**config), overwrite=True)
        assert _bucket(s3, "over") == reference, f"after a kill at step {point}, the rerun left another bucket"
    # withdraw: journal, manifest, 4 objects (a part's 3, provenance.npz), journal; upload: journal, 4, manifest, end
    assert point == 1 + 1 + 4 + 1 + (1 + 4 + 1 + 1) + 1


OVERWRITING_CHILD = """
import json, sys
from tokenport.corpus import PrepareConfig, prepare
prepare(PrepareConfig(**json.loads(sys.argv[1])), overwrite=True)
"""


def _bucket_of(objects: dict[str, bytes]) -> dict[str, object]:
    """``_bucket``'s view of objects held in memory."""
    return {
        name: {k: v for k, v in json.loads(data).items() if k not in ("created", "stages", "unit_stages")}
        if name.endswith(".json") and not name.startswith(".")
        else data
        for name, data in objects.items()
    }
